#include "kv/kv_store.h"

#include "core/system_memory.h"
#include "kv/kv_concat.h"
#include "kv/kv_static.h"
#include "kv/kv_vmm.h"

#include "longscope/errors.h"

#include <algorithm>
#include <cstring>
#include <string>

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
                      ", K and V of " + std::to_string(m_n_embd_kv) + " floats per token), " +
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
    const size_t bytes = size_t(moved) * row_bytes();
    for (int l = 0; l < m_n_layer; ++l)
        for (float *rows : {keys(l), values(l)})
            std::memmove(rows + int64_t(keep) * m_n_embd_kv, rows + int64_t(keep + drop) * m_n_embd_kv, bytes);
}

uint64_t KvStore::available_memory_bytes() { return longscope::available_memory_bytes(); }

std::unique_ptr<KvStore> make_kv_store(KvMode mode, int n_layer, int limit, int n_embd_kv)
{
    switch (mode) {
    case KvMode::None:
        break;
    case KvMode::Concat:
        return std::make_unique<ConcatKvStore>(n_layer, limit, n_embd_kv);
    case KvMode::Static:
        return std::make_unique<StaticKvStore>(n_layer, limit, n_embd_kv);
    case KvMode::Vmm:
        return std::make_unique<VmmKvStore>(n_layer, limit, n_embd_kv);
    }
    throw InvalidArgument("the KV cache mode '" + std::string(to_string(mode)) +
                          "' keeps no store; the session recomputes the sequence instead");
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
    const size_t bytes = size_t(n_tokens) * size_t(from.n_embd_kv()) * sizeof(float);
    for (int l = 0; l < from.n_layer(); ++l) {
        std::memcpy(to.keys(l), from.keys(l), bytes);
        std::memcpy(to.values(l), from.values(l), bytes);
    }
}

} // namespace longscope
