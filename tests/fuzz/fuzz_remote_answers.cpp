// libFuzzer harness: what a remote server sends the client (remote/): a Prometheus /metrics
// text, a server-sent event stream cut where the input says, a /v1/models body, a completion
// with prompt log-probabilities and an error body. A server is untrusted input: refusals are
// MetricsParseError or ClientError with a one-line message; anything else that escapes (another
// exception, a crash, a hang) is a finding.
#include "remote/openai_client.h"
#include "remote/prometheus.h"
#include "remote/server_metrics.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

using namespace longscope::remote;

[[noreturn]] void finding() { __builtin_trap(); }

// Every refusal is one line: the CLI prints it as one, the app shows it as one.
void one_line(const char *message)
{
    if (std::string_view(message).find_first_of("\r\n") != std::string_view::npos)
        finding();
}

template <class F>
void refused_cleanly(F f)
{
    try {
        f();
    } catch (const MetricsParseError &e) {
        one_line(e.what());
    } catch (const ClientError &e) {
        one_line(e.what());
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const size_t cut = data[0];
    const std::string_view text(reinterpret_cast<const char *>(data + 1), size - 1);

    refused_cleanly([&] {
        const MetricsText m = parse_metrics(text);
        const ServerMetrics s = server_metrics(m);
        (void)generation_rate(s, s, 1.0);
    });
    refused_cleanly([&] {
        SseDecoder d;
        StreamState state;
        const size_t at = text.empty() ? 0 : cut % (text.size() + 1);
        for (std::string_view piece : {text.substr(0, at), text.substr(at)})
            for (const std::string &event : d.feed(piece))
                state.feed(event);
        state.finish();
    });
    refused_cleanly([&] { (void)parse_models(text); });
    refused_cleanly([&] { (void)parse_prompt_logprobs(text); });
    refused_cleanly([&] { (void)parse_completion(text, cut & 1); });
    refused_cleanly([&] { (void)parse_base_url(text); });
    const ClientError e = http_error(400 + int(cut % 200), text, "m", "http://127.0.0.1:1");
    (void)e.what();
    return 0;
}
