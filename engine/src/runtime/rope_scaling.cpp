#include "runtime/rope_base.h"

#include "longscope/errors.h"

#include <algorithm>
#include <cmath>

namespace longscope {

namespace {

constexpr double k_pi = 3.14159265358979323846;

// The original (pre-extension) context of a scaling: its own, else the trained one.
int original_context(const HParams &hp, const RopeScaling &rs)
{
    return rs.orig_ctx > 0 ? rs.orig_ctx : hp.n_ctx_train;
}

// YaRN (Peng et al.; Hugging Face _compute_yarn_parameters): dimensions turning fewer than
// beta_slow times over the original context are interpolated (divided by the factor), those
// turning more than beta_fast times extrapolated (kept), a linear ramp between.
std::vector<float> yarn_factors(const HParams &hp, const RopeScaling &rs, double base)
{
    const int d = hp.n_rot, orig = original_context(hp, rs);
    auto correction_dim = [&](double rotations) {
        return d * std::log(orig / (rotations * 2 * k_pi)) / (2 * std::log(base));
    };
    const double low = std::max(0.0, std::floor(correction_dim(rs.beta_fast)));
    double high = std::min(double(d - 1), std::ceil(correction_dim(rs.beta_slow)));
    if (high == low)
        high += 0.001;
    std::vector<float> f(size_t(d / 2));
    for (int i = 0; i < d / 2; ++i) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp; // share of the unscaled frequency
        f[size_t(i)] = float(1.0 / ((1.0 - extrapolation) / rs.factor + extrapolation));
    }
    return f;
}

// Llama 3.1 (Hugging Face _compute_llama3_parameters): wavelengths shorter than
// orig / high_freq_factor kept, longer than orig / low_freq_factor divided by the factor, a
// smooth blend between.
std::vector<float> llama3_factors(const HParams &hp, const RopeScaling &rs, double base)
{
    if (rs.factor < 1.0f || !(rs.low_freq_factor < rs.high_freq_factor))
        throw InvalidArgument("llama3 RoPE scaling needs a factor >= 1 and low_freq_factor < high_freq_factor");
    const int d = hp.n_rot;
    const double orig = original_context(hp, rs);
    const double low_wl = orig / rs.low_freq_factor, high_wl = orig / rs.high_freq_factor;
    std::vector<float> f(size_t(d / 2));
    for (int i = 0; i < d / 2; ++i) {
        const double inv = std::pow(base, -2.0 * i / d), wl = 2 * k_pi / inv;
        double div = 1.0;
        if (wl > low_wl) {
            div = rs.factor;
        } else if (wl >= high_wl) {
            const double smooth = (orig / wl - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
            div = 1.0 / ((1.0 - smooth) / rs.factor + smooth);
        }
        f[size_t(i)] = float(div);
    }
    return f;
}

} // namespace

std::vector<float> llama3_rope_factors(const HParams &hp, const RopeScaling &rs)
{
    return llama3_factors(hp, rs, hp.rope_base);
}

RopeScaling scaling_in_effect(const HParams &hp, const RopeSettings &rope)
{
    RopeScaling rs = hp.rope;
    if (!rope.scaling)
        return rs;
    const bool same_method = *rope.scaling == rs.type;
    rs.type = *rope.scaling;
    if (rope.scaling_factor > 0.0f)
        rs.factor = rope.scaling_factor;
    else if (!same_method)
        rs.factor = std::max(1.0f, hp.rope.factor);
    if (rope.scaling_orig_ctx > 0)
        rs.orig_ctx = rope.scaling_orig_ctx;
    // The file's llama3 factors hold for its own factor and context only.
    if (!same_method || rope.scaling_factor > 0.0f || rope.scaling_orig_ctx > 0)
        rs.freq_factors.clear();
    return rs;
}

RopeInEffect rope_in_effect(const HParams &hp, const RopeSettings &rope, int seq_len)
{
    const RopeScaling rs = scaling_in_effect(hp, rope);
    RopeInEffect r;
    r.base = hp.rope_base;
    const double d = hp.n_rot, f = std::max(1.0f, rs.factor);
    const int orig = original_context(hp, rs);
    switch (rs.type) {
    case RopeScalingType::None:
        break;
    case RopeScalingType::Linear:
        r.pos_scale = 1.0 / f;
        break;
    case RopeScalingType::Dynamic:
        // Hugging Face "dynamic": grows once the sequence passes the original length.
        if (seq_len > orig)
            r.base *= std::pow(f * double(seq_len) / orig - (f - 1), d / (d - 2));
        break;
    case RopeScalingType::Ntk:
        r.base *= std::pow(f, d / (d - 2));
        break;
    case RopeScalingType::Yarn:
        r.factors = yarn_factors(hp, rs, r.base);
        r.attn_factor = rs.attn_factor > 0 ? rs.attn_factor : (f > 1 ? 0.1 * std::log(f) + 1.0 : 1.0);
        break;
    case RopeScalingType::Llama3:
        r.factors = rs.freq_factors.empty() ? llama3_factors(hp, rs, r.base) : rs.freq_factors;
        break;
    case RopeScalingType::LongRope:
        // Short factors up to the original context, long ones past it (Phi-3).
        r.factors = seq_len > orig ? rs.long_factors : rs.short_factors;
        r.attn_factor = rs.attn_factor > 0 ? rs.attn_factor
                                           : (f > 1 ? std::sqrt(1 + std::log(f) / std::log(double(orig))) : 1.0);
        break;
    }
    // NTK-aware alpha set by the user: base' = base * alpha^(d / (d - 2)).
    const double alpha = effective_ntk_alpha(rope, seq_len, hp.n_ctx_train);
    if (alpha != 1.0)
        r.base *= std::pow(alpha, d / (d - 2));
    return r;
}

double rope_base_in_effect(const HParams &hp, const RopeSettings &rope, int seq_len)
{
    return rope_in_effect(hp, rope, seq_len).base;
}

double rope_pos_scale(const HParams &hp, const RopeSettings &rope)
{
    return rope_in_effect(hp, rope, 1).pos_scale;
}

bool rope_follows_length(const HParams &hp, const RopeSettings &rope)
{
    const RopeScalingType t = scaling_in_effect(hp, rope).type;
    return rope.ntk_auto || t == RopeScalingType::Dynamic || t == RopeScalingType::LongRope;
}

bool crosses_longrope_switch(const HParams &hp, const RopeSettings &rope, int past, int len)
{
    const RopeScaling rs = scaling_in_effect(hp, rope);
    const int orig = original_context(hp, rs);
    return rs.type == RopeScalingType::LongRope && past <= orig && len > orig;
}

void check_rope_settings(const HParams &hp, const RopeSettings &rope)
{
    const RopeScaling rs = scaling_in_effect(hp, rope);
    if (rs.type == RopeScalingType::LongRope && (rs.short_factors.empty() || rs.long_factors.empty()))
        throw InvalidArgument("LongRoPE needs the model's short and long factors, and this model has none");
    if (rs.type == RopeScalingType::Llama3 && !(rs.low_freq_factor < rs.high_freq_factor))
        throw InvalidArgument("llama3 RoPE scaling needs low_freq_factor < high_freq_factor");
    const bool factors = rs.type == RopeScalingType::Yarn || rs.type == RopeScalingType::Llama3 ||
                         rs.type == RopeScalingType::LongRope;
    if (rope.store_kv_before_rope && (factors || hp.per_layer_rope()))
        throw InvalidArgument("keys cached before RoPE are not available with per-dimension RoPE factors "
                              "(YaRN, llama3, LongRoPE) or per-layer RoPE bases (Gemma)");
}

} // namespace longscope
