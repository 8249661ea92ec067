// The matrix-product micro-kernel: a tile of a few weight rows against a few token rows (up to
// 4 x 4 through gemm_tile; gemm_rows takes 6 x 4 tiles at the AVX-512 level, 4 x 3 at AVX2),
// every (row, token) pair accumulated in its own register in the same order whatever the tile
// size, so results do not depend on how rows and tokens were grouped (batched and single runs,
// any thread count, agree bit for bit). Weight rows are read in their stored type (F32, F16,
// BF16) and widened in registers: no converted copy of the row is written.
#pragma once

#include "longscope/types.h"

#include <cstdint>

namespace longscope {

// out[t * ldo + r] = sum_i w_r[i] * x[t * ldx + i] for r < n_rows (<= 4), t < n_tokens (<= 4).
// `rows[r]` points at row r's first element (any alignment). Types: F32, F16, BF16.
void gemm_tile(DType type, const void *const *rows, int n_rows, const float *x, int64_t ldx, int n_tokens,
               int64_t n, float *out, int64_t ldo);

// y[r] = row r . x for r < n_rows, row r at base + r * row_stride: gemm_tile's tiles of one
// token (the same bits), with the kernel chosen once for all the rows instead of once per row
// (a decode step's rows are 4-11 KiB each: the per-row choice cost a fifth of the time).
void gemv_rows(DType type, const void *base, size_t row_stride, int64_t n_rows, const float *x, int64_t n, float *y);

// y[t * ldy + r] = row r . x_t for r < n_rows, t < n_tokens, row r at base + r * row_stride and
// x_t = x + t * n: gemm_tile's results (the same bits) for a whole block of rows and tokens, the
// tiles' shape chosen for the kernel level in use.
void gemm_rows(DType type, const void *base, size_t row_stride, int64_t n_rows, const float *x, int64_t n_tokens,
               int64_t n, float *y, int64_t ldy);

// An F16 or BF16 matrix packed in groups of 16 rows (packed.h: for each input i, the group's
// sixteen values of input i side by side, 32 bytes): y[t * ldy + 16 g + r] = row (16 g + r) .
// x_t for the groups g0 <= g < g1, r < 16, t < n_tokens (x_t = x + t * n). Lanes are rows: each
// input is one vector of sixteen rows times one token's value broadcast, so a tile needs no
// horizontal sums, and every (row, token) sum is one chain of multiply-adds over the inputs in
// order, from zero, whatever the tile: any token count and any split of the groups give the
// same bits.
// Over several tokens at the AVX-512 and AVX2 levels the kernel reads the activations interleaved
// (interleave_half_acts): xi, where the caller made that copy once for several calls (the
// threads' ranges of one product, or Q, K and V), or else a copy the call makes itself.
void gemm_packed_half(DType type, const uint16_t *packed, int64_t n, int64_t g0, int64_t g1, const float *x,
                      int64_t n_tokens, float *y, int64_t ldy, const float *xi = nullptr);

// Tokens per block of gemm_packed_half's interleaved activations.
constexpr int64_t packed_half_token_block = 6;

// The activations x (n_tokens rows of n) interleaved for gemm_packed_half, token blocks b0 <= b
// < b1: block b holds tokens 6 b .. 6 b + nt - 1 (nt = 6, or what is left for the last one),
// their values of input i side by side: xi[6 b n + nt i + t] = x[(6 b + t) n + i]. The same
// values, so the same products.
void interleave_half_acts(const float *x, int64_t n, int64_t n_tokens, int64_t b0, int64_t b1, float *xi);

// Whether the AVX-512 BF16 dot products (vdpbf16ps: 32 products per instruction, twice the
// float FMA's 16) are in use for the matrix products of quantized weights over many tokens:
// the CPU has them and the kernel table's level is AVX-512.
bool has_bf16_dot();

// out[t * ldo + r] = sum_i w_r[i] * x_t[i], rows and tokens in BF16 (x_t = x + t * ldx), sums
// in float, for r < n_rows (<= 4), t < n_tokens (<= 4); n a multiple of 32. Needs has_bf16_dot().
void gemm_tile_bf16dot(const uint16_t *const *rows, int n_rows, const uint16_t *x, int64_t ldx, int n_tokens,
                       int64_t n, float *out, int64_t ldo);

// Rounds n floats to BF16, to nearest even (needs has_bf16_dot()).
void f32_to_bf16_rne(const float *src, uint16_t *dst, int64_t n);

// The token block the kernel in use handles best (4 with AVX-512, 2 with AVX2, 4 portable).
int gemm_token_block();

} // namespace longscope
