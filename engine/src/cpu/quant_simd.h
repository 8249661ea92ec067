// Vector extraction of the codes of llama.cpp's block types (quant.h), shared by the integer
// dot-product kernels (qdot.cpp) and the vector dequantizers (quant.cpp): bytes, where the
// fields of a block sit, and the codes of 64 values at a time as unsigned bytes. AVX-512 BW
// (no VNNI), so that every AVX-512 kernel may inline them; the scale unpacking is AVX2.
#pragma once

#include "cpu/quant.h"
#include "longscope/types.h"

#include <cstdint>
#include <cstring>
#include <immintrin.h>

#define LS_QSIMD512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LS_QSIMD256 __attribute__((target("avx2,fma,f16c")))

namespace longscope::qsimd {

// The 32-value block types: bytes per block, where the nibbles and the fifth bits sit, the
// code offset subtracted in integers (the bias, 0 for none) and whether a min is added.
template <DType T> constexpr bool is_block32 = T == DType::Q8_0 || T == DType::Q4_0 || T == DType::Q4_1 ||
                                               T == DType::Q5_0 || T == DType::Q5_1 || T == DType::IQ4_NL;
template <DType T> constexpr int64_t block32_bytes = T == DType::Q8_0   ? 34
                                                     : T == DType::Q4_1 ? 20
                                                     : T == DType::Q5_0 ? 22
                                                     : T == DType::Q5_1 ? 24
                                                                        : 18; // Q4_0, IQ4_NL
template <DType T> constexpr bool block32_min = T == DType::Q4_1 || T == DType::Q5_1;
template <DType T> constexpr bool block32_five = T == DType::Q5_0 || T == DType::Q5_1;
template <DType T> constexpr int block32_qs = T == DType::Q4_1 ? 4 : T == DType::Q5_0 ? 6 : T == DType::Q5_1 ? 8 : 2;
template <DType T> constexpr int block32_qh = T == DType::Q5_1 ? 4 : 2;

// The 256-value types added later (Q2_K, Q3_K, Q5_K, IQ4_XS) share one kernel per set: a scale
// per 16 values (Q2_K, Q3_K) or per 32; codes offset in integers (Q3_K 4; IQ4_XS's table values
// + 128 on VNNI); a min subtracted per group (Q2_K, Q5_K).
template <DType T> constexpr bool is_k_ext = T == DType::Q2_K || T == DType::Q3_K || T == DType::Q5_K ||
                                             T == DType::IQ4_XS;
template <DType T> constexpr bool k_groups16 = T == DType::Q2_K || T == DType::Q3_K;
template <DType T> constexpr int k_bias = T == DType::Q3_K ? 4 : 0;
template <DType T> constexpr bool k_min = T == DType::Q2_K || T == DType::Q5_K;
template <DType T> constexpr int64_t k_bytes = T == DType::Q2_K   ? 84
                                               : T == DType::Q3_K ? 110
                                               : T == DType::Q5_K ? 176
                                                                  : 136;

template <DType T> constexpr int block32_bias = T == DType::Q8_0 || T == DType::IQ4_NL ? 128
                                                : T == DType::Q4_0                     ? 8
                                                : T == DType::Q5_0                     ? 16
                                                                                       : 0;


// The nibbles of two 32-blocks (16 bytes each; the second absent for an odd last block) as 64
// codes in value order: low nibbles of the first, its high nibbles, then the second's.
LS_QSIMD512 inline __m512i nibble_pair_512(const uint8_t *q0, const uint8_t *q1)
{
    const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(q0));
    const __m128i b1 = q1 ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(q1)) : _mm_setzero_si128();
    const __m256i a0 = _mm256_set_m128i(_mm_srli_epi16(b0, 4), b0);
    const __m256i a1 = _mm256_set_m128i(_mm_srli_epi16(b1, 4), b1);
    return _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a0), a1, 1), _mm512_set1_epi8(0x0F));
}

// IQ4_NL's table + 128 (unsigned) in every 128-bit lane, for vpshufb lookups of nibbles.
LS_QSIMD512 inline __m512i iq4_table_u8_512()
{
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i *>(iq4_nl_values));
    return _mm512_broadcast_i32x4(_mm_xor_si128(t, _mm_set1_epi8(char(0x80))));
}

