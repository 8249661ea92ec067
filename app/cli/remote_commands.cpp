// generate and perplexity against an OpenAI-compatible server (--remote URL): vLLM, SGLang,
// TGI, llama.cpp's llama-server or another `longscope-cli serve`. The protocol is remote/'s,
// the transport remote_http's; what is measured here is measured on the client.
#include "commands.h"

#include "args.h"
#include "remote_http.h"

#include "remote/openai_client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

namespace longscope::cli {

using remote::json;
using clock_type = std::chrono::steady_clock;

bool wants_remote(const std::vector<std::string> &args)
{
    for (const std::string &a : args)
        if (a == "--remote")
            return true;
    return false;
}

namespace {

const std::vector<OptionSpec> k_remote_options = {{{"--remote"}}, {{"--api-key-env"}}, {{"-m", "--model"}},
                                                  {{"--timeout"}}};

std::vector<OptionSpec> with_remote(std::vector<OptionSpec> specs)
{
    specs.insert(specs.end(), k_remote_options.begin(), k_remote_options.end());
    return specs;
}

// The key from the variable --api-key-env names (never from the command line, where other
// users of the machine could read it).
std::string api_key(const Args &a)
{
    const auto var = a.value("--api-key-env");
    if (!var)
        return {};
    const char *v = std::getenv(var->c_str());
    if (!v || !*v)
        throw UsageError("--api-key-env " + *var + ": the environment variable " + *var + " is not set");
    return v;
}

RemoteHttp connect(const Args &a)
{
    const std::string url = a.value("--remote").value_or("");
    if (url.empty())
        throw UsageError("--remote needs the server's URL (http://HOST:PORT or http://HOST:PORT/v1)");
    return RemoteHttp(url, api_key(a), a.get_double("--timeout", 0.1, 86400).value_or(600));
}

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

} // namespace

int cmd_generate_remote(const std::vector<std::string> &argv)
{
    Args a(argv, with_remote({{{"-p", "--prompt"}},
                              {{"-f", "--file"}},
                              {{"--chat"}},
                              {{"-n", "--n-predict"}},
                              {{"--temp"}},
                              {{"--top-k"}},
                              {{"--top-p"}},
                              {{"--repeat-penalty"}},
                              {{"--seed"}},
                              {{"--stop"}},
                              {{"--json"}, false}}));
    remote::SamplingFields s;
    s.max_tokens = a.get_int("--n-predict", 1, 1 << 24).value_or(128);
    s.temperature = a.get_double("--temp", 0, 2).value_or(0.8);
    s.top_k = a.get_int("--top-k", 0, 1 << 24);
    s.top_p = a.get_double("--top-p", 1e-6, 1);
    s.repeat_penalty = a.get_double("--repeat-penalty", 1e-3, 100);
    s.seed = a.get_u64("--seed");
    s.stop = a.values("--stop");

    const RemoteHttp server = connect(a);
    const remote::RemoteModel model = server.pick_model(a.value("--model").value_or(""));
    json body;
    std::string route;
    if (auto chat = a.value("--chat")) {
        if (a.value("--prompt") || a.value("--file") || !a.positional().empty())
            throw UsageError("--chat replaces -p and -f");
        // The messages file as it is (OpenAI's shape): the server renders its own template.
        json messages;
        try {
            messages = json::parse(read_text_file(*chat));
        } catch (const json::parse_error &e) {
            throw UsageError(*chat + ": not JSON (" + e.what() + ")");
        }
        if (messages.is_object() && messages.contains("messages"))
            messages = messages["messages"];
        if (!messages.is_array() || messages.empty())
            throw UsageError(*chat + ": expected an array of messages ({\"role\", \"content\"})");
        body = remote::chat_request(model.id, {}, s, true);
        body["messages"] = messages;
        route = server.base().api("/chat/completions");
    } else {
        const std::string prompt = prompt_text(a, false);
        if (prompt.empty())
            throw UsageError("the prompt is empty");
        body = remote::completion_request(model.id, prompt, s, true);
        route = server.base().api("/completions");
    }

    const bool json_out = a.flag("--json");
    const auto start = clock_type::now();
    std::optional<clock_type::time_point> first;
    const remote::StreamState state = server.stream(route, body, model.id, [&](const std::string &text) {
        if (!first)
            first = clock_type::now();
        if (!json_out) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
        }
        return true;
    });
    const double total = seconds_since(start);
    const double ttft = first ? std::chrono::duration<double>(*first - start).count() : total;
    const int prompt_tokens = state.usage() ? state.usage()->prompt_tokens : 0;
    const int completion_tokens = state.usage() ? state.usage()->completion_tokens : 0;
    // Decode speed on the client: the tokens after the first over the time after it.
    const double decode_s = total - ttft;
    const double decode_tps = completion_tokens > 1 && decode_s > 0 ? (completion_tokens - 1) / decode_s : 0;

    if (json_out) {
        json j{{"text", state.text()},
               {"model", model.id},
               {"server", server.url()},
               {"finish_reason", state.finish_reason()},
               {"prompt_tokens", prompt_tokens},
               {"completion_tokens", completion_tokens},
               {"time_to_first_token_s", ttft},
               {"decode_tokens_per_second", decode_tps}};
        std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    }
    std::fprintf(stderr,
                 "\n[longscope] remote model %s at %s | prompt %d tokens | generated %d tokens | first token after "
                 "%.0f ms | decode %.1f tok/s (measured here) | stop: %s\n",
                 model.id.c_str(), server.url().c_str(), prompt_tokens, completion_tokens, ttft * 1000, decode_tps,
                 state.finish_reason().c_str());
    return 0;
}

