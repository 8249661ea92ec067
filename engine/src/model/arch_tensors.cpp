#include "model/arch_tensors.h"

#include "longscope/errors.h"
#include "longscope/types.h"

namespace longscope {

namespace {

struct KnownArch {
    const char *name;
    const char *missing;
};

// Architectures people bring that the engine recognises but does not run, with what is missing.
constexpr KnownArch k_unsupported[] = {
    {"mixtral", "mixture-of-experts feed-forward layers"},
    {"qwen2moe", "mixture-of-experts feed-forward layers"},
    {"qwen2_moe", "mixture-of-experts feed-forward layers"},
    {"qwen3moe", "mixture-of-experts feed-forward layers"},
    {"qwen3_moe", "mixture-of-experts feed-forward layers"},
    {"deepseek2", "multi-head latent attention and mixture-of-experts layers"},
    {"deepseek_v2", "multi-head latent attention and mixture-of-experts layers"},
    {"deepseek_v3", "multi-head latent attention and mixture-of-experts layers"},
    {"phimoe", "mixture-of-experts feed-forward layers"},
    {"llama4", "mixture-of-experts layers and chunked attention"},
    {"gemma", "Gemma 1 (only gemma2 and gemma3 are supported)"},
    {"gemma3n", "per-layer embeddings and AltUp layers"},
    {"phi2", "parallel attention/FFN blocks with LayerNorm and biases"},
    {"gpt2", "learned position embeddings and LayerNorm"},
    {"falcon", "parallel attention/FFN blocks with LayerNorm"},
    {"mamba", "state-space layers instead of attention"},
    {"starcoder2", "LayerNorm with biases and a plain GELU FFN"},
};

std::string layer_name(TensorNaming naming, int layer, const char *gguf, const char *hf)
{
    if (naming == TensorNaming::Gguf)
        return "blk." + std::to_string(layer) + "." + gguf;
    return "model.layers." + std::to_string(layer) + "." + hf;
}

int64_t row_bytes(const WeightView &w)
{
    const auto tr = dtype_traits(uint32_t(w.type));
    if (!tr || tr->block_elems == 0)
        return 0;
    return int64_t(tr->block_bytes) * (w.ne(0) / int64_t(tr->block_elems));
}

// Rows [r0, r0 + n) of a matrix as a view of its own (the fused tensor's name with a suffix).
WeightView rows_of(const WeightView &w, int64_t r0, int64_t n, const std::string &source, const char *part)
{

    WeightView v;
    v.name = w.name + "[" + part + "]";
    if (!w.data)
        return v;
    const int64_t rb = row_bytes(w);
    if (w.shape.size() != 2 || rb <= 0 || r0 + n > w.ne(1) || uint64_t((r0 + n) * rb) > w.nbytes)
        throw FormatError(source + ": fused tensor " + w.name + " is too small to hold its " + part + " rows");
    v.type = w.type;
    v.shape = {w.ne(0), n};
    v.data = static_cast<const uint8_t *>(w.data) + r0 * rb;
    v.nbytes = uint64_t(n * rb);
    return v;
}

} // namespace

std::optional<ArchFamily> family_of_gguf_arch(const std::string &arch)
{
    for (ArchFamily f : {ArchFamily::Llama, ArchFamily::Qwen2, ArchFamily::Qwen3, ArchFamily::Gemma2,
                         ArchFamily::Gemma3, ArchFamily::Phi3})
        if (arch == to_string(f))
            return f;
    return std::nullopt;
}

std::optional<ArchFamily> family_of_hf_model_type(const std::string &t)
{
    if (t == "llama" || t == "mistral")
        return ArchFamily::Llama;
    if (t == "gemma3_text")
        return ArchFamily::Gemma3;
    return family_of_gguf_arch(t);
}

std::string unsupported_architecture(const std::string &source, const std::string &name)
{
    std::string why = "it is not one of the supported families (llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3)";
    for (const KnownArch &k : k_unsupported)
        if (name == k.name)
            why = std::string("missing: ") + k.missing;
    return source + ": architecture '" + name + "' is not supported (" + why + ")";
}

void set_family_features(HParams &hp, ArchFamily family, TensorNaming naming)
{
    hp.family = family;
    hp.architecture = std::string(to_string(family));
    // HF checkpoints all rotate halves; in GGUF only llama is converted to interleaved pairs.
    hp.rope_style = naming == TensorNaming::HuggingFace || family != ArchFamily::Llama ? RopeStyle::RotateHalf
                                                                                       : RopeStyle::Interleaved;
    hp.qkv_bias = family == ArchFamily::Qwen2;
    hp.qk_norm = family == ArchFamily::Qwen3 || family == ArchFamily::Gemma3;
    const bool gemma = family == ArchFamily::Gemma2 || family == ArchFamily::Gemma3;
    hp.post_norms = gemma;
    hp.scale_embeddings = gemma;
    hp.ffn_act = gemma ? FfnActivation::GeluTanh : FfnActivation::Silu;
    // Gemma's norms multiply by (1 + w); llama.cpp's converter stores 1 + w in GGUF.
    hp.norm_offset = gemma && naming == TensorNaming::HuggingFace ? 1.0f : 0.0f;
}

WeightView TensorLookup::take(const std::string &name)
{
    WeightView w;
    w.name = name;
    if (auto v = m_find(name)) {
        w = *v;
        m_used.insert(name);
    }
    return w;
}

void TensorLookup::require_all_used(const std::string &arch) const
{
    std::string unused;
    size_t n = 0;
    for (const std::string &name : m_all) {
        if (m_used.count(name))
            continue;
        if (n < 4)
            unused += (n ? ", " : "") + name;
        ++n;
    }
    if (n == 0)
        return;
    throw FormatError(m_source + ": " + std::to_string(n) + " tensor" + (n == 1 ? "" : "s") +
                      " the engine does not use for architecture " + arch + ": " + unused +
                      (n > 4 ? ", ..." : "") + " (a feature this engine does not implement)");
}

void take_model_tensors(TensorLookup &t, const HParams &hp, TensorNaming naming, ModelWeights &w)
{
    const bool gguf = naming == TensorNaming::Gguf;
    w.tok_embd = t.take(gguf ? "token_embd.weight" : "model.embed_tokens.weight");
    w.output_norm = t.take(gguf ? "output_norm.weight" : "model.norm.weight");
    w.output = t.take(gguf ? "output.weight" : "lm_head.weight");
    if (!w.output.data)
        w.output = w.tok_embd;

    const bool gemma = hp.family == ArchFamily::Gemma2 || hp.family == ArchFamily::Gemma3;
    const bool phi3 = hp.family == ArchFamily::Phi3;
    const int64_t eq = hp.n_embd_q(), ekv = hp.n_embd_kv(), f = hp.n_ff;
    w.layers.resize(size_t(hp.n_layer));
    for (int i = 0; i < hp.n_layer; ++i) {
        auto take = [&](const char *g, const char *h) { return t.take(layer_name(naming, i, g, h)); };
        LayerWeights &l = w.layers[size_t(i)];
        l.attn_norm = take("attn_norm.weight", "input_layernorm.weight");
        if (phi3) {
            const WeightView qkv = take("attn_qkv.weight", "self_attn.qkv_proj.weight");
            if (!qkv.data)
                throw FormatError(t.source() + ": missing tensor " + qkv.name);
            if (qkv.ne(1) != eq + 2 * ekv)
                throw FormatError(t.source() + ": fused tensor " + qkv.name + " has " + std::to_string(qkv.ne(1)) +
                                  " rows, expected " + std::to_string(eq + 2 * ekv) + " (q, k and v)");
            l.wq = rows_of(qkv, 0, eq, t.source(), "q");
            l.wk = rows_of(qkv, eq, ekv, t.source(), "k");
            l.wv = rows_of(qkv, eq + ekv, ekv, t.source(), "v");
        } else {
            l.wq = take("attn_q.weight", "self_attn.q_proj.weight");
            l.wk = take("attn_k.weight", "self_attn.k_proj.weight");
            l.wv = take("attn_v.weight", "self_attn.v_proj.weight");
        }
        if (hp.qkv_bias) {
            l.bq = take("attn_q.bias", "self_attn.q_proj.bias");
            l.bk = take("attn_k.bias", "self_attn.k_proj.bias");
            l.bv = take("attn_v.bias", "self_attn.v_proj.bias");
        }
        if (hp.qk_norm) {
            l.q_norm = take("attn_q_norm.weight", "self_attn.q_norm.weight");
            l.k_norm = take("attn_k_norm.weight", "self_attn.k_norm.weight");
        }
        l.wo = take("attn_output.weight", "self_attn.o_proj.weight");
        if (gemma) {
            l.attn_post_norm = take("post_attention_norm.weight", "post_attention_layernorm.weight");
            l.ffn_norm = take("ffn_norm.weight", "pre_feedforward_layernorm.weight");
            l.ffn_post_norm = take("post_ffw_norm.weight", "post_feedforward_layernorm.weight");
        } else {
            l.ffn_norm = take("ffn_norm.weight", "post_attention_layernorm.weight");
        }
        if (phi3) {
            // [gate; up] in one matrix, gate first (GGUF keeps it under ffn_up).
            const WeightView gu = take("ffn_up.weight", "mlp.gate_up_proj.weight");
            if (!gu.data)
                throw FormatError(t.source() + ": missing tensor " + gu.name);
            if (gu.ne(1) != 2 * f)
                throw FormatError(t.source() + ": fused tensor " + gu.name + " has " + std::to_string(gu.ne(1)) +
                                  " rows, expected " + std::to_string(2 * f) + " (gate and up)");
            l.w_gate = rows_of(gu, 0, f, t.source(), "gate");
            l.w_up = rows_of(gu, f, f, t.source(), "up");
        } else {
            l.w_gate = take("ffn_gate.weight", "mlp.gate_proj.weight");
            l.w_up = take("ffn_up.weight", "mlp.up_proj.weight");
        }
        l.w_down = take("ffn_down.weight", "mlp.down_proj.weight");
    }
}

} // namespace longscope
