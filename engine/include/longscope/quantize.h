// Model tools: quantize a GGUF model file, and write a model of a real model's shape with
// random weights (for benchmarks and memory tests without downloading weights). Both stream:
// tensors are converted and written one piece at a time, never all held in memory.
#pragma once

#include "longscope/gguf.h"
#include "longscope/hparams.h"
#include "longscope/types.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace longscope {

// Called with the fraction done (0..1).
using ToolProgress = std::function<void(double fraction)>;

// llama.cpp's LLAMA_FTYPE value (general.file_type) for a model whose weights are mostly
// `type`: F32 0, F16 1, Q4_0 2, Q8_0 7, Q4_K 15 (Q4_K_M), Q6_K 18, BF16 32.
uint32_t llama_file_type(DType type);

// The type a weight tensor gets in a model "of type `type`", as llama.cpp's quantizer chooses
// it: 2-D weights named *.weight become `type` (for Q4_K the Q4_K_M mix: output.weight, or the
// token embedding when the output is tied to it, and attn_v / ffn_down of the first and last
// eighth of the layers and every third layer between them become Q6_K); a tensor whose rows do
// not divide into whole blocks of that type, and every 1-D tensor, keeps `keep`. `n_layer` is
// the number of layers (for the Q4_K_M rule), `has_output` whether output.weight exists.
DType weight_type_for(const std::string &name, const std::vector<int64_t> &shape, DType type,
                      DType keep, int n_layer, bool has_output);

// Reads a GGUF (F32 / F16 / BF16 weights) and writes one with the same metadata (every key
// and value type, arrays included; general.file_type set to llama_file_type(type),
// general.quantization_version 2, alignment 32) and every tensor typed by weight_type_for.
// `type` is Q8_0, Q4_0, Q4_K, Q6_K (or F32, F16, BF16 for a plain conversion). Throws
// IoError, FormatError (also for a weight that is already quantized), InvalidArgument.
void quantize_model_file(const std::string &in_gguf, const std::string &out_gguf, DType type,
                         ToolProgress progress = {});

// A model shape of one of the families and the choices for its random weights.
struct RandomModelSpec {
    std::string name = "random";
    ArchFamily family = ArchFamily::Llama; // tensors and keys as llama.cpp's converter writes them
    int head_dim = 0;                      // 0: n_embd / n_head (attention.key_length)
    bool tied_embeddings = false;          // no output.weight
    RopeScaling rope;                      // llama3 writes rope_freqs; linear/yarn the rope.scaling keys
    int sliding_window = 0;                // gemma3 (every sixth layer global), phi3
    float rope_base_swa = 0.0f;            // gemma3's local base
    int n_embd = 0;
    int n_layer = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int n_ff = 0;
    int n_vocab = 0;
    int n_ctx = 2048;
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    DType type = DType::F16;  // of the 2-D weights; rows that do not divide into blocks: F16
    uint64_t seed = 0;
    float stddev = 0.02f;     // weights ~ normal(0, stddev); norm weights are 1
    // tokenizer.* metadata written as given (a real vocabulary: at most n_vocab tokens);
    // empty: a byte-level vocabulary (<unk>, <s>, </s>, the 256 bytes, the space piece, unused
    // pieces up to n_vocab; n_vocab must be at least 260).
    std::vector<std::pair<std::string, GgufValue>> tokenizer;
};

// Writes `out_gguf` (tensors token_embd, blk.N.*, output_norm, output). The weights depend
// only on the seed and the shape (not on the thread count). Throws ConfigError for an invalid
// shape, IoError.
void write_random_model_file(const std::string &out_gguf, const RandomModelSpec &spec,
                             ToolProgress progress = {});

} // namespace longscope
