#include "remote/server_metrics.h"

namespace longscope::remote {

namespace {

// The names one engine uses for each quantity, the first present wins (newer names first).
struct Names {
    const char *engine;
    const char *prefix;
    std::initializer_list<const char *> kv_usage;
    std::initializer_list<const char *> kv_tokens;
    std::initializer_list<const char *> running;
    std::initializer_list<const char *> waiting;
    std::initializer_list<const char *> prompt_total;
    std::initializer_list<const char *> generation_total;
    std::initializer_list<const char *> prompt_rate;
    std::initializer_list<const char *> generation_rate;
};

const Names k_engines[] = {
    // vLLM: V1 names, then V0's (gpu_cache_usage_perc is a fraction despite its name; the
    // average throughputs exist in V0 only).
    {"vllm", "vllm:", {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}, {},
     {"vllm:num_requests_running"}, {"vllm:num_requests_waiting"}, {"vllm:prompt_tokens_total"},
     {"vllm:generation_tokens_total"}, {"vllm:avg_prompt_throughput_toks_per_s"},
     {"vllm:avg_generation_throughput_toks_per_s"}},
    {"sglang", "sglang:", {"sglang:token_usage"}, {"sglang:num_used_tokens"}, {"sglang:num_running_reqs"},
     {"sglang:num_queue_reqs"}, {"sglang:prompt_tokens_total"}, {"sglang:generation_tokens_total"}, {},
     {"sglang:gen_throughput"}},
    // llama.cpp: kv_cache_usage_ratio and kv_cache_tokens were published by older servers.
    {"llama.cpp", "llamacpp:", {"llamacpp:kv_cache_usage_ratio"}, {"llamacpp:kv_cache_tokens"},
     {"llamacpp:requests_processing"}, {"llamacpp:requests_deferred"}, {"llamacpp:prompt_tokens_total"},
     {"llamacpp:tokens_predicted_total"}, {"llamacpp:prompt_tokens_seconds"}, {"llamacpp:predicted_tokens_seconds"}},
    {"longscope", "longscope:", {"longscope:kv_cache_usage_ratio"}, {"longscope:kv_cache_tokens"},
     {"longscope:requests_running"}, {"longscope:requests_waiting"}, {"longscope:prompt_tokens_total"},
     {"longscope:generation_tokens_total"}, {"longscope:prompt_tokens_per_second"},
     {"longscope:generation_tokens_per_second"}},
};

std::optional<double> first(const MetricsText &m, std::initializer_list<const char *> names)
{
    for (const char *n : names) {
        double v = 0;
        if (m.sum(n, v))
            return v;
    }
    return std::nullopt;
}

bool has_prefix(const MetricsText &m, std::string_view prefix)
{
    for (const MetricSample &s : m.samples)
        if (s.name.compare(0, prefix.size(), prefix) == 0)
            return true;
    return false;
}

} // namespace

ServerMetrics server_metrics(const MetricsText &m)
{
    ServerMetrics out;
    for (const Names &n : k_engines) {
        if (!has_prefix(m, n.prefix))
            continue;
        out.engine = n.engine;
        out.kv_usage = first(m, n.kv_usage);
        out.kv_tokens = first(m, n.kv_tokens);
        out.requests_running = first(m, n.running);
        out.requests_waiting = first(m, n.waiting);
        out.prompt_tokens_total = first(m, n.prompt_total);
        out.generation_tokens_total = first(m, n.generation_total);
        out.prompt_tokens_per_second = first(m, n.prompt_rate);
        out.generation_tokens_per_second = first(m, n.generation_rate);
        break;
    }
    for (const MetricSample &s : m.samples)
        if (s.name == "longscope:memory_bytes")
            if (auto it = s.labels.find("category"); it != s.labels.end())
                out.memory_bytes[it->second] = s.value;
    return out;
}

std::optional<double> generation_rate(const ServerMetrics &before, const ServerMetrics &after, double seconds)
{
    if (!before.generation_tokens_total || !after.generation_tokens_total || seconds <= 0)
        return std::nullopt;
    const double d = *after.generation_tokens_total - *before.generation_tokens_total;
    if (d < 0)
        return std::nullopt;
    return d / seconds;
}

} // namespace longscope::remote
