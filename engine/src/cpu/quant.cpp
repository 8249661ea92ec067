// llama.cpp's block types: decoding and ggml's reference quantizers (layouts in quant.h).
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
#include "cpu/quant_simd.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <immintrin.h>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings; the values are defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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

struct BlockQ4_1 {
    uint16_t d, m;
    uint8_t qs[qk_small / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[qk_small / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[qk_small / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ2_K {
    uint8_t scales[qk_k / 16];
    uint8_t qs[qk_k / 4];
    uint16_t d, dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ3_K {
    uint8_t hmask[qk_k / 8];
    uint8_t qs[qk_k / 4];
    uint8_t scales[12];
    uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[qk_k / 8];
    uint8_t qs[qk_k / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[qk_small / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[qk_k / 64];
    uint8_t qs[qk_k / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

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

// The 2-bit field of value i (0..255) in a Q2_K / Q3_K qs[64]: two halves of 128 values, each
// four rows of 32 at bit offsets 0, 2, 4, 6 of the half's 32 bytes.
inline int q2_k_code(const uint8_t *qs, int i) { return (qs[32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3; }

// The 3-bit code of value i of a Q3_K block: the 2-bit field, plus 4 where bit i / 32 of
// hmask[i % 32] is set.
inline int q3_k_code(const uint8_t *qs, const uint8_t *hmask, int i)
{
    return q2_k_code(qs, i) | (((hmask[i % 32] >> (i / 32)) & 1) << 2);
}

// The value of largest magnitude among x[0, n), sign kept (the first of equal ones; 0 when all
// are 0): the quantizers map it to their most negative code, the one with no positive twin.
float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j)
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    return max;
}

// 256 2-bit codes (value order) into qs[64], the inverse of q2_k_code.
void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t *Lh = L + 128 * h;
            qs[32 * h + l] = uint8_t(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
        }
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

} // namespace

float quantize_block_q8_0_codes(const float *x, int8_t qs[32])
{
    float amax = 0.0f;
    for (int j = 0; j < qk_small; ++j)
        amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < qk_small; ++j)
        qs[j] = int8_t(std::round(x[j] * id)); // ties away from zero, as roundf
    return d;
}

namespace {

void quantize_q8_0(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b, x += qk_small) {
        BlockQ8_0 blk;
        blk.d = f32_to_f16(quantize_block_q8_0_codes(x, blk.qs));
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// ---- Q4_0 -----------------------------------------------------------------------------------

// The 32-value blocks whose 16 bytes `qs` hold value j in the low nibble of byte j and value
// j + 16 in the high one (Q4_0, Q4_1, IQ4_NL): `decoder(blk)` gives the block's function from a
// nibble to its value.
template <typename Block, typename Decoder> void dequantize_nibble_blocks(const uint8_t *src, float *dst, int64_t n,
                                                                          Decoder decoder)
{
    for (int64_t b = 0; b < n / qk_small; ++b) {
        const auto blk = load_block<Block>(src + b * sizeof(Block));
        const auto value = decoder(blk);
        float *y = dst + b * qk_small;
        for (int j = 0; j < qk_small / 2; ++j) {
            y[j] = value(blk.qs[j] & 0x0f);
            y[j + qk_small / 2] = value(blk.qs[j] >> 4);
        }
    }
}

void dequantize_q4_0(const uint8_t *src, float *dst, int64_t n)
{
    dequantize_nibble_blocks<BlockQ4_0>(src, dst, n, [](const BlockQ4_0 &blk) {
        const float d = f16_to_f32(blk.d);
        return [d](int q) { return d * float(q - 8); };
    });
}

void quantize_q4_0(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b, x += qk_small) {
        // The signed value of largest magnitude maps to -8, the one code with no positive
        // twin, so the full range [-8, 7] is used on the side where the extreme value lies.
        const float d = signed_absmax(x, qk_small) / -8.0f;
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
                    uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad = false)
{
    // The error measure: squared (Q4_K, Q5_K) or absolute (Q2_K: use_mad) weighted differences.
    const auto err_of = [use_mad](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
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
        best_error += w[i] * err_of(diff);
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
                err += w[i] * err_of(diff);
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

// The part Q4_K and Q5_K share (ggml's quantize_row_q4_K_ref / q5_K_ref): per sub-block of 32
// a least-squares scale and min (weighted by |x| + rms) with codes in [0, nmax], the eight
// scales and mins as 6-bit multiples of d and dmin (packed as quant.h says), then the codes
// again against the scales as stored. L gets the 256 codes in value order.
void quantize_k_scale_min_block(const float *x, int nmax, float rmin, int nstep, uint8_t L[qk_k], uint16_t &d_out,
                                uint16_t &dmin_out, uint8_t packed[12])
{
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
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
        scales[j] = fit_scale_min(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }

    // The eight scales and mins become 6-bit multiples of d and dmin.
    std::memset(packed, 0, 12);
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; ++j) {
        const uint8_t ls = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_scale * scales[j])))));
        const uint8_t lm = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_min * mins[j])))));
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = uint8_t((ls & 0x0f) | ((lm & 0x0f) << 4));
            packed[j - 4] |= uint8_t((ls >> 4) << 6);
            packed[j] |= uint8_t((lm >> 4) << 6);
        }
    }
    d_out = f32_to_f16(max_scale / 63.0f);
    dmin_out = f32_to_f16(max_min / 63.0f);

    // Requantize against the scales as stored (rounded to 6 bits and f16).
    const float d_all = f16_to_f32(d_out), dmin_all = f16_to_f32(dmin_out);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        q4_k_scale_min(j, packed, sc, m);
        const float d = d_all * float(sc);
        if (d == 0.0f)
            continue; // keeps the codes of the search
        const float dm = dmin_all * float(m);
        for (int l = 0; l < 32; ++l)
            L[32 * j + l] = uint8_t(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
    }
}

