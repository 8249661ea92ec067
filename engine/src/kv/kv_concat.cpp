#include "kv/kv_concat.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace longscope {

namespace {

// Below this a growth step is not worth a look at /proc: malloc fails cleanly long before a
// few MiB could push the machine into the OOM killer.
constexpr uint64_t k_precheck_bytes = uint64_t(64) << 20;

void free_all(std::vector<uint8_t *> &buffers)
{
    for (uint8_t *&b : buffers) {
        std::free(b);
        b = nullptr;
    }
}

} // namespace

ConcatKvStore::ConcatKvStore(int n_layer, int limit, int n_embd_kv, KvType type_k, KvType type_v)
    : KvStore(n_layer, limit, n_embd_kv, type_k, type_v)
{
    check_shape();
    try {
        m_buffers.assign(size_t(n_layer) * 2, nullptr);
    } catch (const std::bad_alloc &) {
        throw_out_of_memory(0, 0, "not even the table of layer buffers could be allocated");
    }
}

ConcatKvStore::~ConcatKvStore()
{
    free_all(m_buffers);
}

void ConcatKvStore::ensure(int n_tokens)
{
    check_ensure(n_tokens);
    if (n_tokens <= m_capacity)
        return;

    const uint64_t new_bytes = bytes_for(n_tokens);
    // Every new byte is written right away (the copy, then the new rows), so a request beyond
    // what memory can back would end with the OOM killer rather than a null from malloc.
    if (new_bytes >= k_precheck_bytes && new_bytes > available_memory_bytes())
        throw_out_of_memory(new_bytes, n_tokens, "more than the memory available");

    // All new buffers first, old ones still held: a failure leaves the store untouched, and
    // this is the moment of double memory that torch.cat also goes through.
    std::vector<uint8_t *> fresh;
    try {
        fresh.assign(m_buffers.size(), nullptr);
    } catch (const std::bad_alloc &) {
        throw_out_of_memory(new_bytes, n_tokens, "the table of layer buffers could not be allocated");
    }
    for (size_t i = 0; i < fresh.size(); ++i) {
        uint8_t *&b = fresh[i];
        b = static_cast<uint8_t *>(std::malloc(size_t(n_tokens) * size_t(side_row_bytes(int(i % 2)))));
        if (!b) {
            free_all(fresh);
            throw_out_of_memory(new_bytes, n_tokens, "malloc failed");
        }
    }
    note_resident(new_bytes); // old (resident_bytes()) + new, both alive now

    if (m_capacity > 0)
        for (size_t i = 0; i < fresh.size(); ++i)
            std::memcpy(fresh[i], m_buffers[i], size_t(m_capacity) * size_t(side_row_bytes(int(i % 2))));
    m_copied += bytes_for(m_capacity);

    free_all(m_buffers);
    m_buffers.swap(fresh);
    m_capacity = n_tokens;
    note_resident();
}

void ConcatKvStore::clear()
{
    free_all(m_buffers);
    m_capacity = 0;
}

uint8_t *ConcatKvStore::key_data(int layer)
{
    check_layer(layer);
    return m_buffers[size_t(layer) * 2];
}

uint8_t *ConcatKvStore::value_data(int layer)
{
    check_layer(layer);
    return m_buffers[size_t(layer) * 2 + 1];
}

} // namespace longscope
