// Quantized weight formats: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and
// IQ4_XS, with the block layouts GGUF files store
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
//   Q4_1, 32 elements, 20 bytes:  f16 d; f16 m; uint8 qs[16].  Q4_0's nibbles, x = q * d + m.
//   Q5_0, 32 elements, 22 bytes:  f16 d; uint32 qh; uint8 qs[16]. q = nibble (as Q4_0) | bit j
//        of qh << 4 for value j; x = (q - 16) * d.
//   Q5_1, 32 elements, 24 bytes:  f16 d; f16 m; uint32 qh; uint8 qs[16]. q as Q5_0, x = q * d + m.
//   IQ4_NL, 32 elements, 18 bytes: f16 d; uint8 qs[16]. Q4_0's nibbles index a table of sixteen
//        int8 values (iq4_nl_values): x = d * table[nibble].
//   Q2_K, 256 elements, 84 bytes: uint8 scales[16]; uint8 qs[64]; f16 d; f16 dmin. Sixteen
//        groups of 16; group g has scale scales[g] & 0xF and min scales[g] >> 4. Value i's 2-bit
//        code q is bits 2 (i % 128 / 32) of qs[32 (i / 128) + i % 32] (q2_k_code).
//        x = (d * sc) * q - (dmin * m).
//   Q3_K, 256 elements, 110 bytes: uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; f16 d.
//        Value i's 3-bit code: the 2-bit field as Q2_K, plus 4 where bit i / 32 of hmask[i % 32]
//        is set. Sixteen 6-bit scales per 16 values, stored + 32: low four bits in the nibbles of
//        scales[0..7] (groups 0-7 low, 8-15 high), top two at bits 2 (g / 4) of scales[8 + g % 4].
//        x = (d * (sc - 32)) * (q - 4).
//   Q5_K, 256 elements, 176 bytes: f16 d; f16 dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128].
//        Q4_K's scales, mins and nibbles; sub-block j adds 16 where bit j of qh[l] is set (value
//        32 j + l). x = (d * sc) * q - (dmin * m).
//   IQ4_XS, 256 elements, 136 bytes: f16 d; uint16 scales_h; uint8 scales_l[4]; uint8 qs[128].
//        Eight blocks of 32 as IQ4_NL's (qs + 16 ib); block ib's 6-bit scale, stored + 32: low
//        nibble ib % 2 of scales_l[ib / 2], top two bits at 2 ib of scales_h.
//        x = (d * (ls - 32)) * table[nibble].
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
// Whether `type` is one of the K types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): super-blocks of 256
// values with a scale per 16 or 32.
bool is_k_quant(DType type);

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
// The kernel dequantize_row_with(level, type) runs: Q8_0 has AVX-512 and AVX2 ones, every
// other quantized type an AVX-512 one; F32, F16 and BF16 are decoded portably.
VectorLevel dequantize_level(DType type, VectorLevel level);
// ... and the one dequantize_row runs now.
VectorLevel dequantize_level(DType type);

// Encodes n floats (a multiple of the block size) as `type` with the quantizers llama.cpp's
// quantize tool runs without an importance matrix (ggml's quantize_row_*_ref; for IQ4_NL and
// IQ4_XS quantize_iq4_*): Q8_0 d = absmax / 127; Q4_0 / Q5_0 d = (value of largest magnitude)
// / -8 / -16; Q4_1 / Q5_1 d = (max - min) / 15 / 31, m = min; Q4_K / Q5_K least-squares search
// of scale and min per sub-block of 32 (weighted by |x| + rms); Q2_K the same per 16 (weighted
// by |x|, absolute error); Q3_K and Q6_K search of the scale per 16 (weighted by x^2); IQ4_NL /
// IQ4_XS search of the scale per 32 over the value table. Also F32, F16 and BF16.
void quantize_row(DType type, const float *src, void *dst, int64_t n);

// One block of 32 values to Q8_0's codes by ggml's reference rounding (quantize_row_q8_0_ref):
// d = max|x| / 127, q = round(x / d), ties away from zero. Returns d as a float (Q8_0 blocks
// store it as F16; the attention's quantized query keeps the float).
float quantize_block_q8_0_codes(const float *x, int8_t qs[32]);

// The eight 6-bit scales and mins of a Q4_K (and Q5_K) super-block from its 12 packed bytes.
void q4_k_scales_mins(const uint8_t *packed, uint8_t sc[8], uint8_t m[8]);

// IQ4_NL's and IQ4_XS's sixteen values (ggml's kvalues_iq4nl), ascending.
inline constexpr int8_t iq4_nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

// The sixteen scales of a Q3_K super-block, minus 32 (-32..31), from its 12 packed bytes.
inline void q3_k_scales(const uint8_t *packed, int8_t sc[16])
{
    for (int g = 0; g < 16; ++g) {
        const int low = g < 8 ? packed[g] & 0x0f : packed[g - 8] >> 4;
        const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
        sc[g] = int8_t((low | (high << 4)) - 32);
    }
}

// The 256 3-bit codes (0..7, the value is code - 4) of a Q3_K super-block in value order.
void q3_k_codes(const uint8_t *block, uint8_t q[256]);
// The 256 2-bit codes (0..3) of a Q2_K super-block in value order.
void q2_k_codes(const uint8_t *block, uint8_t q[256]);

// The scale of block ib (0..7) of an IQ4_XS super-block, minus 32 (-32..31).
inline int iq4_xs_scale(const uint8_t *scales_l, uint16_t scales_h, int ib)
{
    return (((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((scales_h >> (2 * ib)) & 3) << 4)) - 32;
}

} // namespace longscope
