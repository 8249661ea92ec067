#include "longscope/hparams.h"

#include "longscope/errors.h"

#include <cmath>

namespace longscope {

namespace {
void require(bool ok, const std::string &source, const std::string &what)
{
    if (!ok)
        throw ConfigError(source + ": " + what);
}
} // namespace

void HParams::validate(const std::string &source) const
{
    // Upper bounds keep every later size computation far from overflow and reject files
    // that claim absurd shapes before anything is allocated.
    constexpr int max_dim = 1 << 20;
    require(n_vocab > 0 && n_vocab <= (1 << 24), source,
            "vocabulary size must be between 1 and 16777216, got " + std::to_string(n_vocab));
    require(n_embd > 0 && n_embd <= max_dim, source,
            "embedding width must be positive and at most 1048576, got " + std::to_string(n_embd));
    require(n_layer > 0 && n_layer <= 4096, source,
            "layer count must be between 1 and 4096, got " + std::to_string(n_layer));
    require(n_head > 0 && n_head <= n_embd, source,
            "attention head count must be between 1 and the width, got " + std::to_string(n_head));
    require(n_head_dim > 0 || n_embd % n_head == 0, source,
            "width " + std::to_string(n_embd) + " is not divisible by the head count " +
                std::to_string(n_head) + " and no head size is given");
    require(n_head_dim >= 0 && n_head_dim <= 4096, source,
            "head size (head_dim, attention.key_length) must be between 1 and 4096, got " + std::to_string(n_head_dim));
    require(n_head_kv > 0 && n_head_kv <= n_head, source,
            "key/value head count must be between 1 and the head count, got " +
                std::to_string(n_head_kv));
    require(n_head % n_head_kv == 0, source,
            "head count " + std::to_string(n_head) + " is not a multiple of the key/value head count " +
                std::to_string(n_head_kv));
    require(n_ff > 0 && n_ff <= 4 * max_dim, source,
            "feed-forward width must be positive, got " + std::to_string(n_ff));
    require(n_ctx_train > 0, source,
            "trained context length must be positive, got " + std::to_string(n_ctx_train));
    require(n_rot > 0 && n_rot <= head_dim() && n_rot % 2 == 0, source,
            "rotary dimension must be even and between 2 and the head size " +
                std::to_string(head_dim()) + ", got " + std::to_string(n_rot));
    require(std::isfinite(rms_eps) && rms_eps > 0, source, "RMSNorm epsilon must be positive");
    require(std::isfinite(rope_base) && rope_base > 1, source,
            "RoPE base (rope_theta) must be greater than 1");
    require(std::isfinite(rope_scaling_factor) && rope_scaling_factor >= 1, source,
            "rope_scaling factor must be at least 1");
    require(rope.type == RopeScalingType::None || (std::isfinite(rope.factor) && rope.factor >= 1), source,
            "rope_scaling factor must be at least 1, got " + std::to_string(rope.factor));
    require(rope.orig_ctx >= 0, source, "original context length must not be negative");
    require(std::isfinite(rope.attn_factor) && rope.attn_factor >= 0, source,
            "rope attention factor must not be negative");
    const size_t half = size_t(n_rot / 2);
    for (const auto *f : {&rope.freq_factors, &rope.short_factors, &rope.long_factors}) {
        require(f->empty() || f->size() == half, source,
                "RoPE frequency factors must number n_rot / 2 = " + std::to_string(half) + ", got " +
                    std::to_string(f->size()));
        for (float x : *f)
            require(std::isfinite(x) && x > 0, source, "RoPE frequency factors must be positive");
    }
    require(rope.type != RopeScalingType::LongRope || (!rope.short_factors.empty() && !rope.long_factors.empty()),
            source, "LongRoPE scaling needs short and long factors");
    require(rope.type != RopeScalingType::Llama3 || rope.low_freq_factor < rope.high_freq_factor, source,
            "llama3 RoPE scaling needs low_freq_factor < high_freq_factor");
    for (float v : {attn_scale, attn_softcap, final_softcap, rope_base_swa, norm_offset})
        require(std::isfinite(v) && v >= 0, source, "attention scale, soft caps and the local RoPE base must be >= 0");
    require(sliding_window >= 0, source, "sliding window must not be negative");
    require(swa_layers.empty() || swa_layers.size() == size_t(n_layer), source,
            "the sliding-window pattern must name every layer");
}

std::string_view to_string(RopeScalingType t)
{
    switch (t) {
    case RopeScalingType::None: return "none";
    case RopeScalingType::Linear: return "linear";
    case RopeScalingType::Dynamic: return "dynamic";
    case RopeScalingType::Ntk: return "ntk";
    case RopeScalingType::Yarn: return "yarn";
    case RopeScalingType::Llama3: return "llama3";
    case RopeScalingType::LongRope: return "longrope";
    }
    return "?";
}

std::optional<RopeScalingType> parse_rope_scaling(std::string_view s)
{
    for (RopeScalingType t : {RopeScalingType::None, RopeScalingType::Linear, RopeScalingType::Dynamic,
                              RopeScalingType::Ntk, RopeScalingType::Yarn, RopeScalingType::Llama3,
                              RopeScalingType::LongRope})
        if (s == to_string(t))
            return t;
    return std::nullopt;
}

std::string_view to_string(ArchFamily f)
{
    switch (f) {
    case ArchFamily::Llama: return "llama";
    case ArchFamily::Qwen2: return "qwen2";
    case ArchFamily::Qwen3: return "qwen3";
    case ArchFamily::Gemma2: return "gemma2";
    case ArchFamily::Gemma3: return "gemma3";
    case ArchFamily::Phi3: return "phi3";
    }
    return "?";
}

} // namespace longscope
