#include "kv/kv_static.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace longscope {

StaticKvStore::StaticKvStore(int n_layer, int limit, int n_embd_kv) : KvStore(n_layer, limit, n_embd_kv)
{
    check_shape();
    const uint64_t total = bytes_for(limit);
    // The zero-fill below commits every page; with overcommit, malloc would happily hand out
    // more than exists and the fill would summon the OOM killer. Refuse up front instead.
    if (total > available_memory_bytes())
        throw_out_of_memory(total, limit, "more than the memory available");

    try {
        m_buffers.assign(size_t(n_layer) * 2, nullptr);
    } catch (const std::bad_alloc &) {
        throw_out_of_memory(total, limit, "the table of layer buffers could not be allocated");
    }
    const size_t buffer_bytes = size_t(limit) * size_t(row_bytes());
    for (float *&b : m_buffers) {
        // malloc + memset rather than calloc: calloc's fresh pages stay unbacked until first
        // written, and this mode's point is that the whole limit is resident from the start.
        b = static_cast<float *>(std::malloc(buffer_bytes));
        if (!b) {
            for (float *p : m_buffers)
                std::free(p);
            m_buffers.clear();
            throw_out_of_memory(total, limit, "malloc failed");
        }
        std::memset(b, 0, buffer_bytes);
    }
    m_capacity = limit;
    note_resident();
}

StaticKvStore::~StaticKvStore()
{
    for (float *b : m_buffers)
        std::free(b);
}

void StaticKvStore::ensure(int n_tokens)
{
    check_ensure(n_tokens);
}

float *StaticKvStore::keys(int layer)
{
    check_layer(layer);
    return m_buffers[size_t(layer) * 2];
}

float *StaticKvStore::values(int layer)
{
    check_layer(layer);
    return m_buffers[size_t(layer) * 2 + 1];
}

} // namespace longscope
