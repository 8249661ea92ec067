// The AVX2 tiles of the integer dot product (qdot.h; qdot.cpp dispatches to them).
#include "cpu/qdot_tiles.h"

#include <cstring>
#include <immintrin.h>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings inside the reduce
// intrinsics; the values are defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace longscope::qdot_detail {

namespace {

using namespace qsimd;

// ---- AVX2 ------------------------------------------------------------------------------------------

#define LS_AVX2Q __attribute__((target("avx2,fma,f16c")))

LS_AVX2Q inline float h2f_avx2(const uint8_t *p) { return _cvtsh_ss(load_u16(p)); }

// Sums of four u * x products per 32-bit lane (u unsigned <= 128, x signed: no saturation).
LS_AVX2Q inline __m256i dot4_avx2(__m256i u, __m256i x)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

LS_AVX2Q inline float hsum_avx2(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <int R, int NT>
LS_AVX2Q inline void pairs_avx2(const __m256i (&u)[R], const __m256 (&ws)[R], const __m256i (&xv)[NT],
                                const __m256i (&cv)[NT], const __m256 (&dv)[NT], __m256 (&acc)[R][NT])
{
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            const __m256i s = _mm256_sub_epi32(dot4_avx2(u[r], xv[t]), cv[t]);
            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(ws[r], dv[t]), acc[r][t]);
        }
}

// 0xFF in byte j where bit j of `bits` is set.
LS_AVX2Q inline __m256i bytes_of_bits_avx2(uint32_t bits)
{
    // Byte j takes byte j / 8 of the mask, then keeps bit j % 8.
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(int(bits)), _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i sel = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
}

// 0xFF in byte l where bit `bit` of field[l] (32 bytes) is set.
LS_AVX2Q inline __m256i bit_lanes_avx2(const uint8_t *field, int bit)
{
    const __m256i sel = _mm256_set1_epi8(char(1 << bit));
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(field));
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
}

// The 32 nibbles of 16 bytes in value order: low nibbles, then high ones.
LS_AVX2Q inline __m256i nibbles_avx2(const uint8_t *q)
{
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(q));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

// IQ4_NL's sixteen values (signed) in both 128-bit lanes.
LS_AVX2Q inline __m256i iq4_table_avx2()
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(iq4_nl_values)));
}

