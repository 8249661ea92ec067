// Finding the text of special tokens (control and user-defined tokens, HF added tokens) in
// text, so that "<|im_start|>" becomes its one token instead of ordinary pieces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace longscope::detail {

struct SpecialToken {
    std::string text;
    int32_t id = -1;
    bool always = false; // matched even when the caller does not ask for special tokens
    bool lstrip = false; // whitespace right before the token goes with it
    bool rstrip = false; // whitespace right after it goes with it
};

// A piece of the text: ordinary text to tokenize, or one special token.
struct Fragment {
    std::string_view text; // empty for a token
    int32_t token = -1;
};

class SpecialMatcher {
public:
    // Tokens with empty text are ignored.
    explicit SpecialMatcher(std::vector<SpecialToken> tokens);
    SpecialMatcher() = default;

    // Cuts text at the special tokens it contains, scanning left to right and taking the
    // longest token that starts at each place (the tokens with `always` only, unless
    // parse_special). Linear in the text times the tokens sharing a first byte.
    std::vector<Fragment> split(std::string_view text, bool parse_special) const;
    bool empty() const { return m_tokens.empty(); }

private:
    std::vector<SpecialToken> m_tokens;                          // longest text first
    std::unordered_map<unsigned char, std::vector<size_t>> m_by_first; // first byte -> m_tokens
};

} // namespace longscope::detail
