// Model quantizer and random-model writer (longscope/quantize.h). Both stream through
// GgufStreamWriter: a tensor is produced in chunks of rows, each chunk converted by all
// threads (rows split between them) and written before the next is made, so memory stays at
// one chunk (about 32 MiB of output) whatever the model size. In the runtime layer: the
// conversion runs on the CPU backend's quantizers, dequantizers and thread pool.
#include "longscope/quantize.h"

#include "runtime/rope_base.h"

#include "cpu/quant.h"
#include "cpu/thread_pool.h"
#include "longscope/errors.h"
#include "longscope/hparams.h"
#include "model/gguf_writer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <thread>

namespace longscope {

namespace {

constexpr size_t chunk_target_bytes = 32u << 20;

bool is_plain(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

bool is_tool_type(DType t) { return is_plain(t) || is_quantized(t); }

const std::string tool_type_names = "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";

bool ends_with(const std::string &s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// N of a "blk.N." tensor name, or -1.
int layer_of(const std::string &name)
{
    if (name.rfind("blk.", 0) != 0)
        return -1;
    int n = 0;
    size_t i = 4;
    if (i >= name.size() || name[i] < '0' || name[i] > '9')
        return -1;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
        n = n * 10 + (name[i] - '0');
        if (n > 1000000)
            return -1;
    }
    return i < name.size() && name[i] == '.' ? n : -1;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer
// in between, are the ones whose attn_v / ffn_down matter most.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

std::unique_ptr<ThreadPool> make_pool()
{
    const unsigned hw = std::thread::hardware_concurrency();
    return std::make_unique<ThreadPool>(int(std::clamp(hw, 1u, 64u)));
}

// Writes one tensor of n_rows rows of row_len elements as `out_type`, row r produced in f32
// by make_row(r, dst). `progress_rows(k)` is told after each chunk how many rows are done.
void stream_rows(ThreadPool &pool, GgufStreamWriter &w, int64_t n_rows, int64_t row_len, DType out_type,
                 const std::function<void(int64_t, float *)> &make_row,
                 const std::function<void(int64_t)> &progress_rows)
{
    const size_t out_row = row_bytes(out_type, row_len);
    const int64_t chunk_rows = std::max<int64_t>(1, int64_t(chunk_target_bytes / std::max<size_t>(out_row, 1)));
    std::vector<uint8_t> out(size_t(std::min(chunk_rows, n_rows)) * out_row);
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
        const int64_t rows = std::min(chunk_rows, n_rows - r0);
        pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
            std::vector<float> row(static_cast<size_t>(row_len));
            for (int64_t r = begin; r < end; ++r) {
                make_row(r0 + r, row.data());
                quantize_row(out_type, row.data(), out.data() + size_t(r) * out_row, row_len);
            }
        });
        w.write_data(out.data(), size_t(rows) * out_row);
        if (progress_rows)
            progress_rows(r0 + rows);
    }
}

GgufValue u32_value(uint32_t v) { return GgufValue{GgufValueType::Uint32, uint64_t(v)}; }

// ---- random weights ---------------------------------------------------------------------------

// splitmix64: a tiny generator with a 64-bit state that passes BigCrush; each row gets its own
// stream, seeded from (seed, tensor, row), so the weights do not depend on the thread split.
struct SplitMix64 {
    uint64_t state;
    uint64_t next()
    {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // Uniform in (0, 1]: never 0, so the logarithm below is finite.
    double uniform() { return double((next() >> 11) + 1) * 0x1.0p-53; }
};

void normal_row(uint64_t seed, uint64_t tensor, int64_t row, float stddev, float *out, int64_t n)
{
    SplitMix64 mix{seed ^ (tensor * 0xd1342543de82ef95ull)};
    SplitMix64 rng{mix.next() ^ (uint64_t(row) * 0x9e3779b97f4a7c15ull)};
    rng.next();
    // Box-Muller: two independent normals from two uniforms.
    for (int64_t i = 0; i < n; i += 2) {
        const double r = std::sqrt(-2.0 * std::log(rng.uniform()));
        const double t = 2.0 * std::numbers::pi * rng.uniform();
        out[i] = float(r * std::cos(t) * stddev);
        if (i + 1 < n)
            out[i + 1] = float(r * std::sin(t) * stddev);
    }
}

std::shared_ptr<GgufArray> make_array(GgufValueType t)
{
    auto a = std::make_shared<GgufArray>();
    a->elem_type = t;
    return a;
}

// <unk>, <s>, </s>, the 256 byte pieces <0x00>..<0xFF> (sentencepiece byte fallback: any text
// encodes), the space piece "\u2581", then unused pieces up to n_vocab. Without a piece for
// "\u2581" the escaped spaces would become byte tokens and decode as "\u2581", not as spaces.
std::vector<std::pair<std::string, GgufValue>> byte_level_vocab(int n_vocab)
{
    constexpr int n_fixed = 3 + 256 + 1;
    if (n_vocab < n_fixed)
        throw ConfigError("a vocabulary of " + std::to_string(n_vocab) + " is smaller than the " +
                          std::to_string(n_fixed) + " tokens of the byte-level vocabulary (give a tokenizer)");
    auto tokens = make_array(GgufValueType::String);
    auto scores = make_array(GgufValueType::Float32);
    auto types = make_array(GgufValueType::Int32);
    auto add = [&](std::string piece, int32_t type) {
        tokens->items.push_back(GgufValue{GgufValueType::String, std::move(piece)});
        scores->items.push_back(GgufValue{GgufValueType::Float32, 0.0});
        types->items.push_back(GgufValue{GgufValueType::Int32, int64_t(type)});
    };
    // token_type values are sentencepiece's: 2 unknown, 3 control, 5 unused, 6 byte.
    add("<unk>", 2);
    add("<s>", 3);
    add("</s>", 3);
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b)
        add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 6);
    add("\xE2\x96\x81", 1); // "\u2581", a normal piece
    for (int i = n_fixed; i < n_vocab; ++i)
        add("<unused" + std::to_string(i - n_fixed) + ">", 5);
    return {
        {"tokenizer.ggml.model", GgufValue{GgufValueType::String, std::string("llama")}},
        {"tokenizer.ggml.tokens", GgufValue{GgufValueType::Array, tokens}},
        {"tokenizer.ggml.scores", GgufValue{GgufValueType::Array, scores}},
        {"tokenizer.ggml.token_type", GgufValue{GgufValueType::Array, types}},
        {"tokenizer.ggml.bos_token_id", u32_value(1)},
        {"tokenizer.ggml.eos_token_id", u32_value(2)},
        {"tokenizer.ggml.unknown_token_id", u32_value(0)},
        {"tokenizer.ggml.add_bos_token", GgufValue{GgufValueType::Bool, true}},
        {"tokenizer.ggml.add_eos_token", GgufValue{GgufValueType::Bool, false}},
    };
}

} // namespace

