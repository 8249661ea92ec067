#include "kv/kv_static.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/mman.h>

namespace longscope {

namespace {

// A layer's rows. Buffers of 2 MiB and more start on a 2 MiB boundary and ask for 2 MiB pages
// for their whole 2 MiB stretches (the tail stays in 4 KiB pages, so nothing past the rows
// becomes resident): attention reads a kv head's slice of every row, and where heads are many
// (multi-head attention) each slice sits in a 4 KiB page of its own, a TLB miss per row. One
// thread, decode at depth 2048 over LLaMA-2-7B-shaped layers (32 heads of 128, F32 rows of 16
// KiB): 3.86 -> 2.73 ms a layer (docs/cpu-kernels.md). Null when refused.
uint8_t *allocate_rows(size_t bytes)
{
    constexpr size_t huge = size_t(2) << 20;
    if (bytes < huge)
        return static_cast<uint8_t *>(std::malloc(bytes));
    void *p = nullptr;
    if (posix_memalign(&p, huge, bytes) != 0)
        return nullptr;
#ifdef MADV_HUGEPAGE
    ::madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
#endif
    return static_cast<uint8_t *>(p);
}

} // namespace

StaticKvStore::StaticKvStore(int n_layer, int limit, int n_embd_kv, KvType type_k, KvType type_v)
    : KvStore(n_layer, limit, n_embd_kv, type_k, type_v)
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
    for (size_t i = 0; i < m_buffers.size(); ++i) {
        uint8_t *&b = m_buffers[i];
        const size_t buffer_bytes = size_t(limit) * size_t(side_row_bytes(int(i % 2)));
        // Allocated, then zeroed, rather than calloc'd: calloc's fresh pages stay unbacked until
        // first written, and this mode's point is that the whole limit is resident from the start.
        b = allocate_rows(buffer_bytes);
        if (!b) {
            for (uint8_t *p : m_buffers)
                std::free(p);
            m_buffers.clear();
            throw_out_of_memory(total, limit, "the allocation failed");
        }
        std::memset(b, 0, buffer_bytes);
    }
    m_capacity = limit;
    note_resident();
}

StaticKvStore::~StaticKvStore()
{
    for (uint8_t *b : m_buffers)
        std::free(b);
}

void StaticKvStore::ensure(int n_tokens)
{
    check_ensure(n_tokens);
}

uint8_t *StaticKvStore::key_data(int layer)
{
    check_layer(layer);
    return m_buffers[size_t(layer) * 2];
}

uint8_t *StaticKvStore::value_data(int layer)
{
    check_layer(layer);
    return m_buffers[size_t(layer) * 2 + 1];
}

} // namespace longscope
