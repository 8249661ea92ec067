// Hugging Face LLaMA directory to Model: config.json, model.safetensors or the shards named
// by model.safetensors.index.json, and tokenizer.model. q/k projection rows are in the
// rotate_half layout, so the model runs with RopeStyle::RotateHalf (no weights are copied).
#include "longscope/errors.h"
#include "longscope/mapped_file.h"
#include "model/arch_tensors.h"
#include "core/json_input.h"
#include "model/loader.h"
#include "model/safetensors.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace longscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path &p)
{
    const std::string text = read_regular_file(p.string(), 64ull << 20, "JSON file");
    json out;
    std::string why;
    if (!parse_json_bounded(text.data(), text.data() + text.size(), out, why))
        throw ConfigError(p.string() + ": " + why);
    return out;
}

int config_int(const json &c, const std::string &src, const char *key, std::optional<int> fallback)
{
    if (!c.contains(key) || c[key].is_null()) {
        if (!fallback)
            throw ConfigError(src + ": missing required field \"" + key + "\"");
        return *fallback;
    }
    const json &v = c[key];
    if (!v.is_number_integer())
        throw ConfigError(src + ": field \"" + key + "\" must be an integer, got " + describe_json(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int>::max()))
        throw ConfigError(src + ": field \"" + key + "\" is too large: " + describe_json(v));
    int64_t i = v.get<int64_t>();
    if (i <= 0 || i > std::numeric_limits<int>::max())
        throw ConfigError(src + ": field \"" + key + "\" must be a positive integer, got " +
                          std::to_string(i));
    return int(i);
}

double config_float(const json &c, const std::string &src, const char *key, double fallback)
{
    if (!c.contains(key) || c[key].is_null())
        return fallback;
    if (!c[key].is_number())
        throw ConfigError(src + ": field \"" + key + "\" must be a number, got " + describe_json(c[key]));
    return c[key].get<double>();
}

// Maps a HF tensor onto the engine's view, shape reversed to contiguous-dimension-first.
std::optional<WeightView> view_of(const std::map<std::string, const SafetensorsTensor *> &all,
                                  const std::string &source, const std::string &hf_name)
{
    auto it = all.find(hf_name);
    if (it == all.end())
        return std::nullopt;
    WeightView w;
    w.name = hf_name;
    const SafetensorsTensor &t = *it->second;
    if (t.dtype == "F32")
        w.type = DType::F32;
    else if (t.dtype == "F16")
        w.type = DType::F16;
    else if (t.dtype == "BF16")
        w.type = DType::BF16;
    else
        throw FormatError(source + ": tensor " + t.name + " has dtype " + t.dtype +
                          ", which this engine cannot compute with (supported: F32, F16, BF16)");
    w.shape.assign(t.shape.rbegin(), t.shape.rend());
    w.data = t.data;
    w.nbytes = t.nbytes;
    return w;
}

bool config_bool(const json &c, const std::string &src, const char *key, bool fallback)
{
    if (!c.contains(key) || c[key].is_null())
        return fallback;
    if (!c[key].is_boolean())
        throw ConfigError(src + ": field \"" + key + "\" must be true or false");
    return c[key].get<bool>();
}

std::string config_string(const json &c, const std::string &src, const char *key, const std::string &fallback)
{
    if (!c.contains(key) || c[key].is_null())
        return fallback;
    if (!c[key].is_string())
        throw ConfigError(src + ": field \"" + key + "\" must be a string, got " + describe_json(c[key]));
    return c[key].get<std::string>();
}

std::vector<float> config_floats(const json &c, const std::string &src, const char *key)
{
    std::vector<float> v;
    if (!c.contains(key) || c[key].is_null())
        return v;
    if (!c[key].is_array())
        throw ConfigError(src + ": field \"" + key + "\" must be a list of numbers");
    for (const json &x : c[key]) {
        if (!x.is_number())
            throw ConfigError(src + ": field \"" + key + "\" must be a list of numbers, has " + describe_json(x));
        v.push_back(x.get<float>());
    }
    return v;
}

