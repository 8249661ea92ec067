// Activation buffers aligned to a cache line. The heap promises 16 bytes; a 64-byte AVX-512
// load from an address that is not a multiple of 64 spans two cache lines, so whether every
// load of a decode step's activations did depended on the heap's layout that run (F16 decode
// on one thread measured 9.5-9.8 tok/s with one layout and 11.9-12.2 with another).
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>
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

// CacheLineAllocator for buffers that every use writes before it reads: a vector grown with
// resize leaves its new numbers unwritten instead of zeroing them. Prefill's quantized
// activations alternate between 2048 and 5632 values a token (TinyLlama): their vectors grew
// by several megabytes each layer, and the zeroing took 0.4% of a 512-token prefill.
template <class T, std::size_t Align = 64>
struct ScratchAllocator : CacheLineAllocator<T, Align> {
    ScratchAllocator() = default;
    template <class U>
    ScratchAllocator(const ScratchAllocator<U, Align> &) noexcept
    {
    }
    template <class U>
    struct rebind {
        using other = ScratchAllocator<U, Align>;
    };
    // Default-initialised, not value-initialised: no write for a number.
    template <class U>
    void construct(U *p) noexcept(std::is_nothrow_default_constructible_v<U>)
    {
        ::new (static_cast<void *>(p)) U;
    }
    template <class U, class... Args>
    void construct(U *p, Args &&...args)
    {
        ::new (static_cast<void *>(p)) U(std::forward<Args>(args)...);
    }
};

template <class T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

} // namespace longscope
