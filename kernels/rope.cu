// Rotary position embedding (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
// Position Embedding"): each pair of dims is rotated by pos * inv_freq[i]. Every scaling method
// is a different table or different positions, both given: NTK-aware scaling (bloc97, 2023) and
// dynamic scaling are a larger base, linear scaling multiplies the positions, YaRN, llama3 and
// LongRoPE divide the frequencies by per-dimension factors. The pair layouts and the arithmetic
// (angle, cosine and sine in double, rotation in float) follow the CPU reference rope() in
// engine/src/cpu/ops.cpp.
//
// launch_rope: one block per token; the block computes the token's n_rot/2 cosines and sines
// once into shared memory, then its threads rotate every (head, pair).
// launch_rope_keys: one thread per output element (rope_rotated_element), used for caches that
// hold keys before RoPE (rotated as they are read, like the CPU's load_keys).
#include "rope.cuh"

namespace longscope::cuda {

namespace {

constexpr int k_threads = 128;

// Block (t, y): token t of x0 (y = 0, n_heads0 heads) or of x1 (y = 1, n_heads1 heads).
__global__ void rope_kernel(float *x0, int n_heads0, float *x1, int n_heads1, int head_dim, int n_rot, int style,
                            const double *positions, double pos0, double pos_step, double pos_scale,
                            const double *inv_freq)
{
    float *x = blockIdx.y ? x1 : x0;
    const int n_heads = blockIdx.y ? n_heads1 : n_heads0;
    extern __shared__ float cs[]; // cos [half], then sin [half]
    const int half = n_rot / 2;
    const int64_t t = blockIdx.x;
    const double pos = positions ? positions[t] : (pos0 + double(t) * pos_step) * pos_scale;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos(pos * inv_freq[i], &s, &c);
        cs[i] = float(c);
        cs[half + i] = float(s);
    }
    __syncthreads();
    float *row = x + t * n_heads * head_dim;
    for (int e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
        const int h = e / half, i = e % half;
        const int a = style == k_rope_interleaved ? 2 * i : i;
        const int b = style == k_rope_interleaved ? 2 * i + 1 : i + half;
        float *v = row + int64_t(h) * head_dim;
        const float x0 = v[a], x1 = v[b], c = cs[i], s = cs[half + i];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

__global__ void rope_keys_kernel(KvRows src, float *__restrict__ dst, int64_t j0, int64_t n_keys, int n_heads,
                                 int head_dim, int n_rot, int style, double pos_scale, const double *inv_freq)
{
    const int64_t width = int64_t(n_heads) * head_dim;
    const int64_t total = n_keys * width;
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t k = idx / width, e = idx % width;
        const int h = int(e / head_dim), d = int(e % head_dim);
        dst[idx] = rope_rotated_element(src, k, int64_t(h) * head_dim, d, n_rot, style, double(j0 + k) * pos_scale,
                                        inv_freq);
    }
}

} // namespace

cudaError_t launch_rope(float *x, int64_t n_tokens, int n_heads, int head_dim, int n_rot, int style,
                        const double *positions, double pos0, double pos_step, double pos_scale,
                        const double *inv_freq, cudaStream_t stream)
{
    if (n_tokens <= 0 || n_heads <= 0 || n_rot <= 0)
        return cudaSuccess;
    if (n_rot % 2 != 0 || n_rot > head_dim || n_tokens > 2147483647 || !inv_freq)
        return cudaErrorInvalidValue;
    rope_kernel<<<unsigned(n_tokens), k_threads, size_t(n_rot) * sizeof(float), stream>>>(
        x, n_heads, nullptr, 0, head_dim, n_rot, style, positions, pos0, pos_step, pos_scale, inv_freq);
    return cudaGetLastError();
}

cudaError_t launch_rope_pair(float *x0, int n_heads0, float *x1, int n_heads1, int64_t n_tokens, int head_dim,
                             int n_rot, int style, double pos0, double pos_step, double pos_scale,
                             const double *inv_freq, cudaStream_t stream)
{
    if (n_tokens <= 0 || n_rot <= 0 || (n_heads0 <= 0 && n_heads1 <= 0))
        return cudaSuccess;
    if (n_rot % 2 != 0 || n_rot > head_dim || n_tokens > 2147483647 || !inv_freq || n_heads0 < 0 || n_heads1 < 0)
        return cudaErrorInvalidValue;
    rope_kernel<<<dim3(unsigned(n_tokens), 2), k_threads, size_t(n_rot) * sizeof(float), stream>>>(
        x0, n_heads0, x1, n_heads1, head_dim, n_rot, style, nullptr, pos0, pos_step, pos_scale, inv_freq);
    return cudaGetLastError();
}

cudaError_t launch_rope_keys(const KvRows &src, float *dst, int64_t j0, int64_t n_keys, int n_heads, int head_dim,
                             int n_rot, int style, double pos_scale, const double *inv_freq, cudaStream_t stream)
{
    if (n_keys <= 0 || n_heads <= 0 || head_dim <= 0)
        return cudaSuccess;
    if (n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim || (n_rot > 0 && !inv_freq))
        return cudaErrorInvalidValue;
    const int64_t total = n_keys * n_heads * head_dim;
    int64_t blocks = (total + 255) / 256;
    if (blocks > 65536)
        blocks = 65536;
    // Row k of src is row j0 + k of the cache: the source pointer is offset by the caller.
    rope_keys_kernel<<<unsigned(blocks), 256, 0, stream>>>(src, dst, j0, n_keys, n_heads, head_dim, n_rot, style,
                                                          pos_scale, inv_freq);
    return cudaGetLastError();
}

} // namespace longscope::cuda
