#include "longscope/tokenizer.h"

#include "longscope/errors.h"
#include "longscope/mapped_file.h"
#include "longscope/gguf.h"
#include "tokenizer/sp_model_proto.h"

#include <sentencepiece_processor.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>

namespace longscope {

namespace {

using detail::SpPieceType;

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81"; // "▁", sentencepiece's escaped space
// sentencepiece's default unk_surface: what Decode prints for the unknown token. GGUF carries
// no surface of its own, so both load paths use this default.
constexpr std::string_view kUnknownSurface = " \xE2\x81\x87 ";

// The byte of a byte-fallback piece "<0xNN>", or -1.
int parse_byte_piece(std::string_view piece)
{
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>')
        return -1;
    int value = 0;
    for (char c : piece.substr(3, 2)) {
        int digit = -1;
        if (c >= '0' && c <= '9')
            digit = c - '0';
        else if (c >= 'A' && c <= 'F')
            digit = c - 'A' + 10;
        else if (c >= 'a' && c <= 'f')
            digit = c - 'a' + 10;
        if (digit < 0)
            return -1;
        value = value * 16 + digit;
    }
    return value;
}

std::string unescape_spaces(std::string_view piece)
{
    std::string out;
    out.reserve(piece.size());
    size_t pos = 0;
    while (pos < piece.size()) {
        const size_t hit = piece.find(kSpaceSymbol, pos);
        if (hit == std::string_view::npos) {
            out.append(piece.substr(pos));
            break;
        }
        out.append(piece.substr(pos, hit - pos));
        out.push_back(' ');
        pos = hit + kSpaceSymbol.size();
    }
    return out;
}

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

void require_in_range(int32_t id, int n_vocab)
{
    if (id < 0 || id >= n_vocab)
        throw InvalidArgument("token id " + std::to_string(id) +
                              " is out of range: the vocabulary has " + std::to_string(n_vocab) +
                              " tokens");
}

std::string length_mismatch(const GgufFile &gguf, const char *key, size_t got, size_t want)
{
    return gguf.path() + ": " + key + " has " + std::to_string(got) +
           " entries but tokenizer.ggml.tokens has " + std::to_string(want);
}

} // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_sentencepiece_file(const std::string &path)
{
    // Real tokenizer models are a few MB; 256 MiB leaves room and stops absurd files.
    const std::string bytes = read_regular_file(path, 256ull << 20, "tokenizer model");
    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    tok->m_sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = tok->m_sp->LoadFromSerializedProto(bytes);
    if (!status.ok())
        throw FormatError(path + ": not a valid sentencepiece model (" +
                          std::string(status.message()) + ")");
    tok->init_from_processor(path);
    tok->m_bos = tok->m_sp->bos_id();
    tok->m_eos = tok->m_sp->eos_id();
    tok->m_add_bos = true;
    // LoadFromSerializedProto succeeded, so the bytes are well-formed; the fallback is only
    // sentencepiece's own default.
    tok->m_add_dummy_prefix = detail::read_add_dummy_prefix(bytes).value_or(true);
    return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile &gguf)
{
    const std::string &path = gguf.path();

    const std::optional<std::string> model = gguf.get_string("tokenizer.ggml.model");
    if (!model)
        throw FormatError(path + ": no tokenizer (tokenizer.ggml.model is missing)");
    if (*model != "llama")
        throw FormatError(path + ": unsupported tokenizer model '" + *model +
                          "' (only 'llama', i.e. sentencepiece, is supported)");

    const GgufArray *tokens = find_array(gguf, "tokenizer.ggml.tokens");
    if (tokens == nullptr)
        throw FormatError(path + ": tokenizer.ggml.tokens is missing");
    if (tokens->elem_type != GgufValueType::String)
        throw FormatError(path + ": tokenizer.ggml.tokens is not an array of strings");
    const size_t n = tokens->items.size();
    if (n == 0)
        throw FormatError(path + ": tokenizer.ggml.tokens is empty");
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw FormatError(path + ": tokenizer.ggml.tokens has too many entries (" +
                          std::to_string(n) + ")");

    const GgufArray *scores = find_array(gguf, "tokenizer.ggml.scores");
    if (scores != nullptr && scores->items.size() != n)
        throw FormatError(length_mismatch(gguf, "tokenizer.ggml.scores", scores->items.size(), n));
    const GgufArray *types = find_array(gguf, "tokenizer.ggml.token_type");
    if (types != nullptr && types->items.size() != n)
        throw FormatError(
            length_mismatch(gguf, "tokenizer.ggml.token_type", types->items.size(), n));

    detail::SpModelSpec spec;
    spec.pieces.resize(n);
    bool has_unknown = false;
    for (size_t i = 0; i < n; ++i) {
        detail::SpPiece &p = spec.pieces[i];
        const std::string *text = tokens->items[i].as_string();
        if (text == nullptr)
            throw FormatError(path + ": tokenizer.ggml.tokens[" + std::to_string(i) +
                              "] is not a string");
        p.piece = *text;
        if (scores != nullptr) {
            const std::optional<double> score = scores->items[i].as_float();
            if (!score)
                throw FormatError(path + ": tokenizer.ggml.scores[" + std::to_string(i) +
                                  "] is not a number");
            p.score = static_cast<float>(*score);
        }
        if (types != nullptr) {
            const std::optional<int64_t> type = types->items[i].as_int();
            if (!type || *type < 0 || *type > static_cast<int64_t>(SpPieceType::Byte))
                throw FormatError(path + ": tokenizer.ggml.token_type[" + std::to_string(i) +
                                  "] is not a known token type (0..6)");
            // GGUF's 0 is "undefined"; sentencepiece has no such type, a plain piece is meant.
            p.type = *type == 0 ? SpPieceType::Normal : static_cast<SpPieceType>(*type);
        }
        has_unknown = has_unknown || p.type == SpPieceType::Unknown;
        spec.byte_fallback = spec.byte_fallback || p.type == SpPieceType::Byte;
    }

    const std::optional<int32_t> bos = special_id(gguf, "tokenizer.ggml.bos_token_id", n);
    const std::optional<int32_t> eos = special_id(gguf, "tokenizer.ggml.eos_token_id", n);
    const std::optional<int32_t> unk = special_id(gguf, "tokenizer.ggml.unknown_token_id", n);
    // sentencepiece needs exactly one piece typed UNKNOWN; a file that names its unknown token
    // without typing it (no token_type array, say) still describes a usable vocabulary.
    if (unk && !has_unknown)
        spec.pieces[static_cast<size_t>(*unk)].type = SpPieceType::Unknown;
    spec.unk_id = unk.value_or(-1);
    spec.bos_id = bos.value_or(-1);
    spec.eos_id = eos.value_or(-1);
    spec.add_dummy_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);

    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    tok->m_sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = tok->m_sp->LoadFromSerializedProto(detail::serialize_sp_model(spec));
    if (!status.ok())
        throw FormatError(path + ": sentencepiece rejects the tokenizer vocabulary (" +
                          std::string(status.message()) + ")");
    tok->init_from_processor(path);
    tok->m_bos = bos ? *bos : tok->m_sp->bos_id();
    tok->m_eos = eos ? *eos : tok->m_sp->eos_id();
    tok->m_add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
    tok->m_add_dummy_prefix = spec.add_dummy_prefix;
    return tok;
}

