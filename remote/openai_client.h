// The client side of the OpenAI HTTP API as vLLM, SGLang, TGI, llama.cpp's llama-server and
// `longscope-cli serve` speak it, without a transport: the base URL and its routes, request
// bodies from sampling settings, server-sent events and their chunks, responses, /v1/models,
// prompt log-probabilities (echo + logprobs), and every failure as one clear sentence. The CLI
// sends these over cpp-httplib, the app over QNetworkAccessManager.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace longscope::remote {

using json = nlohmann::json;

// The deepest nesting of arrays and objects in a JSON text (strings skipped): answers nested
// deeper than k_max_json_depth are refused before parsing, so that a hostile server cannot
// exhaust the stack.
int json_nesting_depth(std::string_view text);
inline constexpr int k_max_json_depth = 64;

// What went wrong, for callers that act on it (retry, ask for a key, pick another model).
enum class Failure {
    BadUrl,        // the base URL is not http(s)://host[:port][/path]
    Connection,    // refused, unreachable, name not found, TLS
    Timeout,       // no answer (or no next chunk) in time
    Unauthorized,  // 401: key missing or wrong
    Forbidden,     // 403
    ModelNotFound, // 404 naming the model
    NotFound,      // 404: the route does not exist (not an OpenAI-compatible server, or a wrong path)
    RateLimited,   // 429
    BadRequest,    // 400 and other 4xx: the server's message is passed on
    Server,        // 5xx
    DroppedStream, // the stream ended before its last chunk
    Protocol,      // the answer is not what the API defines (not JSON, fields missing)
    Unsupported,   // the server lacks a feature (prompt log-probabilities, /metrics)
};

class ClientError : public std::runtime_error {
public:
    ClientError(Failure failure, std::string message, int status = 0)
        : std::runtime_error(std::move(message)), m_failure(failure), m_status(status)
    {
    }
    Failure failure() const { return m_failure; }
    int status() const { return m_status; } // the HTTP status, 0 when none came
private:
    Failure m_failure;
    int m_status;
};

// A server's base URL as the user gives it: "http://host:8000", "http://host:8000/v1" (the
// form OpenAI's clients take) or with a path prefix behind a proxy ("https://h/llm/v1").
struct BaseUrl {
    std::string scheme;  // "http" or "https"
    std::string host;    // a name, an IPv4 address or an IPv6 address without brackets
    int port = 0;        // 80 / 443 when not given
    std::string prefix;  // the path before /v1, without a trailing slash ("" or "/llm")

    // "scheme://host:port" (IPv6 in brackets).
    std::string origin() const;
    // The path of an API route ("/v1/models") or of the server's root routes ("/metrics").
    std::string api(std::string_view route) const;  // prefix + "/v1" + route
    std::string root(std::string_view route) const; // prefix + route
};

// Throws ClientError(BadUrl) naming what is wrong.
BaseUrl parse_base_url(std::string_view url);

// The sampling controls a request carries; unset fields are left to the server's defaults.
// top_k and repeat_penalty are extensions vLLM, SGLang, llama.cpp and Longscope accept.
struct SamplingFields {
    std::optional<double> temperature;
    std::optional<double> top_p;
    std::optional<int> top_k;            // 0: off
    std::optional<double> repeat_penalty; // 1: off
    std::optional<uint64_t> seed;
    std::optional<int> max_tokens;
    std::vector<std::string> stop;
};

struct ChatTurn {
    std::string role; // "system", "user", "assistant"
    std::string content;
};

// POST /v1/chat/completions and /v1/completions bodies. Streaming asks for the usage chunk.
json chat_request(const std::string &model, const std::vector<ChatTurn> &messages, const SamplingFields &sampling,
                  bool stream);
json completion_request(const std::string &model, const std::string &prompt, const SamplingFields &sampling,
                        bool stream);
