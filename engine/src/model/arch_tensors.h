// Internal: what each architecture family reads from a model file, written once for both
// formats: the family's features (hparams), the tensors of every layer under llama.cpp's GGUF
// names or the Hugging Face names, fused matrices split into views, and the check that every
// tensor in the file is one the engine uses.
#pragma once

#include "longscope/hparams.h"
#include "model/weights.h"

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace longscope {

enum class TensorNaming { Gguf, HuggingFace };

// The family of a GGUF general.architecture or an HF model_type; nullopt when unsupported.
std::optional<ArchFamily> family_of_gguf_arch(const std::string &arch);
std::optional<ArchFamily> family_of_hf_model_type(const std::string &model_type);
// One line for an architecture the engine does not run: what it is and what is missing.
std::string unsupported_architecture(const std::string &source, const std::string &name);

// Sets the features that follow from the family alone (biases, q/k norms, post norms, GeGLU,
// scaled embeddings, the RoPE layout of the format).
void set_family_features(HParams &hp, ArchFamily family, TensorNaming naming);

// The tensors of a file by name; records which ones were taken.
class TensorLookup {
public:
    using Find = std::function<std::optional<WeightView>(const std::string &name)>;
    TensorLookup(Find find, std::vector<std::string> all_names, std::string source)
        : m_find(std::move(find)), m_all(std::move(all_names)), m_source(std::move(source))
    {
    }
    // The view, or an empty one (data null) when the file has no such tensor.
    WeightView take(const std::string &name);
    bool has(const std::string &name) const { return m_find(name).has_value(); }
    // Throws FormatError naming the tensors the engine would not use.
    void require_all_used(const std::string &arch) const;
    const std::string &source() const { return m_source; }

private:
    Find m_find;
    std::vector<std::string> m_all;
    std::set<std::string> m_used;
    std::string m_source;
};

// Fills the embedding, output and per-layer views for the family, splitting fused matrices
// (Phi-3's QKV and gate/up) into row ranges. Shapes are checked afterwards by check_weights.
void take_model_tensors(TensorLookup &t, const HParams &hp, TensorNaming naming, ModelWeights &w);

} // namespace longscope
