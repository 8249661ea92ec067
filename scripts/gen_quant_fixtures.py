#!/usr/bin/env python3
"""Regenerates tests/data/quant/: test vectors for llama.cpp's block formats (Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).

A reference tool, not used by the build or by the tests at run time (the tests read the files
it wrote). The expected values come from outside Longscope:

  * dequantization: gguf.quants.dequantize from the `gguf` package (llama.cpp's own Python
    GGUF library, written independently of ggml's C code), cross-checked here against
    ggml's C dequantize_row_* from the prebuilt `libggml-python` wheel;
  * reference quantization: gguf.quants.quantize for Q8_0 and Q4_0 (bit-exact ports of
    ggml's reference quantizers), cross-checked against ggml's C quantize_row_*_ref; for
    Q4_K and Q6_K, which gguf.quants cannot quantize, ggml's C quantize_row_q4_K_ref and
    quantize_row_q6_K_ref from `libggml-python`;
  * for the types added later (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS) the blocks
    are written by ggml's quantize_T(src, dst, nrows, n_per_row, imatrix = NULL), the function
    llama.cpp's quantize tool calls (through ggml_quantize_chunk) when no importance matrix is
    given; for Q4_1, Q5_0 and Q5_1 gguf.quants.quantize is checked to give the same bytes.

Set up (outside the repository) and run:

    python3 -m venv /tmp/quant-venv
    /tmp/quant-venv/bin/pip install gguf numpy libggml-python
    /tmp/quant-venv/bin/python scripts/gen_quant_fixtures.py tests/data/quant

or, instead of the libggml-python wheel, with a libggml-base.so built from llama.cpp's sources:

    python3 scripts/gen_quant_fixtures.py tests/data/quant --libggml /path/to/libggml-base.so

Files written per type T (q8_0, q4_0, q4_k, q6_k, q4_1, q5_0, q5_1, q2_k, q3_k, q5_k, iq4_nl,
iq4_xs), all little endian:

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
    # Added later; after the first four so that their random streams stay as they were.
    "q4_1": (QT.Q4_1, 32, 20),
    "q5_0": (QT.Q5_0, 32, 22),
    "q5_1": (QT.Q5_1, 32, 24),
    "q2_k": (QT.Q2_K, 256, 84),
    "q3_k": (QT.Q3_K, 256, 110),
    "q5_k": (QT.Q5_K, 256, 176),
    "iq4_nl": (QT.IQ4_NL, 32, 18),
    "iq4_xs": (QT.IQ4_XS, 256, 136),
}
# The original four use quantize_row_T_ref; the others the quantizer of llama.cpp's tool.
REF_ROW = ("q8_0", "q4_0", "q4_k", "q6_k")
# gguf.quants.quantize exists for these (bit-exact ports of ggml's reference quantizers).
PY_QUANT = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1")

SEGMENT = 256
N_SEGMENTS = 8
N_RANDOM_BLOCKS = {"q8_0": 16, "q4_0": 16, "q4_k": 6, "q6_k": 6, "q4_1": 16, "q5_0": 16, "q5_1": 16,
                   "q2_k": 6, "q3_k": 6, "q5_k": 6, "iq4_nl": 16, "iq4_xs": 6}


def load_libggml(path=None):
    if path is None:
        import libggml

        path = os.path.join(os.path.dirname(libggml.__file__), "lib64", "libggml-base.so")
    lib = ctypes.CDLL(path)
    for t in TYPES:
        name = c_name(t)
        fns = [f"dequantize_row_{name}"]
        fns.append(f"quantize_row_{name}_ref" if t in REF_ROW else f"quantize_{name}")
        for fn in fns:
            f = getattr(lib, fn)
            if fn.startswith("quantize_") and t not in REF_ROW:
                f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
                f.restype = ctypes.c_size_t
            else:
                f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
                f.restype = None
    return lib


def c_name(t):
    return t[:-1] + "K" if t.endswith("_k") else t


def ggml_quantize(lib, t, x):
    _, qk, nbytes = TYPES[t]
    out = np.zeros(x.size // qk * nbytes, dtype=np.uint8)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if t in REF_ROW:
        getattr(lib, f"quantize_row_{c_name(t)}_ref")(x.ctypes.data, out.ctypes.data, x.size)
    else:  # one row of x.size values, no importance matrix
        getattr(lib, f"quantize_{c_name(t)}")(x.ctypes.data, out.ctypes.data, 1, x.size, None)
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
    if t in ("q8_0", "q4_0", "q5_0", "iq4_nl", "iq4_xs"):
        b[:, 0:2] = f16_bytes(d)
    elif t in ("q4_k", "q5_k"):
        b[:, 0:2] = f16_bytes(np.abs(d))
        b[:, 2:4] = f16_bytes(np.abs(rng.normal(0, 0.05, n)))
    elif t in ("q4_1", "q5_1"):  # d, then the (signed) minimum m
        b[:, 0:2] = f16_bytes(np.abs(d))
        b[:, 2:4] = f16_bytes(rng.normal(0, 0.05, n))
    elif t == "q2_k":  # d and dmin are the last four bytes
        b[:, 80:82] = f16_bytes(np.abs(d))
        b[:, 82:84] = f16_bytes(np.abs(rng.normal(0, 0.05, n)))
    elif t == "q3_k":  # d is the last two bytes
        b[:, 108:110] = f16_bytes(d)
    else:  # q6_k: d is the last two bytes
        b[:, 208:210] = f16_bytes(d)
    return b.reshape(-1)


def main():
    args = sys.argv[1:]
    lib_path = None
    if "--libggml" in args:
        i = args.index("--libggml")
        lib_path = args[i + 1]
        del args[i:i + 2]
    out_dir = args[0] if args else "tests/data/quant"
    os.makedirs(out_dir, exist_ok=True)
    lib = load_libggml(lib_path)
    rng = np.random.default_rng(20240611)
    for t, (qt, qk, nbytes) in TYPES.items():
        x = make_input(rng)
        ref = ggml_quantize(lib, t, x)
        if t in PY_QUANT:
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
