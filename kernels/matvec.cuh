// Products of a weight matrix with a few activation rows (a decode step, a small batch), where
// cuBLAS's matrix-product kernels leave most of the memory bandwidth unused and cost more to
// call than the product takes. One warp per output row reads the row's weights once, 16 bytes
// per lane per load, and multiplies them as floats with every activation row (exact products
// of the F16 / BF16 weights and the float activations, float sums).
#pragma once

#include "embedding.cuh"

#include <cstdint>
#include <cuda_runtime.h>

namespace longscope::cuda {

// At most this many activation rows take launch_matvec.
constexpr int k_matvec_max_tokens = 8;

// y[t, o] = sum_i W[o, i] x[t, i] for t < n_tokens (1 .. k_matvec_max_tokens): W [n_out][n_in]
// of `type`, x [n_tokens][n_in] and y [n_tokens][n_out] floats. Any n_in and alignment; rows of
// whole 16-byte groups at 16-byte addresses take vector loads.
cudaError_t launch_matvec(const void *w, ElemType type, int64_t n_in, int64_t n_out, const float *x, float *y,
                          int n_tokens, cudaStream_t stream);

} // namespace longscope::cuda
