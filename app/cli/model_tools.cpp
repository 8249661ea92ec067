// longscope-cli quantize and make-model: GGUF quantization, and models of a real model's shape
// with random weights (benchmarks and memory tests at full size without downloading weights).
#include "commands.h"

#include "args.h"

#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "longscope/mapped_file.h"
#include "longscope/quantize.h"
#include "longscope/tokenizer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <unistd.h>

namespace longscope::cli {

namespace {

constexpr const char *quantized_type_names = "q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k(_m), q4_k(_m), q5_k(_m), q6_k, "
                                             "iq4_nl or iq4_xs";

std::optional<DType> parse_type(const std::string &s, bool allow_plain)
{
    static const std::map<std::string, DType> quantized = {
        {"q8_0", DType::Q8_0}, {"q4_0", DType::Q4_0},   {"q4_1", DType::Q4_1},     {"q5_0", DType::Q5_0},
        {"q5_1", DType::Q5_1}, {"q2_k", DType::Q2_K},   {"q3_k", DType::Q3_K},     {"q4_k", DType::Q4_K},
        {"q5_k", DType::Q5_K}, {"q6_k", DType::Q6_K},   {"iq4_nl", DType::IQ4_NL}, {"iq4_xs", DType::IQ4_XS}};
    static const std::map<std::string, DType> plain = {
        {"f32", DType::F32}, {"f16", DType::F16}, {"bf16", DType::BF16}};
    std::string lower;
    for (char c : s)
        lower += char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    // The K types are written as llama.cpp's _M mixes; their names are accepted too.
    if (lower == "q3_k_m" || lower == "q4_k_m" || lower == "q5_k_m")
        lower.resize(4);
    if (auto it = quantized.find(lower); it != quantized.end())
        return it->second;
    if (allow_plain)
        if (auto it = plain.find(lower); it != plain.end())
            return it->second;
    return std::nullopt;
}

// "\r<what> 42%" on a terminal; nothing when stderr is a file or a pipe (tests, scripts).
ToolProgress terminal_progress(const char *what)
{
    if (!isatty(STDERR_FILENO))
        return {};
    return [what, last = -1](double f) mutable {
        const int pct = int(f * 100.0);
        if (pct == last)
            return;
        last = pct;
        std::fprintf(stderr, "\r%s %3d%%%s", what, pct, pct >= 100 ? "\n" : "");
        std::fflush(stderr);
    };
}

// One line describing a written file, read back through the engine's GGUF reader.
std::string describe(const std::string &path)
{
    const auto g = GgufFile::open(path);
    std::map<std::string, int> types;
    for (const GgufTensorInfo &t : g->tensors())
        types[std::string(dtype_name(t.type))]++;
    std::ostringstream o;
    o << path << ": " << g->tensors().size() << " tensors (";
    bool first = true;
    for (const auto &[name, count] : types) {
        o << (first ? "" : ", ") << name << ": " << count;
        first = false;
    }
    o << "), " << g->file_size() << " bytes (" << double(g->file_size()) / 1048576.0 << " MiB)";
    return o.str();
}

// ---- sentencepiece .model vocabulary ---------------------------------------------------------
//
// A ModelProto read field by field in the protobuf wire format, as the engine's tokenizer
// reads its one field (engine/src/tokenizer/sp_model_proto.h: no generated protobuf code).
// Fields (sentencepiece_model.proto): ModelProto.pieces = 1 (SentencePiece: piece = 1 string,
// score = 2 float, type = 3 enum, default NORMAL = 1), trainer_spec = 2 (unk_id = 40 default 0,
// bos_id = 41 default 1, eos_id = 42 default 2, pad_id = 43 default -1), normalizer_spec = 3
// (add_dummy_prefix = 3, default true).

class WireReader {
public:
    explicit WireReader(std::string_view data) : m_data(data) {}

    struct Field {
        uint32_t number = 0;
        uint32_t wire = 0;
        uint64_t varint = 0;   // wire type 0
        uint32_t fixed32 = 0;  // wire type 5
        std::string_view bytes; // wire type 2
    };

