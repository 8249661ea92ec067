// Token embedding lookup on the device.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace longscope::cuda {

// Element types of weights held on the device (the numbering of the plugin ABI).
enum class ElemType : int { F32 = 0, F16 = 1, BF16 = 2 };

// out[t, :] = table[tokens[t], :] widened to float. table: [n_rows, n_embd] of `type`;
// tokens: [n_tokens] int32 on the device. An id outside [0, n_rows) gives a row of zeros.
cudaError_t launch_embedding(const void *table, ElemType type, int64_t n_rows, int64_t n_embd, const int32_t *tokens,
                             int64_t n_tokens, float *out, cudaStream_t stream);

} // namespace longscope::cuda
