// The decode loop: a Session holds one sequence's context (its KV cache) on a model, and
// generate() runs prefill, then sampling step by step, streaming text.
#pragma once

#include "longscope/model.h"
#include "longscope/sampler.h"

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
};

class CpuForward;

class Session {
public:
    // Throws InvalidArgument for bad options, OutOfMemory when the KV cache cannot be had.
    Session(const Model &model, const SessionOptions &options = {});
    ~Session();
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    // Appends `tokens` to the context and evaluates them. Returns the logits of the last
    // one [n_vocab]. With `all_logits`, returns [tokens.size(), n_vocab]. Throws
    // ContextOverflow when the context limit would be passed (the context is unchanged),
    // InvalidArgument for an empty list or an id outside the vocabulary.
    std::span<const float> eval(std::span<const int32_t> tokens, bool all_logits = false);

    void reset();
    int n_past() const;
    int n_ctx() const { return m_n_ctx; }
    int n_threads() const;
    const std::vector<int32_t> &history() const { return m_history; }
    const Model &model() const { return m_model; }

private:
    const Model &m_model;
    int m_n_ctx = 0;
    std::unique_ptr<CpuForward> m_forward;
    std::vector<int32_t> m_history;
};

enum class StopReason { MaxTokens, EndOfSequence, ContextFull, Cancelled };

struct GenerateRequest {
    std::vector<int32_t> prompt; // token ids, BOS included when wanted
    int max_new_tokens = 128;
    SamplingParams sampling;
    bool stop_at_eos = true;     // stop at EOS, or at a generated BOS (a new document)
};

struct GenerateResult {
    std::vector<int32_t> tokens; // generated ids (an end-of-sequence token is not included)
    std::string text;            // their text, exactly what was streamed
    int n_prompt = 0;
    double prefill_seconds = 0;
    double decode_seconds = 0;
    StopReason stop = StopReason::MaxTokens;

    double prefill_tokens_per_second() const;
    double decode_tokens_per_second() const;
};

// Called for each generated token with its text (possibly empty while a UTF-8 character is
// incomplete). Return false to stop.
using TokenCallback = std::function<bool(int32_t id, std::string_view text)>;

// Runs prefill on a fresh context, then samples up to max_new_tokens. Throws InvalidArgument
// for an empty prompt, ContextOverflow when the prompt does not fit.
GenerateResult generate(Session &session, const GenerateRequest &request,
                        const TokenCallback &on_token = {});

} // namespace longscope
