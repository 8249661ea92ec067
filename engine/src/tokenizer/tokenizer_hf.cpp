// Tokenizers from a Hugging Face directory: tokenizer.json with a byte-level BPE model, or
// sentencepiece's tokenizer.model; tokenizer_config.json, generation_config.json and
// config.json for BOS, EOS and the end-of-generation ids.
#include "core/json_input.h"
#include "longscope/errors.h"
#include "longscope/mapped_file.h"
#include "longscope/tokenizer.h"
#include "tokenizer/tokenizer_state.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>

namespace longscope {

namespace {

using namespace detail;
using json = nlohmann::json;
namespace fs = std::filesystem;

json read_json_file(const fs::path &p)
{
    // Large vocabularies (Llama 3, Gemma) have tokenizer.json files of 10-35 MB.
    const std::string text = read_regular_file(p.string(), 256ull << 20, "JSON file");
    json out;
    std::string why;
    if (!parse_json_bounded(text.data(), text.data() + text.size(), out, why))
        throw ConfigError(p.string() + ": " + why);
    return out;
}

std::optional<json> read_optional_json(const fs::path &p)
{
    std::error_code ec;
    if (!fs::exists(p, ec))
        return std::nullopt;
    json j = read_json_file(p);
    if (!j.is_object())
        throw ConfigError(p.string() + ": not a JSON object");
    return j;
}

// Turns a tokenizer.json pre_tokenizer into the list of expressions PreTokenizer runs. Only
// what keeps the split exact is accepted; anything else is refused by name.
class PreTokenizerReader {
public:
    explicit PreTokenizerReader(std::string source) : m_source(std::move(source)) {}

    void read(const json &p)
    {
        if (p.is_null())
            return;
        const std::string type = p.value("type", std::string());
        if (type == "Sequence") {
            for (const json &inner : p.value("pretokenizers", json::array()))
                read(inner);
        } else if (type == "ByteLevel") {
            m_byte_level = true;
            if (p.value("add_prefix_space", false))
                fail("ByteLevel with add_prefix_space = true is not supported");
            if (p.value("use_regex", true))
                m_expressions.push_back(PreTokenizer::expressions_for("gpt-2").front());
        } else if (type == "Split") {
            if (p.value("behavior", std::string()) != "Isolated" || p.value("invert", false))
                fail("Split is supported only with behavior \"Isolated\" and invert false");
            const json &pattern = p.value("pattern", json::object());
            if (pattern.contains("Regex") && pattern["Regex"].is_string())
                m_expressions.push_back(pattern["Regex"].get<std::string>());
            else if (pattern.contains("String") && pattern["String"].is_string())
                m_expressions.push_back(literal(pattern["String"].get<std::string>()));
            else
                fail("Split has no Regex or String pattern");
        } else if (type == "Digits") {
            m_expressions.push_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
        } else if (type == "Punctuation") {
            const std::string behavior = p.value("behavior", std::string("Isolated"));
            if (behavior != "Isolated" && behavior != "Contiguous")
                fail("Punctuation is supported only with behavior \"Isolated\" or \"Contiguous\"");
            // Rust's is_ascii_punctuation or a Unicode punctuation category.
            m_expressions.push_back(std::string(R"([\p{P}!-/:-@\[-`{-~])") + (behavior == "Contiguous" ? "+" : ""));
        } else {
            fail("pre_tokenizer type '" + type + "' is not supported");
        }
    }

    std::vector<std::string> take() { return std::move(m_expressions); }
    bool byte_level() const { return m_byte_level; }

private:
    [[noreturn]] void fail(const std::string &what) const { throw FormatError(m_source + ": " + what); }
    static std::string literal(const std::string &s) { return "\\Q" + s + "\\E"; }

