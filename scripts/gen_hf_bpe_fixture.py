#!/usr/bin/env python3
"""Builds tests/data/vocab/hf-bpe/: a small byte-level BPE tokenizer.json trained with the
Hugging Face `tokenizers` package (Llama 3's split expression, digits isolated, byte-level
alphabet, special and added tokens), its tokenizer_config.json and generation_config.json,
and expected.json: the ids `tokenizers` gives for a varied corpus (scripts, emoji, whitespace
runs, digits, code, special tokens). The engine must reproduce them exactly (tst_bpe).

Fixture generation only: needs `pip install tokenizers`; the build and tests do not.
Usage: scripts/gen_hf_bpe_fixture.py [--out tests/data/vocab/hf-bpe]
"""
import argparse
import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIAL = ["<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]

EXTRA_TRAINING = [
    "Grüße aus München! Ça va? Ñandú, façade, naïve, Øresund, Łódź.",
    "Привет, как дела? Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε. 你好，世界！こんにちは世界。안녕하세요 세계.",
    "مرحبا بالعالم. שלום עולם. नमस्ते दुनिया. สวัสดีชาวโลก",
    "def main(argv):\n    for i in range(10):\n        print(f\"{i:>4}\", argv[i % 3])\n    return 0\n",
    "int x = 0x7fff; if (a != b && c <= 42) { y += 3.14159; } // done",
    "Prices: $1,234.56 or 7890 EUR on 2024-03-15 at 09:30:00.",
]

CORPUS = [
    "Hello world", " Hello world", "Hello World!", "hello, world... and goodbye", "",
    " ", "  ", "\t", "\n", "\n\n\n", "\t\n \r\n", "   leading and trailing   ",
    "a  b   c    d     e      f", "line one\nline two\r\nline three\n\n\nend",
    "1", "12", "123", "1234", "12345678901234567890", "3.14159 2,718 1e-10 0x1F",
    "I'm you're we've they'll she'd it's I'M YOU'RE", "don't DON'T can't",
    "Grüße aus München, naïve façade", "Привет мир", "Γειά σου Κόσμε", "你好，世界！", "こんにちは世界",
    "안녕하세요", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "🦙 llamas 🦙🦙 and 😀😃😄 emoji 👩‍👩‍👧‍👦 family 🇯🇵 flag",
    "def f(x):\n    return x ** 2  # square\n", "    indented\n\tand tabbed\n",
    "if (a<b && c>=d) { return a->b[0]; }", "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|bos|>text<|eos|>", "<|im_end|><|im_start|>", "a<|im_start|>b<|im_end|>c", "<|im_start", "<|im_end|",
    "before <user_tag> after", "<user_tag><user_tag>", "x <|sep|>   y", "x   <|sep|> y",
    "Ünïcödé ẞ ǅ ﬁ ½ Ⅻ ① ℃ №", "zero\u200bwidth and\u00a0nbsp and\u3000ideographic space",
    "MixedCASE camelCase snake_case kebab-case SCREAMING_CASE", "!!!??? ... --- *** ###",
    "a" * 300, " " * 40 + "x", "ab" * 120, "9" * 50,
]


def build(out_dir):
    texts = []
    for name in ("pg11-alice-in-wonderland.txt",):
        with open(os.path.join(ROOT, "tests", "data", "books", name), encoding="utf-8") as f:
            texts.append(f.read()[:120000])
    texts += EXTRA_TRAINING * 20

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken("<user_tag>", special=False, normalized=False)])
    tok.add_special_tokens([AddedToken("<|sep|>", special=True, lstrip=True, rstrip=True, normalized=False)])
    bos = tok.token_to_id("<|bos|>")
    tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B",
                                                       special_tokens=[("<|bos|>", bos)])

    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|bos|>", "eos_token": {"content": "<|im_end|>", "special": True}}, f, indent=1)
    end_ids = [tok.token_to_id("<|eos|>"), tok.token_to_id("<|im_end|>")]
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": end_ids}, f, indent=1)

    cases = []
    for t in CORPUS:
        ids = tok.encode(t, add_special_tokens=False).ids
        # Decoded with the special tokens left out, as the engine's decode renders them.
        cases.append({"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
    expected = {
        "source": "scripts/gen_hf_bpe_fixture.py with tokenizers " + __import__("tokenizers").__version__,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "bos_id": bos,
        "eos_id": tok.token_to_id("<|im_end|>"),
        "end_ids": end_ids,
        "add_bos": tok.encode("x").ids[0] == bos,
        "cases": cases,
    }
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
    print(f"{out_dir}: {expected['vocab_size']} tokens, {len(cases)} cases")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "vocab", "hf-bpe"))
    build(ap.parse_args().out)
