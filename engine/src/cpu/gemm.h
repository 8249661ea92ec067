// The matrix-product micro-kernel: a tile of up to 4 weight rows against up to 4 token rows,
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

// The token block the kernel in use handles best (4 with AVX-512, 2 with AVX2, 4 portable).
int gemm_token_block();

} // namespace longscope
