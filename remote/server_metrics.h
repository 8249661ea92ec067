// What the plots take from a server's /metrics, whichever engine it is: KV-cache usage,
// requests running and waiting, token counters and throughput. vLLM (`vllm:`), SGLang
// (`sglang:`), llama.cpp's llama-server (`llamacpp:`) and `longscope-cli serve`
// (`longscope:`, docs/serve.md) name them differently; each maps here.
#pragma once

#include "remote/prometheus.h"

#include <map>
#include <optional>
#include <string>

namespace longscope::remote {

struct ServerMetrics {
    std::string engine;                    // "vllm", "sglang", "llama.cpp", "longscope"; "" when none is known
    std::optional<double> kv_usage;        // fraction of the KV cache in use, 0..1
    std::optional<double> kv_tokens;       // tokens held in the KV cache
    std::optional<double> requests_running;
    std::optional<double> requests_waiting;
    std::optional<double> prompt_tokens_total;     // counters since the server started
    std::optional<double> generation_tokens_total;
    std::optional<double> prompt_tokens_per_second;     // gauges the server computes itself
    std::optional<double> generation_tokens_per_second;
    std::map<std::string, double> memory_bytes; // by category (Longscope's memory ledger)
};

ServerMetrics server_metrics(const MetricsText &metrics);

// Generated tokens per second between two polls `seconds` apart, from the counters; nullopt
// without them, for a non-positive interval, or when the counter went back (a restart).
std::optional<double> generation_rate(const ServerMetrics &before, const ServerMetrics &after, double seconds);

} // namespace longscope::remote
