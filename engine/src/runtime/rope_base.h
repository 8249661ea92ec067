// Internal: the RoPE in effect for a sequence length: the scaling method (the model's own or
// the one chosen in the settings) turned into a base, a position scale, per-dimension
// frequency factors and an attention factor (docs/long-context.md).
#pragma once

#include "longscope/hparams.h"
#include "longscope/settings.h"

#include <vector>

namespace longscope {

struct RopeInEffect {
    double base = 10000.0;
    double pos_scale = 1.0;
    std::vector<float> factors; // [n_rot / 2] divisors of the frequencies; empty: none
    double attn_factor = 1.0;
};

// The model's scaling with the settings' choice applied (method, factor, original context).
RopeScaling scaling_in_effect(const HParams &hp, const RopeSettings &rope);

// Everything RoPE needs at this sequence length. NTK alpha (fixed or auto) multiplies the
// base of whichever method is in effect.
RopeInEffect rope_in_effect(const HParams &hp, const RopeSettings &rope, int seq_len);

// Llama 3.1's per-dimension divisors for a scaling's factor, original context and low/high
// frequency factors (what GGUF files carry as rope_freqs).
std::vector<float> llama3_rope_factors(const HParams &hp, const RopeScaling &rs);

// Shorthands: the base, and the position scale.
double rope_base_in_effect(const HParams &hp, const RopeSettings &rope, int seq_len);
double rope_pos_scale(const HParams &hp, const RopeSettings &rope);

// Whether the rotation depends on the sequence length (dynamic NTK, LongRoPE's switch, NTK
// alpha auto): rows cached at another length were rotated otherwise.
bool rope_follows_length(const HParams &hp, const RopeSettings &rope);

// Whether a step from `past` cached tokens to `len` crosses LongRoPE's original context: the
// cached keys were rotated with the short factors, and the whole context is evaluated again
// with the long ones (as Hugging Face's Phi-3 does when generating).
bool crosses_longrope_switch(const HParams &hp, const RopeSettings &rope, int past, int len);

// Throws InvalidArgument when the settings ask for what the model cannot do: LongRoPE without
// the model's factors, or keys cached before RoPE where the cache cannot be converted
// (per-layer bases, per-dimension factors).
void check_rope_settings(const HParams &hp, const RopeSettings &rope);

} // namespace longscope