    // False at the end; throws FormatError on malformed input.
    bool next(Field &f)
    {
        if (m_pos >= m_data.size())
            return false;
        const uint64_t key = varint();
        f.number = uint32_t(key >> 3);
        f.wire = uint32_t(key & 7);
        switch (f.wire) {
        case 0: f.varint = varint(); break;
        case 1: skip(8); break;
        case 2: {
            const uint64_t len = varint();
            if (len > m_data.size() - m_pos)
                bad();
            f.bytes = m_data.substr(m_pos, size_t(len));
            m_pos += size_t(len);
            break;
        }
        case 5: {
            need(4);
            std::memcpy(&f.fixed32, m_data.data() + m_pos, 4);
            m_pos += 4;
            break;
        }
        default: bad();
        }
        return true;
    }

private:
    [[noreturn]] static void bad() { throw FormatError("malformed protobuf"); }
    void need(size_t n) const
    {
        if (n > m_data.size() - m_pos)
            bad();
    }
    void skip(size_t n)
    {
        need(n);
        m_pos += n;
    }
    uint64_t varint()
    {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            need(1);
            const auto b = uint8_t(m_data[m_pos++]);
            v |= uint64_t(b & 0x7f) << shift;
            if (!(b & 0x80))
                return v;
        }
        bad();
    }

    std::string_view m_data;
    size_t m_pos = 0;
};

std::shared_ptr<GgufArray> make_array(GgufValueType t)
{
    auto a = std::make_shared<GgufArray>();
    a->elem_type = t;
    return a;
}

std::vector<std::pair<std::string, GgufValue>> sentencepiece_vocab(const std::string &path)
{
    // The engine's loader (libsentencepiece) first: a file it rejects is not a tokenizer.
    Tokenizer::from_sentencepiece_file(path);
    const std::string bytes = read_regular_file(path, 256ull << 20, "tokenizer model");

    auto tokens = make_array(GgufValueType::String);
    auto scores = make_array(GgufValueType::Float32);
    auto types = make_array(GgufValueType::Int32);
    int64_t unk = 0, bos = 1, eos = 2, pad = -1;
    bool add_dummy_prefix = true;
    try {
        WireReader model(bytes);
        WireReader::Field f;
        while (model.next(f)) {
            if (f.number == 1 && f.wire == 2) {
                std::string piece;
                float score = 0;
                int64_t type = 1;
                WireReader p(f.bytes);
                WireReader::Field pf;
                while (p.next(pf)) {
                    if (pf.number == 1 && pf.wire == 2)
                        piece.assign(pf.bytes);
                    else if (pf.number == 2 && pf.wire == 5)
                        score = std::bit_cast<float>(pf.fixed32);
                    else if (pf.number == 3 && pf.wire == 0)
                        type = int64_t(pf.varint);
                }
                tokens->items.push_back(GgufValue{GgufValueType::String, std::move(piece)});
                scores->items.push_back(GgufValue{GgufValueType::Float32, double(score)});
                types->items.push_back(GgufValue{GgufValueType::Int32, type});
            } else if (f.number == 2 && f.wire == 2) {
                WireReader t(f.bytes);
                WireReader::Field tf;
                // int32 fields: negative values arrive as 64-bit two's complement.
                while (t.next(tf)) {
                    if (tf.wire != 0)
                        continue;
                    const auto v = int64_t(int32_t(uint32_t(tf.varint)));
                    if (tf.number == 40) unk = v;
                    else if (tf.number == 41) bos = v;
                    else if (tf.number == 42) eos = v;
                    else if (tf.number == 43) pad = v;
                }
            } else if (f.number == 3 && f.wire == 2) {
                WireReader n(f.bytes);
                WireReader::Field nf;
                while (n.next(nf))
                    if (nf.number == 3 && nf.wire == 0)
                        add_dummy_prefix = nf.varint != 0;
            }
        }
    } catch (const FormatError &) {
        throw FormatError(path + ": not a valid sentencepiece model (malformed protobuf)");
    }
    const auto n = int64_t(tokens->items.size());
    if (n == 0)
        throw FormatError(path + ": the sentencepiece model has no pieces");

    std::vector<std::pair<std::string, GgufValue>> kv = {
        {"tokenizer.ggml.model", GgufValue{GgufValueType::String, std::string("llama")}},
        {"tokenizer.ggml.tokens", GgufValue{GgufValueType::Array, tokens}},
        {"tokenizer.ggml.scores", GgufValue{GgufValueType::Array, scores}},
        {"tokenizer.ggml.token_type", GgufValue{GgufValueType::Array, types}},
    };
    auto id = [&](const char *key, int64_t v) {
        if (v >= 0 && v < n)
            kv.emplace_back(key, GgufValue{GgufValueType::Uint32, uint64_t(v)});
    };
    id("tokenizer.ggml.bos_token_id", bos);
    id("tokenizer.ggml.eos_token_id", eos);
    id("tokenizer.ggml.unknown_token_id", unk);
    id("tokenizer.ggml.padding_token_id", pad);
    kv.emplace_back("tokenizer.ggml.add_bos_token", GgufValue{GgufValueType::Bool, true});
    kv.emplace_back("tokenizer.ggml.add_eos_token", GgufValue{GgufValueType::Bool, false});
    kv.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue{GgufValueType::Bool, add_dummy_prefix});
    return kv;
}

