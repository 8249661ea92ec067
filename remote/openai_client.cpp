#include "remote/openai_client.h"

#include <algorithm>
#include <limits>
#include <map>
#include <cctype>

namespace longscope::remote {

namespace {

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char &c : out)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// A server's words on one line, at most 300 bytes of them.
std::string one_line(std::string s)
{
    for (char &c : s)
        if (c == '\n' || c == '\r')
            c = ' ';
    if (s.size() > 300)
        s = s.substr(0, 300) + "...";
    return s;
}

[[noreturn]] void bad_url(std::string_view url, const std::string &why)
{
    throw ClientError(Failure::BadUrl, "'" + one_line(std::string(url.substr(0, 300))) + "' is not a server URL: " + why +
                                           " (expected http://HOST:PORT or http://HOST:PORT/v1)");
}

json parse_json(std::string_view body, const char *what)
{
    if (json_nesting_depth(body) > k_max_json_depth)
        throw ClientError(Failure::Protocol, std::string("the server's ") + what + " nests deeper than " +
                                                 std::to_string(k_max_json_depth) + " levels");
    try {
        return json::parse(body);
    } catch (const json::exception &) {
        const std::string head = one_line(std::string(body.substr(0, 80)));
        throw ClientError(Failure::Protocol, std::string("the server's ") + what + " is not JSON" +
                                                 (head.empty() ? " (empty)" : ": '" + head + "'"));
    }
}

const json *field(const json &o, std::string_view key)
{
    if (!o.is_object())
        return nullptr;
    auto it = o.find(std::string(key));
    return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::optional<Usage> usage_of(const json &o)
{
    const json *u = field(o, "usage");
    if (!u || !u->is_object())
        return std::nullopt;
    Usage out;
    if (const json *p = field(*u, "prompt_tokens"); p && p->is_number_integer())
        out.prompt_tokens = p->get<int>();
    if (const json *c = field(*u, "completion_tokens"); c && c->is_number_integer())
        out.completion_tokens = c->get<int>();
    return out;
}

// The message of an error body in any of the shapes servers use; empty when there is none.
std::string error_text(const json &j)
{
    if (const json *e = field(j, "error")) {
        if (e->is_string())
            return e->get<std::string>(); // TGI, some proxies
        if (const json *m = field(*e, "message"); m && m->is_string())
            return m->get<std::string>(); // OpenAI, vLLM, llama.cpp, Longscope
    }
    if (const json *m = field(j, "message"); m && m->is_string())
        return m->get<std::string>(); // vLLM's ErrorResponse at the top level
    if (const json *d = field(j, "detail"); d && d->is_string())
        return d->get<std::string>(); // FastAPI
    return {};
}

std::string error_text(std::string_view body)
{
    if (json_nesting_depth(body) <= k_max_json_depth) {
        try {
            return error_text(json::parse(body));
        } catch (const json::exception &) {
        }
    }
    return one_line(std::string(body.substr(0, 200)));
}

std::string quoted(const std::string &server_says)
{
    return server_says.empty() ? std::string() : " (the server says: " + one_line(server_says) + ")";
}

} // namespace

int json_nesting_depth(std::string_view text)
{
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char ch : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (ch == '\\')
                escaped = true;
            else if (ch == '"')
                in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if (ch == '[' || ch == '{') {
            deepest = std::max(deepest, ++depth);
        } else if (ch == ']' || ch == '}') {
            --depth;
        }
    }
    return deepest;
}