// Signed weights w (|w| <= 127) against signed activations: maddubs takes |w| as the unsigned
// operand and x with w's sign.
LS_AVX2Q inline __m256i signed_dot4_avx2(__m256i w, __m256i x)
{
    return dot4_avx2(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

template <DType T, int R, int NT>
LS_AVX2Q void tile_avx2(const uint8_t *const *rows, const QuantizedActs &a, int64_t t0, float *out, int64_t ldo)
{
    const int64_t n = a.n;
    __m256 acc[R][NT];
    const int8_t *xq[NT];
    const float *xl[NT], *xs[NT];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        xq[t] = a.q_row(t0 + t);
        xl[t] = a.dl_row(t0 + t);
        xs[t] = a.ds_row(t0 + t);
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
            acc[r][t] = _mm256_setzero_ps();
    }
    __m256i u[R], xv[NT], cv[NT];
    __m256 ws[R], dv[NT];

    if constexpr (T == DType::Q8_0) {
        // Signed by signed through the sign trick: |w| as the unsigned operand, x with w's sign.
        for (int64_t b = 0; b < n / qk; ++b) {
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                dv[t] = _mm256_loadu_ps(xl[t] + b * 8);
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t *p = rows[r] + b * q8_0_bytes;
                const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 2));
                const __m256 wsr = _mm256_set1_ps(h2f_avx2(p));
                const __m256i aw = _mm256_sign_epi8(w, w);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq[t] + b * qk));
                    const __m256i s = dot4_avx2(aw, _mm256_sign_epi8(x, w));
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wsr, dv[t]), acc[r][t]);
                }
            }
        }
    } else if constexpr (T == DType::IQ4_NL) {
        // The table's values are signed: Q8_0's sign trick on the looked-up weights.
        const __m256i table = iq4_table_avx2();
        for (int64_t b = 0; b < n / qk; ++b) {
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq[t] + b * qk));
                dv[t] = _mm256_loadu_ps(xl[t] + b * 8);
            }
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t *p = rows[r] + b * block32_bytes<DType::IQ4_NL>;
                const __m256i w = _mm256_shuffle_epi8(table, nibbles_avx2(p + 2));
                const __m256 wsr = _mm256_set1_ps(h2f_avx2(p));
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t)
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(signed_dot4_avx2(w, xv[t])), _mm256_mul_ps(wsr, dv[t]),
                                                acc[r][t]);
            }
        }
    } else if constexpr (is_block32<T>) {
        // Q4_0 (bias 8), Q4_1, Q5_0 (bias 16), Q5_1: the nibble, with the fifth bit for Q5_*;
        // Q4_1 and Q5_1 add m * d_x * sum(q_x) per block in lane 0.
        constexpr int64_t bb = block32_bytes<T>;
        const __m256i bias = _mm256_set1_epi8(char(block32_bias<T>));
        __m256 mv[R], dsv[NT];
        for (int64_t b = 0; b < n / qk; ++b) {
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq[t] + b * qk));
                dv[t] = _mm256_loadu_ps(xl[t] + b * 8);
                cv[t] = block32_bias<T> ? dot4_avx2(bias, xv[t]) : _mm256_setzero_si256();
                if constexpr (block32_min<T>)
                    dsv[t] = _mm256_setr_ps(xs[t][b], 0, 0, 0, 0, 0, 0, 0);
            }
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t *p = rows[r] + b * bb;
                u[r] = nibbles_avx2(p + block32_qs<T>);
                if constexpr (block32_five<T>) {
                    uint32_t qh;
                    std::memcpy(&qh, p + block32_qh<T>, 4);
                    u[r] = _mm256_or_si256(u[r], _mm256_and_si256(bytes_of_bits_avx2(qh), _mm256_set1_epi8(0x10)));
                }
                ws[r] = _mm256_set1_ps(h2f_avx2(p));
                if constexpr (block32_min<T>)
                    mv[r] = _mm256_set1_ps(h2f_avx2(p + 2));
            }
            pairs_avx2<R, NT>(u, ws, xv, cv, dv, acc);
            if constexpr (block32_min<T>)
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r)
                    #pragma GCC unroll 4
                    for (int t = 0; t < NT; ++t)
                        acc[r][t] = _mm256_fmadd_ps(mv[r], dsv[t], acc[r][t]);
        }
    } else if constexpr (T == DType::Q4_K) {
        // As the VNNI kernel: per super-block and pair the scale products
        //   scx = (d sc_j) dx_j and mnx = (dmin m_j) ds_j for the eight sub-blocks j,
        // the minimums subtracted at once, sub-block j scaled by lane j of scx.
        for (int64_t sb = 0; sb < n / qk_k; ++sb) {
            __m256 scv[R], mnv[R];
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t *p = rows[r] + sb * q4_k_bytes;
                const __m128i sm = q4_k_unpack_scales(p + 4);
                scv[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)), _mm256_set1_ps(h2f_avx2(p)));
                mnv[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))),
                                       _mm256_set1_ps(h2f_avx2(p + 2)));
            }
            __m256 scx[R][NT];
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                const __m256 dx = _mm256_loadu_ps(a.db_row(t0 + t) + sb * 8);
                const __m256 dsv = _mm256_loadu_ps(xs[t] + sb * 8);
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    scx[r][t] = _mm256_mul_ps(scv[r], dx);
                    acc[r][t] = _mm256_sub_ps(acc[r][t], _mm256_mul_ps(mnv[r], dsv));
                }
            }
            #pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const __m256i lane = _mm256_set1_epi32(j);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t)
                    xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq[t] + sb * qk_k + 32 * j));
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    const __m256i v = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i *>(rows[r] + sb * q4_k_bytes + 16 + 32 * (j / 2)));
                    const __m256i uj = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
                    #pragma GCC unroll 4
                    for (int t = 0; t < NT; ++t) {
                        const __m256i isum = dot4_avx2(uj, xv[t]);
                        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_permutevar8x32_ps(scx[r][t], lane),
                                                    acc[r][t]);
                    }
                }
            }
        }
    } else { // Q6_K: scx = (d sc_g) dx_(g/2) for the sixteen groups g of 16 values
        const __m256i bias = _mm256_set1_epi8(32);
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), m3 = _mm256_set1_epi8(0x03);
        const __m256i pair_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), pair_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
        for (int64_t sb = 0; sb < n / qk_k; ++sb) {
            __m256 sc[R][2];
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t *p = rows[r] + sb * q6_k_bytes;
                const __m256 d = _mm256_set1_ps(h2f_avx2(p + 208));
                const __m128i s16 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 192));
                sc[r][0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s16)));
                sc[r][1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s16, 8))));
            }
            __m256 scx[R][NT][2];
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                const __m256 dx = _mm256_loadu_ps(a.db_row(t0 + t) + sb * 8);
                const __m256 dlo = _mm256_permutevar8x32_ps(dx, pair_lo), dhi = _mm256_permutevar8x32_ps(dx, pair_hi);
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    scx[r][t][0] = _mm256_mul_ps(sc[r][0], dlo);
                    scx[r][t][1] = _mm256_mul_ps(sc[r][1], dhi);
                }
            }
            #pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) { // 32 values each: A, B, C, D of the first half, then of the second
                const int h = c / 4, part = c % 4;
                // Groups 2c and 2c+1: lanes 0-3 and 4-7 of this chunk.
                const __m256i lanes = _mm256_setr_epi32((2 * c) % 8, (2 * c) % 8, (2 * c) % 8, (2 * c) % 8,
                                                        (2 * c + 1) % 8, (2 * c + 1) % 8, (2 * c + 1) % 8, (2 * c + 1) % 8);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq[t] + sb * qk_k + 32 * c));
                    cv[t] = dot4_avx2(bias, xv[t]);
                }
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    const uint8_t *p = rows[r] + sb * q6_k_bytes;
                    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 64 * h + 32 * (part % 2)));
                    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 128 + 32 * h));
                    const __m256i low4 = part < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
                    __m256i top2;
                    if (part == 0)
                        top2 = _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4);
                    else if (part == 1)
                        top2 = _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30);
                    else if (part == 2)
                        top2 = _mm256_and_si256(hb, m30);
                    else
                        top2 = _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30);
                    const __m256i uc = _mm256_or_si256(low4, top2);
                    #pragma GCC unroll 4
                    for (int t = 0; t < NT; ++t) {
                        const __m256i isum = _mm256_sub_epi32(dot4_avx2(uc, xv[t]), cv[t]);
                        const __m256 wsc = _mm256_permutevar8x32_ps(scx[r][t][c / 4], lanes);
                        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), wsc, acc[r][t]);
                    }
                }
            }
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            out[t * ldo + r] = hsum_avx2(acc[r][t]);
}

