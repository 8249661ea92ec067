#include "kv_models.h"

#include "longscope/quantize.h"

#include <random>

namespace longscope::test {

uint64_t expected_row_bytes(KvType t, int64_t n)
{
    switch (t) {
    case KvType::F32: return uint64_t(n) * 4;
    case KvType::F16: return uint64_t(n) * 2;
    case KvType::Q8_0: return uint64_t(n) / 32 * 34;
    case KvType::Q4_0: return uint64_t(n) / 32 * 18;
    }
    return 0;
}

std::unique_ptr<Model> random_kv_model(const std::string &dir, int n_layer)
{
    RandomModelSpec spec;
    spec.n_embd = 128;
    spec.n_layer = n_layer;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.head_dim = 64;
    spec.n_ff = 256;
    spec.n_vocab = 300;
    spec.n_ctx = 512;
    spec.type = DType::F32;
    spec.stddev = 0.08f;
    spec.seed = 7;
    const std::string path = dir + "/kv" + std::to_string(n_layer) + ".gguf";
    write_random_model_file(path, spec);
    return Model::load(path);
}

std::vector<int32_t> random_kv_tokens(int n, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> pick(3, 299);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto &id : t)
        id = pick(rng);
    return t;
}

} // namespace longscope::test