void Tokenizer::init_from_processor(const std::string &source)
{
    const int n = m_sp->GetPieceSize();
    if (n <= 0)
        throw FormatError(source + ": the tokenizer vocabulary is empty");
    m_token_bytes.assign(static_cast<size_t>(n), std::string());
    for (int id = 0; id < n; ++id) {
        std::string &out = m_token_bytes[static_cast<size_t>(id)];
        if (m_sp->IsControl(id)) {
            continue; // invisible, as in sentencepiece's Decode
        } else if (m_sp->IsUnknown(id)) {
            out = kUnknownSurface;
        } else if (m_sp->IsByte(id)) {
            const int byte = parse_byte_piece(m_sp->IdToPiece(id));
            if (byte < 0)
                throw FormatError(source + ": byte token " + std::to_string(id) + " '" +
                                  m_sp->IdToPiece(id) + "' is not of the form <0xNN>");
            out.assign(1, static_cast<char>(byte));
        } else {
            // Normal, user-defined and unused pieces all decode to their text.
            out = unescape_spaces(m_sp->IdToPiece(id));
        }
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const
{
    std::vector<int> ids;
    const auto status = m_sp->Encode(text, &ids);
    if (!status.ok())
        throw Error("tokenizer: cannot encode text (" + std::string(status.message()) + ")");
    std::vector<int32_t> out;
    const bool with_bos = add_bos && m_bos >= 0;
    out.reserve(ids.size() + (with_bos ? 1 : 0));
    if (with_bos)
        out.push_back(m_bos);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const
{
    // sentencepiece would fail (or in some versions abort) on an unknown id; refuse it first.
    for (int32_t id : ids)
        require_in_range(id, n_vocab());
    const std::vector<int> as_int(ids.begin(), ids.end());
    std::string text;
    const auto status = m_sp->Decode(as_int, &text);
    if (!status.ok())
        throw Error("tokenizer: cannot decode ids (" + std::string(status.message()) + ")");
    return text;
}

const std::string &Tokenizer::token_bytes(int32_t id) const
{
    require_in_range(id, n_vocab());
    return m_token_bytes[static_cast<size_t>(id)];
}

const std::string &Tokenizer::piece(int32_t id) const
{
    require_in_range(id, n_vocab());
    return m_sp->IdToPiece(id);
}

bool Tokenizer::is_control(int32_t id) const
{
    return id >= 0 && id < n_vocab() && m_sp->IsControl(id);
}

bool Tokenizer::is_byte(int32_t id) const
{
    return id >= 0 && id < n_vocab() && m_sp->IsByte(id);
}

} // namespace longscope
