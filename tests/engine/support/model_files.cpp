#include "support/model_files.h"

#include "cpu/ops.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

namespace longscope::test {

namespace fs = std::filesystem;
using namespace gguf_bytes;

namespace {

void encode_payload(std::string &out, const GgufValue &v)
{
    switch (v.type) {
    case GgufValueType::Uint8: append_u8(out, uint8_t(std::get<uint64_t>(v.value))); break;
    case GgufValueType::Int8: append_u8(out, uint8_t(int8_t(std::get<int64_t>(v.value)))); break;
    case GgufValueType::Uint16: {
        uint16_t x = uint16_t(std::get<uint64_t>(v.value));
        out.append(reinterpret_cast<const char *>(&x), 2);
        break;
    }
    case GgufValueType::Int16: {
        int16_t x = int16_t(std::get<int64_t>(v.value));
        out.append(reinterpret_cast<const char *>(&x), 2);
        break;
    }
    case GgufValueType::Uint32: append_u32(out, uint32_t(std::get<uint64_t>(v.value))); break;
    case GgufValueType::Int32: append_i32(out, int32_t(std::get<int64_t>(v.value))); break;
    case GgufValueType::Uint64: append_u64(out, std::get<uint64_t>(v.value)); break;
    case GgufValueType::Int64: append_i64(out, std::get<int64_t>(v.value)); break;
    case GgufValueType::Float32: append_f32(out, float(std::get<double>(v.value))); break;
    case GgufValueType::Float64: append_f64(out, std::get<double>(v.value)); break;
    case GgufValueType::Bool: append_u8(out, std::get<bool>(v.value) ? 1 : 0); break;
    case GgufValueType::String: append_string(out, std::get<std::string>(v.value)); break;
    case GgufValueType::Array: {
        const GgufArray &a = *v.as_array();
        append_u32(out, uint32_t(a.elem_type));
        append_u64(out, a.items.size());
        for (const GgufValue &item : a.items)
            encode_payload(out, item);
        break;
    }
    }
}

bool write_file(const fs::path &p, const std::string &bytes)
{
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    return bool(out);
}

// Meta/GGUF interleaved q/k rows to Hugging Face rotate_half rows, per head: GGUF row
// 2i + j of a head moves to row j * hd/2 + i (the inverse of llama.cpp's conversion).
std::vector<float> permute_to_hf(const std::vector<float> &w, int64_t n_in, int64_t n_out, int n_heads)
{
    std::vector<float> out(w.size());
    const int64_t hd = n_out / n_heads;
    for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t i = 0; i < hd / 2; ++i)
            for (int64_t j = 0; j < 2; ++j) {
                const int64_t src = h * hd + 2 * i + j, dst = h * hd + j * (hd / 2) + i;
                std::memcpy(&out[size_t(dst * n_in)], &w[size_t(src * n_in)], size_t(n_in) * 4);
            }
    return out;
}

} // namespace

std::string encode_gguf_value(const GgufValue &v)
{
    std::string out;
    encode_payload(out, v);
    return out;
}

void copy_metadata(const GgufFile &src, GgufWriter &dst, const std::function<bool(const std::string &)> &keep)
{
    for (const std::string &key : src.metadata_order()) {
        if (key == "general.alignment" || (keep && !keep(key)))
            continue;
        const GgufValue &v = *src.find(key);
        dst.add_raw(key, uint32_t(v.type), encode_gguf_value(v));
    }
}

std::vector<float> tensor_as_f32(const GgufTensorInfo &t)
{
    std::vector<float> out(size_t(t.n_elements()));
    const auto *p16 = reinterpret_cast<const uint16_t *>(t.data);
    for (size_t i = 0; i < out.size(); ++i) {
        if (t.type == DType::F32)
            std::memcpy(&out[i], t.data + 4 * i, 4);
        else if (t.type == DType::F16)
            out[i] = f16_to_f32(p16[i]);
        else
            out[i] = bf16_to_f32(p16[i]);
    }
    return out;
}

std::string encode_floats(const std::vector<float> &v, DType type)
{
    std::string out;
    if (type == DType::F32) {
        out.assign(reinterpret_cast<const char *>(v.data()), v.size() * 4);
        return out;
    }
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h = type == DType::F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
}

bool write_gguf_as(const std::string &src_path, const std::string &dst_path, DType type)
{
    auto src = GgufFile::open(src_path);
    GgufWriter w;
    copy_metadata(*src, w);
    for (const GgufTensorInfo &t : src->tensors()) {
        const DType to = t.shape.size() >= 2 ? type : DType::F32;
        w.add_tensor(t.name, t.shape, uint32_t(to), encode_floats(tensor_as_f32(t), to));
    }
    return w.write(dst_path);
}

