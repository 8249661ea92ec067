#include "cpu/cpu_forward.h"

#include "cpu/ops.h"
#include "longscope/errors.h"

#include <cmath>
#include <cstring>

namespace longscope {

CpuForward::CpuForward(const Model &model, int n_ctx, int n_threads)
    : m_model(model), m_hp(model.hparams()), m_pool(n_threads),
      m_kv(model.hparams().n_layer, n_ctx, model.hparams().n_embd_kv())
{
}

void CpuForward::ensure_scratch(int64_t n)
{
    const size_t e = size_t(n * m_hp.n_embd), ekv = size_t(n * m_hp.n_embd_kv()),
                 f = size_t(n * m_hp.n_ff);
    if (m_x.size() >= e)
        return;
    try {
        m_x.resize(e);
        m_xn.resize(e);
        m_q.resize(e);
        m_k.resize(ekv);
        m_v.resize(ekv);
        m_attn.resize(e);
        m_proj.resize(e);
        m_gate.resize(f);
        m_up.resize(f);
    } catch (const std::bad_alloc &) {
        throw OutOfMemory("not enough memory for the activations of a batch of " +
                          std::to_string(n) + " tokens");
    }
}

double CpuForward::rope_base_for(int64_t seq_len) const
{
    double base = m_hp.rope_base;
    // Hugging Face "dynamic" NTK: grow the base once the sequence passes the trained length.
    if (m_hp.rope_scaling == RopeScalingType::Dynamic && seq_len > m_hp.n_ctx_train) {
        const double f = m_hp.rope_scaling_factor;
        const double d = m_hp.n_rot;
        base *= std::pow(f * double(seq_len) / m_hp.n_ctx_train - (f - 1), d / (d - 2));
    }
    return base;
}

void CpuForward::attention(int layer, int64_t n, int n_past)
{
    const int n_head = m_hp.n_head, hd = m_hp.head_dim();
    const int group = m_hp.n_head / m_hp.n_head_kv;
    const int64_t ekv = m_hp.n_embd_kv();
    const float *kc = m_kv.keys(layer);
    const float *vc = m_kv.values(layer);
    const float scale = 1.0f / std::sqrt(float(hd));
    m_pool.parallel_for(
        n * n_head,
        [&](int64_t begin, int64_t end) {
            std::vector<float> scores(size_t(n_past + n));
            for (int64_t job = begin; job < end; ++job) {
                const int64_t t = job / n_head;
                const int h = int(job % n_head);
                const int kvh = h / group;
                const int64_t n_keys = n_past + t + 1; // causal: keys up to this token
                const float *q = m_q.data() + (t * n_head + h) * hd;
                for (int64_t j = 0; j < n_keys; ++j)
                    scores[size_t(j)] = dot_f32(q, kc + j * ekv + kvh * hd, hd) * scale;
                softmax_inplace(scores.data(), n_keys);
                float *out = m_attn.data() + (t * n_head + h) * hd;
                std::fill(out, out + hd, 0.0f);
                for (int64_t j = 0; j < n_keys; ++j) {
                    const float p = scores[size_t(j)];
                    const float *v = vc + j * ekv + kvh * hd;
                    for (int d = 0; d < hd; ++d)
                        out[d] += p * v[d];
                }
            }
        },
        std::max<int64_t>(1, 4096 / std::max<int64_t>(1, (n_past + n) * hd)));
}

std::span<const float> CpuForward::eval(std::span<const int32_t> tokens, int n_past, bool all_logits)
{
    const int64_t n = int64_t(tokens.size());
    const int64_t e = m_hp.n_embd, ekv = m_hp.n_embd_kv(), f = m_hp.n_ff;
    const ModelWeights &w = m_model.weights();
    ensure_scratch(n);

    for (int64_t t = 0; t < n; ++t)
        weight_row_f32(w.tok_embd, tokens[size_t(t)], m_x.data() + t * e);

    // Positions (scaled for linear rope_scaling) and inverse frequencies for this batch.
    m_pos.resize(size_t(n));
    const double pos_scale =
        m_hp.rope_scaling == RopeScalingType::Linear ? 1.0 / m_hp.rope_scaling_factor : 1.0;
    for (int64_t t = 0; t < n; ++t)
        m_pos[size_t(t)] = double(n_past + t) * pos_scale;
    const double base = rope_base_for(n_past + n);
    m_inv_freq.resize(size_t(m_hp.n_rot / 2));
    for (int i = 0; i < m_hp.n_rot / 2; ++i)
        m_inv_freq[size_t(i)] = std::pow(base, -2.0 * i / m_hp.n_rot);

    for (int l = 0; l < m_hp.n_layer; ++l) {
        const LayerWeights &lw = w.layers[size_t(l)];
        rmsnorm(m_x.data(), lw.attn_norm, m_xn.data(), n, e, m_hp.rms_eps);
        matmul(m_pool, lw.wq, m_xn.data(), m_q.data(), n);   // [n, n_head, hd]
        matmul(m_pool, lw.wk, m_xn.data(), m_k.data(), n);   // [n, n_head_kv, hd]
        matmul(m_pool, lw.wv, m_xn.data(), m_v.data(), n);   // [n, n_head_kv, hd]
        rope(m_q.data(), n, m_hp.n_head, m_hp.head_dim(), m_hp.n_rot, m_hp.rope_style, m_pos, m_inv_freq);
        rope(m_k.data(), n, m_hp.n_head_kv, m_hp.head_dim(), m_hp.n_rot, m_hp.rope_style, m_pos, m_inv_freq);
        // Append this batch's keys and values at their positions.
        std::memcpy(m_kv.keys(l) + int64_t(n_past) * ekv, m_k.data(), size_t(n * ekv) * 4);
        std::memcpy(m_kv.values(l) + int64_t(n_past) * ekv, m_v.data(), size_t(n * ekv) * 4);
        attention(l, n, n_past);
        matmul(m_pool, lw.wo, m_attn.data(), m_proj.data(), n);
        for (int64_t i = 0; i < n * e; ++i)
            m_x[size_t(i)] += m_proj[size_t(i)];

        rmsnorm(m_x.data(), lw.ffn_norm, m_xn.data(), n, e, m_hp.rms_eps);
        matmul(m_pool, lw.w_gate, m_xn.data(), m_gate.data(), n); // [n, n_ff]
        matmul(m_pool, lw.w_up, m_xn.data(), m_up.data(), n);     // [n, n_ff]
        swiglu(m_gate.data(), m_up.data(), m_gate.data(), n * f);
        matmul(m_pool, lw.w_down, m_gate.data(), m_proj.data(), n);
        for (int64_t i = 0; i < n * e; ++i)
            m_x[size_t(i)] += m_proj[size_t(i)];
    }

    // Final norm and LM head, for the last token only unless every position is wanted.
    const int64_t first = all_logits ? 0 : n - 1;
    const int64_t n_out = n - first;
    rmsnorm(m_x.data() + first * e, w.output_norm, m_xn.data(), n_out, e, m_hp.rms_eps);
    m_logits.resize(size_t(n_out * m_hp.n_vocab));
    matmul(m_pool, w.output, m_xn.data(), m_logits.data(), n_out);
    return {m_logits.data(), m_logits.size()};
}

} // namespace longscope
