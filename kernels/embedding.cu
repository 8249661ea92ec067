// Embedding gather: each output row is one row of the token embedding table, widened from
// F32/F16/BF16 to F32 exactly (IEEE 754 binary16 and bfloat16 are subsets of binary32), as the
// CPU reference weight_row_f32 (engine/src/cpu/ops.cpp) does. One grid row per token, threads
// over the embedding width, so each row is read with coalesced loads.
#include "embedding.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace longscope::cuda {

namespace {

constexpr int k_threads = 256;

template <typename T> __device__ __forceinline__ float widen(T v);
template <> __device__ __forceinline__ float widen<float>(float v) { return v; }
template <> __device__ __forceinline__ float widen<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void embedding_kernel(const T *__restrict__ table, int64_t n_rows, int64_t n_embd,
                                 const int32_t *__restrict__ tokens, float *__restrict__ out)
{
    const int64_t t = blockIdx.y;
    const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= n_embd)
        return;
    const int32_t id = tokens[t];
    out[t * n_embd + e] = (id >= 0 && id < n_rows) ? widen<T>(table[int64_t(id) * n_embd + e]) : 0.0f;
}

} // namespace

cudaError_t launch_embedding(const void *table, ElemType type, int64_t n_rows, int64_t n_embd, const int32_t *tokens,
                             int64_t n_tokens, float *out, cudaStream_t stream)
{
    if (n_tokens <= 0 || n_embd <= 0)
        return cudaSuccess;
    if (n_tokens > 65535)
        return cudaErrorInvalidValue; // grid.y limit; callers split larger batches
    const dim3 grid(unsigned((n_embd + k_threads - 1) / k_threads), unsigned(n_tokens));
    switch (type) {
    case ElemType::F32:
        embedding_kernel<<<grid, k_threads, 0, stream>>>(static_cast<const float *>(table), n_rows, n_embd, tokens, out);
        break;
    case ElemType::F16:
        embedding_kernel<<<grid, k_threads, 0, stream>>>(static_cast<const __half *>(table), n_rows, n_embd, tokens, out);
        break;
    case ElemType::BF16:
        embedding_kernel<<<grid, k_threads, 0, stream>>>(static_cast<const __nv_bfloat16 *>(table), n_rows, n_embd,
                                                         tokens, out);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

} // namespace longscope::cuda
