// Q8_0, Q4_0, Q4_K and Q6_K: block decoding and ggml's reference quantizers (layouts in quant.h).
//
// Bit-exactness: the tests compare dequantization with llama.cpp's gguf package and the
// quantizers with ggml's quantize_row_*_ref, bit for bit. Both evaluate every a * b + c with
// two roundings; a compiler allowed to fuse them into one FMA (GCC does so by default whenever
// the target has FMA, even in ISO mode) would change the last bit, so contraction is switched
// off for this file.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "cpu/quant.h"

#include "cpu/ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <immintrin.h>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings; the values are defined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace longscope {

namespace {

constexpr int qk_small = 32; // Q8_0 and Q4_0 block
constexpr int qk_k = 256;    // K-quant super-block

struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[qk_small];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[qk_small / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[qk_k / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ6_K {
    uint8_t ql[qk_k / 2];
    uint8_t qh[qk_k / 4];
    int8_t scales[qk_k / 16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// The structs hold only bytes and uint16 (alignment 2); the data may sit at any address in a
// mapped file, so each block is copied out before use (a plain 34..210-byte load).
template <typename Block> Block load_block(const uint8_t *p)
{
    Block b;
    std::memcpy(&b, p, sizeof b);
    return b;
}

// Round to nearest, ties to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves the integer
// part in the low mantissa bits. Exact for |x| < 2^22; inputs are clamped first (every caller
// clamps the result to a few bits afterwards, so clamping earlier changes nothing).
inline int nearest_int(float x)
{
    x = std::clamp(x, -4194303.0f, 4194303.0f);
    const float shifted = x + 12582912.0f;
    return int(std::bit_cast<uint32_t>(shifted) & 0x007fffff) - 0x00400000;
}

// ---- Q8_0 -----------------------------------------------------------------------------------

void dequantize_q8_0(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b) {
        const auto blk = load_block<BlockQ8_0>(src + b * sizeof(BlockQ8_0));
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < qk_small; ++j)
            dst[b * qk_small + j] = d * float(blk.qs[j]);
    }
}

void quantize_q8_0(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b, x += qk_small) {
        float amax = 0.0f;
        for (int j = 0; j < qk_small; ++j)
            amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ8_0 blk;
        blk.d = f32_to_f16(d);
        for (int j = 0; j < qk_small; ++j)
            blk.qs[j] = int8_t(std::round(x[j] * id)); // ties away from zero, as roundf
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// ---- Q4_0 -----------------------------------------------------------------------------------

void dequantize_q4_0(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b) {
        const auto blk = load_block<BlockQ4_0>(src + b * sizeof(BlockQ4_0));
        const float d = f16_to_f32(blk.d);
        float *y = dst + b * qk_small;
        for (int j = 0; j < qk_small / 2; ++j) {
            y[j] = d * float((blk.qs[j] & 0x0f) - 8);
            y[j + qk_small / 2] = d * float((blk.qs[j] >> 4) - 8);
        }
    }
}

void quantize_q4_0(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b, x += qk_small) {
        // The signed value of largest magnitude maps to -8, the one code with no positive
        // twin, so the full range [-8, 7] is used on the side where the extreme value lies.
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk_small; ++j)
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ4_0 blk;
        blk.d = f32_to_f16(d);
        for (int j = 0; j < qk_small / 2; ++j) {
            // + 8.5 then truncation: round half up into the offset-8 code, as ggml.
            const int lo = std::min(15, int(int8_t(x[j] * id + 8.5f)));
            const int hi = std::min(15, int(int8_t(x[j + qk_small / 2] * id + 8.5f)));
            blk.qs[j] = uint8_t(lo | (hi << 4));
        }
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// ---- Q4_K -----------------------------------------------------------------------------------

// Scale and min of sub-block j (0..7) from the 12 packed bytes. Bytes 0-3 hold the low six
// bits of the scales of sub-blocks 0-3, bytes 4-7 those of their mins; bytes 8-11 hold the low
// nibbles of scale (low half) and min (high half) of sub-blocks 4-7, whose top two bits sit in
// the spare top bits of bytes 0-3 (scales) and 4-7 (mins).
inline void q4_k_scale_min(int j, const uint8_t *s, uint8_t &sc, uint8_t &m)
{
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = uint8_t((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

void dequantize_q4_k(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const auto blk = load_block<BlockQ4_K>(src + b * sizeof(BlockQ4_K));
        const float d = f16_to_f32(blk.d);
        const float dmin = f16_to_f32(blk.dmin);
        float *y = dst + b * qk_k;
        for (int c = 0; c < 4; ++c) { // 64-element chunk: two sub-blocks sharing 32 bytes
            const uint8_t *q = blk.qs + 32 * c;
            uint8_t sc, m;
            q4_k_scale_min(2 * c, blk.scales, sc, m);
            const float d1 = d * float(sc), m1 = dmin * float(m);
            q4_k_scale_min(2 * c + 1, blk.scales, sc, m);
            const float d2 = d * float(sc), m2 = dmin * float(m);
            for (int l = 0; l < 32; ++l)
                y[64 * c + l] = d1 * float(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; ++l)
                y[64 * c + 32 + l] = d2 * float(q[l] >> 4) - m2;
        }
    }
}

// Fits x ~ scale * L - min with L in [0, nmax] by weighted least squares (ggml's
// make_qkx2_quants): start from the full range, then try nstep + 1 slightly different
// inverse scales, solve the 2x2 normal equations for each assignment of L and keep the
// one with the least weighted squared error. Returns the scale; *neg_min gets -min >= 0.
float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                    uint8_t *Laux, float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        min = std::min(min, x[i]);
        max = std::max(max, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0; // the offset only ever subtracts: an all-positive block keeps min 0
    if (max == min) {
        std::fill(L, L + n, uint8_t(0));
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = float(nmax) / (max - min);
    float scale = 1.0f / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
        L[i] = uint8_t(l);
        const float diff = scale * float(L[i]) + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = uint8_t(l);
            const float wl = w[i] * float(l);
            sum_l += wl;
            sum_l2 += wl * float(l);
            sum_xl += wl * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; ++i) {
                const float diff = this_scale * float(Laux[i]) + this_min - x[i];
                err += w[i] * (diff * diff);
            }
            if (err < best_error) {
                std::copy(Laux, Laux + n, L);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

void quantize_q4_k(const float *x, uint8_t *dst, int64_t n)
{
    uint8_t L[qk_k], Laux[32];
    float weights[32], mins[8], scales[8];
    for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
        float max_scale = 0, max_min = 0; // the min is subtracted, so scales are never negative
        for (int j = 0; j < 8; ++j) {
            const float *xs = x + 32 * j;
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l)
                sum_x2 += xs[l] * xs[l];
            // Weight large values more, but never ignore small ones: rms + |x|.
            const float av_x = std::sqrt(sum_x2 / 32.0f);
            for (int l = 0; l < 32; ++l)
                weights[l] = av_x + std::fabs(xs[l]);
            scales[j] = fit_scale_min(32, 15, xs, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }

        // The eight scales and mins become 6-bit multiples of d and dmin.
        BlockQ4_K blk{};
        const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        for (int j = 0; j < 8; ++j) {
            const uint8_t ls = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_scale * scales[j])))));
            const uint8_t lm = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_min * mins[j])))));
            if (j < 4) {
                blk.scales[j] = ls;
                blk.scales[j + 4] = lm;
            } else {
                blk.scales[j + 4] = uint8_t((ls & 0x0f) | ((lm & 0x0f) << 4));
                blk.scales[j - 4] |= uint8_t((ls >> 4) << 6);
                blk.scales[j] |= uint8_t((lm >> 4) << 6);
            }
        }
        blk.d = f32_to_f16(max_scale / 63.0f);
        blk.dmin = f32_to_f16(max_min / 63.0f);

        // Requantize against the scales as stored (rounded to 6 bits and f16).
        const float d_all = f16_to_f32(blk.d), dmin_all = f16_to_f32(blk.dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            q4_k_scale_min(j, blk.scales, sc, m);
            const float d = d_all * float(sc);
            if (d == 0.0f)
                continue; // keeps the codes of the search
            const float dm = dmin_all * float(m);
            for (int l = 0; l < 32; ++l)
                L[32 * j + l] = uint8_t(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, 15));
        }
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l)
                blk.qs[32 * c + l] = uint8_t(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// ---- Q6_K -----------------------------------------------------------------------------------

void dequantize_q6_k(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const auto blk = load_block<BlockQ6_K>(src + b * sizeof(BlockQ6_K));
        const float d = f16_to_f32(blk.d);
        for (int half = 0; half < 2; ++half) {
            const uint8_t *ql = blk.ql + 64 * half;
            const uint8_t *qh = blk.qh + 32 * half;
            const int8_t *sc = blk.scales + 8 * half;
            float *y = dst + b * qk_k + 128 * half;
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * float(sc[is]) * float(q1);
                y[l + 32] = d * float(sc[is + 2]) * float(q2);
                y[l + 64] = d * float(sc[is + 4]) * float(q3);
                y[l + 96] = d * float(sc[is + 6]) * float(q4);
            }
        }
    }
}

