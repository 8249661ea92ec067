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

int cmd_perplexity_remote(const std::vector<std::string> &argv)
{
    Args a(argv, with_remote({{{"-f", "--file"}}, {{"--bucket"}}, {{"--csv"}}, {{"--json"}, false}}));
    const auto file = a.value("--file");
    if (!file)
        throw UsageError("give the text to score with -f FILE");
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    const int bucket = a.get_int("--bucket", 1, 1 << 20).value_or(64);
    const std::string text = read_text_file(*file);
    if (text.empty())
        throw UsageError(*file + " is empty");

    const RemoteHttp server = connect(a);
    const remote::RemoteModel model = server.pick_model(a.value("--model").value_or(""));
    remote::PromptLogprobs lp;
    try {
        lp = remote::parse_prompt_logprobs(
            server.post(server.base().api("/completions"), remote::prompt_logprobs_request(model.id, text), model.id));
    } catch (const remote::ClientError &e) {
        if (e.failure() == remote::Failure::Unsupported)
            throw remote::ClientError(e.failure(), std::string("perplexity needs a local model or a server that "
                                                               "returns prompt log-probabilities: ") + e.what());
        throw;
    }
    if (lp.logprobs.empty())
        throw UsageError(*file + " is too short to score (fewer than 2 tokens)");

    // The server scored the text as one window from its start, as a local run's first window.
    const remote::NllCurve curve = remote::nll_by_position(lp, bucket, model.context_length.value_or(0));
    PerplexityResult r;
    r.windows = 1;
    for (size_t i = 0; i < lp.logprobs.size(); ++i) {
        r.positions.push_back(int(i + 1));
        r.nll.push_back(float(-lp.logprobs[i]));
    }
    r.n_scored = curve.n_scored;
    r.mean_nll = curve.mean_nll;
    for (const remote::NllBucket &b : curve.buckets)
        r.curve.push_back(PositionBucket{b.begin, b.end, b.count, b.mean_nll});
    return report_perplexity(a, r, model.context_length.value_or(0), "server context", "context_length");
}

} // namespace longscope::cli
