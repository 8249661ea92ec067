#include "cpu/qdot.h"
#include "cpu/qdot_tiles.h"

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
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace longscope {

namespace {

using namespace qsimd;
using namespace qdot_detail;

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

// Activations quantized with one scale per 256 values (QuantizedActs::span): the span's
// max|x| and whether all its values are finite, which every block of the span then uses in
// place of its own (a span holding a NaN or an infinity gets d = NaN in every block).
struct SpanMax {
    float amax;
    bool finite;
};

SpanMax span_max(const float *x, int64_t len)
{
    float amax = 0;
    bool finite = true;
    for (int64_t j = 0; j < len; ++j) {
        finite = finite && std::isfinite(x[j]);
        amax = std::max(amax, std::fabs(x[j]));
    }
    return {amax, finite};
}

// The outputs of a block that quantizes to zeros with scale d.
inline void store_zero_block(float d, int8_t *q, float *dl, float *db, float *ds, int32_t *s16)
{
    std::memset(q, 0, qk);
    s16[0] = s16[1] = 0;
    for (int j = 0; j < qk / 4; ++j)
        dl[j] = d;
    *db = d;
    *ds = d * 0.0f;
}

void quantize_block_portable(const float *x, int8_t *q, float *dl, float *db, float *ds, int32_t *s16,
                             const SpanMax *span)
{
    const SpanMax m = span ? *span : span_max(x, qk);
    const BlockScale s = block_scale(m.amax, m.finite);
    if (s.id == 0.0f) {
        store_zero_block(s.d, q, dl, db, ds, s16);
        return;
    }
    int sum = 0;
    s16[0] = s16[1] = 0;
    for (int j = 0; j < qk; ++j) {
        const int qi = int(std::clamp(std::nearbyint(x[j] * s.id), -127.0f, 127.0f));
        q[j] = int8_t(qi);
        s16[j / 16] += qi;
        sum += qi;
    }
    for (int j = 0; j < qk / 4; ++j)
        dl[j] = s.d;
    *db = s.d;
    *ds = s.d * float(sum);
}

#define LS_AVX512Q __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LS_AVX2Q __attribute__((target("avx2,fma,f16c")))

// The codes of one block by the rule above, as int32: q0 values 0-15, q1 values 16-31 (zeros
// for a block that quantizes to zeros); returns the scale d.
LS_AVX512Q inline float codes32_avx512(const float *x, __m512i &q0, __m512i &q1, const SpanMax *span)
{
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    BlockScale s;
    if (span) {
        s = block_scale(span->finite ? span->amax : 0.0f, span->finite);
    } else {
        const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
        // |x| <= the largest float is false for NaN and infinities alike.
        const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
        const bool finite =
            (_mm512_cmp_ps_mask(a0, big, _CMP_LE_OQ) & _mm512_cmp_ps_mask(a1, big, _CMP_LE_OQ)) == 0xFFFF;
        s = block_scale(finite ? _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) : 0.0f, finite);
    }
    if (s.id == 0.0f) {
        q0 = q1 = _mm512_setzero_si512();
        return s.d;
    }
    const __m512 id = _mm512_set1_ps(s.id);
    q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
    q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
    return s.d;
}

// The sums of codes 0..15 and 16..31 (s16, packed Q6_K's and the K types' bias) come from the
// registers that hold the codes: read back from the bytes just stored (16-byte loads of
// vpmovsdb's stores), they waited on the stores and took more of a 512-token prefill than the
// quantization itself. |x| * 127 / max|x| rounds to at most 127: the int32 codes are the
// bytes' values. A block of zeros stores d * 0 as store_zero_block does.
LS_AVX512Q void quantize_block_avx512(const float *x, int8_t *q, float *dl, float *db, float *ds, int32_t *s16,
                                      const SpanMax *span)
{
    __m512i q0, q1;
    const float d = codes32_avx512(x, q0, q1, span);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(q), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(q + 16), _mm512_cvtsepi32_epi8(q1));
    s16[0] = _mm512_reduce_add_epi32(q0);
    s16[1] = _mm512_reduce_add_epi32(q1);
    _mm256_storeu_ps(dl, _mm256_set1_ps(d));
    *db = d;
    *ds = d * float(s16[0] + s16[1]);
}

