#!/usr/bin/env python3
"""Regenerates tests/data/quant/: test vectors for the Q8_0, Q4_0, Q4_K and Q6_K block formats.

A reference tool, not used by the build or by the tests at run time (the tests read the files
it wrote). The expected values come from outside Longscope:

  * dequantization: gguf.quants.dequantize from the `gguf` package (llama.cpp's own Python
    GGUF library, written independently of ggml's C code), cross-checked here against
    ggml's C dequantize_row_* from the prebuilt `libggml-python` wheel;
  * reference quantization: gguf.quants.quantize for Q8_0 and Q4_0 (bit-exact ports of
    ggml's reference quantizers), cross-checked against ggml's C quantize_row_*_ref; for
    Q4_K and Q6_K, which gguf.quants cannot quantize, ggml's C quantize_row_q4_K_ref and
    quantize_row_q6_K_ref from `libggml-python`.

Set up (outside the repository) and run:

    python3 -m venv /tmp/quant-venv
    /tmp/quant-venv/bin/pip install gguf numpy libggml-python
    /tmp/quant-venv/bin/python scripts/gen_quant_fixtures.py tests/data/quant

Files written per type T (q8_0, q4_0, q4_k, q6_k), all little endian:

  T.input.f32    float32 values, 2048 elements: inputs for the quantizer
  T.quant.bin    the reference quantizer's blocks for T.input.f32
  T.blocks.bin   blocks to dequantize: T.quant.bin followed by blocks of random bytes (every
                 bit pattern of the scales and quants, finite f16 super-scales)
  T.dequant.f32  gguf.quants.dequantize of T.blocks.bin
"""

import ctypes
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants

TYPES = {
    "q8_0": (QT.Q8_0, 32, 34),
    "q4_0": (QT.Q4_0, 32, 18),
    "q4_k": (QT.Q4_K, 256, 144),
    "q6_k": (QT.Q6_K, 256, 210),
}

SEGMENT = 256
N_SEGMENTS = 8
N_RANDOM_BLOCKS = {"q8_0": 16, "q4_0": 16, "q4_k": 6, "q6_k": 6}


def load_libggml():
    import libggml

    path = os.path.join(os.path.dirname(libggml.__file__), "lib64", "libggml-base.so")
    lib = ctypes.CDLL(path)
    for name in ("q8_0", "q4_0", "q4_K", "q6_K"):
        for fn in (f"quantize_row_{name}_ref", f"dequantize_row_{name}"):
            f = getattr(lib, fn)
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
            f.restype = None
    return lib


def c_name(t):
    return {"q8_0": "q8_0", "q4_0": "q4_0", "q4_k": "q4_K", "q6_k": "q6_K"}[t]


def ggml_quantize(lib, t, x):
    _, qk, nbytes = TYPES[t]
    out = np.zeros(x.size // qk * nbytes, dtype=np.uint8)
    x = np.ascontiguousarray(x, dtype=np.float32)
    getattr(lib, f"quantize_row_{c_name(t)}_ref")(x.ctypes.data, out.ctypes.data, x.size)
    return out


def ggml_dequantize(lib, t, blocks):
    _, qk, nbytes = TYPES[t]
    n = blocks.size // nbytes * qk
    out = np.zeros(n, dtype=np.float32)
    blocks = np.ascontiguousarray(blocks)
    getattr(lib, f"dequantize_row_{c_name(t)}")(blocks.ctypes.data, out.ctypes.data, n)
    return out


def make_input(rng):
    """Eight 256-element segments, each a different distribution the quantizers branch on."""
    segs = []
    segs.append(rng.normal(0, 0.02, SEGMENT))                          # weight-like
    s = rng.normal(0, 1, SEGMENT)
    s[rng.integers(0, SEGMENT, 4)] *= 12                              # outliers
    segs.append(s)
    segs.append(np.zeros(SEGMENT))                                    # all zero
    segs.append(np.full(SEGMENT, 0.5))                                # constant
    segs.append(rng.uniform(0.1, 1.0, SEGMENT))                       # all positive
    segs.append(-rng.uniform(0.0, 3.0, SEGMENT))                      # all negative
    scales = np.repeat(10.0 ** rng.uniform(-6, 2, SEGMENT // 16), 16)
    segs.append(rng.normal(0, 1, SEGMENT) * scales)                   # magnitudes per 16
    t = rng.normal(0, 1e-6, SEGMENT)
    t[:32] = 0
    t[32:64] *= 1e-12                                                 # below ggml's epsilon
    segs.append(t)
    return np.concatenate(segs).astype(np.float32)


def random_blocks(rng, t, n):
    """Blocks of random bytes with a finite f16 scale (and min) so every value is finite."""
    _, qk, nbytes = TYPES[t]
    b = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)

    def f16_bytes(values):
        return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(-1, 2)

    d = rng.normal(0, 0.05, n)
    d[0] = 6.0e-8  # a subnormal half
    if t in ("q8_0", "q4_0"):
        b[:, 0:2] = f16_bytes(d)
    elif t == "q4_k":
        b[:, 0:2] = f16_bytes(np.abs(d))
        b[:, 2:4] = f16_bytes(np.abs(rng.normal(0, 0.05, n)))
    else:  # q6_k: d is the last two bytes
        b[:, 208:210] = f16_bytes(d)
    return b.reshape(-1)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/quant"
    os.makedirs(out_dir, exist_ok=True)
    lib = load_libggml()
    rng = np.random.default_rng(20240611)
    for t, (qt, qk, nbytes) in TYPES.items():
        x = make_input(rng)
        ref = ggml_quantize(lib, t, x)
        if t in ("q8_0", "q4_0"):
            py = quants.quantize(x.reshape(-1, qk), qt).reshape(-1)
            assert np.array_equal(py, ref), f"{t}: gguf.quants.quantize differs from ggml's C reference"
        blocks = np.concatenate([ref, random_blocks(rng, t, N_RANDOM_BLOCKS[t])])
        deq = quants.dequantize(blocks.reshape(-1, nbytes), qt).reshape(-1).astype(np.float32)
        deq_c = ggml_dequantize(lib, t, blocks)
        assert np.array_equal(deq.view(np.uint32), deq_c.view(np.uint32)), \
            f"{t}: gguf.quants.dequantize differs from ggml's C dequantize_row"
        x.tofile(os.path.join(out_dir, f"{t}.input.f32"))
        ref.tofile(os.path.join(out_dir, f"{t}.quant.bin"))
        blocks.tofile(os.path.join(out_dir, f"{t}.blocks.bin"))
        deq.tofile(os.path.join(out_dir, f"{t}.dequant.f32"))
        print(f"{t}: {x.size} inputs, {blocks.size // nbytes} blocks, python and C agree")


if __name__ == "__main__":
    main()