// A symmetric scale for x ~ scale * (L - nmax), L in [0, 2 nmax) (ggml's make_qx_quants with
// weights x^2): start from the value of largest magnitude mapping to -nmax, then try 18
// nearby inverse scales and keep the one maximising (sum w x l)^2 / sum w l^2, i.e. the least
// weighted squared error with the optimal scale for that assignment.
constexpr float group_max_eps = 1e-15f;

float fit_symmetric_scale(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < group_max_eps) { // all (practically) zero
        std::fill(L, L + n, int8_t(0));
        return 0.0f;
    }
    float iscale = -float(nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = int8_t(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * float(l);
        suml2 += w * float(l) * float(l);
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -(float(nmax) + 0.1f * float(is)) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * float(l);
            suml2 += w * float(l) * float(l);
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = int8_t(nmax + std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

void quantize_q6_k(const float *x, uint8_t *dst, int64_t n)
{
    int8_t L[qk_k];
    float scales[qk_k / 16];
    for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < qk_k / 16; ++ib) {
            scales[ib] = fit_symmetric_scale(16, 32, x + 16 * ib, L + 16 * ib);
            if (std::fabs(scales[ib]) > max_abs_scale) {
                max_abs_scale = std::fabs(scales[ib]);
                max_scale = scales[ib];
            }
        }
        BlockQ6_K blk{};
        if (max_abs_scale < group_max_eps) { // an all-zero block: zero bytes decode to zeros
            blk.d = f32_to_f16(0.0f);
            std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
            continue;
        }
        // The signed scale of largest magnitude maps to -128 (int8 scales, sign kept).
        const float iscale = -128.0f / max_scale;
        blk.d = f32_to_f16(1.0f / iscale);
        for (int ib = 0; ib < qk_k / 16; ++ib)
            blk.scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));

        // Requantize against the scales as stored.
        const float d_all = f16_to_f32(blk.d);
        for (int j = 0; j < qk_k / 16; ++j) {
            const float d = d_all * float(blk.scales[j]);
            if (d == 0.0f)
                continue;
            for (int i = 0; i < 16; ++i)
                L[16 * j + i] = int8_t(std::clamp(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
        }
        for (int half = 0; half < 2; ++half) {
            uint8_t *ql = blk.ql + 64 * half;
            uint8_t *qh = blk.qh + 32 * half;
            const int8_t *Lh = L + 128 * half;
            for (int l = 0; l < 32; ++l) {
                const auto q1 = uint8_t(Lh[l]), q2 = uint8_t(Lh[l + 32]);
                const auto q3 = uint8_t(Lh[l + 64]), q4 = uint8_t(Lh[l + 96]);
                ql[l] = uint8_t((q1 & 0x0f) | ((q3 & 0x0f) << 4));
                ql[l + 32] = uint8_t((q2 & 0x0f) | ((q4 & 0x0f) << 4));
                qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// Vector dequantizers for the two 32-element block types, on the decode path of every
// quantized weight. Same arithmetic as the scalar ones (one rounding: d * q), so the same bits.
#define LS_AVX512_Q __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LS_AVX2_Q __attribute__((target("avx2,fma,f16c")))

LS_AVX512_Q void dequantize_q8_0_avx512(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b) {
        const uint8_t *p = src + b * sizeof(BlockQ8_0);
        uint16_t h;
        std::memcpy(&h, p, 2);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
        const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 2));
        const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 18));
        _mm512_storeu_ps(dst + b * qk_small, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
        _mm512_storeu_ps(dst + b * qk_small + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))));
    }
}

