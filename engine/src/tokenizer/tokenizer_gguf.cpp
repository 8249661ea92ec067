// Tokenizers from GGUF metadata: sentencepiece (tokenizer.ggml.model = "llama") and byte-level
// BPE ("gpt2"), and the tokenizer-only load of a file or directory.
#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "longscope/tokenizer.h"
#include "tokenizer/sp_model_proto.h"
#include "tokenizer/tokenizer_state.h"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <limits>
#include <optional>

namespace longscope {

namespace {

using namespace detail;

const GgufArray *find_array(const GgufFile &gguf, const std::string &key)
{
    const GgufValue *v = gguf.find(key);
    if (v == nullptr)
        return nullptr;
    const GgufArray *a = v->as_array();
    if (a == nullptr)
        throw FormatError(gguf.path() + ": metadata key '" + key + "' is not an array");
    return a;
}

// A special token id from the metadata: absent or negative (some converters write -1 for
// "none") gives nullopt; an id past the vocabulary is an error.
std::optional<int32_t> special_id(const GgufFile &gguf, const std::string &key, size_t n_vocab)
{
    const std::optional<int64_t> id = gguf.get_int(key);
    if (!id || *id < 0)
        return std::nullopt;
    if (static_cast<uint64_t>(*id) >= n_vocab)
        throw FormatError(gguf.path() + ": " + key + " is " + std::to_string(*id) +
                          " but the vocabulary has only " + std::to_string(n_vocab) + " tokens");
    return static_cast<int32_t>(*id);
}

std::string length_mismatch(const GgufFile &gguf, const char *key, size_t got, size_t want)
{
    return gguf.path() + ": " + key + " has " + std::to_string(got) +
           " entries but tokenizer.ggml.tokens has " + std::to_string(want);
}

// The vocabulary every tokenizer kind shares: tokens, token types (validated), special ids.
struct GgufVocab {
    std::vector<std::string> tokens;
    std::vector<uint8_t> types; // empty when the file has none
    std::optional<int32_t> bos, eos, unk;
    std::vector<int32_t> end_ids;
};

GgufVocab read_vocab(const GgufFile &gguf)
{
    const std::string &path = gguf.path();
    const GgufArray *tokens = find_array(gguf, "tokenizer.ggml.tokens");
    if (tokens == nullptr)
        throw FormatError(path + ": tokenizer.ggml.tokens is missing");
    if (tokens->elem_type != GgufValueType::String)
        throw FormatError(path + ": tokenizer.ggml.tokens is not an array of strings");
    const size_t n = tokens->items.size();
    if (n == 0)
        throw FormatError(path + ": tokenizer.ggml.tokens is empty");
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw FormatError(path + ": tokenizer.ggml.tokens has too many entries (" + std::to_string(n) + ")");
    GgufVocab v;
    v.tokens.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const std::string *text = tokens->items[i].as_string();
        if (text == nullptr)
            throw FormatError(path + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is not a string");
        v.tokens.push_back(*text);
    }
    if (const GgufArray *types = find_array(gguf, "tokenizer.ggml.token_type")) {
        if (types->items.size() != n)
            throw FormatError(length_mismatch(gguf, "tokenizer.ggml.token_type", types->items.size(), n));
        v.types.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            const std::optional<int64_t> type = types->items[i].as_int();
            if (!type || *type < 0 || *type > kTypeByte)
                throw FormatError(path + ": tokenizer.ggml.token_type[" + std::to_string(i) +
                                  "] is not a known token type (0..6)");
            // 0 is "undefined": a plain piece is meant.
            v.types.push_back(*type == kTypeUndefined ? uint8_t(kTypeNormal) : uint8_t(*type));
        }
    }
    v.bos = special_id(gguf, "tokenizer.ggml.bos_token_id", n);
    v.eos = special_id(gguf, "tokenizer.ggml.eos_token_id", n);
    v.unk = special_id(gguf, "tokenizer.ggml.unknown_token_id", n);
    for (const char *key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
        if (const auto id = special_id(gguf, key, n))
            v.end_ids.push_back(*id);
    // One unknown token: the one the file names, else the first typed UNKNOWN. Further
    // UNKNOWN-typed tokens (Phi-3 types its padding so) are unused.
    if (!v.types.empty()) {
        std::optional<int32_t> unk = v.unk;
        for (size_t i = 0; i < n; ++i) {
            if (v.types[i] != kTypeUnknown)
                continue;
            if (!unk)
                unk = int32_t(i);
            else if (int32_t(i) != *unk)
                v.types[i] = kTypeUnused;
        }
        if (unk)
            v.types[size_t(*unk)] = kTypeUnknown;
        v.unk = unk;
    }
    return v;
}

std::unique_ptr<Tokenizer> bpe_from_gguf(const GgufFile &gguf, GgufVocab v)
{
    const std::string &path = gguf.path();
    BpeSpec spec;
    spec.source = path;
    spec.pre_name = gguf.get_string("tokenizer.ggml.pre").value_or("default");
    spec.expressions = PreTokenizer::expressions_for(spec.pre_name);
    if (spec.expressions.empty())
        throw FormatError(path + ": unknown pre-tokenizer tokenizer.ggml.pre = '" + spec.pre_name +
                          "' (known: " + PreTokenizer::known_names() + ")");
    // Llama 3's tokenizer takes a word that is one token as that token before any merge.
    spec.ignore_merges = spec.pre_name == "llama-bpe" || spec.pre_name == "llama3" || spec.pre_name == "llama-v3";
    const GgufArray *merges = find_array(gguf, "tokenizer.ggml.merges");
    if (merges == nullptr)
        throw FormatError(path + ": tokenizer.ggml.merges is missing (a BPE vocabulary needs its merges)");
    if (merges->elem_type != GgufValueType::String)
        throw FormatError(path + ": tokenizer.ggml.merges is not an array of strings");
    spec.merges.reserve(merges->items.size());
    for (size_t i = 0; i < merges->items.size(); ++i) {
        const std::string *m = merges->items[i].as_string();
        // "left right": the separator is the first space after the first character.
        const size_t sep = m == nullptr || m->empty() ? std::string::npos : m->find(' ', 1);
        if (sep == std::string::npos || sep + 1 >= m->size())
            throw FormatError(path + ": tokenizer.ggml.merges[" + std::to_string(i) +
                              "] is not two tokens separated by a space");
        spec.merges.emplace_back(m->substr(0, sep), m->substr(sep + 1));
    }
    spec.pieces = std::move(v.tokens);
    spec.types = std::move(v.types);
    spec.bos = v.bos;
    spec.eos = v.eos;
    spec.unk = v.unk;
    spec.end_ids = std::move(v.end_ids);
    spec.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(spec.ignore_merges);
    return TokenizerBuilder::bpe(std::move(spec));
}

} // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile &gguf)
{
    const std::string &path = gguf.path();
    const std::optional<std::string> model = gguf.get_string("tokenizer.ggml.model");
    if (!model)
        throw FormatError(path + ": no tokenizer (tokenizer.ggml.model is missing)");
    if (*model != "llama" && *model != "gpt2")
        throw FormatError(path + ": unsupported tokenizer model '" + *model +
                          "' (supported: 'llama', i.e. sentencepiece, and 'gpt2', i.e. byte-level BPE)");
    GgufVocab v = read_vocab(gguf);
    if (*model == "gpt2")
        return bpe_from_gguf(gguf, std::move(v));

    const size_t n = v.tokens.size();
    const GgufArray *scores = find_array(gguf, "tokenizer.ggml.scores");
    if (scores != nullptr && scores->items.size() != n)
        throw FormatError(length_mismatch(gguf, "tokenizer.ggml.scores", scores->items.size(), n));

    SpModelSpec spec;
    spec.pieces.resize(n);
    std::vector<size_t> user_defined; // sentencepiece does not say which pieces are
    for (size_t i = 0; i < n; ++i) {
        SpPiece &p = spec.pieces[i];
        p.piece = std::move(v.tokens[i]);
        if (scores != nullptr) {
            const std::optional<double> score = scores->items[i].as_float();
            if (!score)
                throw FormatError(path + ": tokenizer.ggml.scores[" + std::to_string(i) + "] is not a number");
            p.score = static_cast<float>(*score);
        }
        if (!v.types.empty())
            p.type = static_cast<SpPieceType>(v.types[i]);
        if (p.type == SpPieceType::UserDefined)
            user_defined.push_back(i);
        spec.byte_fallback = spec.byte_fallback || p.type == SpPieceType::Byte;
    }
    // sentencepiece needs exactly one piece typed UNKNOWN; read_vocab left at most one, and a
    // file that names its unknown token without typing it still describes a usable vocabulary.
    if (v.unk)
        spec.pieces[static_cast<size_t>(*v.unk)].type = SpPieceType::Unknown;
    spec.unk_id = v.unk.value_or(-1);
    spec.bos_id = v.bos.value_or(-1);
    spec.eos_id = v.eos.value_or(-1);
    spec.add_dummy_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);

    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    tok->m_sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = tok->m_sp->LoadFromSerializedProto(detail::serialize_sp_model(spec));
    if (!status.ok())
        throw FormatError(path + ": sentencepiece rejects the tokenizer vocabulary (" +
                          std::string(status.message()) + ")");
    tok->init_from_processor(path);
    for (size_t i : user_defined)
        tok->m_types[i] = kTypeUserDefined;
    tok->m_bos = v.bos ? *v.bos : tok->m_sp->bos_id();
    tok->m_eos = v.eos ? *v.eos : tok->m_sp->eos_id();
    tok->m_add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
    tok->m_add_dummy_prefix = spec.add_dummy_prefix;
    tok->finish(v.end_ids);
    return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string &path)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        return from_hf_directory(path);
    const auto gguf = GgufFile::open(path);
    return from_gguf(*gguf);
}

} // namespace longscope
