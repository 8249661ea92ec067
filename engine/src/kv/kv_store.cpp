#include "kv/kv_store.h"

#include "core/system_memory.h"
#include "kv/kv_concat.h"
#include "kv/kv_static.h"
#include "kv/kv_vmm.h"
#include "cpu/quant.h"

#include "longscope/errors.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace longscope {

namespace {

std::string mib(uint64_t bytes)
{
    // Round up so a request of a few KiB never reads "0 MiB".
    return std::to_string((bytes + (uint64_t(1) << 20) - 1) >> 20) + " MiB";
}

std::string layers(int n)
{
    return std::to_string(n) + (n == 1 ? " layer" : " layers");
}

} // namespace

void KvStore::note_resident(uint64_t transient_extra)
{
    m_peak_resident = std::max(m_peak_resident, resident_bytes() + transient_extra);
}

void KvStore::check_shape() const
{
    if (m_n_layer <= 0 || m_limit <= 0 || m_n_embd_kv <= 0)
        throw InvalidArgument("a KV cache needs positive sizes; got " + std::to_string(m_n_layer) +
                              " layers, a limit of " + std::to_string(m_limit) + " tokens and " +
                              std::to_string(m_n_embd_kv) + " floats per row");
    // limit * n_embd_kv * 4 * n_layer * 2 must fit, so bytes_for() is exact for every n <= limit
    // and no mode ever computes a wrapped-around size.
    uint64_t total = 0;
    if (__builtin_mul_overflow(uint64_t(m_limit), uint64_t(m_n_embd_kv), &total) ||
        __builtin_mul_overflow(total, uint64_t(sizeof(float)) * 2, &total) ||
        __builtin_mul_overflow(total, uint64_t(m_n_layer), &total))
        throw OutOfMemory("the KV cache for " + std::to_string(m_limit) + " tokens (" +
                          layers(m_n_layer) + " of " + std::to_string(m_n_embd_kv) +
                          " floats per row) would need more than 16 EiB; lower the context limit");
    for (KvType t : {m_type_k, m_type_v})
        if (m_n_embd_kv % kv_type_block(t) != 0)
            throw InvalidArgument("a " + std::string(to_string(t)) + " KV cache needs rows of a multiple of " +
                                  std::to_string(kv_type_block(t)) + " values; got " +
                                  std::to_string(m_n_embd_kv));
}

float *KvStore::keys(int layer)
{
    if (m_type_k != KvType::F32)
        throw InvalidArgument("the KV cache holds its keys as " + std::string(to_string(m_type_k)) +
                              ", not as floats");
    return reinterpret_cast<float *>(key_data(layer));
}

float *KvStore::values(int layer)
{
    if (m_type_v != KvType::F32)
        throw InvalidArgument("the KV cache holds its values as " + std::string(to_string(m_type_v)) +
                              ", not as floats");
    return reinterpret_cast<float *>(value_data(layer));
}

void KvStore::check_ensure(int n_tokens) const
{
    if (n_tokens < 0)
        throw InvalidArgument("the KV cache cannot hold a negative number of tokens (" +
                              std::to_string(n_tokens) + ")");
    // ContextOverflow rather than InvalidArgument: the caller asked for more context than the
    // limit allows, which the session reports the same way as an over-long prompt.
    if (n_tokens > m_limit)
        throw ContextOverflow(std::to_string(n_tokens) + " tokens do not fit in the KV cache, whose limit is " +
                              std::to_string(m_limit) + " tokens; raise the context limit");
}

void KvStore::check_layer(int layer) const
{
    if (layer < 0 || layer >= m_n_layer)
        throw InvalidArgument("KV cache layer " + std::to_string(layer) + " is out of range [0, " +
                              std::to_string(m_n_layer) + ")");
}

void KvStore::throw_out_of_memory(uint64_t bytes, int n_tokens, const char *why) const
{
    std::string msg = "the " + std::string(to_string(mode())) + " KV cache needs " + mib(bytes) +
                      " for " + std::to_string(n_tokens) + " tokens (" + layers(m_n_layer) +
                      ", K and V of " + std::to_string(m_n_embd_kv) + " values per token as " +
                      std::string(to_string(m_type_k)) + " / " + std::string(to_string(m_type_v)) + "), " +
                      "which cannot be had: " + why + "; lower the context limit";
    if (mode() == KvMode::Vmm)
        msg += " or free memory";
    else
        msg += " or use the vmm mode, which commits memory only as tokens arrive";
    throw OutOfMemory(msg);
}

