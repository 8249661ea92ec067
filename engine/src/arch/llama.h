// The LLaMA-shaped decoder and the families built on it (Llama 1/2/3, Mistral, Qwen 2/2.5/3,
// Gemma 2/3, Phi-3): embedding (scaled by sqrt(width) for Gemma), per layer RMSNorm, Q/K/V
// projections (+ biases for Qwen 2, per-head q/k RMSNorm for Qwen 3 and Gemma 3), RoPE
// (a sliding-window layer's own base for Gemma), grouped-query attention over the KV cache
// (scale, soft-capping and sliding windows as the family says), output projection (+ post
// norm for Gemma), residual, RMSNorm, SwiGLU or GeGLU FFN (+ post norm), residual; final norm,
// LM head, logit soft-capping. The family's features are flags of HParams; the sequence is
// written once over the operations of backend/backend.h, so every backend runs it.
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
