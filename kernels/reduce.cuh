// Warp and block reductions shared by the kernels: butterfly shuffles within a warp
// (__shfl_xor_sync), then one value per warp through shared memory. Every thread of the block
// must call the block reductions (they synchronise), and the block size must be a multiple of
// 32 no larger than 1024.
#pragma once

#include <cuda_runtime.h>
#include <math.h>

namespace longscope::cuda {

__device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// `scratch` holds at least 32 floats; the result is returned to every thread.
__device__ __forceinline__ float block_sum(float v, float *scratch)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = int(blockDim.x / 32);
    v = warp_sum(v);
    __syncthreads(); // scratch may still be read by a previous reduction
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *scratch)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = int(blockDim.x / 32);
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

} // namespace longscope::cuda
