// Attention scores over a Q8_0 or Q4_0 key cache in integers, as llama.cpp scores quantized
// keys: the query row is quantized once to blocks of 32 int8 with a float scale (ggml's
// Q8_0 rounding, d = max|x| / 127, the scale kept in float), and each score is
//   s = sum over blocks b of float(sum_i qq_i kq_i) * (dk_b * dq_b)
// with the integer sums exact and the blocks added in order (the first a product, the others
// fused multiply-adds), so every build (AVX-512 VNNI, AVX2, portable) gives the same bits.
// The score scale is folded into dq_b. The keys of a tile are first packed: sixteen keys by
// four dims per 64-byte vector (each value as an unsigned byte, the quant + 128), and the
// sixteen keys' block scales as floats; a packed tile is shared by every query row that
// reads it (the query heads of a group, the queries of a block).
#pragma once

#include "longscope/types.h"

#include <cstddef>
#include <cstdint>

namespace longscope {

// One block of 32 dims of a quantized query row. q4: the 32 quants, four per int32 (dims
// 4d .. 4d+3, little-endian); lo / hi: the same quants as pairs of int16 (dims 4d and 4d+2 in
// lo[d], 4d+1 and 4d+3 in hi[d]) for the AVX2 kernel; d: the block scale times the score
// scale; corr: -128 times the sum of the quants, which takes the +128 of the packed keys
// back out of the integer sum.
struct QkQueryBlock {
    int32_t q4[8];
    int32_t lo[8];
    int32_t hi[8];
    float d;
    int32_t corr;
};

enum class QkKernel { Vnni, Avx2, Portable };

// The kernel the kernel table allows: VNNI at the AVX-512 level on a CPU with it, AVX2
// wherever attention's x86-64-v3 build runs, else portable. All three give the same bits.
QkKernel qk_kernel();
// Whether `kernel` can run on this CPU.
bool qk_kernel_available(QkKernel kernel);

// Whether keys of this type are scored in integers: Q8_0 and Q4_0 keys stored rotated (keys
// rotated on load are turned in float and scored in float).
bool keys_scored_in_integers(DType k_type, bool rotated_on_load);

// Bytes of a packed tile of `count` keys of `head_dim` dims (a multiple of 32).
size_t qk_packed_bytes(int64_t count, int head_dim);

// Quantizes one query row (head_dim floats, a multiple of 32) into head_dim / 32 blocks, the
// score scale folded into their scales.
void qk_quantize_query(const float *q, int head_dim, float scale, QkQueryBlock *dst);

// Packs `count` keys of one kv head from a Q8_0 or Q4_0 cache (key c's blocks at
// src + c * row_bytes) into dst (qk_packed_bytes(count, head_dim) bytes).
void qk_pack_keys(QkKernel kernel, DType type, const uint8_t *src, size_t row_bytes, int64_t count, int head_dim,
                  uint8_t *dst);

// Scores of n_rows query rows (row r's blocks at q + r * q_stride) against a packed tile of
// `count` keys: s[r * s_stride + c] for c < count (nothing written beyond).
void qk_scores(QkKernel kernel, const QkQueryBlock *q, int64_t q_stride, int n_rows, const uint8_t *packed,
               int64_t count, int head_dim, float *s, int64_t s_stride);

} // namespace longscope