    std::string m_source;
    std::vector<std::string> m_expressions;
    bool m_byte_level = false;
};

// The text of a token named in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::optional<std::string> token_text(const json &cfg, const char *key)
{
    if (!cfg.contains(key))
        return std::nullopt;
    const json &v = cfg[key];
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return std::nullopt;
}

// An id or a list of ids (generation_config.json and config.json write either).
std::vector<int32_t> id_list(const json &cfg, const char *key)
{
    std::vector<int32_t> out;
    if (!cfg.contains(key))
        return out;
    const json &v = cfg[key];
    if (v.is_number_integer())
        out.push_back(v.get<int32_t>());
    else if (v.is_array())
        for (const json &e : v)
            if (e.is_number_integer())
                out.push_back(e.get<int32_t>());
    return out;
}

std::optional<int32_t> find_piece(const std::vector<std::string> &pieces, const std::optional<std::string> &text)
{
    if (!text)
        return std::nullopt;
    for (size_t id = 0; id < pieces.size(); ++id)
        if (pieces[id] == *text)
            return int32_t(id);
    return std::nullopt;
}

// Whether the post-processor puts a special token first (Llama 3's TemplateProcessing).
bool post_processor_adds_first(const json &p)
{
    if (!p.is_object())
        return false;
    if (p.value("type", std::string()) == "Sequence") {
        for (const json &inner : p.value("processors", json::array()))
            if (post_processor_adds_first(inner))
                return true;
        return false;
    }
    if (p.value("type", std::string()) != "TemplateProcessing")
        return false;
    const json &single = p.value("single", json::array());
    return !single.empty() && single.front().is_object() && single.front().contains("SpecialToken");
}

void read_vocab(const json &model, const std::string &src, BpeSpec &spec)
{
    if (!model.contains("vocab") || !model["vocab"].is_object())
        throw FormatError(src + ": model.vocab is missing or not an object");
    for (const auto &[text, id] : model["vocab"].items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24))
            throw FormatError(src + ": model.vocab['" + text + "'] is not a token id");
        const auto i = size_t(id.get<int64_t>());
        if (i >= spec.pieces.size()) {
            spec.pieces.resize(i + 1);
            spec.types.resize(i + 1, kTypeUnused); // ids no entry names stay unused
        }
        spec.pieces[i] = text;
        spec.types[i] = kTypeNormal;
    }
    if (!model.contains("merges") || !model["merges"].is_array())
        throw FormatError(src + ": model.merges is missing or not an array");
    const json &merges = model["merges"];
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const json &m = merges[i];
        if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
            continue;
        }
        const std::string s = m.is_string() ? m.get<std::string>() : std::string();
        const size_t sep = s.empty() ? std::string::npos : s.find(' ', 1);
        if (sep == std::string::npos || sep + 1 >= s.size())
            throw FormatError(src + ": model.merges[" + std::to_string(i) + "] is not two tokens");
        spec.merges.emplace_back(s.substr(0, sep), s.substr(sep + 1));
    }
}

void read_added_tokens(const json &added, const std::string &src, BpeSpec &spec)
{
    if (!added.is_array())
        return;
    for (size_t k = 0; k < added.size(); ++k) {
        const json &t = added[k];
        if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
            !t["content"].is_string() || t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() >= (1 << 24))
            throw FormatError(src + ": added_tokens[" + std::to_string(k) + "] has no valid id and content");
        const auto id = size_t(t["id"].get<int64_t>());
        if (id >= spec.pieces.size()) {
            spec.pieces.resize(id + 1);
            spec.types.resize(id + 1, kTypeUnused);
        }
        const bool special = t.value("special", false);
        spec.pieces[id] = t["content"].get<std::string>();
        spec.types[id] = special ? kTypeControl : kTypeUserDefined;
        spec.added.push_back(SpecialToken{spec.pieces[id], int32_t(id), !special, t.value("lstrip", false),
                                          t.value("rstrip", false)});
    }
}