// ---- AVX2: Q2_K, Q3_K, Q5_K, IQ4_XS ---------------------------------------------------------------

// The 32 codes of chunk c (values 32 c .. 32 c + 31) of a super-block: unsigned, or IQ4_XS's
// signed table values.
template <DType T> LS_AVX2Q inline __m256i k_codes_avx2(const uint8_t *p, int c)
{
    if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
        const uint8_t *qs = p + (T == DType::Q2_K ? 16 : 32) + 32 * (c / 4);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs));
        const __m256i low = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (c % 4))), _mm256_set1_epi8(3));
        if constexpr (T == DType::Q2_K)
            return low;
        else
            return _mm256_or_si256(low, _mm256_and_si256(bit_lanes_avx2(p, c), _mm256_set1_epi8(4)));
    } else if constexpr (T == DType::Q5_K) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 48 + 32 * (c / 2)));
        const __m256i nib = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(4 * (c % 2))), _mm256_set1_epi8(0x0F));
        return _mm256_or_si256(nib, _mm256_and_si256(bit_lanes_avx2(p + 16, c), _mm256_set1_epi8(0x10)));
    } else {
        return _mm256_shuffle_epi8(iq4_table_avx2(), nibbles_avx2(p + 8 + 16 * c));
    }
}

// The weight scales (and minimums) of a super-block as 8-lane vectors: per 16 values two
// halves (groups 0-7, 8-15), per 32 one (lane j: block j).
template <DType T> LS_AVX2Q inline void k_scales_avx2(const uint8_t *p, __m256 (&sc)[2], __m256 (&mn)[2])
{
    if constexpr (T == DType::Q2_K) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
        const __m256 d = _mm256_set1_ps(h2f_avx2(p + 80)), dmin = _mm256_set1_ps(h2f_avx2(p + 82));
        for (int h = 0; h < 2; ++h) {
            const __m256i b = _mm256_cvtepu8_epi32(h ? _mm_srli_si128(v, 8) : v);
            sc[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(0x0F))), d);
            mn[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), dmin);
        }
    } else if constexpr (T == DType::Q3_K) {
        const __m128i v = q3_k_unpack_scales(p + 96);
        const __m256 d = _mm256_set1_ps(h2f_avx2(p + 108));
        sc[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d);
        sc[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))), d);
    } else if constexpr (T == DType::Q5_K) {
        const __m128i sm = q4_k_unpack_scales(p + 4);
        sc[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)), _mm256_set1_ps(h2f_avx2(p)));
        mn[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))), _mm256_set1_ps(h2f_avx2(p + 2)));
    } else {
        sc[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(iq4_xs_unpack_scales(p)), _mm256_set1_ps(h2f_avx2(p)));
    }
}

