// Internal: the two model loaders and the checks they share.
#pragma once

#include "longscope/model.h"
#include "model/weights.h"

#include <memory>
#include <string>
#include <vector>

namespace longscope {

class WeightPreparer;

struct ModelBuilder {
    static std::unique_ptr<Model> from_gguf(const std::string &path);
    static std::unique_ptr<Model> from_hf_dir(const std::string &dir);

    static std::unique_ptr<Model> make() { return std::unique_ptr<Model>(new Model()); }
    static HParams &hparams(Model &m) { return m.m_hparams; }
    static ModelWeights &weights(Model &m) { return *m.m_weights; }
    static ModelInfo &info(Model &m) { return m.m_info; }
    static std::unique_ptr<Tokenizer> &tokenizer(Model &m) { return m.m_tokenizer; }
    static std::vector<std::shared_ptr<MappedFile>> &files(Model &m) { return m.m_files; }
    static std::shared_ptr<GgufFile> &gguf(Model &m) { return m.m_gguf; }

    // Checks every weight against the hyperparameters (shape, type, presence) and fills
    // info.weight_bytes. Throws FormatError naming the tensor.
    static void check_weights(Model &m, const std::string &source);

    // Copies the matrices into the Model's own memory, packed where `prep` asks for it
    // (prepare_weights.cpp), once: the work of Model::prepare_for_cpu, whose definition (in
    // the runtime layer) passes the CPU backend's preparer.
    static void prepare_weights(Model &m, const WeightPreparer &prep, const LoadProgress &progress);
};

} // namespace longscope