std::string BaseUrl::origin() const
{
    const bool v6 = host.find(':') != std::string::npos;
    return scheme + "://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string BaseUrl::api(std::string_view route) const { return prefix + "/v1" + std::string(route); }
std::string BaseUrl::root(std::string_view route) const { return prefix + std::string(route); }

BaseUrl parse_base_url(std::string_view url)
{
    BaseUrl u;
    const size_t sep = url.find("://");
    if (sep == std::string_view::npos)
        bad_url(url, "no scheme");
    u.scheme = lower(url.substr(0, sep));
    if (u.scheme != "http" && u.scheme != "https")
        bad_url(url, "the scheme must be http or https");
    std::string_view rest = url.substr(sep + 3);
    const size_t slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
    if (authority.find('@') != std::string_view::npos)
        bad_url(url, "credentials in the URL are not supported (give an API key instead)");
    std::string_view port;
    if (!authority.empty() && authority.front() == '[') {
        const size_t close = authority.find(']');
        if (close == std::string_view::npos)
            bad_url(url, "an unclosed '[' in the host");
        u.host = std::string(authority.substr(1, close - 1));
        std::string_view after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':')
                bad_url(url, "unexpected text after the IPv6 address");
            port = after.substr(1);
        }
    } else {
        const size_t colon = authority.rfind(':');
        u.host = std::string(authority.substr(0, colon));
        if (colon != std::string_view::npos)
            port = authority.substr(colon + 1);
    }
    if (u.host.empty())
        bad_url(url, "no host");
    if (!port.empty()) {
        if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
            bad_url(url, "the port must be a number");
        u.port = std::stoi(std::string(port));
        if (u.port < 1 || u.port > 65535)
            bad_url(url, "the port must be between 1 and 65535");
    } else {
        u.port = u.scheme == "https" ? 443 : 80;
    }
    if (path.find_first_of("?#") != std::string_view::npos)
        bad_url(url, "a query or fragment has no place in a base URL");
    std::string p(path);
    while (!p.empty() && p.back() == '/')
        p.pop_back();
    if (p.size() >= 3 && p.compare(p.size() - 3, 3, "/v1") == 0)
        p.resize(p.size() - 3);
    u.prefix = p;
    return u;
}

namespace {

void put_sampling(json &j, const SamplingFields &s)
{
    if (s.temperature)
        j["temperature"] = *s.temperature;
    if (s.top_p)
        j["top_p"] = *s.top_p;
    if (s.top_k)
        j["top_k"] = *s.top_k;
    if (s.repeat_penalty)
        j["repeat_penalty"] = *s.repeat_penalty;
    if (s.seed)
        j["seed"] = *s.seed;
    if (s.max_tokens)
        j["max_tokens"] = *s.max_tokens;
    if (!s.stop.empty())
        j["stop"] = s.stop;
}

void put_stream(json &j, bool stream)
{
    j["stream"] = stream;
    if (stream)
        j["stream_options"] = json{{"include_usage", true}};
}

} // namespace

json chat_request(const std::string &model, const std::vector<ChatTurn> &messages, const SamplingFields &sampling,
                  bool stream)
{
    json j;
    j["model"] = model;
    j["messages"] = json::array();
    for (const ChatTurn &t : messages)
        j["messages"].push_back(json{{"role", t.role}, {"content", t.content}});
    put_sampling(j, sampling);
    put_stream(j, stream);
    return j;
}

json completion_request(const std::string &model, const std::string &prompt, const SamplingFields &sampling,
                        bool stream)
{
    json j;
    j["model"] = model;
    j["prompt"] = prompt;
    put_sampling(j, sampling);
    put_stream(j, stream);
    return j;
}

json prompt_logprobs_request(const std::string &model, const std::string &prompt)
{
    return json{{"model", model}, {"prompt", prompt}, {"echo", true},       {"logprobs", 0},
                {"max_tokens", 1}, {"temperature", 0}, {"stream", false}};
}

json prompt_logprobs_request(const std::string &model, const std::vector<int32_t> &prompt)
{
    json body = prompt_logprobs_request(model, std::string());
    body["prompt"] = prompt;
    return body;
}

json tokenize_request(const std::string &model, const std::string &text, bool add_special)
{
    return json{{"model", model},         {"prompt", text}, {"add_special_tokens", add_special},
                {"content", text},        {"add_special", add_special}};
}