// As the Q4_K / Q6_K AVX2 kernels: per super-block and pair the scale products (weight scale
// times the activations' d of the block), chunk c of 32 values scaled lane by lane; the
// minimums subtracted once per super-block.
template <DType T, int R, int NT>
LS_AVX2Q void tile_avx2_k(const uint8_t *const *rows, const QuantizedActs &a, int64_t t0, float *out, int64_t ldo)
{
    constexpr bool g16 = k_groups16<T>;
    constexpr int64_t bytes = k_bytes<T>;
    const int64_t n = a.n;
    const __m256i bias = _mm256_set1_epi8(char(k_bias<T>));
    const __m256i pair_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), pair_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    __m256 acc[R][NT];
    const int8_t *xq[NT];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        xq[t] = a.q_row(t0 + t);
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
            acc[r][t] = _mm256_setzero_ps();
    }
    __m256i xv[NT], cv[NT];
    for (int64_t sb = 0; sb < n / qk_k; ++sb) {
        __m256 scx[R][NT][2];
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            __m256 sc[2], mn[2];
            k_scales_avx2<T>(rows[r] + sb * bytes, sc, mn);
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                const __m256 dx = _mm256_loadu_ps(a.db_row(t0 + t) + sb * 8);
                if constexpr (g16) {
                    const __m256 dlo = _mm256_permutevar8x32_ps(dx, pair_lo), dhi = _mm256_permutevar8x32_ps(dx, pair_hi);
                    scx[r][t][0] = _mm256_mul_ps(sc[0], dlo);
                    scx[r][t][1] = _mm256_mul_ps(sc[1], dhi);
                    if constexpr (k_min<T>) {
                        const int32_t *s16 = a.s16_row(t0 + t) + sb * 16;
                        const __m256 x0 = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(s16)));
                        const __m256 x1 = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(s16 + 8)));
                        acc[r][t] = _mm256_fnmadd_ps(mn[0], _mm256_mul_ps(dlo, x0), acc[r][t]);
                        acc[r][t] = _mm256_fnmadd_ps(mn[1], _mm256_mul_ps(dhi, x1), acc[r][t]);
                    }
                } else {
                    scx[r][t][0] = _mm256_mul_ps(sc[0], dx);
                    if constexpr (k_min<T>)
                        acc[r][t] = _mm256_sub_ps(acc[r][t], _mm256_mul_ps(mn[0], _mm256_loadu_ps(a.ds_row(t0 + t) + sb * 8)));
                }
            }
        }
        #pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
            // Per 16: groups 2c and 2c+1 in lanes 0-3 and 4-7; per 32: block c in every lane.
            const __m256i lanes = g16 ? _mm256_setr_epi32((2 * c) % 8, (2 * c) % 8, (2 * c) % 8, (2 * c) % 8,
                                                          (2 * c + 1) % 8, (2 * c + 1) % 8, (2 * c + 1) % 8, (2 * c + 1) % 8)
                                      : _mm256_set1_epi32(c);
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq[t] + sb * qk_k + 32 * c));
                if constexpr (k_bias<T> != 0)
                    cv[t] = dot4_avx2(bias, xv[t]);
            }
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const __m256i w = k_codes_avx2<T>(rows[r] + sb * bytes, c);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    __m256i isum;
                    if constexpr (T == DType::IQ4_XS)
                        isum = signed_dot4_avx2(w, xv[t]);
                    else if constexpr (k_bias<T> != 0)
                        isum = _mm256_sub_epi32(dot4_avx2(w, xv[t]), cv[t]);
                    else
                        isum = dot4_avx2(w, xv[t]);
                    const __m256 ws = _mm256_permutevar8x32_ps(scx[r][t][g16 ? c / 4 : 0], lanes);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), ws, acc[r][t]);
                }
            }
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            out[t * ldo + r] = hsum_avx2(acc[r][t]);
}

LS_QTILE_TABLE(tile_avx2)
LS_QTILE_TABLE(tile_avx2_k)

struct Avx2Tiles {
    template <DType T> static QTileFn get(int R, int NT)
    {
        if constexpr (is_k_ext<T>)
            return tile_avx2_k_fn<T>(R, NT);
        else
            return tile_avx2_fn<T>(R, NT);
    }
};

} // namespace

QTileFn avx2_tile(DType type, int R, int NT) { return tile_of<Avx2Tiles>(type, R, NT); }

} // namespace longscope::qdot_detail
