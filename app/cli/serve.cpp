// longscope-cli serve: an OpenAI-compatible HTTP API on cpp-httplib.
//
// One engine (the model and one Session) belongs to one worker thread. HTTP handler threads
// (httplib's pool, bounded) parse and validate a request, tokenize its prompt, put a Job on a
// bounded queue and wait for it; a full queue is a 503. Streamed responses are chunked
// server-sent events fed from the job as the worker releases text; when writing to the client
// fails (it went away), the job's id is cancelled and the generator stops at the next step;
// a waiting non-streamed request checks its socket for the same. The connections themselves
// (limits while a request arrives, the worker pool) are http_guard's.
#include "commands.h"

#include "args.h"
#include "http_guard.h"
#include "model_path.h"
#include "serve_logprobs.h"
#include "server_api.h"

#include "longscope/chat.h"
#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/generator.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <random>
#include <thread>

namespace longscope::cli {

namespace {

using namespace api;
using clock_type = std::chrono::steady_clock;

constexpr const char *k_json = "application/json";

struct Job {
    CompletionRequest req;
    std::vector<int32_t> prompt;
    int max_tokens = 0;
    std::string id;
    uint64_t number = 0;             // the engine's id for cancellation, set by submit()
    int64_t created = 0;
    clock_type::time_point deadline;

    enum class State { Queued, Running, Done, Failed };
    std::mutex m;
    std::condition_variable cv;
    State state = State::Queued;
    std::string pending;             // released text the stream has not sent yet
    std::string text;                // all released text
    int prompt_tokens = 0;
    int completion_tokens = 0;
    std::string finish;
    json logprobs;                   // choices[0].logprobs when asked for
    std::optional<ApiError> error;   // when Failed
    ReplyFormat reply_format;        // chat: how the reply splits into reasoning, content and tool calls

    // Called on the engine thread; the handler's thread reads the error (ApiError::detached).
    void fail(const ApiError &e)
    {
        {
            std::lock_guard<std::mutex> lk(m);
            error = e.detached();
            state = State::Failed;
        }
        cv.notify_all();
    }
    void complete()
    {
        {
            std::lock_guard<std::mutex> lk(m);
            state = State::Done;
        }
        cv.notify_all();
    }
};

struct LastRequest {
    std::string id;
    int prompt_tokens = 0;
    int cached_prompt_tokens = 0; // taken from the previous request's context
    int completion_tokens = 0;
    double prefill_tokens_per_second = 0;
    double decode_tokens_per_second = 0;
    std::string finish_reason;
};

// The model, one session, and the worker thread that alone touches the session.
class Engine {
public:
    Engine(const Model &model, const SessionOptions &options, size_t max_queue)
        : m_session(model, options), m_n_ctx(m_session.n_ctx()), m_n_threads(m_session.n_threads()),
          m_max_queue(max_queue)
    {
        m_session.set_metrics_callback([this](const StepMetrics &s) {
            std::lock_guard<std::mutex> lk(m_stats_mutex);
            m_last_step = s;
            m_kv_tokens = s.position;
        });
        m_ledger = m_session.memory();
    }
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;
    ~Engine() { stop(); }

    int n_ctx() const { return m_n_ctx; }
    int n_threads() const { return m_n_threads; }

    void start() { m_thread = std::thread([this] { run(); }); }

    // Cancels the running job, fails the queued ones, joins the worker.
    void stop()
    {
        std::deque<std::shared_ptr<Job>> dropped;
        {
            std::lock_guard<std::mutex> lk(m_mutex);
            m_stopping = true;
            dropped.swap(m_queue);
        }
        m_cv.notify_all();
        for (auto &job : dropped) {
            m_cancels.close(job->number);
            job->fail(ApiError(503, "the server is shutting down", "server_error", "", "server_shutting_down"));
        }
        // The signal watcher and the main thread may both stop the engine.
        std::lock_guard<std::mutex> lk(m_join_mutex);
        if (m_thread.joinable())
            m_thread.join();
    }

    // Throws ApiError 503 when the queue is full or the server is stopping.
    void submit(std::shared_ptr<Job> job)
    {
        {
            std::lock_guard<std::mutex> lk(m_mutex);
            if (m_stopping)
                throw ApiError(503, "the server is shutting down", "server_error", "", "server_shutting_down");
            if (m_queue.size() >= m_max_queue)
                throw ApiError(503,
                               "the server is busy: " + std::to_string(m_queue.size()) +
                                   " requests are already waiting for the engine; retry later",
                               "server_error", "", "server_busy");
            job->number = ++m_last_number;
            m_cancels.open(job->number);
            m_queue.push_back(std::move(job));
        }
        m_cv.notify_all();
    }

    // The client of a submitted job went away: the generator stops at its next step (a queued
    // job is dropped when its turn comes).
    void cancel(uint64_t number) { m_cancels.cancel(number); }

