// Activation buffers aligned to a cache line. The heap promises 16 bytes; a 64-byte AVX-512
// load from an address that is not a multiple of 64 spans two cache lines, so whether every
// load of a decode step's activations did depended on the heap's layout that run (F16 decode
// on one thread measured 9.5-9.8 tok/s with one layout and 11.9-12.2 with another).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace longscope {

template <class T, std::size_t Align = 64>
struct CacheLineAllocator {
    using value_type = T;
    CacheLineAllocator() = default;
    template <class U>
    CacheLineAllocator(const CacheLineAllocator<U, Align> &) noexcept
    {
    }
    template <class U>
    struct rebind {
        using other = CacheLineAllocator<U, Align>;
    };
    T *allocate(std::size_t n) { return static_cast<T *>(::operator new(n * sizeof(T), std::align_val_t(Align))); }
    void deallocate(T *p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(Align)); }
    friend bool operator==(const CacheLineAllocator &, const CacheLineAllocator &) { return true; }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

} // namespace longscope