uint32_t llama_file_type(DType type)
{
    switch (type) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q2_K: return 10;   // LLAMA_FTYPE_MOSTLY_Q2_K
    case DType::Q3_K: return 12;   // LLAMA_FTYPE_MOSTLY_Q3_K_M
    case DType::Q4_K: return 15;   // LLAMA_FTYPE_MOSTLY_Q4_K_M
    case DType::Q5_K: return 17;   // LLAMA_FTYPE_MOSTLY_Q5_K_M
    case DType::Q6_K: return 18;
    case DType::IQ4_NL: return 25;
    case DType::IQ4_XS: return 30;
    case DType::BF16: return 32;
    default: throw InvalidArgument("no llama.cpp file type for " + std::string(dtype_name(type)));
    }
}

namespace {

bool is_k_mix(DType t) { return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K; }

// llama.cpp's choice, in the mixes of the K types, of a weight's type by its role (dense models,
// no importance matrix): the output (or the token embedding tied to it) in Q6_K, Q8_0 where
// its rows do not divide into 256; attn_v, ffn_down, attn_output and a fused attn_qkv with more
// bits in some layers; everything else `type`.
//   Q2_K:   attn_v Q3_K (Q4_K with 4 or more query heads per KV head), ffn_down and attn_output Q3_K
//   Q3_K_M: attn_v Q5_K in layers 0-1 then Q4_K; ffn_down Q5_K in the first sixteenth of the
//           layers then Q4_K; attn_output and attn_qkv Q4_K
//   Q4_K_M: attn_v and ffn_down Q6_K where use_more_bits; attn_qkv Q5_K
//   Q5_K_M: attn_v and ffn_down Q6_K where use_more_bits; attn_qkv Q6_K
DType k_mix_type(const std::string &name, int64_t row_len, DType type, int n_layer, bool has_output, int n_gqa)
{
    if (name == "output.weight" || (!has_output && name == "token_embd.weight"))
        return row_len % 256 != 0 ? DType::Q8_0 : DType::Q6_K;
    const int layer = layer_of(name);
    if (layer < 0)
        return type;
    const bool more = use_more_bits(layer, n_layer);
    if (ends_with(name, ".attn_v.weight")) {
        switch (type) {
        case DType::Q2_K: return n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
        case DType::Q3_K: return layer < 2 ? DType::Q5_K : DType::Q4_K;
        default: return more ? DType::Q6_K : type;
        }
    }
    if (ends_with(name, ".ffn_down.weight")) {
        switch (type) {
        case DType::Q2_K: return DType::Q3_K;
        case DType::Q3_K: return layer < n_layer / 16 ? DType::Q5_K : DType::Q4_K;
        default: return more ? DType::Q6_K : type;
        }
    }
    if (ends_with(name, ".attn_output.weight"))
        return type == DType::Q2_K ? DType::Q3_K : type == DType::Q3_K ? DType::Q4_K : type;
    if (ends_with(name, ".attn_qkv.weight"))
        return type == DType::Q3_K ? DType::Q4_K : type == DType::Q4_K ? DType::Q5_K : type == DType::Q5_K ? DType::Q6_K : type;
    return type;
}

// llama.cpp's fallback for rows that do not divide into 256-value blocks: the 32-value type
// of about the same size; `keep` when even that does not divide.
DType fit_row(DType want, int64_t row_len, DType keep)
{
    if (row_len % block_elems(want) == 0)
        return want;
    switch (want) {
    case DType::Q2_K:
    case DType::Q3_K: want = DType::Q4_0; break;
    case DType::Q4_K: want = DType::Q5_0; break;
    case DType::Q5_K: want = DType::Q5_1; break;
    case DType::Q6_K: want = DType::Q8_0; break;
    case DType::IQ4_XS: want = DType::IQ4_NL; break;
    default: return keep;
    }
    return row_len % block_elems(want) == 0 ? want : keep;
}

} // namespace

