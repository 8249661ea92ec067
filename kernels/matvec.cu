#include "matvec.cuh"

#include "reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace longscope::cuda {

namespace {

constexpr int k_warps = 8; // output rows per block

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Values of type W in one 16-byte load.
template <typename W>
constexpr int k_pack = 16 / int(sizeof(W));

// VEC: rows of whole 16-byte groups at 16-byte addresses (and x likewise).
template <typename W, bool VEC>
__global__ void __launch_bounds__(k_warps * 32)
    matvec_kernel(const W *__restrict__ w, int64_t n_in, int64_t n_out, const float *__restrict__ x,
                  float *__restrict__ y)
{
    const int lane = threadIdx.x % 32;
    const int64_t row = int64_t(blockIdx.x) * k_warps + threadIdx.x / 32;
    if (row >= n_out)
        return;
    const W *wr = w + row * n_in;
    float acc = 0.0f;
    if constexpr (VEC) {
        constexpr int P = k_pack<W>;
#pragma unroll 4
        for (int64_t i = int64_t(lane) * P; i < n_in; i += 32 * P) {
            const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(wr + i));
            const W *wv = reinterpret_cast<const W *>(&raw);
#pragma unroll
            for (int k = 0; k < P; k += 4) {
                const float4 xv = __ldg(reinterpret_cast<const float4 *>(x + i + k));
                acc += to_float(wv[k]) * xv.x + to_float(wv[k + 1]) * xv.y + to_float(wv[k + 2]) * xv.z +
                       to_float(wv[k + 3]) * xv.w;
            }
        }
    } else {
        for (int64_t i = lane; i < n_in; i += 32)
            acc += to_float(wr[i]) * x[i];
    }
    acc = warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}

template <typename W>
cudaError_t launch_typed(const void *w, int64_t n_in, int64_t n_out, const float *x, float *y, cudaStream_t stream)
{
    const int64_t blocks = (n_out + k_warps - 1) / k_warps;
    if (blocks > 2147483647)
        return cudaErrorInvalidValue;
    const bool vec = n_in % k_pack<W> == 0 && (reinterpret_cast<uintptr_t>(w) % 16) == 0 &&
                     (reinterpret_cast<uintptr_t>(x) % 16) == 0;
    const W *wt = static_cast<const W *>(w);
    if (vec)
        matvec_kernel<W, true><<<unsigned(blocks), k_warps * 32, 0, stream>>>(wt, n_in, n_out, x, y);
    else
        matvec_kernel<W, false><<<unsigned(blocks), k_warps * 32, 0, stream>>>(wt, n_in, n_out, x, y);
    return cudaGetLastError();
}

} // namespace

cudaError_t launch_matvec(const void *w, ElemType type, int64_t n_in, int64_t n_out, const float *x, float *y,
                          cudaStream_t stream)
{
    if (n_in <= 0 || n_out <= 0)
        return cudaErrorInvalidValue;
    switch (type) {
    case ElemType::F32: return launch_typed<float>(w, n_in, n_out, x, y, stream);
    case ElemType::F16: return launch_typed<__half>(w, n_in, n_out, x, y, stream);
    case ElemType::BF16: return launch_typed<__nv_bfloat16>(w, n_in, n_out, x, y, stream);
    }
    return cudaErrorInvalidValue;
}

} // namespace longscope::cuda
