#pragma once
// Sixteen floats as one value (the GCC/Clang vector extension) for the CPU kernels written
// once and built for several targets: one AVX-512 register where the including function is
// built for AVX-512, two AVX2 registers (or four SSE ones) elsewhere. Everything here is
// always inlined, so each target's build of a kernel gets its own instructions; GCC fuses
// a * b + c into an FMA at the same places in every build with FMA, so those builds compute
// the same bits.
//
// Only for the engine's CPU sources (simd.cpp, attention.cpp): not part of any interface.

#include <cstdint>
#include <cstring>

// Returning a 64-byte vector from an inlined helper: GCC's ABI note for functions built
// without AVX-512 does not apply to always-inlined code.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace longscope::vec16 {

typedef float V16 __attribute__((vector_size(64)));
typedef int32_t V16i __attribute__((vector_size(64)));

#define LS_VEC16_INLINE __attribute__((always_inline)) inline

// Eight floats: one AVX2 register (attention's blocks outside AVX-512).
typedef float V8 __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));

// A vector of floats from (to) p, which need not be aligned.
template <class VT> LS_VEC16_INLINE VT loadv(const float *p)
{
    VT v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <class VT> LS_VEC16_INLINE void storev(float *p, VT v) { std::memcpy(p, &v, sizeof v); }
LS_VEC16_INLINE V16 load16(const float *p) { return loadv<V16>(p); }
LS_VEC16_INLINE void store16(float *p, V16 v) { storev(p, v); }
LS_VEC16_INLINE V16 splat(float f) { return V16{} + f; }

// e^x, a vector at a time (sixteen or eight lanes). x = n ln2 + r with n = round(x / ln2),
// |r| <= ln2 / 2 (ln2 in two parts, the first exact times any n here), e^r by its Taylor
// polynomial to r^7 (truncation under 0.1 ulp), times 2^n as two exact powers of two: 2^(n/2)
// first (exact), then 2^(n - n/2) in one rounding, so results past the float range overflow to inf and results below it
// underflow gradually to subnormals and 0, as std::exp's do; -inf gives 0. x is clamped to
// [-110, 89] first (e^x is 0 below and inf above either way); NaN lanes return x.
// Within 0.88 ulp of e^x over the float range where a * b + c is fused, 1.16 where it is not
// (tst_ops checks every 257th float).
template <class VT, class VTi> LS_VEC16_INLINE VT expv(VT x)
{
    const VTi nan = x != x;
    VT xc = nan ? VT{} : x;
    xc = xc < -110.0f ? VT{} - 110.0f : xc;
    xc = xc > 89.0f ? VT{} + 89.0f : xc;
    constexpr float round_magic = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer
    const VT nf = (xc * 1.44269504088896341f + round_magic) - round_magic;
    const VTi n = __builtin_convertvector(nf, VTi);
    const VT r = (xc - nf * 0.693145751953125f) - nf * 1.428606765330187e-06f;
    VT p = VT{} + 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const VTi n1 = n >> 1, n2 = n - n1;
    const VT e = (p * (VT)((n1 + 127) << 23)) * (VT)((n2 + 127) << 23);
    return nan ? x : e;
}

LS_VEC16_INLINE V16 exp16(V16 x) { return expv<V16, V16i>(x); }

// The same, eight at a time: the same bits per lane. For the builds with 16 vector registers
// of 32 bytes, where GCC (12) turns exp16's selects on 64-byte vectors into a compare and a
// conditional move per lane through the stack (attention's softmax took most of a long
// prefill's attention time that way).
LS_VEC16_INLINE V8 exp8(V8 x) { return expv<V8, V8i>(x); }

// The largest lane of a, NaN lanes left out (-inf where every lane is NaN): as a loop of
// std::max from -inf over the lanes, in four steps of halving instead of fifteen dependent
// ones (the maximum of a set is the same in any order).
LS_VEC16_INLINE float hmax16(V16 a)
{
    a = a == a ? a : V16{} - __builtin_inff();
    V16 b = __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    a = a < b ? b : a;
    b = __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    a = a < b ? b : a;
    b = __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    a = a < b ? b : a;
    b = __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    a = a < b ? b : a;
    return a[0];
}

// The sum of the sixteen lanes of lo (lanes 0-7) and hi (8-15) by halving: lane k + lane k + 8,
// then k + k ^ 4, k + k ^ 2, k + k ^ 1 (four dependent additions where a loop takes fifteen).
// hsum16 and hsum8x2 add in the same order, so the builds with either vector give the same bits.
LS_VEC16_INLINE float hsum8x2(V8 lo, V8 hi)
{
    V8 a = lo + hi;
    a = a + __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3);
    a = a + __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5);
    a = a + __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6);
    return a[0];
}
LS_VEC16_INLINE float hsum16(V16 a)
{
    return hsum8x2(__builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7),
                   __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15));
}

} // namespace longscope::vec16
