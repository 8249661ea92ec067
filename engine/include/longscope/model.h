// A loaded LLaMA-family model: hyperparameters, weight views (memory-mapped; the matrices copied
// once into the Model's own huge-page memory, docs/engine.md)
// and the tokenizer. Loads a GGUF file or a Hugging Face LLaMA directory.
#pragma once

#include "longscope/hparams.h"
#include "longscope/tokenizer.h"
#include "longscope/types.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace longscope {

class MappedFile;
class GgufFile;

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

struct LayerWeights {
    WeightView attn_norm; // [n_embd]
    WeightView wq;        // [n_embd, n_embd]
    WeightView wk;        // [n_embd, n_embd_kv]
    WeightView wv;        // [n_embd, n_embd_kv]
    WeightView wo;        // [n_embd, n_embd]
    WeightView ffn_norm;  // [n_embd]
    WeightView w_gate;    // [n_embd, n_ff]
    WeightView w_up;      // [n_embd, n_ff]
    WeightView w_down;    // [n_ff, n_embd]
};

struct ModelWeights {
    WeightView tok_embd;    // [n_embd, n_vocab]
    WeightView output_norm; // [n_embd]
    WeightView output;      // [n_embd, n_vocab] (the embedding when tied)
    std::vector<LayerWeights> layers;
};

enum class ModelFormat { Gguf, HuggingFace };

struct ModelInfo {
    ModelFormat format = ModelFormat::Gguf;
    std::string path;
    std::string name;
    uint64_t file_bytes = 0;           // all files holding weights
    uint64_t weight_bytes = 0;         // bytes of the weights the forward pass reads
    uint64_t cpu_copy_bytes = 0;       // matrices copied out of the mapping (huge pages; 0: used in place)
    size_t packed_matrices = 0;        // of them, re-laid out for the CPU kernels (cpu/packed.h)
    size_t tensor_count = 0;
    std::map<std::string, size_t> tensor_types; // type name -> count
    uint32_t gguf_version = 0;         // GGUF only
    std::string chat_template;         // Jinja text the model carries, if any
};

// Called while loading with the fraction done; return false to cancel (Model::load then
// throws Cancelled).
using LoadProgress = std::function<bool(double fraction)>;

class Model {
public:
    // `path` is a .gguf file or a directory with config.json. Throws IoError, FormatError,
    // ConfigError with a message naming the file and the problem. With `for_cpu` (the default)
    // the matrices are prepared for the CPU kernels as well (prepare_for_cpu); a model loaded
    // for the CUDA backend leaves them in the file mapping, whose pages the system can drop
    // once the weights are on the device, instead of holding a second copy in memory.
    static std::unique_ptr<Model> load(const std::string &path, const LoadProgress &progress = {},
                                       bool for_cpu = true);
    ~Model();

    // Copies the matrices out of the file mapping into huge pages and packs those the CPU
    // kernels want packed (see model.cpp), once: later calls do nothing, and so does a call
    // after a cancelled one (the matrices done so far stay prepared, the rest in place). The
    // CPU backend runs without it, only slower. Not while another thread evaluates with this
    // model; a session picks the change up at its next step.
    void prepare_for_cpu(const LoadProgress &progress = {});
    bool prepared_for_cpu() const { return m_cpu_prepared; }

    const HParams &hparams() const { return m_hparams; }
    const ModelWeights &weights() const { return m_weights; }
    const Tokenizer &tokenizer() const { return *m_tokenizer; }
    const ModelInfo &info() const { return m_info; }

private:
    Model();
    static std::unique_ptr<Model> load_files(const std::string &path);
    friend struct ModelBuilder;

    HParams m_hparams;
    ModelWeights m_weights;
    std::unique_ptr<Tokenizer> m_tokenizer;
    ModelInfo m_info;
    std::vector<std::shared_ptr<MappedFile>> m_files;
    std::vector<std::shared_ptr<uint8_t>> m_packed; // the cpu_packed copies
    std::shared_ptr<GgufFile> m_gguf;
    bool m_cpu_prepared = false;
};

} // namespace longscope
