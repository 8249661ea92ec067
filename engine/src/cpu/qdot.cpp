#include "cpu/qdot.h"

#include "cpu/ops.h"
#include "cpu/quant.h"
#include "cpu/quant_simd.h"
#include "cpu/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <limits>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings inside the reduce
// intrinsics; the values are defined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace longscope {

namespace {

using namespace qsimd;

constexpr int64_t qk = 32;   // activation block, Q8_0 and Q4_0 block
constexpr int64_t qk_k = 256; // K-quant super-block
constexpr int64_t q8_0_bytes = 34, q4_0_bytes = 18, q4_k_bytes = 144, q6_k_bytes = 210;

inline uint16_t load_u16(const uint8_t *p)
{
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

// ---- activations --------------------------------------------------------------------------------

// One block of 32: d = max|x| / 127, q = round-to-nearest-even(x * 127 / max|x|). The vector
// versions below compute exactly the same values (same float operations, same rounding).
//
// Blocks the rule cannot take have one defined result on every path: a block holding a NaN or
// an infinity (a damaged norm weight, an overflow upstream) gets q = 0 and d = NaN, so every
// product with it is NaN as in float arithmetic; a block whose max|x| is 0, or so small that
// 127 / max|x| is not finite, gets q = 0 and d = 0 (its values are below 4e-37).
struct BlockScale {
    float d;  // the scale stored
    float id; // 127 / max|x|; 0 for a block that quantizes to zeros
};

inline BlockScale block_scale(float amax, bool finite)
{
    if (!finite)
        return {std::numeric_limits<float>::quiet_NaN(), 0.0f};
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (!std::isfinite(id) || id == 0.0f)
        return {0.0f, 0.0f};
    return {amax / 127.0f, id};
}

// The outputs of a block that quantizes to zeros with scale d.
inline void store_zero_block(float d, int8_t *q, float *dl, float *db, float *ds)
{
    std::memset(q, 0, qk);
    for (int j = 0; j < qk / 4; ++j)
        dl[j] = d;
    *db = d;
    *ds = d * 0.0f;
}

void quantize_block_portable(const float *x, int8_t *q, float *dl, float *db, float *ds)
{
    float amax = 0;
    bool finite = true;
    for (int j = 0; j < qk; ++j) {
        finite = finite && std::isfinite(x[j]);
        amax = std::max(amax, std::fabs(x[j]));
    }
    const BlockScale s = block_scale(amax, finite);
    if (s.id == 0.0f) {
        store_zero_block(s.d, q, dl, db, ds);
        return;
    }
    int sum = 0;
    for (int j = 0; j < qk; ++j) {
        const int qi = int(std::clamp(std::nearbyint(x[j] * s.id), -127.0f, 127.0f));
        q[j] = int8_t(qi);
        sum += qi;
    }
    for (int j = 0; j < qk / 4; ++j)
        dl[j] = s.d;
    *db = s.d;
    *ds = s.d * float(sum);
}

#define LS_AVX512Q __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LS_AVX2Q __attribute__((target("avx2,fma,f16c")))

LS_AVX512Q void quantize_block_avx512(const float *x, int8_t *q, float *dl, float *db, float *ds)
{
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
    // |x| <= the largest float is false for NaN and infinities alike.
    const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
    const bool finite = (_mm512_cmp_ps_mask(a0, big, _CMP_LE_OQ) & _mm512_cmp_ps_mask(a1, big, _CMP_LE_OQ)) == 0xFFFF;
    const BlockScale s = block_scale(finite ? _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) : 0.0f, finite);
    if (s.id == 0.0f) {
        store_zero_block(s.d, q, dl, db, ds);
        return;
    }
    const __m512 id = _mm512_set1_ps(s.id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(q), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(q + 16), _mm512_cvtsepi32_epi8(q1));
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    _mm256_storeu_ps(dl, _mm256_set1_ps(s.d));
    *db = s.d;
    *ds = s.d * float(sum);
}

// The same values again, eight lanes at a time: conversions round to nearest even as
// nearbyint does, and the two saturating packs saturate as one conversion to int8 would.
LS_AVX2Q void quantize_block_avx2(const float *x, int8_t *q, float *dl, float *db, float *ds)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(std::numeric_limits<float>::max());
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    int finite_lanes = 0xFF;
    for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        const __m256 a = _mm256_andnot_ps(sign, v[k]);
        finite_lanes &= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_LE_OQ));
        m = _mm256_max_ps(m, a);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const bool finite = finite_lanes == 0xFF;
    const BlockScale s = block_scale(finite ? _mm_cvtss_f32(h) : 0.0f, finite);
    if (s.id == 0.0f) {
        store_zero_block(s.d, q, dl, db, ds);
        return;
    }
    const __m256 id = _mm256_set1_ps(s.id);
    __m256i qi[4];
    for (int k = 0; k < 4; ++k)
        qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
    // Bytes come out of the packs interleaved by 128-bit lane: four values of each vector per
    // lane; the permute puts the groups of four back in order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(q),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const __m256i t = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    const int sum = _mm_cvtsi128_si32(s4);
    _mm256_storeu_ps(dl, _mm256_set1_ps(s.d));
    *db = s.d;
    *ds = s.d * float(sum);
}

