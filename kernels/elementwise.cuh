// Elementwise ops on the device: residual add, SwiGLU and GeGLU, scaling, soft-capping, bias
// rows, and narrowing of activations to the 16-bit type of a weight matrix before a cuBLAS
// product.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace longscope::cuda {

// out = a + b over n floats (out may be a or b).
cudaError_t launch_add(const float *a, const float *b, float *out, int64_t n, cudaStream_t stream);

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up over n floats (out may be gate or up).
cudaError_t launch_swiglu(const float *gate, const float *up, float *out, int64_t n, cudaStream_t stream);

// out = gelu(gate) * up over n floats, gelu(g) = g / 2 * (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3)))
// (out may be gate or up).
cudaError_t launch_geglu(const float *gate, const float *up, float *out, int64_t n, cudaStream_t stream);

// x *= s over n floats.
cudaError_t launch_scale(float *x, float s, int64_t n, cudaStream_t stream);

// x = cap * tanh(x / cap) over n floats.
cudaError_t launch_softcap(float *x, float cap, int64_t n, cudaStream_t stream);

// x[t, i] += bias[i] over n_rows rows of width floats.
cudaError_t launch_add_bias(float *x, const float *bias, int64_t n_rows, int64_t width, cudaStream_t stream);

// IEEE binary16 / bfloat16 of n floats, rounded to nearest even.
cudaError_t launch_f32_to_f16(const float *x, void *out, int64_t n, cudaStream_t stream);
cudaError_t launch_f32_to_bf16(const float *x, void *out, int64_t n, cudaStream_t stream);

} // namespace longscope::cuda