// A completion that echoes the prompt with the log-probability of each of its tokens and
// generates one token (max_tokens 0 is refused by some servers). The prompt as text, or as
// token ids (a list of ints, which OpenAI, vLLM, llama-server and Longscope serve take as the
// prompt's tokens, adding none).
json prompt_logprobs_request(const std::string &model, const std::string &prompt);
json prompt_logprobs_request(const std::string &model, const std::vector<int32_t> &prompt);

// POST /tokenize (at the server's root) as llama-server ({"content", "add_special"}) and vLLM
// ({"model", "prompt", "add_special_tokens"}) take it: the body carries both spellings, each
// server reads its own and leaves the other's fields.
json tokenize_request(const std::string &model, const std::string &text, bool add_special);
// The "tokens" of a /tokenize answer; throws ClientError(Protocol) naming what is missing.
std::vector<int32_t> parse_tokens(std::string_view body);
// A failed prompt log-probabilities request as the client reports it: a 400 that refuses
// 'echo' (llama-server: "Only no echo is supported") becomes Unsupported, as an answer
// without log-probabilities is; other failures are returned as they are.
ClientError prompt_logprobs_failure(const ClientError &e);
// Whether a failed /tokenize means the server has no such endpoint (404, 405, 501: SGLang,
// TGI; or an answer without "tokens"), so a client scores the text as one window instead.
bool no_tokenizer_endpoint(const ClientError &e);
// What a client says when it falls back to one window.
std::string one_window_note();

// The headers every request carries: JSON bodies, and the key when there is one.
std::vector<std::pair<std::string, std::string>> request_headers(const std::string &api_key);

// Server-sent events: bytes in as they arrive, the data of each complete event out (the
// "data:" lines of one event joined by newlines; comments and other fields skipped).
class SseDecoder {
public:
    std::vector<std::string> feed(std::string_view bytes);
    // Whether bytes of an unfinished event are held.
    bool partial() const { return !m_buffer.empty() || !m_data.empty(); }

private:
    std::string m_buffer; // an incomplete line
    std::string m_data;   // data lines of the current event
    bool m_has_data = false;
};

struct Usage {
    int prompt_tokens = 0;
    int completion_tokens = 0;
};

// One event of a streamed chat or completion.
struct StreamEvent {
    bool done = false;                 // "[DONE]"
    std::string text;                  // delta.content (chat) or text (completions)
    std::optional<std::string> finish; // finish_reason, on the last choice chunk
    std::optional<Usage> usage;        // the usage chunk
};

// Parses the data of one event; throws ClientError (Protocol for a chunk that is not JSON,
// BadRequest/Server for an error object sent in the stream, with its message).
StreamEvent parse_stream_event(std::string_view data);

// Follows a stream to its end: feed() the events' data, then finish() at the end of the
// body, which throws ClientError(DroppedStream) when no finish_reason (or [DONE]) came.
class StreamState {
public:
    // Returns the new text of the event (possibly empty).
    std::string feed(std::string_view data);
    void finish() const;
    bool finished() const { return m_finish.has_value() || m_done; }
    const std::string &text() const { return m_text; }
    std::string finish_reason() const { return m_finish.value_or(""); }
    const std::optional<Usage> &usage() const { return m_usage; }

private:
    std::string m_text;
    std::optional<std::string> m_finish;
    std::optional<Usage> m_usage;
    bool m_done = false;
};

// A whole (not streamed) response.
struct Completion {
    std::string text;
    std::string finish_reason;
    std::optional<Usage> usage;
};
Completion parse_completion(std::string_view body, bool chat);

// GET /v1/models: each model with what the server says of it (vLLM's max_model_len,
// llama.cpp's meta.n_ctx_train, Longscope's context_length and architecture).
struct RemoteModel {
    std::string id;
    std::optional<int> context_length;
    std::string architecture;
    std::string owned_by;
};
std::vector<RemoteModel> parse_models(std::string_view body);

