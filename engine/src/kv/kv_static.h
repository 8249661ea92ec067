// The `static` KV mode (like HF StaticCache): per layer, one K and one V buffer for the whole
// context limit, allocated and made resident when the store is built, then written in place.
// Never grows, never copies; pays the full limit in memory from the first token.
#pragma once

#include "kv/kv_store.h"

#include <vector>

namespace longscope {

class StaticKvStore final : public KvStore {
public:
    // Allocates and zero-fills every buffer, so the memory really is resident (the ledger
    // shows what the process actually holds) and an impossible size fails here, at build
    // time, instead of at some later token. Throws OutOfMemory.
    StaticKvStore(int n_layer, int limit, int n_embd_kv, KvType type_k = KvType::F32,
                  KvType type_v = KvType::F32);
    ~StaticKvStore() override;
    StaticKvStore(const StaticKvStore &) = delete;
    StaticKvStore &operator=(const StaticKvStore &) = delete;

    KvMode mode() const override { return KvMode::Static; }
    // Only checks bounds: capacity() is limit() from the start.
    void ensure(int n_tokens) override;
    // Keeps the buffers (this mode never gives memory back) and does not zero them: the
    // forward pass reads only rows it has written since.
    void clear() override {}
    uint8_t *key_data(int layer) override;
    uint8_t *value_data(int layer) override;
    uint64_t reserved_bytes() const override { return bytes_for(m_limit); }
    uint64_t resident_bytes() const override { return bytes_for(m_limit); }

private:
    std::vector<uint8_t *> m_buffers; // [2 * layer] keys, [2 * layer + 1] values; freed with free()
};

} // namespace longscope
