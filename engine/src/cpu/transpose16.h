// A 16 x 16 transpose of 32-bit elements in sixteen AVX-512 registers, for the kernels that
// turn rows into tiles or tiles into rows: the AMX activations' and results' layouts
// (amx.cpp) and packed groups widened to BF16 rows (packed.cpp). Always inlined into the
// caller's own AVX-512 build.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace longscope {

// r[i][j] = r[j][i] for 16 x 16 32-bit elements.
__attribute__((always_inline, target("avx512f"))) inline void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // u[4g + i]: column 4L + i of rows 4g..4g+3 in each 128-bit lane L.
    __m512i u[16];
    for (int g = 0; g < 4; ++g) {
        u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int i = 0; i < 4; ++i) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[i], u[4 + i], 0x88), v1 = _mm512_shuffle_i32x4(u[i], u[4 + i], 0xdd);
        const __m512i w0 = _mm512_shuffle_i32x4(u[8 + i], u[12 + i], 0x88),
                      w1 = _mm512_shuffle_i32x4(u[8 + i], u[12 + i], 0xdd);
        r[i] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        r[8 + i] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
        r[4 + i] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        r[12 + i] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
    }
}

} // namespace longscope

#endif
