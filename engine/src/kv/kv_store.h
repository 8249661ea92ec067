// KV cache storage, one implementation per mode (see settings.h KvMode). A store holds, per
// layer, keys and values as rows of n_embd_kv values indexed by position, each in its own
// KvType (f32, f16, or ggml's q8_0 / q4_0 blocks; a row is n_embd_kv / block blocks, so with
// the head size a multiple of 32 every head is a whole number of blocks). The forward pass
// calls ensure(n) before writing positions < n, then writes rows in place through
// key_data() / value_data() (keys() / values() for f32 rows); those pointers are valid until
// the next ensure() or clear().
#pragma once

#include "backend/backend.h"
#include "longscope/settings.h"
#include "longscope/types.h"

#include <cstdint>
#include <memory>

namespace longscope {

// The CPU backend's caches (host memory).
class KvStore : public KvCache {
public:
    // Memory the process can still make resident (core/system_memory.h): lets a KV mode refuse
    // a commit that could only end with the OOM killer instead of an exception.
    static uint64_t available_memory_bytes();
    int n_layer() const { return m_n_layer; }
    int limit() const override { return m_limit; }
    int n_embd_kv() const { return m_n_embd_kv; }
    int capacity() const { return m_capacity; }   // positions writable now
    KvType type_k() const override { return m_type_k; }
    KvType type_v() const override { return m_type_v; }
    // Bytes of one cached row of keys / values.
    uint64_t key_row_bytes() const { return kv_type_row_bytes(m_type_k, m_n_embd_kv); }
    uint64_t value_row_bytes() const { return kv_type_row_bytes(m_type_v, m_n_embd_kv); }
    // [capacity] rows of one layer, key_row_bytes() / value_row_bytes() apart.
    virtual uint8_t *key_data(int layer) = 0;
    virtual uint8_t *value_data(int layer) = 0;
    // The rows as floats: InvalidArgument unless the store holds that side as f32.
    float *keys(int layer) override;
    float *values(int layer) override;

    // ensure(n_tokens): n_tokens may not exceed limit(); OutOfMemory leaves the store
    // unchanged and still usable. clear() gives memory back where the mode allows it.
    uint64_t copied_bytes() const override { return m_copied; }
    // Every mode keeps a layer's rows contiguous, so one move per layer and K/V does it.
    void shift(int n_tokens, int keep, int drop) override;
    uint64_t peak_resident_bytes() const override { return m_peak_resident; }

protected:
    KvStore(int n_layer, int limit, int n_embd_kv, KvType type_k, KvType type_v)
        : m_n_layer(n_layer), m_limit(limit), m_n_embd_kv(n_embd_kv), m_type_k(type_k), m_type_v(type_v) {}
    // Raises the peak to resident_bytes() + transient_extra; call after every change in
    // residency, with the extra a mode holds only for the moment (concat's old buffers).
    void note_resident(uint64_t transient_extra = 0);

    // Helpers shared by the modes (kv_store.cpp). Each mode's constructor calls check_shape()
    // first, so a store built directly is as safe as one from make_kv_store().
    // InvalidArgument for a non-positive size or a row that is not whole blocks of a type;
    // OutOfMemory when the full store (limit rows of K and V in every layer) does not even
    // fit in 64 bits.
    void check_shape() const;
    // Bytes of the rows of one side (keys: 0, values: 1).
    uint64_t side_row_bytes(int side) const { return side == 0 ? key_row_bytes() : value_row_bytes(); }
    // K and V of every layer for n_tokens rows; exact (no overflow) for n_tokens <= limit()
    // once check_shape() passed.
    uint64_t bytes_for(int n_tokens) const
    {
        return uint64_t(n_tokens) * (key_row_bytes() + value_row_bytes()) * uint64_t(m_n_layer);
    }
    // InvalidArgument for n_tokens < 0, ContextOverflow for n_tokens > limit().
    void check_ensure(int n_tokens) const;
    // InvalidArgument for a layer outside [0, n_layer).
    void check_layer(int layer) const;
    // The actionable OutOfMemory every mode throws: how much, for how many tokens, why, and
    // what to change.
    [[noreturn]] void throw_out_of_memory(uint64_t bytes, int n_tokens, const char *why) const;

    int m_n_layer;
    int m_limit;
    int m_n_embd_kv;
    KvType m_type_k;
    KvType m_type_v;
    int m_capacity = 0;
    uint64_t m_copied = 0;
    uint64_t m_peak_resident = 0;
};

// Throws InvalidArgument for KvMode::None (that mode keeps no store) or bad sizes, and
// OutOfMemory when the static buffers or the vmm reservation cannot be had.
std::unique_ptr<KvStore> make_kv_store(KvMode mode, int n_layer, int limit, int n_embd_kv,
                                       KvType type_k = KvType::F32, KvType type_v = KvType::F32);

// The weight type a KV type's rows are encoded as (cpu/quant.h).
DType kv_dtype(KvType t);

// Encodes n_rows rows of n_embd_kv floats into a store's key (side 0) or value (side 1) rows
// of `layer` starting at pos0: quantized once, here, with ggml's reference quantizers.
void write_kv_rows(KvStore &store, int side, int layer, int64_t pos0, const float *src, int64_t n_rows);

// Copies positions [0, n_tokens) of every layer from one store to another (ensure()s the
// destination first). Used when the mode changes mid-conversation, and when the KV types do:
// rows of another type are decoded and encoded again (q8_0 -> f32 gives the q8_0 values
// exactly; f32 -> q8_0 quantizes as writing the row would).
void copy_kv_rows(KvStore &from, KvStore &to, int n_tokens);

} // namespace longscope
