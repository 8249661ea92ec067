#include "kv/kv_cache.h"

#include "longscope/errors.h"

#include <new>
#include <string>

namespace longscope {

KvCache::KvCache(int n_layer, int n_ctx, int n_embd_kv) : m_n_ctx(n_ctx), m_n_embd_kv(n_embd_kv)
{
    const uint64_t per = uint64_t(n_ctx) * uint64_t(n_embd_kv);
    try {
        m_k.resize(size_t(n_layer));
        m_v.resize(size_t(n_layer));
        for (int l = 0; l < n_layer; ++l) {
            m_k[size_t(l)].resize(per);
            m_v[size_t(l)].resize(per);
        }
    } catch (const std::bad_alloc &) {
        throw OutOfMemory("the KV cache for " + std::to_string(n_ctx) + " tokens needs " +
                          std::to_string(2 * per * 4 * uint64_t(n_layer) >> 20) +
                          " MiB, which cannot be allocated; lower the context limit");
    } catch (const std::length_error &) {
        throw OutOfMemory("the KV cache for " + std::to_string(n_ctx) + " tokens is too large");
    }
}

uint64_t KvCache::bytes() const
{
    return 2 * uint64_t(m_k.size()) * uint64_t(m_n_ctx) * uint64_t(m_n_embd_kv) * sizeof(float);
}

} // namespace longscope