// The prompt's tokens and the log-probability of each given the ones before it (the first
// has none: it is left out, so logprobs[i] belongs to tokens[i + 1]).
struct PromptLogprobs {
    std::vector<std::string> tokens;
    std::vector<double> logprobs;
};
// From a response to prompt_logprobs_request: the first usage.prompt_tokens entries of
// choices[0].logprobs. Throws ClientError(Unsupported) when the server sent none.
PromptLogprobs parse_prompt_logprobs(std::string_view body);

// Perplexity by position from prompt log-probabilities: the server scored the text as one
// window from its start, so logprobs[i] is the token that had i + 1 tokens before it, as in a
// local run's first window. Points of `bucket` positions [begin, end), the last one's end cut
// at `context` (the server's context length) when it is known (positive).
struct NllBucket {
    int begin = 0;
    int end = 0;
    int64_t count = 0;
    double mean_nll = 0; // nats
};
struct NllCurve {
    std::vector<NllBucket> buckets;
    double mean_nll = 0;
    int64_t n_scored = 0;
};
NllCurve nll_by_position(const PromptLogprobs &lp, int bucket, int context = 0);

// Perplexity in windows through a server, with the windows of the local perplexity
// (longscope/perplexity.h): each window is the prefix the server's tokenizer puts ahead of a
// text (BOS, or nothing) and up to `ctx` - prefix text tokens, sent as token ids; with a
// `stride` below that, later windows score only the tokens no earlier window scored. Streamed
// (`stream`: a local run through one context of `ctx` tokens that stops when it is full, as
// under the error overflow policy) the text is one window of the prefix and `ctx` tokens.
// The transport asks request() for each window's body, sends it and hands the answer to add().
class WindowedScoring {
public:
    // Throws std::invalid_argument for a text shorter than two tokens (one with a prefix) or
    // a window or stride that does not fit.
    WindowedScoring(std::vector<int32_t> tokens, std::vector<int32_t> prefix, int ctx, int stride = 0,
                    bool stream = false);
    bool done() const { return m_next >= m_windows.size(); }
    // The current window's /v1/completions body.
    json request(const std::string &model) const;
    // The server's answer for the current window (parse_prompt_logprobs of it); moves on.
    // Throws ClientError(Protocol) when it has not one log-probability per prompt token after
    // the first.
    void add(const PromptLogprobs &lp);

    int windows() const { return int(m_windows.size()); }
    int windows_done() const { return int(m_next); }
    int64_t total() const { return m_total; } // tokens the run scores
    int64_t scored() const { return int64_t(m_nll.size()); }
    // Why a streamed run stopped before the text's end (empty otherwise).
    const std::string &stopped() const { return m_stopped; }
    // Per scored token, in the text's order: its position in its window and its NLL.
    const std::vector<int> &positions() const { return m_positions; }
    const std::vector<double> &nll() const { return m_nll; }
    // Mean NLL by position in the window, and by index in the text.
    NllCurve curve(int bucket) const;
    NllCurve text_curve(int bucket) const;

private:
    struct Window {
        int64_t start = 0, end = 0, first_new = 0; // text tokens [start, end), scored from first_new
    };
    std::vector<int32_t> m_tokens;
    std::vector<int32_t> m_prefix;
    int m_max_position = 0;
    std::vector<Window> m_windows;
    size_t m_next = 0;
    int64_t m_total = 0;
    std::string m_stopped;
    std::vector<int> m_positions;
    std::vector<int64_t> m_text_index;
    std::vector<double> m_nll;
};

// An HTTP status other than 200 as a ClientError with a sentence that says what to do; the
// server's own message (OpenAI's {"error": {"message"}}, TGI's {"error": "..."}, FastAPI's
// {"detail"}) is quoted. `model` and `url` name what was asked for.
ClientError http_error(int status, std::string_view body, std::string_view model, std::string_view url);
// A transport failure: `detail` is the transport's own words.
ClientError connection_error(std::string_view url, std::string_view detail);
ClientError timeout_error(std::string_view url, double seconds);
ClientError dropped_stream_error(std::string_view url, size_t chars_received);

} // namespace longscope::remote