    json stats() const
    {
        std::optional<StepMetrics> last;
        MemoryLedger ledger;
        json j;
        {
            std::lock_guard<std::mutex> lk(m_stats_mutex);
            last = m_last_step;
            ledger = m_ledger;
            j = metrics_json(last, ledger);
            if (m_last_request) {
                j["last_request"] = json{{"id", m_last_request->id},
                                         {"prompt_tokens", m_last_request->prompt_tokens},
                                         {"cached_prompt_tokens", m_last_request->cached_prompt_tokens},
                                         {"completion_tokens", m_last_request->completion_tokens},
                                         {"prefill_tokens_per_second", m_last_request->prefill_tokens_per_second},
                                         {"decode_tokens_per_second", m_last_request->decode_tokens_per_second},
                                         {"finish_reason", m_last_request->finish_reason}};
            } else {
                j["last_request"] = nullptr;
            }
            j["server"] = json{{"requests_completed", m_completed}, {"busy", m_busy}};
        }
        {
            std::lock_guard<std::mutex> lk(m_mutex);
            j["server"]["queued"] = m_queue.size();
            j["server"]["max_queue"] = m_max_queue;
        }
        j["server"]["context_limit"] = n_ctx();
        j["server"]["threads"] = n_threads();
        return j;
    }

    // What GET /metrics publishes.
    ServerCounters counters() const
    {
        ServerCounters c;
        {
            std::lock_guard<std::mutex> lk(m_stats_mutex);
            c = m_counters;
            c.memory = m_last_step ? m_last_step->memory : m_ledger;
            if (m_last_step && m_ledger.peak_total > c.memory.peak_total)
                c.memory = m_ledger; // the ledger read after the latest request is newer
            c.kv_tokens = m_kv_tokens;
            c.requests_running = m_busy ? 1 : 0;
            c.step_tokens_per_second = m_last_step ? m_last_step->tokens_per_second : 0;
            c.step_threads = m_last_step ? m_last_step->threads : 0;
        }
        {
            std::lock_guard<std::mutex> lk(m_mutex);
            c.requests_waiting = int(m_queue.size());
        }
        c.context_limit = n_ctx();
        return c;
    }

private:
    void run()
    {
        for (;;) {
            std::shared_ptr<Job> job;
            {
                std::unique_lock<std::mutex> lk(m_mutex);
                m_cv.wait(lk, [&] { return m_stopping || !m_queue.empty(); });
                if (m_stopping)
                    return;
                job = std::move(m_queue.front());
                m_queue.pop_front();
            }
            {
                std::lock_guard<std::mutex> lk(m_stats_mutex);
                m_busy = true;
            }
            // The client hears the outcome only once the statistics say the engine is free, so
            // a /metrics scrape after a reply never sees that request still running.
            std::optional<ApiError> failure;
            try {
                process(*job);
            } catch (const ApiError &e) {
                failure = e;
            } catch (const ContextOverflow &e) {
                failure = ApiError(400, e.what(), "invalid_request_error", "", "context_length_exceeded");
            } catch (const InvalidArgument &e) {
                failure = ApiError(400, e.what());
            } catch (const std::bad_alloc &) {
                failure = ApiError(500, "out of memory", "server_error");
            } catch (const std::exception &e) {
                failure = ApiError(500, e.what(), "server_error");
            }
            m_cancels.close(job->number);
            MemoryLedger ledger;
            try {
                ledger = m_session.memory();
            } catch (...) {
            }
            {
                std::lock_guard<std::mutex> lk(m_stats_mutex);
                m_ledger = ledger;
                m_kv_tokens = m_session.n_past();
                m_busy = false;
            }
            if (failure)
                job->fail(*failure);
            else
                job->complete();
        }
    }

    bool stopping()
    {
        std::lock_guard<std::mutex> lk(m_mutex);
        return m_stopping;
    }

