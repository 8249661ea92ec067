#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace longscope::detail {

namespace {

bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

} // namespace

SpecialMatcher::SpecialMatcher(std::vector<SpecialToken> tokens)
{
    std::erase_if(tokens, [](const SpecialToken &t) { return t.text.empty(); });
    std::stable_sort(tokens.begin(), tokens.end(),
                     [](const SpecialToken &a, const SpecialToken &b) { return a.text.size() > b.text.size(); });
    m_tokens = std::move(tokens);
    for (size_t i = 0; i < m_tokens.size(); ++i)
        m_by_first[static_cast<unsigned char>(m_tokens[i].text.front())].push_back(i);
}

std::vector<Fragment> SpecialMatcher::split(std::string_view text, bool parse_special) const
{
    std::vector<Fragment> out;
    size_t plain_start = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        const SpecialToken *hit = nullptr;
        if (auto it = m_by_first.find(static_cast<unsigned char>(text[pos])); it != m_by_first.end()) {
            for (size_t i : it->second) {
                const SpecialToken &t = m_tokens[i];
                if ((parse_special || t.always) && text.compare(pos, t.text.size(), t.text) == 0) {
                    hit = &t; // the first is the longest
                    break;
                }
            }
        }
        if (hit == nullptr) {
            ++pos;
            continue;
        }
        size_t plain_end = pos;
        if (hit->lstrip)
            while (plain_end > plain_start && is_space(text[plain_end - 1]))
                --plain_end;
        if (plain_end > plain_start)
            out.push_back(Fragment{text.substr(plain_start, plain_end - plain_start), -1});
        out.push_back(Fragment{{}, hit->id});
        pos += hit->text.size();
        if (hit->rstrip)
            while (pos < text.size() && is_space(text[pos]))
                ++pos;
        plain_start = pos;
    }
    if (plain_start < text.size())
        out.push_back(Fragment{text.substr(plain_start), -1});
    return out;
}

} // namespace longscope::detail
