// libFuzzer harness: what `longscope-cli serve` checks of a request before and after its
// body arrives, without sockets (app/cli/server_api.{h,cpp}): the head's size and field
// limits (HeadMeter, fed in pieces), the Host check, the body's framing and media type, and
// the JSON body's parsing and validation for both completion endpoints.
//
// Input: one byte of switches, then a request head ("Name: value" lines), a NUL byte, and a
// body. Refusals are ApiError with a status the server answers; anything else that escapes
// (another exception, a crash, a refusal with a status outside the contract) is a finding.
#include "server_api.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace longscope;
using namespace longscope::cli::api;

[[noreturn]] void finding() { __builtin_trap(); }

void expect_status(const ApiError &e, std::initializer_list<int> allowed)
{
    for (int s : allowed)
        if (e.status() == s)
            return;
    finding();
}

std::string_view trim(std::string_view s)
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
        s.remove_suffix(1);
    return s;
}

bool same_name(std::string_view a, std::string_view b)
{
    if (a.size() != b.size())
        return false;
    for (size_t i = 0; i < a.size(); ++i)
        if ((a[i] | 0x20) != (b[i] | 0x20))
            return false;
    return true;
}

// The head, measured as it would arrive in pieces of `piece` bytes.
void meter(std::string_view head, size_t piece)
{
    HeadMeter m;
    size_t fed = 0;
    for (size_t at = 0; at < head.size() && m.state() == HeadMeter::State::Reading; at += piece) {
        const std::string_view part = head.substr(at, piece);
        const size_t used = m.feed(part);
        if (used > part.size() || (m.state() == HeadMeter::State::Reading && used != part.size()))
            finding();
        fed += used;
    }
    if (fed > k_max_head_bytes + 1)
        finding();
    if (m.state() == HeadMeter::State::TooLarge && m.problem().empty())
        finding();
}

void check_head(std::string_view head, uint8_t switches)
{
    std::vector<std::string_view> host, length, coding, type;
    size_t at = 0;
    while (at < head.size()) {
        size_t end = head.find('\n', at);
        if (end == std::string_view::npos)
            end = head.size();
        const std::string_view line = head.substr(at, end - at);
        at = end + 1;
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos)
            continue;
        const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
        if (same_name(name, "Host"))
            host.push_back(value);
        else if (same_name(name, "Content-Length"))
            length.push_back(value);
        else if (same_name(name, "Transfer-Encoding"))
            coding.push_back(value);
        else if (same_name(name, "Content-Type"))
            type.push_back(value);
    }
    HostPolicy policy;
    policy.bound_host = switches & 2 ? "0.0.0.0" : "127.0.0.1";
    if (switches & 4)
        policy.allowed.push_back("example.test");
    const char *local = switches & 8 ? "::ffff:192.168.1.5" : "127.0.0.1";
    for (std::string_view v : host)
        if (auto name = host_name(v); name && name->empty())
            finding();
    try {
        check_host(host, local, policy);
    } catch (const ApiError &e) {
        expect_status(e, {400, 403});
    }
    try {
        const BodyFraming f = check_body_framing(length, coding, 1 << 20);
        if (!f.chunked && f.length > (1u << 20))
            finding();
    } catch (const ApiError &e) {
        expect_status(e, {400, 411, 413, 501});
    }
    try {
        check_json_content_type(type);
    } catch (const ApiError &e) {
        expect_status(e, {415});
    }
    is_loopback_address(host.empty() ? std::string_view() : host.front());
}

void check_body(std::string_view body, uint8_t switches)
{
    const Endpoint ep = switches & 1 ? Endpoint::Completion : Endpoint::Chat;
    Settings defaults;
    try {
        const CompletionRequest r = parse_request(ep, body, defaults);
        const SamplingParams &s = r.sampling;
        if (!std::isfinite(s.temperature) || s.temperature < 0 || s.temperature > 2 || !(s.top_p > 0) ||
            s.top_p > 1 || s.top_k < 0 || !(s.repeat_penalty > 0))
            finding();
        if ((r.max_tokens && *r.max_tokens < 1) || r.stop.size() > size_t(k_max_stop_sequences))
            finding();
        if (ep == Endpoint::Chat && r.messages.empty())
            finding();
        // A valid request's answer shapes serialize.
        dump(settings_json(r.settings));
    } catch (const ApiError &e) {
        expect_status(e, {400});
        if (std::string_view(e.what()).empty())
            finding();
        dump(e.body());
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t switches = data[0];
    const std::string_view rest(reinterpret_cast<const char *>(data + 1), size - 1);
    const size_t nul = rest.find('\0');
    const std::string_view head = rest.substr(0, nul);
    const std::string_view body = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
    meter(head, 1 + (switches >> 4) * 97);
    check_head(head, switches);
    check_body(body, switches);
    return 0;
}
