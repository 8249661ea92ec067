#include "tokenizer/pre_tokenizer.h"

#include "longscope/errors.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <utility>

namespace longscope::detail {

namespace {

// The expressions as the models' tokenizer.json files write them (Hugging Face pre_tokenizer
// Split/ByteLevel patterns), in the order their Sequence applies them.
constexpr const char *kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char *kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char *kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char *kCjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
// DeepSeek LLM's letter class: Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee and the
// other cased scripts, spelled out as its tokenizer.json does.
constexpr const char *kDeepseekLetters =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943]+";
constexpr const char *kDeepseekPunct = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+";

struct PreSet {
    std::string_view name;
    std::vector<std::string> (*expressions)();
};

std::vector<std::string> gpt2() { return {kGpt2}; }
std::vector<std::string> llama3() { return {kLlama3}; }
std::vector<std::string> qwen2() { return {kQwen2}; }
std::vector<std::string> digits_then_gpt2() { return {R"(\p{N})", kGpt2}; }
std::vector<std::string> falcon()
{
    return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
}
std::vector<std::string> deepseek_llm()
{
    return {"[\r\n]", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kCjk, R"(\p{N}+)"};
}
std::vector<std::string> deepseek_coder()
{
    return {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"};
}

// tokenizer.ggml.pre names, as the GGUF converters write them, and their expressions.
const std::array<PreSet, 20> kPreSets{{
    {"default", gpt2},
    {"gpt-2", gpt2},
    {"phi-2", gpt2},
    {"mpt", gpt2},
    {"olmo", gpt2},
    {"jais", gpt2},
    {"llama-bpe", llama3},
    {"llama3", llama3},
    {"llama-v3", llama3},
    {"dbrx", llama3},
    {"smaug-bpe", llama3},
    {"qwen2", qwen2},
    {"stablelm2", qwen2},
    {"deepseek-r1-qwen", qwen2},
    {"deepseek-llm", deepseek_llm},
    {"deepseek-coder", deepseek_coder},
    {"falcon", falcon},
    {"starcoder", digits_then_gpt2},
    {"refact", digits_then_gpt2},
    {"command-r", digits_then_gpt2},
}};
// Further names that share the StarCoder list.
const std::array<std::string_view, 3> kDigitsThenGpt2{"smollm", "codeshell", "exaone"};

std::string pcre2_message(int code)
{
    std::array<PCRE2_UCHAR, 256> buf{};
    pcre2_get_error_message(code, buf.data(), buf.size());
    return reinterpret_cast<const char *>(buf.data());
}

// Guards against pathological backtracking: a match that needs more steps than this fails
// with an error instead of running on. The expressions above stay far below it on any input
// (each step of them is bounded by the run of one character class).
constexpr uint32_t kMatchLimit = 50'000'000;

} // namespace

struct PreTokenizer::Compiled {
    pcre2_code *code = nullptr;
    pcre2_match_context *context = nullptr;
    ~Compiled()
    {
        pcre2_match_context_free(context);
        pcre2_code_free(code);
    }
};

PreTokenizer::PreTokenizer(std::vector<std::string> expressions, const std::string &source)
    : m_expressions(std::move(expressions))
{
    for (const std::string &e : m_expressions) {
        int err = 0;
        PCRE2_SIZE offset = 0;
        auto c = std::make_unique<Compiled>();
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(e.data()), e.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                                &err, &offset, nullptr);
        if (c->code == nullptr)
            throw FormatError(source + ": the pre-tokenizer expression '" + e + "' does not compile (" +
                              pcre2_message(err) + " at offset " + std::to_string(offset) + ")");
        // JIT is an optimisation: where the library or the CPU has none, the interpreter runs.
        pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
        c->context = pcre2_match_context_create(nullptr);
        pcre2_set_match_limit(c->context, kMatchLimit);
        m_compiled.push_back(std::move(c));
    }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::expressions_for(std::string_view pre)
{
    for (const PreSet &s : kPreSets)
        if (s.name == pre)
            return s.expressions();
    for (std::string_view name : kDigitsThenGpt2)
        if (name == pre)
            return digits_then_gpt2();
    return {};
}

std::string PreTokenizer::known_names()
{
    std::string out;
    for (const PreSet &s : kPreSets)
        out += (out.empty() ? "" : ", ") + std::string(s.name);
    for (std::string_view name : kDigitsThenGpt2)
        out += ", " + std::string(name);
    return out;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const
{
    std::vector<std::string_view> chunks;
    if (text.empty())
        return chunks;
    chunks.push_back(text);
    std::vector<std::string_view> next;
    for (const auto &c : m_compiled) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(c->code, nullptr);
        if (md == nullptr)
            throw OutOfMemory("tokenizer: cannot allocate regular expression match data");
        next.clear();
        for (std::string_view chunk : chunks) {
            const auto *subject = reinterpret_cast<PCRE2_SPTR>(chunk.data());
            size_t pos = 0;
            while (pos < chunk.size()) {
                const int rc = pcre2_match(c->code, subject, chunk.size(), pos, PCRE2_NOTEMPTY, md, c->context);
                if (rc == PCRE2_ERROR_NOMATCH)
                    break;
                if (rc < 0) {
                    pcre2_match_data_free(md);
                    throw Error("tokenizer: the pre-tokenizer expression failed on the text (" +
                                pcre2_message(rc) + ")");
                }
                const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                if (ov[0] > pos)
                    next.push_back(chunk.substr(pos, ov[0] - pos));
                next.push_back(chunk.substr(ov[0], ov[1] - ov[0]));
                pos = ov[1];
            }
            if (pos < chunk.size())
                next.push_back(chunk.substr(pos));
        }
        pcre2_match_data_free(md);
        chunks.swap(next);
    }
    return chunks;
}

} // namespace longscope::detail