// One rope_scaling object (transformers 4.x) or rope_parameters entry (5.x) into the model's
// scaling; its rope_theta, when present, sets the base.
void read_rope_object(const json &rs, const std::string &src, HParams &hp, float &base)
{
    if (!rs.is_object())
        throw ConfigError(src + ": rope_scaling must be an object or null");
    const std::string where = src + ": rope_scaling";
    std::string type;
    for (const char *k : {"type", "rope_type"})
        type = config_string(rs, where, k, type);
    if (type.empty())
        throw ConfigError(src + ": rope_scaling needs a type (rope_type)");
    if (type == "su")
        type = "longrope";
    base = float(config_float(rs, where, "rope_theta", base));
    RopeScaling &r = hp.rope;
    if (type == "default") {
        r.type = RopeScalingType::None;
    } else if (auto t = parse_rope_scaling(type); t && *t != RopeScalingType::Ntk && *t != RopeScalingType::None) {
        r.type = *t;
    } else {
        throw ConfigError(src + ": rope_scaling type \"" + type +
                          "\" is not supported (supported: default, linear, dynamic, yarn, llama3, longrope)");
    }
    if (r.type == RopeScalingType::None)
        return;
    r.factor = float(config_float(rs, where, "factor", 0.0));
    if (r.factor == 0.0f && r.type != RopeScalingType::LongRope && r.type != RopeScalingType::Yarn)
        throw ConfigError(src + ": rope_scaling needs a numeric factor");
    if (rs.contains("original_max_position_embeddings"))
        r.orig_ctx = config_int(rs, where, "original_max_position_embeddings", std::nullopt);
    r.attn_factor = float(config_float(rs, where, "attention_factor", 0.0));
    r.beta_fast = float(config_float(rs, where, "beta_fast", 32.0));
    r.beta_slow = float(config_float(rs, where, "beta_slow", 1.0));
    r.low_freq_factor = float(config_float(rs, where, "low_freq_factor", 1.0));
    r.high_freq_factor = float(config_float(rs, where, "high_freq_factor", 4.0));
    r.short_factors = config_floats(rs, where, "short_factor");
    r.long_factors = config_floats(rs, where, "long_factor");
    if (r.type == RopeScalingType::LongRope && (r.short_factors.empty() || r.long_factors.empty()))
        throw ConfigError(src + ": rope_scaling longrope needs short_factor and long_factor lists");
}

// Everything about RoPE in config.json, in either layout. Gemma 3's global layers take the
// "full_attention" entry, its sliding-window layers the "sliding_attention" one.
void read_rope(const json &cfg, const std::string &src, HParams &hp)
{
    float base = float(config_float(cfg, src, "rope_theta", 10000.0));
    hp.rope.orig_ctx = cfg.contains("original_max_position_embeddings")
                           ? config_int(cfg, src, "original_max_position_embeddings", std::nullopt)
                           : 0;
    const json *scaling = nullptr;
    for (const char *k : {"rope_scaling", "rope_parameters"})
        if (cfg.contains(k) && !cfg[k].is_null())
            scaling = &cfg[k];
    if (scaling && scaling->is_object() && scaling->contains("full_attention")) {
        read_rope_object((*scaling)["full_attention"], src, hp, base);
        if (scaling->contains("sliding_attention")) {
            float local = 10000.0f;
            const HParams keep = hp;
            read_rope_object((*scaling)["sliding_attention"], src, hp, local);
            if (hp.rope.type != RopeScalingType::None)
                throw ConfigError(src + ": RoPE scaling on the sliding-window layers is not supported");
            hp.rope = keep.rope;
            hp.rope_base_swa = local;
        }
    } else if (scaling) {
        read_rope_object(*scaling, src, hp, base);
    }
    hp.rope_base = base;
    if (hp.rope.type == RopeScalingType::LongRope && hp.rope.factor == 0.0f)
        hp.rope.factor = hp.rope.orig_ctx > 0 ? float(hp.n_ctx_train) / float(hp.rope.orig_ctx) : 1.0f;
    if (hp.rope.type == RopeScalingType::Yarn && hp.rope.factor == 0.0f)
        hp.rope.factor = hp.rope.orig_ctx > 0 ? float(hp.n_ctx_train) / float(hp.rope.orig_ctx) : 1.0f;
    hp.rope_scaling = hp.rope.type;
    hp.rope_scaling_factor = std::max(1.0f, hp.rope.factor);
}

