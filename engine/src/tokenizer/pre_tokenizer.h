// The pre-tokenizer of a byte-level BPE vocabulary: a sequence of regular expressions (PCRE2,
// UTF + UCP, JIT where the library has it) that cut text into words before the merges run.
// Each expression is applied to every chunk the previous ones left, and both its matches and
// the text between them stay chunks (Hugging Face's Split with the "isolated" behaviour, the
// way llama.cpp applies its lists), so no byte is ever dropped.
//
// Invalid UTF-8 does not stop the split: the expressions are compiled with
// PCRE2_MATCH_INVALID_UTF, so a malformed byte sequence is never part of a match and ends up
// in a chunk of unmatched text, which the byte-level BPE then encodes byte by byte.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace longscope::detail {

class PreTokenizer {
public:
    // Compiles the expressions. Throws FormatError naming `source` and the expression when
    // PCRE2 refuses one.
    PreTokenizer(std::vector<std::string> expressions, const std::string &source);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer &) = delete;
    PreTokenizer &operator=(const PreTokenizer &) = delete;

    // The expressions for a tokenizer.ggml.pre name, or an empty list for a name not known
    // (the caller refuses it). "default" is GPT-2's expression, as in the GGUF converters.
    static std::vector<std::string> expressions_for(std::string_view pre);
    // Every name expressions_for knows, for error messages and documentation.
    static std::string known_names();

    // Splits `text` into consecutive, non-empty chunks that concatenate back to `text`.
    std::vector<std::string_view> split(std::string_view text) const;

    const std::vector<std::string> &expressions() const { return m_expressions; }

private:
    struct Compiled;
    std::vector<std::string> m_expressions;
    std::vector<std::unique_ptr<Compiled>> m_compiled;
};

} // namespace longscope::detail
