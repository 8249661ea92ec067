// KV cache. This is the `static` mode: one buffer per layer for keys and one for values,
// allocated for the context limit up front and written in place at each token's index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace longscope {

class KvCache {
public:
    // Throws OutOfMemory when the buffers cannot be allocated.
    KvCache(int n_layer, int n_ctx, int n_embd_kv);

    // [n_ctx, n_embd_kv] for one layer.
    float *keys(int layer) { return m_k[size_t(layer)].data(); }
    float *values(int layer) { return m_v[size_t(layer)].data(); }
    int n_ctx() const { return m_n_ctx; }
    int n_embd_kv() const { return m_n_embd_kv; }
    uint64_t bytes() const;

private:
    int m_n_ctx;
    int m_n_embd_kv;
    std::vector<std::vector<float>> m_k, m_v;
};

} // namespace longscope
