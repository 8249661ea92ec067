#!/usr/bin/env python3
"""Tiny random-weight models of each architecture family, made and run with Hugging Face
transformers, as the outside truth for tests/engine/tst_architectures.cpp.

For every family it writes, under tests/data/arch/<family>/:
  hf/            config.json (the pre-5.x layout people download: rope_theta, rope_scaling,
                 rope_local_base_freq), model.safetensors (F32), tokenizer.model
  model.gguf     the same weights in llama.cpp's convert naming (written with the gguf
                 package: llama's q/k rows permuted to the interleaved layout, Gemma's norms
                 stored as 1 + w, Phi-3's fused matrices kept fused, LongRoPE factors and
                 Llama 3 rope_freqs as tensors)
  reference.json the token sequences, the transformers logits of every position (float32,
                 hex of the little-endian bytes) and 32-token greedy continuations

Only needed to regenerate the fixtures: python3 scripts/gen-arch-fixtures.py
(torch, transformers 5.x, gguf, sentencepiece, numpy; CPU; fixed seeds).
"""
import json
import math
import os
import shutil
import sys

import numpy as np
import torch

import gguf
import sentencepiece as spm
import transformers
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "arch")
VOCAB = 128
GEN_TOKENS = 32


def make_tokenizer(out_dir):
    """A small sentencepiece BPE vocabulary; the tests drive the models with token ids."""
    corpus = os.path.join(out_dir, "corpus.txt")
    words = ["the", "cat", "sat", "on", "mat", "long", "context", "model", "rope", "scale",
             "window", "token", "attention", "head", "layer", "norm", "gate", "value", "key"]
    rng = np.random.default_rng(7)
    with open(corpus, "w") as f:
        for _ in range(400):
            f.write(" ".join(rng.choice(words, 8)) + "\n")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(out_dir, "tok"), vocab_size=VOCAB,
                                   model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0,
                                   pad_id=-1, minloglevel=2)
    os.remove(corpus)
    return os.path.join(out_dir, "tok.model")


def vocab_of(sp_model):
    sp = spm.SentencePieceProcessor(model_file=sp_model)
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        else:
            types.append(gguf.TokenType.NORMAL)
    return tokens, scores, types


# ---- the families -----------------------------------------------------------------------------
# Each: the transformers config (new-style kwargs), the legacy config.json keys, the GGUF
# architecture and its family-specific keys. Shapes: GQA everywhere, head size != width /
# heads where the family allows it, a sliding window (8) shorter than the test sequence (40),
# soft-capping that bites, LongRoPE beyond its original context (32).
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=128, bos_token_id=1,
              eos_token_id=2, pad_token_id=None, initializer_range=0.25)

FAMILIES = {
    "llama": dict(
        cls="LlamaForCausalLM", cfg="LlamaConfig", arch="llama",
        config=dict(num_hidden_layers=2, head_dim=16, tie_word_embeddings=False),
        rope=dict(rope_theta=10000.0,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position_embeddings=32))),
    "qwen2": dict(
        cls="Qwen2ForCausalLM", cfg="Qwen2Config", arch="qwen2",
        config=dict(num_hidden_layers=2, tie_word_embeddings=True),
        rope=dict(rope_theta=1000000.0,
                  rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32))),
    "qwen3": dict(
        cls="Qwen3ForCausalLM", cfg="Qwen3Config", arch="qwen3",
        config=dict(num_hidden_layers=2, head_dim=16, tie_word_embeddings=True),
        rope=dict(rope_theta=1000000.0, rope_scaling=None)),
    "gemma2": dict(
        cls="Gemma2ForCausalLM", cfg="Gemma2Config", arch="gemma2",
        config=dict(num_hidden_layers=4, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                    attn_logit_softcapping=5.0, final_logit_softcapping=3.0, hidden_activation="gelu_pytorch_tanh",
                    tie_word_embeddings=True),
        rope=dict(rope_theta=10000.0, rope_scaling=None)),
    "gemma3": dict(
        cls="Gemma3ForCausalLM", cfg="Gemma3TextConfig", arch="gemma3",
        config=dict(num_hidden_layers=6, head_dim=16, num_key_value_heads=1, query_pre_attn_scalar=16,
                    sliding_window=8, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True),
        rope=dict(rope_theta=1000000.0, rope_local_base_freq=10000.0,
                  rope_scaling=dict(rope_type="linear", factor=2.0))),
    "phi3": dict(
        cls="Phi3ForCausalLM", cfg="Phi3Config", arch="phi3",
        config=dict(num_hidden_layers=2, sliding_window=24, tie_word_embeddings=False),
        rope=dict(rope_theta=10000.0,
                  original_max_position_embeddings=32,
                  rope_scaling=dict(rope_type="longrope",
                                    short_factor=[1.0, 1.3, 2.2, 3.5],
                                    long_factor=[1.0, 2.5, 6.0, 16.0]))),
}


