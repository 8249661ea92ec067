// Rotary position embedding on the device, and the per-element rotation the attention kernels
// apply to keys cached before RoPE while they load them.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace longscope::cuda {

// Pair layouts, numbered as longscope::RopeStyle: Interleaved (GPT-J / original LLaMA, pairs
// (2i, 2i+1)) and RotateHalf (GPT-NeoX / Hugging Face, pairs (i, i + n_rot/2)).
constexpr int k_rope_interleaved = 0;
constexpr int k_rope_rotate_half = 1;

#ifdef __CUDACC__
// inv_freq[i] = base^(-2i/n_rot), in double as the CPU's rope_inv_freq.
__device__ __forceinline__ double rope_inv_freq(double base, int i, int n_rot)
{
    return pow(base, -2.0 * double(i) / double(n_rot));
}

// Element d of one head vector `head` (head_dim floats) after rotating its first n_rot dims for
// position `pos`: the pair (a, b) holding d, as the complex number x_a + i x_b, times
// e^{i pos inv_freq[pair]}, the angle and its cosine and sine in double, the product in float
// (the CPU's rope()). inv_freq holds n_rot/2 values.
__device__ __forceinline__ float rope_rotated_element(const float *head, int d, int n_rot, int style, double pos,
                                                      const double *inv_freq)
{
    if (d >= n_rot)
        return head[d];
    const int half = n_rot / 2;
    int i, a, b;
    if (style == k_rope_interleaved) {
        i = d >> 1;
        a = 2 * i;
        b = a + 1;
    } else {
        i = d < half ? d : d - half;
        a = i;
        b = i + half;
    }
    double s, c;
    sincos(pos * inv_freq[i], &s, &c);
    const float cf = float(c), sf = float(s);
    const float x0 = head[a], x1 = head[b];
    return d == a ? x0 * cf - x1 * sf : x0 * sf + x1 * cf;
}
#endif

// Rotates, in place, the first n_rot dims of every head of x [n_tokens, n_heads, head_dim].
// Token t sits at position positions[t] (device array of doubles) or, when positions is null,
// at (pos0 + t) * pos_scale. inv_freq[i] = base^(-2i/n_rot): an NTK alpha is a larger base.
cudaError_t launch_rope(float *x, int64_t n_tokens, int n_heads, int head_dim, int n_rot, int style,
                        const double *positions, double pos0, double pos_scale, double base, cudaStream_t stream);

// Copies keys j0 .. j0+n_keys-1 (rows of n_heads * head_dim floats, row k of src at
// src + k * src_stride) into dst (rows of n_heads * head_dim, packed) rotated for position
// j * pos_scale: the cache of keys stored before RoPE, as attention sees it.
cudaError_t launch_rope_keys(const float *src, int64_t src_stride, float *dst, int64_t j0, int64_t n_keys, int n_heads,
                             int head_dim, int n_rot, int style, double pos_scale, double base, cudaStream_t stream);

} // namespace longscope::cuda
