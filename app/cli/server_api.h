// The OpenAI-compatible API of `longscope-cli serve`, without sockets: request parsing and
// validation, the response and stream-chunk JSON shapes, errors in OpenAI's shape.
// serve.cpp wires these to HTTP; tst_serve tests them over real HTTP.
#pragma once

#include "longscope/chat.h"
#include "longscope/engine.h"
#include "longscope/metrics.h"
#include "longscope/sampler.h"
#include "longscope/settings.h"
#include "longscope/tokenizer.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace longscope::cli::api {

using json = nlohmann::json;

// An error answered as {"error": {"message", "type", "param", "code"}} with an HTTP status.
class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string type = "invalid_request_error",
             std::string param = {}, std::string code = {});
    int status() const { return m_status; }
    const std::string &type() const { return m_type; }
    const std::string &param() const { return m_param; }
    const std::string &code() const { return m_code; }
    json body() const;
    // A copy that shares no storage with this one. std::runtime_error keeps its message in a
    // reference-counted buffer that copies share, counted inside the C++ library where
    // ThreadSanitizer does not see the count; an error handed to another thread is detached.
    ApiError detached() const;

private:
    int m_status;
    std::string m_type, m_param, m_code;
};

// The body of an error (param and code null when empty).
json error_body(std::string_view message, std::string_view type, std::string_view param = {},
                std::string_view code = {});

enum class Endpoint { Chat, Completion };

// OpenAI's limits and defaults.
inline constexpr int k_max_stop_sequences = 4;
inline constexpr int k_max_logprobs = 5;             // alternatives per token in /v1/completions
inline constexpr int k_default_completion_tokens = 16; // /v1/completions without max_tokens
inline constexpr int k_max_json_depth = 64;            // deeper request bodies are refused

// A validated request. Fields not given keep the server's defaults.
struct CompletionRequest {
    Endpoint endpoint = Endpoint::Chat;
    std::vector<ChatMessage> messages;          // chat: as the template sees them
    std::string tools_json;                     // chat: the tool definitions (empty: none)
    bool parse_tool_calls = true;               // tool_choice "auto" (false: "none")
    std::string prompt;                         // completions: text...
    std::optional<std::vector<int32_t>> prompt_ids; // ...or token ids
    std::optional<int> max_tokens;
    SamplingParams sampling;                    // OpenAI defaults: temperature 1, top_p 1, no top-k
    bool seed_given = false;
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;                 // stream_options.include_usage
    bool echo = false;                          // completions: the prompt precedes the text
    std::optional<int> logprobs;                // completions: log-probabilities, with this many alternatives
    Settings settings;                          // server defaults plus the extra fields
    std::string model;                          // as the client named it (informative)
};

// Parses and validates a request body. `defaults` are the server's long-context settings,
// which the extra fields (ntk_alpha, kv_before_rope, memory_efficient_attention,
// causal_flash, kv_mode, kv_type_k, kv_type_v) override. Throws ApiError (400) naming the offending field.
CompletionRequest parse_request(Endpoint endpoint, std::string_view body, const Settings &defaults);

// The request's conversation rendered by the model's own template (or `template_text`, serve's
// --chat-template, when given) with its tools and the generation prompt, tokenized and fitted
// as build_chat_prompt does. What the template cannot render (it raises, or uses what the
// renderer lacks) is an ApiError 400 carrying the renderer's message; ContextOverflow passes.
ChatPrompt chat_prompt(const Model &model, const CompletionRequest &r, const std::string &template_text, int limit,
                       int reserve, OverflowPolicy policy);

// How the reply to that prompt is split (reasoning, tool calls), from the template that rendered it.
ReplyFormat chat_reply_format(const Model &model, const CompletionRequest &r, const std::string &template_text,
                              const ChatPrompt &prompt);

// Applies the extra long-context fields of `body` to `settings`; throws ApiError.
void apply_settings_fields(const json &body, Settings &settings);

// The long-context settings as the API spells them (for /v1/metrics and responses).
json settings_json(const Settings &s);

// "stop" for an end of sequence or a stop sequence, "length" for max_tokens or a full context.
// (Stop sequences are found by the generator: GenerateRequest::stop.)
std::string finish_reason(StopReason reason);