namespace {

// The server's answer to a prompt log-probabilities request, with the message that says what
// a server without them lacks.
remote::PromptLogprobs prompt_logprobs(const RemoteHttp &server, const json &body, const std::string &model)
{
    try {
        return remote::parse_prompt_logprobs(server.post(server.base().api("/completions"), body, model));
    } catch (const remote::ClientError &error) {
        const remote::ClientError e = remote::prompt_logprobs_failure(error);
        if (e.failure() == remote::Failure::Unsupported)
            throw remote::ClientError(e.failure(), std::string("perplexity needs a local model or a server that "
                                                               "returns prompt log-probabilities: ") + e.what());
        throw e;
    }
}

// The text's tokens and the server's special prefix (BOS) from its /tokenize; nullopt when
// the server has none.
std::optional<std::pair<std::vector<int32_t>, std::vector<int32_t>>> server_tokens(const RemoteHttp &server,
                                                                                   const std::string &model,
                                                                                   const std::string &text)
{
    const std::string route = server.base().root("/tokenize");
    try {
        auto tokens = remote::parse_tokens(server.post(route, remote::tokenize_request(model, text, false), model));
        auto prefix = remote::parse_tokens(server.post(route, remote::tokenize_request(model, "", true), model));
        return std::make_pair(std::move(tokens), std::move(prefix));
    } catch (const remote::ClientError &e) {
        if (remote::no_tokenizer_endpoint(e))
            return std::nullopt;
        throw;
    }
}

void put_curve(const remote::NllCurve &curve, std::vector<PositionBucket> &out)
{
    for (const remote::NllBucket &b : curve.buckets)
        out.push_back(PositionBucket{b.begin, b.end, b.count, b.mean_nll});
}

} // namespace

int cmd_perplexity_remote(const std::vector<std::string> &argv)
{
    Args a(argv, with_remote({{{"-f", "--file"}},
                              {{"-c", "--ctx"}},
                              {{"--stride"}},
                              {{"--max-tokens"}},
                              {{"--bucket"}},
                              {{"--csv"}},
                              {{"--json"}, false}}));
    const auto file = a.value("--file");
    if (!file)
        throw UsageError("give the text to score with -f FILE");
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    const int bucket = a.get_int("--bucket", 1, 1 << 20).value_or(64);
    const std::optional<int> ctx_asked = a.get_int("--ctx", 2, 1 << 24);
    const int stride = a.get_int("--stride", 1, 1 << 24).value_or(0);
    const int max_tokens = a.get_int("--max-tokens", 2, 1 << 30).value_or(0);
    const std::string text = read_text_file(*file);
    if (text.empty())
        throw UsageError(*file + " is empty");

    const RemoteHttp server = connect(a);
    const remote::RemoteModel model = server.pick_model(a.value("--model").value_or(""));
    const int server_ctx = model.context_length.value_or(0);
    PerplexityResult r;
    auto tokens = server_tokens(server, model.id, text);
    if (!tokens) {
        std::fprintf(stderr, "[longscope] %s\n", remote::one_window_note().c_str());
        const remote::PromptLogprobs lp = prompt_logprobs(server, remote::prompt_logprobs_request(model.id, text), model.id);
        if (lp.logprobs.empty())
            throw UsageError(*file + " is too short to score (fewer than 2 tokens)");
        const remote::NllCurve curve = remote::nll_by_position(lp, bucket, server_ctx);
        r.windows = 1;
        for (size_t i = 0; i < lp.logprobs.size(); ++i) {
            r.positions.push_back(int(i + 1));
            r.nll.push_back(float(-lp.logprobs[i]));
        }
        r.n_scored = curve.n_scored;
        r.mean_nll = curve.mean_nll;
        put_curve(curve, r.curve);
        return report_perplexity(a, r, server_ctx, "server context", "context_length");
    }

    // Windows of --ctx tokens (the server's context less the one token each request
    // generates, by default), as a local run scores them.
    const int room = server_ctx > 1 ? server_ctx - 1 : 0;
    if (ctx_asked && room > 0 && *ctx_asked > room)
        throw UsageError("--ctx " + std::to_string(*ctx_asked) + " does not fit the server's context of " +
                         std::to_string(server_ctx) + " tokens (a window leaves room for the one token a request "
                         "generates: at most " + std::to_string(room) + ")");
    const int ctx = ctx_asked.value_or(room);
    if (ctx < 2)
        throw UsageError("the server does not say its context length: give the window length with --ctx");
    auto &[ids, prefix] = *tokens;
    if (max_tokens > 0 && int64_t(ids.size()) > max_tokens)
        ids.resize(size_t(max_tokens));
    std::optional<remote::WindowedScoring> scoring;
    try {
        scoring.emplace(std::move(ids), std::move(prefix), ctx, stride);
    } catch (const std::invalid_argument &e) {
        throw UsageError(*file + ": " + e.what());
    }
    while (!scoring->done()) {
        scoring->add(prompt_logprobs(server, scoring->request(model.id), model.id));
        std::fprintf(stderr, "\r[longscope] scored %lld of %lld tokens", (long long)scoring->scored(),
                     (long long)scoring->total());
    }
    std::fprintf(stderr, "\n");
    r.windows = scoring->windows();
    r.positions = scoring->positions();
    r.nll.assign(scoring->nll().begin(), scoring->nll().end());
    const remote::NllCurve curve = scoring->curve(bucket);
    r.n_scored = curve.n_scored;
    r.mean_nll = curve.mean_nll;
    put_curve(curve, r.curve);
    put_curve(scoring->text_curve(bucket), r.text_curve);
    return report_perplexity(a, r, server_ctx, "server context", "context_length");
}

} // namespace longscope::cli
