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

// Block b belongs to matrix m with first[m] <= b < first[m + 1].
struct Group {
    const void *w[k_matvec_group_max];
    float *y[k_matvec_group_max];
    int64_t n_out[k_matvec_group_max];
    int64_t first[k_matvec_group_max + 1];
    int count;
};

// VEC: rows of whole 16-byte groups at 16-byte addresses (and x likewise).
template <typename W, bool VEC>
__global__ void __launch_bounds__(k_warps * 32)
    matvec_kernel(Group g, int64_t n_in, const float *__restrict__ x)
{
    const int lane = threadIdx.x % 32;
    int m = 0;
    while (m + 1 < g.count && int64_t(blockIdx.x) >= g.first[m + 1])
        ++m;
    const int64_t row = (int64_t(blockIdx.x) - g.first[m]) * k_warps + threadIdx.x / 32;
    if (row >= g.n_out[m])
        return;
    float *__restrict__ y = g.y[m];
    const W *__restrict__ wr = static_cast<const W *>(g.w[m]) + row * n_in;
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
cudaError_t launch_typed(Group &g, int64_t n_in, const float *x, cudaStream_t stream)
{
    bool vec = n_in % k_pack<W> == 0 && (reinterpret_cast<uintptr_t>(x) % 16) == 0;
    g.first[0] = 0;
    for (int m = 0; m < g.count; ++m) {
        vec = vec && (reinterpret_cast<uintptr_t>(g.w[m]) % 16) == 0;
        g.first[m + 1] = g.first[m] + (g.n_out[m] + k_warps - 1) / k_warps;
    }
    const int64_t blocks = g.first[g.count];
    if (blocks > 2147483647)
        return cudaErrorInvalidValue;
    if (vec)
        matvec_kernel<W, true><<<unsigned(blocks), k_warps * 32, 0, stream>>>(g, n_in, x);
    else
        matvec_kernel<W, false><<<unsigned(blocks), k_warps * 32, 0, stream>>>(g, n_in, x);
    return cudaGetLastError();
}

} // namespace

cudaError_t launch_matvec_group(const void *const *w, const int64_t *n_out, float *const *y, int count,
                                ElemType type, int64_t n_in, const float *x, cudaStream_t stream)
{
    if (count < 1 || count > k_matvec_group_max || n_in <= 0)
        return cudaErrorInvalidValue;
    Group g{};
    g.count = count;
    for (int m = 0; m < count; ++m) {
        if (n_out[m] <= 0 || !w[m] || !y[m])
            return cudaErrorInvalidValue;
        g.w[m] = w[m];
        g.y[m] = y[m];
        g.n_out[m] = n_out[m];
    }
    switch (type) {
    case ElemType::F32: return launch_typed<float>(g, n_in, x, stream);
    case ElemType::F16: return launch_typed<__half>(g, n_in, x, stream);
    case ElemType::BF16: return launch_typed<__nv_bfloat16>(g, n_in, x, stream);
    }
    return cudaErrorInvalidValue;
}

cudaError_t launch_matvec(const void *w, ElemType type, int64_t n_in, int64_t n_out, const float *x, float *y,
                          cudaStream_t stream)
{
    return launch_matvec_group(&w, &n_out, &y, 1, type, n_in, x, stream);
}

} // namespace longscope::cuda