struct Usage {
    int prompt_tokens = 0;
    int completion_tokens = 0;
};
json usage_json(const Usage &u);

// A fresh id: "chatcmpl-..." or "cmpl-..." with 24 random characters.
std::string new_id(Endpoint endpoint);

// Whole responses. A chat reply is split as the template writes it: "content" (null when the
// reply is only tool calls), "reasoning_content" when the model reasoned apart, "tool_calls"
// when it called tools (finish_reason "tool_calls" then, unless it ran out of tokens).
json chat_response(const std::string &id, int64_t created, const std::string &model,
                   const ReplySplitter::Delta &reply, const std::string &finish, const Usage &usage);
json completion_response(const std::string &id, int64_t created, const std::string &model,
                         const std::string &text, const std::string &finish, const Usage &usage,
                         const json &logprobs = nullptr);

// The log-probability of one token given the ones before it, with the most likely
// alternatives (token text, log-probability), most likely first.
struct TokenLogprob {
    std::string text;
    std::optional<double> logprob; // none for the first token of the context
    std::vector<std::pair<std::string, double>> top;
};
// choices[0].logprobs of a completion: {"tokens", "token_logprobs", "top_logprobs",
// "text_offset"} (OpenAI's legacy shape, which vLLM returns), offsets counted from
// `first_offset`. top_logprobs is null when no alternatives were asked for.
json logprobs_json(const std::vector<TokenLogprob> &tokens, bool with_top, size_t first_offset = 0);

// Stream chunks: `role` for the first chat chunk, `text` a piece of content, `finish` set
// on the last choice chunk (with an empty delta). `usage` a final chunk with no choices.
json chat_chunk(const std::string &id, int64_t created, const std::string &model,
                const std::optional<std::string> &text, const std::optional<std::string> &finish,
                bool role = false);
// A chunk carrying a piece of a split chat reply: delta.reasoning_content, delta.content and
// delta.tool_calls (each call whole, numbered from `first_call`).
json chat_reply_chunk(const std::string &id, int64_t created, const std::string &model,
                      const ReplySplitter::Delta &piece, size_t first_call);
// The finish reason of a chat reply: "tool_calls" when it called tools and was not cut short.
std::string chat_finish_reason(const std::string &finish, bool called_tools);
json completion_chunk(const std::string &id, int64_t created, const std::string &model,
                      const std::string &text, const std::optional<std::string> &finish);
json usage_chunk(Endpoint endpoint, const std::string &id, int64_t created, const std::string &model,
                 const Usage &usage);

// One server-sent event carrying `j`.
std::string sse_event(const json &j);
inline constexpr std::string_view k_sse_done = "data: [DONE]\n\n";

// Serializes for the wire; invalid UTF-8 (never produced by the engine) replaced.
std::string dump(const json &j);

// GET /v1/models and /v1/models/{id}: the model with what a client needs to know of it
// (the context the server runs with, as vLLM's max_model_len and as context_length; the
// architecture; the trained context and the vocabulary size).
struct ModelMeta {
    int context_length = 0;
    int n_ctx_train = 0;
    int n_vocab = 0;
    std::string architecture;
};
json model_object(const std::string &name, int64_t created, const ModelMeta &meta = {});

// POST /tokenize and /detokenize, as llama-server and vLLM answer them (so a client that
// needs token boundaries, such as windowed remote perplexity, speaks one protocol to all):
// the text in "content" (llama-server) or "prompt" (vLLM), special tokens (BOS) added with
// "add_special" / "add_special_tokens" (default: false for "content", true for "prompt", as
// each of them does); an optional "model" must name the served one. The answer is
// {"tokens", "count", "max_model_len"}; /detokenize takes {"tokens"} and answers the text as
// "content" and "prompt". Throws ApiError (400, or 404 for another model).
json tokenize_response(const Tokenizer &tok, std::string_view body, const std::string &model_name, int n_ctx);
json detokenize_response(const Tokenizer &tok, int n_vocab, std::string_view body, const std::string &model_name);
json models_list(const std::string &name, int64_t created, const ModelMeta &meta = {});

