// RMSNorm on the device: y = x / sqrt(mean(x^2) + eps) * weight, one block per row.
#pragma once

#include <cuda_runtime.h>

namespace longscope::cuda {

// x, y: [rows, n]; weight: [n]. Asynchronous on `stream`.
void launch_rmsnorm(const float *x, const float *weight, float *y, int rows, int n, float eps, cudaStream_t stream);

} // namespace longscope::cuda