// The unsigned codes u of one or two 32-blocks (u - bias is the signed code).
template <DType T> LS_QSIMD512 inline __m512i block32_codes_512(const uint8_t *p, bool full)
{
    constexpr int64_t bb = block32_bytes<T>;
    if constexpr (T == DType::Q8_0) {
        const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 2));
        const __m256i q1 = full ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + bb + 2)) : _mm256_setzero_si256();
        return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1), _mm512_set1_epi8(char(0x80)));
    } else {
        constexpr int qs = block32_qs<T>;
        __m512i u = nibble_pair_512(p + qs, full ? p + bb + qs : nullptr);
        if constexpr (block32_five<T>) {
            uint32_t h0, h1 = 0;
            std::memcpy(&h0, p + block32_qh<T>, 4);
            if (full)
                std::memcpy(&h1, p + bb + block32_qh<T>, 4);
            const __mmask64 high = __mmask64(h0) | (__mmask64(h1) << 32);
            u = _mm512_or_si512(u, _mm512_maskz_mov_epi8(high, _mm512_set1_epi8(0x10)));
        }
        if constexpr (T == DType::IQ4_NL)
            u = _mm512_shuffle_epi8(iq4_table_u8_512(), u);
        return u;
    }
}

// Bytes of a 32-byte field twice, the upper copy's bytes tested against another bit: lanes
// whose byte has bit `lo` (lower half) or `hi` (upper half) set.
LS_QSIMD512 inline __mmask64 bit_lanes_512(const uint8_t *field, int lo, int hi)
{
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(field)));
    const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8(char(1 << lo)), _mm256_set1_epi8(char(1 << hi)), 1);
    return _mm512_test_epi8_mask(v, sel);
}

// A 32-byte field twice, shifted right by `lo` bits (lower copy) and `hi` bits (upper copy).
LS_QSIMD512 inline __m512i shifted_pair_512(const uint8_t *field, int lo, int hi)
{
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(field)));
    return _mm512_srlv_epi16(v, _mm512_inserti64x4(_mm512_set1_epi16(short(lo)), _mm256_set1_epi16(short(hi)), 1));
}

// The 64 unsigned codes of chunk k (values 64 k .. 64 k + 63) of a super-block.
template <DType T> LS_QSIMD512 inline __m512i k_codes_512(const uint8_t *p, int k)
{
    if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
        // Values 128 h + 32 j + l are bits 2 j of byte l of the half's 32 bytes: chunk k holds
        // j = 2 (k % 2) and 2 (k % 2) + 1 of half k / 2.
        const int j = 2 * (k % 2);
        const uint8_t *qs = p + (T == DType::Q2_K ? 16 : 32) + 32 * (k / 2);
        const __m512i low = _mm512_and_si512(shifted_pair_512(qs, 2 * j, 2 * j + 2), _mm512_set1_epi8(3));
        if constexpr (T == DType::Q2_K)
            return low;
        else // value i's third bit: bit i / 32 of hmask[i % 32]
            return _mm512_or_si512(low, _mm512_maskz_mov_epi8(bit_lanes_512(p, 2 * k, 2 * k + 1), _mm512_set1_epi8(4)));
    } else if constexpr (T == DType::Q5_K) {
        const __m512i nib = _mm512_and_si512(shifted_pair_512(p + 48 + 32 * k, 0, 4), _mm512_set1_epi8(0x0F));
        return _mm512_or_si512(nib, _mm512_maskz_mov_epi8(bit_lanes_512(p + 16, 2 * k, 2 * k + 1), _mm512_set1_epi8(0x10)));
    } else { // IQ4_XS: blocks 2k and 2k+1, 16 bytes each, through the table + 128
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 8 + 32 * k));
        const __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
        // {lo0, lo1, hi0, hi1} (128-bit lanes) -> {lo0, hi0, lo1, hi1}: value order
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        return _mm512_shuffle_epi8(iq4_table_u8_512(), _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)));
    }
}

// The sixteen scales of a Q3_K super-block minus 32 (q3_k_scales) as int8 lanes: the low
// nibbles of bytes 0-7 (groups 0-7) and their high nibbles (groups 8-15), with two bits each
// from bytes 8-11 (group g: bits 2 (g / 4) of byte 8 + g % 4) above them.
LS_QSIMD256 inline __m128i q3_k_unpack_scales(const uint8_t *packed)
{
    alignas(16) uint8_t b[16] = {};
    std::memcpy(b, packed, 12); // the block's last bytes: no load past them
    const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i *>(b));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    uint32_t hw;
    std::memcpy(&hw, packed + 8, 4);
    const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(int(hw)), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}

// The eight block scales of an IQ4_XS super-block minus 32 (iq4_xs_scale) as int32 lanes.
LS_QSIMD256 inline __m256i iq4_xs_unpack_scales(const uint8_t *p)
{
    uint32_t lw;
    uint16_t h;
    std::memcpy(&lw, p + 4, 4);
    std::memcpy(&h, p + 2, 2);
    const __m128i l = _mm_cvtsi32_si128(int(lw));
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(l, _mm_set1_epi8(0x0F)),
                                          _mm_and_si128(_mm_srli_epi16(l, 4), _mm_set1_epi8(0x0F)));
    const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                          _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
}

} // namespace longscope::qsimd
