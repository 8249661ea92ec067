// The `vmm` KV mode: a CPU version of vAttention. Address space for the whole context limit
// is reserved up front (PROT_NONE, MAP_NORESERVE: costs no memory), and ensure() commits
// pages with mprotect as tokens arrive. Rows never move, so keys() / values() pointers stay
// valid across ensure() and appending is in place: no copies, no double memory, and resident
// memory follows the tokens actually held instead of the limit.
#pragma once

#include "kv/kv_store.h"

#include <cstddef>

namespace longscope {

class VmmKvStore final : public KvStore {
public:
    // One reservation carved into 2 * n_layer regions (K and V of each layer), each rounded
    // up to a whole number of commit granules so a commit never spills into the next region
    // (key and value regions differ in size when their types do).
    // Throws OutOfMemory when the address space cannot be reserved.
    VmmKvStore(int n_layer, int limit, int n_embd_kv, KvType type_k = KvType::F32, KvType type_v = KvType::F32);
    ~VmmKvStore() override;
    VmmKvStore(const VmmKvStore &) = delete;
    VmmKvStore &operator=(const VmmKvStore &) = delete;

    KvMode mode() const override { return KvMode::Vmm; }
    // Commits each region up to the next granule boundary covering n_tokens rows; capacity()
    // may therefore exceed n_tokens (up to the granule). Never copies.
    void ensure(int n_tokens) override;
    // Gives the pages back (MADV_DONTNEED) and makes the range inaccessible again; the
    // reservation, and so every pointer, stays.
    void clear() override;
    uint8_t *key_data(int layer) override;
    uint8_t *value_data(int layer) override;
    uint64_t reserved_bytes() const override { return m_reserved; }
    uint64_t resident_bytes() const override
    {
        return (uint64_t(m_committed[0]) + m_committed[1]) * uint64_t(m_n_layer);
    }

    // Commits happen in steps of this many bytes per region (64 KiB, or the page size if
    // larger): a 4 KiB step would mean an mprotect every few tokens for small rows, a larger
    // one would hold more unused memory per region (at most one granule each).
    static size_t commit_granule();

private:
    // Layer l's keys (side 0) or values (side 1).
    char *region(int layer, int side) const
    {
        return m_base + size_t(layer) * (m_stride[0] + m_stride[1]) + (side == 1 ? m_stride[0] : 0);
    }
    // Rows the committed bytes hold on both sides.
    int committed_rows() const;

    char *m_base = nullptr;
    size_t m_stride[2] = {0, 0};    // bytes per key / value region, multiples of commit_granule()
    uint64_t m_reserved = 0;        // the whole reservation
    size_t m_committed[2] = {0, 0}; // bytes readable and writable at the start of every key / value region
};

} // namespace longscope