std::vector<int32_t> parse_tokens(std::string_view body)
{
    const json j = parse_json(body, "tokenizer answer");
    const json *tokens = field(j, "tokens");
    if (!tokens || !tokens->is_array())
        throw ClientError(Failure::Protocol, "the server's /tokenize answer has no 'tokens' array");
    std::vector<int32_t> out;
    out.reserve(tokens->size());
    for (size_t i = 0; i < tokens->size(); ++i) {
        const json &t = (*tokens)[i];
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
            throw ClientError(Failure::Protocol,
                              "the server's /tokenize answer has no token id at tokens[" + std::to_string(i) + "]");
        out.push_back(int32_t(t.get<int64_t>()));
    }
    return out;
}

ClientError prompt_logprobs_failure(const ClientError &e)
{
    if (e.failure() == Failure::BadRequest && lower(e.what()).find("echo") != std::string::npos)
        return ClientError(Failure::Unsupported,
                           std::string("the server does not return prompt log-probabilities (it refuses 'echo'): ") +
                               e.what(),
                           e.status());
    return e;
}

bool no_tokenizer_endpoint(const ClientError &e)
{
    return e.failure() == Failure::NotFound || e.failure() == Failure::Protocol || e.status() == 404 ||
           e.status() == 405 || e.status() == 501;
}

std::string one_window_note()
{
    return "the server has no /tokenize endpoint, so the text is scored as one window from its start (it must fit "
           "the server's context); the window length and stride asked for are not used";
}

std::vector<std::pair<std::string, std::string>> request_headers(const std::string &api_key)
{
    std::vector<std::pair<std::string, std::string>> h{{"Content-Type", "application/json"},
                                                       {"Accept", "application/json, text/event-stream"}};
    if (!api_key.empty())
        h.emplace_back("Authorization", "Bearer " + api_key);
    return h;
}

std::vector<std::string> SseDecoder::feed(std::string_view bytes)
{
    std::vector<std::string> events;
    m_buffer.append(bytes);
    size_t start = 0;
    for (;;) {
        const size_t nl = m_buffer.find_first_of("\r\n", start);
        if (nl == std::string::npos)
            break;
        // A CR at the very end may be the first half of CRLF: wait for the next byte.
        if (m_buffer[nl] == '\r' && nl + 1 == m_buffer.size())
            break;
        std::string_view line(m_buffer.data() + start, nl - start);
        start = nl + (m_buffer[nl] == '\r' && m_buffer[nl + 1] == '\n' ? 2 : 1);
        if (line.empty()) { // the end of an event
            if (m_has_data)
                events.push_back(std::move(m_data));
            m_data.clear();
            m_has_data = false;
            continue;
        }
        if (line.front() == ':')
            continue; // a comment (keep-alive)
        const size_t colon = line.find(':');
        const std::string_view name = line.substr(0, colon);
        std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
        if (!value.empty() && value.front() == ' ')
            value.remove_prefix(1);
        if (name == "data") {
            if (m_has_data)
                m_data += '\n';
            m_data.append(value);
            m_has_data = true;
        }
    }
    m_buffer.erase(0, start);
    return events;
}

StreamEvent parse_stream_event(std::string_view data)
{
    StreamEvent ev;
    if (data == "[DONE]") {
        ev.done = true;
        return ev;
    }
    const json j = parse_json(data, "stream chunk");
    if (field(j, "error")) {
        const std::string msg = error_text(j);
        throw ClientError(Failure::Server, "the server stopped the stream with an error: " +
                                               one_line(msg.empty() ? std::string(data.substr(0, 200)) : msg));
    }
    ev.usage = usage_of(j);
    const json *choices = field(j, "choices");
    if (!choices)
        return ev;
    if (!choices->is_array())
        throw ClientError(Failure::Protocol, "a stream chunk's 'choices' is not an array");
    if (choices->empty())
        return ev;
    const json &c = (*choices)[0];
    if (const json *delta = field(c, "delta")) {
        if (const json *t = field(*delta, "content"); t && t->is_string())
            ev.text = t->get<std::string>();
    } else if (const json *t = field(c, "text"); t && t->is_string()) {
        ev.text = t->get<std::string>();
    }
    if (const json *f = field(c, "finish_reason"); f && f->is_string())
        ev.finish = f->get<std::string>();
    return ev;
}

