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
    require(n_embd % n_head == 0, source,
            "width " + std::to_string(n_embd) + " is not divisible by the head count " +
                std::to_string(n_head));
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
}

} // namespace longscope
