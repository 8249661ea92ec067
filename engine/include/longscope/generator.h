// The generation loop, once for every caller: generate() on a Session (the CLI, the server,
// the app), and each sequence of generate_batch(). The per-token logic (sampling, the tokens
// that end generation, stop strings, streamed text, counters, stop reasons) is one class,
// SequenceDecoder; the drivers only evaluate tokens.
#pragma once

#include "longscope/prompt_fit.h"
#include "longscope/sampler.h"
#include "longscope/tokenizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace longscope {

class Session;
class StopScanner;

enum class StopReason {
    MaxTokens,
    EndOfSequence, // an end-of-generation token was sampled
    ContextFull,
    Cancelled,     // the token callback returned false, or the request was cancelled
    StopString,    // the text reached one of the request's stop strings
};

// Called for each generated token with its text: possibly empty while a UTF-8 character is
// incomplete or while the text might be the start of a stop string. After the last token it
// is called once more with id -1 and the text held until then, if any. Return false to stop
// (no further call is made).
using TokenCallback = std::function<bool(int32_t id, std::string_view text)>;

struct GenerateRequest {
    std::vector<int32_t> prompt; // token ids, BOS included when wanted
    int max_new_tokens = 128;
    SamplingParams sampling;
    bool stop_at_eos = true;     // stop at an end-of-generation token, or a generated BOS (a new document)
    // The ids that end generation (not included in the result). Unset: the tokenizer's
    // end-of-generation set (Tokenizer::end_of_generation_ids: EOS, <|eot_id|>, <|im_end|>,
    // ...) and BOS when stop_at_eos, none otherwise. Set: exactly these, whatever stop_at_eos.
    std::optional<std::vector<int32_t>> end_tokens;
    // Generation ends when the text contains one of these; the returned and streamed text
    // stops just before it (the token that completed it is counted in `tokens`).
    std::vector<std::string> stop;

    // generate() only. Keep the longest common prefix of the prompt with what the session
    // already holds and evaluate the rest (at least one token, for the logits): the same
    // logits, bit for bit, as a fresh context. Declined where that is not assured: settings
    // that change the forward pass since the last step (RoPE, attention, backend), a RoPE
    // base that varies with the length (NTK alpha auto, dynamic scaling), memory-efficient
    // attention, the CUDA backend (see reusable_prefix). Off: the context is cleared first.
    bool reuse_prefix = true;
    // generate() only. Continue the session's context as it stands: `prompt` (which may be
    // empty) is appended to it; with an empty prompt the last context token is evaluated
    // again for its logits. reuse_prefix does not apply.
    bool continue_context = false;
    // With continue_context and an empty prompt: the logits of the context's last token when
    // the caller holds them [n_vocab]; nothing is evaluated before the first sampling step.
    std::vector<float> context_logits;
    // generate() only. Evaluate every generated token, so the reply is in the context for
    // the next request (a chat); generation then also stops before sampling once the context
    // is full. Off: the last token is not evaluated (it needs no forward pass).
    bool keep_reply_in_context = false;

    // Which request this is, for `cancelled` (e.g. a CancelRegistry's check()).
    uint64_t id = 0;
    // Asked before every sampling step; true ends the generation with StopReason::Cancelled.
    // Called on the generating thread; it may read state set by other threads.
    std::function<bool(uint64_t id)> cancelled;
    // generate() only. Called once before the prompt (before deciding what of the context to
    // keep) and before every step's forward pass, on the generating thread: the place to
    // apply settings that arrived meanwhile (Session::set_settings). Not called by
    // generate_batch, whose settings are fixed.
    std::function<void()> before_step;
};

