// RMSNorm on the device: y = x / sqrt(mean(x^2) + eps) * (weight_offset + weight), one block
// per row (Gemma's Hugging Face norms multiply by 1 + w).
#pragma once

#include <cuda_runtime.h>

namespace longscope::cuda {

// x, y: [rows, n] (y may be x); weight: [n]. Asynchronous on `stream`.
void launch_rmsnorm(const float *x, const float *weight, float *y, int rows, int n, float eps, float weight_offset,
                    cudaStream_t stream);

// x += residual (both [rows, n], x written back), then y = RMSNorm(x) as launch_rmsnorm (y must
// not be residual): a residual connection and the next norm in one launch.
void launch_add_rmsnorm(float *x, const float *residual, const float *weight, float *y, int rows, int n, float eps,
                        float weight_offset, cudaStream_t stream);

} // namespace longscope::cuda
