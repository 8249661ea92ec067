#include "tokenizer/sp_model_proto.h"

#include <bit>
#include <cstring>

namespace longscope::detail {

namespace {

// Field numbers from sentencepiece_model.proto (checked against the tokenizer.model files in
// tests/data, which carry these fields, and by the tokenizer tests that compare ids).
namespace model_proto {
constexpr uint32_t pieces = 1;
constexpr uint32_t trainer_spec = 2;
constexpr uint32_t normalizer_spec = 3;
} // namespace model_proto

namespace piece_field {
constexpr uint32_t piece = 1;
constexpr uint32_t score = 2;
constexpr uint32_t type = 3;
} // namespace piece_field

namespace trainer_field {
constexpr uint32_t model_type = 3;
constexpr uint32_t vocab_size = 4;
constexpr uint32_t byte_fallback = 35;
constexpr uint32_t unk_id = 40;
constexpr uint32_t bos_id = 41;
constexpr uint32_t eos_id = 42;
constexpr uint32_t pad_id = 43;
constexpr uint32_t unk_piece = 45;
constexpr uint32_t bos_piece = 46;
constexpr uint32_t eos_piece = 47;
constexpr int32_t model_type_bpe = 2;
} // namespace trainer_field

namespace normalizer_field {
constexpr uint32_t name = 1;
constexpr uint32_t add_dummy_prefix = 3;
constexpr uint32_t remove_extra_whitespaces = 4;
constexpr uint32_t escape_whitespaces = 5;
} // namespace normalizer_field

enum WireType : uint32_t { Varint = 0, Fixed64 = 1, LengthDelimited = 2, Fixed32 = 5 };

class ProtoWriter {
public:
    void varint_field(uint32_t field, uint64_t v)
    {
        tag(field, Varint);
        varint(v);
    }
    // int32 fields encode negative values as the 64-bit two's complement, i.e. ten bytes.
    void int32_field(uint32_t field, int32_t v)
    {
        varint_field(field, static_cast<uint64_t>(static_cast<int64_t>(v)));
    }
    void bool_field(uint32_t field, bool v) { varint_field(field, v ? 1 : 0); }
    void float_field(uint32_t field, float v)
    {
        tag(field, Fixed32);
        const auto bits = std::bit_cast<uint32_t>(v);
        for (int i = 0; i < 4; ++i)
            m_out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
    }
    void bytes_field(uint32_t field, std::string_view bytes)
    {
        tag(field, LengthDelimited);
        varint(bytes.size());
        m_out.append(bytes);
    }

    const std::string &bytes() const { return m_out; }

private:
    void tag(uint32_t field, WireType wt) { varint((static_cast<uint64_t>(field) << 3) | wt); }
    void varint(uint64_t v)
    {
        while (v >= 0x80) {
            m_out.push_back(static_cast<char>((v & 0x7f) | 0x80));
            v >>= 7;
        }
        m_out.push_back(static_cast<char>(v));
    }

    std::string m_out;
};

// Walks the fields of one message. Only what the readers below need: every wire type is
// skipped correctly, groups (deprecated, never used by sentencepiece) count as malformed.
class ProtoReader {
public:
    explicit ProtoReader(std::string_view data) : m_data(data) {}

    struct Field {
        uint32_t number = 0;
        uint32_t wire_type = 0;
        uint64_t varint = 0;      // Varint fields
        std::string_view payload; // LengthDelimited fields
    };