// Every tokenizer.* key of a GGUF (a vocabulary-only GGUF or any model).
std::vector<std::pair<std::string, GgufValue>> gguf_vocab(const std::string &path)
{
    const auto g = GgufFile::open(path);
    std::vector<std::pair<std::string, GgufValue>> kv;
    for (const std::string &key : g->metadata_order())
        if (key.rfind("tokenizer.", 0) == 0)
            kv.emplace_back(key, *g->find(key));
    if (!g->find("tokenizer.ggml.tokens"))
        throw FormatError(path + ": no tokenizer.ggml.tokens (not a vocabulary GGUF)");
    // The engine's tokenizer must accept it: load it the way a model load would.
    Tokenizer::from_gguf(*g);
    return kv;
}

bool is_gguf_file(const std::string &path)
{
    std::FILE *f = std::fopen(path.c_str(), "rb");
    if (!f)
        throw IoError(path + ": cannot open (" + std::strerror(errno) + ")");
    char magic[4] = {};
    const size_t n = std::fread(magic, 1, 4, f);
    std::fclose(f);
    return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

// ---- shapes -----------------------------------------------------------------------------------

struct NamedShape {
    const char *name;
    int dim, layers, heads, kv_heads, ffn, vocab, ctx;
    ArchFamily family = ArchFamily::Llama;
    int head_dim = 0;
    bool tied = false;
    float rope_base = 10000.0f;
    float rms_eps = 1e-5f;
    int sliding_window = 0;
    float rope_base_swa = 0.0f;
    float llama3_factor = 0.0f; // llama3 RoPE scaling (low 1, high 4) from an original context of 8192
};

// Published configurations: TinyLlama-1.1B (its config.json), Llama 2 7B (Meta's params.json:
// FFN 11008 from the 4*dim*2/3 rounding to 256), stories260K (llama2.c's tinyllamas), and the
// config.json files of Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B, gemma-3-1b-pt and
// Phi-3-mini-4k-instruct.
const NamedShape named_shapes[] = {
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048},
    {"llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096},
    {"stories260k", 64, 5, 8, 4, 172, 512, 512},
    {.name = "llama3.2-1b", .dim = 2048, .layers = 16, .heads = 32, .kv_heads = 8, .ffn = 8192, .vocab = 128256,
     .ctx = 131072, .head_dim = 64, .tied = true, .rope_base = 500000.0f, .llama3_factor = 32.0f},
    {.name = "qwen2.5-0.5b", .dim = 896, .layers = 24, .heads = 14, .kv_heads = 2, .ffn = 4864, .vocab = 151936,
     .ctx = 32768, .family = ArchFamily::Qwen2, .tied = true, .rope_base = 1000000.0f, .rms_eps = 1e-6f},
    {.name = "qwen3-0.6b", .dim = 1024, .layers = 28, .heads = 16, .kv_heads = 8, .ffn = 3072, .vocab = 151936,
     .ctx = 40960, .family = ArchFamily::Qwen3, .head_dim = 128, .tied = true, .rope_base = 1000000.0f,
     .rms_eps = 1e-6f},
    {.name = "gemma3-1b", .dim = 1152, .layers = 26, .heads = 4, .kv_heads = 1, .ffn = 6912, .vocab = 262144,
     .ctx = 32768, .family = ArchFamily::Gemma3, .head_dim = 256, .tied = true, .rope_base = 1000000.0f,
     .rms_eps = 1e-6f, .sliding_window = 512, .rope_base_swa = 10000.0f},
    {.name = "phi3-mini", .dim = 3072, .layers = 32, .heads = 32, .kv_heads = 32, .ffn = 8192, .vocab = 32064,
     .ctx = 4096, .family = ArchFamily::Phi3, .sliding_window = 2047},
};

std::string shape_names()
{
    std::string names;
    for (const NamedShape &n : named_shapes)
        names += std::string(n.name) + ", ";
    return names;
}

int parse_dim(const std::string &s, const char *what, const std::string &shape)
{
    char *end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno == ERANGE || v <= 0 || v > (1 << 24))
        throw UsageError("--shape '" + shape + "': " + what + " must be a positive integer, got '" + s + "'");
    return int(v);
}

