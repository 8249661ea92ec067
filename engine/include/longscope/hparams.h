// Hyperparameters of a decoder-only transformer of one of the supported families, whichever
// file format it came from (GGUF general.architecture, Hugging Face model_type).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace longscope {

// How the rotary dimensions are paired. GGUF llama files (Meta layout) rotate interleaved
// pairs (2i, 2i+1); Hugging Face checkpoints, and GGUF files of the NeoX-style families
// (qwen2, qwen3, gemma2, gemma3, phi3), pair (i, i + d/2) ("rotate half").
enum class RopeStyle { Interleaved, RotateHalf };

// Position scaling of the rotary embedding (docs/long-context.md). The file's own method is
// the default; Settings (RopeSettings::scaling) can choose any of them. NTK alpha (fixed or
// auto) comes on top of whichever is in effect.
enum class RopeScalingType {
    None,
    Linear,   // positions divided by the factor
    Dynamic,  // NTK base grown past the original context (Hugging Face "dynamic")
    Ntk,      // NTK-aware base, base * factor^(d / (d - 2)), at every length
    Yarn,     // per-dimension blend of interpolation and extrapolation, attention factor
    Llama3,   // per-dimension factors between the low and high frequency wavelengths
    LongRope, // per-dimension short/long factors, long ones past the original context
};
std::string_view to_string(RopeScalingType t); // "none", "linear", "dynamic", "ntk", ...
std::optional<RopeScalingType> parse_rope_scaling(std::string_view s);

// The architecture families the forward pass knows (arch/llama.cpp).
enum class ArchFamily { Llama, Qwen2, Qwen3, Gemma2, Gemma3, Phi3 };
std::string_view to_string(ArchFamily f); // the GGUF general.architecture name

enum class FfnActivation { Silu, GeluTanh }; // SwiGLU or GeGLU (gelu with the tanh approximation)

// A model's RoPE scaling parameters (from config.json rope_scaling or the GGUF rope.* keys and
// rope_freqs / rope_factors_* tensors). Fields a method does not use are ignored.
struct RopeScaling {
    RopeScalingType type = RopeScalingType::None;
    float factor = 1.0f;
    int orig_ctx = 0;             // original (pre-extension) context; 0: the trained context
    float attn_factor = 0.0f;     // YaRN / LongRoPE attention factor; 0: derived from the factor
    float beta_fast = 32.0f;      // YaRN
    float beta_slow = 1.0f;
    float low_freq_factor = 1.0f; // llama3
    float high_freq_factor = 4.0f;
    std::vector<float> freq_factors;  // llama3 per-dimension divisors as the file gives them (rope_freqs)
    std::vector<float> short_factors; // LongRoPE, [n_rot / 2] each
    std::vector<float> long_factors;

    bool operator==(const RopeScaling &) const = default;
};

struct HParams {
    std::string architecture = "llama";
    ArchFamily family = ArchFamily::Llama;
    int n_vocab = 0;
    int n_embd = 0;      // model width
    int n_layer = 0;
    int n_head = 0;      // query heads
    int n_head_kv = 0;   // key/value heads (grouped-query attention when < n_head)
    int n_ff = 0;        // gated feed-forward hidden width
    int n_ctx_train = 0; // trained context length
    int n_rot = 0;       // rotary dimensions per head (usually head_dim)
    int n_head_dim = 0;  // head size; 0: n_embd / n_head (GGUF attention.key_length, HF head_dim)
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    RopeStyle rope_style = RopeStyle::Interleaved;
    RopeScalingType rope_scaling = RopeScalingType::None;
    float rope_scaling_factor = 1.0f;
    RopeScaling rope; // the full scaling parameters (type and factor mirror the two above)
    bool tied_embeddings = false;

    // Family features.
    bool qkv_bias = false;           // qwen2: biases on the Q, K and V projections
    bool qk_norm = false;            // qwen3, gemma3: per-head RMSNorm of q and k before RoPE
    bool post_norms = false;         // gemma2/3: RMSNorm after attention and after the FFN
    float norm_offset = 0.0f;        // norms multiply by (offset + w): 1 for Gemma in HF files
    FfnActivation ffn_act = FfnActivation::Silu;
    bool scale_embeddings = false;   // gemma: embeddings times sqrt(n_embd)
    float attn_scale = 0.0f;         // score scale; 0: 1 / sqrt(head_dim)
    float attn_softcap = 0.0f;       // scores -> cap * tanh(scores / cap); 0: none
    float final_softcap = 0.0f;      // the same on the logits
    int sliding_window = 0;          // keys visible to a windowed layer: positions > pos - window
    std::vector<uint8_t> swa_layers; // per layer: 1 = sliding-window layer (empty: none, or all with phi3)
    float rope_base_swa = 0.0f;      // RoPE base of the sliding-window layers (0: rope_base, no scaling)

    int head_dim() const { return n_head_dim > 0 ? n_head_dim : (n_head > 0 ? n_embd / n_head : 0); }
    int n_embd_q() const { return n_head * head_dim(); }     // width of q and of the attention output
    int n_embd_kv() const { return n_head_kv * head_dim(); }
    bool layer_is_swa(int layer) const
    {
        return sliding_window > 0 &&
               (swa_layers.empty() || (size_t(layer) < swa_layers.size() && swa_layers[size_t(layer)] != 0));
    }
    // True when some layers rotate with their own base (gemma's sliding-window layers).
    bool per_layer_rope() const { return !swa_layers.empty() && rope_base_swa > 0; }

    // Throws ConfigError naming the first invalid value. `source` names the file.
    void validate(const std::string &source) const;
};

} // namespace longscope