    void process(Job &job)
    {
        if (m_cancels.cancelled(job.number)) {
            std::fprintf(stderr, "[serve] %s: dropped, the client went away while it waited\n", job.id.c_str());
            throw ApiError(499, "the client went away", "invalid_request_error", "", "cancelled");
        }
        if (clock_type::now() >= job.deadline) {
            std::fprintf(stderr, "[serve] %s: timed out waiting for the engine\n", job.id.c_str());
            throw ApiError(503, "the request timed out waiting for the engine", "server_error", "", "timeout");
        }
        Settings s = job.req.settings;
        s.context_limit = m_n_ctx;
        m_session.set_settings(s);
        {
            std::lock_guard<std::mutex> lk(job.m);
            job.state = Job::State::Running;
        }
        job.cv.notify_all();

        GenerateRequest g;
        g.prompt = job.prompt;
        g.max_new_tokens = job.max_tokens;
        g.sampling = job.req.sampling;
        g.stop = job.req.stop;
        g.reuse_prefix = true; // the context of the last request: its common prefix is not evaluated again
        g.id = job.number;
        bool client_gone = false, timed_out = false, shutting_down = false;
        g.cancelled = [&](uint64_t number) {
            client_gone = client_gone || m_cancels.cancelled(number);
            if (client_gone)
                return true;
            if (clock_type::now() >= job.deadline) {
                timed_out = true;
                return true;
            }
            if (stopping()) {
                shutting_down = true;
                return true;
            }
            return false;
        };
        GenerateResult result = generate(m_session, g, [&](int32_t, std::string_view piece) {
            if (!piece.empty()) {
                {
                    std::lock_guard<std::mutex> lk(job.m);
                    job.text += piece;
                    if (job.req.stream)
                        job.pending += piece;
                }
                job.cv.notify_all();
            }
            return true;
        });

        const std::string finish = finish_reason(result.stop);
        LastRequest last{job.id,
                         result.n_prompt,
                         result.n_cached,
                         int(result.tokens.size()),
                         result.prefill_tokens_per_second(),
                         result.decode_tokens_per_second(),
                         finish};
        std::fprintf(stderr,
                     "[serve] %s: %d prompt + %d completion tokens, prefill %.1f tok/s, decode %.1f tok/s, %s%s\n",
                     job.id.c_str(), last.prompt_tokens, last.completion_tokens, last.prefill_tokens_per_second,
                     last.decode_tokens_per_second, finish.c_str(),
                     client_gone ? " (client went away)" : timed_out ? " (timed out)" : "");
        {
            std::lock_guard<std::mutex> lk(m_stats_mutex);
            m_last_request = last;
            ++m_completed;
            m_counters.requests_completed = m_completed;
            m_counters.prompt_tokens += uint64_t(result.n_prompt - result.n_cached);
            m_counters.cached_prompt_tokens += uint64_t(result.n_cached);
            m_counters.generation_tokens += result.tokens.size();
            m_counters.prompt_tokens_per_second = last.prefill_tokens_per_second;
            m_counters.generation_tokens_per_second = last.decode_tokens_per_second;
        }
        if (shutting_down)
            throw ApiError(503, "the server is shutting down", "server_error", "", "server_shutting_down");
        json logprobs = nullptr;
        if (job.req.logprobs && !client_gone && !timed_out)
            logprobs = score(job, result.tokens);
        {
            std::lock_guard<std::mutex> lk(job.m);
            job.logprobs = std::move(logprobs);
            job.prompt_tokens = result.n_prompt;
            job.completion_tokens = int(result.tokens.size());
            job.finish = finish;
        } // the worker loop marks the job done once the statistics are updated
    }

    // choices[0].logprobs of a completion: the prompt and the reply evaluated again with
    // every position's logits; with echo the prompt's tokens come first.
    json score(const Job &job, const std::vector<int32_t> &generated)
    {
        std::vector<int32_t> all = job.prompt;
        all.insert(all.end(), generated.begin(), generated.end());
        std::vector<TokenLogprob> scored = score_tokens(m_session, all, *job.req.logprobs);
        size_t first_offset = 0;
        if (!job.req.echo) {
            for (size_t i = 0; i < job.prompt.size(); ++i)
                first_offset += scored[i].text.size();
            scored.erase(scored.begin(), scored.begin() + std::ptrdiff_t(job.prompt.size()));
        }
        return logprobs_json(scored, *job.req.logprobs > 0, first_offset);
    }

    Session m_session;
    const int m_n_ctx;     // fixed for the server's life (every request's settings keep it)
    const int m_n_threads;
    const size_t m_max_queue;
    std::thread m_thread;
    std::mutex m_join_mutex;
    CancelRegistry m_cancels; // submitted jobs, by number

    mutable std::mutex m_mutex; // queue, stopping and numbers
    uint64_t m_last_number = 0;
    std::condition_variable m_cv;
    std::deque<std::shared_ptr<Job>> m_queue;
    bool m_stopping = false;

