#include "longscope/tokenizer.h"

#include "longscope/errors.h"
#include "longscope/mapped_file.h"
#include "tokenizer/sp_model_proto.h"
#include "tokenizer/tokenizer_state.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <array>

namespace longscope {

namespace {

using namespace detail;

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81"; // "▁", sentencepiece's escaped space
// sentencepiece's default unk_surface: what Decode prints for the unknown token. GGUF carries
// no surface of its own, so both load paths use this default.
constexpr std::string_view kUnknownSurface = " \xE2\x81\x87 ";

// Token texts that end a turn or a document in the chat formats models use; a token with one
// of these texts joins the end-of-generation set whatever its type.
constexpr std::array<std::string_view, 16> kEndTexts{
    "<|eot_id|>",      "<|eom_id|>",   "<|im_end|>", "<end_of_turn>", "<|end|>",   "<|endoftext|>",
    "<|end_of_text|>", "<|return|>",   "<|call|>",   "<EOT>",         "_<EOT>",    "<|END_OF_TURN_TOKEN|>",
    "<end_of_utterance>", "<eos>",     "</s>",       "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
};

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

void require_in_range(int32_t id, int n_vocab)
{
    if (id < 0 || id >= n_vocab)
        throw InvalidArgument("token id " + std::to_string(id) +
                              " is out of range: the vocabulary has " + std::to_string(n_vocab) +
                              " tokens");
}

// What a byte-level BPE token contributes to decoded text.
std::string bpe_token_bytes(const std::string &piece, uint8_t type)
{
    switch (type) {
    case kTypeControl:
    case kTypeUnknown:
        return {}; // invisible, as control tokens are in sentencepiece
    case kTypeUserDefined:
    case kTypeUnused:
        return piece; // stored as written, not in the byte alphabet
    default:
        return byte_level_decode(piece);
    }
}

} // namespace

Tokenizer::Tokenizer() : m_state(std::make_unique<TokenizerState>()) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_sentencepiece_file(const std::string &path)
{
    // Real tokenizer models are a few MB; 256 MiB leaves room and stops absurd files.
    const std::string bytes = read_regular_file(path, 256ull << 20, "tokenizer model");
    if (const std::string problem = detail::sp_model_problem(bytes); !problem.empty())
        throw FormatError(path + ": not a valid sentencepiece model (" + problem + ")");
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
    tok->finish({});
    return tok;
}

void Tokenizer::init_from_processor(const std::string &source)
{
    const int n = m_sp->GetPieceSize();
    if (n <= 0)
        throw FormatError(source + ": the tokenizer vocabulary is empty");
    m_token_bytes.assign(static_cast<size_t>(n), std::string());
    m_types.assign(static_cast<size_t>(n), kTypeNormal);
    for (int id = 0; id < n; ++id) {
        std::string &out = m_token_bytes[static_cast<size_t>(id)];
        uint8_t &type = m_types[static_cast<size_t>(id)];
        if (m_sp->IsControl(id)) {
            type = kTypeControl; // invisible, as in sentencepiece's Decode
        } else if (m_sp->IsUnknown(id)) {
            type = kTypeUnknown;
            out = kUnknownSurface;
        } else if (m_sp->IsByte(id)) {
            type = kTypeByte;
            const int byte = parse_byte_piece(m_sp->IdToPiece(id));
            if (byte < 0)
                throw FormatError(source + ": byte token " + std::to_string(id) + " '" +
                                  m_sp->IdToPiece(id) + "' is not of the form <0xNN>");
            out.assign(1, static_cast<char>(byte));
        } else {
            // Normal, user-defined and unused pieces all decode to their text.
            if (m_sp->IsUnused(id))
                type = kTypeUnused;
            out = unescape_spaces(m_sp->IdToPiece(id));
        }
    }
}

std::vector<SpecialToken> TokenizerBuilder::special_by_type(const std::vector<std::string> &texts,
                                                            const std::vector<uint8_t> &types)
{
    std::vector<SpecialToken> out;
    for (size_t id = 0; id < texts.size() && id < types.size(); ++id)
        if (types[id] == kTypeControl || types[id] == kTypeUserDefined)
            out.push_back(SpecialToken{texts[id], int32_t(id), types[id] == kTypeUserDefined, false, false});
    return out;
}

std::unique_ptr<Tokenizer> TokenizerBuilder::bpe(BpeSpec spec)
{
    const size_t n = spec.pieces.size();
    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    TokenizerState &st = *tok->m_state;
    st.pre = std::make_unique<PreTokenizer>(std::move(spec.expressions), spec.source);
    tok->m_types = std::move(spec.types);
    tok->m_types.resize(n, kTypeNormal);
    std::vector<bool> mergeable(n);
    for (size_t id = 0; id < n; ++id)
        mergeable[id] = tok->m_types[id] != kTypeControl && tok->m_types[id] != kTypeUserDefined;
    st.merger = std::make_unique<BpeMerger>(spec.pieces, mergeable, spec.merges, spec.ignore_merges);
    st.unk = spec.unk.value_or(-1);
    tok->m_token_bytes.resize(n);
    for (size_t id = 0; id < n; ++id)
        tok->m_token_bytes[id] = bpe_token_bytes(spec.pieces[id], tok->m_types[id]);
    st.special = SpecialMatcher(spec.added.empty() ? special_by_type(spec.pieces, tok->m_types)
                                                   : std::move(spec.added));
    st.pieces = std::move(spec.pieces);
    tok->m_pre = std::move(spec.pre_name);
    tok->m_bos = spec.bos.value_or(-1);
    tok->m_eos = spec.eos.value_or(-1);
    tok->m_add_bos = spec.add_bos;
    tok->m_add_dummy_prefix = false;
    tok->finish(spec.end_ids);
    return tok;
}

void Tokenizer::finish(const std::vector<int32_t> &extra_end_ids)
{
    if (!m_state->pre) {
        // sentencepiece matches its user-defined pieces itself; control tokens on request.
        std::vector<std::string> texts(m_token_bytes.size());
        for (size_t id = 0; id < texts.size(); ++id)
            if (m_types[id] == kTypeControl)
                texts[id] = m_sp->IdToPiece(int(id));
        m_state->special = SpecialMatcher(TokenizerBuilder::special_by_type(texts, m_types));
    }
    m_eog.clear();
    auto add = [&](int32_t id) {
        if (id >= 0 && id < n_vocab())
            m_eog.push_back(id);
    };
    add(m_eos);
    for (int32_t id : extra_end_ids)
        add(id);
    for (int32_t id = 0; id < n_vocab(); ++id) {
        // Only tokens that cannot be ordinary text: a normal piece spelled "</s>" stays text.
        const uint8_t t = m_types[size_t(id)];
        if (t != kTypeControl && t != kTypeUserDefined && t != kTypeUnknown && t != kTypeUnused)
            continue;
        const std::string &text = m_state->pre ? m_state->pieces[size_t(id)] : m_sp->IdToPiece(int(id));
        if (std::find(kEndTexts.begin(), kEndTexts.end(), text) != kEndTexts.end())
            add(id);
    }
    std::sort(m_eog.begin(), m_eog.end());
    m_eog.erase(std::unique(m_eog.begin(), m_eog.end()), m_eog.end());
}

TokenizerKind Tokenizer::kind() const
{
    return m_state->pre ? TokenizerKind::Bpe : TokenizerKind::SentencePiece;
}

std::string_view Tokenizer::kind_name() const
{
    return kind() == TokenizerKind::Bpe ? "bpe" : "sentencepiece";
}

bool Tokenizer::is_end_of_generation(int32_t id) const
{
    return std::binary_search(m_eog.begin(), m_eog.end(), id);
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t> &out) const
{
    if (m_sp) {
        std::vector<int> ids;
        const auto status = m_sp->Encode(text, &ids);
        if (!status.ok())
            throw Error("tokenizer: cannot encode text (" + std::string(status.message()) + ")");
        out.insert(out.end(), ids.begin(), ids.end());
        return;
    }
    for (std::string_view word : m_state->pre->split(text))
        m_state->merger->encode_word(word, m_state->unk, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const
{
    std::vector<int32_t> out;
    if (add_bos && m_bos >= 0)
        out.push_back(m_bos);
    // sentencepiece finds its user-defined pieces itself, so without parse_special it takes the
    // whole text (and adds its dummy prefix once, as it always has).
    if (m_sp && !parse_special) {
        encode_plain(text, out);
        return out;
    }
    for (const Fragment &f : m_state->special.split(text, parse_special)) {
        if (f.token >= 0)
            out.push_back(f.token);
        else
            encode_plain(f.text, out);
    }
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const
{
    // sentencepiece would fail (or in some versions abort) on an unknown id; refuse it first.
    for (int32_t id : ids)
        require_in_range(id, n_vocab());
    if (!m_sp) {
        std::string text;
        for (int32_t id : ids)
            text += m_token_bytes[static_cast<size_t>(id)];
        return text;
    }
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
    return m_sp ? m_sp->IdToPiece(id) : m_state->pieces[static_cast<size_t>(id)];
}

bool Tokenizer::is_control(int32_t id) const
{
    return id >= 0 && id < n_vocab() && m_types[static_cast<size_t>(id)] == kTypeControl;
}

bool Tokenizer::is_byte(int32_t id) const
{
    return id >= 0 && id < n_vocab() && m_types[static_cast<size_t>(id)] == kTypeByte;
}

} // namespace longscope
