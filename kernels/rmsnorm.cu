// RMSNorm (Zhang & Sennrich 2019) as LLaMA uses it: each row scaled by the reciprocal of its
// root mean square, then by the learned weight. One thread block per row; the sum of squares
// is reduced with warp shuffles, then across warps through shared memory. The weight is
// (weight_offset + w) in float, as the CPU's rmsnorm forms it. Every thread writes only the
// elements it read after the whole row was summed, so y may be x.
#include "rmsnorm.cuh"

namespace longscope::cuda {

namespace {

constexpr int k_threads = 256;

// With `residual`, x[i] += residual[i] first (written back), and the row normalised is the sum:
// the same values as an add and then RMSNorm.
__global__ void rmsnorm_kernel(float *x, const float *residual, const float *__restrict__ weight, float *y, int n,
                               float eps, float weight_offset)
{
    float *xr = x + size_t(blockIdx.x) * n;
    float *yr = y + size_t(blockIdx.x) * n;
    float ss = 0.0f;
    if (residual) {
        const float *rr = residual + size_t(blockIdx.x) * n;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = xr[i] + rr[i];
            xr[i] = v;
            ss += v * v;
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            ss += xr[i] * xr[i];
    }
    for (int off = 16; off > 0; off >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, off);
    __shared__ float warp_sums[k_threads / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0)
        warp_sums[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = lane < int(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, off);
        if (lane == 0)
            warp_sums[0] = ss;
    }
    __syncthreads();
    const float scale = rsqrtf(warp_sums[0] / float(n) + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = xr[i] * scale * (weight[i] + weight_offset);
}

} // namespace

void launch_rmsnorm(const float *x, const float *weight, float *y, int rows, int n, float eps, float weight_offset,
                    cudaStream_t stream)
{
    if (rows <= 0 || n <= 0)
        return;
    // x is only read when there is no residual.
    rmsnorm_kernel<<<rows, k_threads, 0, stream>>>(const_cast<float *>(x), nullptr, weight, y, n, eps, weight_offset);
}

void launch_add_rmsnorm(float *x, const float *residual, const float *weight, float *y, int rows, int n, float eps,
                        float weight_offset, cudaStream_t stream)
{
    if (rows <= 0 || n <= 0)
        return;
    rmsnorm_kernel<<<rows, k_threads, 0, stream>>>(x, residual, weight, y, n, eps, weight_offset);
}

} // namespace longscope::cuda