// The same values again, eight lanes at a time: conversions round to nearest even as
// nearbyint does, and the two saturating packs saturate as one conversion to int8 would.
LS_AVX2Q void quantize_block_avx2(const float *x, int8_t *q, float *dl, float *db, float *ds, int32_t *s16,
                                  const SpanMax *span)
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
    const bool finite = span ? span->finite : finite_lanes == 0xFF;
    const float amax = span ? span->amax : _mm_cvtss_f32(h);
    const BlockScale s = block_scale(finite ? amax : 0.0f, finite);
    if (s.id == 0.0f) {
        store_zero_block(s.d, q, dl, db, ds, s16);
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
    // Codes 0..15 in qi[0] and qi[1], 16..31 in qi[2] and qi[3] (as quantize_block_avx512).
    for (int half = 0; half < 2; ++half) {
        const __m256i t = _mm256_add_epi32(qi[2 * half], qi[2 * half + 1]);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        s16[half] = _mm_cvtsi128_si32(s4);
    }
    const int sum = s16[0] + s16[1];
    _mm256_storeu_ps(dl, _mm256_set1_ps(s.d));
    *db = s.d;
    *ds = s.d * float(sum);
}

// span_max over a span of 256 with AVX-512: the same maximum and finiteness (max is exact).
LS_AVX512Q SpanMax span_max_avx512(const float *x)
{
    const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
    __m512 m = _mm512_setzero_ps();
    __mmask16 ok = 0xFFFF;
    for (int k = 0; k < act_span_super / 16; ++k) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k));
        ok &= _mm512_cmp_ps_mask(a, big, _CMP_LE_OQ); // false for NaN and infinities alike
        m = _mm512_max_ps(m, a);
    }
    return {ok == 0xFFFF ? _mm512_reduce_max_ps(m) : 0.0f, ok == 0xFFFF};
}

