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
// `type`: F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9, Q2_K 10, Q3_K 12 (Q3_K_M),
// Q4_K 15 (Q4_K_M), Q5_K 17 (Q5_K_M), Q6_K 18, IQ4_NL 25, IQ4_XS 30, BF16 32.
uint32_t llama_file_type(DType type);

// The type a weight tensor gets in a model "of type `type`", as llama.cpp's quantizer chooses
// it for a dense model without an importance matrix: 2-D weights named *.weight become `type`,
// except in the mixes of the K types (Q2_K; Q3_K, Q4_K and Q5_K mean Q3_K_M, Q4_K_M, Q5_K_M):
// there the output (or the token embedding tied to it) is Q6_K, and attn_v, ffn_down,
// attn_output and attn_qkv get more bits by layer as llama.cpp's rules say (quantize.cpp has
// them per mix; Q4_K_M and Q5_K_M: attn_v / ffn_down of the first and last eighth of the
// layers and every third layer between them in Q6_K). A type whose blocks do not divide the
// rows falls back as llama.cpp's does (Q2_K, Q3_K to Q4_0; Q4_K to Q5_0; Q5_K to Q5_1; Q6_K to
// Q8_0; IQ4_XS to IQ4_NL; the output to Q8_0); a tensor whose rows still do not divide, and
// every 1-D tensor, keeps `keep`. `n_layer` is the number of layers, `has_output` whether
// output.weight exists, `n_gqa` the query heads per KV head (Q2_K's attn_v rule).
DType weight_type_for(const std::string &name, const std::vector<int64_t> &shape, DType type,
                      DType keep, int n_layer, bool has_output, int n_gqa = 1);

// Reads a GGUF (F32 / F16 / BF16 weights) and writes one with the same metadata (every key
// and value type, arrays included; general.file_type set to llama_file_type(type),
// general.quantization_version 2, alignment 32) and every tensor typed by weight_type_for.
// `type` is one of the quantized types (dtype_supported; Q2_K, Q3_K, Q4_K and Q5_K as the mixes
// weight_type_for describes) or F32, F16, BF16 for a plain conversion. Throws
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