// What GET /metrics publishes (docs/serve.md, "Prometheus metrics").
struct ServerCounters {
    MemoryLedger memory;
    int kv_tokens = 0;           // tokens held in the context
    int context_limit = 0;
    int requests_running = 0;
    int requests_waiting = 0;
    uint64_t requests_completed = 0;
    uint64_t prompt_tokens = 0;     // evaluated (prefix reuse excluded)
    uint64_t cached_prompt_tokens = 0;
    uint64_t generation_tokens = 0;
    double prompt_tokens_per_second = 0;     // of the latest request
    double generation_tokens_per_second = 0; // of the latest request
    double step_tokens_per_second = 0;       // of the latest evaluation step
    int step_threads = 0;                    // CPU threads the latest evaluation step ran on
};
// The Prometheus text exposition of `c`, every name prefixed "longscope:".
std::string prometheus_metrics(const ServerCounters &c, const std::string &model);

// GET /v1/metrics: the latest step's metrics and ledger (step null before any request).
json metrics_json(const std::optional<StepMetrics> &last, const MemoryLedger &ledger_now);

// Whether the Authorization header carries "Bearer KEY" (compared in constant time).
bool bearer_matches(std::string_view authorization, std::string_view key);

// --- A request's head, checked before its body is read (docs/serve.md, "Limits") ---

// The limits on a request's head: the request line and the header fields together.
inline constexpr size_t k_max_head_bytes = 32 * 1024;
inline constexpr int k_max_header_fields = 100;
inline constexpr size_t k_max_header_line = 8 * 1024; // one header field line

// Measures a request's head while it arrives, so that its limits hold before all of it is
// in memory: feed() the bytes in order; once the empty line that ends the head is met, the
// rest is the body's. A head over a limit is refused (431) without reading further.
class HeadMeter {
public:
    enum class State { Reading, Complete, TooLarge };

    // Takes bytes that follow those already fed; returns how many of them belong to the head
    // (all of them while it is still Reading).
    size_t feed(std::string_view bytes);
    State state() const { return m_state; }
    // Which limit a TooLarge head passed, as a sentence.
    const std::string &problem() const { return m_problem; }

private:
    State m_state = State::Reading;
    size_t m_bytes = 0;
    size_t m_line = 0; // bytes of the current line so far
    int m_lines = 0;   // lines ended, the request line included
    std::string m_problem;
};

// Who may be named in the Host header (DNS rebinding: a page whose name resolves to this
// server sends its own name there).
struct HostPolicy {
    std::string bound_host;           // --host as given: an address or a name
    std::vector<std::string> allowed; // --allow-host names, lower case; "*" allows any
};

// The name in a Host header value ("name", "name:port", "[v6]", "[v6]:port"), lower case;
// nullopt when it is not of that form.
std::optional<std::string> host_name(std::string_view host_header);

// Whether a numeric address (as the socket gives it) is loopback: 127.0.0.0/8, ::1, or
// either mapped into IPv6.
bool is_loopback_address(std::string_view address);

// Checks the Host header's values (each occurrence) against the policy and `local_address`,
// the address the connection arrived at: the bound host, that address, "localhost",
// 127.0.0.1 and ::1 when that address is loopback, and the --allow-host names pass. Throws
// ApiError 400 (missing, repeated, malformed) or 403 (`host_not_allowed`).
void check_host(const std::vector<std::string_view> &host_values, std::string_view local_address,
                const HostPolicy &policy);

// How a request's body is framed.
struct BodyFraming {
    bool chunked = false;
    uint64_t length = 0; // Content-Length when not chunked
};

// Checks the Content-Length and Transfer-Encoding values (each occurrence) of a request that
// takes a body. Throws ApiError: 411 without either, 400 for a Content-Length that is not a
// plain decimal number (or given twice with different values, or together with
// Transfer-Encoding), 501 for a transfer coding other than "chunked", 413 for a
// Content-Length over `max_body`.
BodyFraming check_body_framing(const std::vector<std::string_view> &content_length,
                               const std::vector<std::string_view> &transfer_encoding, size_t max_body);

// Whether a Content-Type value is application/json (any case; parameters such as charset
// allowed).
bool is_json_media_type(std::string_view content_type);

// Throws ApiError 415 (`unsupported_media_type`) unless the Content-Type is JSON, which a
// browser cannot send across origins without asking first (a CORS preflight, which this
// server does not grant).
void check_json_content_type(const std::vector<std::string_view> &content_type);

} // namespace longscope::cli::api
