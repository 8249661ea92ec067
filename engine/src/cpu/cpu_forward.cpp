#include "cpu/cpu_forward.h"

#include "cpu/attention.h"
#include "cpu/ops.h"
#include "kv/kv_store.h"
#include "longscope/errors.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace longscope {

std::vector<double> rope_inv_freq(double base, int n_rot)
{
    std::vector<double> f(size_t(n_rot / 2));
    for (int i = 0; i < n_rot / 2; ++i)
        f[size_t(i)] = std::pow(base, -2.0 * i / n_rot);
    return f;
}

CpuForward::CpuForward(const Model &model, int n_threads)
    : m_model(model), m_hp(model.hparams()), m_pool(n_threads)
{
}

namespace {
// Sizes a buffer to exactly n floats, giving memory back when it held far more (after a long
// prefill, decode steps need one row), so the ledger's scratch is what the step really holds.
void fit(std::vector<float> &v, size_t n)
{
    v.resize(n);
    if (v.capacity() > 2 * n + 4096)
        v.shrink_to_fit();
}
uint64_t bytes_of(const std::vector<float> &v) { return uint64_t(v.capacity()) * sizeof(float); }
} // namespace

void CpuForward::size_scratch(int64_t n)
{
    const size_t e = size_t(n * m_hp.n_embd), ekv = size_t(n * m_hp.n_embd_kv()),
                 f = size_t(n * m_hp.n_ff);
    try {
        for (auto *v : {&m_x, &m_xn, &m_q, &m_attn, &m_proj})
            fit(*v, e);
        fit(m_k, ekv);
        fit(m_v, ekv);
        fit(m_gate, f);
        fit(m_up, f);
    } catch (const std::bad_alloc &) {
        throw OutOfMemory("not enough memory for the activations of a batch of " + std::to_string(n) +
                          " tokens; memory-efficient attention evaluates long prompts in chunks");
    }
}

uint64_t CpuForward::scratch_bytes() const
{
    uint64_t b = 0;
    for (const auto *v : {&m_x, &m_xn, &m_q, &m_k, &m_v, &m_attn, &m_proj, &m_gate, &m_up, &m_logits})
        b += bytes_of(*v);
    return b + matmul_scratch_bytes();
}

std::span<const float> CpuForward::eval(std::span<const int32_t> tokens, int n_past, int logits_from,
                                        KvStore &kv, const ForwardParams &params, ForwardStats &stats)
{
    const ForwardSegment seg{tokens, n_past, logits_from, &kv, params};
    return eval_batch(std::span<const ForwardSegment>(&seg, 1), stats);
}