// The Gemma keys: attention scale, soft caps, which layers slide and their RoPE base.
void read_gemma(const json &cfg, const std::string &src, HParams &hp)
{
    const bool g2 = hp.family == ArchFamily::Gemma2;
    const std::string act = config_string(cfg, src, "hidden_activation",
                                          config_string(cfg, src, "hidden_act", "gelu_pytorch_tanh"));
    if (act != "gelu_pytorch_tanh")
        throw ConfigError(src + ": hidden_activation \"" + act + "\" is not supported (supported: gelu_pytorch_tanh)");
    hp.attn_scale = 1.0f / std::sqrt(float(config_float(cfg, src, "query_pre_attn_scalar", 256.0)));
    hp.attn_softcap = float(config_float(cfg, src, "attn_logit_softcapping", 0.0));
    hp.final_softcap = float(config_float(cfg, src, "final_logit_softcapping", 0.0));
    hp.sliding_window = config_int(cfg, src, "sliding_window", 4096);
    hp.swa_layers.assign(size_t(hp.n_layer), 0);
    if (cfg.contains("layer_types") && cfg["layer_types"].is_array()) {
        const json &lt = cfg["layer_types"];
        if (lt.size() != size_t(hp.n_layer))
            throw ConfigError(src + ": layer_types has " + std::to_string(lt.size()) + " entries for " +
                              std::to_string(hp.n_layer) + " layers");
        for (size_t i = 0; i < lt.size(); ++i) {
            if (!lt[i].is_string() || (lt[i] != "sliding_attention" && lt[i] != "full_attention"))
                throw ConfigError(src + ": layer_types entry " + describe_json(lt[i]) +
                                  " is not sliding_attention or full_attention");
            hp.swa_layers[i] = lt[i] == "sliding_attention" ? 1 : 0;
        }
    } else {
        int pattern = 2;
        if (!g2)
            pattern = cfg.contains("sliding_window_pattern") ? config_int(cfg, src, "sliding_window_pattern", 6)
                                                             : config_int(cfg, src, "_sliding_window_pattern", 6);
        for (int i = 0; i < hp.n_layer; ++i)
            hp.swa_layers[size_t(i)] = (i + 1) % pattern != 0 ? 1 : 0;
    }
    if (hp.rope_base_swa == 0.0f)
        hp.rope_base_swa = g2 ? hp.rope_base : float(config_float(cfg, src, "rope_local_base_freq", 10000.0));
}

// Options of the families that the engine does not implement are refused, not ignored.
void refuse_unimplemented(const json &cfg, const std::string &src, const HParams &hp)
{
    const bool gemma = hp.family == ArchFamily::Gemma2 || hp.family == ArchFamily::Gemma3;
    if (!gemma) {
        const std::string act = config_string(cfg, src, "hidden_act", "silu");
        if (act != "silu")
            throw ConfigError(src + ": hidden_act \"" + act + "\" is not supported for " + hp.architecture +
                              " (supported: silu)");
    }
    if (hp.family != ArchFamily::Qwen2 && config_bool(cfg, src, "attention_bias", false))
        throw ConfigError(src + ": attention_bias is not supported for " + hp.architecture);
    if (config_bool(cfg, src, "mlp_bias", false))
        throw ConfigError(src + ": mlp_bias is not supported");
    if ((hp.family == ArchFamily::Qwen2 || hp.family == ArchFamily::Qwen3 || hp.family == ArchFamily::Llama) &&
        config_bool(cfg, src, "use_sliding_window", false))
        throw ConfigError(src + ": use_sliding_window is not supported for " + hp.architecture);
    if (cfg.contains("num_local_experts") || cfg.contains("num_experts") || cfg.contains("n_routed_experts"))
        throw ConfigError(src + ": mixture-of-experts layers are not supported");
}

} // namespace