LS_AVX512_Q void dequantize_q4_0_avx512(const uint8_t *src, float *dst, int64_t n)
{
    const __m512i eight = _mm512_set1_epi32(8);
    const __m128i low = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < n / qk_small; ++b) {
        const uint8_t *p = src + b * sizeof(BlockQ4_0);
        uint16_t h;
        std::memcpy(&h, p, 2);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 2));
        const __m128i lo = _mm_and_si128(q, low), hi = _mm_and_si128(_mm_srli_epi16(q, 4), low);
        const __m512i l32 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), eight);
        const __m512i h32 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), eight);
        _mm512_storeu_ps(dst + b * qk_small, _mm512_mul_ps(d, _mm512_cvtepi32_ps(l32)));
        _mm512_storeu_ps(dst + b * qk_small + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(h32)));
    }
}

LS_AVX2_Q void dequantize_q8_0_avx2(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b) {
        const uint8_t *p = src + b * sizeof(BlockQ8_0);
        uint16_t h;
        std::memcpy(&h, p, 2);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
        for (int k = 0; k < 4; ++k) {
            const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p + 2 + 8 * k));
            _mm256_storeu_ps(dst + b * qk_small + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
    }
}

// Q4_K: y = (d * sc) * q - (dmin * m), the scalar order (no fused multiply-add).
LS_AVX512_Q void dequantize_q4_k_avx512(const uint8_t *src, float *dst, int64_t n)
{
    const __m128i low = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const uint8_t *p = src + b * sizeof(BlockQ4_K);
        uint16_t hd, hm;
        std::memcpy(&hd, p, 2);
        std::memcpy(&hm, p + 2, 2);
        const float d = _cvtsh_ss(hd), dmin = _cvtsh_ss(hm);
        float *y = dst + b * qk_k;
        for (int c = 0; c < 4; ++c) {
            const uint8_t *q = p + 16 + 32 * c;
            for (int sub = 0; sub < 2; ++sub) {
                uint8_t sc, m;
                q4_k_scale_min(2 * c + sub, p + 4, sc, m);
                const __m512 d1 = _mm512_set1_ps(d * float(sc)), m1 = _mm512_set1_ps(dmin * float(m));
                for (int h = 0; h < 2; ++h) {
                    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(q + 16 * h));
                    const __m128i nib = sub == 0 ? _mm_and_si128(v, low) : _mm_and_si128(_mm_srli_epi16(v, 4), low);
                    const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(nib));
                    _mm512_storeu_ps(y + 64 * c + 32 * sub + 16 * h, _mm512_sub_ps(_mm512_mul_ps(d1, qf), m1));
                }
            }
        }
    }
}

