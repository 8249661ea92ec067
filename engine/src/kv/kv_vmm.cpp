#include "kv/kv_vmm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace longscope {

namespace {

size_t page_size()
{
    static const size_t size = [] {
        const long p = sysconf(_SC_PAGESIZE);
        return p > 0 ? size_t(p) : size_t(4096);
    }();
    return size;
}

size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

} // namespace

size_t VmmKvStore::commit_granule()
{
    return std::max(size_t(64) << 10, page_size());
}

VmmKvStore::VmmKvStore(int n_layer, int limit, int n_embd_kv, KvType type_k, KvType type_v)
    : KvStore(n_layer, limit, n_embd_kv, type_k, type_v)
{
    check_shape();
    const size_t granule = commit_granule();
    uint64_t total = 0;
    for (int side = 0; side < 2; ++side) {
        const uint64_t region_bytes = uint64_t(limit) * side_row_bytes(side); // fits: check_shape()
        uint64_t stride = 0, all = 0;
        if (__builtin_add_overflow(region_bytes, uint64_t(granule) - 1, &stride) ||
            __builtin_mul_overflow(stride / granule * granule, uint64_t(n_layer), &all) ||
            __builtin_add_overflow(total, all, &total))
            throw_out_of_memory(bytes_for(limit), limit, "more address space than exists");
        m_stride[side] = size_t(stride / granule * granule);
    }

    // PROT_NONE + MAP_NORESERVE: address space only, no commit charge, nothing resident.
    void *p = mmap(nullptr, size_t(total), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        const std::string why = "reserving " + std::to_string(total >> 20) +
                                " MiB of address space failed (" + std::strerror(errno) + ")";
        throw_out_of_memory(bytes_for(limit), limit, why.c_str());
    }
    m_base = static_cast<char *>(p);
    m_reserved = total;
}

VmmKvStore::~VmmKvStore()
{
    if (m_base)
        munmap(m_base, size_t(m_reserved));
}

int VmmKvStore::committed_rows() const
{
    uint64_t rows = uint64_t(m_limit);
    for (int side = 0; side < 2; ++side)
        rows = std::min<uint64_t>(rows, m_committed[side] / side_row_bytes(side));
    return int(rows);
}

void VmmKvStore::ensure(int n_tokens)
{
    check_ensure(n_tokens);
    if (n_tokens <= m_capacity)
        return;

    size_t want[2];
    for (int side = 0; side < 2; ++side)
        want[side] = std::min(round_up(size_t(n_tokens) * size_t(side_row_bytes(side)), commit_granule()),
                              m_stride[side]);
    const auto widen = [&](int layer, int side, int prot) {
        return mprotect(region(layer, side) + m_committed[side], want[side] - m_committed[side], prot);
    };
    for (int i = 0; i < 2 * m_n_layer; ++i) {
        if (widen(i / 2, i % 2, PROT_READ | PROT_WRITE) != 0) {
            const int err = errno;
            // Undo the regions already widened so the store stays as it was. Those new pages
            // were never written (nothing past capacity is), so there is nothing to discard.
            for (int j = 0; j < i; ++j)
                widen(j / 2, j % 2, PROT_NONE);
            const std::string why = std::string("committing pages with mprotect failed (") + std::strerror(err) + ")";
            throw_out_of_memory(bytes_for(n_tokens), n_tokens, why.c_str());
        }
    }
    m_committed[0] = want[0];
    m_committed[1] = want[1];
    m_capacity = committed_rows();
    note_resident();
}

void VmmKvStore::clear()
{
    if (m_committed[0] == 0 && m_committed[1] == 0)
        return;
    // DONTNEED drops the pages (the next commit sees zeros); PROT_NONE makes a stale pointer
    // fault instead of silently reading a forgotten conversation. One call each over the whole
    // reservation: untouched parts cost nothing, and the VMAs merge back into one.
    madvise(m_base, size_t(m_reserved), MADV_DONTNEED);
    if (mprotect(m_base, size_t(m_reserved), PROT_NONE) == 0)
        m_committed[0] = m_committed[1] = 0;
    // Otherwise (only if the kernel cannot split its mappings) the pages stay accessible, and
    // committed, but empty: the accounting still matches what a later ensure() relies on.
    m_capacity = committed_rows();
}

uint8_t *VmmKvStore::key_data(int layer)
{
    check_layer(layer);
    return reinterpret_cast<uint8_t *>(region(layer, 0));
}

uint8_t *VmmKvStore::value_data(int layer)
{
    check_layer(layer);
    return reinterpret_cast<uint8_t *>(region(layer, 1));
}

} // namespace longscope