void KvStore::shift(int n_tokens, int keep, int drop)
{
    check_kv_shift(n_tokens, keep, drop, m_capacity);
    const int moved = n_tokens - keep - drop;
    if (drop == 0 || moved == 0)
        return;
    // Rows move as stored (f32, f16 or quantized blocks): a row's bytes do not depend on its
    // position.
    for (int l = 0; l < m_n_layer; ++l)
        for (int side : {0, 1}) {
            uint8_t *rows = side == 0 ? key_data(l) : value_data(l);
            const uint64_t rb = side_row_bytes(side);
            std::memmove(rows + uint64_t(keep) * rb, rows + uint64_t(keep + drop) * rb, uint64_t(moved) * rb);
        }
}

uint64_t KvStore::available_memory_bytes() { return longscope::available_memory_bytes(); }

std::unique_ptr<KvStore> make_kv_store(KvMode mode, int n_layer, int limit, int n_embd_kv, KvType type_k,
                                       KvType type_v)
{
    switch (mode) {
    case KvMode::None:
        break;
    case KvMode::Concat:
        return std::make_unique<ConcatKvStore>(n_layer, limit, n_embd_kv, type_k, type_v);
    case KvMode::Static:
        return std::make_unique<StaticKvStore>(n_layer, limit, n_embd_kv, type_k, type_v);
    case KvMode::Vmm:
        return std::make_unique<VmmKvStore>(n_layer, limit, n_embd_kv, type_k, type_v);
    }
    throw InvalidArgument("the KV cache mode '" + std::string(to_string(mode)) +
                          "' keeps no store; the session recomputes the sequence instead");
}

DType kv_dtype(KvType t)
{
    switch (t) {
    case KvType::F32: return DType::F32;
    case KvType::F16: return DType::F16;
    case KvType::Q8_0: return DType::Q8_0;
    case KvType::Q4_0: return DType::Q4_0;
    }
    throw InvalidArgument("unknown KV cache type");
}

namespace {

uint8_t *side_data(KvStore &s, int side, int layer) { return side == 0 ? s.key_data(layer) : s.value_data(layer); }
KvType side_type(const KvStore &s, int side) { return side == 0 ? s.type_k() : s.type_v(); }

} // namespace

void write_kv_rows(KvStore &store, int side, int layer, int64_t pos0, const float *src, int64_t n_rows)
{
    const int64_t n = store.n_embd_kv();
    const uint64_t rb = kv_type_row_bytes(side_type(store, side), n);
    uint8_t *dst = side_data(store, side, layer) + uint64_t(pos0) * rb;
    const KvType t = side_type(store, side);
    if (t == KvType::F32) {
        std::memcpy(dst, src, size_t(n_rows) * size_t(rb));
        return;
    }
    // Rows are contiguous in both, and a row is whole blocks: one call encodes them all.
    quantize_row(kv_dtype(t), src, dst, n_rows * n);
}

void copy_kv_rows(KvStore &from, KvStore &to, int n_tokens)
{
    if (from.n_layer() != to.n_layer() || from.n_embd_kv() != to.n_embd_kv())
        throw InvalidArgument("cannot copy KV rows between stores of different shapes (" +
                              std::to_string(from.n_layer()) + " x " + std::to_string(from.n_embd_kv()) +
                              " and " + std::to_string(to.n_layer()) + " x " +
                              std::to_string(to.n_embd_kv()) + ")");
    if (n_tokens < 0 || n_tokens > from.capacity())
        throw InvalidArgument("cannot copy " + std::to_string(n_tokens) +
                              " KV rows from a store holding " + std::to_string(from.capacity()));
    if (&from == &to)
        return;
    to.ensure(n_tokens); // may throw; `to` is then unchanged
    if (n_tokens == 0)
        return;
    // Pointers fetched after ensure(): a concat destination has just moved its buffers.
    const int64_t n = from.n_embd_kv();
    // Rows of another type go through floats, a bounded number of rows at a time.
    constexpr int64_t k_chunk = 64;
    std::vector<float> rows;
    for (int side = 0; side < 2; ++side) {
        const KvType tf = side_type(from, side), tt = side_type(to, side);
        const uint64_t rb = kv_type_row_bytes(tf, n);
        for (int l = 0; l < from.n_layer(); ++l) {
            const uint8_t *src = side_data(from, side, l);
            if (tf == tt) {
                std::memcpy(side_data(to, side, l), src, size_t(n_tokens) * size_t(rb));
                continue;
            }
            rows.resize(size_t(k_chunk * n));
            for (int64_t j = 0; j < n_tokens; j += k_chunk) {
                const int64_t cnt = std::min<int64_t>(k_chunk, n_tokens - j);
                dequantize_row(kv_dtype(tf), src + uint64_t(j) * rb, rows.data(), cnt * n);
                write_kv_rows(to, side, l, j, rows.data(), cnt);
            }
        }
    }
}

} // namespace longscope
