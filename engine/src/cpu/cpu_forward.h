// The LLaMA forward pass on the CPU: embedding, per layer RMSNorm, Q/K/V, RoPE, grouped-query
// attention over the KV cache, output projection, residual, RMSNorm, SwiGLU FFN, residual;
// final norm and LM head.
#pragma once

#include "cpu/thread_pool.h"
#include "kv/kv_cache.h"
#include "longscope/model.h"

#include <cstdint>
#include <span>
#include <vector>

namespace longscope {

class CpuForward {
public:
    CpuForward(const Model &model, int n_ctx, int n_threads);

    // Evaluates tokens at positions n_past .. n_past + n - 1, writing their K/V into the
    // cache. Returns logits [n_vocab] of the last token, or [n, n_vocab] with all_logits.
    std::span<const float> eval(std::span<const int32_t> tokens, int n_past, bool all_logits);
    int n_threads() const { return m_pool.size(); }

private:
    void ensure_scratch(int64_t n);
    void attention(int layer, int64_t n, int n_past);
    double rope_base_for(int64_t seq_len) const;

    const Model &m_model;
    const HParams &m_hp;
    ThreadPool m_pool;
    KvCache m_kv;

    // Scratch, sized for the largest batch seen: [n, width].
    std::vector<float> m_x, m_xn, m_q, m_k, m_v, m_attn, m_proj, m_gate, m_up, m_logits;
    std::vector<double> m_pos, m_inv_freq;
};

} // namespace longscope
