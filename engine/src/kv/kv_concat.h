// The `concat` KV mode: what a cache built on torch.cat does. Every growth allocates fresh
// per-layer K and V buffers of exactly the new length, copies the old rows over and frees the
// old buffers. Over a generation of N tokens that copies O(N^2) bytes and, during each copy,
// holds the old and the new buffers at once; the store exists to make both costs visible.
#pragma once

#include "kv/kv_store.h"

#include <vector>

namespace longscope {

class ConcatKvStore final : public KvStore {
public:
    // Allocates nothing yet: capacity 0 until the first ensure().
    ConcatKvStore(int n_layer, int limit, int n_embd_kv, KvType type_k = KvType::F32,
                  KvType type_v = KvType::F32);
    ~ConcatKvStore() override;
    ConcatKvStore(const ConcatKvStore &) = delete;
    ConcatKvStore &operator=(const ConcatKvStore &) = delete;

    KvMode mode() const override { return KvMode::Concat; }
    // Reallocates and copies whenever n_tokens > capacity(); the new capacity is exactly
    // n_tokens (no geometric slack, on purpose). Invalidates keys() / values().
    void ensure(int n_tokens) override;
    // Frees every buffer.
    void clear() override;
    uint8_t *key_data(int layer) override;
    uint8_t *value_data(int layer) override;
    // The current allocation; it is all written (or about to be), so both are the same.
    uint64_t reserved_bytes() const override { return bytes_for(m_capacity); }
    uint64_t resident_bytes() const override { return bytes_for(m_capacity); }

private:
    // [2 * layer] keys, [2 * layer + 1] values; malloc'd so a failure is a null, not a throw,
    // and so ASan checks every row access.
    std::vector<uint8_t *> m_buffers;
};

} // namespace longscope
