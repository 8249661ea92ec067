// Hyperparameters of a LLaMA-family model, whichever file format it came from.
#pragma once

#include <cstdint>
#include <string>

namespace longscope {

// How the rotary dimensions are paired. GGUF (Meta layout) rotates interleaved pairs
// (2i, 2i+1); Hugging Face checkpoints permute q/k rows so pairs are (i, i + d/2).
enum class RopeStyle { Interleaved, RotateHalf };

// Position scaling the model itself was configured with (config.json rope_scaling or the
// GGUF llama.rope.scaling.* keys). NTK alpha set by the user comes on top of this.
enum class RopeScalingType { None, Linear, Dynamic };

struct HParams {
    std::string architecture = "llama";
    int n_vocab = 0;
    int n_embd = 0;      // model width
    int n_layer = 0;
    int n_head = 0;      // query heads
    int n_head_kv = 0;   // key/value heads (grouped-query attention when < n_head)
    int n_ff = 0;        // SwiGLU hidden width
    int n_ctx_train = 0; // trained context length
    int n_rot = 0;       // rotary dimensions per head (usually head_dim)
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    RopeStyle rope_style = RopeStyle::Interleaved;
    RopeScalingType rope_scaling = RopeScalingType::None;
    float rope_scaling_factor = 1.0f;
    bool tied_embeddings = false;

    int head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
    int n_embd_kv() const { return n_head_kv * head_dim(); }

    // Throws ConfigError naming the first invalid value. `source` names the file.
    void validate(const std::string &source) const;
};

} // namespace longscope
