// A serialized sentencepiece ModelProto built in memory, and the one field we read back out of
// a serialized model. Only the fields a BPE model with byte fallback needs are covered.
//
// Why hand-written wire format: Debian's libsentencepiece-dev ships no sentencepiece_model.pb.h,
// and libsentencepiece.so exports its own bundled protobuf-lite runtime, so generating code
// against the system libprotobuf would link two protobuf runtimes into one process. The
// protobuf wire format for the handful of scalar, string and message fields used here is small
// and stable, so we encode it directly and hand the bytes to LoadFromSerializedProto.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace longscope::detail {

// ModelProto.SentencePiece.Type, with sentencepiece's numbering (the same as GGUF's
// tokenizer.ggml.token_type, where 0 means "undefined").
enum class SpPieceType : int32_t {
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

struct SpPiece {
    std::string piece;
    float score = 0.0f;
    SpPieceType type = SpPieceType::Normal;
};

// What goes into the ModelProto: a BPE model with an identity normaliser (no NFKC tables,
// whitespace kept as is apart from the "▁" escape and the optional dummy prefix).
struct SpModelSpec {
    std::vector<SpPiece> pieces;
    bool byte_fallback = false;
    bool add_dummy_prefix = true;
    // Special ids; a negative id leaves both the id and the piece name out of the proto so
    // sentencepiece falls back to its defaults ("<unk>", "<s>", "</s>").
    int32_t unk_id = -1;
    int32_t bos_id = -1;
    int32_t eos_id = -1;
};

// The serialized ModelProto for spec.
std::string serialize_sp_model(const SpModelSpec &spec);

// normalizer_spec.add_dummy_prefix of a serialized ModelProto (true when the field is absent,
// as in sentencepiece), or nullopt when the bytes are not well-formed protobuf.
std::optional<bool> read_add_dummy_prefix(std::string_view serialized);

// What in a serialized ModelProto sentencepiece's parser accepts but its loader cannot survive,
// in words ("piece 512 holds a NUL byte"), or empty. sentencepiece builds its tries from the
// pieces as C strings, and the exception that throws from inside its loader ends the process.
// Bytes that are not well-formed protobuf (groups included, which sentencepiece never writes)
// give "not well-formed protobuf".
std::string sp_model_problem(std::string_view serialized);

} // namespace longscope::detail
