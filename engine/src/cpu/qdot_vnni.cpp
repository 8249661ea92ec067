// The AVX-512 VNNI tiles of the integer dot product (qdot.h; qdot.cpp dispatches to them).
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

// ---- AVX-512 VNNI ---------------------------------------------------------------------------------

#define LS_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

LS_VNNI inline float h2f_vnni(const uint8_t *p) { return _cvtsh_ss(load_u16(p)); }

// {d x8, dmin x8} from the two halves at the start of a Q4_K super-block: one 32-bit load, one
// conversion, one permutation.
LS_VNNI inline __m512 d_dmin_vnni(const uint8_t *p)
{
    uint32_t both;
    std::memcpy(&both, p, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(int(both)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(f));
}

LS_VNNI inline __m512 two_halves(float a, float b)
{
    const __m512d lo = _mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(a)));
    return _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}

// One 64-value chunk of every (row, token) pair: acc += float(sum of u * x - bias terms) * ws * dl.
template <int R, int NT>
LS_VNNI inline void pairs_vnni(const __m512i (&u)[R], const __m512 (&ws)[R], const __m512i (&xv)[NT],
                               const __m512i (&cv)[NT], const __m512 (&dv)[NT], __m512 (&acc)[R][NT])
{
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            const __m512i s = _mm512_dpbusd_epi32(cv[t], u[r], xv[t]);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(ws[r], dv[t]), acc[r][t]);
        }
}