DType weight_type_for(const std::string &name, const std::vector<int64_t> &shape, DType type,
                      DType keep, int n_layer, bool has_output, int n_gqa)
{
    size_t dims = shape.size();
    while (dims > 1 && shape[dims - 1] == 1)
        --dims; // [n, 1] is a vector
    if (dims < 2 || !ends_with(name, "weight"))
        return keep;
    const DType want = is_k_mix(type) ? k_mix_type(name, shape[0], type, n_layer, has_output, n_gqa) : type;
    return is_plain(want) ? want : fit_row(want, shape[0], keep);
}

void quantize_model_file(const std::string &in_gguf, const std::string &out_gguf, DType type,
                         ToolProgress progress)
{
    if (!is_tool_type(type))
        throw InvalidArgument("cannot quantize to " + std::string(dtype_name(type)) + " (supported: " +
                              tool_type_names + ", F32, F16, BF16)");
    const std::unique_ptr<GgufFile> in = GgufFile::open(in_gguf);

    int n_layer = 0;
    for (const GgufTensorInfo &t : in->tensors())
        n_layer = std::max(n_layer, layer_of(t.name) + 1);
    const bool has_output = in->find_tensor("output.weight") != nullptr;
    // Query heads per KV head (Q2_K's attn_v rule), from the architecture's head counts.
    int n_gqa = 1;
    if (const auto arch = in->get_string("general.architecture")) {
        const auto heads = in->get_int(*arch + ".attention.head_count");
        const auto kv = in->get_int(*arch + ".attention.head_count_kv");
        if (heads && kv && *kv > 0 && *heads > 0)
            n_gqa = int(std::min<int64_t>(*heads / *kv, 1 << 20));
    }

    GgufStreamWriter w(out_gguf, 32);
    for (const std::string &key : in->metadata_order())
        w.set(key, *in->find(key));
    if (in->find("general.alignment"))
        w.set("general.alignment", u32_value(32));
    w.set("general.file_type", u32_value(llama_file_type(type)));
    if (is_quantized(type))
        w.set("general.quantization_version", u32_value(2));

    std::vector<DType> out_types;
    uint64_t total_bytes = 0;
    for (const GgufTensorInfo &t : in->tensors()) {
        DType ot = weight_type_for(t.name, t.shape, type, t.type, n_layer, has_output, n_gqa);
        if (ot != t.type && !is_plain(t.type))
            throw FormatError(in_gguf + ": tensor " + t.name + " is already " +
                              std::string(dtype_name(t.type)) +
                              "; quantize from a file with F32, F16 or BF16 weights");
        out_types.push_back(ot);
        w.add_tensor(t.name, t.shape, ot);
        total_bytes += t.nbytes;
    }
    w.write_header();

    auto pool = make_pool();
    uint64_t done_bytes = 0;
    const auto &tensors = in->tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
        const GgufTensorInfo &t = tensors[i];
        const DType ot = out_types[i];
        if (ot == t.type) { // kept: copied as it is
            for (uint64_t off = 0; off < t.nbytes; off += chunk_target_bytes) {
                const size_t n = size_t(std::min<uint64_t>(chunk_target_bytes, t.nbytes - off));
                w.write_data(t.data + off, n);
                if (progress)
                    progress(total_bytes ? double(done_bytes + off + n) / double(total_bytes) : 1.0);
            }
        } else {
            const int64_t row_len = t.shape[0];
            const int64_t n_rows = t.n_elements() / row_len;
            const size_t in_row = row_bytes(t.type, row_len);
            stream_rows(*pool, w, n_rows, row_len, ot,
                        [&](int64_t r, float *dst) {
                            dequantize_row(t.type, t.data + size_t(r) * in_row, dst, row_len);
                        },
                        [&](int64_t rows_done) {
                            if (progress)
                                progress(double(done_bytes + uint64_t(rows_done) * in_row) /
                                         double(total_bytes));
                        });
        }
        done_bytes += t.nbytes;
    }
    w.finish();
    if (progress)
        progress(1.0);
}