    mutable std::mutex m_stats_mutex;
    std::optional<StepMetrics> m_last_step;
    MemoryLedger m_ledger;
    std::optional<LastRequest> m_last_request;
    uint64_t m_completed = 0;
    bool m_busy = false;
    int m_kv_tokens = 0;
    ServerCounters m_counters; // the totals; the rest is filled in by counters()
};

void send_json(httplib::Response &res, int status, const json &body)
{
    res.status = status;
    res.set_content(dump(body), k_json);
}

void send_error(httplib::Response &res, const ApiError &e)
{
    res.status = e.status();
    if (e.status() == 401)
        res.set_header("WWW-Authenticate", "Bearer");
    if (e.status() == 503)
        res.set_header("Retry-After", "1");
    res.set_content(dump(e.body()), k_json);
}

ApiError context_error(int n_ctx, int prompt_tokens, std::optional<int> max_tokens, Endpoint ep)
{
    const char *what = ep == Endpoint::Chat ? "messages" : "prompt";
    std::string msg = "This model's maximum context length is " + std::to_string(n_ctx) + " tokens. However, ";
    if (max_tokens)
        msg += "you requested " + std::to_string(prompt_tokens + *max_tokens) + " tokens (" +
               std::to_string(prompt_tokens) + " in the " + what + ", " + std::to_string(*max_tokens) +
               " in the completion). Please reduce the length of the " + what + " or completion.";
    else
        msg += "your " + std::string(what) + " resulted in " + std::to_string(prompt_tokens) +
               " tokens, leaving no room for the completion. Please reduce the length of the " + what + ".";
    return ApiError(400, msg, "invalid_request_error", what, "context_length_exceeded");
}

// Tokenizes the prompt and checks that it and max_tokens fit in the context (or cuts it
// head-and-tail when the server runs with --overflow head-tail; with --overflow shift
// nothing overflows: the session shifts its context). Fills job.prompt and job.max_tokens;
// throws ApiError.
void prepare_prompt(const Model &model, const std::string &template_text, int n_ctx, Job &job)
{
    const CompletionRequest &r = job.req;
    const OverflowPolicy policy = r.settings.overflow == OverflowPolicy::HeadTail || r.settings.overflow == OverflowPolicy::Shift
                                      ? r.settings.overflow
                                      : OverflowPolicy::Error;
    const Tokenizer &tok = model.tokenizer();
    std::optional<int> requested = r.max_tokens;
    if (r.endpoint == Endpoint::Completion && !requested)
        requested = k_default_completion_tokens;
    const int reserve = requested.value_or(0);
    const int fit_reserve = policy == OverflowPolicy::HeadTail ? std::min(reserve, n_ctx / 2) : reserve;
    if (r.endpoint == Endpoint::Chat) {
        try {
            const ChatPrompt p = chat_prompt(model, r, template_text, n_ctx, fit_reserve, policy);
            job.prompt = p.tokens;
            job.reply_format = chat_reply_format(model, r, template_text, p);
        } catch (const ContextOverflow &) {
            const int whole = int(chat_prompt(model, r, template_text, 1 << 30, 0, policy).tokens.size());
            throw context_error(n_ctx, whole, r.max_tokens, r.endpoint);
        }
    } else {
        std::vector<int32_t> ids;
        if (r.prompt_ids) {
            ids = *r.prompt_ids;
            const int n_vocab = std::min(tok.n_vocab(), model.hparams().n_vocab);
            for (size_t i = 0; i < ids.size(); ++i)
                if (ids[i] >= n_vocab)
                    throw ApiError(400,
                                   "token id " + std::to_string(ids[i]) + " at prompt[" + std::to_string(i) +
                                       "] is outside the vocabulary of " + std::to_string(n_vocab),
                                   "invalid_request_error", "prompt");
        } else {
            ids = tok.encode(r.prompt, tok.add_bos_default());
        }
        if (ids.empty())
            throw ApiError(400, "the prompt is empty", "invalid_request_error", "prompt");
        try {
            job.prompt = fit_prompt(ids, n_ctx, fit_reserve, policy);
        } catch (const ContextOverflow &) {
            throw context_error(n_ctx, int(ids.size()), requested, r.endpoint);
        }
    }
    // With head-tail the reply may still run into the end of the context ("length").
    const int room = n_ctx - int(job.prompt.size());
    if (policy == OverflowPolicy::Error && (room < 1 || (requested && *requested > room)))
        throw context_error(n_ctx, int(job.prompt.size()), requested, r.endpoint);
    // Unbounded under shift, a reply without max_tokens gets the room a fresh context has.
    const int default_tokens = policy == OverflowPolicy::Shift ? std::max(room, n_ctx / 2) : room;
    job.max_tokens = requested ? *requested : std::max(1, default_tokens);
}

// The prompt as echoed: the text given, or the token ids decoded.
std::string prompt_text(const Model &model, const Job &job)
{
    if (!job.req.prompt_ids)
        return job.req.prompt;
    return model.tokenizer().decode(*job.req.prompt_ids);
}

struct ServeOptions {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    size_t max_connections = 16;
    size_t max_queue = 8;
    size_t max_body = 1 << 20;
    int timeout_s = 600;
    int request_timeout_s = 30;
    std::vector<std::string> allow_hosts; // lower case
};

// Blocks SIGINT and SIGTERM in this thread (and every thread started after) so that only
// the watcher thread, through sigtimedwait, receives them.
sigset_t block_stop_signals()
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    return set;
}

std::string url_host(const std::string &host)
{
    return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// Every value of a header field (it may be repeated), as received.
std::vector<std::string_view> header_values(const httplib::Request &req, const std::string &name)
{
    std::vector<std::string_view> out;
    const auto [first, last] = req.headers.equal_range(name);
    for (auto it = first; it != last; ++it)
        out.push_back(it->second);
    return out;
}

// Which requests take a body: the two completion endpoints and the tokenizer's. GET and HEAD
// take none; any other method or path is answered 404 before a body is read.
enum class Route { Body, NoBody, Unknown };

Route route_of(const httplib::Request &req)
{
    if (req.method == "POST" && (req.path == "/v1/chat/completions" || req.path == "/v1/completions" ||
                                 req.path == "/tokenize" || req.path == "/detokenize"))
        return Route::Body;
    if (req.method == "GET" || req.method == "HEAD")
        return Route::NoBody;
    return Route::Unknown;
}

} // namespace

int cmd_serve(const std::vector<std::string> &argv, const char *argv0)
{
    Args a(argv, with_settings({{{"-m", "--model"}},
                                {{"--host"}},
                                {{"--port"}},
                                {{"--api-key"}},
                                {{"-c", "--ctx"}},
                                {{"-t", "--threads"}},
                                {{"--max-connections"}},
                                {{"--max-queue"}},
                                {{"--max-body"}},
                                {{"--timeout"}},
                                {{"--request-timeout"}},
                                {{"--allow-host"}},
                                {{"--chat-template"}}}));
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    ServeOptions o;
    o.host = a.value("--host").value_or(o.host);
    if (o.host.empty())
        throw UsageError("--host must not be empty");
    o.port = a.get_int("--port", 0, 65535).value_or(o.port);
    if (auto key = a.value("--api-key")) {
        o.api_key = *key;
    } else if (const char *env = std::getenv("LONGSCOPE_API_KEY"); env && *env) {
        o.api_key = env;
    }
    if (a.value("--api-key") && o.api_key.empty())
        throw UsageError("--api-key must not be empty");
    o.max_connections = size_t(a.get_int("--max-connections", 3, 1024).value_or(int(o.max_connections)));
    o.max_queue = size_t(a.get_int("--max-queue", 1, 4096).value_or(int(o.max_connections / 2)));
    if (o.max_queue + 2 > o.max_connections)
        throw UsageError("--max-queue must be at most --max-connections - 2 (" +
                         std::to_string(o.max_connections - 2) +
                         "), so that a connection stays free for the running request and the others");
    o.max_body = size_t(a.get_int("--max-body", 1024, 1 << 30).value_or(int(o.max_body)));
    o.timeout_s = a.get_int("--timeout", 1, 86400).value_or(o.timeout_s);
    o.request_timeout_s = a.get_int("--request-timeout", 1, 3600).value_or(o.request_timeout_s);
    for (const std::string &h : a.values("--allow-host")) {
        const auto name = h == "*" ? std::optional<std::string>("*") : api::host_name(h);
        const bool port = !h.empty() && h.front() == '[' ? h.find("]:") != std::string::npos
                                                         : h.find(':') != std::string::npos;
        if (!name || port)
            throw UsageError("--allow-host takes a host name without a port (or '*' for any), got '" + h + "'");
        o.allow_hosts.push_back(*name);
    }
    std::string chat_template; // --chat-template FILE: used instead of the model's own
    if (auto file = a.value("--chat-template")) {
        chat_template = read_text_file(*file);
        if (chat_template.empty())
            throw UsageError("--chat-template: " + *file + " is empty");
    }
    SessionOptions so;
    so.n_ctx = a.get_int("--ctx", 1, 1 << 24).value_or(0);
    so.n_threads = a.get_int("--threads", 1, 1024).value_or(0);
    so.settings = settings_from_args(a);
    const Settings defaults = so.settings;

    const sigset_t stop_signals = block_stop_signals();

    std::string path = a.value("--model").value_or("");
    if (path.empty())
        path = default_model_path(argv0);
    auto model = Model::load(path, {}, so.settings.backend != ComputeBackend::Cuda);
    if (!chat_template.empty()) {
        // A template that cannot render one user message is refused now, not at every request.
        ChatRenderOptions check;
        check.template_text = chat_template;
        try {
            render_chat(*model, {ChatMessage{ChatMessage::Role::User, "Hello", {}, {}}}, check);
        } catch (const FormatError &e) {
            throw FormatError("--chat-template " + *a.value("--chat-template") + ": " + e.what());
        }
    }
    std::string model_name = model->info().name;
    if (model_name.empty())
        model_name = std::filesystem::path(model->info().path).filename().string();
    const int64_t started = int64_t(std::time(nullptr));

    Engine engine(*model, so, o.max_queue);
    const int n_ctx = engine.n_ctx();

    ConnectionLimits limits;
    limits.workers = o.max_connections;
    limits.waiting = o.max_connections;
    limits.max_body = o.max_body;
    limits.request_timeout = std::chrono::seconds(o.request_timeout_s);
    GuardedServer svr(limits);
    svr.set_payload_max_length(o.max_body);
    // httplib's default also sets SO_REUSEPORT, which would let a second server bind the same
    // port and silently share its connections; keep only SO_REUSEADDR (quick restarts).
    svr.set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });

    // Every error answer is OpenAI's shape; handlers fill their own, this covers the rest
    // (unknown paths, an oversized body, malformed HTTP).
    svr.set_error_handler([&](const httplib::Request &req, httplib::Response &res) {
        if (!res.body.empty() || res.content_provider_)
            return;
        std::string msg, code;
        switch (res.status) {
        case 404: msg = "Invalid URL (" + req.method + " " + req.path + ")"; break;
        case 413:
            msg = "the request body is larger than the limit of " + std::to_string(o.max_body) + " bytes";
            code = "request_too_large";
            break;
        case 400: msg = "malformed HTTP request"; break;
        case 414: msg = "the request line is longer than 8192 bytes"; break;
        default: msg = "HTTP error " + std::to_string(res.status); break;
        }
        res.set_content(dump(error_body(msg, res.status >= 500 ? "server_error" : "invalid_request_error", "", code)),
                        k_json);
    });
    svr.set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
            if (ep)
                std::rethrow_exception(ep);
        } catch (const std::exception &e) {
            msg += std::string(": ") + e.what();
        } catch (...) {
        }
        send_json(res, 500, error_body(msg, "server_error"));
    });
    svr.set_logger([](const httplib::Request &req, const httplib::Response &res) {
        if (GuardedServer::guard_answered()) // logged when it answered
            return;
        std::fprintf(stderr, "[serve] %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });

    // Before a body is read: the Host, the route, the key, the body's framing and media type.
    // An answer here leaves any body unread, so the connection closes after it.
    const HostPolicy host_policy{o.host, o.allow_hosts};
    auto answered_before_body = [&](const httplib::Request &req, httplib::Response &res) {
        try {
            if (req.version != "HTTP/1.0" || req.has_header("Host")) // HTTP/1.0 may omit it
                check_host(header_values(req, "Host"), req.local_addr, host_policy);
            const Route route = route_of(req);
            if (route == Route::Unknown)
                throw ApiError(404, "Invalid URL (" + req.method + " " + req.path + ")");
            if (req.path != "/health" && !o.api_key.empty() &&
                !bearer_matches(req.get_header_value("Authorization"), o.api_key))
                throw ApiError(401,
                               req.has_header("Authorization") ? "Incorrect API key provided."
                                                               : "Missing API key: send 'Authorization: Bearer KEY'.",
                               "invalid_request_error", "", "invalid_api_key");
            if (route == Route::Body) {
                check_body_framing(header_values(req, "Content-Length"), header_values(req, "Transfer-Encoding"),
                                   o.max_body);
                check_json_content_type(header_values(req, "Content-Type"));
            } else if (req.has_header("Transfer-Encoding") ||
                       (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0")) {
                GuardedServer::close_after(res); // a body nothing reads
            }
            return false;
        } catch (const ApiError &e) {
            send_error(res, e);
            GuardedServer::close_after(res);
            return true;
        }
    };
    svr.set_pre_routing_handler([&](const httplib::Request &req, httplib::Response &res) {
        return answered_before_body(req, res) ? httplib::Server::HandlerResponse::Handled
                                              : httplib::Server::HandlerResponse::Unhandled;
    });
    // "Expect: 100-continue": the same checks, so that a refused body is never asked for.
    svr.set_expect_100_continue_handler([&](const httplib::Request &req, httplib::Response &res) {
        return answered_before_body(req, res) ? res.status : 100;
    });

    using Handler = std::function<void(const httplib::Request &, httplib::Response &)>;
    // The last line of defence: nothing escapes a handler.
    auto run_guarded = [&](httplib::Response &res, const std::function<void()> &h) {
        try {
            h();
        } catch (const ApiError &e) {
            send_error(res, e);
        } catch (const std::bad_alloc &) {
            send_json(res, 500, error_body("out of memory", "server_error"));
        } catch (const std::exception &e) {
            send_json(res, 500, error_body(std::string("internal error: ") + e.what(), "server_error"));
        } catch (...) {
            send_json(res, 500, error_body("internal error", "server_error"));
        }
    };
    auto guarded = [&](Handler h) {
        return [&, h](const httplib::Request &req, httplib::Response &res) { run_guarded(res, [&] { h(req, res); }); };
    };
    // POST bodies are read here, their framing and type checked before routing, up to
    // --max-body decoded bytes whatever the transfer encoding: past it the reading stops and
    // the connection closes after the 413.
    using BodyHandler = std::function<void(const std::string &body, const httplib::Request &, httplib::Response &)>;
    auto guarded_post = [&](BodyHandler h) {
        return [&, h](const httplib::Request &req, httplib::Response &res, const httplib::ContentReader &reader) {
            run_guarded(res, [&] {
                std::string body;
                bool too_large = false;
                const bool read_ok = reader([&](const char *data, size_t n) {
                    too_large = n > o.max_body - body.size();
                    if (!too_large)
                        body.append(data, n);
                    return !too_large;
                });
                if (too_large || res.status == 413) {
                    GuardedServer::close_after(res);
                    throw ApiError(413,
                                   "the request body is larger than the limit of " + std::to_string(o.max_body) +
                                       " bytes",
                                   "invalid_request_error", "", "request_too_large");
                }
                if (!read_ok) {
                    GuardedServer::close_after(res);
                    throw ApiError(400, "the request body could not be read (cut short, or malformed chunks)");
                }
                h(body, req, res);
            });
        };
    };

    auto completion = [&](Endpoint ep, const std::string &body, httplib::Response &res) {
        auto job = std::make_shared<Job>();
        job->req = parse_request(ep, body, defaults);
        if (!job->req.seed_given)
            job->req.sampling.seed = std::random_device{}();
        prepare_prompt(*model, chat_template, n_ctx, *job);
        job->id = new_id(ep);
        job->created = int64_t(std::time(nullptr));
        job->deadline = clock_type::now() + std::chrono::seconds(o.timeout_s);
        engine.submit(job);

        if (!job->req.stream) {
            std::unique_lock<std::mutex> lk(job->m);
            auto finished = [&] { return job->state == Job::State::Done || job->state == Job::State::Failed; };
            // A client that leaves while it waits cancels its generation (queued: dropped).
            bool cancelled = false;
            while (!job->cv.wait_for(lk, std::chrono::milliseconds(100), finished)) {
                if (!cancelled && GuardedServer::client_gone()) {
                    lk.unlock();
                    engine.cancel(job->number);
                    cancelled = true;
                    lk.lock();
                }
            }
            if (job->state == Job::State::Failed)
                throw job->error->detached();
            const Usage usage{job->prompt_tokens, job->completion_tokens};
            send_json(res, 200,
                      ep == Endpoint::Chat
                          ? chat_response(job->id, job->created, model_name, split_reply(job->reply_format, job->text),
                                          job->finish, usage)
                          : completion_response(job->id, job->created, model_name,
                                                job->req.echo ? prompt_text(*model, *job) + job->text : job->text,
                                                job->finish, usage, job->logprobs));
            return;
        }

        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        struct StreamState {
            bool started = false;
            clock_type::time_point last_write = clock_type::now();
            ReplySplitter reply;   // chat: reasoning, content and tool calls apart
            size_t calls_sent = 0; // tool calls streamed so far
        };
        auto state = std::make_shared<StreamState>(StreamState{false, clock_type::now(), ReplySplitter(job->reply_format), 0});
        res.set_chunked_content_provider(
            "text/event-stream",
            [job, state, ep, &model_name, &engine, &model](size_t, httplib::DataSink &sink) -> bool {
                auto write = [&](const std::string &s) {
                    if (!sink.is_writable() || !sink.write(s.data(), s.size())) {
                        engine.cancel(job->number); // the client went away: stop generating
                        return false;
                    }
                    state->last_write = clock_type::now();
                    return true;
                };
                try {
                    if (GuardedServer::client_gone()) {
                        engine.cancel(job->number);
                        return false;
                    }
                    if (!state->started) {
                        state->started = true;
                        if (ep == Endpoint::Chat &&
                            !write(sse_event(chat_chunk(job->id, job->created, model_name, std::string(), {}, true))))
                            return false;
                        if (ep == Endpoint::Completion && job->req.echo &&
                            !write(sse_event(completion_chunk(job->id, job->created, model_name,
                                                              prompt_text(*model, *job), {}))))
                            return false;
                    }
                    std::unique_lock<std::mutex> lk(job->m);
                    job->cv.wait_for(lk, std::chrono::milliseconds(500), [&] {
                        return !job->pending.empty() || job->state == Job::State::Done ||
                               job->state == Job::State::Failed;
                    });
                    std::string piece;
                    piece.swap(job->pending);
                    const Job::State st = job->state;
                    lk.unlock();
                    // A chat piece goes through the splitter, which holds back a marker's start.
                    auto send_reply = [&](const ReplySplitter::Delta &d) {
                        if (d.empty())
                            return true;
                        const size_t first = state->calls_sent;
                        state->calls_sent += d.tool_calls.size();
                        return write(sse_event(chat_reply_chunk(job->id, job->created, model_name, d, first)));
                    };
                    if (!piece.empty()) {
                        const bool sent = ep == Endpoint::Chat
                                              ? send_reply(state->reply.feed(piece))
                                              : write(sse_event(completion_chunk(job->id, job->created, model_name,
                                                                                 piece, {})));
                        if (!sent)
                            return false;
                    }
                    if (st == Job::State::Done) {
                        if (ep == Endpoint::Chat && !send_reply(state->reply.finish()))
                            return false;
                        const json last =
                            ep == Endpoint::Chat
                                ? chat_chunk(job->id, job->created, model_name, {},
                                             chat_finish_reason(job->finish, state->calls_sent > 0))
                                : completion_chunk(job->id, job->created, model_name, "", job->finish);
                        std::string tail = sse_event(last);
                        if (job->req.include_usage)
                            tail += sse_event(usage_chunk(ep, job->id, job->created, model_name,
                                                          Usage{job->prompt_tokens, job->completion_tokens}));
                        tail += k_sse_done;
                        if (!write(tail))
                            return false;
                        sink.done();
                    } else if (st == Job::State::Failed) {
                        write(sse_event(job->error->body()));
                        sink.done();
                    } else if (clock_type::now() - state->last_write > std::chrono::seconds(2)) {
                        // A comment line: clients ignore it, and a closed connection shows up
                        // while the request still waits in the queue.
                        if (!write(": waiting for the engine\n\n"))
                            return false;
                    }
                    return true;
                } catch (...) {
                    engine.cancel(job->number);
                    return false;
                }
            },
            [job, &engine](bool success) {
                if (!success)
                    engine.cancel(job->number);
            });
    };

    svr.Get("/health", guarded([](const httplib::Request &, httplib::Response &res) {
                send_json(res, 200, json{{"status", "ok"}});
            }));
    const ModelMeta meta{n_ctx, model->hparams().n_ctx_train, model->hparams().n_vocab, model->hparams().architecture};
    svr.Get("/v1/models", guarded([&](const httplib::Request &, httplib::Response &res) {
                send_json(res, 200, models_list(model_name, started, meta));
            }));
    svr.Get(R"(/v1/models/(.+))", guarded([&](const httplib::Request &req, httplib::Response &res) {
                const std::string id = req.matches[1];
                if (id != model_name)
                    throw ApiError(404, "The model '" + id + "' does not exist; this server serves '" + model_name + "'",
                                   "invalid_request_error", "model", "model_not_found");
                send_json(res, 200, model_object(model_name, started, meta));
            }));
    svr.Get("/metrics", guarded([&](const httplib::Request &, httplib::Response &res) {
                res.status = 200;
                res.set_content(prometheus_metrics(engine.counters(), model_name), "text/plain; version=0.0.4");
            }));
    svr.Get("/v1/metrics", guarded([&](const httplib::Request &, httplib::Response &res) {
                json j = engine.stats();
                j["model"] = model_name;
                j["default_settings"] = settings_json(defaults);
                send_json(res, 200, j);
            }));
    svr.Post("/v1/chat/completions",
             guarded_post([&](const std::string &body, const httplib::Request &, httplib::Response &res) {
                 completion(Endpoint::Chat, body, res);
             }));
    svr.Post("/v1/completions",
             guarded_post([&](const std::string &body, const httplib::Request &, httplib::Response &res) {
                 completion(Endpoint::Completion, body, res);
             }));

    svr.Post("/tokenize", guarded_post([&](const std::string &body, const httplib::Request &, httplib::Response &res) {
                 send_json(res, 200, tokenize_response(model->tokenizer(), body, model_name, n_ctx));
             }));
    svr.Post("/detokenize",
             guarded_post([&](const std::string &body, const httplib::Request &, httplib::Response &res) {
                 send_json(res, 200, detokenize_response(model->tokenizer(), model->hparams().n_vocab, body, model_name));
             }));

    int port = o.port;
    if (o.port == 0) {
        port = svr.bind_to_any_port(o.host);
        if (port <= 0)
            throw Error("cannot listen on " + o.host + " (no free port)");
    } else if (!svr.bind_to_port(o.host, o.port)) {
        throw Error("cannot listen on " + url_host(o.host) + ":" + std::to_string(o.port) +
                    " (address in use, or not an address of this machine)");
    }

    engine.start(); // before the watcher that may stop it
    std::atomic<bool> finished{false};
    std::thread watcher([&] {
        const timespec tick{0, 200 * 1000 * 1000};
        while (!finished) {
            const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
            if (sig == SIGINT || sig == SIGTERM) {
                std::fprintf(stderr, "longscope-cli serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
                engine.stop();
                svr.stop();
                return;
            }
        }
    });

    std::fprintf(stderr,
                 "longscope-cli serve: listening on http://%s:%d (model %s, context %d tokens, %d threads, "
                 "%zu connections, %zu queued requests%s)\n",
                 url_host(o.host).c_str(), port, model_name.c_str(), n_ctx, engine.n_threads(), o.max_connections,
                 o.max_queue, o.api_key.empty() ? "" : ", API key required");
    const bool loopback = o.host == "127.0.0.1" || o.host == "::1" || o.host == "localhost" ||
                          o.host.rfind("127.", 0) == 0;
    if (!loopback && o.api_key.empty())
        std::fprintf(stderr, "longscope-cli serve: warning: %s is reachable from other machines and no --api-key "
                             "is set: anyone who can reach it can use the model\n",
                     o.host.c_str());
    std::fflush(stderr);

    const bool ok = svr.listen_after_bind();
    finished = true;
    engine.stop();
    watcher.join();
    if (!ok)
        throw Error("the HTTP server stopped with an error");
    std::fprintf(stderr, "longscope-cli serve: stopped\n");
    return 0;
}

} // namespace longscope::cli
