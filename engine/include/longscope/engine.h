// A Session holds one sequence's context (its KV cache) on a model; generate_batch runs
// several sequences together. The generation loop itself (generate(), GenerateRequest,
// GenerateResult, fit_prompt) is declared in longscope/generator.h, included here.
#pragma once

#include "longscope/generator.h"
#include "longscope/metrics.h"
#include "longscope/model.h"
#include "longscope/sampler.h"
#include "longscope/settings.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace longscope {

// The default context limit: the model's trained context, at most this many tokens.
inline constexpr int k_default_ctx_cap = 4096;

struct SessionOptions {
    int n_ctx = 0;     // context limit in tokens; 0 = the trained context, at most k_default_ctx_cap
    int n_threads = 0; // 0 = all hardware threads
    Settings settings; // long-context settings; settings.context_limit, when set, wins over n_ctx
};

using MetricsCallback = std::function<void(const StepMetrics &)>;

// One sequence's context on a model: its tokens and their KV cache, on the compute backend the
// settings name. Evaluation runs the model's architecture over that backend.
class Session {
public:
    // Throws InvalidArgument for bad options, OutOfMemory when the KV cache cannot be had,
    // BackendError when settings.backend is CUDA and CUDA cannot be used (the reason says
    // why: no plugin, no driver or GPU, weights too large for the device).
    Session(const Model &model, const SessionOptions &options = {});
    ~Session();
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    // Appends `tokens` to the context and evaluates them. Returns the logits of the last
    // one [n_vocab]. With `all_logits`, returns [tokens.size(), n_vocab]. Throws
    // ContextOverflow when the context limit would be passed (the context is unchanged),
    // InvalidArgument for an empty list or an id outside the vocabulary. Under the shift
    // overflow policy nothing overflows: tokens that do not fit are evaluated in pieces, the
    // context shifted (settings.h OverflowPolicy::Shift) whenever it is full; positions are
    // then indices into history(), which no longer holds the dropped tokens.
    std::span<const float> eval(std::span<const int32_t> tokens, bool all_logits = false);

    // New settings, applied at the next eval(): the cache migrates to a new mode or limit,
    // cached keys are converted when store_kv_before_rope flips; nothing is lost. A
    // context_limit of 0 means the model's default, as in SessionOptions; settings() reports
    // the limit in effect. Throws InvalidArgument for invalid settings or a limit below the
    // current length (the old settings then stay). Changing settings.backend moves the
    // context to the other backend (its cache is rebuilt there from the tokens at the next
    // eval()); BackendError when CUDA is asked for and cannot be used (the old settings stay).
    void set_settings(const Settings &settings);
    const Settings &settings() const;

    // Called after every eval() with that step's metrics.
    void set_metrics_callback(MetricsCallback cb);
    const StepMetrics &last_metrics() const;
    // The ledger as it stands now (between steps).
    MemoryLedger memory() const;

    // Empty, or why the session left the CUDA backend: when a CUDA step fails (out of device
    // memory, a kernel error), the step is evaluated again on the CPU, settings().backend
    // becomes CPU and this says what failed.
    const std::string &backend_note() const;

    void reset();
    // Keeps the first n_tokens of the context and forgets the rest (regenerate, edit an
    // earlier turn). Throws InvalidArgument when n_tokens is negative or beyond n_past().
    void truncate(int n_tokens);
    int n_past() const;
    // How many tokens at the start of history() have cached rows equal to what evaluating
    // them afresh would give: n_past(), or fewer after a context shift (the rows after the
    // sinks were computed with the dropped tokens in view). A reused prefix stops there.
    int exact_prefix() const;
    // Context shifts made since the session was created.
    int64_t shifts() const;
    int n_ctx() const;
    int n_threads() const;
    const std::vector<int32_t> &history() const;
    const Model &model() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

// Called for each generated token of sequence `seq` in a batch, as TokenCallback is (the
// text held to the end comes with id -1). Return false to stop that sequence.
using BatchTokenCallback = std::function<bool(size_t seq, int32_t id, std::string_view text)>;

// Generates for several prompts together: every step evaluates the next token of every
// unfinished sequence in one forward pass (the prompts' prefill too), each sequence with its
// own KV cache and length, so prompts of different lengths need no padding and each result
// equals its own single-sequence run. With settings.attention.reproduce_padding_bug the
// prompts are instead left-padded to the longest with token 0 and the padding is attended,
// as a padded batch under one shared causal mask would: a teaching switch, wrong on purpose.
// `on_metrics` gets one StepMetrics per forward pass, KV memory summed over the sequences.
std::vector<GenerateResult> generate_batch(const Model &model, const SessionOptions &options,
                                           const std::vector<GenerateRequest> &requests,
                                           const BatchTokenCallback &on_token = {},
                                           const MetricsCallback &on_metrics = {});

} // namespace longscope