def legacy_config(model_dir, fam):
    """Rewrites config.json in the layout of the checkpoints people download (transformers 4.x)."""
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.pop("rope_parameters", None)
    rope = fam["rope"]
    cfg["rope_theta"] = rope["rope_theta"]
    if "rope_local_base_freq" in rope:
        cfg["rope_local_base_freq"] = rope["rope_local_base_freq"]
    if "original_max_position_embeddings" in rope:
        cfg["original_max_position_embeddings"] = rope["original_max_position_embeddings"]
    scaling = rope["rope_scaling"]
    if scaling is not None:
        scaling = dict(scaling)
        scaling["type"] = scaling["rope_type"]
    cfg["rope_scaling"] = scaling
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def bite(model, name):
    """Scales weights so that the soft-capping and the sliding window matter."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if name == "gemma2" and (n.endswith("q_proj.weight") or n.endswith("k_proj.weight")):
                p.mul_(4.0)  # attention scores well past the cap of 5
            if n.endswith("norm.weight"):
                p.copy_(torch.randn_like(p) * 0.3 + (0.0 if name.startswith("gemma") else 1.0))
            if n.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.5)
        if name == "gemma2":
            model.lm_head.weight.mul_(1.0)  # tied: the embedding
        if name.startswith("gemma"):
            # Embeddings are scaled by sqrt(width) and the final cap is 3: logits far past it.
            model.model.embed_tokens.weight.mul_(1.0)


def hf_permute(w, n_head):
    """llama.cpp's LlamaModel.permute: rotate-half rows to interleaved pairs."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def llama3_factors(rs, head_dim, base):
    inv = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    factor, lo, hi, orig = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
        rs["original_max_position_embeddings"]
    low_wl, high_wl = orig / lo, orig / hi
    out = []
    for f in inv:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (orig / wl - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path, name, fam, cfg, state, sp_model):
    arch = fam["arch"]
    w = gguf.GGUFWriter(path, arch)
    a = arch + "."
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rope = fam["rope"]
    w.add_name(f"tiny-{name}")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    rs = rope["rope_scaling"]
    if arch == "qwen2" and rs:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rs["factor"])
        w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        w.add_sliding_window(cfg["sliding_window"])
    if arch == "gemma3":
        w.add_sliding_window(cfg["sliding_window"])
        w.add_rope_freq_base_swa(rope["rope_local_base_freq"])
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rs["factor"])
    if arch == "phi3":
        orig = rope["original_max_position_embeddings"]
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_sliding_window(cfg["sliding_window"])
        scale = cfg["max_position_embeddings"] / orig
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)))

    tokens, scores, types = vocab_of(sp_model)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_space_prefix(arch not in ("gemma2", "gemma3"))

    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg["num_hidden_layers"])
    for hf_name, t in state.items():
        if hf_name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        data = t.detach().to(torch.float32).numpy()
        if arch == "llama" and hf_name.endswith("q_proj.weight"):
            data = hf_permute(data, cfg["num_attention_heads"])
        if arch == "llama" and hf_name.endswith("k_proj.weight"):
            data = hf_permute(data, cfg["num_key_value_heads"])
        if arch.startswith("gemma") and hf_name.endswith("norm.weight"):
            data = data + 1.0
        new = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise SystemExit(f"{name}: no GGUF name for {hf_name}")
        w.add_tensor(new, np.ascontiguousarray(data))
    if arch == "llama" and rs:
        w.add_tensor("rope_freqs.weight", llama3_factors(rs, hd, rope["rope_theta"]))
    if arch == "phi3":
        w.add_tensor("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


BITE = {
    "gemma2": [dict(final_logit_softcapping=None), dict(attn_logit_softcapping=None), dict(sliding_window=4096)],
    "gemma3": [dict(sliding_window=4096)],
    "phi3": [dict(sliding_window=4096)],
}


def check_features_bite(fam, hf, seq, ref_model):
    """Each feature the fixture is meant to exercise changes the logits when switched off."""
    with torch.no_grad():
        base = ref_model(torch.tensor([seq])).logits[0]
        for override in BITE.get(fam["arch"], []):
            other = getattr(transformers, fam["cls"]).from_pretrained(hf, torch_dtype=torch.float32, **override).eval()
            diff = float((other(torch.tensor([seq])).logits[0] - base).abs().max())
            print("   ", fam["arch"], override, "changes the logits by", round(diff, 4))
            if diff < 1e-2:
                raise SystemExit(f"{fam['arch']}: {override} does not change the logits; the fixture does not exercise it")


def hexf(a):
    return np.ascontiguousarray(a, dtype="<f4").tobytes().hex()


def main():
    torch.manual_seed(0)
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    sp_model = make_tokenizer(ROOT)
    rng = np.random.default_rng(17)
    seq_long = [1] + rng.integers(3, VOCAB, 39).tolist()   # 40: past the window and LongRoPE's 32
    seq_short = [1] + rng.integers(3, VOCAB, 11).tolist()  # 12: inside every original context
    for name, fam in FAMILIES.items():
        torch.manual_seed(1234)
        cfg_kwargs = dict(COMMON)
        cfg_kwargs.update(fam["config"])
        config = getattr(transformers, fam["cfg"])(**cfg_kwargs)
        model = getattr(transformers, fam["cls"])(config).eval()
        bite(model, name)
        out = os.path.join(ROOT, name)
        hf = os.path.join(out, "hf")
        os.makedirs(hf)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(hf)
        legacy_config(hf, fam)
        shutil.copy(sp_model, os.path.join(hf, "tokenizer.model"))
        # The reference runs the model as transformers reads it back from the directory.
        ref_model = getattr(transformers, fam["cls"]).from_pretrained(hf, torch_dtype=torch.float32).eval()
        cfg = json.load(open(os.path.join(hf, "config.json")))
        write_gguf(os.path.join(out, "model.gguf"), name, fam, cfg,
                   {k: v for k, v in ref_model.state_dict().items()}, sp_model)
        ref = dict(family=name, transformers=transformers.__version__, n_vocab=VOCAB, sequences=[])
        with torch.no_grad():
            for seq in (seq_long, seq_short):
                logits = ref_model(torch.tensor([seq])).logits[0].float().numpy()
                top2 = np.sort(logits, axis=-1)[:, -2:]
                ref["sequences"].append(dict(tokens=seq, logits=hexf(logits),
                                             min_top2_margin=float((top2[:, 1] - top2[:, 0]).min())))
            gen = ref_model.generate(torch.tensor([seq_short]), max_new_tokens=GEN_TOKENS, do_sample=False,
                                     min_new_tokens=GEN_TOKENS, eos_token_id=None, pad_token_id=0)
            cont = gen[0, len(seq_short):].tolist()
        ref["greedy"] = dict(prompt=seq_short, continuation=cont)
        check_features_bite(fam, hf, seq_long, ref_model)
        with open(os.path.join(out, "reference.json"), "w") as f:
            json.dump(ref, f)
        print(name, "margins", [round(s["min_top2_margin"], 4) for s in ref["sequences"]], "greedy", cont[:8])
    os.remove(sp_model)
    os.remove(os.path.join(ROOT, "tok.vocab"))


if __name__ == "__main__":
    main()
