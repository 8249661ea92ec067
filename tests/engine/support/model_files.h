// Test model files made from the bundled GGUF: the same weights in other types and in a
// Hugging Face directory written here (own safetensors writer, q/k rows permuted the way
// Hugging Face's conversion script does), so formats can be checked against each other.
#pragma once

#include "longscope/gguf.h"
#include "support/gguf_writer.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace longscope::test {

// Re-encodes one metadata value (type id + bytes) for GgufWriter::add_raw.
std::string encode_gguf_value(const GgufValue &v);

// Copies every metadata key of `src` for which `keep` is true (all when empty).
void copy_metadata(const GgufFile &src, GgufWriter &dst,
                   const std::function<bool(const std::string &)> &keep = {});

// Tensor elements as floats (F32, F16, BF16 sources).
std::vector<float> tensor_as_f32(const GgufTensorInfo &t);

// Encodes floats as F32 / F16 / BF16 bytes.
std::string encode_floats(const std::vector<float> &v, DType type);

// Writes a copy of the GGUF at `src_path` to `dst_path` with every 2-D weight converted to
// `type` (1-D norm weights stay F32, as llama.cpp's converter does). Returns false on failure.
bool write_gguf_as(const std::string &src_path, const std::string &dst_path, DType type);

// Writes a copy of the LLaMA GGUF at `src_path` cut to its first layer (block_count 1, the
// blk.0 tensors and the rest unchanged): a model whose cached keys and values depend only
// on the tokens and their positions. Returns false on failure.
bool write_first_layer_gguf(const std::string &src_path, const std::string &dst_path);

// Writes a Hugging Face LLaMA directory holding the GGUF model's weights: config.json,
// `n_shards` safetensors files (with model.safetensors.index.json when more than one), in
// "F32", "F16" or "BF16", and `tokenizer_model` copied in as tokenizer.model.
bool write_hf_dir_from_gguf(const std::string &src_path, const std::string &dir,
                            const std::string &dtype, int n_shards,
                            const std::string &tokenizer_model);

// One safetensors file from named tensors (shape in PyTorch order, outermost first).
struct StTensor {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::string data;
};
std::string safetensors_bytes(const std::vector<StTensor> &tensors);

} // namespace longscope::test
