#!/usr/bin/env python3
"""Writes tests/data/kv/rows.bin: random KV cache rows and their encodings by the `gguf`
package's numpy quantizers (llama.cpp's gguf-py), which the KV cache's store must reproduce
byte for byte.

Layout (little endian):
    int32 n_rows, int32 n            (n values per row, a multiple of 32)
    float32 rows[n_rows * n]
    uint8 f16[n_rows * n * 2]        numpy's float16 (round to nearest even)
    uint8 q8_0[n_rows * n / 32 * 34] gguf.quants.quantize(rows, Q8_0)
    uint8 q4_0[n_rows * n / 32 * 18] gguf.quants.quantize(rows, Q4_0)

The rows mix scales (keys and values of a real model span several orders of magnitude), and
include an all-zero block, a block with one large outlier and a block of negative values.

    python3 scripts/gen_kv_quant_fixture.py [--out tests/data/kv/rows.bin]
"""

import argparse
import struct

import numpy as np
from gguf import GGMLQuantizationType, quants


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="tests/data/kv/rows.bin")
    args = parser.parse_args()

    rng = np.random.default_rng(20)
    n_rows, n = 24, 256  # e.g. 4 kv heads of 64
    scales = rng.choice([0.01, 0.3, 1.0, 4.0, 60.0], size=(n_rows, 1))
    rows = (rng.standard_normal((n_rows, n)) * scales).astype(np.float32)
    rows[3, 32:64] = 0.0
    rows[5, 0:32] = rng.standard_normal(32).astype(np.float32) * 0.05
    rows[5, 7] = 250.0
    rows[7, 64:96] = -np.abs(rows[7, 64:96])

    f16 = rows.astype(np.float16).tobytes()
    q8 = quants.quantize(rows, GGMLQuantizationType.Q8_0).tobytes()
    q4 = quants.quantize(rows, GGMLQuantizationType.Q4_0).tobytes()
    assert len(q8) == n_rows * n // 32 * 34 and len(q4) == n_rows * n // 32 * 18

    with open(args.out, "wb") as f:
        f.write(struct.pack("<ii", n_rows, n))
        f.write(rows.astype("<f4").tobytes())
        f.write(f16)
        f.write(q8)
        f.write(q4)


if __name__ == "__main__":
    main()