std::string StreamState::feed(std::string_view data)
{
    StreamEvent ev = parse_stream_event(data);
    if (ev.done) {
        m_done = true;
        return {};
    }
    if (ev.usage)
        m_usage = ev.usage;
    if (ev.finish)
        m_finish = ev.finish;
    m_text += ev.text;
    return ev.text;
}

void StreamState::finish() const
{
    if (!finished())
        throw ClientError(Failure::DroppedStream, "the stream ended before the server finished the reply (" +
                                                      std::to_string(m_text.size()) + " bytes of text came)");
}

Completion parse_completion(std::string_view body, bool chat)
{
    const json j = parse_json(body, "response");
    const json *choices = field(j, "choices");
    if (!choices || !choices->is_array() || choices->empty())
        throw ClientError(Failure::Protocol, "the server's response has no 'choices'");
    const json &c = (*choices)[0];
    Completion out;
    const json *t = chat ? (field(c, "message") ? field(*field(c, "message"), "content") : nullptr) : field(c, "text");
    if (t && t->is_string())
        out.text = t->get<std::string>();
    if (const json *f = field(c, "finish_reason"); f && f->is_string())
        out.finish_reason = f->get<std::string>();
    out.usage = usage_of(j);
    return out;
}

std::vector<RemoteModel> parse_models(std::string_view body)
{
    const json j = parse_json(body, "model list");
    const json *data = field(j, "data");
    if (!data || !data->is_array())
        throw ClientError(Failure::Protocol, "the server's /v1/models answer has no 'data' list");
    std::vector<RemoteModel> out;
    for (const json &m : *data) {
        const json *id = field(m, "id");
        if (!id || !id->is_string())
            continue;
        RemoteModel r;
        r.id = id->get<std::string>();
        auto int_of = [](const json *v) -> std::optional<int> {
            if (v && v->is_number_integer() && v->get<int64_t>() > 0 && v->get<int64_t>() < (int64_t(1) << 31))
                return int(v->get<int64_t>());
            return std::nullopt;
        };
        r.context_length = int_of(field(m, "max_model_len")); // vLLM
        if (!r.context_length)
            r.context_length = int_of(field(m, "context_length")); // Longscope, SGLang
        if (const json *meta = field(m, "meta"); !r.context_length && meta)
            r.context_length = int_of(field(*meta, "n_ctx_train")); // llama.cpp
        if (const json *a = field(m, "architecture"); a && a->is_string())
            r.architecture = a->get<std::string>();
        if (const json *o = field(m, "owned_by"); o && o->is_string())
            r.owned_by = o->get<std::string>();
        out.push_back(std::move(r));
    }
    return out;
}

PromptLogprobs parse_prompt_logprobs(std::string_view body)
{
    const json j = parse_json(body, "response");
    const json *choices = field(j, "choices");
    const json *lp = choices && choices->is_array() && !choices->empty() ? field((*choices)[0], "logprobs") : nullptr;
    const json *values = lp ? field(*lp, "token_logprobs") : nullptr;
    const json *tokens = lp ? field(*lp, "tokens") : nullptr;
    if (!values || !values->is_array() || values->empty())
        throw ClientError(Failure::Unsupported,
                          "the server returned no prompt log-probabilities: it does not support 'echo' with "
                          "'logprobs' on /v1/completions (vLLM and Longscope serve do)");
    const std::optional<Usage> usage = usage_of(j);
    size_t n_prompt = usage && usage->prompt_tokens > 0 ? size_t(usage->prompt_tokens) : values->size();
    if (n_prompt > values->size())
        throw ClientError(Failure::Unsupported,
                          "the server returned " + std::to_string(values->size()) + " log-probabilities for a prompt of " +
                              std::to_string(n_prompt) + " tokens: it does not echo the prompt's log-probabilities");
    PromptLogprobs out;
    for (size_t i = 0; i < n_prompt; ++i) {
        if (tokens && tokens->is_array() && i < tokens->size() && (*tokens)[i].is_string())
            out.tokens.push_back((*tokens)[i].get<std::string>());
        else
            out.tokens.emplace_back();
        if (i == 0)
            continue; // nothing before the first token
        const json &v = (*values)[i];
        if (!v.is_number())
            throw ClientError(Failure::Protocol,
                              "the log-probability of prompt token " + std::to_string(i) + " is not a number");
        out.logprobs.push_back(v.get<double>());
    }
    return out;
}

