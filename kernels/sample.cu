// Greedy sampling: argmax over a row of logits as a block-wide tree reduction of (value,
// index) pairs (Harris, "Optimizing Parallel Reduction in CUDA"): each thread scans a strided
// slice, then warp shuffles and one pair per warp through shared memory. The comparison
// prefers the larger value and, between equal values, the lower index, so the result is the
// CPU sampler's argmax whatever the order in which the pairs meet.
#include "sample.cuh"

#include <math.h>

namespace longscope::cuda {

namespace {

constexpr int k_threads = 1024;

// Whether (v, i) beats (bv, bi). NaN compares false either way, so it never beats anything.
__device__ __forceinline__ bool beats(float v, int64_t i, float bv, int64_t bi)
{
    return v > bv || (v == bv && i < bi);
}

__global__ void argmax_kernel(const float *__restrict__ logits, int64_t n, int32_t *__restrict__ out)
{
    __shared__ float warp_v[32];
    __shared__ int64_t warp_i[32];
    const float *row = logits + int64_t(blockIdx.x) * n;
    // Start from (-inf, n): any -inf entry beats it through the index, so a row of -inf gives 0.
    float bv = -INFINITY;
    int64_t bi = n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = row[i];
        if (beats(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_down_sync(0xffffffffu, bv, off);
        const int64_t oi = __shfl_down_sync(0xffffffffu, bi, off);
        if (beats(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        warp_v[warp] = bv;
        warp_i[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        const int n_warps = int(blockDim.x / 32);
        bv = lane < n_warps ? warp_v[lane] : -INFINITY;
        bi = lane < n_warps ? warp_i[lane] : n;
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_down_sync(0xffffffffu, bv, off);
            const int64_t oi = __shfl_down_sync(0xffffffffu, bi, off);
            if (beats(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (lane == 0)
            out[blockIdx.x] = int32_t(bi < n ? bi : 0);
    }
}

} // namespace

cudaError_t launch_argmax(const float *logits, int64_t n_rows, int64_t n, int32_t *out, cudaStream_t stream)
{
    if (n_rows <= 0)
        return cudaSuccess;
    if (n <= 0 || n > 2147483647 || n_rows > 2147483647)
        return cudaErrorInvalidValue;
    argmax_kernel<<<unsigned(n_rows), k_threads, 0, stream>>>(logits, n, out);
    return cudaGetLastError();
}

} // namespace longscope::cuda
