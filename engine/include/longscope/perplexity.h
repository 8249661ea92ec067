// Perplexity against position: how well the model predicts each token of a text given the
// tokens before it, bucketed by how much context it had. With a context limit above the
// trained one this shows where each long-context setting stops understanding the text.
#pragma once

#include "longscope/engine.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace longscope {

struct PerplexityOptions {
    int ctx = 0;        // window length in tokens (BOS included); 0 = the session default
    int stride = 0;     // text tokens from one window's start to the next; 0 = ctx - 1 (no overlap)
    int batch = 256;    // tokens per evaluation step: auto alpha is recomputed per step
    int bucket = 64;    // positions per curve point
    int n_threads = 0;
    Settings settings;  // kv mode, attention, alpha... (context_limit is set to ctx)
    // Scores the text as one stream through one session (BOS once) instead of windows: each
    // token with everything the context holds before it. Under the shift overflow policy the
    // text always streams (windows would never fill the context) and goes on past the limit;
    // under another policy the context error stops the stream at the limit
    // (PerplexityResult::stopped says so).
    bool stream = false;
    // Called after each step with tokens scored so far and the total; false cancels (the
    // result then covers what was scored).
    std::function<bool(int64_t done, int64_t total)> progress;
    // Called after each evaluation step with its metrics (speed, memory ledger with peaks).
    MetricsCallback metrics;
};

struct PositionBucket {
    int begin = 0;       // positions [begin, end): the token had `position` tokens before it
    int end = 0;
    int64_t count = 0;
    double mean_nll = 0; // nats
    double perplexity() const;
};

struct PerplexityResult {
    int64_t n_scored = 0;
    double mean_nll = 0;
    int windows = 0;
    bool cancelled = false;
    std::string stopped; // a stream stopped by the context error: why (empty otherwise)
    std::vector<PositionBucket> curve;
    // The same NLL by the token's index in the text (bucket i: text tokens [begin, end)), so
    // a stream that goes past the context shows what happens there: where it stopped, or how
    // the windows restarting or the context shifting changed the prediction.
    std::vector<PositionBucket> text_curve;
    // Per scored token: position in its window and negative log-likelihood. Every token is
    // scored once, in the text's order: nll[i] is text token i's (i + 1's for a model without
    // BOS, whose first token nothing predicts).
    std::vector<int> positions;
    std::vector<float> nll;
    double perplexity() const;
};

// Scores `tokens` (no BOS: each window starts with the model's BOS) in windows of ctx
// tokens. In the first window every token after BOS is scored; with a stride below ctx,
// later windows score only the tokens no earlier window scored, with the overlap as context.
// Streamed (PerplexityOptions::stream, or the shift policy), a token's position is its index
// in the context when it was predicted.
// Throws InvalidArgument for a text shorter than two tokens or bad options.
PerplexityResult perplexity(const Model &model, std::span<const int32_t> tokens, const PerplexityOptions &options);

} // namespace longscope