namespace {

// Mean NLL per bucket of `bucket` keys (key i in [0, max_key]); empty buckets are left out,
// the last one ends at max_key + 1.
NllCurve bucketed(const std::vector<int64_t> &keys, const std::vector<double> &nll, int64_t max_key, int bucket)
{
    bucket = std::max(1, bucket);
    std::map<int64_t, std::pair<double, int64_t>> sums; // bucket index: sum, count
    NllCurve out;
    double sum = 0;
    for (size_t i = 0; i < nll.size(); ++i) {
        auto &[bsum, count] = sums[keys[i] / bucket];
        bsum += nll[i];
        ++count;
        sum += nll[i];
    }
    for (const auto &[index, value] : sums) {
        NllBucket b;
        b.begin = int(index * bucket);
        b.end = int(std::min<int64_t>(max_key + 1, (index + 1) * bucket));
        b.count = value.second;
        b.mean_nll = value.first / double(value.second);
        out.buckets.push_back(b);
    }
    out.n_scored = int64_t(nll.size());
    out.mean_nll = out.n_scored > 0 ? sum / double(out.n_scored) : 0;
    return out;
}

} // namespace

NllCurve nll_by_position(const PromptLogprobs &lp, int bucket, int context)
{
    std::vector<int64_t> positions;
    std::vector<double> nll;
    for (size_t i = 0; i < lp.logprobs.size(); ++i) {
        positions.push_back(int64_t(i + 1));
        nll.push_back(-lp.logprobs[i]);
    }
    const int64_t unbounded = int64_t(std::numeric_limits<int>::max()) - 1;
    return bucketed(positions, nll, context > 0 ? context - 1 : unbounded, bucket);
}

WindowedScoring::WindowedScoring(std::vector<int32_t> tokens, std::vector<int32_t> prefix, int ctx, int stride,
                                 bool stream)
    : m_tokens(std::move(tokens)), m_prefix(std::move(prefix))
{
    const int64_t n = int64_t(m_tokens.size());
    const int lead = int(m_prefix.size());
    if (n + lead < 2 || n < 1)
        throw std::invalid_argument("the text is too short to score (fewer than 2 tokens)");
    if (stream) {
        // One context of ctx tokens: the token at context index ctx is the last one predicted.
        const int64_t per_window = int64_t(ctx) + 1 - lead;
        if (ctx < 2 || per_window < 1)
            throw std::invalid_argument("the context to score to must hold at least 2 tokens");
        m_max_position = ctx;
        m_windows.push_back({0, std::min(n, per_window), 0});
        if (per_window < n)
            m_stopped = "the context of " + std::to_string(ctx) + " tokens is full (" +
                        std::to_string(n + lead - 1 - ctx) + " tokens of the text left unscored)";
    } else {
        const int per_window = ctx - lead;
        if (per_window < 1 || ctx < 2)
            throw std::invalid_argument("the perplexity window must hold at least 2 tokens");
        stride = stride > 0 ? stride : per_window;
        if (stride > per_window)
            throw std::invalid_argument("the stride " + std::to_string(stride) + " is longer than the " +
                                        std::to_string(per_window) + " text tokens of a window");
        m_max_position = ctx - 1;
        // Text token i is scored once, in the first window where it is new.
        for (int64_t start = 0, scored_to = 0; scored_to < n; start += stride) {
            const int64_t end = std::min(n, start + per_window);
            m_windows.push_back({start, end, std::max(scored_to, start)});
            scored_to = end;
        }
    }
    for (const Window &w : m_windows)
        m_total += w.end - w.first_new;
    if (lead == 0)
        --m_total; // nothing predicts the text's first token
}

