#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses, tests/fuzz/corpus/<name>/: small valid
inputs of every format (a tiny LLaMA as GGUF and safetensors with the stories260K 512-token
vocabulary, Hugging Face configs, the stories260K sentencepiece model, saved conversations,
runs and settings), from which libFuzzer mutates. GGUF files are written with the gguf
package (llama.cpp's writer), safetensors by hand from its specification.

    scripts/gen_fuzz_corpus.py [--root DIR]
"""

import argparse
import json
import os
import struct

import numpy as np
import gguf

# The tiny model of tests/fuzz/support.cpp: one layer, width 8, two heads of 4, one KV head.
N_VOCAB, N_EMBD, N_FF, N_HEAD, N_HEAD_KV, N_CTX = 512, 8, 16, 2, 1, 64
HEAD = N_EMBD // N_HEAD


def tiny_weights():
    """(GGUF name, Hugging Face name, array in PyTorch [out, in] order), deterministic."""
    rng = np.random.default_rng(16)
    def m(rows, cols=None):
        shape = (rows,) if cols is None else (rows, cols)
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)
    kv = N_HEAD_KV * HEAD
    return [
        ("token_embd.weight", "model.embed_tokens.weight", m(N_VOCAB, N_EMBD)),
        ("output_norm.weight", "model.norm.weight", np.ones(N_EMBD, np.float32)),
        ("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight", np.ones(N_EMBD, np.float32)),
        ("blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight", np.ones(N_EMBD, np.float32)),
        ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", m(N_EMBD, N_EMBD)),
        ("blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight", m(kv, N_EMBD)),
        ("blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight", m(kv, N_EMBD)),
        ("blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight", m(N_EMBD, N_EMBD)),
        ("blk.0.ffn_gate.weight", "model.layers.0.mlp.gate_proj.weight", m(N_FF, N_EMBD)),
        ("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight", m(N_FF, N_EMBD)),
        ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", m(N_EMBD, N_FF)),
    ]


def copy_tokenizer(reader, writer):
    """The tokenizer.* metadata of a GGUF file, as it is."""
    f = reader.fields
    writer.add_tokenizer_model(bytes(f["tokenizer.ggml.model"].parts[-1]).decode())
    writer.add_token_list([bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
                           for i in f["tokenizer.ggml.tokens"].data])
    writer.add_token_scores([float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data])
    writer.add_token_types([int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data])
    writer.add_bos_token_id(int(f["tokenizer.ggml.bos_token_id"].parts[-1][0]))
    writer.add_eos_token_id(int(f["tokenizer.ggml.eos_token_id"].parts[-1][0]))
    writer.add_unk_token_id(int(f["tokenizer.ggml.unknown_token_id"].parts[-1][0]))
    writer.add_add_bos_token(True)


def write_gguf(path, vocab_reader, tensors_dtype=None, extra=None):
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny")
    if tensors_dtype is not None:
        w.add_context_length(N_CTX)
        w.add_embedding_length(N_EMBD)
        w.add_block_count(1)
        w.add_feed_forward_length(N_FF)
        w.add_rope_dimension_count(HEAD)
        w.add_head_count(N_HEAD)
        w.add_head_count_kv(N_HEAD_KV)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_freq_base(10000.0)
    copy_tokenizer(vocab_reader, w)
    if extra:
        extra(w)
    if tensors_dtype is not None:
        for name, _, a in tiny_weights():
            w.add_tensor(name, a if a.ndim == 1 else a.astype(tensors_dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def every_value_type(w):
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 1.5)
    w.add_uint64("test.u64", 2**63)
    w.add_int64("test.i64", -2**62)
    w.add_float64("test.f64", -2.25)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "caf\u00e9")
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_str", ["a", "", "\u2581b"])
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}")


def safetensors_bytes(tensors, metadata=None):
    """tensors: [(name, dtype string, shape, raw bytes)]."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def hf_config(**changes):
    cfg = {"model_type": "llama", "hidden_size": N_EMBD, "intermediate_size": N_FF,
           "num_hidden_layers": 1, "num_attention_heads": N_HEAD, "num_key_value_heads": N_HEAD_KV,
           "vocab_size": N_VOCAB, "max_position_embeddings": N_CTX, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": True}
    cfg.update(changes)
    return json.dumps(cfg, indent=1)


SETTINGS = {"ntk_alpha": 2.0, "ntk_auto": False, "store_kv_before_rope": True, "memory_efficient": True,
            "causal_flash": False, "reproduce_padding_bug": False, "kv_mode": "static",
            "context_limit": 4096, "overflow": "head-tail", "backend": "cpu"}


def conversation(**changes):
    c = {"version": 1, "id": "c0ffee-1", "title": "A story", "created": "2026-03-01T10:00:00.000Z",
         "updated": "2026-03-01T10:05:00.000Z", "system_prompt": "You tell short stories.",
         "model_path": "/models/stories260K.gguf",
         "settings": {"generation": {"temperature": 0.8, "top_p": 0.95}, "long_context": SETTINGS},
         "messages": [
             {"role": "user", "text": "Once upon a time", "timestamp": "2026-03-01T10:00:01.000Z"},
             {"role": "assistant", "text": ", there was a little girl named Lily.", "timestamp": "2026-03-01T10:00:02.500Z"},
             {"role": "system_note", "text": "Generation stopped", "timestamp": "2026-03-01T10:00:03.000Z"}]}
    c.update(changes)
    return json.dumps(c, indent=1, ensure_ascii=False)


def run(**changes):
    r = {"format": "longscope-perplexity-run", "version": 1, "id": "run-1", "label": "\u03b1 2 \u00b7 keys before RoPE",
         "settings": SETTINGS, "ctx": 512, "bucket": 64, "n_ctx_train": 256, "model": "stories260K",
         "book": "Alice", "created": "2026-03-01T11:00:00.000Z", "mean_nll": 2.5, "perplexity": 12.18,
         "n_scored": 1022, "n_total": 1022, "windows": 2, "cancelled": False, "seconds": 1.5,
         "peak_memory_bytes": 5000000, "tokens_per_second": 680.0, "steps": 4,
         "curve": [{"begin": 0, "end": 64, "count": 128, "mean_nll": 3.1},
                   {"begin": 64, "end": 128, "count": 128, "mean_nll": 2.4}]}
    r.update(changes)
    return json.dumps(r, indent=1, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    root = os.path.abspath(ap.parse_args().root)
    corpus = os.path.join(root, "tests", "fuzz", "corpus")
    data = os.path.join(root, "tests", "data")

    def out(name, file, content):
        d = os.path.join(corpus, name)
        os.makedirs(d, exist_ok=True)
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(os.path.join(d, file), mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
            f.write(content)

    vocab = gguf.GGUFReader(os.path.join(root, "resources", "models", "stories260K.gguf"))
    gdir = os.path.join(corpus, "gguf")
    os.makedirs(gdir, exist_ok=True)
    write_gguf(os.path.join(gdir, "tiny_f32.gguf"), vocab, np.float32)
    write_gguf(os.path.join(gdir, "tiny_f16.gguf"), vocab, np.float16)
    write_gguf(os.path.join(gdir, "vocab_and_every_type.gguf"), vocab, None, every_value_type)

    weights = tiny_weights()
    out("safetensors", "tiny_f32.safetensors",
        safetensors_bytes([(hf, "F32", a.shape, a.tobytes()) for _, hf, a in weights]))
    small = weights[4][2]
    out("safetensors", "dtypes.safetensors", safetensors_bytes([
        ("f16", "F16", small.shape, small.astype(np.float16).tobytes()),
        ("bf16", "BF16", (4,), (np.arange(4, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()),
        ("i32", "I32", (2, 2), np.arange(4, dtype=np.int32).tobytes()),
        ("empty", "F32", (0, 8), b"")], metadata={"format": "pt"}))

    out("hf_config", "tiny.json", hf_config())
    out("hf_config", "rope_linear.json", hf_config(rope_scaling={"type": "linear", "factor": 2.0}, head_dim=HEAD))
    out("hf_config", "rope_dynamic.json", hf_config(rope_scaling={"rope_type": "dynamic", "factor": 4},
                                                     tie_word_embeddings=False))
    def data_file(rel):
        with open(os.path.join(data, rel), "rb") as f:
            return f.read()

    out("hf_config", "stories260K.json", data_file("stories260K/hf/config.json"))
    out("hf_tokenizer_config", "stories260K.json", data_file("stories260K/hf/tokenizer_config.json"))
    out("hf_tokenizer_config", "template.json", json.dumps({
        "add_bos_token": False, "bos_token": "<s>", "eos_token": "</s>",
        "chat_template": "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"}))
    out("hf_tokenizer_config", "nulls.json", json.dumps({"add_bos_token": None, "chat_template": None}))

    out("sp_model", "tok512.model", data_file("stories260K/tok512.model"))

    # FuzzedDataProvider reads integers from the end and strings from the front; any bytes do.
    out("stop_scanner", "text.bin", b"\x02</s>\\Once upon a time</s> there\\\\ was\xe2\x96\x81\x01\x03")
    out("stop_scanner", "utf8.bin", "\u00e9t\u00e9\\\u00e9\\l\u00e0 \u00e9t\u00e9 fin\\ \x04".encode())

    out("conversation", "story.json", conversation())
    out("conversation", "minimal.json", json.dumps({"version": 1, "id": "x", "created": "2026-01-01T00:00:00Z",
                                                     "updated": "2026-01-01T00:00:00Z", "messages": []}))
    out("run", "run.json", run())
    out("run", "cancelled.json", run(cancelled=True, curve=[], n_scored=0, id=""))

    out("settings", "settings.json", json.dumps(SETTINGS, indent=1))
    out("settings", "app.ini", "[generation]\nmaxNewTokens=256\ntemperature=0.7\ntopP=0.9\ntopK=40\n"
        "doSample=true\nrepetitionPenalty=1.1\nseed=42\n\n[longContext]\nsettings=\"" +
        json.dumps(SETTINGS, separators=(",", ":")).replace('"', '\\"') + "\"\n\n[chat]\n"
        "systemPrompt=You are helpful.\n\n[models]\nrecent=/tmp/a.gguf, /tmp/b\nlast=/tmp/a.gguf\n")
    out("settings", "legacy.ini", "[longContext]\nntkAlpha=3\nntkAuto=false\n")


if __name__ == "__main__":
    main()