std::span<const float> CpuForward::eval_batch(std::span<const ForwardSegment> segs, ForwardStats &stats)
{
    const int64_t e = m_hp.n_embd, ekv = m_hp.n_embd_kv(), f = m_hp.n_ff;
    const int hd = m_hp.head_dim();
    const ModelWeights &w = m_model.weights();

    // Row offsets of each segment in the concatenated [n, width] activations.
    std::vector<int64_t> offset(segs.size() + 1, 0);
    for (size_t s = 0; s < segs.size(); ++s)
        offset[s + 1] = offset[s] + int64_t(segs[s].tokens.size());
    const int64_t n = offset.back();
    size_scratch(n);

    for (size_t s = 0; s < segs.size(); ++s)
        for (size_t t = 0; t < segs[s].tokens.size(); ++t)
            weight_row_f32(w.tok_embd, segs[s].tokens[t], m_x.data() + (offset[s] + int64_t(t)) * e);

    m_pos.resize(size_t(n));
    std::vector<std::vector<double>> inv_freq(segs.size());
    std::vector<KeyRotation> rotation(segs.size());
    for (size_t s = 0; s < segs.size(); ++s) {
        const ForwardParams &p = segs[s].params;
        for (int64_t t = 0; t < int64_t(segs[s].tokens.size()); ++t)
            m_pos[size_t(offset[s] + t)] = double(segs[s].n_past + t) * p.pos_scale;
        inv_freq[s] = rope_inv_freq(p.rope_base, m_hp.n_rot);
        rotation[s] = KeyRotation{inv_freq[s], p.pos_scale, m_hp.n_rot, m_hp.rope_style};
    }

    uint64_t attn_scratch = 0;
    for (int l = 0; l < m_hp.n_layer; ++l) {
        const LayerWeights &lw = w.layers[size_t(l)];
        rmsnorm(m_x.data(), lw.attn_norm, m_xn.data(), n, e, m_hp.rms_eps);
        // q [n, n_head, hd], k and v [n, n_head_kv, hd]
        const MatmulOut qkv[] = {{&lw.wq, m_q.data()}, {&lw.wk, m_k.data()}, {&lw.wv, m_v.data()}};
        matmul_group(m_pool, qkv, m_xn.data(), n);
        for (size_t s = 0; s < segs.size(); ++s) {
            const ForwardSegment &seg = segs[s];
            const int64_t o = offset[s], ns = int64_t(seg.tokens.size());
            const std::span<const double> pos(m_pos.data() + o, size_t(ns));
            rope(m_q.data() + o * e, ns, m_hp.n_head, hd, m_hp.n_rot, m_hp.rope_style, pos, inv_freq[s]);
            if (!seg.params.keys_before_rope)
                rope(m_k.data() + o * ekv, ns, m_hp.n_head_kv, hd, m_hp.n_rot, m_hp.rope_style, pos, inv_freq[s]);
            // Append this segment's keys and values at their positions in its own cache.
            std::memcpy(seg.kv->keys(l) + int64_t(seg.n_past) * ekv, m_k.data() + o * ekv, size_t(ns * ekv) * 4);
            std::memcpy(seg.kv->values(l) + int64_t(seg.n_past) * ekv, m_v.data() + o * ekv, size_t(ns * ekv) * 4);

            AttentionProblem p;
            p.n_head = m_hp.n_head;
            p.n_head_kv = m_hp.n_head_kv;
            p.head_dim = hd;
            p.q = m_q.data() + o * e;
            p.n_q = ns;
            p.q_pos0 = seg.n_past;
            p.k = seg.kv->keys(l);
            p.v = seg.kv->values(l);
            p.n_kv = seg.n_past + ns;
            p.rotate_keys = seg.params.keys_before_rope ? &rotation[s] : nullptr;
            p.out = m_attn.data() + o * e;
            const AttentionStats as = seg.params.memory_efficient
                                          ? attention_tiled(m_pool, p, seg.params.causal_flash)
                                          : attention_naive(m_pool, p, seg.params.causal_flash);
            attn_scratch = std::max(attn_scratch, as.scratch_bytes);
            stats.tiles_skipped += as.tiles_skipped;
        }

        matmul(m_pool, lw.wo, m_attn.data(), m_proj.data(), n);
        for (int64_t i = 0; i < n * e; ++i)
            m_x[size_t(i)] += m_proj[size_t(i)];

        rmsnorm(m_x.data(), lw.ffn_norm, m_xn.data(), n, e, m_hp.rms_eps);
        const MatmulOut gate_up[] = {{&lw.w_gate, m_gate.data()}, {&lw.w_up, m_up.data()}}; // [n, n_ff] each
        matmul_group(m_pool, gate_up, m_xn.data(), n);
        swiglu(m_gate.data(), m_up.data(), m_gate.data(), n * f);
        matmul(m_pool, lw.w_down, m_gate.data(), m_proj.data(), n);
        for (int64_t i = 0; i < n * e; ++i)
            m_x[size_t(i)] += m_proj[size_t(i)];
    }

    // Final norm and LM head for the rows asked for, gathered in segment order.
    int64_t n_out = 0;
    for (size_t s = 0; s < segs.size(); ++s) {
        const int64_t ns = int64_t(segs[s].tokens.size());
        const int64_t first = std::clamp<int64_t>(segs[s].logits_from, 0, ns);
        for (int64_t t = first; t < ns; ++t)
            std::memmove(m_x.data() + n_out++ * e, m_x.data() + (offset[s] + t) * e, size_t(e) * 4);
    }
    try {
        fit(m_logits, size_t(n_out * m_hp.n_vocab));
    } catch (const std::bad_alloc &) {
        throw OutOfMemory("not enough memory for the logits of " + std::to_string(n_out) + " tokens");
    }
    if (n_out > 0) {
        rmsnorm(m_x.data(), w.output_norm, m_xn.data(), n_out, e, m_hp.rms_eps);
        matmul(m_pool, w.output, m_xn.data(), m_logits.data(), n_out);
    }
    stats.scratch_bytes = std::max(stats.scratch_bytes, scratch_bytes() + attn_scratch);
    return {m_logits.data(), m_logits.size()};
}

} // namespace longscope
