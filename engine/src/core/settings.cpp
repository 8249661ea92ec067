#include "longscope/settings.h"

#include "longscope/errors.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace longscope {

void Settings::validate() const
{
    if (!std::isfinite(rope.ntk_alpha) || rope.ntk_alpha < 1.0f)
        throw InvalidArgument("NTK alpha must be a number >= 1 (or auto), got " +
                              std::to_string(rope.ntk_alpha));
    if (rope.scaling_factor != 0.0f && !(std::isfinite(rope.scaling_factor) && rope.scaling_factor >= 1.0f))
        throw InvalidArgument("RoPE scaling factor must be a number >= 1 (0 = the model's), got " +
                              std::to_string(rope.scaling_factor));
    if (rope.scaling_orig_ctx < 0)
        throw InvalidArgument("RoPE original context must be positive (0 = the model's), got " +
                              std::to_string(rope.scaling_orig_ctx));
    if (context_limit < 0)
        throw InvalidArgument("context limit must be positive (0 = the model's default), got " +
                              std::to_string(context_limit));
    if (context_limit > (1 << 24))
        throw InvalidArgument("context limit " + std::to_string(context_limit) +
                              " is too large (at most 16777216)");
    if (sink_tokens < 0)
        throw InvalidArgument("the number of sink tokens must not be negative, got " + std::to_string(sink_tokens));
    if (shift_discard < 0)
        throw InvalidArgument("the number of tokens dropped per context shift must not be negative (0 = half), got " +
                              std::to_string(shift_discard));
    check_sinks(context_limit);
}

void Settings::check_sinks(int limit) const
{
    if (overflow == OverflowPolicy::Shift && limit > 0 && sink_tokens >= limit)
        throw InvalidArgument(std::to_string(sink_tokens) + " sink tokens leave no room to shift in a context of " +
                              std::to_string(limit) + " tokens (the sinks must be fewer than the context limit)");
}

std::string_view to_string(KvMode m)
{
    switch (m) {
    case KvMode::None: return "none";
    case KvMode::Concat: return "concat";
    case KvMode::Static: return "static";
    case KvMode::Vmm: return "vmm";
    }
    return "?";
}

std::string_view to_string(KvType t)
{
    switch (t) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::Q8_0: return "q8_0";
    case KvType::Q4_0: return "q4_0";
    }
    return "?";
}

std::optional<KvType> parse_kv_type(std::string_view s)
{
    for (KvType t : {KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0})
        if (s == to_string(t))
            return t;
    return std::nullopt;
}

int kv_type_block(KvType t) { return t == KvType::Q8_0 || t == KvType::Q4_0 ? 32 : 1; }

uint64_t kv_type_row_bytes(KvType t, int64_t n)
{
    switch (t) {
    case KvType::F32: return uint64_t(n) * 4;
    case KvType::F16: return uint64_t(n) * 2;
    case KvType::Q8_0: return uint64_t(n / 32) * 34; // f16 scale + 32 int8
    case KvType::Q4_0: return uint64_t(n / 32) * 18; // f16 scale + 16 bytes of nibbles
    }
    return 0;
}

void check_kv_types(const Settings &s, int head_dim)
{
    for (const auto &[t, what] : {std::pair{s.kv_type_k, "keys"}, std::pair{s.kv_type_v, "values"}})
        if (head_dim % kv_type_block(t) != 0)
            throw InvalidArgument("the KV cache type " + std::string(to_string(t)) + " for " + what +
                                  " needs a head size that is a multiple of " + std::to_string(kv_type_block(t)) +
                                  "; this model's head size is " + std::to_string(head_dim) +
                                  " (use f32 or f16)");
}

std::string_view to_string(OverflowPolicy p)
{
    switch (p) {
    case OverflowPolicy::Error: return "error";
    case OverflowPolicy::HeadTail: return "head-tail";
    case OverflowPolicy::DropOldestTurns: return "drop-oldest";
    case OverflowPolicy::Shift: return "shift";
    }
    return "?";
}

std::optional<KvMode> parse_kv_mode(std::string_view s)
{
    for (KvMode m : {KvMode::None, KvMode::Concat, KvMode::Static, KvMode::Vmm})
        if (s == to_string(m))
            return m;
    return std::nullopt;
}

std::optional<OverflowPolicy> parse_overflow(std::string_view s)
{
    for (OverflowPolicy p : {OverflowPolicy::Error, OverflowPolicy::HeadTail, OverflowPolicy::DropOldestTurns,
                             OverflowPolicy::Shift})
        if (s == to_string(p))
            return p;
    return std::nullopt;
}

std::string_view to_string(ComputeBackend b) { return b == ComputeBackend::Cuda ? "cuda" : "cpu"; }

std::optional<ComputeBackend> parse_backend(std::string_view s)
{
    for (ComputeBackend b : {ComputeBackend::Cpu, ComputeBackend::Cuda})
        if (s == to_string(b))
            return b;
    return std::nullopt;
}

double effective_ntk_alpha(const RopeSettings &rope, int seq_len, int n_ctx_train)
{
    if (!rope.ntk_auto)
        return rope.ntk_alpha;
    // Chinese-LLaMA-Alpaca's "auto": (L / 1024 - 1) * 1.1 for a 2048-token model, generalised
    // to the trained length and clamped to 1 below it (the formula dips under 1 for short
    // sequences).
    const double half = n_ctx_train / 2.0;
    return std::max(1.0, 1.1 * (double(seq_len) / half - 1.0));
}

} // namespace longscope
