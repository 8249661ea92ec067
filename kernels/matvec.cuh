// The product of a weight matrix with one activation row (a decode step of one sequence), where
// cuBLAS leaves part of the memory bandwidth unused on small matrices and costs twice as much
// to call. One warp per output row reads the row's weights once, 16 bytes per lane per load,
// and multiplies them as floats with the activations (exact products of the F16 / BF16 weights
// and the float activations, float sums). From two rows on, cuBLAS reads the weights once for
// all of them and is faster.
#pragma once

#include "embedding.cuh"

#include <cstdint>
#include <cuda_runtime.h>

namespace longscope::cuda {

// y[o] = sum_i W[o, i] x[i]: W [n_out][n_in] of `type`, x [n_in] and y [n_out] floats. Any
// n_in and alignment; rows of whole 16-byte groups at 16-byte addresses take vector loads.
cudaError_t launch_matvec(const void *w, ElemType type, int64_t n_in, int64_t n_out, const float *x, float *y,
                          cudaStream_t stream);

// Up to this many matrices in one launch_matvec_group.
constexpr int k_matvec_group_max = 4;

// y_m = W_m x for m < count: matrices of one type and one n_in (a layer's query, key and value
// projections; its gate and up projections) multiplied with the same activations in one launch,
// each row as launch_matvec computes it.
cudaError_t launch_matvec_group(const void *const *w, const int64_t *n_out, float *const *y, int count,
                                ElemType type, int64_t n_in, const float *x, cudaStream_t stream);

} // namespace longscope::cuda