void quantize_tokens(const float *x, int64_t t0, int64_t t1, int64_t n, QuantizedActs &a, VectorLevel level)
{
    for (int64_t t = t0; t < t1; ++t)
        for (int64_t b = 0; b < n / qk; ++b) {
            const float *src = x + t * n + b * qk;
            int8_t *q = a.q.data() + t * n + b * qk;
            float *dl = a.dl.data() + t * (n / 4) + b * (qk / 4);
            float *db = a.db.data() + t * (n / qk) + b;
            float *ds = a.ds.data() + t * (n / qk) + b;
            if (level == VectorLevel::Avx512)
                quantize_block_avx512(src, q, dl, db, ds);
            else if (level == VectorLevel::Avx2)
                quantize_block_avx2(src, q, dl, db, ds);
            else
                quantize_block_portable(src, q, dl, db, ds);
            int32_t *s16 = a.s16.data() + t * (n / 16) + b * 2;
            for (int h = 0; h < 2; ++h) {
                int32_t sum = 0;
                for (int j = 0; j < 16; ++j)
                    sum += q[16 * h + j];
                s16[h] = sum;
            }
        }
}

// ---- portable -----------------------------------------------------------------------------------

// A block of a type added after Q8_0, Q4_0, Q4_K and Q6_K (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K,
// Q5_K, IQ4_XS) in the form the portable kernel sums: value i is
// ws[i / group] * c[i] - mn[i / group] with c a signed integer code (mn zero without a min).
struct DecodedBlock {
    int values = 0, group = 0;
    bool has_min = false;
    int8_t c[qk_k];
    float ws[16], mn[16];
};