void quantize_tokens(const float *x, int64_t t0, int64_t t1, int64_t n, QuantizedActs &a, VectorLevel level)
{
    const int64_t per_span = a.span / qk;
    SpanMax sm{0.0f, true};
    for (int64_t t = t0; t < t1; ++t)
        for (int64_t b = 0; b < n / qk; ++b) {
            const float *src = x + t * n + b * qk;
            if (per_span > 1 && b % per_span == 0)
                sm = level == VectorLevel::Avx512 && a.span == act_span_super ? span_max_avx512(src)
                                                                            : span_max(src, a.span);
            const SpanMax *span = per_span > 1 ? &sm : nullptr;
            int8_t *q = a.q.data() + t * n + b * qk;
            float *dl = a.dl.data() + t * (n / 4) + b * (qk / 4);
            float *db = a.db.data() + t * (n / qk) + b;
            float *ds = a.ds.data() + t * (n / qk) + b;
            int32_t *s16 = a.s16.data() + t * (n / 16) + b * 2;
            if (level == VectorLevel::Avx512)
                quantize_block_avx512(src, q, dl, db, ds, s16, span);
            else if (level == VectorLevel::Avx2)
                quantize_block_avx2(src, q, dl, db, ds, s16, span);
            else
                quantize_block_portable(src, q, dl, db, ds, s16, span);
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
// ---- dispatch -------------------------------------------------------------------------------------

// The vector tile of kernel set k (VNNI or AVX2) for `type`, or null for a type without one.
QTileFn tile_for(QKernel k, DType type, int R, int NT)
{
    return k == QKernel::Vnni ? vnni_tile(type, R, NT) : avx2_tile(type, R, NT);
}

} // namespace

void quantize_acts(ThreadPool *pool, const float *x, int64_t n_tokens, int64_t n, QuantizedActs &out, int span)
{
    quantize_acts_with(kernel_table().level, pool, x, n_tokens, n, out, span);
}

VectorLevel quantize_acts_level() { return kernel_table().level; }

void quantize_acts_shape(QuantizedActs &out, int64_t n_tokens, int64_t n, int span)
{
    out.span = span;
    out.n = n;
    out.n_tokens = n_tokens;
    out.q.resize(static_cast<size_t>(n_tokens * n));
    out.dl.resize(static_cast<size_t>(n_tokens * (n / 4)));
    out.db.resize(static_cast<size_t>(n_tokens * (n / qk)));
    out.ds.resize(static_cast<size_t>(n_tokens * (n / qk)));
    out.s16.resize(static_cast<size_t>(n_tokens * (n / 16)));
}

void quantize_acts_tokens(const float *x, int64_t t0, int64_t t1, QuantizedActs &out)
{
    quantize_tokens(x, t0, t1, out.n, out, quantize_acts_level());
}

namespace {

// quantize_tile_vnni's AVX-512 body: per block, each token's codes as quantize_block_avx512
// makes them, the four tokens' horizontal steps done together: their maxima and their sixteen
// sums across lanes reduced in one tree each (128-bit quarters paired across vectors, then the
// lanes within each quarter), 127 / max and max / 127 divided for all four in one
// instruction (the same quotients) with block_scale's rule for the blocks it treats otherwise
// as masks, and the scales and bias terms of the four stored together: the horizontal steps
// one token at a time took more than the quantization itself. The four tokens' 32 bytes go into the tile's
// 128 (word w of token t at 16 w + 4 t) by two two-source permutes.
// With Span (one scale per 256 values, QuantizedActs::span) every block of a span takes the
// span's maximum and finiteness, found once per span for the four tokens, in place of its own.
template <bool Span>
LS_AVX512Q void quantize_tile_avx512(const float *x, int64_t n, int8_t *q, float *db, float *ds, int32_t *b16,
                                     int32_t *b32)
{
    const __m512i lo = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
    const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
    const __m512 c127 = _mm512_set1_ps(127.0f);
    constexpr int64_t per_span = qk_k / qk;
    __m512 span_amax = _mm512_setzero_ps();
    bool span_finite[4] = {true, true, true, true};
    for (int64_t b = 0; b < n / qk; ++b) {
        __m512 v[4][2], m[4];
        bool finite[4];
        if constexpr (Span) {
            if (b % per_span == 0) {
                alignas(16) float sm[4];
                #pragma GCC unroll 4
                for (int t = 0; t < 4; ++t) {
                    const float *s = x + t * n + b * qk;
                    __m512 mx = _mm512_setzero_ps();
                    __mmask16 ok = 0xFFFF;
                    for (int k = 0; k < qk_k / 16; ++k) {
                        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(s + 16 * k));
                        ok &= _mm512_cmp_ps_mask(a, big, _CMP_LE_OQ);
                        mx = _mm512_max_ps(mx, a);
                    }
                    span_finite[t] = ok == 0xFFFF;
                    sm[t] = span_finite[t] ? _mm512_reduce_max_ps(mx) : 0.0f;
                }
                // Quarter t: token t's span maximum in its four lanes.
                span_amax = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                                  _mm512_castps128_ps512(_mm_load_ps(sm)));
            }
        }
        #pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
            v[t][0] = _mm512_loadu_ps(x + t * n + b * qk);
            v[t][1] = _mm512_loadu_ps(x + t * n + b * qk + 16);
            if constexpr (Span) {
                finite[t] = span_finite[t];
            } else {
                const __m512 a0 = _mm512_abs_ps(v[t][0]), a1 = _mm512_abs_ps(v[t][1]);
                // |x| <= the largest float is false for NaN and infinities alike.
                finite[t] =
                    (_mm512_cmp_ps_mask(a0, big, _CMP_LE_OQ) & _mm512_cmp_ps_mask(a1, big, _CMP_LE_OQ)) == 0xFFFF;
                m[t] = _mm512_max_ps(a0, a1);
            }
        }
        __m512 amax;
        if constexpr (Span) {
            amax = span_amax;
        } else {
            // Quarter t of amax: token t's maximum in its four lanes.
            const __m512 m01 = _mm512_max_ps(_mm512_shuffle_f32x4(m[0], m[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                             _mm512_shuffle_f32x4(m[0], m[1], _MM_SHUFFLE(3, 2, 3, 2)));
            const __m512 m23 = _mm512_max_ps(_mm512_shuffle_f32x4(m[2], m[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                             _mm512_shuffle_f32x4(m[2], m[3], _MM_SHUFFLE(3, 2, 3, 2)));
            amax = _mm512_max_ps(_mm512_shuffle_f32x4(m01, m23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(m01, m23, _MM_SHUFFLE(3, 1, 3, 1)));
            amax = _mm512_max_ps(amax, _mm512_permute_ps(amax, _MM_SHUFFLE(1, 0, 3, 2)));
            amax = _mm512_max_ps(amax, _mm512_permute_ps(amax, _MM_SHUFFLE(2, 3, 0, 1)));
        }
        // block_scale for the four at once: where a token's block is not finite (scale NaN), or
        // finite with 127 / max not finite or 0 (scale 0), its codes are 0.
        const __m512 idv = _mm512_div_ps(c127, amax), dv = _mm512_div_ps(amax, c127);
        const __mmask16 id_ok = _mm512_cmp_ps_mask(_mm512_abs_ps(idv), big, _CMP_LE_OQ) &
                                _mm512_cmp_ps_mask(idv, _mm512_setzero_ps(), _CMP_NEQ_OQ);
        __mmask8 fin4 = 0, ok4 = 0;
        __m512i c[4][2];
        #pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
            const bool ok = finite[t] && ((id_ok >> (4 * t)) & 1);
            fin4 = __mmask8(fin4 | (finite[t] ? 1 << t : 0));
            ok4 = __mmask8(ok4 | (ok ? 1 << t : 0));
            const __m512 idb = _mm512_permutexvar_ps(_mm512_set1_epi32(4 * t), idv);
            const __mmask16 k = ok ? 0xFFFF : 0;
            c[t][0] = _mm512_maskz_cvtps_epi32(k, _mm512_mul_ps(v[t][0], idb));
            c[t][1] = _mm512_maskz_cvtps_epi32(k, _mm512_mul_ps(v[t][1], idb));
        }
        const __m512i first4 = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        __m128 d4 = _mm_mask_mov_ps(_mm_set1_ps(std::numeric_limits<float>::quiet_NaN()), fin4, _mm_setzero_ps());
        d4 = _mm_mask_mov_ps(d4, ok4, _mm512_castps512_ps128(_mm512_permutexvar_ps(first4, dv)));
        // The eight sums (token t's codes 0-15 and 16-31) in quarters 0-3 of s01 (tokens 0, 1)
        // and s23 (tokens 2, 3), every lane of a quarter holding its sum.
        __m512i p[4];
        #pragma GCC unroll 4
        for (int t = 0; t < 4; ++t)
            p[t] = _mm512_add_epi32(_mm512_shuffle_i32x4(c[t][0], c[t][1], _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_i32x4(c[t][0], c[t][1], _MM_SHUFFLE(3, 2, 3, 2)));
        __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
        __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(p[2], p[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(p[2], p[3], _MM_SHUFFLE(3, 1, 3, 1)));
        s01 = _mm512_add_epi32(s01, _mm512_shuffle_epi32(s01, _MM_PERM_BADC));
        s01 = _mm512_add_epi32(s01, _mm512_shuffle_epi32(s01, _MM_PERM_CDAB));
        s23 = _mm512_add_epi32(s23, _mm512_shuffle_epi32(s23, _MM_PERM_BADC));
        s23 = _mm512_add_epi32(s23, _mm512_shuffle_epi32(s23, _MM_PERM_CDAB));
        // Tokens 0-3's sums of codes 0-15 (quarters 0 and 2 of s01, then of s23) and 16-31.
        const __m128i lo16 = _mm512_castsi512_si128(
            _mm512_permutex2var_epi32(s01, _mm512_setr_epi32(0, 8, 16, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s23));
        const __m128i hi16 = _mm512_castsi512_si128(
            _mm512_permutex2var_epi32(s01, _mm512_setr_epi32(4, 12, 20, 28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s23));
        const __m128i sum = _mm_add_epi32(lo16, hi16);
        _mm_storeu_ps(db + 4 * b, d4);
        _mm_storeu_ps(ds + 4 * b, _mm_mul_ps(d4, _mm_cvtepi32_ps(sum)));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b16 + 8 * b), _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(lo16, 5)));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b16 + 8 * b + 4),
                         _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(hi16, 5)));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b32 + 4 * b), _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(sum, 7)));
        __m256i bytes[4];
        #pragma GCC unroll 4
        for (int t = 0; t < 4; ++t)
            bytes[t] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtsepi32_epi8(c[t][0])),
                                               _mm512_cvtsepi32_epi8(c[t][1]), 1);
        const __m512i z01 = _mm512_inserti64x4(_mm512_castsi256_si512(bytes[0]), bytes[1], 1);
        const __m512i z23 = _mm512_inserti64x4(_mm512_castsi256_si512(bytes[2]), bytes[3], 1);
        _mm512_storeu_si512(q + 128 * b, _mm512_permutex2var_epi32(z01, lo, z23));
        _mm512_storeu_si512(q + 128 * b + 64, _mm512_permutex2var_epi32(z01, hi, z23));
    }
}

} // namespace

void quantize_tile_vnni(const float *x, int64_t n, int8_t *q, float *db, float *ds, int32_t *b16, int32_t *b32,
                        int span)
{
    if (span == qk_k)
        quantize_tile_avx512<true>(x, n, q, db, ds, b16, b32);
    else
        quantize_tile_avx512<false>(x, n, q, db, ds, b16, b32);
}

void quantize_acts_with(VectorLevel level, ThreadPool *pool, const float *x, int64_t n_tokens, int64_t n,
                        QuantizedActs &out, int span)
{
    quantize_acts_shape(out, n_tokens, n, span);
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
