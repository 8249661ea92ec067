// Attention over a KV cache on the device, with the semantics of the CPU reference
// (engine/src/cpu/attention.h): for query i at position p = q_pos0 + i and head h (kv head
// h / (n_head / n_head_kv)),
//   out[i, h] = sum_j softmax_j(cap(q[i, h] . k[j, kvh] * scale)) v[j, kvh]
// over j < n_kv, j <= p (causal, aligned bottom-right) and, with a sliding window, j > p - window;
// cap(s) = softcap * tanh(s / softcap) when softcap > 0. A row that sees no key gets zeros.
// Keys and values are read from the cache in its encoding (kv_format.cuh).
#pragma once

#include "kv_format.cuh"

#include <cstdint>
#include <cuda_runtime.h>

namespace longscope::cuda {

struct AttentionArgs {
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    const float *q = nullptr; // [n_q, n_head, head_dim]
    int64_t n_q = 0;
    int64_t q_pos0 = 0;
    KvRows k;                 // [n_kv] rows of n_head_kv * head_dim values
    KvRows v;                 // the same layout
    int64_t n_kv = 0;
    float *out = nullptr;     // [n_q, n_head, head_dim]

    float scale = 0.0f;       // score scale (set: the launchers do not default it)
    float softcap = 0.0f;     // 0: none
    int64_t window = 0;       // 0: none

    // Keys stored before RoPE: key j is rotated for position j * pos_scale with the table
    // inv_freq (device, n_rot / 2 doubles) as it is loaded.
    bool rotate_keys = false;
    int n_rot = 0;
    int rope_style = 0;
    const double *inv_freq = nullptr;
    double pos_scale = 1.0;
};

// Query and key tile of the memory-efficient kernel for heads above
// k_attn_regtile_max_head_dim dims (smaller heads take the register-tiled kernel, whose tiles
// attention_tiled_shape gives).
constexpr int k_attn_q_tile = 16;
constexpr int k_attn_k_tile = 32;
constexpr int k_attn_max_head_dim = 256;
constexpr int k_attn_regtile_max_head_dim = 128;

// The query and key tile launch_attention_tiled uses for heads of head_dim dims.
void attention_tiled_shape(int head_dim, int *q_tile, int *k_tile);

// Scratch (bytes) the plain kernel needs: scores [n_head, n_q, n_kv], the mask [n_q, n_kv]
// when `causal_flash` is off, rotated keys [n_kv, n_head_kv * head_dim] floats when rotating.
size_t attention_naive_scratch(const AttentionArgs &a, bool causal_flash);

// Plain attention: the score matrix materialised, a row softmax, the weighted sum of values.
// Without causal_flash an explicit additive mask (0 / -inf, the window included) is built and
// added to all n_kv scores of a row; with it only the keys up to the query's position are
// scored and those before its window set to -inf.
cudaError_t launch_attention_naive(const AttentionArgs &a, bool causal_flash, void *scratch, cudaStream_t stream);

// Memory-efficient attention after FlashAttention-2: one block per (query head, tile of
// queries), key tiles with an online softmax (attention_tiled_shape: the tile sizes). With
// skip_masked_tiles, key tiles lying entirely beyond the block's last query position, or
// entirely before the window of its first query, are never loaded; without it they are
// computed and masked (the result is the same, bit for bit). When tile_counter is set, one is
// added to it per (query head, query tile, key tile) computed.
cudaError_t launch_attention_tiled(const AttentionArgs &a, bool skip_masked_tiles, unsigned long long *tile_counter,
                                   cudaStream_t stream);

// Split-KV (flash-decoding) attention: the visible keys of every (query, head) are cut into
// n_splits ranges, one block each writing a partial (max, sum, unnormalised output), and a
// combine kernel merges them. Meant for few queries over long caches. Where the query heads of
// a KV head fit one block (n_head / n_head_kv * head_dim <= 1024) and a range's scores fit
// shared memory, one block serves them all and reads the range's keys and values once.
// Scratch:
size_t attention_split_scratch(const AttentionArgs &a, int n_splits);
// The number of ranges chosen when the caller leaves it to the kernel (0): about 256 keys each.
int attention_split_default(int64_t n_kv);
constexpr int k_attn_split_max_chunk = 4096; // keys per range at most (shared memory)
cudaError_t launch_attention_split(const AttentionArgs &a, int n_splits, void *scratch, cudaStream_t stream);

} // namespace longscope::cuda