void decode_block(DType type, const uint8_t *p, DecodedBlock &b)
{
    auto nibbles = [&](const uint8_t *qs, int8_t *c, int offset) {
        for (int j = 0; j < 16; ++j) {
            c[j] = int8_t((qs[j] & 0x0F) - offset);
            c[j + 16] = int8_t((qs[j] >> 4) - offset);
        }
    };
    b.has_min = false;
    switch (type) {
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1: {
        const bool min = type != DType::Q5_0, five = type != DType::Q4_1;
        b.values = b.group = qk;
        b.has_min = min;
        const uint8_t *qs = p + (type == DType::Q4_1 ? 4 : min ? 8 : 6);
        nibbles(qs, b.c, 0);
        if (five) {
            uint32_t qh;
            std::memcpy(&qh, p + (min ? 4 : 2), 4);
            for (int j = 0; j < qk; ++j)
                b.c[j] = int8_t(b.c[j] + int((qh >> j) & 1) * 16 - (min ? 0 : 16));
        }
        b.ws[0] = f16_to_f32(load_u16(p));
        b.mn[0] = min ? -f16_to_f32(load_u16(p + 2)) : 0.0f;
        return;
    }
    case DType::IQ4_NL:
        b.values = b.group = qk;
        for (int j = 0; j < 16; ++j) {
            b.c[j] = iq4_nl_values[p[2 + j] & 0x0F];
            b.c[j + 16] = iq4_nl_values[p[2 + j] >> 4];
        }
        b.ws[0] = f16_to_f32(load_u16(p));
        return;
    case DType::IQ4_XS: {
        b.values = qk_k;
        b.group = qk;
        const float d = f16_to_f32(load_u16(p));
        for (int ib = 0; ib < 8; ++ib) {
            for (int j = 0; j < 16; ++j) {
                b.c[32 * ib + j] = iq4_nl_values[p[8 + 16 * ib + j] & 0x0F];
                b.c[32 * ib + j + 16] = iq4_nl_values[p[8 + 16 * ib + j] >> 4];
            }
            b.ws[ib] = d * float(iq4_xs_scale(p + 4, load_u16(p + 2), ib));
        }
        return;
    }
    case DType::Q5_K: {
        b.values = qk_k;
        b.group = qk;
        b.has_min = true;
        const float d = f16_to_f32(load_u16(p)), dmin = f16_to_f32(load_u16(p + 2));
        uint8_t sc[8], m[8];
        q4_k_scales_mins(p + 4, sc, m);
        for (int j = 0; j < 8; ++j) {
            for (int l = 0; l < 32; ++l) {
                const int lo = j % 2 ? p[48 + 32 * (j / 2) + l] >> 4 : p[48 + 32 * (j / 2) + l] & 0x0F;
                b.c[32 * j + l] = int8_t(lo | (((p[16 + l] >> j) & 1) << 4));
            }
            b.ws[j] = d * float(sc[j]);
            b.mn[j] = dmin * float(m[j]);
        }
        return;
    }
    case DType::Q2_K:
    case DType::Q3_K: {
        b.values = qk_k;
        b.group = 16;
        b.has_min = type == DType::Q2_K;
        const uint8_t *qs = p + (type == DType::Q2_K ? 16 : 32);
        for (int i = 0; i < qk_k; ++i) {
            const int low = (qs[32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3;
            b.c[i] = int8_t(type == DType::Q2_K ? low : (low | (((p[i % 32] >> (i / 32)) & 1) << 2)) - 4);
        }
        if (type == DType::Q2_K) {
            const float d = f16_to_f32(load_u16(p + 80)), dmin = f16_to_f32(load_u16(p + 82));
            for (int g = 0; g < 16; ++g) {
                b.ws[g] = d * float(p[g] & 0x0F);
                b.mn[g] = dmin * float(p[g] >> 4);
            }
        } else {
            const float d = f16_to_f32(load_u16(p + 108));
            int8_t sc[16];
            q3_k_scales(p + 96, sc);
            for (int g = 0; g < 16; ++g)
                b.ws[g] = d * float(sc[g]);
        }
        return;
    }
    default: b.values = 0; return;
    }
}

// The portable kernel of those types: per scale group an exact integer sum, then
// acc += isum * (ws * d_x) - mn * d_x * sum(q_x) (the activations' sums per 32 or per 16).
float dot_portable_decoded(DType type, const uint8_t *row, const QuantizedActs &a, int64_t t)
{
    const int8_t *x = a.q_row(t);
    const float *dl = a.dl_row(t), *ds = a.ds_row(t);
    const int32_t *s16 = a.s16_row(t);
    const int64_t bb = row_bytes(type, block_elems(type));
    DecodedBlock blk;
    float acc = 0;
    for (int64_t i0 = 0, b = 0; i0 < a.n; i0 += blk.values, ++b) {
        decode_block(type, row + b * bb, blk);
        for (int g = 0; g < blk.values / blk.group; ++g) {
            const int64_t base = i0 + g * blk.group;
            int isum = 0;
            for (int l = 0; l < blk.group; ++l)
                isum += blk.c[g * blk.group + l] * x[base + l];
            const float dx = dl[base / 4];
            acc += float(isum) * (blk.ws[g] * dx);
            if (blk.has_min)
                acc -= blk.mn[g] * (blk.group == qk ? ds[base / qk] : dx * float(s16[base / 16]));
        }
    }
    return acc;
}

// One (row, token) pair, block by block, in the same arithmetic as the vector kernels: an exact
// integer sum per scale group, then float: acc += isum * (weight scale * activation scale).
float dot_portable(DType type, const uint8_t *row, const QuantizedActs &a, int64_t t)
{
    const int64_t n = a.n;
    const int8_t *x = a.q_row(t);
    const float *dl = a.dl_row(t), *ds = a.ds_row(t);
    float acc = 0;
    switch (type) {
    case DType::Q8_0:
        for (int64_t b = 0; b < n / qk; ++b) {
            const uint8_t *p = row + b * q8_0_bytes;
            int isum = 0;
            for (int j = 0; j < qk; ++j)
                isum += int(int8_t(p[2 + j])) * x[b * qk + j];
            acc += float(isum) * (f16_to_f32(load_u16(p)) * dl[b * 8]);
        }
        break;
    case DType::Q4_0:
        for (int64_t b = 0; b < n / qk; ++b) {
            const uint8_t *p = row + b * q4_0_bytes;
            int isum = 0;
            for (int j = 0; j < qk / 2; ++j)
                isum += ((p[2 + j] & 0xF) - 8) * x[b * qk + j] + ((p[2 + j] >> 4) - 8) * x[b * qk + j + 16];
            acc += float(isum) * (f16_to_f32(load_u16(p)) * dl[b * 8]);
        }
        break;
    case DType::Q4_K:
        for (int64_t sb = 0; sb < n / qk_k; ++sb) {
            const uint8_t *p = row + sb * q4_k_bytes;
            const float d = f16_to_f32(load_u16(p)), dmin = f16_to_f32(load_u16(p + 2));
            uint8_t sc[8], m[8];
            q4_k_scales_mins(p + 4, sc, m);
            float mins = 0;
            for (int j = 0; j < 8; ++j)
                mins += (dmin * float(m[j])) * ds[sb * 8 + j];
            acc -= mins;
            const int8_t *xs = x + sb * qk_k;
            for (int j = 0; j < 8; ++j) {
                const uint8_t *qs = p + 16 + 32 * (j / 2);
                int isum = 0;
                for (int l = 0; l < 32; ++l)
                    isum += (j % 2 ? qs[l] >> 4 : qs[l] & 0xF) * xs[32 * j + l];
                acc += float(isum) * ((d * float(sc[j])) * dl[sb * 64 + 8 * j]);
            }
        }
        break;
    case DType::Q6_K:
        for (int64_t sb = 0; sb < n / qk_k; ++sb) {
            const uint8_t *p = row + sb * q6_k_bytes;
            const float d = f16_to_f32(load_u16(p + 208));
            int8_t u[qk_k];
            for (int h = 0; h < 2; ++h) {
                const uint8_t *ql = p + 64 * h, *qh = p + 128 + 32 * h;
                for (int l = 0; l < 32; ++l) {
                    u[128 * h + l] = int8_t((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                    u[128 * h + l + 32] = int8_t((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                    u[128 * h + l + 64] = int8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                    u[128 * h + l + 96] = int8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                }
            }
            const int8_t *xs = x + sb * qk_k;
            for (int g = 0; g < 16; ++g) {
                int isum = 0;
                for (int l = 0; l < 16; ++l)
                    isum += (u[16 * g + l] - 32) * xs[16 * g + l];
                const float sc = float(int8_t(p[192 + g]));
                acc += float(isum) * ((d * sc) * dl[sb * 64 + 4 * g]);
            }
        }
        break;
    default:
        return dot_portable_decoded(type, row, a, t);
    }
    return acc;
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

// ---- dispatch -------------------------------------------------------------------------------------

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

LS_QTILE_TABLE(tile_vnni)
LS_QTILE_TABLE(tile_avx2)
LS_QTILE_TABLE(tile_vnni_k)
LS_QTILE_TABLE(tile_avx2_k)

template <DType T> QTileFn tile_fn(QKernel k, int R, int NT)
{
    if constexpr (is_k_ext<T>)
        return k == QKernel::Vnni ? tile_vnni_k_fn<T>(R, NT) : tile_avx2_k_fn<T>(R, NT);
    else
        return k == QKernel::Vnni ? tile_vnni_fn<T>(R, NT) : tile_avx2_fn<T>(R, NT);
}

// The vector tile of kernel set k (VNNI or AVX2) for `type`, or null for a type without one.
QTileFn tile_for(QKernel k, DType type, int R, int NT)
{
    switch (type) {
    case DType::Q8_0: return tile_fn<DType::Q8_0>(k, R, NT);
    case DType::Q4_0: return tile_fn<DType::Q4_0>(k, R, NT);
    case DType::Q4_1: return tile_fn<DType::Q4_1>(k, R, NT);
    case DType::Q5_0: return tile_fn<DType::Q5_0>(k, R, NT);
    case DType::Q5_1: return tile_fn<DType::Q5_1>(k, R, NT);
    case DType::IQ4_NL: return tile_fn<DType::IQ4_NL>(k, R, NT);
    case DType::Q2_K: return tile_fn<DType::Q2_K>(k, R, NT);
    case DType::Q3_K: return tile_fn<DType::Q3_K>(k, R, NT);
    case DType::Q4_K: return tile_fn<DType::Q4_K>(k, R, NT);
    case DType::Q5_K: return tile_fn<DType::Q5_K>(k, R, NT);
    case DType::Q6_K: return tile_fn<DType::Q6_K>(k, R, NT);
    case DType::IQ4_XS: return tile_fn<DType::IQ4_XS>(k, R, NT);
    default: return nullptr;
    }
}

} // namespace

void quantize_acts(ThreadPool *pool, const float *x, int64_t n_tokens, int64_t n, QuantizedActs &out)
{
    quantize_acts_with(kernel_table().level, pool, x, n_tokens, n, out);
}

VectorLevel quantize_acts_level() { return kernel_table().level; }

void quantize_acts_with(VectorLevel level, ThreadPool *pool, const float *x, int64_t n_tokens, int64_t n,
                        QuantizedActs &out)
{
    out.n = n;
    out.n_tokens = n_tokens;
    out.q.resize(static_cast<size_t>(n_tokens * n));
    out.dl.resize(static_cast<size_t>(n_tokens * (n / 4)));
    out.db.resize(static_cast<size_t>(n_tokens * (n / qk)));
    out.ds.resize(static_cast<size_t>(n_tokens * (n / qk)));
    out.s16.resize(static_cast<size_t>(n_tokens * (n / 16)));
    if (pool && n_tokens > 1)
        pool->parallel_for(
            n_tokens, [&](int64_t begin, int64_t end) { quantize_tokens(x, begin, end, n, out, level); },
            min_items_per_thread(n));
    else
        quantize_tokens(x, 0, n_tokens, n, out, level);
}

bool has_integer_dot(DType type) { return is_quantized(type); }

QKernel qkernel() { return kernel_table().integer; }

int available_qkernels(QKernel *out, int max)
{
    const CpuFeatures &f = cpu_features();
    int n = 0;
    if (f.avx512_vnni && n < max)
        out[n++] = QKernel::Vnni;
    if (f.avx2 && n < max)
        out[n++] = QKernel::Avx2;
    if (n < max)
        out[n++] = QKernel::Portable;
    return n;
}

int qgemm_token_block(QKernel k) { return k == QKernel::Avx2 ? 2 : 4; }

void qgemm_tile_with(QKernel k, DType type, const void *const *rows, int n_rows, const QuantizedActs &a, int64_t t0,
                     int n_tokens, float *out, int64_t ldo)
{
    const auto *const *r = reinterpret_cast<const uint8_t *const *>(rows);
    if (k == QKernel::Portable) {
        for (int i = 0; i < n_rows; ++i)
            for (int t = 0; t < n_tokens; ++t)
                out[t * ldo + i] = dot_portable(type, r[i], a, t0 + t);
        return;
    }
    if (const QTileFn fn = tile_for(k, type, n_rows, n_tokens))
        fn(r, a, t0, out, ldo);
}

void qgemv_rows(QKernel k, DType type, const void *base, size_t row_stride, int64_t n_rows, const QuantizedActs &a,
                int64_t t, float *y)
{
    const QTileFn fn = k != QKernel::Portable ? tile_for(k, type, 1, 1) : nullptr;
    const auto *b = static_cast<const uint8_t *>(base);
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t *row = b + size_t(r) * row_stride;
        if (fn)
            fn(&row, a, t, y + r, 1);
        else
            y[r] = dot_portable(type, row, a, t);
    }
}

void qgemm_tile(DType type, const void *const *rows, int n_rows, const QuantizedActs &a, int64_t t0, int n_tokens,
                float *out, int64_t ldo)
{
    qgemm_tile_with(qkernel(), type, rows, n_rows, a, t0, n_tokens, out, ldo);
}

} // namespace longscope
