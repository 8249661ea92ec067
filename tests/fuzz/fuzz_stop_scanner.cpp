// Stop-string scanning over streamed text: up to four stop strings and the text in pieces
// come from the input. Checked against what the text itself says (no reference scanner):
// the output is a prefix of the text; with a stop, the text continues with a stop string
// right after the output, the output holds none, and the cut is no later than where the
// first stop string to complete begins; without one, the output is all of the text, which
// holds no stop string; at most the longest stop string minus one byte is ever held back.
#include "support.h"

#include "runtime/stop_scanner.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

using namespace longscope;

namespace {

bool contains_stop(const std::string &text, const std::vector<std::string> &stops)
{
    return std::any_of(stops.begin(), stops.end(), [&](const std::string &s) {
        return !s.empty() && text.find(s) != std::string::npos;
    });
}

// Where the stop string that completes first begins (npos when none occurs).
size_t first_completed_start(const std::string &text, const std::vector<std::string> &stops)
{
    size_t best_end = std::string::npos, best_start = std::string::npos;
    for (const std::string &s : stops) {
        if (s.empty())
            continue;
        const size_t at = text.find(s);
        if (at == std::string::npos)
            continue;
        const size_t end = at + s.size();
        if (end < best_end || (end == best_end && at < best_start)) {
            best_end = end;
            best_start = at;
        }
    }
    return best_start;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzedDataProvider in(data, size);
    std::vector<std::string> stops(in.ConsumeIntegralInRange<size_t>(0, 4));
    size_t longest = 0;
    for (std::string &s : stops) {
        s = in.ConsumeRandomLengthString(12);
        longest = std::max(longest, s.size());
    }
    StopScanner scanner(stops);
    std::string text, out;
    while (in.remaining_bytes() > 0 && !scanner.stopped()) {
        const std::string piece = in.ConsumeRandomLengthString(16);
        text += piece;
        out += scanner.push(piece);
        if (!scanner.stopped())
            fuzz::check(text.size() - out.size() + 1 <= std::max<size_t>(longest, 1),
                        "more than the longest stop string minus one byte is held back");
    }
    out += scanner.finish();

    fuzz::check(text.compare(0, out.size(), out) == 0 && out.size() <= text.size(),
                "the output is not a prefix of the text");
    fuzz::check(!contains_stop(out, stops), "the output holds a stop string");
    if (scanner.stopped()) {
        const std::string rest = text.substr(out.size());
        fuzz::check(std::any_of(stops.begin(), stops.end(),
                                [&](const std::string &s) { return !s.empty() && rest.starts_with(s); }),
                    "no stop string follows the output");
        fuzz::check(out.size() <= first_completed_start(text, stops),
                    "the cut is after the first stop string to complete");
    } else {
        fuzz::check(out == text, "without a stop the output is not the whole text");
        fuzz::check(!contains_stop(text, stops), "a stop string in the text was missed");
    }
    return 0;
}
