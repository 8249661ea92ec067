#include "runtime/stop_scanner.h"

#include <algorithm>

namespace longscope {

StopScanner::StopScanner(std::vector<std::string> stops) : m_stops(std::move(stops))
{
    // An empty stop string would match everywhere: it means no stop string.
    std::erase_if(m_stops, [](const std::string &s) { return s.empty(); });
}

std::string StopScanner::push(std::string_view piece)
{
    if (m_stopped)
        return {};
    m_held.append(piece);
    if (m_stops.empty()) {
        std::string out;
        out.swap(m_held);
        return out;
    }
    size_t first = std::string::npos;
    for (const std::string &s : m_stops)
        first = std::min(first, m_held.find(s));
    if (first != std::string::npos) {
        std::string out = m_held.substr(0, first);
        m_held.clear();
        m_stopped = true;
        return out;
    }
    // Hold back the longest tail that is the start of some stop string.
    size_t longest = 0;
    for (const std::string &s : m_stops)
        longest = std::max(longest, s.size());
    size_t keep_from = m_held.size();
    for (size_t i = m_held.size() > longest ? m_held.size() - longest + 1 : 0; i < m_held.size(); ++i) {
        const std::string_view tail = std::string_view(m_held).substr(i);
        const bool prefix = std::any_of(m_stops.begin(), m_stops.end(), [&](const std::string &s) {
            return s.size() > tail.size() && std::string_view(s).substr(0, tail.size()) == tail;
        });
        if (prefix) {
            keep_from = i;
            break;
        }
    }
    std::string out = m_held.substr(0, keep_from);
    m_held.erase(0, keep_from);
    return out;
}

std::string StopScanner::finish()
{
    std::string out;
    if (!m_stopped)
        out.swap(m_held);
    m_held.clear();
    return out;
}

} // namespace longscope