template <DType T, int R, int NT>
LS_VNNI void tile_vnni(const uint8_t *const *rows, const QuantizedActs &a, int64_t t0, float *out, int64_t ldo)
{
    const int64_t n = a.n;
    __m512 acc[R][NT];
    const int8_t *xq[NT];
    const float *xl[NT], *xs[NT];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        xq[t] = a.q_row(t0 + t);
        xl[t] = a.dl_row(t0 + t);
        xs[t] = a.ds_row(t0 + t);
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
            acc[r][t] = _mm512_setzero_ps();
    }
    const __m512i zero = _mm512_setzero_si512();
    __m512i u[R], xv[NT], cv[NT];
    __m512 ws[R], dv[NT];

    if constexpr (is_block32<T>) {
        // u: Q8_0 w + 128 (bias 128); Q4_0 the nibble (bias 8); Q4_1 the nibble, Q5_0 / Q5_1 the
        // nibble with the fifth bit (bias 16 / none); IQ4_NL the table value + 128 (bias 128).
        // Q4_1 and Q5_1 add m * d_x * sum(q_x) per block, in lanes 0 and 8. Two blocks per chunk;
        // an odd last block runs as a half chunk with the other half zero.
        constexpr int64_t bb = block32_bytes<T>;
        const __m512i bias = _mm512_set1_epi8(char(block32_bias<T>));
        const int64_t nb = n / qk;
        __m512 mv[R], dsv[NT];
        for (int64_t b = 0; b < nb; b += 2) {
            const bool full = b + 1 < nb;
            const __mmask64 mx = full ? ~__mmask64(0) : __mmask64(0xFFFFFFFFu);
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                xv[t] = _mm512_maskz_loadu_epi8(mx, xq[t] + b * qk);
                dv[t] = _mm512_maskz_loadu_ps(full ? __mmask16(0xFFFF) : __mmask16(0x00FF), xl[t] + b * 8);
                cv[t] = block32_bias<T> ? _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, xv[t])) : zero;
                if constexpr (block32_min<T>)
                    dsv[t] = two_halves(xs[t][b], full ? xs[t][b + 1] : 0.0f);
            }
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t *p = rows[r] + b * bb;
                u[r] = block32_codes_512<T>(p, full);
                ws[r] = two_halves(h2f_vnni(p), full ? h2f_vnni(p + bb) : 0.0f);
                if constexpr (block32_min<T>)
                    mv[r] = two_halves(h2f_vnni(p + 2), full ? h2f_vnni(p + bb + 2) : 0.0f);
            }
            pairs_vnni<R, NT>(u, ws, xv, cv, dv, acc);
            if constexpr (block32_min<T>)
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r)
                    #pragma GCC unroll 4
                    for (int t = 0; t < NT; ++t)
                        acc[r][t] = _mm512_mask3_fmadd_ps(mv[r], dsv[t], acc[r][t], 0x0101);
        }
    } else if constexpr (T == DType::Q4_K) {
        // Per super-block, row and token, one vector of scale products, in the lane order
        //   smx = {(d sc_j) dx_j for j < 8, (dmin m_j) ds_j for j < 8}
        // (dx_j, ds_j: the activations' scale and scaled sum of sub-block j). The minimums are
        // subtracted from lanes 8-15; chunk k takes lanes 2k (x8) and 2k+1 (x8) as its scales.
        // The four chunks sum into their own vector before it joins the accumulator, so the
        // accumulator's dependency chain is two operations per super-block, not five; every
        // (row, token) pair adds in the same order whatever the tile.
        const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
        for (int64_t sb = 0; sb < n / qk_k; ++sb) {
            __m512 xd[NT];
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                xd[t] = _mm512_castpd_ps(_mm512_insertf64x4(
                    _mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(a.db_row(t0 + t) + sb * 8))),
                    _mm256_castps_pd(_mm256_loadu_ps(xs[t] + sb * 8)), 1));
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t *p = rows[r] + sb * q4_k_bytes;
                const __m512 sm =
                    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q4_k_unpack_scales(p + 4))), d_dmin_vnni(p));
                __m512 smx[NT], tot[NT];
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    smx[t] = _mm512_mul_ps(sm, xd[t]);
                    acc[r][t] = _mm512_mask_sub_ps(acc[r][t], 0xFF00, acc[r][t], smx[t]);
                }
                #pragma GCC unroll 4
                for (int k = 0; k < 4; ++k) {
                    const __m512i idx = _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                                         2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k,
                                                         2 * k, 2 * k, 2 * k, 2 * k);
                    // The 32 bytes twice; the upper copy shifted right by 4: low nibbles give
                    // values 0-31 of the chunk, high nibbles values 32-63.
                    const __m512i v =
                        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 16 + 32 * k)));
                    const __m512i uk = _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(0x0F));
                    #pragma GCC unroll 4
                    for (int t = 0; t < NT; ++t) {
                        const __m512i isum = _mm512_dpbusd_epi32(zero, uk, _mm512_loadu_si512(xq[t] + sb * qk_k + 64 * k));
                        const __m512 f = _mm512_cvtepi32_ps(isum), s = _mm512_permutexvar_ps(idx, smx[t]);
                        tot[t] = k == 0 ? _mm512_mul_ps(f, s) : _mm512_fmadd_ps(f, s, tot[t]);
                    }
                }
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t)
                    acc[r][t] = _mm512_add_ps(acc[r][t], tot[t]);
            }
        }
    } else { // Q6_K: u = the 6-bit code, bias 32, a scale per 16 values
        // Per super-block, row and token: scx = {(d sc_j) dx_(j/2) for j < 16}; chunk k takes
        // lanes 4k..4k+3, four lanes each. As for Q4_K, the chunks sum apart from the accumulator.
        const __m512i bias = _mm512_set1_epi8(32);
        const __m512i pair_idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), m3 = _mm256_set1_epi8(0x03);
        for (int64_t sb = 0; sb < n / qk_k; ++sb) {
            __m512 xd[NT];
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                xd[t] = _mm512_permutexvar_ps(pair_idx,
                                              _mm512_castps256_ps512(_mm256_loadu_ps(a.db_row(t0 + t) + sb * 8)));
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t *p = rows[r] + sb * q6_k_bytes;
                const __m128i s16 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 192));
                const __m512 sc =
                    _mm512_mul_ps(_mm512_set1_ps(h2f_vnni(p + 208)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s16)));
                __m512 scx[NT], tot[NT];
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t)
                    scx[t] = _mm512_mul_ps(sc, xd[t]);
                #pragma GCC unroll 4
                for (int k = 0; k < 4; ++k) {
                    const int h = k / 2, c2 = k % 2;
                    const __m512i idx = _mm512_set_epi32(4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 2,
                                                         4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 1, 4 * k + 1,
                                                         4 * k + 1, 4 * k + 1, 4 * k, 4 * k, 4 * k, 4 * k);
                    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 64 * h));
                    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 64 * h + 32));
                    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 128 + 32 * h));
                    __m256i lo, hi;
                    if (c2 == 0) {
                        lo = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
                        hi = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
                    } else {
                        lo = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
                        hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                             _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
                    }
                    const __m512i uk = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                    #pragma GCC unroll 4
                    for (int t = 0; t < NT; ++t) {
                        const __m512i x = _mm512_loadu_si512(xq[t] + sb * qk_k + 64 * k);
                        const __m512i bx = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, x));
                        const __m512i isum = _mm512_dpbusd_epi32(bx, uk, x);
                        const __m512 f = _mm512_cvtepi32_ps(isum), s = _mm512_permutexvar_ps(idx, scx[t]);
                        tot[t] = k == 0 ? _mm512_mul_ps(f, s) : _mm512_fmadd_ps(f, s, tot[t]);
                    }
                }
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t)
                    acc[r][t] = _mm512_add_ps(acc[r][t], tot[t]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// ---- AVX-512 VNNI: Q2_K, Q3_K, Q5_K, IQ4_XS ------------------------------------------------------------

// The weight scales of a super-block: a scale per 16 values, 16 lanes (Q2_K, Q3_K); or per 32 in
// lanes 0-7 with the minimums (dmin * m) in lanes 8-15 (Q5_K, as Q4_K) or zeros (IQ4_XS).
template <DType T> LS_VNNI inline __m512 k_scales_vnni(const uint8_t *p)
{
    if constexpr (T == DType::Q2_K) {
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0F))), _mm512_set1_ps(h2f_vnni(p + 80)));
    } else if constexpr (T == DType::Q3_K) {
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q3_k_unpack_scales(p + 96))),
                             _mm512_set1_ps(h2f_vnni(p + 108)));
    } else if constexpr (T == DType::Q5_K) {
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q4_k_unpack_scales(p + 4))), d_dmin_vnni(p));
    } else {
        const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(iq4_xs_unpack_scales(p)), _mm256_set1_ps(h2f_vnni(p)));
        return _mm512_zextps256_ps512(f);
    }
}

