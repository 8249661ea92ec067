// Rotary position embedding on the device, and the per-element rotation the attention kernels
// apply to keys cached before RoPE while they load them. The frequencies are never computed
// here: every launch takes the table inv_freq[i] (n_rot / 2 doubles in device memory) that the
// engine computes on the host with the CPU backend's code (base^(-2i/n_rot), divided by the
// per-dimension factors of YaRN, llama3 or LongRoPE).
#pragma once

#include "kv_format.cuh"

#include <cstdint>
#include <cuda_runtime.h>

namespace longscope::cuda {

// Pair layouts, numbered as longscope::RopeStyle: Interleaved (GPT-J / original LLaMA, pairs
// (2i, 2i+1)) and RotateHalf (GPT-NeoX / Hugging Face, pairs (i, i + n_rot/2)).
constexpr int k_rope_interleaved = 0;
constexpr int k_rope_rotate_half = 1;

#ifdef __CUDACC__
// The pair (a, b) holding rotary dim d < n_rot, and its frequency index i.
__device__ __forceinline__ void rope_pair(int d, int n_rot, int style, int &i, int &a, int &b)
{
    const int half = n_rot / 2;
    if (style == k_rope_interleaved) {
        i = d >> 1;
        a = 2 * i;
        b = a + 1;
    } else {
        i = d < half ? d : d - half;
        a = i;
        b = i + half;
    }
}

// Component a (first) or b of the pair (x0, x1) as the complex number x0 + i x1 times
// e^{i angle}: the angle, its cosine and sine in double, the product in float (the CPU's rope()).
__device__ __forceinline__ float rope_rotate(bool first, float x0, float x1, double angle)
{
    double s, c;
    sincos(angle, &s, &c);
    const float cf = float(c), sf = float(s);
    return first ? x0 * cf - x1 * sf : x0 * sf + x1 * cf;
}

// Element d of the head of kv head `kvh` of cached row j (values e0 .. e0 + head_dim - 1 of the
// row, e0 = kvh * head_dim) after rotating its first n_rot dims for position `pos`.
__device__ __forceinline__ float rope_rotated_element(const KvRows &rows, int64_t j, int64_t e0, int d, int n_rot,
                                                      int style, double pos, const double *inv_freq)
{
    if (d >= n_rot)
        return kv_load(rows, j, e0 + d);
    int i, a, b;
    rope_pair(d, n_rot, style, i, a, b);
    return rope_rotate(d == a, kv_load(rows, j, e0 + a), kv_load(rows, j, e0 + b), pos * inv_freq[i]);
}
#endif

// Rotates, in place, the first n_rot dims of every head of x [n_tokens, n_heads, head_dim].
// Token t sits at position positions[t] (device array of doubles) or, when positions is null,
// at (pos0 + t * pos_step) * pos_scale; pair i turns by position * inv_freq[i].
cudaError_t launch_rope(float *x, int64_t n_tokens, int n_heads, int head_dim, int n_rot, int style,
                        const double *positions, double pos0, double pos_step, double pos_scale,
                        const double *inv_freq, cudaStream_t stream);

// launch_rope over two tensors of the same tokens in one launch (a step's queries and keys):
// x0 with n_heads0 heads and x1 with n_heads1, consecutive positions (pos0 + t * pos_step) *
// pos_scale. The same results as two launch_rope calls.
cudaError_t launch_rope_pair(float *x0, int n_heads0, float *x1, int n_heads1, int64_t n_tokens, int head_dim,
                             int n_rot, int style, double pos0, double pos_step, double pos_scale,
                             const double *inv_freq, cudaStream_t stream);

// Copies keys j0 .. j0+n_keys-1 (row k of src, n_heads * head_dim values in its encoding) into
// dst (packed float rows) rotated for position j * pos_scale: the cache of keys stored before
// RoPE, as attention sees it.
cudaError_t launch_rope_keys(const KvRows &src, float *dst, int64_t j0, int64_t n_keys, int n_heads, int head_dim,
                             int n_rot, int style, double pos_scale, const double *inv_freq, cudaStream_t stream);

} // namespace longscope::cuda
