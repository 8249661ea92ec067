// The LLaMA architecture (LLaMA 1/2/3, Mistral and the models shaped like them): embedding,
// per layer RMSNorm, Q/K/V projections, RoPE, grouped-query attention over the KV cache,
// output projection, residual, RMSNorm, SwiGLU FFN, residual; final norm and LM head. Written
// once over the operations of backend/backend.h, so every backend runs the same sequence.
#pragma once

#include "backend/backend.h"
#include "longscope/model.h"

#include <cstdint>
#include <span>

namespace longscope {

// One sequence's part of a forward call.
struct ForwardSegment {
    std::span<const int32_t> tokens; // evaluated at positions n_past .. n_past + n - 1
    int n_past = 0;
    int logits_from = 0;             // logits for tokens from this index on
    KvCache *kv = nullptr;           // holds n_past + n writable rows
    ForwardParams params;
};

// Evaluates the segments in one forward call: the matrix products run over all their tokens
// at once, attention runs per segment against its own cache and length, so sequences of
// different lengths never see each other or any padding. Returns the logits of each segment
// in order, [n_i - logits_from_i, n_vocab] each, on the host; valid until the backend's next
// call.
std::span<const float> llama_forward(Backend &backend, const Model &model, std::span<const ForwardSegment> segments,
                                     ForwardStats &stats);

} // namespace longscope