void apply_shape(const std::string &shape, RandomModelSpec &spec)
{
    for (const NamedShape &n : named_shapes)
        if (shape == n.name) {
            spec.name = std::string(n.name) + "-random";
            spec.n_embd = n.dim;
            spec.n_layer = n.layers;
            spec.n_head = n.heads;
            spec.n_head_kv = n.kv_heads;
            spec.n_ff = n.ffn;
            spec.n_vocab = n.vocab;
            spec.n_ctx = n.ctx;
            spec.family = n.family;
            spec.head_dim = n.head_dim;
            spec.tied_embeddings = n.tied;
            spec.rope_base = n.rope_base;
            spec.rms_eps = n.rms_eps;
            spec.sliding_window = n.sliding_window;
            spec.rope_base_swa = n.rope_base_swa;
            if (n.llama3_factor > 0) {
                spec.rope.type = RopeScalingType::Llama3;
                spec.rope.factor = n.llama3_factor;
                spec.rope.orig_ctx = 8192;
            }
            return;
        }
    std::vector<std::string> parts;
    std::stringstream ss(shape);
    for (std::string p; std::getline(ss, p, ':');)
        parts.push_back(p);
    if (parts.size() != 6 || shape.back() == ':')
        throw UsageError("--shape must be " + shape_names() + "or DIM:LAYERS:HEADS:KV_HEADS:FFN:VOCAB, got '" +
                         shape + "'");
    spec.name = "random-" + shape;
    spec.n_embd = parse_dim(parts[0], "DIM", shape);
    spec.n_layer = parse_dim(parts[1], "LAYERS", shape);
    spec.n_head = parse_dim(parts[2], "HEADS", shape);
    spec.n_head_kv = parse_dim(parts[3], "KV_HEADS", shape);
    spec.n_ff = parse_dim(parts[4], "FFN", shape);
    spec.n_vocab = parse_dim(parts[5], "VOCAB", shape);
    spec.n_ctx = 2048;
}

} // namespace

int cmd_quantize(const std::vector<std::string> &argv, const char *)
{
    Args a(argv, {{{"--type"}}});
    if (a.positional().size() != 2)
        throw UsageError("give the input and the output file: quantize IN OUT --type TYPE");
    const auto type_name = a.value("--type");
    if (!type_name)
        throw UsageError(std::string("give --type ") + quantized_type_names);
    const auto type = parse_type(*type_name, false);
    if (!type)
        throw UsageError(std::string("--type must be ") + quantized_type_names + ", got '" + *type_name + "'");
    const std::string &in = a.positional()[0], &out = a.positional()[1];
    std::error_code ec;
    if (std::filesystem::is_directory(in, ec))
        throw FormatError(in + ": is a directory; quantize reads a GGUF model file (a Hugging Face directory is not "
                               "converted to GGUF)");
    quantize_model_file(in, out, *type, terminal_progress("quantizing"));
    std::printf("%s\n", describe(out).c_str());
    return 0;
}

int cmd_make_model(const std::vector<std::string> &argv, const char *)
{
    Args a(argv, {{{"--shape"}}, {{"--type"}}, {{"--vocab"}}, {{"--seed"}}, {{"--ctx"}}, {{"--name"}},
                  {{"-o", "--output"}}});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    const auto shape = a.value("--shape");
    if (!shape)
        throw UsageError("give --shape (" + shape_names() + "or DIM:LAYERS:HEADS:KV_HEADS:FFN:VOCAB)");
    const auto out = a.value("--output");
    if (!out || out->empty())
        throw UsageError("give the output file with -o FILE");
    RandomModelSpec spec;
    apply_shape(*shape, spec);
    if (auto t = a.value("--type")) {
        const auto type = parse_type(*t, true);
        if (!type)
            throw UsageError(std::string("--type must be f32, f16, bf16, ") + quantized_type_names + ", got '" + *t + "'");
        spec.type = *type;
    }
    if (auto ctx = a.get_int("--ctx", 1, 1 << 24))
        spec.n_ctx = *ctx;
    if (auto seed = a.get_u64("--seed"))
        spec.seed = *seed;
    if (auto name = a.value("--name"))
        spec.name = *name;
    if (auto vocab = a.value("--vocab"))
        spec.tokenizer = is_gguf_file(*vocab) ? gguf_vocab(*vocab) : sentencepiece_vocab(*vocab);
    write_random_model_file(*out, spec, terminal_progress("writing"));
    std::printf("%s\n", describe(*out).c_str());
    return 0;
}

} // namespace longscope::cli