// Q2_K's minimums dmin * m per 16 values.
LS_VNNI inline __m512 q2_k_mins_vnni(const uint8_t *p)
{
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), _mm512_set1_ps(h2f_vnni(p + 82)));
}

// As the Q4_K and Q6_K kernels: per super-block, row and token one vector of scale products
// scx (the weight scale of each group times the activations' d of its block), chunk k's lanes
// taking theirs by a permutation; the four chunks sum apart from the accumulator; minimums
// subtracted once per super-block (Q5_K: lanes 8-15 of scx, (dmin m_j) ds_j; Q2_K: (dmin m_g)
// d_x sum(q_x) per 16 values).
template <DType T, int R, int NT>
LS_VNNI void tile_vnni_k(const uint8_t *const *rows, const QuantizedActs &a, int64_t t0, float *out, int64_t ldo)
{
    constexpr bool g16 = k_groups16<T>;
    constexpr int64_t bytes = k_bytes<T>;
    const int64_t n = a.n;
    const __m512i zero = _mm512_setzero_si512();
    const __m512i bias = _mm512_set1_epi8(char(T == DType::IQ4_XS ? 128 : k_bias<T>));
    constexpr bool biased = T == DType::IQ4_XS || k_bias<T> != 0;
    const __m512i pair_idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512 acc[R][NT];
    const int8_t *xq[NT];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        xq[t] = a.q_row(t0 + t);
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
            acc[r][t] = _mm512_setzero_ps();
    }
    for (int64_t sb = 0; sb < n / qk_k; ++sb) {
        __m512 xd[NT], xm[NT];
        __m512i cv[NT][4];
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            const __m256 db = _mm256_loadu_ps(a.db_row(t0 + t) + sb * 8);
            if constexpr (g16) {
                xd[t] = _mm512_permutexvar_ps(pair_idx, _mm512_castps256_ps512(db));
                if constexpr (k_min<T>)
                    xm[t] = _mm512_mul_ps(xd[t], _mm512_cvtepi32_ps(_mm512_loadu_si512(a.s16_row(t0 + t) + sb * 16)));
            } else {
                const __m256 hi = k_min<T> ? _mm256_loadu_ps(a.ds_row(t0 + t) + sb * 8) : _mm256_setzero_ps();
                xd[t] = _mm512_castpd_ps(
                    _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(db)), _mm256_castps_pd(hi), 1));
            }
            if constexpr (biased)
                #pragma GCC unroll 4
                for (int k = 0; k < 4; ++k)
                    cv[t][k] = _mm512_sub_epi32(
                        zero, _mm512_dpbusd_epi32(zero, bias, _mm512_loadu_si512(xq[t] + sb * qk_k + 64 * k)));
        }
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const uint8_t *p = rows[r] + sb * bytes;
            const __m512 sc = k_scales_vnni<T>(p);
            __m512 scx[NT], tot[NT];
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                scx[t] = _mm512_mul_ps(sc, xd[t]);
                if constexpr (k_min<T> && !g16)
                    acc[r][t] = _mm512_mask_sub_ps(acc[r][t], 0xFF00, acc[r][t], scx[t]);
            }
            if constexpr (k_min<T> && g16) {
                const __m512 mn = q2_k_mins_vnni(p);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t)
                    acc[r][t] = _mm512_fnmadd_ps(mn, xm[t], acc[r][t]);
            }
            #pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                const __m512i idx = g16 ? _mm512_set_epi32(4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 2, 4 * k + 2,
                                                           4 * k + 2, 4 * k + 2, 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k + 1,
                                                           4 * k, 4 * k, 4 * k, 4 * k)
                                        : _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                                           2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k,
                                                           2 * k, 2 * k);
                const __m512i uk = k_codes_512<T>(p, k);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    const __m512i x = _mm512_loadu_si512(xq[t] + sb * qk_k + 64 * k);
                    const __m512i isum = _mm512_dpbusd_epi32(biased ? cv[t][k] : zero, uk, x);
                    const __m512 f = _mm512_cvtepi32_ps(isum), s = _mm512_permutexvar_ps(idx, scx[t]);
                    tot[t] = k == 0 ? _mm512_mul_ps(f, s) : _mm512_fmadd_ps(f, s, tot[t]);
                }
            }
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                acc[r][t] = _mm512_add_ps(acc[r][t], tot[t]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);
}

LS_QTILE_TABLE(tile_vnni)
LS_QTILE_TABLE(tile_vnni_k)

struct VnniTiles {
    template <DType T> static QTileFn get(int R, int NT)
    {
        if constexpr (is_k_ext<T>)
            return tile_vnni_k_fn<T>(R, NT);
        else
            return tile_vnni_fn<T>(R, NT);
    }
};

} // namespace

QTileFn vnni_tile(DType type, int R, int NT) { return tile_of<VnniTiles>(type, R, NT); }

} // namespace longscope::qdot_detail
