// Elementwise kernels, one thread per element over a grid-stride loop (Harris, "CUDA Pro Tip:
// Write Flexible Kernels with Grid-Stride Loops"):
//   residual add          out = a + b
//   SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer")
//                         out = silu(gate) * up, silu(g) = g / (1 + e^-g)
//   F32 -> F16 / BF16     round to nearest even, for cuBLAS products whose two inputs must
//                         share one type.
// The arithmetic is that of the CPU reference (engine/src/cpu/ops.cpp swiglu), with the full
// precision expf rather than the fast intrinsic.
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