json WindowedScoring::request(const std::string &model) const
{
    const Window &w = m_windows.at(m_next);
    std::vector<int32_t> ids = m_prefix;
    ids.insert(ids.end(), m_tokens.begin() + w.start, m_tokens.begin() + w.end);
    return prompt_logprobs_request(model, ids);
}

void WindowedScoring::add(const PromptLogprobs &lp)
{
    const Window &w = m_windows.at(m_next);
    const int lead = int(m_prefix.size());
    const int64_t length = lead + (w.end - w.start);
    if (int64_t(lp.logprobs.size()) != length - 1)
        throw ClientError(Failure::Protocol, "the server returned " + std::to_string(lp.logprobs.size()) +
                                                 " prompt log-probabilities for a window of " + std::to_string(length) +
                                                 " tokens (expected " + std::to_string(length - 1) + ")");
    // logprobs[i] belongs to window index i + 1.
    for (size_t i = 0; i < lp.logprobs.size(); ++i) {
        const int64_t text_index = w.start + int64_t(i + 1) - lead;
        if (text_index < w.first_new)
            continue;
        m_positions.push_back(int(i + 1));
        m_text_index.push_back(text_index);
        m_nll.push_back(-lp.logprobs[i]);
    }
    ++m_next;
}

NllCurve WindowedScoring::curve(int bucket) const
{
    return bucketed(std::vector<int64_t>(m_positions.begin(), m_positions.end()), m_nll, m_max_position, bucket);
}

NllCurve WindowedScoring::text_curve(int bucket) const
{
    return bucketed(m_text_index, m_nll, int64_t(m_tokens.size()) - 1, bucket);
}

ClientError http_error(int status, std::string_view body, std::string_view model, std::string_view url)
{
    const std::string says = error_text(body);
    const std::string at = " at " + std::string(url);
    const std::string m(model);
    switch (status) {
    case 401:
        return {Failure::Unauthorized, "the server" + at + " refused the API key (401): " +
                                           "give the key it expects" + quoted(says), status};
    case 403:
        return {Failure::Forbidden, "the server" + at + " does not allow this request (403)" + quoted(says), status};
    case 404: {
        const std::string l = lower(says);
        const bool about_model = !m.empty() && (l.find("model") != std::string::npos);
        if (about_model)
            return {Failure::ModelNotFound, "the server" + at + " has no model '" + m +
                                                "' (404): pick one from its model list" + quoted(says), status};
        return {Failure::NotFound, "not found" + at + " (404): is it an OpenAI-compatible server, and is the URL its "
                                                 "base (http://HOST:PORT or .../v1)?" + quoted(says), status};
    }
    case 408:
        return {Failure::Timeout, "the server" + at + " timed out waiting for the request (408)" + quoted(says), status};
    case 429:
        return {Failure::RateLimited, "the server" + at + " is rate limiting requests (429): wait and try again" +
                                          quoted(says), status};
    default: break;
    }
    if (status >= 500)
        return {Failure::Server, "the server" + at + " failed with HTTP " + std::to_string(status) +
                                     (status == 503 ? " (busy or not ready: try again shortly)" : "") + quoted(says),
                status};
    return {Failure::BadRequest, "the server" + at + " refused the request (HTTP " + std::to_string(status) + ")" +
                                     quoted(says), status};
}

ClientError connection_error(std::string_view url, std::string_view detail)
{
    return {Failure::Connection, "cannot reach the server at " + std::string(url) + ": " + std::string(detail) +
                                     " (is it running, and is the address right?)"};
}

ClientError timeout_error(std::string_view url, double seconds)
{
    char s[32];
    std::snprintf(s, sizeof s, "%g", seconds);
    return {Failure::Timeout, "the server at " + std::string(url) + " did not answer within " + s + " s"};
}

ClientError dropped_stream_error(std::string_view url, size_t chars_received)
{
    return {Failure::DroppedStream, "the connection to " + std::string(url) + " dropped before the reply was finished (" +
                                        std::to_string(chars_received) + " bytes of text came; what came is kept)"};
}

} // namespace longscope::remote