void quantize_q4_k(const float *x, uint8_t *dst, int64_t n)
{
    uint8_t L[qk_k];
    for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
        BlockQ4_K blk{};
        quantize_k_scale_min_block(x, 15, -1.0f, 20, L, blk.d, blk.dmin, blk.scales);
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
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < group_max_eps) { // all (practically) zero
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
        for (int ib = 0; ib < qk_k / 16; ++ib)
            scales[ib] = fit_symmetric_scale(16, 32, x + 16 * ib, L + 16 * ib);
        const float max_scale = signed_absmax(scales, qk_k / 16);
        BlockQ6_K blk{};
        if (std::fabs(max_scale) < group_max_eps) { // an all-zero block: zero bytes decode to zeros
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

// ---- Q4_1, Q5_0, Q5_1 ---------------------------------------------------------------------------

// The fifth bit of value j (0..31) of a Q5_0 / Q5_1 block, from its 32-bit mask, as 0 or 16.
inline int q5_high(uint32_t qh, int j) { return int((qh >> j) & 1u) << 4; }

inline uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

void dequantize_q4_1(const uint8_t *src, float *dst, int64_t n)
{
    dequantize_nibble_blocks<BlockQ4_1>(src, dst, n, [](const BlockQ4_1 &blk) {
        const float d = f16_to_f32(blk.d), m = f16_to_f32(blk.m);
        return [d, m](int q) { return float(q) * d + m; };
    });
}

// Q5_0 (offset 16, no min) and Q5_1 (min m): x = (q - offset) * d + m.
template <typename Block, bool has_min> void dequantize_q5(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b) {
        const auto blk = load_block<Block>(src + b * sizeof(Block));
        const float d = f16_to_f32(blk.d);
        const uint32_t qh = load_u32(blk.qh);
        float *y = dst + b * qk_small;
        for (int j = 0; j < qk_small / 2; ++j) {
            const int q0 = (blk.qs[j] & 0x0f) | q5_high(qh, j);
            const int q1 = (blk.qs[j] >> 4) | q5_high(qh, j + 16);
            if constexpr (has_min) {
                const float m = f16_to_f32(blk.m);
                y[j] = float(q0) * d + m;
                y[j + 16] = float(q1) * d + m;
            } else {
                y[j] = float(q0 - 16) * d;
                y[j + 16] = float(q1 - 16) * d;
            }
        }
    }
}

// Q4_1 and Q5_1: d = (max - min) / nmax, m = min, q = round-half-up((x - min) / d).
template <int bits> void quantize_min_block(const float *x, uint16_t &d_out, uint16_t &m_out, uint8_t q[qk_small])
{
    constexpr int nmax = (1 << bits) - 1;
    float min = x[0], max = x[0];
    for (int j = 1; j < qk_small; ++j) {
        min = std::min(min, x[j]);
        max = std::max(max, x[j]);
    }
    const float d = (max - min) / float(nmax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    d_out = f32_to_f16(d);
    m_out = f32_to_f16(min);
    for (int j = 0; j < qk_small; ++j) {
        const float v = (x[j] - min) * id;
        // ggml clamps the 4-bit codes to 15 and leaves the 5-bit ones as they round.
        q[j] = bits == 4 ? uint8_t(std::min(15, int(int8_t(v + 0.5f)))) : uint8_t(v + 0.5f);
    }
}

void quantize_q4_1(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b, x += qk_small) {
        BlockQ4_1 blk;
        uint8_t q[qk_small];
        quantize_min_block<4>(x, blk.d, blk.m, q);
        for (int j = 0; j < qk_small / 2; ++j)
            blk.qs[j] = uint8_t(q[j] | (q[j + 16] << 4));
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// The low nibbles and the 32-bit mask of fifth bits of 32 five-bit codes.
template <typename Block> void pack_q5(const uint8_t q[qk_small], Block &blk)
{
    uint32_t qh = 0;
    for (int j = 0; j < qk_small / 2; ++j) {
        blk.qs[j] = uint8_t((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
        qh |= uint32_t((q[j] & 0x10u) >> 4) << j;
        qh |= uint32_t((q[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(blk.qh, &qh, 4);
}

void quantize_q5_0(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b, x += qk_small) {
        // As Q4_0: the signed value of largest magnitude maps to -16.
        const float d = signed_absmax(x, qk_small) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ5_0 blk;
        blk.d = f32_to_f16(d);
        uint8_t q[qk_small];
        for (int j = 0; j < qk_small; ++j)
            q[j] = uint8_t(std::min(31, int(int8_t(x[j] * id + 16.5f))));
        pack_q5(q, blk);
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

void quantize_q5_1(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b, x += qk_small) {
        BlockQ5_1 blk;
        uint8_t q[qk_small];
        quantize_min_block<5>(x, blk.d, blk.m, q);
        pack_q5(q, blk);
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// ---- Q2_K -----------------------------------------------------------------------------------

void dequantize_q2_k(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const auto blk = load_block<BlockQ2_K>(src + b * sizeof(BlockQ2_K));
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        float *y = dst + b * qk_k;
        for (int i = 0; i < qk_k; ++i) {
            const int g = i / 16; // the scale group
            const float dl = d * float(blk.scales[g] & 0x0f), ml = dmin * float(blk.scales[g] >> 4);
            y[i] = dl * float(q2_k_code(blk.qs, i)) - ml;
        }
    }
}

void quantize_q2_k(const float *x, uint8_t *dst, int64_t n)
{
    uint8_t L[qk_k], Laux[16];
    float weights[16], mins[16], scales[16];
    constexpr float q4scale = 15.0f;
    for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; ++j) {
            for (int l = 0; l < 16; ++l)
                weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        // Scales in the low nibbles, mins in the high ones: 4-bit multiples of d and dmin.
        BlockQ2_K blk{};
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; ++j)
                blk.scales[j] = uint8_t(nearest_int(iscale * scales[j]));
            blk.d = f32_to_f16(max_scale / q4scale);
        } else {
            blk.d = f32_to_f16(0.0f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; ++j)
                blk.scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
            blk.dmin = f32_to_f16(max_min / q4scale);
        } else {
            blk.dmin = f32_to_f16(0.0f);
        }
        const float d_all = f16_to_f32(blk.d), dmin_all = f16_to_f32(blk.dmin);
        for (int j = 0; j < 16; ++j) {
            const float d = d_all * float(blk.scales[j] & 0x0f);
            if (d == 0.0f)
                continue;
            const float dm = dmin_all * float(blk.scales[j] >> 4);
            for (int l = 0; l < 16; ++l)
                L[16 * j + l] = uint8_t(std::clamp(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
        }
        pack_2bit(L, blk.qs);
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// ---- Q3_K -----------------------------------------------------------------------------------

void dequantize_q3_k(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const auto blk = load_block<BlockQ3_K>(src + b * sizeof(BlockQ3_K));
        const float d_all = f16_to_f32(blk.d);
        int8_t sc[16];
        q3_k_scales(blk.scales, sc);
        float *y = dst + b * qk_k;
        for (int i = 0; i < qk_k; ++i) {
            const float dl = d_all * float(sc[i / 16]);
            y[i] = dl * float(q3_k_code(blk.qs, blk.hmask, i) - 4);
        }
    }
}

// ggml's make_q3_quants with do_rmse: a symmetric scale for x ~ scale * l, l in [-nmax, nmax),
// from the value of largest magnitude mapping to -nmax, then up to five rounds of moving single
// codes where that raises (sum w x l)^2 / sum w l^2 (weights x^2). L gets l + nmax.
float fit_q3_scale(int n, int nmax, const float *x, int8_t *L)
{
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < group_max_eps) {
        std::fill(L, L + n, int8_t(0));
        return 0.0f;
    }
    const float iscale = -float(nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = int8_t(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * float(l);
        suml2 += w * float(l) * float(l);
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * float(L[i]);
            if (slx > 0) {
                float sl2 = suml2 - w * float(L[i]) * float(L[i]);
                const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * float(new_l);
                    sl2 += w * float(new_l) * float(new_l);
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = int8_t(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (n_changed == 0)
            break;
    }
    for (int i = 0; i < n; ++i)
        L[i] = int8_t(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void quantize_q3_k(const float *x, uint8_t *dst, int64_t n)
{
    int8_t L[qk_k];
    float scales[16];
    for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
        for (int j = 0; j < 16; ++j)
            scales[j] = fit_q3_scale(16, 4, x + 16 * j, L + 16 * j);
        const float max_scale = signed_absmax(scales, 16);
        // The signed scale of largest magnitude maps to -32; scales are stored as 6-bit l + 32.
        BlockQ3_K blk{};
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; ++j) {
                const int l = std::clamp(int(int8_t(nearest_int(iscale * scales[j]))), -32, 31) + 32;
                if (j < 8)
                    blk.scales[j] = uint8_t(l & 0x0f);
                else
                    blk.scales[j - 8] |= uint8_t((l & 0x0f) << 4);
                blk.scales[j % 4 + 8] |= uint8_t((l >> 4) << (2 * (j / 4)));
            }
            blk.d = f32_to_f16(1.0f / iscale);
        } else {
            blk.d = f32_to_f16(0.0f);
        }
        int8_t sc[16];
        q3_k_scales(blk.scales, sc);
        const float d_all = f16_to_f32(blk.d);
        for (int j = 0; j < 16; ++j) {
            const float d = d_all * float(sc[j]);
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; ++l)
                L[16 * j + l] = int8_t(std::clamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        // The third bit of value i goes to bit i / 32 of hmask[i % 32]; the low two bits as Q2_K.
        uint8_t low[qk_k];
        for (int i = 0; i < qk_k; ++i) {
            if (L[i] > 3)
                blk.hmask[i % 32] |= uint8_t(1u << (i / 32));
            low[i] = uint8_t(L[i] & 3);
        }
        pack_2bit(low, blk.qs);
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// ---- Q5_K -----------------------------------------------------------------------------------

void dequantize_q5_k(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const auto blk = load_block<BlockQ5_K>(src + b * sizeof(BlockQ5_K));
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        float *y = dst + b * qk_k;
        for (int j = 0; j < 8; ++j) { // sub-block j: nibble j % 2 of qs[32 (j / 2) ..], bit j of qh
            uint8_t sc, m;
            q4_k_scale_min(j, blk.scales, sc, m);
            const float d1 = d * float(sc), m1 = dmin * float(m);
            const uint8_t *q = blk.qs + 32 * (j / 2);
            for (int l = 0; l < 32; ++l) {
                const int lo = j % 2 ? q[l] >> 4 : q[l] & 0x0f;
                y[32 * j + l] = d1 * float(lo + ((blk.qh[l] >> j) & 1) * 16) - m1;
            }
        }
    }
}

void quantize_q5_k(const float *x, uint8_t *dst, int64_t n)
{
    uint8_t L[qk_k];
    for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
        BlockQ5_K blk{};
        quantize_k_scale_min_block(x, 31, -0.5f, 15, L, blk.d, blk.dmin, blk.scales);
        for (int j = 0; j < 8; ++j)
            for (int l = 0; l < 32; ++l) {
                const uint8_t q = L[32 * j + l];
                blk.qs[32 * (j / 2) + l] |= uint8_t((q & 0x0f) << (4 * (j % 2)));
                blk.qh[l] |= uint8_t((q >> 4) << j);
            }
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

// ---- IQ4_NL, IQ4_XS ---------------------------------------------------------------------------

void dequantize_iq4_nl(const uint8_t *src, float *dst, int64_t n)
{
    dequantize_nibble_blocks<BlockIQ4_NL>(src, dst, n, [](const BlockIQ4_NL &blk) {
        const float d = f16_to_f32(blk.d);
        return [d](int q) { return d * float(iq4_nl_values[q]); };
    });
}

void dequantize_iq4_xs(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const auto blk = load_block<BlockIQ4_XS>(src + b * sizeof(BlockIQ4_XS));
        const float d = f16_to_f32(blk.d);
        for (int ib = 0; ib < 8; ++ib) {
            const float dl = d * float(iq4_xs_scale(blk.scales_l, blk.scales_h, ib));
            const uint8_t *qs = blk.qs + 16 * ib;
            float *y = dst + b * qk_k + 32 * ib;
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * float(iq4_nl_values[qs[j] & 0x0f]);
                y[j + 16] = dl * float(iq4_nl_values[qs[j] >> 4]);
            }
        }
    }
}

// The index of the table value nearest to v (ggml's best_index_int8: ties to the upper one).
int nearest_iq4(float v)
{
    const int8_t *val = iq4_nl_values;
    if (v <= float(val[0]))
        return 0;
    if (v >= float(val[15]))
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < float(val[mid]))
            hi = mid;
        else
            lo = mid;
    }
    return v - float(val[hi - 1]) < float(val[hi]) - v ? hi - 1 : hi;
}

// The quantizer llama.cpp's tool runs for IQ4_NL and IQ4_XS without an importance matrix
// (ggml's quantize_row_iq4_nl_impl, ntry 7, weights x^2): per block of 32 the scale d with
// x ~ d * table[L] from the value of largest magnitude at either end of the table, then 15
// nearby inverse scales keeping the best (sum w q x)^2 / sum w q^2. One block (IQ4_NL): d as
// f16, codes again against it. Several (IQ4_XS): the block scales as 6-bit signed multiples
// of the super-block's d = -max_scale / 32, codes again against each block's scale as stored.
void quantize_iq4_impl(const float *x, int n_blocks, uint16_t &d_out, uint8_t *scales_l, uint16_t *scales_h, uint8_t *q4)
{
    constexpr int ntry = 7, bs = 32;
    const int8_t *values = iq4_nl_values;
    uint8_t L[qk_k];
    float scales[8];
    for (int ib = 0; ib < n_blocks; ++ib) {
        const float *xb = x + ib * bs;
        uint8_t *Lb = L + ib * bs;
        const float max = signed_absmax(xb, bs);
        if (std::fabs(max) < group_max_eps) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / float(values[0]);
        float id = 1.0f / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < bs; ++j) {
            const int l = nearest_iq4(id * xb[j]);
            Lb[j] = uint8_t(l);
            const float q = float(values[l]), w = xb[j] * xb[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = float(itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < bs; ++j) {
                const float q = float(values[nearest_iq4(id * xb[j])]), w = xb[j] * xb[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
    }
    if (n_blocks > 1) {
        *scales_h = 0;
        const float d = -signed_absmax(scales, n_blocks) / 32.0f;
        d_out = f32_to_f16(d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int ib = 0; ib < n_blocks; ++ib) {
            const int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * float(l);
            const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int j = 0; j < bs; ++j)
                L[ib * bs + j] = uint8_t(nearest_iq4(idl * x[ib * bs + j]));
            const int u = l + 32;
            if (ib % 2 == 0)
                scales_l[ib / 2] = uint8_t(u & 0x0f);
            else
                scales_l[ib / 2] |= uint8_t((u & 0x0f) << 4);
            *scales_h |= uint16_t((u >> 4) << (2 * ib));
        }
    } else {
        d_out = f32_to_f16(scales[0]);
        const float id = scales[0] != 0.0f ? 1.0f / scales[0] : 0.0f;
        for (int j = 0; j < bs; ++j)
            L[j] = uint8_t(nearest_iq4(id * x[j]));
    }
    for (int i = 0; i < n_blocks; ++i)
        for (int j = 0; j < 16; ++j)
            q4[16 * i + j] = uint8_t(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void quantize_iq4_nl(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_small; ++b, x += qk_small) {
        BlockIQ4_NL blk;
        quantize_iq4_impl(x, 1, blk.d, nullptr, nullptr, blk.qs);
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
    }
}

void quantize_iq4_xs(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
        BlockIQ4_XS blk{};
        quantize_iq4_impl(x, 8, blk.d, blk.scales_l, &blk.scales_h, blk.qs);
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

// The other types' vector dequantizers: the codes as the integer kernels extract them
// (quant_simd.h), then the scalar formulas' operations in the same order (the same bits).

// Sixteen of 64 unsigned byte codes (16 i .. 16 i + 15) as int32 lanes, minus `offset`.
LS_AVX512_Q inline __m512i codes16(const uint8_t (&u)[64], int i, int offset)
{
    return _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i *>(u + 16 * i))),
                            _mm512_set1_epi32(offset));
}

template <DType T> LS_AVX512_Q void dequantize_block32_avx512(const uint8_t *src, float *dst, int64_t n)
{
    using namespace qsimd;
    constexpr int64_t bb = block32_bytes<T>;
    for (int64_t b = 0; b < n / qk_small; ++b) {
        const uint8_t *p = src + b * bb;
        uint16_t hd, hm = 0;
        std::memcpy(&hd, p, 2);
        if constexpr (block32_min<T>)
            std::memcpy(&hm, p + 2, 2);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(hd)), m = _mm512_set1_ps(_cvtsh_ss(hm));
        alignas(64) uint8_t u[64];
        _mm512_store_si512(u, block32_codes_512<T>(p, false));
        for (int h = 0; h < 2; ++h) {
            // Q5_0's codes are offset by 16, the IQ4_NL table's values by 128.
            const __m512i q = codes16(u, h, block32_bias<T>);
            const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(q), d);
            _mm512_storeu_ps(dst + b * qk_small + 16 * h, block32_min<T> ? _mm512_add_ps(y, m) : y);
        }
    }
}

template <DType T> LS_AVX512_Q void dequantize_k_avx512(const uint8_t *src, float *dst, int64_t n)
{
    using namespace qsimd;
    constexpr int64_t bb = k_bytes<T>;
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const uint8_t *p = src + b * bb;
        // Per group (16 values: Q2_K, Q3_K; else 32) dl = d * sc and ml = dmin * m, as floats.
        alignas(64) float dl[16], ml[16];
        uint16_t h0, h1;
        if constexpr (T == DType::Q2_K) {
            std::memcpy(&h0, p + 80, 2);
            std::memcpy(&h1, p + 82, 2);
            const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
            _mm512_store_ps(dl, _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(h0)),
                                              _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0F)))));
            _mm512_store_ps(ml, _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(h1)), _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4))));
        } else if constexpr (T == DType::Q3_K) {
            std::memcpy(&h0, p + 108, 2);
            _mm512_store_ps(dl, _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(h0)),
                                              _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q3_k_unpack_scales(p + 96)))));
        } else if constexpr (T == DType::Q5_K) {
            std::memcpy(&h0, p, 2);
            std::memcpy(&h1, p + 2, 2);
            const float d = _cvtsh_ss(h0), dmin = _cvtsh_ss(h1);
            for (int j = 0; j < 8; ++j) {
                uint8_t sc, m;
                q4_k_scale_min(j, p + 4, sc, m);
                dl[j] = d * float(sc);
                ml[j] = dmin * float(m);
            }
        } else {
            std::memcpy(&h0, p, 2);
            _mm256_store_ps(dl, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h0)), _mm256_cvtepi32_ps(iq4_xs_unpack_scales(p))));
        }
        float *y = dst + b * qk_k;
        for (int k = 0; k < 4; ++k) {
            alignas(64) uint8_t u[64];
            _mm512_store_si512(u, k_codes_512<T>(p, k));
            for (int i = 0; i < 4; ++i) {
                const int g = k_groups16<T> ? 4 * k + i : 2 * k + i / 2;
                const __m512i q = codes16(u, i, T == DType::Q3_K ? 4 : T == DType::IQ4_XS ? 128 : 0);
                __m512 v = _mm512_mul_ps(_mm512_set1_ps(dl[g]), _mm512_cvtepi32_ps(q));
                if constexpr (k_min<T>)
                    v = _mm512_sub_ps(v, _mm512_set1_ps(ml[g]));
                _mm512_storeu_ps(y + 64 * k + 16 * i, v);
            }
        }
    }
}

} // namespace


