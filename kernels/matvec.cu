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

// Eight 2-byte values, or four floats, of one 16-byte load.
template <typename W>
struct Pack {
    static constexpr int n = 16 / int(sizeof(W));
};

template <typename W>
__device__ __forceinline__ void unpack(const uint4 &raw, float *out)
{
    const W *v = reinterpret_cast<const W *>(&raw);
#pragma unroll
    for (int k = 0; k < Pack<W>::n; ++k)
        out[k] = to_float(v[k]);
}

// T: the largest token count the instance handles (1, or k_matvec_max_tokens with n_tokens
// telling how many). VEC: rows of whole 16-byte groups at 16-byte addresses (and x likewise).
template <typename W, int T, bool VEC>
__global__ void __launch_bounds__(k_warps * 32)
    matvec_kernel(const W *__restrict__ w, int64_t n_in, int64_t n_out, const float *__restrict__ x,
                  float *__restrict__ y, int n_tokens)
{
    const int lane = threadIdx.x % 32;
    const int64_t row = int64_t(blockIdx.x) * k_warps + threadIdx.x / 32;
    if (row >= n_out)
        return;
    const W *wr = w + row * n_in;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t)
        acc[t] = 0.0f;
    if constexpr (VEC) {
        constexpr int P = Pack<W>::n;
#pragma unroll 4
        for (int64_t i = int64_t(lane) * P; i < n_in; i += 32 * P) {
            const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(wr + i));
            float wf[P];
            unpack<W>(raw, wf);
#pragma unroll
            for (int t = 0; t < T; ++t) {
                if (t >= n_tokens)
                    break;
                const float *xt = x + t * n_in + i;
#pragma unroll
                for (int k = 0; k < P; k += 4) {
                    const float4 xv = __ldg(reinterpret_cast<const float4 *>(xt + k));
                    acc[t] += wf[k] * xv.x + wf[k + 1] * xv.y + wf[k + 2] * xv.z + wf[k + 3] * xv.w;
                }
            }
        }
    } else {
        for (int64_t i = lane; i < n_in; i += 32) {
            const float wf = to_float(wr[i]);
#pragma unroll
            for (int t = 0; t < T; ++t) {
                if (t >= n_tokens)
                    break;
                acc[t] += wf * x[t * n_in + i];
            }
        }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
        if (t >= n_tokens)
            break;
        const float s = warp_sum(acc[t]);
        if (lane == 0)
            y[t * n_out + row] = s;
    }
}

template <typename W, int T>
cudaError_t launch_typed(const void *w, int64_t n_in, int64_t n_out, const float *x, float *y, int n_tokens,
                         cudaStream_t stream)
{
    const int64_t blocks = (n_out + k_warps - 1) / k_warps;
    if (blocks > 2147483647)
        return cudaErrorInvalidValue;
    const bool vec = n_in % Pack<W>::n == 0 && n_in % 4 == 0 && (reinterpret_cast<uintptr_t>(w) % 16) == 0 &&
                     (reinterpret_cast<uintptr_t>(x) % 16) == 0;
    const W *wt = static_cast<const W *>(w);
    if (vec)
        matvec_kernel<W, T, true><<<unsigned(blocks), k_warps * 32, 0, stream>>>(wt, n_in, n_out, x, y, n_tokens);
    else
        matvec_kernel<W, T, false><<<unsigned(blocks), k_warps * 32, 0, stream>>>(wt, n_in, n_out, x, y, n_tokens);
    return cudaGetLastError();
}

template <typename W>
cudaError_t launch_tokens(const void *w, int64_t n_in, int64_t n_out, const float *x, float *y, int n_tokens,
                          cudaStream_t stream)
{
    if (n_tokens == 1)
        return launch_typed<W, 1>(w, n_in, n_out, x, y, 1, stream);
    return launch_typed<W, k_matvec_max_tokens>(w, n_in, n_out, x, y, n_tokens, stream);
}

} // namespace

cudaError_t launch_matvec(const void *w, ElemType type, int64_t n_in, int64_t n_out, const float *x, float *y,
                          int n_tokens, cudaStream_t stream)
{
    if (n_tokens < 1 || n_tokens > k_matvec_max_tokens || n_in <= 0 || n_out <= 0)
        return cudaErrorInvalidValue;
    switch (type) {
    case ElemType::F32: return launch_tokens<float>(w, n_in, n_out, x, y, n_tokens, stream);
    case ElemType::F16: return launch_tokens<__half>(w, n_in, n_out, x, y, n_tokens, stream);
    case ElemType::BF16: return launch_tokens<__nv_bfloat16>(w, n_in, n_out, x, y, n_tokens, stream);
    }
    return cudaErrorInvalidValue;
}

} // namespace longscope::cuda