    // False at the end of the message or on malformed input (see ok()).
    bool next(Field &f)
    {
        if (m_pos >= m_data.size() || !m_ok)
            return false;
        uint64_t key = 0;
        if (!read_varint(key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
            return fail();
        f.number = static_cast<uint32_t>(key >> 3);
        f.wire_type = static_cast<uint32_t>(key & 7);
        switch (f.wire_type) {
        case Varint:
            return read_varint(f.varint) || fail();
        case Fixed64:
            return skip(8) || fail();
        case Fixed32:
            return skip(4) || fail();
        case LengthDelimited: {
            uint64_t len = 0;
            if (!read_varint(len) || len > m_data.size() - m_pos)
                return fail();
            f.payload = m_data.substr(m_pos, static_cast<size_t>(len));
            m_pos += static_cast<size_t>(len);
            return true;
        }
        default:
            return fail();
        }
    }
    bool ok() const { return m_ok; }

private:
    bool fail()
    {
        m_ok = false;
        return false;
    }
    bool skip(size_t n)
    {
        if (n > m_data.size() - m_pos)
            return false;
        m_pos += n;
        return true;
    }
    bool read_varint(uint64_t &v)
    {
        v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (m_pos >= m_data.size())
                return false;
            const auto byte = static_cast<uint8_t>(m_data[m_pos++]);
            v |= static_cast<uint64_t>(byte & 0x7f) << shift;
            if ((byte & 0x80) == 0)
                return true;
        }
        return false;
    }

    std::string_view m_data;
    size_t m_pos = 0;
    bool m_ok = true;
};

} // namespace

std::string serialize_sp_model(const SpModelSpec &spec)
{
    ProtoWriter model;
    for (const SpPiece &p : spec.pieces) {
        ProtoWriter piece;
        piece.bytes_field(piece_field::piece, p.piece);
        piece.float_field(piece_field::score, p.score);
        piece.varint_field(piece_field::type, static_cast<uint64_t>(p.type));
        model.bytes_field(model_proto::pieces, piece.bytes());
    }

    // Special pieces are looked up by name in sentencepiece (bos_id() is PieceToId(bos_piece)),
    // so the names must be written along with the ids whenever they differ from the defaults.
    const auto piece_name = [&](int32_t id) -> std::string_view {
        return spec.pieces[static_cast<size_t>(id)].piece;
    };
    const auto in_range = [&](int32_t id) {
        return id >= 0 && static_cast<size_t>(id) < spec.pieces.size();
    };

    ProtoWriter trainer;
    trainer.int32_field(trainer_field::model_type, trainer_field::model_type_bpe);
    trainer.int32_field(trainer_field::vocab_size, static_cast<int32_t>(spec.pieces.size()));
    trainer.bool_field(trainer_field::byte_fallback, spec.byte_fallback);
    if (in_range(spec.unk_id))
        trainer.int32_field(trainer_field::unk_id, spec.unk_id);
    if (in_range(spec.bos_id))
        trainer.int32_field(trainer_field::bos_id, spec.bos_id);
    if (in_range(spec.eos_id))
        trainer.int32_field(trainer_field::eos_id, spec.eos_id);
    trainer.int32_field(trainer_field::pad_id, -1);
    if (in_range(spec.unk_id))
        trainer.bytes_field(trainer_field::unk_piece, piece_name(spec.unk_id));
    if (in_range(spec.bos_id))
        trainer.bytes_field(trainer_field::bos_piece, piece_name(spec.bos_id));
    if (in_range(spec.eos_id))
        trainer.bytes_field(trainer_field::eos_piece, piece_name(spec.eos_id));
    model.bytes_field(model_proto::trainer_spec, trainer.bytes());

    ProtoWriter normalizer;
    normalizer.bytes_field(normalizer_field::name, "identity");
    normalizer.bool_field(normalizer_field::add_dummy_prefix, spec.add_dummy_prefix);
    normalizer.bool_field(normalizer_field::remove_extra_whitespaces, false);
    normalizer.bool_field(normalizer_field::escape_whitespaces, true);
    model.bytes_field(model_proto::normalizer_spec, normalizer.bytes());

    return model.bytes();
}

std::optional<bool> read_add_dummy_prefix(std::string_view serialized)
{
    // Protobuf semantics: a later occurrence of a scalar wins, and repeated occurrences of an
    // embedded message are merged, so the last add_dummy_prefix seen anywhere decides.
    bool value = true;
    ProtoReader model(serialized);
    ProtoReader::Field f;
    while (model.next(f)) {
        if (f.number != model_proto::normalizer_spec || f.wire_type != LengthDelimited)
            continue;
        ProtoReader normalizer(f.payload);
        ProtoReader::Field nf;
        while (normalizer.next(nf)) {
            if (nf.number == normalizer_field::add_dummy_prefix && nf.wire_type == Varint)
                value = nf.varint != 0;
        }
        if (!normalizer.ok())
            return std::nullopt;
    }
    if (!model.ok())
        return std::nullopt;
    return value;
}

std::string sp_model_problem(std::string_view serialized)
{
    ProtoReader model(serialized);
    ProtoReader::Field f;
    size_t index = 0;
    while (model.next(f)) {
        if (f.number != model_proto::pieces || f.wire_type != LengthDelimited)
            continue;
        // As in protobuf, the last occurrence of the piece field is the piece.
        std::string_view text;
        ProtoReader piece(f.payload);
        ProtoReader::Field pf;
        while (piece.next(pf))
            if (pf.number == piece_field::piece && pf.wire_type == LengthDelimited)
                text = pf.payload;
        if (!piece.ok())
            return "not well-formed protobuf";
        if (text.find('\0') != std::string_view::npos)
            return "piece " + std::to_string(index) + " holds a NUL byte";
        ++index;
    }
    if (!model.ok())
        return "not well-formed protobuf";
    return {};
}

} // namespace longscope::detail