void q3_k_codes(const uint8_t *block, uint8_t q[256])
{
    const auto blk = load_block<BlockQ3_K>(block);
    for (int i = 0; i < qk_k; ++i)
        q[i] = uint8_t(q3_k_code(blk.qs, blk.hmask, i));
}

void q2_k_codes(const uint8_t *block, uint8_t q[256])
{
    const auto blk = load_block<BlockQ2_K>(block);
    for (int i = 0; i < qk_k; ++i)
        q[i] = uint8_t(q2_k_code(blk.qs, i));
}

void q4_k_scales_mins(const uint8_t *packed, uint8_t sc[8], uint8_t m[8])
{
    for (int j = 0; j < 8; ++j)
        q4_k_scale_min(j, packed, sc[j], m[j]);
}

bool is_quantized(DType type)
{
    // Every type the engine computes with, but the float ones (the one list is dtype_supported).
    return dtype_supported(type) && type != DType::F32 && type != DType::F16 && type != DType::BF16;
}

bool is_k_quant(DType type)
{
    return type == DType::Q2_K || type == DType::Q3_K || type == DType::Q4_K || type == DType::Q5_K ||
           type == DType::Q6_K;
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
    case DType::F32:
    case DType::F16:
    case DType::BF16: return VectorLevel::Portable;
    default: // every other quantized type: an AVX-512 kernel
        return is_quantized(type) && level == VectorLevel::Avx512 ? VectorLevel::Avx512 : VectorLevel::Portable;
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
    case DType::Q4_0: avx512 ? dequantize_q4_0_avx512(p, dst, n) : dequantize_q4_0(p, dst, n); return;
    case DType::Q4_K: avx512 ? dequantize_q4_k_avx512(p, dst, n) : dequantize_q4_k(p, dst, n); return;
    case DType::Q6_K: avx512 ? dequantize_q6_k_avx512(p, dst, n) : dequantize_q6_k(p, dst, n); return;
    case DType::Q4_1: avx512 ? dequantize_block32_avx512<DType::Q4_1>(p, dst, n) : dequantize_q4_1(p, dst, n); return;
    case DType::Q5_0:
        avx512 ? dequantize_block32_avx512<DType::Q5_0>(p, dst, n) : dequantize_q5<BlockQ5_0, false>(p, dst, n);
        return;
    case DType::Q5_1:
        avx512 ? dequantize_block32_avx512<DType::Q5_1>(p, dst, n) : dequantize_q5<BlockQ5_1, true>(p, dst, n);
        return;
    case DType::IQ4_NL:
        avx512 ? dequantize_block32_avx512<DType::IQ4_NL>(p, dst, n) : dequantize_iq4_nl(p, dst, n);
        return;
    case DType::Q2_K: avx512 ? dequantize_k_avx512<DType::Q2_K>(p, dst, n) : dequantize_q2_k(p, dst, n); return;
    case DType::Q3_K: avx512 ? dequantize_k_avx512<DType::Q3_K>(p, dst, n) : dequantize_q3_k(p, dst, n); return;
    case DType::Q5_K: avx512 ? dequantize_k_avx512<DType::Q5_K>(p, dst, n) : dequantize_q5_k(p, dst, n); return;
    case DType::IQ4_XS: avx512 ? dequantize_k_avx512<DType::IQ4_XS>(p, dst, n) : dequantize_iq4_xs(p, dst, n); return;
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
    case DType::Q4_1: quantize_q4_1(src, p, n); return;
    case DType::Q5_0: quantize_q5_0(src, p, n); return;
    case DType::Q5_1: quantize_q5_1(src, p, n); return;
    case DType::Q2_K: quantize_q2_k(src, p, n); return;
    case DType::Q3_K: quantize_q3_k(src, p, n); return;
    case DType::Q5_K: quantize_q5_k(src, p, n); return;
    case DType::IQ4_NL: quantize_iq4_nl(src, p, n); return;
    case DType::IQ4_XS: quantize_iq4_xs(src, p, n); return;
    default: return;
    }
}

} // namespace longscope
