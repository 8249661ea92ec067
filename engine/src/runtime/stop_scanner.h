// Internal: finds stop strings in streamed text for the generator.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace longscope {

// push() returns the text that can be released now: everything except a tail that might
// still grow into a stop string. Once a stop string is found, the text is cut just before it
// and stopped() is true; finish() returns what was held back when generation ends without
// one. Stop strings are byte sequences; valid UTF-8 ones never cut a character.
class StopScanner {
public:
    explicit StopScanner(std::vector<std::string> stops);
    std::string push(std::string_view piece);
    std::string finish();
    bool stopped() const { return m_stopped; }

private:
    std::vector<std::string> m_stops;
    std::string m_held;
    bool m_stopped = false;
};

} // namespace longscope
