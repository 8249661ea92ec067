// GGUF (architecture "llama") to Model: hyperparameters from llama.* keys, weights as views
// into the mapped file, tokenizer from the embedded vocabulary.
#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "model/arch_tensors.h"
#include "model/loader.h"

#include <algorithm>
#include <cstring>

#include <cmath>
#include <filesystem>
#include <limits>

namespace longscope {

namespace {

int to_int(const GgufFile &g, const std::string &key, std::optional<int64_t> v, bool required,
           int fallback)
{
    if (!v) {
        if (required)
            throw FormatError(g.path() + ": missing metadata key " + key);
        return fallback;
    }
    if (*v < 0 || *v > std::numeric_limits<int>::max())
        throw ConfigError(g.path() + ": metadata key " + key + " has invalid value " +
                          std::to_string(*v));
    return int(*v);
}

// A float vector tensor ([n] F32) as values, or empty when absent.
std::vector<float> float_vector(TensorLookup &t, const std::string &name, const std::string &path)
{
    const WeightView w = t.take(name);
    if (!w.data)
        return {};
    if (w.type != DType::F32 || w.n_elements() <= 0 || w.nbytes != uint64_t(w.n_elements()) * 4)
        throw FormatError(path + ": tensor " + name + " must be an F32 vector");
    std::vector<float> v(size_t(w.n_elements()));
    std::memcpy(v.data(), w.data, v.size() * 4);
    return v;
}

// RoPE scaling from the rope.scaling.* keys and the rope_freqs / rope_factors_* tensors.
void read_rope_scaling(const GgufFile &g, const std::string &a, TensorLookup &t, HParams &hp)
{
    const std::string &path = g.path();
    RopeScaling &rs = hp.rope;
    rs.factor = float(g.get_float(a + "rope.scaling.factor").value_or(1.0));
    rs.orig_ctx = to_int(g, a + "rope.scaling.original_context_length",
                         g.get_int(a + "rope.scaling.original_context_length"), false, 0);
    rs.attn_factor = float(g.get_float(a + "rope.scaling.attn_factor").value_or(0.0));
    rs.beta_fast = float(g.get_float(a + "rope.scaling.yarn_beta_fast").value_or(32.0));
    rs.beta_slow = float(g.get_float(a + "rope.scaling.yarn_beta_slow").value_or(1.0));
    if (auto st = g.get_string(a + "rope.scaling.type")) {
        auto type = parse_rope_scaling(*st == "su" ? "longrope" : *st);
        if (!type)
            throw ConfigError(path + ": metadata key " + a + "rope.scaling.type has value '" + *st +
                              "', which is not supported (supported: none, linear, yarn, llama3, longrope)");
        rs.type = *type;
    } else if (auto f = g.get_float(a + "rope.scale_linear")) {
        rs.type = RopeScalingType::Linear;
        rs.factor = float(*f);
    }
    rs.freq_factors = float_vector(t, "rope_freqs.weight", path);
    if (!rs.freq_factors.empty() && rs.type == RopeScalingType::None)
        rs.type = RopeScalingType::Llama3; // Llama 3.1+: the converter writes the factors only
    rs.long_factors = float_vector(t, "rope_factors_long.weight", path);
    rs.short_factors = float_vector(t, "rope_factors_short.weight", path);
    if (!rs.long_factors.empty() && rs.type == RopeScalingType::None) {
        rs.type = RopeScalingType::LongRope;
        if (rs.orig_ctx > 0)
            rs.factor = float(hp.n_ctx_train) / float(rs.orig_ctx);
    }
    if (rs.type == RopeScalingType::Llama3 && rs.factor == 1.0f && !rs.freq_factors.empty())
        rs.factor = *std::max_element(rs.freq_factors.begin(), rs.freq_factors.end());
    hp.rope_scaling = rs.type;
    hp.rope_scaling_factor = std::max(1.0f, rs.factor);
}

// Sliding windows, soft-capping and the attention scale of the Gemma families, as llama.cpp
// reads them (the window pattern: every second layer for gemma2, five of six for gemma3,
// unless the file gives one).
void read_gemma_keys(const GgufFile &g, const std::string &a, HParams &hp)
{
    const bool g2 = hp.family == ArchFamily::Gemma2;
    hp.attn_softcap = float(g.get_float(a + "attn_logit_softcapping").value_or(g2 ? 50.0 : 0.0));
    hp.final_softcap = float(g.get_float(a + "final_logit_softcapping").value_or(g2 ? 30.0 : 0.0));
    hp.sliding_window = to_int(g, a + "attention.sliding_window", g.get_int(a + "attention.sliding_window"), false,
                               g2 ? 4096 : 0);
    int pattern = g2 ? 2 : 6;
    hp.swa_layers.assign(size_t(hp.n_layer), 0);
    if (const GgufValue *pv = g.find(a + "attention.sliding_window_pattern")) {
        if (const GgufArray *arr = pv->as_array()) {
            if (arr->items.size() != size_t(hp.n_layer))
                throw FormatError(g.path() + ": metadata key " + a + "attention.sliding_window_pattern has " +
                                  std::to_string(arr->items.size()) + " entries for " + std::to_string(hp.n_layer) +
                                  " layers");
            for (size_t i = 0; i < arr->items.size(); ++i)
                hp.swa_layers[i] = arr->items[i].as_bool().value_or(false) ? 1 : 0;
            pattern = 0;
        } else {
            pattern = to_int(g, a + "attention.sliding_window_pattern", pv->as_int(), true, 0);
        }
    }
    for (int i = 0; pattern > 0 && i < hp.n_layer; ++i)
        hp.swa_layers[size_t(i)] = i % pattern < pattern - 1 ? 1 : 0;
    hp.rope_base_swa = float(g.get_float(a + "rope.freq_base_swa").value_or(g2 ? hp.rope_base : 10000.0));
    // llama.cpp: 1/sqrt(head size), except the 27B models (46 and 62 layers), which scale by
    // width / heads (query_pre_attn_scalar is not in the file).
    const bool big = (g2 && hp.n_layer == 46) || (!g2 && hp.n_layer == 62);
    hp.attn_scale = big ? 1.0f / std::sqrt(float(hp.n_embd / hp.n_head)) : 0.0f;
}

} // namespace

std::unique_ptr<Model> ModelBuilder::from_gguf(const std::string &path)
{
    std::shared_ptr<GgufFile> g = GgufFile::open(path);
    auto arch = g->get_string("general.architecture");
    if (!arch)
        throw FormatError(path + ": missing metadata key general.architecture (is this a "
                                 "vocabulary-only GGUF?)");
    const std::optional<ArchFamily> family = family_of_gguf_arch(*arch);
    if (!family)
        throw FormatError(unsupported_architecture(path, *arch));

    auto model = make();
    HParams &hp = hparams(*model);
    const std::string a = *arch + ".";
    set_family_features(hp, *family, TensorNaming::Gguf);
    hp.n_embd = to_int(*g, a + "embedding_length", g->get_int(a + "embedding_length"), true, 0);
    hp.n_layer = to_int(*g, a + "block_count", g->get_int(a + "block_count"), true, 0);
    hp.n_ff = to_int(*g, a + "feed_forward_length", g->get_int(a + "feed_forward_length"), true, 0);
    hp.n_head = to_int(*g, a + "attention.head_count", g->get_int(a + "attention.head_count"), true, 0);
    hp.n_head_kv = to_int(*g, a + "attention.head_count_kv",
                          g->get_int(a + "attention.head_count_kv"), false, hp.n_head);
    hp.n_ctx_train = to_int(*g, a + "context_length", g->get_int(a + "context_length"), true, 0);
    const int key_len = to_int(*g, a + "attention.key_length", g->get_int(a + "attention.key_length"), false, 0);
    const int value_len = to_int(*g, a + "attention.value_length", g->get_int(a + "attention.value_length"), false,
                                 key_len);
    if (key_len != value_len)
        throw FormatError(path + ": attention.key_length " + std::to_string(key_len) +
                          " differs from attention.value_length " + std::to_string(value_len) +
                          " (different key and value head sizes are not supported)");
    hp.n_head_dim = key_len;
    hp.n_rot = to_int(*g, a + "rope.dimension_count", g->get_int(a + "rope.dimension_count"), false,
                      hp.head_dim());
    hp.rms_eps = float(g->get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    hp.rope_base = float(g->get_float(a + "rope.freq_base").value_or(10000.0));
    if (*family == ArchFamily::Phi3)
        hp.sliding_window = to_int(*g, a + "attention.sliding_window", g->get_int(a + "attention.sliding_window"),
                                   false, 0);
    if (*family == ArchFamily::Gemma2 || *family == ArchFamily::Gemma3)
        read_gemma_keys(*g, a, hp);

    std::vector<std::string> names;
    for (const GgufTensorInfo &ti : g->tensors())
        names.push_back(ti.name);
    TensorLookup t(
        [&g](const std::string &name) -> std::optional<WeightView> {
            const GgufTensorInfo *ti = g->find_tensor(name);
            if (!ti)
                return std::nullopt;
            WeightView w;
            w.name = name;
            w.type = ti->type;
            w.shape = ti->shape;
            w.data = ti->data;
            w.nbytes = ti->nbytes;
            return w;
        },
        names, path);
    read_rope_scaling(*g, a, t, hp);

    const GgufTensorInfo *embd = g->find_tensor("token_embd.weight");
    if (!embd)
        throw FormatError(path + ": missing tensor token_embd.weight");
    if (embd->shape.size() != 2)
        throw FormatError(path + ": tensor token_embd.weight must have 2 dimensions [n_embd, n_vocab], it has " +
                          std::to_string(embd->shape.size()));
    int64_t vocab_from_tensor = embd->shape[1];
    hp.n_vocab = to_int(*g, a + "vocab_size", g->get_int(a + "vocab_size"), false,
                        int(std::min<int64_t>(vocab_from_tensor, std::numeric_limits<int>::max())));
    hp.validate(path);

    ModelWeights &w = weights(*model);
    take_model_tensors(t, hp, TensorNaming::Gguf, w);
    hp.tied_embeddings = w.output.data == w.tok_embd.data;
    t.require_all_used(*arch);
    check_weights(*model, path);

    auto tok = Tokenizer::from_gguf(*g);
    if (tok->n_vocab() > hp.n_vocab)
        throw FormatError(path + ": the tokenizer has " + std::to_string(tok->n_vocab()) +
                          " tokens but the model only " + std::to_string(hp.n_vocab));
    tokenizer(*model) = std::move(tok);

    ModelInfo &in = info(*model);
    in.format = ModelFormat::Gguf;
    in.path = path;
    in.name = g->get_string("general.name").value_or(std::filesystem::path(path).stem().string());
    in.file_bytes = g->file_size();
    in.tensor_count = g->tensors().size();
    for (const GgufTensorInfo &ti : g->tensors())
        in.tensor_types[std::string(dtype_name(ti.type))]++;
    in.gguf_version = g->version();
    if (const GgufValue *ct = g->find("tokenizer.chat_template"); ct && ct->as_string())
        in.chat_template = *ct->as_string();
    gguf(*model) = std::move(g);
    return model;
}

} // namespace longscope
