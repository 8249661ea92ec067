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

// The weight views the backends compute with (engine/src/model/weights.h): opaque here.
struct ModelWeights;

// What a forward pass reads and computes, for rooflines: the parameters of the matrix
// products (one multiply-add each per token; of them the output matrix's and the last layer's
// output projection and feed-forward, which a prompt multiplies only for the rows whose logits
// it keeps), the weight bytes a decode step streams
// once whatever the batch (every matrix; the embedding table only when it is also the output
// matrix), and the bytes of one embedding row each token reads otherwise (0 when tied).
struct DecodeCost {
    double matmul_params = 0;
    double output_params = 0;
    double last_layer_kept_params = 0; // the last layer's wo, gate, up and down
    double streamed_bytes = 0;
    double embd_row_bytes = 0;
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
    // For the engine's own layers (model/weights.h completes the type).
    const ModelWeights &weights() const { return *m_weights; }
    DecodeCost decode_cost() const;
    const Tokenizer &tokenizer() const { return *m_tokenizer; }
    const ModelInfo &info() const { return m_info; }

private:
    Model();
    static std::unique_ptr<Model> load_files(const std::string &path);
    friend struct ModelBuilder;

    HParams m_hparams;
    std::unique_ptr<ModelWeights> m_weights;
    std::unique_ptr<Tokenizer> m_tokenizer;
    ModelInfo m_info;
    std::vector<std::shared_ptr<MappedFile>> m_files;
    std::vector<std::shared_ptr<uint8_t>> m_packed; // the cpu_packed copies
    std::shared_ptr<GgufFile> m_gguf;
    bool m_cpu_prepared = false;
};

} // namespace longscope