void write_random_model_file(const std::string &out_gguf, const RandomModelSpec &spec,
                             ToolProgress progress)
{
    if (!is_tool_type(spec.type))
        throw InvalidArgument("cannot write weights of type " + std::string(dtype_name(spec.type)) +
                              " (supported: F32, F16, BF16, " + tool_type_names + ")");
    HParams hp;
    hp.family = spec.family;
    hp.n_vocab = spec.n_vocab;
    hp.n_embd = spec.n_embd;
    hp.n_layer = spec.n_layer;
    hp.n_head = spec.n_head;
    hp.n_head_kv = spec.n_head_kv;
    hp.n_ff = spec.n_ff;
    hp.n_ctx_train = spec.n_ctx;
    hp.n_head_dim = spec.head_dim;
    hp.n_rot = hp.head_dim();
    hp.rms_eps = spec.rms_eps;
    hp.rope_base = spec.rope_base;
    hp.rope = spec.rope;
    hp.validate("model shape");
    const bool gemma = spec.family == ArchFamily::Gemma2 || spec.family == ArchFamily::Gemma3;
    const bool phi3 = spec.family == ArchFamily::Phi3;

    std::vector<std::pair<std::string, GgufValue>> vocab =
        spec.tokenizer.empty() ? byte_level_vocab(spec.n_vocab) : spec.tokenizer;
    for (const auto &[key, value] : vocab)
        if (key == "tokenizer.ggml.tokens" && value.as_array() &&
            value.as_array()->items.size() > size_t(spec.n_vocab))
            throw ConfigError("the tokenizer has " + std::to_string(value.as_array()->items.size()) +
                              " tokens but the model's vocabulary only " + std::to_string(spec.n_vocab));

    GgufStreamWriter w(out_gguf, 32);
    const std::string arch(to_string(spec.family));
    const std::string a = arch + ".";
    w.set_string("general.architecture", arch);
    w.set_string("general.name", spec.name);
    w.set_u32("general.file_type", llama_file_type(spec.type));
    if (is_quantized(spec.type))
        w.set_u32("general.quantization_version", 2);
    w.set_u32(a + "context_length", uint32_t(spec.n_ctx));
    w.set_u32(a + "embedding_length", uint32_t(spec.n_embd));
    w.set_u32(a + "block_count", uint32_t(spec.n_layer));
    w.set_u32(a + "feed_forward_length", uint32_t(spec.n_ff));
    w.set_u32(a + "rope.dimension_count", uint32_t(hp.n_rot));
    w.set_u32(a + "attention.head_count", uint32_t(spec.n_head));
    w.set_u32(a + "attention.head_count_kv", uint32_t(spec.n_head_kv));
    if (spec.head_dim > 0) {
        w.set_u32(a + "attention.key_length", uint32_t(spec.head_dim));
        w.set_u32(a + "attention.value_length", uint32_t(spec.head_dim));
    }
    w.set_f32(a + "attention.layer_norm_rms_epsilon", spec.rms_eps);
    w.set_f32(a + "rope.freq_base", spec.rope_base);
    if (spec.rope_base_swa > 0)
        w.set_f32(a + "rope.freq_base_swa", spec.rope_base_swa);
    if (spec.sliding_window > 0)
        w.set_u32(a + "attention.sliding_window", uint32_t(spec.sliding_window));
    if (spec.rope.type == RopeScalingType::Linear || spec.rope.type == RopeScalingType::Yarn) {
        w.set_string(a + "rope.scaling.type", std::string(to_string(spec.rope.type)));
        w.set_f32(a + "rope.scaling.factor", spec.rope.factor);
        if (spec.rope.orig_ctx > 0)
            w.set_u32(a + "rope.scaling.original_context_length", uint32_t(spec.rope.orig_ctx));
    }
    w.set_u32(a + "vocab_size", uint32_t(spec.n_vocab));
    for (const auto &[key, value] : vocab)
        w.set(key, value);

    struct Planned {
        std::string name;
        std::vector<int64_t> shape;
        DType type;
        bool norm;
        std::vector<float> values; // written as given when not empty
    };
    std::vector<Planned> plan;
    const int64_t e = spec.n_embd, eq = hp.n_embd_q(), ekv = hp.n_embd_kv(), f = spec.n_ff, v = spec.n_vocab,
                  hd = hp.head_dim();
    auto weight = [&](std::string name, std::vector<int64_t> shape) {
        const DType t = weight_type_for(name, shape, spec.type, DType::F16, spec.n_layer, !spec.tied_embeddings,
                                        spec.n_head / std::max(1, spec.n_head_kv));
        plan.push_back({std::move(name), std::move(shape), t, false, {}});
    };
    auto norm = [&](std::string name, int64_t n) { plan.push_back({std::move(name), {n}, DType::F32, true, {}}); };
    auto bias = [&](std::string name, int64_t n) { plan.push_back({std::move(name), {n}, DType::F32, false, {}}); };
    weight("token_embd.weight", {e, v});
    if (spec.rope.type == RopeScalingType::Llama3)
        plan.push_back({"rope_freqs.weight", {hd / 2}, DType::F32, false, llama3_rope_factors(hp, spec.rope)});
    for (int l = 0; l < spec.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        norm(p + "attn_norm.weight", e);
        if (phi3) {
            weight(p + "attn_qkv.weight", {e, eq + 2 * ekv});
        } else {
            weight(p + "attn_q.weight", {e, eq});
            weight(p + "attn_k.weight", {e, ekv});
            weight(p + "attn_v.weight", {e, ekv});
        }
        if (spec.family == ArchFamily::Qwen2) {
            bias(p + "attn_q.bias", eq);
            bias(p + "attn_k.bias", ekv);
            bias(p + "attn_v.bias", ekv);
        }
        if (spec.family == ArchFamily::Qwen3 || spec.family == ArchFamily::Gemma3) {
            norm(p + "attn_q_norm.weight", hd);
            norm(p + "attn_k_norm.weight", hd);
        }
        weight(p + "attn_output.weight", {eq, e});
        if (gemma)
            norm(p + "post_attention_norm.weight", e);
        norm(p + "ffn_norm.weight", e);
        if (phi3) {
            weight(p + "ffn_up.weight", {e, 2 * f});
        } else {
            weight(p + "ffn_gate.weight", {e, f});
            weight(p + "ffn_up.weight", {e, f});
        }
        weight(p + "ffn_down.weight", {f, e});
        if (gemma)
            norm(p + "post_ffw_norm.weight", e);
    }
    norm("output_norm.weight", e);
    if (!spec.tied_embeddings)
        weight("output.weight", {e, v});

    uint64_t total = 0;
    for (const Planned &p : plan) {
        w.add_tensor(p.name, p.shape, p.type);
        total += uint64_t(p.shape[0]) * uint64_t(p.shape.size() > 1 ? p.shape[1] : 1);
    }
    w.write_header();

    auto pool = make_pool();
    uint64_t done = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
        const Planned &p = plan[i];
        const int64_t row_len = p.shape[0];
        const int64_t n_rows = p.shape.size() > 1 ? p.shape[1] : 1;
        stream_rows(*pool, w, n_rows, row_len, p.type,
                    [&](int64_t r, float *dst) {
                        if (!p.values.empty())
                            std::copy(p.values.begin(), p.values.end(), dst);
                        else if (p.norm)
                            std::fill(dst, dst + row_len, 1.0f);
                        else
                            normal_row(spec.seed, i, r, spec.stddev, dst, row_len);
                    },
                    [&](int64_t rows_done) {
                        if (progress)
                            progress(double(done + uint64_t(rows_done) * uint64_t(row_len)) / double(total));
                    });
        done += uint64_t(row_len) * uint64_t(n_rows);
    }
    w.finish();
    if (progress)
        progress(1.0);
}

} // namespace longscope
