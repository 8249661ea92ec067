#!/usr/bin/env python3
"""Writes tests/data/vocab/alice-<vocab>.ids.gz: the ids the Hugging Face `tokenizers` package
gives for the whole of tests/data/books/pg11-alice-in-wonderland.txt with the Llama 3 and
Qwen 2 vocabularies of tests/data/vocab/ (vocabulary and merges read from the GGUF files with
the `gguf` package, the pre-tokenizer expression from the models' tokenizer.json). tst_bpe
requires the engine to give the same ids.

Fixture generation only: needs `pip install gguf tokenizers`; the build and tests do not.
"""
import gzip
import os
import tempfile

import gguf
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "tests", "data", "vocab")
BOOK = os.path.join(ROOT, "tests", "data", "books", "pg11-alice-in-wonderland.txt")
SPLIT = {
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def hf_tokenizer(name):
    with gzip.open(os.path.join(VOCAB, f"ggml-vocab-{name}.gguf.gz")) as f, tempfile.NamedTemporaryFile() as tmp:
        tmp.write(f.read())
        tmp.flush()
        r = gguf.GGUFReader(tmp.name)

        def strings(key):
            field = r.fields[key]
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

        vocab = {t: i for i, t in enumerate(strings("tokenizer.ggml.tokens"))}
        merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=(name == "llama-bpe")))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT[name]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    return tok


def main():
    with open(BOOK, encoding="utf-8", newline="") as f:
        text = f.read()
    for name in SPLIT:
        ids = hf_tokenizer(name).encode(text, add_special_tokens=False).ids
        out = os.path.join(VOCAB, f"alice-{name}.ids.gz")
        with gzip.GzipFile(out, "wb", mtime=0) as f:
            f.write((" ".join(map(str, ids)) + "\n").encode())
        print(f"{out}: {len(ids)} ids")


if __name__ == "__main__":
    main()
