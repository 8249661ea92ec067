// CPU attention variants over a KV cache, all computing, for each query i at position
// q_pos0 + i and head h (grouped-query: kv head h / (n_head / n_head_kv)):
//   out[i, h] = sum_j softmax_j(q[i, h] . k[j, kvh] / sqrt(head_dim)) v[j, kvh]
// over the keys j the query may see: j < n_kv[seq] and j <= q_pos0 + i (causal, aligned
// bottom-right, so queries appended to a cache see everything before them).
#pragma once

#include "longscope/hparams.h"
#include "longscope/types.h"

#include <cstdint>
#include <span>
#include <vector>

namespace longscope {

class ThreadPool;

// Rotation applied to keys as they are loaded, for caches that store keys before RoPE:
// key j is rotated for position j * pos_scale with inv_freq[i] = base^(-2i/n_rot).
struct KeyRotation {
    std::span<const double> inv_freq; // [n_rot / 2]
    double pos_scale = 1.0;
    int n_rot = 0;
    RopeStyle style = RopeStyle::Interleaved;
};

// Memory plain attention reuses from call to call (AttentionProblem::workspace): grown as
// needed, kept until released.
struct AttentionWorkspace {
    std::vector<float> floats;
    void release() { std::vector<float>().swap(floats); }
};

struct AttentionProblem {
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;

    const float *q = nullptr; // [n_q, n_head, head_dim]
    int64_t n_q = 0;
    int64_t q_pos0 = 0;       // position of query 0; query i sits at q_pos0 + i

    // [n_kv, n_head_kv * head_dim] (row i = position i), each row encoded as k_type / v_type
    // (F32, F16, or Q8_0 / Q4_0 blocks, head_dim then a multiple of 32). Encoded rows are
    // decoded a tile (or a few rows) at a time into per-worker buffers, never all at once;
    // Q8_0 / Q4_0 keys stored rotated are instead packed a tile at a time and scored in
    // integers against the query rounded to blocks of 32 (cpu/attention_qk.h), in every path.
    const void *k = nullptr;
    const void *v = nullptr;
    DType k_type = DType::F32;
    DType v_type = DType::F32;
    int64_t n_kv = 0;         // keys in the cache (>= q_pos0 + n_q for causal attention)

    const KeyRotation *rotate_keys = nullptr; // null: keys are already rotated

    float scale = 0.0f;       // score scale; 0: 1 / sqrt(head_dim)
    float softcap = 0.0f;     // scores -> softcap * tanh(scores / softcap); 0: none
    int64_t window = 0;       // query at position p sees keys j > p - window; 0: all

    float *out = nullptr;     // [n_q, n_head, head_dim]

    // Plain attention's score matrix, mask and rotated keys live here where it is given (a
    // backend keeps one for the layers of a forward step, so that the pages of a large score
    // matrix are faulted in and zeroed once per step instead of once per layer); null: the
    // call allocates its own.
    AttentionWorkspace *workspace = nullptr;
};

// Bytes of scratch an attention call held at its peak, for the memory ledger.
struct AttentionStats {
    uint64_t scratch_bytes = 0;
    int64_t tiles_computed = 0;
    int64_t tiles_skipped = 0;
};

// Plain attention as in the original LLaMA code: the [n_head, n_q, n_kv] score matrix is
// materialised. Without `causal_flash` an explicit [n_q, n_kv] additive causal mask tensor is
// built and added to the scores; with it, causality comes from positions (scores above the
// diagonal are never computed).
AttentionStats attention_naive(ThreadPool &pool, const AttentionProblem &p, bool causal_flash);

// Queries are processed in blocks of this many rows per head (FlashAttention-2's Br, with
// the key tile as Bc), capped so a worker's score tile [group * block, tile] stays small.
constexpr int attention_query_block(int tile) { return tile < 64 ? tile : 64; }

// Up to this many queries (decode), tiled attention splits the keys rather than the heads among
// workers: attention_key_splits contiguous ranges of key tiles, each with its own running
// softmax state, merged at the end (flash-decoding). The count is fixed, so results do not
// depend on the number of threads.
constexpr int64_t attention_split_keys_max_queries = 4;
constexpr int64_t attention_key_splits = 16;

// Tiled attention with an online softmax (running max and sum, rescaled per key tile of
// `tile` keys); never holds more than one tile of scores per worker. With `causal_flash`,
// causality comes from positions and tiles entirely above the diagonal are skipped; without
// it, an explicit mask tile is built and applied for every tile.
// A tile in the stats is one (query head, query block of attention_query_block(tile) queries,
// key tile) triple: tiles_computed + tiles_skipped = n_head * ceil(n_q / block) *
// ceil(n_kv / tile). A key tile is skipped when its first key lies beyond the position of the
// block's last query (causal_flash only), or when, in a sliding window, its last key lies before
// the window of the block's first query (with or without causal_flash); every key of a skipped
// tile is hidden from every query of the block. The decode path (attention_split_keys_max_queries
// queries or fewer) counts its queries as one block. Soft-capping and sliding windows are applied
// per tile as attention_naive applies them. scratch_bytes is the sum of the per-worker buffers, independent of n_kv.
AttentionStats attention_tiled(ThreadPool &pool, const AttentionProblem &p, bool causal_flash,
                               int tile = 64);

// Whether attention_tiled runs prefill's scores and values on the AMX tiles for keys cached as
// k_type (rotated as they are read or not) and heads of head_dim, where its key tiles are a
// multiple of 32 keys: the kernel table uses the tiles for attention, and the keys are not
// scored in integers. bench's prefill roofline asks the same.
bool attention_tiles_take(DType k_type, bool keys_rotated_on_load, int head_dim);

// The exponential the AMX path's softmax takes of scores less their row's maximum (x <= 0, -inf
// where masked): y[i] = e^x[i] for n values (a multiple of 16). Needs cpu_features().x86_64_v4.
// Exposed for tst_attention.
void softmax_exp_x86_64_v4(const float *x, float *y, int64_t n);

} // namespace longscope
