// Internal: the RoPE base and position scale in effect for a sequence length.
#pragma once

#include "longscope/hparams.h"
#include "longscope/settings.h"

namespace longscope {

// The model's base, grown by config.json "dynamic" scaling past the trained length, times
// alpha^(d / (d - 2)) for the user's NTK alpha (fixed or auto) at this length.
double rope_base_in_effect(const HParams &hp, const RopeSettings &rope, int seq_len);

// Positions are multiplied by this (1 / factor for "linear" rope_scaling, else 1).
double rope_pos_scale(const HParams &hp);

} // namespace longscope