bool write_first_layer_gguf(const std::string &src_path, const std::string &dst_path)
{
    auto src = GgufFile::open(src_path);
    GgufWriter w;
    copy_metadata(*src, w, [](const std::string &k) { return k != "llama.block_count"; });
    w.add_u32("llama.block_count", 1);
    for (const GgufTensorInfo &t : src->tensors())
        if (t.name.rfind("blk.", 0) != 0 || t.name.rfind("blk.0.", 0) == 0)
            w.add_tensor(t.name, t.shape, uint32_t(t.type), std::string(reinterpret_cast<const char *>(t.data), t.nbytes));
    return w.write(dst_path);
}

bool write_hf_dir_from_gguf(const std::string &src_path, const std::string &dir_str,
                            const std::string &dtype, int n_shards, const std::string &tokenizer_model)
{
    auto g = GgufFile::open(src_path);
    const fs::path dir(dir_str);
    fs::create_directories(dir);
    const DType type = dtype == "F16" ? DType::F16 : dtype == "BF16" ? DType::BF16 : DType::F32;
    const int n_head = int(*g->get_int("llama.attention.head_count"));
    const int n_head_kv = int(g->get_int("llama.attention.head_count_kv").value_or(n_head));

    nlohmann::json cfg = {
        {"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"hidden_size", *g->get_int("llama.embedding_length")},
        {"intermediate_size", *g->get_int("llama.feed_forward_length")},
        {"num_hidden_layers", *g->get_int("llama.block_count")},
        {"num_attention_heads", n_head},
        {"num_key_value_heads", n_head_kv},
        {"vocab_size", g->find_tensor("token_embd.weight")->shape[1]},
        {"max_position_embeddings", *g->get_int("llama.context_length")},
        {"rms_norm_eps", *g->get_float("llama.attention.layer_norm_rms_epsilon")},
        {"rope_theta", g->get_float("llama.rope.freq_base").value_or(10000.0)},
        {"tie_word_embeddings", g->find_tensor("output.weight") == nullptr},
    };
    if (!write_file(dir / "config.json", cfg.dump(2)))
        return false;

    // GGUF names to HF names; 1-D tensors stay F32 like the 2-D ones take `type`.
    auto hf_name = [](const std::string &n) -> std::string {
        if (n == "token_embd.weight") return "model.embed_tokens.weight";
        if (n == "output_norm.weight") return "model.norm.weight";
        if (n == "output.weight") return "lm_head.weight";
        const size_t dot = n.find('.', 4);
        const std::string layer = n.substr(4, dot - 4), rest = n.substr(dot + 1);
        static const std::map<std::string, std::string> m = {
            {"attn_norm.weight", "input_layernorm.weight"},
            {"attn_q.weight", "self_attn.q_proj.weight"},
            {"attn_k.weight", "self_attn.k_proj.weight"},
            {"attn_v.weight", "self_attn.v_proj.weight"},
            {"attn_output.weight", "self_attn.o_proj.weight"},
            {"ffn_norm.weight", "post_attention_layernorm.weight"},
            {"ffn_gate.weight", "mlp.gate_proj.weight"},
            {"ffn_up.weight", "mlp.up_proj.weight"},
            {"ffn_down.weight", "mlp.down_proj.weight"}};
        return "model.layers." + layer + "." + m.at(rest);
    };
    std::vector<std::vector<StTensor>> shards(size_t(std::max(1, n_shards)));
    size_t i = 0;
    for (const GgufTensorInfo &t : g->tensors()) {
        std::vector<float> v = tensor_as_f32(t);
        const bool is_q = t.name.find("attn_q.weight") != std::string::npos;
        const bool is_k = t.name.find("attn_k.weight") != std::string::npos;
        if (is_q || is_k)
            v = permute_to_hf(v, t.shape[0], t.shape[1], is_q ? n_head : n_head_kv);
        const DType to = t.shape.size() >= 2 ? type : DType::F32;
        StTensor st;
        st.name = hf_name(t.name);
        st.dtype = std::string(dtype_name(to));
        st.shape.assign(t.shape.rbegin(), t.shape.rend());
        st.data = encode_floats(v, to);
        shards[i++ % shards.size()].push_back(std::move(st));
    }
    nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string name = shards.size() == 1
                                     ? "model.safetensors"
                                     : "model-" + std::to_string(s + 1) + "-of-" + std::to_string(shards.size()) + ".safetensors";
        for (const StTensor &t : shards[s])
            index["weight_map"][t.name] = name;
        if (!write_file(dir / name, safetensors_bytes(shards[s])))
            return false;
    }
    if (shards.size() > 1 && !write_file(dir / "model.safetensors.index.json", index.dump(2)))
        return false;
    std::error_code ec;
    fs::copy_file(tokenizer_model, dir / "tokenizer.model", fs::copy_options::overwrite_existing, ec);
    return !ec;
}

std::string safetensors_bytes(const std::vector<StTensor> &tensors)
{
    nlohmann::json header = nlohmann::json::object();
    uint64_t offset = 0;
    std::string data;
    for (const StTensor &t : tensors) {
        header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
        offset += t.data.size();
        data += t.data;
    }
    std::string h = header.dump();
    while (h.size() % 8)
        h += ' ';
    std::string out;
    append_u64(out, h.size());
    return out + h + data;
}

} // namespace longscope::test
