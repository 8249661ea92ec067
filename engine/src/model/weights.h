// The weights of a loaded model as the backends see them: a view per tensor, in its file's
// mapping or in the Model's own copy. Internal to the engine; the public model.h only names
// ModelWeights.
#pragma once

#include "longscope/model.h"
#include "longscope/types.h"

#include <cstdint>
#include <string>
#include <vector>

namespace longscope {

// A weight tensor, in its file's mapping or in the Model's copy. shape[0] is the contiguous
// dimension, so a matrix for y = W x is [n_in, n_out] here: n_out rows of n_in elements.
struct WeightView {
    std::string name;
    DType type = DType::F32;
    std::vector<int64_t> shape;
    const void *data = nullptr;
    uint64_t nbytes = 0;
    // The same matrix re-laid out for the CPU's integer kernels (cpu/packed.h), owned by the
    // Model; null when the CPU kernels read it in place.
    const uint8_t *cpu_packed = nullptr;

    int64_t ne(size_t i) const { return i < shape.size() ? shape[i] : 1; }
    int64_t n_elements() const;
};

// Fused matrices (Phi-3's attn_qkv and gate/up) are split into row ranges of the same
// tensor: views into it, nothing copied.
struct LayerWeights {
    WeightView attn_norm; // [n_embd]
    WeightView wq;        // [n_embd, n_embd_q]
    WeightView wk;        // [n_embd, n_embd_kv]
    WeightView wv;        // [n_embd, n_embd_kv]
    WeightView bq, bk, bv;        // [n_embd_q], [n_embd_kv] x 2 (hparams.qkv_bias)
    WeightView q_norm, k_norm;    // [head_dim] (hparams.qk_norm)
    WeightView wo;        // [n_embd_q, n_embd]
    WeightView attn_post_norm;    // [n_embd] (hparams.post_norms)
    WeightView ffn_norm;  // [n_embd]
    WeightView w_gate;    // [n_embd, n_ff]
    WeightView w_up;      // [n_embd, n_ff]
    WeightView w_down;    // [n_ff, n_embd]
    WeightView ffn_post_norm;     // [n_embd] (hparams.post_norms)
};

struct ModelWeights {
    WeightView tok_embd;    // [n_embd, n_vocab]
    WeightView output_norm; // [n_embd]
    WeightView output;      // [n_embd, n_vocab] (the embedding when tied)
    std::vector<LayerWeights> layers;
};

} // namespace longscope
