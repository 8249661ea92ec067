// The LLaMA forward pass on the CPU: embedding, per layer RMSNorm, Q/K/V, RoPE, grouped-query
// attention over the KV cache, output projection, residual, RMSNorm, SwiGLU FFN, residual;
// final norm and LM head.
#pragma once

#include "cpu/thread_pool.h"
#include "longscope/model.h"

#include <cstdint>
#include <span>
#include <vector>

namespace longscope {

class KvStore;

// What one forward call runs with; the session derives it from the live settings.
struct ForwardParams {
    double rope_base = 10000.0;    // base in effect now (model base, dynamic scaling, NTK alpha)
    double pos_scale = 1.0;        // linear rope scaling: positions are multiplied by this
    bool keys_before_rope = false; // the cache holds unrotated keys; attention rotates them
    bool memory_efficient = false; // tiled attention with an online softmax
    bool causal_flash = false;     // causality from positions, masked tiles skipped
};

struct ForwardStats {
    uint64_t scratch_bytes = 0;    // peak activations + attention scratch of the call
    int64_t tiles_skipped = 0;
};

// One sequence's part of a batched forward call.
struct ForwardSegment {
    std::span<const int32_t> tokens; // evaluated at positions n_past .. n_past + n - 1
    int n_past = 0;
    int logits_from = 0;             // logits for tokens from this index on
    KvStore *kv = nullptr;           // holds n_past + n writable rows
    ForwardParams params;
};

// base^(-2i/n_rot) for i < n_rot/2.
std::vector<double> rope_inv_freq(double base, int n_rot);

class CpuForward {
public:
    CpuForward(const Model &model, int n_threads);

    // Evaluates `tokens` at positions n_past .. n_past + n - 1, writing their K/V rows into
    // `kv` (which must already hold n_past + n writable rows). Returns logits for the tokens
    // from index `logits_from` on: [n - logits_from, n_vocab]; empty when logits_from >= n.
    std::span<const float> eval(std::span<const int32_t> tokens, int n_past, int logits_from,
                                KvStore &kv, const ForwardParams &params, ForwardStats &stats);

    // Several sequences in one call: the matrix products run over all their tokens at once,
    // attention runs per sequence against its own cache and length, so sequences of
    // different lengths never see each other or any padding. Logits come back per segment
    // in order, [n_i - logits_from_i, n_vocab] each.
    std::span<const float> eval_batch(std::span<const ForwardSegment> segments, ForwardStats &stats);

    int n_threads() const { return m_pool.size(); }
    ThreadPool &pool() { return m_pool; }
    // Bytes of activation buffers currently held.
    uint64_t scratch_bytes() const;

private:
    void size_scratch(int64_t n);

    const Model &m_model;
    const HParams &m_hp;
    ThreadPool m_pool;

    // Activations for the tokens of one call: [n, width].
    std::vector<float> m_x, m_xn, m_q, m_k, m_v, m_attn, m_proj, m_gate, m_up, m_logits;
    std::vector<double> m_pos;
};

} // namespace longscope
