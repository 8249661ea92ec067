#include "arch/llama.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace longscope {

namespace {

// The RoPE of a sliding-window layer with its own base (Gemma): no scaling, factors or
// attention factor; everything else as the global layers.
ForwardParams local_rope(const ForwardParams &global, const HParams &hp)
{
    ForwardParams p = global;
    p.rope_base = hp.rope_base_swa;
    p.pos_scale = 1.0;
    p.rope_factors = {};
    p.rope_attn_factor = 1.0;
    return p;
}

float attention_scale(const HParams &hp, const ForwardParams &p)
{
    const float base = hp.attn_scale > 0.0f ? hp.attn_scale : 1.0f / std::sqrt(float(hp.head_dim()));
    return float(base * p.rope_attn_factor * p.rope_attn_factor);
}

} // namespace

std::span<const float> llama_forward(Backend &be, const Model &model, std::span<const ForwardSegment> segs,
                                     ForwardStats &stats)
{
    const HParams &hp = model.hparams();
    const ModelWeights &w = model.weights();
    const int64_t e = hp.n_embd, eq = hp.n_embd_q(), ekv = hp.n_embd_kv(), f = hp.n_ff, hd = hp.head_dim();
    const float off = hp.norm_offset;
    // Whatever way the step ends (an out-of-memory error in a layer included), the memory
    // the backend held only for it goes.
    struct StepEnd {
        Backend &be;
        ~StepEnd() { be.end_step(); }
    } step_end{be};

    // Row offsets of each segment in the concatenated [n, width] activations.
    std::vector<int64_t> offset(segs.size() + 1, 0);
    std::vector<int32_t> tokens;
    for (size_t s = 0; s < segs.size(); ++s) {
        offset[s + 1] = offset[s] + int64_t(segs[s].tokens.size());
        tokens.insert(tokens.end(), segs[s].tokens.begin(), segs[s].tokens.end());
    }
    const int64_t n = offset.back();
    // The rows whose logits are asked for: each segment's tail from its logits_from on. The
    // last layer needs every row's keys and values for the cache, but its attention output,
    // output projection and feed-forward only for these rows (for a prompt, its last token).
    std::vector<int64_t> keep_from(segs.size());
    int64_t n_out = 0;
    for (size_t s = 0; s < segs.size(); ++s) {
        const int64_t ns = int64_t(segs[s].tokens.size());
        keep_from[s] = std::clamp<int64_t>(segs[s].logits_from, 0, ns);
        n_out += ns - keep_from[s];
    }
    be.begin_step(n);
    stats.threads = be.step_threads();
    const Activations a = be.activations(n);
    // Moves the kept rows of a.x to its front, in segment order (each row to one at or before
    // it, so none is overwritten before it moves).
    const auto pack_kept_rows = [&] {
        int64_t r = 0;
        for (size_t s = 0; s < segs.size(); ++s)
            for (int64_t t = keep_from[s]; t < int64_t(segs[s].tokens.size()); ++t, ++r)
                if (r != offset[s] + t)
                    be.move_row(a.x, r, offset[s] + t, e);
    };
    be.embed(w.tok_embd, tokens, a.x);
    if (hp.scale_embeddings)
        be.scale(a.x, std::sqrt(float(e)), n * e);

    uint64_t attn_scratch = 0;
    // The feed-forward output of the previous layer waits in a.proj to be added to a.x, in the
    // same pass as this layer's first norm.
    bool residual_pending = false;
    // Rows of a.x that go on through the layers: all n, then n_out from the last layer's
    // attention on, packed at the front in segment order.
    int64_t rows = n;
    for (int l = 0; l < hp.n_layer; ++l) {
        const LayerWeights &lw = w.layers[size_t(l)];
        const bool swa = hp.layer_is_swa(l);
        const bool trim = l == hp.n_layer - 1 && n_out < n;
        int64_t out_row = 0; // next packed row of a.attn when trimming
        if (residual_pending)
            be.add_rmsnorm(a.x, a.proj, lw.attn_norm, a.xn, n, e, hp.rms_eps, off);
        else
            be.rmsnorm(a.x, lw.attn_norm, a.xn, n, e, hp.rms_eps, off);
        // q [n, n_head, hd], k and v [n, n_head_kv, hd]
        const Projection qkv[] = {{&lw.wq, a.q}, {&lw.wk, a.k}, {&lw.wv, a.v}};
        be.matmul_group(qkv, a.xn, n);
        if (hp.qkv_bias) {
            be.add_bias(a.q, lw.bq, n, eq);
            be.add_bias(a.k, lw.bk, n, ekv);
            be.add_bias(a.v, lw.bv, n, ekv);
        }
        if (hp.qk_norm) {
            be.rmsnorm(a.q, lw.q_norm, a.q, n * hp.n_head, hd, hp.rms_eps, off);
            be.rmsnorm(a.k, lw.k_norm, a.k, n * hp.n_head_kv, hd, hp.rms_eps, off);
        }
        for (size_t s = 0; s < segs.size(); ++s) {
            const ForwardSegment &seg = segs[s];
            const ForwardParams params = swa && hp.per_layer_rope() ? local_rope(seg.params, hp) : seg.params;
            const int64_t o = offset[s], ns = int64_t(seg.tokens.size());
            be.rope_qk(a.q + o * eq, hp.n_head, params.keys_before_rope ? nullptr : a.k + o * ekv, hp.n_head_kv, ns,
                       seg.n_past, params);
            // Append this segment's keys and values at their positions in its own cache.
            be.store_kv(*seg.kv, l, seg.n_past, a.k + o * ekv, a.v + o * ekv, ns);

            // Queries from q0 on: all of them, or in the trimmed last layer the kept tail,
            // whose outputs are packed at out_row (never past o + q0, so no row is
            // overwritten before it is read).
            const int64_t q0 = trim ? keep_from[s] : 0;
            if (q0 == ns)
                continue;
            AttentionCall c;
            c.n_head = hp.n_head;
            c.n_head_kv = hp.n_head_kv;
            c.head_dim = int(hd);
            c.q = a.q + (o + q0) * eq;
            c.n_q = ns - q0;
            c.q_pos0 = seg.n_past + q0;
            c.kv = seg.kv;
            c.layer = l;
            c.n_kv = seg.n_past + ns;
            c.out = a.attn + (trim ? out_row : o) * eq;
            out_row += ns - q0;
            c.scale = attention_scale(hp, params);
            c.softcap = hp.attn_softcap;
            c.window = swa ? hp.sliding_window : 0;
            const AttentionResult r = be.attention(c, params);
            attn_scratch = std::max(attn_scratch, r.scratch_bytes);
            stats.tiles_skipped += r.tiles_skipped;
        }
        if (trim) {
            // The residual stream of the kept rows, packed the same way.
            pack_kept_rows();
            rows = n_out;
            if (rows == 0) {
                residual_pending = false;
                break; // no logits asked for: the cache is written, nothing else is needed
            }
        }
        const int64_t m = rows;

        be.matmul(lw.wo, a.attn, a.proj, m);
        if (hp.post_norms)
            be.rmsnorm(a.proj, lw.attn_post_norm, a.proj, m, e, hp.rms_eps, off);
        be.add_rmsnorm(a.x, a.proj, lw.ffn_norm, a.xn, m, e, hp.rms_eps, off);
        const Projection gate_up[] = {{&lw.w_gate, a.gate}, {&lw.w_up, a.up}}; // [m, n_ff] each
        be.matmul_group(gate_up, a.xn, m);
        if (hp.ffn_act == FfnActivation::GeluTanh)
            be.geglu(a.gate, a.up, a.gate, m * f);
        else
            be.swiglu(a.gate, a.up, a.gate, m * f);
        be.matmul(lw.w_down, a.gate, a.proj, m);
        if (hp.post_norms)
            be.rmsnorm(a.proj, lw.ffn_post_norm, a.proj, m, e, hp.rms_eps, off);
        residual_pending = true;
    }
    if (residual_pending)
        be.add_inplace(a.x, a.proj, rows * e);

    // Final norm and LM head for the rows asked for, in segment order (already packed so when
    // the last layer trimmed them).
    if (rows != n_out)
        pack_kept_rows();
    float *logits = be.logits_buffer(n_out);
    if (n_out > 0) {
        be.rmsnorm(a.x, w.output_norm, a.xn, n_out, e, hp.rms_eps, off);
        be.matmul(w.output, a.xn, logits, n_out);
        if (hp.final_softcap > 0.0f)
            be.softcap(logits, hp.final_softcap, n_out * hp.n_vocab);
    }
    const std::span<const float> out = be.read_logits(n_out);
    stats.scratch_bytes = std::max(stats.scratch_bytes, be.step_scratch_bytes(attn_scratch));
    return out;
}

} // namespace longscope