struct GenerateResult {
    std::vector<int32_t> tokens; // generated ids (an end-of-generation token is not included)
    std::string text;            // their text, exactly what was streamed
    int n_prompt = 0;            // the prompt's tokens (the whole context with continue_context)
    int n_cached = 0;            // of those, taken from the context instead of evaluated
    double prefill_seconds = 0;
    double decode_seconds = 0;
    StopReason stop = StopReason::MaxTokens;
    // With keep_reply_in_context: the logits of the context's last token as evaluated (before
    // any sampling adjustment), for a later request with continue_context and context_logits.
    std::vector<float> context_logits;

    // Prompt tokens evaluated (n_prompt - n_cached) / prefill seconds.
    double prefill_tokens_per_second() const;
    // (generated tokens - 1) / decode seconds: the first token comes from the prefill logits.
    double decode_tokens_per_second() const;
};

// The per-token logic of one sequence, shared by generate() and generate_batch(): the driver
// evaluates, then calls step() with the logits, and evaluates next_token() while it returns
// true.
class SequenceDecoder {
public:
    // `tokenizer` and `on_token` must outlive the decoder; `request` is read only here.
    SequenceDecoder(const Tokenizer &tokenizer, const GenerateRequest &request, TokenCallback on_token = {});
    ~SequenceDecoder();
    SequenceDecoder(SequenceDecoder &&) noexcept;
    SequenceDecoder &operator=(SequenceDecoder &&) noexcept;

    // Samples the next token from `logits` (changed in place: penalty, temperature);
    // `history` is the evaluated context (for the repetition penalty), `n_past` its length in
    // the cache and `n_ctx` the limit. Returns true when next_token() is to be evaluated and
    // generation goes on; false when the sequence has ended (result().stop says why).
    bool step(std::span<float> logits, std::span<const int32_t> history, int n_past, int n_ctx);
    int32_t next_token() const { return m_next; }
    // True once step() returned false, or from the start when no token is to be generated.
    bool done() const { return m_done; }

    // Streams what is still held (an incomplete UTF-8 character, text that might have begun
    // a stop string) and returns the result. Call once, at the end.
    GenerateResult finish();
    const GenerateResult &result() const { return m_result; }

private:
    void end(StopReason reason);
    void deliver(int32_t id, const std::string &text);

    Sampler m_sampler;
    TokenTextStream m_text;
    std::unique_ptr<StopScanner> m_stops;
    TokenCallback m_on_token;
    std::vector<int32_t> m_end_tokens;
    std::function<bool(uint64_t)> m_cancelled;
    uint64_t m_id = 0;
    int m_max_new_tokens = 0;
    bool m_keep_reply = false;
    bool m_refused = false; // on_token returned false: no further call
    bool m_done = false;
    int32_t m_next = -1;
    GenerateResult m_result;
};

// Request ids to cancel, shared by the thread that generates and those that cancel (a
// server's connection threads). A request is open from open() to close(); cancel() marks an
// open one, so a late cancel of a finished request leaves nothing behind.
class CancelRegistry {
public:
    void open(uint64_t id);
    void close(uint64_t id);
    // False when no request with this id is open.
    bool cancel(uint64_t id);
    bool cancelled(uint64_t id) const;
    // For GenerateRequest::cancelled; the registry must outlive the generation.
    std::function<bool(uint64_t)> check() const
    {
        return [this](uint64_t id) { return cancelled(id); };
    }

private:
    mutable std::mutex m_mutex;
    std::unordered_map<uint64_t, bool> m_open; // id -> cancelled
};

// How many leading tokens of `prompt` can be taken from `session`'s context: the longest
// common prefix with its history, at most prompt.size() - 1 (one token is evaluated for the
// logits); 0 when reuse is declined (see GenerateRequest::reuse_prefix).
int reusable_prefix(const Session &session, std::span<const int32_t> prompt);

// Runs the prompt (reusing the context's prefix, see GenerateRequest), then samples up to
// max_new_tokens. Throws InvalidArgument for an empty prompt, ContextOverflow when the prompt
// does not fit.
GenerateResult generate(Session &session, const GenerateRequest &request, const TokenCallback &on_token = {});

} // namespace longscope
