// Sampling helpers on the device.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace longscope::cuda {

// out[r] = index of the largest of logits[r * n .. r * n + n - 1], the lowest index on ties
// (the CPU's argmax in engine/src/runtime/sampler.cpp). NaN entries never win; a row with no
// comparable value gives 0. out is on the device.
cudaError_t launch_argmax(const float *logits, int64_t n_rows, int64_t n, int32_t *out, cudaStream_t stream);

} // namespace longscope::cuda
