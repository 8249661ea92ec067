// What the integer dot product's vector tiles share with qdot.cpp: block sizes, the Q4_K
// scale unpacking and the tables of tiles. The tiles of each kernel set are a translation unit
// of their own (qdot_vnni.cpp, qdot_avx2.cpp), so that a build compiles them side by side.
#pragma once

#include "cpu/qdot.h"
#include "cpu/quant_simd.h"
#include "longscope/types.h"

#include <cstdint>
#include <cstring>
#include <immintrin.h>

namespace longscope::qdot_detail {

constexpr int64_t qk = 32;   // activation block, Q8_0 and Q4_0 block
constexpr int64_t qk_k = 256; // K-quant super-block
constexpr int64_t q8_0_bytes = 34, q4_0_bytes = 18, q4_k_bytes = 144, q6_k_bytes = 210;

inline uint16_t load_u16(const uint8_t *p)
{
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

// The 12 packed bytes of a Q4_K super-block (layout in quant.h) as 16 bytes: the eight 6-bit
// scales, then the eight 6-bit mins. As 32-bit lanes w0 w1 w2 (the 4 bytes loaded beyond them
// lie inside the block and are ignored): lanes {w0, w1} & 63 give scales 0-3 and mins 0-3;
// {w2, w2 >> 4} & 0x0f, with the top two bits of each byte of {w0, w1} above, give scales 4-7
// and mins 4-7. Used by the AVX2 and the VNNI kernels.
__attribute__((target("avx2"))) inline __m128i q4_k_unpack_scales(const uint8_t *packed)
{
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(packed));
    const __m128i low6 = _mm_and_si128(v, _mm_set1_epi8(0x3f));
    const __m128i w2 = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0xAA), _mm_setr_epi32(0, 4, 0, 0));
    const __m128i top = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(v, 6), _mm_set1_epi8(0x03)), 4);
    const __m128i high = _mm_or_si128(_mm_and_si128(w2, _mm_set1_epi8(0x0f)), top);
    return _mm_unpacklo_epi32(low6, high); // {sc 0-3, sc 4-7, m 0-3, m 4-7}
}

using QTileFn = void (*)(const uint8_t *const *, const QuantizedActs &, int64_t, float *, int64_t);

#define LS_QTILE_TABLE(kernel)                                                                               \
    template <DType T> QTileFn kernel##_fn(int R, int NT)                                                   \
    {                                                                                                        \
        static const QTileFn table[4][4] = {                                                                 \
            {kernel<T, 1, 1>, kernel<T, 1, 2>, kernel<T, 1, 3>, kernel<T, 1, 4>},                            \
            {kernel<T, 2, 1>, kernel<T, 2, 2>, kernel<T, 2, 3>, kernel<T, 2, 4>},                            \
            {kernel<T, 3, 1>, kernel<T, 3, 2>, kernel<T, 3, 3>, kernel<T, 3, 4>},                            \
            {kernel<T, 4, 1>, kernel<T, 4, 2>, kernel<T, 4, 3>, kernel<T, 4, 4>}};                           \
        return table[R - 1][NT - 1];                                                                         \
    }

// The tile of `type` from a kernel set's tables (Tiles::get<T>(R, NT)), or null for a type
// without one.
template <class Tiles> QTileFn tile_of(DType type, int R, int NT)
{
    switch (type) {
    case DType::Q8_0: return Tiles::template get<DType::Q8_0>(R, NT);
    case DType::Q4_0: return Tiles::template get<DType::Q4_0>(R, NT);
    case DType::Q4_1: return Tiles::template get<DType::Q4_1>(R, NT);
    case DType::Q5_0: return Tiles::template get<DType::Q5_0>(R, NT);
    case DType::Q5_1: return Tiles::template get<DType::Q5_1>(R, NT);
    case DType::IQ4_NL: return Tiles::template get<DType::IQ4_NL>(R, NT);
    case DType::Q2_K: return Tiles::template get<DType::Q2_K>(R, NT);
    case DType::Q3_K: return Tiles::template get<DType::Q3_K>(R, NT);
    case DType::Q4_K: return Tiles::template get<DType::Q4_K>(R, NT);
    case DType::Q5_K: return Tiles::template get<DType::Q5_K>(R, NT);
    case DType::Q6_K: return Tiles::template get<DType::Q6_K>(R, NT);
    case DType::IQ4_XS: return Tiles::template get<DType::IQ4_XS>(R, NT);
    default: return nullptr;
    }
}

// The VNNI (qdot_vnni.cpp) and the AVX2 (qdot_avx2.cpp) tile of `type` with R rows and NT
// tokens, or null for a type without one.
QTileFn vnni_tile(DType type, int R, int NT);
QTileFn avx2_tile(DType type, int R, int NT);

} // namespace longscope::qdot_detail
