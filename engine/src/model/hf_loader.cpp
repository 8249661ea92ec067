// Hugging Face LLaMA directory to Model: config.json, model.safetensors or the shards named
// by model.safetensors.index.json, and tokenizer.model. q/k projection rows are in the
// rotate_half layout, so the model runs with RopeStyle::RotateHalf (no weights are copied).
#include "longscope/errors.h"
#include "longscope/mapped_file.h"
#include "model/loader.h"
#include "model/safetensors.h"

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
    try {
        return json::parse(text);
    } catch (const json::exception &e) {
        throw ConfigError(p.string() + ": not valid JSON: " + e.what());
    }
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
        throw ConfigError(src + ": field \"" + key + "\" must be an integer, got " + v.dump());
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int>::max()))
        throw ConfigError(src + ": field \"" + key + "\" is too large: " + v.dump());
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
        throw ConfigError(src + ": field \"" + key + "\" must be a number, got " + c[key].dump());
    return c[key].get<double>();
}

// Maps a HF tensor onto the engine's view, shape reversed to contiguous-dimension-first.
WeightView view_of(const std::map<std::string, const SafetensorsTensor *> &all,
                   const std::string &source, const std::string &hf_name)
{
    WeightView w;
    w.name = hf_name;
    auto it = all.find(hf_name);
    if (it == all.end())
        return w;
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

} // namespace

std::unique_ptr<Model> ModelBuilder::from_hf_dir(const std::string &dir_str)
{
    const fs::path dir(dir_str);
    const fs::path cfg_path = dir / "config.json";
    const std::string src = cfg_path.string();
    json cfg = read_json(cfg_path);
    if (!cfg.is_object())
        throw ConfigError(src + ": must hold a JSON object");
    if (cfg.contains("model_type") && cfg["model_type"] != "llama")
        throw ConfigError(src + ": model_type " + cfg["model_type"].dump() +
                          " is not supported (supported: llama)");

    auto model = make();
    HParams &hp = hparams(*model);
    hp.n_embd = config_int(cfg, src, "hidden_size", std::nullopt);
    hp.n_ff = config_int(cfg, src, "intermediate_size", std::nullopt);
    hp.n_layer = config_int(cfg, src, "num_hidden_layers", std::nullopt);
    hp.n_head = config_int(cfg, src, "num_attention_heads", std::nullopt);
    hp.n_head_kv = config_int(cfg, src, "num_key_value_heads", hp.n_head);
    hp.n_vocab = config_int(cfg, src, "vocab_size", std::nullopt);
    hp.n_ctx_train = config_int(cfg, src, "max_position_embeddings", 2048);
    if (cfg.contains("head_dim") && !cfg["head_dim"].is_null() &&
        int64_t(config_int(cfg, src, "head_dim", std::nullopt)) * hp.n_head != hp.n_embd)
        throw ConfigError(src + ": head_dim times num_attention_heads must equal hidden_size");
    hp.n_rot = hp.n_embd / hp.n_head;
    hp.rms_eps = float(config_float(cfg, src, "rms_norm_eps", 1e-6));
    hp.rope_base = float(config_float(cfg, src, "rope_theta", 10000.0));
    hp.rope_style = RopeStyle::RotateHalf;
    if (cfg.contains("tie_word_embeddings")) {
        if (!cfg["tie_word_embeddings"].is_boolean())
            throw ConfigError(src + ": field \"tie_word_embeddings\" must be true or false");
        hp.tied_embeddings = cfg["tie_word_embeddings"].get<bool>();
    }
    if (cfg.contains("rope_scaling") && !cfg["rope_scaling"].is_null()) {
        const json &rs = cfg["rope_scaling"];
        if (!rs.is_object())
            throw ConfigError(src + ": rope_scaling must be an object or null");
        std::string type;
        for (const char *k : {"rope_type", "type"}) {
            if (!rs.contains(k))
                continue;
            if (!rs[k].is_string())
                throw ConfigError(src + ": rope_scaling " + k + " must be a string, got " + rs[k].dump());
            type = rs[k].get<std::string>();
        }
        if (type == "linear")
            hp.rope_scaling = RopeScalingType::Linear;
        else if (type == "dynamic")
            hp.rope_scaling = RopeScalingType::Dynamic;
        else if (type != "default")
            throw ConfigError(src + ": rope_scaling type \"" + type +
                              "\" is not supported (supported: linear, dynamic)");
        if (hp.rope_scaling != RopeScalingType::None) {
            if (!rs.contains("factor") || !rs["factor"].is_number())
                throw ConfigError(src + ": rope_scaling needs a numeric factor");
            hp.rope_scaling_factor = rs["factor"].get<float>();
        }
    }
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

    ModelWeights &w = weights(*model);
    w.tok_embd = view_of(all, dir_str, "model.embed_tokens.weight");
    w.output_norm = view_of(all, dir_str, "model.norm.weight");
    w.output = view_of(all, dir_str, "lm_head.weight");
    if (!w.output.data) {
        if (!hp.tied_embeddings)
            throw FormatError(dir_str + ": missing tensor lm_head.weight (and tie_word_embeddings is false)");
        w.output = w.tok_embd;
    }
    w.layers.resize(size_t(hp.n_layer));
    for (int i = 0; i < hp.n_layer; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        LayerWeights &l = w.layers[size_t(i)];
        l.attn_norm = view_of(all, dir_str, p + "input_layernorm.weight");
        l.wq = view_of(all, dir_str, p + "self_attn.q_proj.weight");
        l.wk = view_of(all, dir_str, p + "self_attn.k_proj.weight");
        l.wv = view_of(all, dir_str, p + "self_attn.v_proj.weight");
        l.wo = view_of(all, dir_str, p + "self_attn.o_proj.weight");
        l.ffn_norm = view_of(all, dir_str, p + "post_attention_layernorm.weight");
        l.w_gate = view_of(all, dir_str, p + "mlp.gate_proj.weight");
        l.w_up = view_of(all, dir_str, p + "mlp.up_proj.weight");
        l.w_down = view_of(all, dir_str, p + "mlp.down_proj.weight");
    }
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
