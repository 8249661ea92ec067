// Log-probabilities for `serve`'s /v1/completions (`logprobs`, with `echo` for the prompt's):
// the context is evaluated again from its start with every position's logits kept.
#pragma once

#include "server_api.h"

#include "longscope/engine.h"

#include <span>
#include <vector>

namespace longscope::cli {

// The log-probability of each of `tokens` given the ones before it (none for the first),
// with the `top_n` most likely alternatives, from the model's logits (log-softmax, before any
// sampling adjustment). Resets `session` and leaves `tokens` in its context. Evaluates in
// steps of `step` tokens, so the logits held stay at step x vocabulary floats.
std::vector<api::TokenLogprob> score_tokens(Session &session, std::span<const int32_t> tokens, int top_n,
                                            int step = 64);

} // namespace longscope::cli
