// Quantized weight formats: Q8_0, Q4_0, Q4_K and Q6_K, with the block layouts GGUF files store
// (ggml's, bit for bit, so files made by llama.cpp's quantizer load and files made here load
// in llama.cpp). All multi-byte fields are little endian; "f16" is an IEEE half.
//
//   Q8_0, 32 elements, 34 bytes:  f16 d; int8 qs[32].          x[j] = d * qs[j]
//   Q4_0, 32 elements, 18 bytes:  f16 d; uint8 qs[16].         x[j]    = d * ((qs[j] & 0xF) - 8)
//                                                              x[j+16] = d * ((qs[j] >> 4) - 8)
//   Q4_K, 256 elements, 144 bytes: f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128].
//        Eight sub-blocks of 32, each with a 6-bit scale sc and a 6-bit min m packed in
//        scales[12]: for j < 4, sc = scales[j] & 63, m = scales[j+4] & 63; for j >= 4,
//        sc = (scales[j+4] & 0xF) | ((scales[j-4] >> 6) << 4),
//        m  = (scales[j+4] >> 4)  | ((scales[j]   >> 6) << 4).
//        qs[32c .. 32c+31] hold sub-block 2c in the low nibbles and 2c+1 in the high ones.
//        x = (d * sc) * q - (dmin * m).
//   Q6_K, 256 elements, 210 bytes: uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d.
//        Two halves of 128 (ql + 64n, qh + 32n, scales + 8n); in a half, for l < 32:
//        q(l)    = (ql[l]    & 0xF) | ((qh[l] >> 0 & 3) << 4)
//        q(l+32) = (ql[l+32] & 0xF) | ((qh[l] >> 2 & 3) << 4)
//        q(l+64) = (ql[l]    >> 4)  | ((qh[l] >> 4 & 3) << 4)
//        q(l+96) = (ql[l+32] >> 4)  | ((qh[l] >> 6 & 3) << 4)
//        x(i) = (d * scales[i / 16]) * (q(i) - 32).
//
// The arithmetic order above is ggml's; dequantization is bit-exact against llama.cpp's gguf
// Python package (tests/data/quant).
#pragma once

#include "cpu/kernel_table.h"
#include "longscope/types.h"

#include <cstddef>
#include <cstdint>

namespace longscope {

// Whether `type` is one of the quantized formats this file implements.
bool is_quantized(DType type);

// Elements per block (1 for plain types) and bytes per block, from dtype_traits.
int64_t block_elems(DType type);

// Bytes of a row of n elements; n must be a multiple of the block size.
size_t row_bytes(DType type, int64_t n);

// Decodes n elements (a multiple of the block size) of a quantized row. Also handles F32,
// F16 and BF16 so callers can treat every weight type alike. The kernel is the widest at or
// below the kernel table's level (dequantize_level); every kernel gives the same bits.
void dequantize_row(DType type, const void *src, float *dst, int64_t n);
// The same with the kernels of `level` (one this CPU runs).
void dequantize_row_with(VectorLevel level, DType type, const void *src, float *dst, int64_t n);
// The kernel dequantize_row_with(level, type) runs: Q8_0 has AVX-512 and AVX2 ones; Q4_0,
// Q4_K and Q6_K an AVX-512 one; F32, F16 and BF16 are decoded portably.
VectorLevel dequantize_level(DType type, VectorLevel level);
// ... and the one dequantize_row runs now.
VectorLevel dequantize_level(DType type);

// Encodes n floats (a multiple of the block size) as `type` with ggml's reference quantizers
// (quantize_row_*_ref): Q8_0 d = absmax / 127; Q4_0 d = (value of largest magnitude) / -8;
// Q4_K least-squares search of scale and min per sub-block of 32 (weighted by |x| + rms);
// Q6_K search of the scale per 16 (weighted by x^2). Also F32, F16 and BF16.
void quantize_row(DType type, const float *src, void *dst, int64_t n);

// The eight 6-bit scales and mins of a Q4_K super-block from its 12 packed bytes.
void q4_k_scales_mins(const uint8_t *packed, uint8_t sc[8], uint8_t m[8]);

} // namespace longscope