std::unique_ptr<Model> ModelBuilder::from_hf_dir(const std::string &dir_str)
{
    const fs::path dir(dir_str);
    const fs::path cfg_path = dir / "config.json";
    const std::string src = cfg_path.string();
    json cfg = read_json(cfg_path);
    if (!cfg.is_object())
        throw ConfigError(src + ": must hold a JSON object");
    const std::string model_type = config_string(cfg, src, "model_type", "llama");
    const std::optional<ArchFamily> family = family_of_hf_model_type(model_type);
    if (!family)
        throw ConfigError(unsupported_architecture(src, model_type));
    if (cfg.contains("text_config"))
        throw ConfigError(src + ": model_type " + model_type +
                          " with a text_config is a multimodal checkpoint (not supported: the text-only "
                          "model_type, e.g. gemma3_text, is)");

    auto model = make();
    HParams &hp = hparams(*model);
    set_family_features(hp, *family, TensorNaming::HuggingFace);
    hp.n_embd = config_int(cfg, src, "hidden_size", std::nullopt);
    hp.n_ff = config_int(cfg, src, "intermediate_size", std::nullopt);
    hp.n_layer = config_int(cfg, src, "num_hidden_layers", std::nullopt);
    hp.n_head = config_int(cfg, src, "num_attention_heads", std::nullopt);
    hp.n_head_kv = config_int(cfg, src, "num_key_value_heads", hp.n_head);
    hp.n_vocab = config_int(cfg, src, "vocab_size", std::nullopt);
    hp.n_ctx_train = config_int(cfg, src, "max_position_embeddings", 2048);
    if (cfg.contains("head_dim") && !cfg["head_dim"].is_null())
        hp.n_head_dim = config_int(cfg, src, "head_dim", std::nullopt);
    const double partial = config_float(cfg, src, "partial_rotary_factor", 1.0);
    if (!(partial > 0.0 && partial <= 1.0))
        throw ConfigError(src + ": partial_rotary_factor must be in (0, 1]");
    hp.n_rot = int(hp.head_dim() * partial);
    hp.rms_eps = float(config_float(cfg, src, "rms_norm_eps", 1e-6));
    hp.tied_embeddings = config_bool(cfg, src, "tie_word_embeddings",
                                     *family == ArchFamily::Gemma2 || *family == ArchFamily::Gemma3);
    refuse_unimplemented(cfg, src, hp);
    read_rope(cfg, src, hp);
    if (*family == ArchFamily::Gemma2 || *family == ArchFamily::Gemma3)
        read_gemma(cfg, src, hp);
    // Phi-3 and Mistral window every layer (Hugging Face applies the window to all of them).
    if ((*family == ArchFamily::Phi3 || model_type == "mistral") && cfg.contains("sliding_window") &&
        !cfg["sliding_window"].is_null())
        hp.sliding_window = config_int(cfg, src, "sliding_window", std::nullopt);
    hp.validate(src);

    // Weights: one file, or shards named by the index.
    std::vector<std::unique_ptr<SafetensorsFile>> shards;
    std::map<std::string, const SafetensorsTensor *> all;
    const fs::path single = dir / "model.safetensors";
    const fs::path index = dir / "model.safetensors.index.json";
    std::vector<fs::path> shard_paths;
    if (fs::exists(index)) {
        json idx = read_json(index);
        if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
            throw ConfigError(index.string() + ": needs a weight_map object");
        std::set<std::string> names;
        for (auto &[k, v] : idx["weight_map"].items()) {
            if (!v.is_string())
                throw ConfigError(index.string() + ": weight_map entry " + k + " is not a file name");
            std::string f = v.get<std::string>();
            if (f.find('/') != std::string::npos || f == "..")
                throw ConfigError(index.string() + ": shard name '" + f + "' must be a plain file name");
            names.insert(f);
        }
        for (const std::string &n : names)
            shard_paths.push_back(dir / n);
    } else if (fs::exists(single)) {
        shard_paths.push_back(single);
    } else {
        throw FormatError(dir_str + ": no model.safetensors or model.safetensors.index.json "
                                    "(PyTorch .bin checkpoints are not supported)");
    }
    uint64_t file_bytes = 0;
    for (const fs::path &p : shard_paths) {
        shards.push_back(SafetensorsFile::open(p.string()));
        files(*model).push_back(shards.back()->file());
        file_bytes += shards.back()->file()->size();
        for (const auto &[name, t] : shards.back()->tensors())
            if (!all.emplace(name, &t).second)
                throw FormatError(p.string() + ": tensor " + name + " appears in two shards");
    }

    std::vector<std::string> names;
    for (const auto &[name, t] : all)
        names.push_back(name);
    TensorLookup tl([&all, &dir_str](const std::string &name) { return view_of(all, dir_str, name); }, names,
                    dir_str);
    ModelWeights &w = weights(*model);
    take_model_tensors(tl, hp, TensorNaming::HuggingFace, w);
    if (w.output.data == w.tok_embd.data && !hp.tied_embeddings)
        throw FormatError(dir_str + ": missing tensor lm_head.weight (and tie_word_embeddings is false)");
    tl.require_all_used(hp.architecture);
    check_weights(*model, dir_str);

    auto tok = Tokenizer::from_hf_directory(dir_str);
    std::string chat_template;
    const fs::path tok_cfg = dir / "tokenizer_config.json";
    if (fs::exists(tok_cfg)) {
        json tc = read_json(tok_cfg);
        if (tc.is_object() && tc.contains("chat_template") && tc["chat_template"].is_string())
            chat_template = tc["chat_template"].get<std::string>();
    }
    // The file the tokenizer came from (tokenizer.model wins where both are present).
    const fs::path tok_file = dir / (fs::exists(dir / "tokenizer.model") ? "tokenizer.model" : "tokenizer.json");
    if (tok->n_vocab() > hp.n_vocab)
        throw FormatError(tok_file.string() + ": the tokenizer has " + std::to_string(tok->n_vocab()) +
                          " tokens but the model only " + std::to_string(hp.n_vocab));
    tokenizer(*model) = std::move(tok);

    ModelInfo &in = info(*model);
    in.format = ModelFormat::HuggingFace;
    in.path = dir_str;
    in.name = fs::absolute(dir).lexically_normal().filename().string();
    if (in.name.empty())
        in.name = fs::absolute(dir).parent_path().filename().string();
    in.file_bytes = file_bytes;
    in.chat_template = chat_template;
    in.tensor_count = all.size();
    for (const auto &[name, t] : all)
        in.tensor_types[t->dtype]++;
    return model;
}

} // namespace longscope