std::unique_ptr<Tokenizer> bpe_from_tokenizer_json(const fs::path &file, const json &j)
{
    const std::string src = file.string();
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
        throw FormatError(src + ": no model object");
    const json &model = j["model"];
    if (model.value("type", std::string("BPE")) != "BPE")
        throw FormatError(src + ": model type '" + model.value("type", std::string()) +
                          "' is not supported (only byte-level BPE)");
    const json normalizer = j.value("normalizer", json());
    if (!normalizer.is_null() && normalizer.value("type", std::string()) != "NFC")
        throw FormatError(src + ": normalizer type '" + normalizer.value("type", std::string()) +
                          "' is not supported (none, or NFC)");
    BpeSpec spec;
    spec.source = src;
    PreTokenizerReader pre(src);
    pre.read(j.value("pre_tokenizer", json()));
    const json decoder = j.value("decoder", json());
    if (!pre.byte_level() && !(decoder.is_object() && decoder.value("type", std::string()) == "ByteLevel"))
        throw FormatError(src + ": not a byte-level BPE (no ByteLevel pre_tokenizer or decoder)");
    spec.expressions = pre.take();
    spec.pre_name = "tokenizer.json";
    spec.ignore_merges = model.value("ignore_merges", false);
    read_vocab(model, src, spec);
    read_added_tokens(j.value("added_tokens", json()), src, spec);
    spec.add_bos = post_processor_adds_first(j.value("post_processor", json()));
    return TokenizerBuilder::bpe(std::move(spec));
}

} // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_directory(const std::string &dir_str)
{
    try {
        return TokenizerBuilder::hf_directory(dir_str);
    } catch (const json::exception &e) {
        // A value of the wrong JSON type somewhere the reader looked (a number for a string,
        // a string for an object, ...).
        throw FormatError(dir_str + ": tokenizer files hold a value of the wrong type (" + e.what() + ")");
    }
}

std::unique_ptr<Tokenizer> TokenizerBuilder::hf_directory(const std::string &dir_str)
{
    const fs::path dir(dir_str);
    const std::optional<json> tc = read_optional_json(dir / "tokenizer_config.json");
    const std::optional<json> gen = read_optional_json(dir / "generation_config.json");
    const std::optional<json> cfg = read_optional_json(dir / "config.json");

    std::error_code ec;
    std::unique_ptr<Tokenizer> tok;
    const fs::path tj = dir / "tokenizer.json";
    const fs::path tm = dir / "tokenizer.model";
    // A sentencepiece model wins where both are present (Llama 2 ships a tokenizer.json that
    // is not byte-level beside its tokenizer.model).
    if (fs::exists(tj, ec) && !fs::exists(tm, ec)) {
        const json j = read_json_file(tj);
        tok = bpe_from_tokenizer_json(tj, j);
    } else if (fs::exists(tm, ec)) {
        tok = Tokenizer::from_sentencepiece_file(tm.string());
    } else {
        throw FormatError(dir_str + ": no tokenizer.json or tokenizer.model");
    }

    const auto n = size_t(tok->n_vocab());
    auto in_range = [&](int32_t id) { return id >= 0 && size_t(id) < n; };
    std::vector<int32_t> end_ids;
    if (tc) {
        if (tc->contains("add_bos_token") && !(*tc)["add_bos_token"].is_null()) {
            if (!(*tc)["add_bos_token"].is_boolean())
                throw ConfigError((dir / "tokenizer_config.json").string() + ": add_bos_token must be true or false");
            tok->m_add_bos = (*tc)["add_bos_token"].get<bool>();
        }
        if (tok->m_state->pre) {
            if (const auto id = find_piece(tok->m_state->pieces, token_text(*tc, "bos_token")))
                tok->m_bos = *id;
            if (const auto id = find_piece(tok->m_state->pieces, token_text(*tc, "eos_token")))
                tok->m_eos = *id;
        }
    }
    for (const std::optional<json> *c : {&gen, &cfg}) {
        if (!*c)
            continue;
        for (int32_t id : id_list(**c, "eos_token_id"))
            if (in_range(id))
                end_ids.push_back(id);
    }
    if (tok->m_state->pre && tok->m_eos < 0 && !end_ids.empty())
        tok->m_eos = end_ids.front();
    if (tok->m_state->pre && tok->m_bos < 0 && cfg)
        for (int32_t id : id_list(*cfg, "bos_token_id"))
            if (in_range(id))
                tok->m_bos = id;
    tok->finish(end_ids);
    return tok;
}

} // namespace longscope
