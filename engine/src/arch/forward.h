// The forward pass of a model's architecture over a backend: one entry point the runtime
// calls, dispatching to the architecture's own file (arch/llama.cpp, ...).
#pragma once

#include "arch/llama.h"

namespace longscope {

// Evaluates the segments with the model's architecture (see llama_forward for the contract).
inline std::span<const float> forward(Backend &backend, const Model &model, std::span<const ForwardSegment> segments,
                                      ForwardStats &stats)
{
    // Every family the loaders accept (llama, qwen2, qwen3, gemma2, gemma3, phi3) is a
    // LLaMA-shaped decoder; their differences are flags of HParams.
    return llama_forward(backend, model, segments, stats);
}

} // namespace longscope