// Q6_K: y = (d * sc) * (q - 32), sixteen values (one scale) at a time.
LS_AVX512_Q void dequantize_q6_k_avx512(const uint8_t *src, float *dst, int64_t n)
{
    const __m128i m4 = _mm_set1_epi8(0x0f), m3 = _mm_set1_epi8(0x03), m30 = _mm_set1_epi8(0x30);
    const __m512i k32 = _mm512_set1_epi32(32);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const uint8_t *p = src + b * sizeof(BlockQ6_K);
        uint16_t hd;
        std::memcpy(&hd, p + 208, 2);
        const float d = _cvtsh_ss(hd);
        for (int half = 0; half < 2; ++half) {
            const uint8_t *ql = p + 64 * half, *qh = p + 128 + 32 * half;
            const auto *sc = reinterpret_cast<const int8_t *>(p + 192 + 8 * half);
            float *y = dst + b * qk_k + 128 * half;
            for (int l = 0; l < 32; l += 16) {
                const int is = l / 16;
                const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(ql + l));
                const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(ql + l + 32));
                const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qh + l));
                const __m128i q[4] = {
                    _mm_or_si128(_mm_and_si128(a, m4), _mm_slli_epi16(_mm_and_si128(h, m3), 4)),
                    _mm_or_si128(_mm_and_si128(c, m4), _mm_and_si128(_mm_slli_epi16(h, 2), m30)),
                    _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 4), m4), _mm_and_si128(h, m30)),
                    _mm_or_si128(_mm_and_si128(_mm_srli_epi16(c, 4), m4), _mm_and_si128(_mm_srli_epi16(h, 2), m30))};
                for (int k = 0; k < 4; ++k) {
                    const __m512 dk = _mm512_set1_ps(d * float(sc[is + 2 * k]));
                    const __m512 qf = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(q[k]), k32));
                    _mm512_storeu_ps(y + l + 32 * k, _mm512_mul_ps(dk, qf));
                }
            }
        }
    }
}

} // namespace


