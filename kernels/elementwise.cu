// Elementwise kernels, one thread per element over a grid-stride loop (Harris, "CUDA Pro Tip:
// Write Flexible Kernels with Grid-Stride Loops"):
//   residual add          out = a + b
//   SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer")
//                         out = silu(gate) * up, silu(g) = g / (1 + e^-g)
//   GeGLU (same paper; Gemma's feed-forward)
//                         out = gelu(gate) * up, gelu with the tanh approximation of
//                         Hendrycks & Gimpel (2016): g / 2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
//   scale                 x *= s (Gemma's embeddings times sqrt(n_embd))
//   soft-capping          x = cap tanh(x / cap) (Gemma 2's final logits)
//   bias rows             x[t] += b (Qwen2's Q, K and V biases)
//   F32 -> F16 / BF16     round to nearest even, for cuBLAS products whose two inputs must
//                         share one type.
// The arithmetic is that of the CPU reference (engine/src/cpu/ops.cpp swiglu, geglu, softcap;
// cpu_backend.cpp scale, add_bias), with the full precision expf and tanhf rather than the fast
// intrinsics.
#include "elementwise.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace longscope::cuda {

namespace {

constexpr int k_threads = 256;

unsigned grid_for(int64_t n)
{
    const int64_t blocks = (n + k_threads - 1) / k_threads;
    return unsigned(blocks < 65536 ? blocks : 65536);
}

__global__ void add_kernel(const float *a, const float *b, float *out, int64_t n)
{
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void swiglu_kernel(const float *gate, const float *up, float *out, int64_t n)
{
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ void geglu_kernel(const float *gate, const float *up, float *out, int64_t n)
{
    constexpr float k = 0.7978845608028654f; // sqrt(2 / pi)
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = gate[i];
        out[i] = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * up[i];
    }
}

__global__ void scale_kernel(float *x, float s, int64_t n)
{
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] *= s;
}

__global__ void softcap_kernel(float *x, float cap, int64_t n)
{
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

__global__ void add_bias_kernel(float *x, const float *bias, int64_t n_rows, int64_t width)
{
    const int64_t n = n_rows * width;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] += bias[i % width];
}

__global__ void f32_to_f16_kernel(const float *__restrict__ x, __half *__restrict__ out, int64_t n)
{
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        out[i] = __float2half_rn(x[i]);
}

__global__ void f32_to_bf16_kernel(const float *__restrict__ x, __nv_bfloat16 *__restrict__ out, int64_t n)
{
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        out[i] = __float2bfloat16_rn(x[i]);
}

} // namespace

cudaError_t launch_add(const float *a, const float *b, float *out, int64_t n, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    add_kernel<<<grid_for(n), k_threads, 0, stream>>>(a, b, out, n);
    return cudaGetLastError();
}

cudaError_t launch_swiglu(const float *gate, const float *up, float *out, int64_t n, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    swiglu_kernel<<<grid_for(n), k_threads, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}

cudaError_t launch_geglu(const float *gate, const float *up, float *out, int64_t n, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    geglu_kernel<<<grid_for(n), k_threads, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}

cudaError_t launch_scale(float *x, float s, int64_t n, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    scale_kernel<<<grid_for(n), k_threads, 0, stream>>>(x, s, n);
    return cudaGetLastError();
}

cudaError_t launch_softcap(float *x, float cap, int64_t n, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    softcap_kernel<<<grid_for(n), k_threads, 0, stream>>>(x, cap, n);
    return cudaGetLastError();
}

cudaError_t launch_add_bias(float *x, const float *bias, int64_t n_rows, int64_t width, cudaStream_t stream)
{
    if (n_rows <= 0 || width <= 0)
        return cudaSuccess;
    add_bias_kernel<<<grid_for(n_rows * width), k_threads, 0, stream>>>(x, bias, n_rows, width);
    return cudaGetLastError();
}

cudaError_t launch_f32_to_f16(const float *x, void *out, int64_t n, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    f32_to_f16_kernel<<<grid_for(n), k_threads, 0, stream>>>(x, static_cast<__half *>(out), n);
    return cudaGetLastError();
}

cudaError_t launch_f32_to_bf16(const float *x, void *out, int64_t n, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    f32_to_bf16_kernel<<<grid_for(n), k_threads, 0, stream>>>(x, static_cast<__nv_bfloat16 *>(out), n);
    return cudaGetLastError();
}

} // namespace longscope::cuda