void q4_k_scales_mins(const uint8_t *packed, uint8_t sc[8], uint8_t m[8])
{
    for (int j = 0; j < 8; ++j)
        q4_k_scale_min(j, packed, sc[j], m[j]);
}

bool is_quantized(DType type)
{
    return type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_K || type == DType::Q6_K;
}

int64_t block_elems(DType type)
{
    auto t = dtype_traits(static_cast<uint32_t>(type));
    return t ? t->block_elems : 1;
}

size_t row_bytes(DType type, int64_t n)
{
    auto t = dtype_traits(static_cast<uint32_t>(type));
    if (!t)
        return 0;
    return size_t(n / t->block_elems) * t->block_bytes;
}

VectorLevel dequantize_level(DType type, VectorLevel level)
{
    switch (type) {
    case DType::Q8_0: return level;
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q6_K: return level == VectorLevel::Avx512 ? VectorLevel::Avx512 : VectorLevel::Portable;
    default: return VectorLevel::Portable;
    }
}

VectorLevel dequantize_level(DType type) { return dequantize_level(type, kernel_table().level); }

void dequantize_row(DType type, const void *src, float *dst, int64_t n)
{
    dequantize_row_with(kernel_table().level, type, src, dst, n);
}

void dequantize_row_with(VectorLevel level, DType type, const void *src, float *dst, int64_t n)
{
    const auto *p = static_cast<const uint8_t *>(src);
    const VectorLevel kernel = dequantize_level(type, level);
    const bool avx512 = kernel == VectorLevel::Avx512;
    switch (type) {
    case DType::F32:
        std::memcpy(dst, p, size_t(n) * 4);
        return;
    case DType::F16:
    case DType::BF16:
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            dst[i] = type == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        return;
    case DType::Q8_0:
        if (avx512)
            dequantize_q8_0_avx512(p, dst, n);
        else if (kernel == VectorLevel::Avx2)
            dequantize_q8_0_avx2(p, dst, n);
        else
            dequantize_q8_0(p, dst, n);
        return;
    case DType::Q4_0:
        if (avx512)
            dequantize_q4_0_avx512(p, dst, n);
        else
            dequantize_q4_0(p, dst, n);
        return;
    case DType::Q4_K:
        if (avx512)
            dequantize_q4_k_avx512(p, dst, n);
        else
            dequantize_q4_k(p, dst, n);
        return;
    case DType::Q6_K:
        if (avx512)
            dequantize_q6_k_avx512(p, dst, n);
        else
            dequantize_q6_k(p, dst, n);
        return;
    default: return; // callers check dtype_supported first
    }
}

void quantize_row(DType type, const float *src, void *dst, int64_t n)
{
    auto *p = static_cast<uint8_t *>(dst);
    switch (type) {
    case DType::F32:
        std::memcpy(p, src, size_t(n) * 4);
        return;
    case DType::F16:
    case DType::BF16:
        for (int64_t i = 0; i < n; ++i) {
            const uint16_t h = type == DType::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
            std::memcpy(p + 2 * i, &h, 2);
        }
        return;
    case DType::Q8_0: quantize_q8_0(src, p, n); return;
    case DType::Q4_0: quantize_q4_0(src, p, n); return;
    case DType::Q4_K: quantize_q4_k(src, p, n); return;
    case DType::Q6_K: quantize_q6_k(src, p, n); return;
    default: return;
    }
}

} // namespace longscope
