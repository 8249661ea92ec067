// CPU attention: the plain materialised variant (scores [n_head, n_q, n_kv] + explicit mask, as
// in the original LLaMA code) and a tiled variant after FlashAttention-2 (Dao, 2023,
// "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning"), whose
// per-tile softmax is the online softmax of Milakov & Gimelshein (2018, "Online normalizer
// calculation for softmax"): a running max m and running sum l per query row, the partial
// output rescaled by exp(m_old - m_new) whenever the max grows, divided by l once at the end.
#include "cpu/attention.h"

#include "cpu/amx.h"
#include "cpu/attention_qk.h"
#include "cpu/vec16.h"
#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/quant.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"
#include "longscope/errors.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings inside the reduction
// intrinsics (_mm512_reduce_max_ps); the values are defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace longscope {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The cos/sin of a key's rotation are stepped from one key to the next by a complex multiply
// (angle-addition formula, in double) instead of calling cos/sin per key, and re-seeded
// exactly every kReseedEvery keys so the drift stays ~kReseedEvery ulp of a double.
constexpr int64_t kReseedEvery = 64;

float score_scale(const AttentionProblem &p)
{
    return p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_dim));
}

// Whether key j is visible from the query at position pos: causal (j <= pos) and, in a sliding
// window, one of the last `window` positions (j > pos - window).
bool key_visible(int64_t j, int64_t pos, int64_t window)
{
    return j <= pos && (window == 0 || j > pos - window);
}

void check_problem(const AttentionProblem &p, const char *who)
{
    const auto fail = [&](const std::string &what) {
        throw InvalidArgument(std::string(who) + ": " + what);
    };
    if (p.n_head <= 0 || p.n_head_kv <= 0 || p.head_dim <= 0)
        fail("n_head, n_head_kv and head_dim must be positive (got " + std::to_string(p.n_head) +
             ", " + std::to_string(p.n_head_kv) + ", " + std::to_string(p.head_dim) + ")");
    if (p.n_head % p.n_head_kv != 0)
        fail("n_head " + std::to_string(p.n_head) + " is not a multiple of n_head_kv " +
             std::to_string(p.n_head_kv));
    if (p.n_q < 0 || p.n_kv < 0 || p.q_pos0 < 0 || p.window < 0)
        fail("n_q, n_kv, q_pos0 and window must not be negative");
    if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap))
        fail("softcap must be a finite number >= 0 (got " + std::to_string(p.softcap) + ")");
    if (p.n_q > 0 && (!p.q || !p.out))
        fail("q and out must be set");
    if (p.n_q > 0 && p.n_kv > 0 && (!p.k || !p.v))
        fail("k and v must be set");
    for (DType t : {p.k_type, p.v_type})
        if (t != DType::F32 && t != DType::F16 && t != DType::Q8_0 && t != DType::Q4_0)
            fail("the KV cache type must be f32, f16, q8_0 or q4_0");
        else if (p.head_dim % block_elems(t) != 0)
            fail("a quantized KV cache needs a head size that is a multiple of " + std::to_string(block_elems(t)) +
                 "; got head_dim " + std::to_string(p.head_dim));
    if (const KeyRotation *r = p.rotate_keys) {
        if (r->n_rot < 0 || r->n_rot % 2 != 0 || r->n_rot > p.head_dim)
            fail("rotary dims n_rot " + std::to_string(r->n_rot) +
                 " must be even and at most head_dim " + std::to_string(p.head_dim));
        if (r->inv_freq.size() < size_t(r->n_rot / 2))
            fail("key rotation has " + std::to_string(r->inv_freq.size()) +
                 " inverse frequencies, needs n_rot/2 = " + std::to_string(r->n_rot / 2));
    }
}

// Rows j0 .. j0 + count - 1 of a cached side, values [e0, e0 + width) of each, as floats: the
// cache itself for F32 (rows ekv floats apart); otherwise decoded into buf (count * width
// floats) by the weight decoder (cpu/quant.h), rows `width` apart. Whole rows are contiguous
// and go in one call.
struct FloatRows {
    const float *p;
    int64_t stride;
};
void decode_f16(const void *src, float *dst, int64_t n);

// n values of a row as floats: F16 by the vector conversion (the same bits as the scalar
// one: every half is exactly a float), the block formats by the weight decoder.
void decode_row(DType type, const void *src, float *dst, int64_t n)
{
    if (type == DType::F16)
        decode_f16(src, dst, n);
    else
        dequantize_row(type, src, dst, n);
}

FloatRows cache_rows(const void *base, DType type, int64_t ekv, int64_t j0, int64_t count, int64_t e0, int64_t width,
                     float *buf)
{
    if (type == DType::F32)
        return {static_cast<const float *>(base) + j0 * ekv + e0, ekv};
    const size_t rb = row_bytes(type, ekv), off = row_bytes(type, e0);
    const uint8_t *src = static_cast<const uint8_t *>(base) + size_t(j0) * rb;
    if (width == ekv) {
        decode_row(type, src, buf, count * ekv);
        return {buf, ekv};
    }
    for (int64_t c = 0; c < count; ++c)
        decode_row(type, src + size_t(c) * rb + off, buf + c * width, width);
    return {buf, width};
}

// Asks for the cache lines of rows [j0, j1) of one head's slice of an encoded cache (`width`
// values from value e0 of rows of ekv), for plain attention's next chunk of keys or values.
// Not for F32 rows, which the hardware prefetchers follow on their own: asking for them made
// a decode at depth 2048 (F32 keys and values, TinyLlama's heads) 10% slower, where it made
// F16's 10% faster.
void prefetch_slice_rows(const void *cache, DType type, int64_t ekv, int64_t e0, int64_t width, int64_t j0, int64_t j1)
{
    if (type == DType::F32)
        return;
    const size_t rb = row_bytes(type, ekv), bytes = row_bytes(type, width);
    const char *base = static_cast<const char *>(cache) + row_bytes(type, e0);
    for (int64_t j = j0; j < j1; ++j) {
        const char *r = base + size_t(j) * rb;
        const uintptr_t last = reinterpret_cast<uintptr_t>(r + bytes - 1);
        for (uintptr_t a = reinterpret_cast<uintptr_t>(r) & ~uintptr_t(63); a <= last; a += 64)
            __builtin_prefetch(reinterpret_cast<const void *>(a), 0, 2);
    }
}

// Floats a decode buffer of `rows` rows of `width` needs: none for F32.
size_t decode_floats(DType type, int64_t rows, int64_t width)
{
    return type == DType::F32 ? 0 : size_t(rows * width);
}

// The kernels below are built three times from the same always-inline bodies, for x86-64-v4
// (AVX-512), x86-64-v3 (AVX2 and FMA) and the baseline, and the kernel table picks the build
// (kernel_table.h): v4 only at the AVX-512 level. GCC fuses a * b + c into an FMA where the
// target has one, at the same places in the v4 and v3 builds, which compute the same bits; the
// baseline build does not, so it runs only on CPUs without x86-64-v3. The v4 build is
// flattened (everything it calls that can be inlined is): with the softmax's vscalefps
// exponential inlined, attention alone at depth 8192 on two threads read 0.307-0.314 ms a
// layer flattened against 0.314-0.318 without (scripts/bench-attention.cpp).
#define LS_ATTENTION_BUILDS_AS(name, body_v4, body_v3, body_baseline, params, args)                         \
    __attribute__((target("arch=x86-64-v4"), flatten)) void name##_v4 params { body_v4 args; }                \
    __attribute__((target("arch=x86-64-v3"))) void name##_v3 params { body_v3 args; }                         \
    void name##_baseline params { body_baseline args; }                                                       \
    void name params                                                                                          \
    {                                                                                                         \
        const CpuKernelTable &table = kernel_table();                                                         \
        if (table.attention_v4)                                                                               \
            name##_v4 args;                                                                                   \
        else if (table.attention_v3)                                                                          \
            name##_v3 args;                                                                                   \
        else                                                                                                  \
            name##_baseline args;                                                                             \
    }
#define LS_ATTENTION_BUILDS(name, body, params, args) LS_ATTENTION_BUILDS_AS(name, body, body, body, params, args)

// Sixteen floats as one value (cpu/vec16.h): one AVX-512 register in the AVX-512 build of the
// kernels below, two or four narrower ones in the others; V8, eight, for the blocks outside
// AVX-512.
using vec16::load16;
using vec16::store16;
using vec16::V16;
using vec16::V16i;
using vec16::loadv;
using vec16::storev;
using vec16::V8;
// Lanes of a and b (b's numbered 16..31) picked by m: GCC's two-source __builtin_shuffle.
// Clang (the fuzz build) has only __builtin_shufflevector with literal indices; it gets the
// same selection lane by lane.
__attribute__((always_inline)) inline V16 shuffle2(V16 a, V16 b, V16i m)
{
#if defined(__clang__)
    V16 r;
    for (int i = 0; i < 16; ++i)
        r[i] = m[i] < 16 ? a[m[i]] : b[m[i] - 16];
    return r;
#else
    return __builtin_shuffle(a, b, m);
#endif
}

// F16 to F32 with the conversion instruction: sixteen halves at a time (AVX-512) or eight
// (F16C, part of x86-64-v3), the rest and CPUs without F16C one at a time. The conversion is
// exact, so every path gives the same bits.
__attribute__((target("arch=x86-64-v4"))) void decode_f16_v4(const void *src, float *dst, int64_t n)
{
    const auto *h = static_cast<const uint16_t *>(src);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i,
                         _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(h + i))));
    for (; i < n; ++i)
        dst[i] = f16_to_f32(h[i]);
}
__attribute__((target("arch=x86-64-v3"))) void decode_f16_v3(const void *src, float *dst, int64_t n)
{
    const auto *h = static_cast<const uint16_t *>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
    for (; i < n; ++i)
        dst[i] = f16_to_f32(h[i]);
}
void decode_f16(const void *src, float *dst, int64_t n)
{
    const CpuKernelTable &table = kernel_table();
    if (table.attention_v4)
        decode_f16_v4(src, dst, n);
    else if (table.attention_v3)
        decode_f16_v3(src, dst, n);
    else
        dequantize_row(DType::F16, src, dst, n);
}

// Swaps bit b of the row and column index of a 16 x 16 block held as 16 rows: the off-diagonal
// b x b sub-blocks of every 2b x 2b block trade places. Done for b = 8, 4, 2, 1 (in any order:
// the swaps commute), it transposes the block; each step is one two-source permute per row.
template <int b>
__attribute__((always_inline)) inline void swap_index_bit(V16 r[16])
{
    constexpr V16i keep = {(0 & b) ? 16 + 0 - b : 0,    (1 & b) ? 16 + 1 - b : 1,    (2 & b) ? 16 + 2 - b : 2,
                           (3 & b) ? 16 + 3 - b : 3,    (4 & b) ? 16 + 4 - b : 4,    (5 & b) ? 16 + 5 - b : 5,
                           (6 & b) ? 16 + 6 - b : 6,    (7 & b) ? 16 + 7 - b : 7,    (8 & b) ? 16 + 8 - b : 8,
                           (9 & b) ? 16 + 9 - b : 9,    (10 & b) ? 16 + 10 - b : 10, (11 & b) ? 16 + 11 - b : 11,
                           (12 & b) ? 16 + 12 - b : 12, (13 & b) ? 16 + 13 - b : 13, (14 & b) ? 16 + 14 - b : 14,
                           (15 & b) ? 16 + 15 - b : 15};
    constexpr V16i take = {(0 & b) ? 16 + 0 : 0 + b,    (1 & b) ? 16 + 1 : 1 + b,    (2 & b) ? 16 + 2 : 2 + b,
                           (3 & b) ? 16 + 3 : 3 + b,    (4 & b) ? 16 + 4 : 4 + b,    (5 & b) ? 16 + 5 : 5 + b,
                           (6 & b) ? 16 + 6 : 6 + b,    (7 & b) ? 16 + 7 : 7 + b,    (8 & b) ? 16 + 8 : 8 + b,
                           (9 & b) ? 16 + 9 : 9 + b,    (10 & b) ? 16 + 10 : 10 + b, (11 & b) ? 16 + 11 : 11 + b,
                           (12 & b) ? 16 + 12 : 12 + b, (13 & b) ? 16 + 13 : 13 + b, (14 & b) ? 16 + 14 : 14 + b,
                           (15 & b) ? 16 + 15 : 15 + b};
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
        if (!(i & b)) {
            const V16 lo = r[i], hi = r[i + b];
            r[i] = shuffle2(lo, hi, keep);
            r[i + b] = shuffle2(lo, hi, take);
        }
}

// Swaps bit b of the row and column index of an 8 x 8 block held as 8 rows, as swap_index_bit
// does for 16 x 16: for the builds without AVX-512, where the sixteen-lane permutes went
// through the stack (43% of a plain-attention decode at depth 2048 at the AVX2 level).
template <int b> __attribute__((always_inline)) inline void swap_index_bit8(V8 r[8])
{
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
        if (i & b)
            continue;
        const V8 x = r[i], y = r[i + b];
        if constexpr (b == 4) {
            r[i] = __builtin_shufflevector(x, y, 0, 1, 2, 3, 8, 9, 10, 11);
            r[i + b] = __builtin_shufflevector(x, y, 4, 5, 6, 7, 12, 13, 14, 15);
        } else if constexpr (b == 2) {
            r[i] = __builtin_shufflevector(x, y, 0, 1, 8, 9, 4, 5, 12, 13);
            r[i + b] = __builtin_shufflevector(x, y, 2, 3, 10, 11, 6, 7, 14, 15);
        } else {
            r[i] = __builtin_shufflevector(x, y, 0, 8, 2, 10, 4, 12, 6, 14);
            r[i + b] = __builtin_shufflevector(x, y, 1, 9, 3, 11, 5, 13, 7, 15);
        }
    }
}

// dst[e * ld + k] = src[k * src_stride + e] for k < count, e < width: key rows into the
// transposed tile, L keys by L dims at a time where width allows (one register transpose
// instead of L * L scattered scalar stores; L = 16 with AVX-512, 8 in the other builds), the
// rest one value at a time.
template <class VT>
__attribute__((always_inline)) inline void transpose_keys_body(const float *src, int64_t src_stride, float *dst,
                                                               int64_t ld, int64_t count, int64_t width)
{
    constexpr int L = int(sizeof(VT) / sizeof(float));
    int64_t k0 = 0;
    if (width % L == 0)
        for (; k0 + L <= count; k0 += L)
            for (int64_t e0 = 0; e0 < width; e0 += L) {
                VT r[L];
                #pragma GCC unroll 16
                for (int i = 0; i < L; ++i)
                    r[i] = loadv<VT>(src + (k0 + i) * src_stride + e0);
                if constexpr (L == 16) {
                    swap_index_bit<8>(r);
                    swap_index_bit<4>(r);
                    swap_index_bit<2>(r);
                    swap_index_bit<1>(r);
                } else {
                    swap_index_bit8<4>(r);
                    swap_index_bit8<2>(r);
                    swap_index_bit8<1>(r);
                }
                #pragma GCC unroll 16
                for (int i = 0; i < L; ++i)
                    storev(dst + (e0 + i) * ld + k0, r[i]);
            }
    for (int64_t k = k0; k < count; ++k)
        for (int64_t e = 0; e < width; ++e)
            dst[e * ld + k] = src[k * src_stride + e];
}

LS_ATTENTION_BUILDS_AS(transpose_keys, transpose_keys_body<V16>, transpose_keys_body<V8>, transpose_keys_body<V8>,
                       (const float *src, int64_t src_stride, float *dst, int64_t ld, int64_t count, int64_t width),
                       (src, src_stride, dst, ld, count, width))

// Copies `count` key rows for positions j0 .. j0+count-1 from src (row stride src_stride
// floats, each row holding n_heads heads of head_dim) to dst, where element `e` of key k goes
// to dst[k * dst_key + e * dst_elem] (row-major copy: dst_key = row width, dst_elem = 1;
// transposed tile: dst_key = 1, dst_elem = tile), and rotates the first n_rot dims of every
// head for its position: pair (a, b) as the complex number x_a + i x_b is multiplied by
// e^{i theta}, theta = j * pos_scale * inv_freq[i] (angle in double, data in float, as
// ops.h rope() does). A null `rot` copies only.
void load_keys(const KeyRotation *rot, const float *src, int64_t src_stride, float *dst,
               int64_t dst_key, int64_t dst_elem, int64_t j0, int64_t count, int n_heads,
               int head_dim)
{
    const int64_t width = int64_t(n_heads) * head_dim;
    if (dst_key == 1 && dst_elem >= count)
        transpose_keys(src, src_stride, dst, dst_elem, count, width);
    else
        for (int64_t k = 0; k < count; ++k)
            for (int64_t e = 0; e < width; ++e)
                dst[k * dst_key + e * dst_elem] = src[k * src_stride + e];
    if (!rot)
        return;
    const int half = rot->n_rot / 2;
    const bool interleaved = rot->style == RopeStyle::Interleaved;
    for (int i = 0; i < half; ++i) {
        const double inv = rot->inv_freq[size_t(i)];
        // One position step turns the pair by pos_scale * inv_freq.
        const double dc = std::cos(rot->pos_scale * inv), ds = std::sin(rot->pos_scale * inv);
        const int a = interleaved ? 2 * i : i;
        const int b = interleaved ? 2 * i + 1 : i + half;
        double c = 1, s = 0;
        for (int64_t k = 0; k < count; ++k) {
            if (k % kReseedEvery == 0) {
                const double angle = double(j0 + k) * rot->pos_scale * inv;
                c = std::cos(angle);
                s = std::sin(angle);
            }
            const float cf = float(c), sf = float(s);
            for (int h = 0; h < n_heads; ++h) {
                float *xa = dst + k * dst_key + (int64_t(h) * head_dim + a) * dst_elem;
                float *xb = dst + k * dst_key + (int64_t(h) * head_dim + b) * dst_elem;
                const float x0 = *xa, x1 = *xb;
                *xa = x0 * cf - x1 * sf;
                *xb = x0 * sf + x1 * cf;
            }
            const double cn = c * dc - s * ds;
            s = s * dc + c * ds;
            c = cn;
        }
    }
}

// Sixteen values [e0, e0 + 16) of an encoded row (F16, or Q8_0 with e0 a multiple of 16) as
// floats: the bits dequantize_row gives (a half converted exactly; a block's quants times its
// scale, one rounding).
template <DType Type>
__attribute__((target("arch=x86-64-v4"))) inline V16 encoded16_v4(const uint8_t *row, int64_t e0)
{
    static_assert(Type == DType::F16 || Type == DType::Q8_0);
    __m512 r;
    if constexpr (Type == DType::F16) {
        r = _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + 2 * e0)));
    } else {
        const uint8_t *block = row + (e0 / 32) * 34; // ggml's block_q8_0: an F16 scale, 32 quants
        uint16_t h;
        std::memcpy(&h, block, 2);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 2 + e0 % 32));
        r = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(h)), _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, qs)));
    }
    V16 v;
    std::memcpy(&v, &r, sizeof v);
    return v;
}

// Eight values [e0, e0 + 8) of an F16 row as floats at the AVX2 level (F16C): exact, the bits
// encoded16_v4 and dequantize_row give.
__attribute__((target("arch=x86-64-v3"))) inline V8 f16x8_v3(const uint8_t *row, int64_t e0)
{
    const __m256 r = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * e0)));
    V8 v;
    std::memcpy(&v, &r, sizeof v);
    return v;
}

// Keys [0, count) of one kv head straight from an encoded cache (key c's slice at
// src + c * rb, hd values), decoded and transposed into dst[e * ld + c]: sixteen keys by
// sixteen dims in registers, without a decoded copy of the rows in between; the last keys
// (fewer than sixteen) through one decoded row at a time. The same bits as decoding the rows
// and then transposing them.
template <DType Type>
__attribute__((target("arch=x86-64-v4"))) void transpose_encoded_keys_v4(const uint8_t *src, size_t rb, float *dst,
                                                                         int64_t ld, int64_t count, int hd)
{
    int64_t k0 = 0;
    for (; k0 + 16 <= count; k0 += 16)
        for (int e0 = 0; e0 < hd; e0 += 16) {
            V16 r[16];
            #pragma GCC unroll 16
            for (int i = 0; i < 16; ++i)
                r[i] = encoded16_v4<Type>(src + size_t(k0 + i) * rb, e0);
            swap_index_bit<8>(r);
            swap_index_bit<4>(r);
            swap_index_bit<2>(r);
            swap_index_bit<1>(r);
            #pragma GCC unroll 16
            for (int i = 0; i < 16; ++i)
                std::memcpy(dst + (e0 + i) * ld + k0, &r[i], sizeof r[i]);
        }
    if (k0 == count)
        return;
    std::vector<float> row(static_cast<size_t>(hd));
    for (int64_t k = k0; k < count; ++k) {
        decode_row(Type, src + size_t(k) * rb, row.data(), hd);
        for (int e = 0; e < hd; ++e)
            dst[e * ld + k] = row[size_t(e)];
    }
}

// Whether a tile's keys of one kv head go from the encoded cache straight into the transposed
// tile (transpose_encoded_keys): F16 or Q8_0 keys, stored rotated, at the AVX-512 level, in
// whole vectors of sixteen dims. (At the AVX2 level the same in eight-by-eight blocks was no
// faster than decoding the tile's rows first: docs/cpu-kernels.md.)
bool keys_transposed_from_cache(const AttentionProblem &p)
{
    return kernel_table().attention_v4 && !p.rotate_keys && p.head_dim % 16 == 0 &&
           (p.k_type == DType::F16 || p.k_type == DType::Q8_0);
}

// Keys j0 .. j0 + count - 1 of kv head kvh, decoded and transposed into dst (ld floats per
// dim); only where keys_transposed_from_cache holds.
void transpose_encoded_keys(const AttentionProblem &p, int kvh, int64_t j0, int64_t count, float *dst, int64_t ld)
{
    const int64_t ekv = int64_t(p.n_head_kv) * p.head_dim;
    const size_t rb = row_bytes(p.k_type, ekv);
    const uint8_t *src =
        static_cast<const uint8_t *>(p.k) + size_t(j0) * rb + row_bytes(p.k_type, int64_t(kvh) * p.head_dim);
    if (p.k_type == DType::F16)
        transpose_encoded_keys_v4<DType::F16>(src, rb, dst, ld, count, p.head_dim);
    else
        transpose_encoded_keys_v4<DType::Q8_0>(src, rb, dst, ld, count, p.head_dim);
}

// Whether the keys are scored in integers against a quantized query (attention_qk.h): Q8_0 and
// Q4_0 keys stored rotated, in every path.
bool keys_in_integers(const AttentionProblem &p) { return keys_scored_in_integers(p.k_type, p.rotate_keys != nullptr); }

// Keys j0 .. j0 + count - 1 of kv head kvh from a Q8_0 / Q4_0 cache, packed for qk_scores.
void pack_cached_keys(const AttentionProblem &p, QkKernel kernel, int kvh, int64_t j0, int64_t count, uint8_t *dst)
{
    const size_t rb = row_bytes(p.k_type, int64_t(p.n_head_kv) * p.head_dim);
    qk_pack_keys(kernel, p.k_type,
                 static_cast<const uint8_t *>(p.k) + size_t(j0) * rb + row_bytes(p.k_type, int64_t(kvh) * p.head_dim),
                 rb, count, p.head_dim, dst);
}

// Physical memory, to refuse a score matrix that could only "succeed" through overcommit and
// then get the process killed when touched. 0 when unknown.
uint64_t physical_memory_bytes()
{
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        return uint64_t(pages) * uint64_t(page);
#endif
    return 0;
}

std::string gib(double bytes)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

} // namespace

namespace {
void scores_of_chunk(int n_rows, const float *q, int64_t q_stride, const float *kt, int64_t T, int64_t w, int hd,
                     float scale, float *s, int64_t s_stride);
} // namespace

AttentionStats attention_naive(ThreadPool &pool, const AttentionProblem &p, bool causal_flash)
{
    check_problem(p, "attention_naive");
    AttentionStats stats;
    if (p.n_q == 0)
        return stats;
    const int n_head = p.n_head, hd = p.head_dim;
    const int group = p.n_head / p.n_head_kv;
    const int64_t n_q = p.n_q, n_kv = p.n_kv, ekv = int64_t(p.n_head_kv) * hd;
    const float scale = score_scale(p);

    // Scores [n_head, n_q, n_kv], mask [n_q, n_kv] (only without causal_flash), rotated keys
    // [n_kv, n_head_kv * head_dim] (only with rotate_keys). Sized in double first so absurd
    // shapes cannot overflow the arithmetic.
    const double score_elems = double(n_head) * double(n_q) * double(n_kv);
    const double mask_elems = causal_flash ? 0.0 : double(n_q) * double(n_kv);
    const double key_elems = p.rotate_keys ? double(n_kv) * double(ekv) : 0.0;
    const double need = (score_elems + mask_elems + key_elems) * sizeof(float);
    const auto oom = [&](const std::string &why) {
        return OutOfMemory("plain attention needs " + gib(need) + " for the [" +
                           std::to_string(n_head) + " x " + std::to_string(n_q) + " x " +
                           std::to_string(n_kv) + "] score matrix" +
                           (causal_flash ? "" : " and its causal mask") + why +
                           "; use memory-efficient (tiled) attention, whose scratch does not grow "
                           "with the context");
    };
    const uint64_t ram = physical_memory_bytes();
    if (ram != 0 && need > double(ram))
        throw oom(", more than this machine's " + gib(double(ram)) + " of memory");

    // In the caller's workspace where it gives one (grown when too small: a fresh allocation,
    // not a copy of the old contents), else in one of this call's own.
    AttentionWorkspace own;
    AttentionWorkspace &ws = p.workspace ? *p.workspace : own;
    const size_t n_scores = size_t(score_elems), n_mask = size_t(mask_elems), n_rotated = size_t(key_elems);
    const size_t n_floats = n_scores + n_mask + n_rotated;
    try {
        if (ws.floats.size() < n_floats) {
            ws.release();
            ws.floats.resize(n_floats);
        }
    } catch (const std::bad_alloc &) {
        throw oom("");
    } catch (const std::length_error &) {
        throw oom("");
    }
    float *const scores = ws.floats.data(), *const mask = scores + n_scores, *const rotated = mask + n_mask;
    stats.scratch_bytes = uint64_t(n_floats) * sizeof(float);

    // Keys as attention sees them: the cache itself, or a rotated copy of all of it (decoded
    // a chunk at a time where the cache is encoded).
    const void *keys = p.k;
    DType keys_type = p.k_type;
    if (p.rotate_keys && n_kv > 0) {
        const int64_t n_chunks = (n_kv + kReseedEvery - 1) / kReseedEvery;
        pool.parallel_for(n_chunks, [&](int64_t begin, int64_t end) {
            std::vector<float> buf(decode_floats(p.k_type, kReseedEvery, ekv));
            for (int64_t c = begin; c < end; ++c) {
                const int64_t j0 = c * kReseedEvery, cnt = std::min(kReseedEvery, n_kv - j0);
                const FloatRows src = cache_rows(p.k, p.k_type, ekv, j0, cnt, 0, ekv, buf.data());
                load_keys(p.rotate_keys, src.p, src.stride, rotated + j0 * ekv, ekv, 1, j0, cnt, p.n_head_kv,
                          hd);
            }
        });
        keys = rotated;
        keys_type = DType::F32;
    }
    // Encoded rows are decoded per job, kRowChunk rows of one head at a time.
    // Q8_0 / Q4_0 keys are packed a chunk at a time instead, and scored in integers.
    constexpr int64_t kRowChunk = 64;
    const bool int_keys = keys_in_integers(p);
    const QkKernel qk = qk_kernel();
    const int nb = hd / 32;
    // Keys transposed straight from the cache (F16, AVX-512) need no decoded rows.
    const bool keys_direct = !int_keys && keys == p.k && keys_transposed_from_cache(p);
    const size_t kbuf_n = int_keys || keys_direct ? 0 : decode_floats(keys_type, kRowChunk, hd),
                 vbuf_n = decode_floats(p.v_type, kRowChunk, hd);
    const size_t packed_n = int_keys ? qk_packed_bytes(kRowChunk, hd) : 0, qq_n = int_keys ? size_t(nb) : 0;
    const size_t ktile_n = int_keys ? 0 : size_t(kRowChunk * hd);

    // The explicit additive causal mask: 0 where key j is visible from query i, -inf above
    // the (bottom-right aligned) diagonal.
    if (!causal_flash) {
        pool.parallel_for(
            n_q,
            [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                    float *row = mask + i * n_kv;
                    const int64_t pos = p.q_pos0 + i;
                    for (int64_t j = 0; j < n_kv; ++j)
                        row[j] = key_visible(j, pos, p.window) ? 0.0f : kNegInf;
                }
            },
            std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_kv)));
    }

    // One job per (block of query rows, kv head, block of that kv head's query heads): scores,
    // softmax, weighted sum of values. The rows and heads of a job take each chunk of keys and
    // values in turn while it is in L1 (decoded and transposed once), not each head of each row
    // the whole row of keys from L3: the scores as the tiled path's from a transposed tile
    // (each score its dims in order, blocks of heads by keys in registers), the weighted sum
    // with each value row loaded once for several heads (add_scaled_rows). A block of heads is
    // the whole group unless that leaves fewer than two jobs a thread (decode of a model with
    // few kv heads); then the largest divisor of the group that gives enough.
    int block = group;
    for (int d = group; d >= 1; --d)
        if (group % d == 0) {
            block = d;
            if (n_q * p.n_head_kv * (group / d) >= 2 * int64_t(pool.size()))
                break;
        }
    const int blocks_per_kv = group / block;
    // Up to sixteen query rows a job where there are enough of them (prefill), so that each
    // chunk of keys is transposed once for all of them and each value row loaded once.
    const int64_t per_q = int64_t(p.n_head_kv) * blocks_per_kv;
    const int64_t q_block = std::clamp<int64_t>(n_q * per_q / (8 * int64_t(pool.size())), 1, 16);
    const int64_t n_qb = (n_q + q_block - 1) / q_block;
    // Each thread's buffers (the ones allocated in the loop below).
    stats.scratch_bytes +=
        uint64_t(pool.size()) * ((kbuf_n + vbuf_n + ktile_n + (int_keys ? size_t(kRowChunk) : 0)) * sizeof(float) +
                                 packed_n + qq_n * size_t(block * q_block) * sizeof(QkQueryBlock));
    const auto add_scaled_rows = cpu_kernels().add_scaled_rows;
    const auto add_rows = cpu_kernels().add;
    pool.parallel_for(
        n_qb * per_q,
        [&](int64_t begin, int64_t end) {
            AlignedVector<float> kbuf(kbuf_n), vbuf(vbuf_n), ktile(ktile_n);
            AlignedVector<uint8_t> packed(packed_n);
            std::vector<QkQueryBlock> qq(qq_n * size_t(block * q_block));
            std::vector<float> part(int_keys ? size_t(kRowChunk) : 0);
            for (int64_t job = begin; job < end; ++job) {
                const int64_t i0 = job / per_q * q_block, i1 = std::min(n_q, i0 + q_block);
                const int kvh = int(job / blocks_per_kv % p.n_head_kv);
                const int h0 = kvh * group + int(job % blocks_per_kv) * block;
                // Query i's head h0 + b at q_of(i) + b * hd; its scores row, and its output.
                const auto q_of = [&](int64_t i) { return p.q + (i * n_head + h0) * hd; };
                const auto scores_of = [&](int64_t i, int b) {
                    return scores + (int64_t(h0 + b) * n_q + i) * n_kv;
                };
                const auto out_of = [&](int64_t i) { return p.out + (i * n_head + h0) * hd; };
                // With causal_flash only keys up to query i's position are scored; without it
                // every key is, and the mask removes the future ones. A sliding window hides the
                // keys before `first` the same way. Both grow with i.
                const auto keys_of = [&](int64_t i) { return causal_flash ? std::min(n_kv, p.q_pos0 + i + 1) : n_kv; };
                const auto first_of = [&](int64_t i) {
                    return causal_flash && p.window > 0 ? std::clamp<int64_t>(p.q_pos0 + i - p.window + 1, 0, keys_of(i))
                                                        : int64_t(0);
                };
                for (int64_t i = i0; i < i1; ++i)
                    for (int b = 0; b < block; ++b) {
                        float *s = scores_of(i, b);
                        for (int64_t j = 0; j < first_of(i); ++j)
                            s[j] = kNegInf;
                        if (int_keys)
                            qk_quantize_query(q_of(i) + b * hd, hd, scale,
                                              qq.data() + size_t((i - i0) * block + b) * qq_n);
                    }
                const int64_t k_begin = first_of(i0), k_end = keys_of(i1 - 1);
                for (int64_t j0 = k_begin; j0 < k_end; j0 += kRowChunk) {
                    const int64_t cnt = std::min(kRowChunk, k_end - j0);
                    // The next chunk's keys asked for (after the last, the first values); this
                    // chunk's packed or transposed once for the block's queries and heads
                    // (straight from an F16 cache where the AVX-512 build can).
                    if (j0 + cnt < k_end)
                        prefetch_slice_rows(keys, keys_type, ekv, int64_t(kvh) * hd, hd, j0 + cnt,
                                            std::min(j0 + cnt + kRowChunk, k_end));
                    else
                        prefetch_slice_rows(p.v, p.v_type, ekv, int64_t(kvh) * hd, hd, 0, std::min(kRowChunk, k_end));
                    if (int_keys) {
                        pack_cached_keys(p, qk, kvh, j0, cnt, packed.data());
                    } else if (keys_direct) {
                        transpose_encoded_keys(p, kvh, j0, cnt, ktile.data(), kRowChunk);
                    } else {
                        const FloatRows kr =
                            cache_rows(keys, keys_type, ekv, j0, cnt, int64_t(kvh) * hd, hd, kbuf.data());
                        transpose_keys(kr.p, kr.stride, ktile.data(), kRowChunk, cnt, hd);
                    }
                    for (int64_t i = i0; i < i1; ++i) {
                        // Query i's keys of this chunk.
                        const int64_t lo = std::max(j0, first_of(i)), hi = std::min(j0 + cnt, keys_of(i));
                        if (lo >= hi)
                            continue;
                        if (!int_keys) {
                            scores_of_chunk(block, q_of(i), hd, ktile.data() + (lo - j0), kRowChunk, hi - lo, hd, scale,
                                            scores_of(i, 0) + lo, n_q * n_kv);
                            continue;
                        }
                        for (int b = 0; b < block; ++b) {
                            const QkQueryBlock *qb = qq.data() + size_t((i - i0) * block + b) * qq_n;
                            if (lo == j0 && hi == j0 + cnt) {
                                qk_scores(qk, qb, nb, 1, packed.data(), cnt, hd, scores_of(i, b) + j0, 0);
                            } else { // the whole packed chunk, then query i's part of it
                                qk_scores(qk, qb, nb, 1, packed.data(), cnt, hd, part.data(), 0);
                                std::copy(part.begin() + (lo - j0), part.begin() + (hi - j0), scores_of(i, b) + lo);
                            }
                        }
                    }
                }
                for (int64_t i = i0; i < i1; ++i) {
                    const int64_t n_keys = keys_of(i), first = first_of(i);
                    for (int b = 0; b < block; ++b) {
                        float *s = scores_of(i, b);
                        if (p.softcap > 0.0f)
                            for (int64_t j = first; j < n_keys; ++j)
                                s[j] = p.softcap * std::tanh(s[j] / p.softcap);
                        // The mask by the vector kernels' add (the same sums): the loop here,
                        // which GCC at -O2 left scalar, took 6% of a 4096-token prefill.
                        if (!causal_flash)
                            add_rows(s, mask + i * n_kv, n_keys);
                        if (n_keys != 0)
                            softmax_inplace(s, n_keys);
                    }
                    std::fill(out_of(i), out_of(i) + int64_t(block) * hd, 0.0f);
                }
                // Query i's values up to its last key; an empty cache adds nothing.
                for (int64_t j0 = 0; j0 < k_end; j0 += kRowChunk) {
                    const int64_t cnt = std::min(kRowChunk, k_end - j0);
                    prefetch_slice_rows(p.v, p.v_type, ekv, int64_t(kvh) * hd, hd, j0 + cnt,
                                        std::min(j0 + cnt + kRowChunk, k_end));
                    const FloatRows vr = cache_rows(p.v, p.v_type, ekv, j0, cnt, int64_t(kvh) * hd, hd, vbuf.data());
                    // Masked keys have weight exactly 0; skipping them adds nothing (0 * v is +-0
                    // for a finite v) and keeps garbage in unseen rows from mattering.
                    for (int64_t i = i0; i < i1; ++i) {
                        const int64_t hi = std::min(j0 + cnt, keys_of(i));
                        if (hi > j0)
                            add_scaled_rows(out_of(i), hd, scores_of(i, 0) + j0, n_q * n_kv, block, vr.p, vr.stride,
                                            hi - j0, hd);
                    }
                }
            }
        },
        // Scores and the weighted sum: two multiply-adds per key, dim, head and query of a job.
        min_items_per_thread(2 * n_kv * hd * block * q_block));
    return stats;
}

namespace {


// What hides keys from one query row in one key tile, and the soft cap of its scores. mask:
// the explicit additive mask row (0 / -inf), without causal flash; otherwise by positions:
// with `diagonal` the columns after last_visible, in a sliding window those before
// first_visible (<= 0: none).
struct TileMask {
    const float *mask = nullptr;
    bool diagonal = false;
    int64_t last_visible = 0;
    int64_t first_visible = 0;
    float softcap = 0.0f;
};

// The TileMask of the query at position pos over the key tile starting at key j0.
TileMask tile_mask(const AttentionProblem &p, const float *mask, bool diagonal, int64_t pos, int64_t j0)
{
    return {mask, diagonal, pos - j0, p.window > 0 ? pos - p.window + 1 - j0 : 0, p.softcap};
}

// The explicit additive mask of the key tile [j0, j0 + w) for n_rows queries at positions
// pos0, pos0 + 1, ...: 0 where the key is visible, -inf elsewhere; rows T apart.
// Each row as three runs (key_visible holds on one run of columns), filled a run at a time:
// element by element the loop stayed scalar and took 2% of a 4096-token prefill.
void fill_mask_tile(float *mask, int64_t T, int64_t n_rows, int64_t pos0, int64_t j0, int64_t w, int64_t window)
{
    for (int64_t qi = 0; qi < n_rows; ++qi) {
        const int64_t pos = pos0 + qi;
        // Visible: j0 + c <= pos, and with a window j0 + c > pos - window.
        const int64_t first = std::min(w, window == 0 ? 0 : std::max<int64_t>(0, pos - window + 1 - j0));
        const int64_t end = std::clamp<int64_t>(pos - j0 + 1, first, w);
        float *row = mask + qi * T;
        std::fill(row, row + first, kNegInf);
        std::fill(row + first, row + end, 0.0f);
        std::fill(row + end, row + w, kNegInf);
    }
}

// vec16::exp16 for x <= 0 (a score less its row's maximum; -inf where masked) in about half the
// instructions: no clamp above (nothing is over 0) and no NaN select (max passes a NaN x on,
// and the steps after keep it NaN). 2^n by vscalefps: exp16's two powers of two round once, at
// the second product (the first, p times 2^(n/2) with n >= -159, is exact), and vscalefps
// rounds p times 2^n once, so both give the same float, subnormal or 0 included, where the
// compiler fuses exp16's multiply-adds as here (GCC at -O2: attention's outputs are unchanged
// bit for bit, perplexity md5). tst_attention holds it to libm's e^x.
__attribute__((target("arch=x86-64-v4"))) inline __m512 exp_nonpositive16(__m512 x)
{
    const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-110.0f), x);
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512 nf = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic), magic);
    __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, nf);
}

// exp_nonpositive16 on a vec16 value: for the AVX-512 builds' softmax steps. An `inline`
// function of that target, inlined into the v4 builds that call it (GCC 12 inlines it there
// with or without their `flatten`; no call to it is left in tile_rows_v4 either way).
__attribute__((target("arch=x86-64-v4"))) inline V16 exp_nonpositive(V16 x)
{
    __m512 a;
    std::memcpy(&a, &x, sizeof a);
    const __m512 e = exp_nonpositive16(a);
    V16 r;
    std::memcpy(&r, &e, sizeof r);
    return r;
}

// The online-softmax step of one query row over one tile of scaled scores s[0, w): soft-caps
// them (softcap * tanh(s / softcap), as attention_naive does), applies the mask (the explicit
// one, or by comparing positions every key after column last_visible and, in a sliding
// window, every key before column first_visible), updates the running max m and sum l, turns s
// into the weights e^{s - m} and gives the factor alpha by which the row's accumulator is to
// be rescaled. False (nothing changed) while the row has seen no visible key: exp(-inf - -inf)
// would be NaN, and its state (m = -inf, l = 0, acc = 0) stays.
// The soft cap and the mask of one row of a tile's scores (the first steps of softmax_tile).
__attribute__((always_inline)) inline void mask_tile_row(float *s, int64_t w, const TileMask &tm)
{
    if (tm.softcap > 0.0f)
        for (int64_t c = 0; c < w; ++c)
            s[c] = tm.softcap * std::tanh(s[c] / tm.softcap);
    if (tm.mask) {
        // Sixteen at a time: GCC at -O2 left the loop scalar (4% of a 4096-token prefill).
        int64_t c = 0;
        for (; c + 16 <= w; c += 16)
            store16(s + c, load16(s + c) + load16(tm.mask + c));
        for (; c < w; ++c)
            s[c] += tm.mask[c];
    } else {
        // Keys past this query's position and before its window, by comparing positions.
        if (tm.diagonal) {
            int64_t c = std::max<int64_t>(0, tm.last_visible + 1);
            // The columns of the first hidden key's sixteen, by comparing their indices (a
            // tile narrowed to its visible keys, visible_width, has no more).
            if (c < w && c % 16 != 0 && c / 16 * 16 + 16 <= w) {
                const int64_t c0 = c / 16 * 16;
                const V16i cols = V16i{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} + int32_t(c0);
                const V16 x = load16(s + c0);
                store16(s + c0, cols > int32_t(tm.last_visible) ? vec16::splat(kNegInf) : x);
                c = c0 + 16;
            }
            for (; c < w; ++c)
                s[c] = kNegInf;
        }
        for (int64_t c = 0; c < std::min(w, tm.first_visible); ++c)
            s[c] = kNegInf;
    }
}

// The columns of a tile that its rows' scores, softmax and values need: keys past the last
// visible one carry zero weight in every row (the rows of a block share a query position and
// so a mask), so the tile ends at the last visible key, or at the end of its sixteen where
// the scores go sixteen at a time. The result is the same: the columns left out would be
// -inf, e^-inf = 0 added to a sum leaves it, and the maximum ignores them.
__attribute__((always_inline)) inline int64_t visible_width(const TileMask &tm, int64_t w)
{
    int64_t wv = w;
    if (tm.mask) {
        while (wv > 0 && tm.mask[wv - 1] == kNegInf)
            --wv;
    } else if (tm.diagonal) {
        wv = std::min(w, std::max<int64_t>(0, tm.last_visible + 1));
    }
    return wv;
}

template <class VT>
__attribute__((always_inline)) inline bool softmax_tile(float *s, int64_t w, const TileMask &tm, float &m, float &l,
                                                        float &alpha)
{
    mask_tile_row(s, w, tm);
    // The tile's max, sixteen lanes at a time (a max in any order is the same value).
    float tile_max = kNegInf;
    int64_t cm = 0;
    if (w >= 16) {
        if constexpr (std::is_same_v<VT, V16>) {
            V16 mx = load16(s);
            for (cm = 16; cm + 16 <= w; cm += 16) {
                const V16 x = load16(s + cm);
                mx = mx < x ? x : mx;
            }
            tile_max = vec16::hmax16(mx);
        } else {
            V8 mx = loadv<V8>(s), mx2 = loadv<V8>(s + 8);
            for (cm = 16; cm + 16 <= w; cm += 16) {
                const V8 x = loadv<V8>(s + cm), x2 = loadv<V8>(s + cm + 8);
                mx = mx < x ? x : mx;
                mx2 = mx2 < x2 ? x2 : mx2;
            }
            for (int k = 0; k < 8; ++k)
                tile_max = std::max(tile_max, mx[k]);
            for (int k = 0; k < 8; ++k)
                tile_max = std::max(tile_max, mx2[k]);
        }
    }
    for (; cm < w; ++cm)
        tile_max = std::max(tile_max, s[cm]);

    const float m_old = m;
    const float m_new = std::max(m_old, tile_max);
    if (m_new == kNegInf)
        return false;
    // m_old = -inf (first visible tile) gives alpha = 0 on a zero accumulator, as wanted.
    alpha = std::exp(m_old - m_new);
    float sum = 0.0f;
    int64_t c = 0;
    if (w >= 16) {
        if constexpr (std::is_same_v<VT, V16>) {
            V16 sum16 = {};
            for (; c + 16 <= w; c += 16) {
#if defined(__clang__)
                const V16 e = vec16::exp16(load16(s + c) - m_new);
#else
                const V16 e = exp_nonpositive(load16(s + c) - m_new); // the same bits, half the steps
#endif
                store16(s + c, e);
                sum16 += e;
            }
            sum = vec16::hsum16(sum16);
        } else {
            // Lanes 0-7 and 8-15 of the sixteen-lane sum, added up in the same order.
            V8 lo = {}, hi = {};
            for (; c + 16 <= w; c += 16) {
                const V8 e = vec16::exp8(loadv<V8>(s + c) - m_new), e2 = vec16::exp8(loadv<V8>(s + c + 8) - m_new);
                storev(s + c, e);
                storev(s + c + 8, e2);
                lo += e;
                hi += e2;
            }
            sum = vec16::hsum8x2(lo, hi);
        }
    }
    for (; c < w; ++c) {
        s[c] = std::exp(s[c] - m_new);
        sum += s[c];
    }
    l = l * alpha + sum;
    m = m_new;
    return true;
}

// The two-source permutes that pair lanes across vectors: lo8 / hi8 take lanes 0-7 / 8-15 of
// both, lo4 / hi4 lanes 0-3 / 4-7 of each half, lo2 / hi2 lanes 0-1 / 2-3 of each quarter.
constexpr V16i pair_lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
constexpr V16i pair_hi8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
constexpr V16i pair_lo4 = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27};
constexpr V16i pair_hi4 = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
constexpr V16i pair_lo2 = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
constexpr V16i pair_hi2 = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};

// Sixteen vectors to one: lane c of the result is the sum of the lanes of x[c]. Four rounds of
// pairing, each halving the lanes still to add (two two-source permutes and an add per pair).
__attribute__((always_inline)) inline V16 sum_lanes16(V16 x[16])
{
    constexpr V16i lo1 = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
    constexpr V16i hi1 = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
    // t_i: key i in lanes 0-7, key i + 8 in lanes 8-15 (eight partial sums each).
    V16 t[8];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
        t[i] = shuffle2(x[i], x[i + 8], pair_lo8) + shuffle2(x[i], x[i + 8], pair_hi8);
    // u_i: keys i, i + 4, i + 8, i + 12, four lanes each.
    V16 u[4];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
        u[i] = shuffle2(t[i], t[i + 4], pair_lo4) + shuffle2(t[i], t[i + 4], pair_hi4);
    // v_i: keys i, i + 2, ..., i + 14, two lanes each.
    V16 v[2];
    #pragma GCC unroll 2
    for (int i = 0; i < 2; ++i)
        v[i] = shuffle2(u[i], u[i + 2], pair_lo2) + shuffle2(u[i], u[i + 2], pair_hi2);
    return shuffle2(v[0], v[1], lo1) + shuffle2(v[0], v[1], hi1);
}

// The larger of a and b lane by lane (Max), or their sum.
template <bool Max> __attribute__((always_inline)) inline V16 pair_op(V16 a, V16 b)
{
    if constexpr (Max)
        return a < b ? b : a;
    else
        return a + b;
}

// Eight vectors' lanes reduced by max (Max) or + at once: row r's result in lanes 2 r and
// 2 r + 1. The pairs are hsum16's and hmax16's (lane k with k + 8, then k + 4, k + 2, k + 1),
// so each row's sum has hsum16's bits; a maximum is the same in any order. Seven pairs of
// two-source permutes and an operation where eight rows' reductions take 64 steps.
template <bool Max> __attribute__((always_inline)) inline V16 reduce_rows8(const V16 x[8])
{
    // t_i: row i's lanes k + (k + 8) in lanes 0-7, row i + 4's in 8-15.
    V16 t[4];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
        t[i] = pair_op<Max>(shuffle2(x[i], x[i + 4], pair_lo8), shuffle2(x[i], x[i + 4], pair_hi8));
    // u_i: four lanes each of rows i, i + 2, i + 4, i + 6.
    V16 u[2];
    #pragma GCC unroll 2
    for (int i = 0; i < 2; ++i)
        u[i] = pair_op<Max>(shuffle2(t[i], t[i + 2], pair_lo4), shuffle2(t[i], t[i + 2], pair_hi4));
    // Two lanes each of rows 0, 1, ..., 7, then the pairs' two lanes.
    const V16 v = pair_op<Max>(shuffle2(u[0], u[1], pair_lo2), shuffle2(u[0], u[1], pair_hi2));
    return pair_op<Max>(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
}

// softmax_tile for eight rows of sixteen-lane vectors (the query heads of a group at one
// position; w a whole number of sixteens): each row's maximum and sum as softmax_tile takes
// them (the same bits), the eight rows' reductions across lanes done together.
__attribute__((always_inline)) inline void softmax_tile_rows8(float *s, int64_t T, int64_t w, const TileMask &tm,
                                                             float *m, float *l, int64_t ml_stride, float alpha[8])
{
    V16 mx[8];
    #pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
        float *row = s + g * T;
        mask_tile_row(row, w, tm);
        V16 x = load16(row);
        for (int64_t c = 16; c < w; c += 16) {
            const V16 y = load16(row + c);
            x = x < y ? y : x;
        }
        mx[g] = x == x ? x : vec16::splat(kNegInf); // as hmax16: a NaN lane counts as -inf
    }
    const V16 tile_max = reduce_rows8<true>(mx);
    float m_new[8];
    bool live[8];
    #pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
        const float m_old = m[g * ml_stride];
        m_new[g] = std::max(m_old, tile_max[2 * g]);
        live[g] = m_new[g] != kNegInf;
        // m_old = -inf (first visible tile) gives alpha = 0 on a zero accumulator, as wanted.
        alpha[g] = live[g] ? std::exp(m_old - m_new[g]) : 1.0f;
    }
    V16 sum16[8];
    #pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
        float *row = s + g * T;
        sum16[g] = V16{};
        if (!live[g]) { // nothing visible yet: the state stays, the values add zeros
            std::fill(row, row + w, 0.0f);
            continue;
        }
        for (int64_t c = 0; c < w; c += 16) {
#if defined(__clang__)
            const V16 e = vec16::exp16(load16(row + c) - m_new[g]);
#else
            const V16 e = exp_nonpositive(load16(row + c) - m_new[g]);
#endif
            store16(row + c, e);
            sum16[g] += e;
        }
    }
    const V16 sums = reduce_rows8<false>(sum16);
    #pragma GCC unroll 8
    for (int g = 0; g < 8; ++g)
        if (live[g]) {
            l[g * ml_stride] = l[g * ml_stride] * alpha[g] + sums[2 * g];
            m[g * ml_stride] = m_new[g];
        }
}

// Scores from keys in rows (key c at kr + c * kr_stride): per key the dims go sixteen at a
// time into one vector, and sixteen keys' vectors are summed across lanes together. Without
// a transposed copy of the tile, cheaper where few rows share it (multi-head attention).
__attribute__((always_inline)) inline void scores_from_rows(const float *q, const float *kr, int64_t kr_stride,
                                                            int64_t w, int hd, float scale, float *s)
{
    int64_t c0 = 0;
    for (; c0 + 16 <= w; c0 += 16) {
        // Four keys per pass over the dims: four independent chains, four rows' loads in flight.
        V16 acc[16];
        #pragma GCC unroll 4
        for (int c = 0; c < 16; c += 4) {
            const float *k = kr + (c0 + c) * kr_stride;
            const V16 qd = load16(q);
            V16 x0 = qd * load16(k), x1 = qd * load16(k + kr_stride);
            V16 x2 = qd * load16(k + 2 * kr_stride), x3 = qd * load16(k + 3 * kr_stride);
            for (int d = 16; d < hd; d += 16) {
                const V16 qv = load16(q + d);
                x0 += qv * load16(k + d);
                x1 += qv * load16(k + kr_stride + d);
                x2 += qv * load16(k + 2 * kr_stride + d);
                x3 += qv * load16(k + 3 * kr_stride + d);
            }
            acc[c] = x0;
            acc[c + 1] = x1;
            acc[c + 2] = x2;
            acc[c + 3] = x3;
        }
        store16(s + c0, sum_lanes16(acc) * scale);
    }
    for (int64_t c = c0; c < w; ++c) {
        const float *k = kr + c * kr_stride;
        V16 x = load16(q) * load16(k);
        for (int d = 16; d < hd; d += 16)
            x += load16(q + d) * load16(k + d);
        float sum = 0.0f;
        for (int i = 0; i < 16; ++i)
            sum += x[i];
        s[c] = sum * scale;
    }
}

// scores_from_rows over the keys of an F16 or F32 cache (key c's hd values at k + c * rb bytes)
// for n_rows query rows at once (row g at q + g * q_stride, its scores at s + g * s_stride), at
// the AVX-512 level: each sixteen-dim piece of a key is loaded (and converted) once for every
// row, instead of once per row, and an F16 tile is not decoded into floats first. Blocks of R
// rows by 16 / R keys fill the sixteen sums that one sum_lanes16 adds up; every score sums its
// pieces in order and its lanes as scores_from_rows does (the lanes one by one for the keys
// after the last whole sixteen), so the bits are the same (a half converts exactly).
#if !defined(__clang__)
template <DType KT>
__attribute__((target("arch=x86-64-v4"), always_inline)) inline V16 key16_v4(const uint8_t *row, int d)
{
    if constexpr (KT == DType::F16)
        return encoded16_v4<DType::F16>(row, d);
    else
        return load16(reinterpret_cast<const float *>(row) + d);
}

template <DType KT, int R>
__attribute__((target("arch=x86-64-v4"), always_inline)) inline void
scores_cached_block_v4(const float *q, int64_t q_stride, const uint8_t *k, size_t rb, int64_t w, int hd, float scale,
                       float *s, int64_t s_stride)
{
    constexpr int KN = 16 / R; // keys per block
    const int64_t whole = w / 16 * 16;
    int64_t c0 = 0;
    for (; c0 < whole; c0 += KN) {
        V16 acc[16];
        #pragma GCC unroll 16
        for (int j = 0; j < KN; ++j) {
            const V16 kv = key16_v4<KT>(k + size_t(c0 + j) * rb, 0);
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r)
                acc[r * KN + j] = load16(q + r * q_stride) * kv;
        }
        for (int d = 16; d < hd; d += 16) {
            V16 kv[KN];
            #pragma GCC unroll 16
            for (int j = 0; j < KN; ++j)
                kv[j] = key16_v4<KT>(k + size_t(c0 + j) * rb, d);
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const V16 qv = load16(q + r * q_stride + d);
                #pragma GCC unroll 16
                for (int j = 0; j < KN; ++j)
                    acc[r * KN + j] += qv * kv[j];
            }
        }
        const V16 sums = sum_lanes16(acc) * scale;
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
            #pragma GCC unroll 16
            for (int j = 0; j < KN; ++j)
                s[r * s_stride + c0 + j] = sums[r * KN + j];
    }
    for (int64_t c = c0; c < w; ++c)
        for (int r = 0; r < R; ++r) {
            V16 x = load16(q + r * q_stride) * key16_v4<KT>(k + size_t(c) * rb, 0);
            for (int d = 16; d < hd; d += 16)
                x += load16(q + r * q_stride + d) * key16_v4<KT>(k + size_t(c) * rb, d);
            float sum = 0.0f;
            for (int i = 0; i < 16; ++i)
                sum += x[i];
            s[r * s_stride + c] = sum * scale;
        }
}

template <DType KT>
__attribute__((target("arch=x86-64-v4"), flatten)) void scores_cached_rows_v4(int n_rows, const float *q,
                                                                             int64_t q_stride, const uint8_t *k,
                                                                             size_t rb, int64_t w, int hd, float scale,
                                                                             float *s, int64_t s_stride)
{
    int g = 0;
    for (; g + 4 <= n_rows; g += 4)
        scores_cached_block_v4<KT, 4>(q + g * q_stride, q_stride, k, rb, w, hd, scale, s + g * s_stride, s_stride);
    for (; g + 2 <= n_rows; g += 2)
        scores_cached_block_v4<KT, 2>(q + g * q_stride, q_stride, k, rb, w, hd, scale, s + g * s_stride, s_stride);
    for (; g < n_rows; ++g)
        scores_cached_block_v4<KT, 1>(q + g * q_stride, q_stride, k, rb, w, hd, scale, s + g * s_stride, s_stride);
}
#endif

// scores_cached_rows_v4 at the AVX2 level (F16C converts the halves): blocks of R rows by
// 4 / R keys, each key's sixteen-dim pieces in two eight-lane halves (eight accumulators), each
// piece loaded (and converted) once for the block's rows. A key's halves are added and eight
// keys' lanes summed as sum_lanes16 sums them (lane j with j + 8, then with j + 4, j + 2 and
// j + 1); the keys after the last whole sixteen add their lanes one by one, as
// scores_from_rows does. The same bits as scores_from_rows in every build.
#if !defined(__clang__)
template <DType KT>
__attribute__((target("arch=x86-64-v3"), always_inline)) inline V8 key8_v3(const uint8_t *row, int d)
{
    if constexpr (KT == DType::F16)
        return f16x8_v3(row, d);
    else
        return loadv<V8>(reinterpret_cast<const float *>(row) + d);
}

// Lane c of the result: the lanes of t[c] added in sum_lanes16's order after its first round.
__attribute__((always_inline)) inline V8 sum_lanes8(const V8 t[8])
{
    V8 u[4], v[2];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
        u[i] = __builtin_shufflevector(t[i], t[i + 4], 0, 1, 2, 3, 8, 9, 10, 11) +
               __builtin_shufflevector(t[i], t[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    #pragma GCC unroll 2
    for (int i = 0; i < 2; ++i)
        v[i] = __builtin_shufflevector(u[i], u[i + 2], 0, 1, 8, 9, 4, 5, 12, 13) +
               __builtin_shufflevector(u[i], u[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    return __builtin_shufflevector(v[0], v[1], 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(v[0], v[1], 1, 9, 3, 11, 5, 13, 7, 15);
}

template <DType KT, int R>
__attribute__((target("arch=x86-64-v3"), always_inline)) inline void
scores_cached_block_v3(const float *q, int64_t q_stride, const uint8_t *k, size_t rb, int64_t w, int hd, float scale,
                       float *s, int64_t s_stride, bool prefetch)
{
    constexpr int KN = 4 / R; // keys per pass over the dims
    const int64_t whole = w / 16 * 16;
    for (int64_t c0 = 0; c0 < whole; c0 += 8) {
        // The next eight keys of the tile (its later kv heads come before the next tile's).
        const int64_t ahead = prefetch ? std::min<int64_t>(8, w - c0 - 8) : 0;
        for (int64_t j = 0; j < ahead; ++j)
            for (int l = 0; l < hd * 2; l += 64)
                __builtin_prefetch(k + size_t(c0 + 8 + j) * rb + l, 0, 3);
        V8 t[R][8];
        for (int j0 = 0; j0 < 8; j0 += KN) {
            V8 lo[R][KN], hi[R][KN];
            #pragma GCC unroll 4
            for (int j = 0; j < KN; ++j) {
                const uint8_t *row = k + size_t(c0 + j0 + j) * rb;
                const V8 klo = key8_v3<KT>(row, 0), khi = key8_v3<KT>(row, 8);
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    lo[r][j] = loadv<V8>(q + r * q_stride) * klo;
                    hi[r][j] = loadv<V8>(q + r * q_stride + 8) * khi;
                }
            }
            for (int d = 16; d < hd; d += 16) {
                #pragma GCC unroll 4
                for (int j = 0; j < KN; ++j) {
                    const uint8_t *row = k + size_t(c0 + j0 + j) * rb;
                    const V8 klo = key8_v3<KT>(row, d), khi = key8_v3<KT>(row, d + 8);
                    #pragma GCC unroll 4
                    for (int r = 0; r < R; ++r) {
                        lo[r][j] += loadv<V8>(q + r * q_stride + d) * klo;
                        hi[r][j] += loadv<V8>(q + r * q_stride + d + 8) * khi;
                    }
                }
            }
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r)
                #pragma GCC unroll 4
                for (int j = 0; j < KN; ++j)
                    t[r][j0 + j] = lo[r][j] + hi[r][j];
        }
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
            storev(s + r * s_stride + c0, sum_lanes8(t[r]) * scale);
    }
    for (int64_t c = whole; c < w; ++c)
        for (int r = 0; r < R; ++r) {
            const uint8_t *row = k + size_t(c) * rb;
            V8 lo = loadv<V8>(q + r * q_stride) * key8_v3<KT>(row, 0);
            V8 hi = loadv<V8>(q + r * q_stride + 8) * key8_v3<KT>(row, 8);
            for (int d = 16; d < hd; d += 16) {
                lo += loadv<V8>(q + r * q_stride + d) * key8_v3<KT>(row, d);
                hi += loadv<V8>(q + r * q_stride + d + 8) * key8_v3<KT>(row, d + 8);
            }
            float sum = 0.0f;
            for (int i = 0; i < 8; ++i)
                sum += lo[i];
            for (int i = 0; i < 8; ++i)
                sum += hi[i];
            s[r * s_stride + c] = sum * scale;
        }
}

template <DType KT>
__attribute__((target("arch=x86-64-v3"), flatten)) void scores_cached_rows_v3(int n_rows, const float *q,
                                                                             int64_t q_stride, const uint8_t *k,
                                                                             size_t rb, int64_t w, int hd, float scale,
                                                                             float *s, int64_t s_stride)
{
    // F16 keys of several kv heads (rows rb >= 1 KiB apart, each kv head's slice a few lines of
    // them): the first block of rows asks for the next eight keys' slices into L1 as it goes;
    // the hardware's prefetchers left each slice's first load waiting on L2 or memory. Closer
    // rows they follow on their own (heads 14/2 x 64: 5% slower with the requests).
    bool prefetch = KT == DType::F16 && rb >= 1024;
    int g = 0;
    for (; g + 4 <= n_rows; g += 4, prefetch = false)
        scores_cached_block_v3<KT, 4>(q + g * q_stride, q_stride, k, rb, w, hd, scale, s + g * s_stride, s_stride,
                                      prefetch);
    for (; g + 2 <= n_rows; g += 2, prefetch = false)
        scores_cached_block_v3<KT, 2>(q + g * q_stride, q_stride, k, rb, w, hd, scale, s + g * s_stride, s_stride,
                                      prefetch);
    for (; g < n_rows; ++g, prefetch = false)
        scores_cached_block_v3<KT, 1>(q + g * q_stride, q_stride, k, rb, w, hd, scale, s + g * s_stride, s_stride,
                                      prefetch);
}
#endif

// Plain attention's softmax of one row of n scores in place: the maximum; e^(s - max) by the
// vector exp (cpu/vec16.h, as the tiled path's), the last values through a copy padded with
// -inf so that every value takes the same exp; the sum in double in sixteen parts by lane,
// added up in one order (the same bits in every build); then each value times 1 / sum. Where
// every score is -inf the row becomes NaN, as e^(-inf - -inf) is.
typedef double D8 __attribute__((vector_size(64)));
// Sixteen scores p[0, 16) to e^(p - mx) in place, their values added to the lanes of sum_lo
// (0-7) and sum_hi (8-15) in double. (A function, not a lambda: a lambda's body is not built
// for its enclosing function's target unless it is inlined, and a build without FMA would
// change the exp's bits.)
template <class VT>
__attribute__((always_inline)) inline void softmax_exp_block(float *p, float mx, D8 &sum_lo, D8 &sum_hi)
{
    V8 e_lo, e_hi;
    if constexpr (std::is_same_v<VT, V16>) {
#if defined(__clang__)
        const V16 e = vec16::exp16(load16(p) - mx);
#else
        const V16 e = exp_nonpositive(load16(p) - mx); // the same bits, half the steps
#endif
        store16(p, e);
        e_lo = __builtin_shufflevector(e, e, 0, 1, 2, 3, 4, 5, 6, 7);
        e_hi = __builtin_shufflevector(e, e, 8, 9, 10, 11, 12, 13, 14, 15);
    } else {
        e_lo = vec16::exp8(loadv<V8>(p) - mx);
        e_hi = vec16::exp8(loadv<V8>(p + 8) - mx);
        storev(p, e_lo);
        storev(p + 8, e_hi);
    }
    sum_lo += __builtin_convertvector(e_lo, D8);
    sum_hi += __builtin_convertvector(e_hi, D8);
}

template <class VT> __attribute__((always_inline)) inline void softmax_row_body(float *s, int64_t n)
{
    float mx = kNegInf;
    int64_t c = 0;
    if constexpr (std::is_same_v<VT, V16>) {
        V16 m16 = vec16::splat(kNegInf);
        for (; c + 16 <= n; c += 16) {
            const V16 x = load16(s + c);
            m16 = m16 < x ? x : m16;
        }
        mx = vec16::hmax16(m16);
    } else {
        V8 lo = V8{} + kNegInf, hi = lo;
        for (; c + 16 <= n; c += 16) {
            const V8 x = loadv<V8>(s + c), x2 = loadv<V8>(s + c + 8);
            lo = lo < x ? x : lo;
            hi = hi < x2 ? x2 : hi;
        }
        for (int k = 0; k < 8; ++k)
            mx = std::max(mx, std::max(lo[k], hi[k]));
    }
    for (; c < n; ++c)
        mx = std::max(mx, s[c]);

    D8 sum_lo = {}, sum_hi = {}; // lanes 0-7 and 8-15 of each sixteen
    for (c = 0; c + 16 <= n; c += 16)
        softmax_exp_block<VT>(s + c, mx, sum_lo, sum_hi);
    if (c < n) {
        float pad[16];
        std::fill(pad, pad + 16, kNegInf);
        std::memcpy(pad, s + c, size_t(n - c) * sizeof(float));
        softmax_exp_block<VT>(pad, mx, sum_lo, sum_hi);
        std::memcpy(s + c, pad, size_t(n - c) * sizeof(float));
    }
    const D8 sum8 = sum_lo + sum_hi;
    double sum = 0;
    for (int k = 0; k < 8; ++k)
        sum += sum8[k];
    const float inv = float(1.0 / sum);
    for (c = 0; c + 16 <= n; c += 16)
        store16(s + c, load16(s + c) * inv);
    for (; c < n; ++c)
        s[c] *= inv;
}

LS_ATTENTION_BUILDS_AS(softmax_row, softmax_row_body<V16>, softmax_row_body<V8>, softmax_row_body<V8>,
                       (float *s, int64_t n), (s, n))

// The cache lines of up to two byte ranges (the next key tile's keys and values), asked for one
// line per step of the score and value loops, so that the requests run alongside the current
// tile's arithmetic. Asked for all at once at the tile's start (1024 requests for a TinyLlama
// tile of 64 keys), they held the core until most of them had been served: the decode of
// keys at depth 8192 ran at the sum of its arithmetic and its memory time instead of the
// larger of the two.
//
// Two named ranges, not an array of two: picked by a computed index, the pointers stayed in
// memory, and each step's store and the next step's load of the same pointer made a chain
// through the value loop (Llama-3-shaped heads of 128 in decode: the loop waited on it).
struct LinePrefetch {
    const char *p0 = nullptr, *end0 = nullptr, *p1 = nullptr, *end1 = nullptr;
    int per_step = 1; // lines asked for per step
    LinePrefetch() = default;
    LinePrefetch(const void *a, size_t na, const void *b, size_t nb, int per = 1)
        : p0(static_cast<const char *>(a)), end0(static_cast<const char *>(a) + na), p1(static_cast<const char *>(b)),
          end1(static_cast<const char *>(b) + nb), per_step(per)
    {
    }
    // N lines (the loops are built for per_step, 1 or 2: no count to test at each step).
    template <int N> __attribute__((always_inline)) void step()
    {
        #pragma GCC unroll 2
        for (int i = 0; i < N; ++i) {
            if (p0 < end0) {
                __builtin_prefetch(p0, 0, 2);
                p0 += 64;
            } else if (p1 < end1) {
                __builtin_prefetch(p1, 0, 2);
                p1 += 64;
            }
        }
    }
    bool active() const { return p0 < end0 || p1 < end1; }
    // Whatever the loops did not reach.
    void rest()
    {
        for (; p0 < end0; p0 += 64)
            __builtin_prefetch(p0, 0, 2);
        for (; p1 < end1; p1 += 64)
            __builtin_prefetch(p1, 0, 2);
    }
};

// GB query rows at the same position sharing one kv head (the query heads of a group, in
// decode) against one key tile: each key and value element is loaded once for all GB rows
// instead of once per row. Per row: scores (from the transposed tile kt summed over dims in
// order, or from the keys in rows kr as scores_from_rows sums them), then scaled; the online
// softmax step; acc = acc * alpha + sum_c p_c v_c. Values weighted by a zero probability are
// added as zeros, except those after the last visible key, which are never read. kt is the
// tile transposed [head_dim, T], vt its values (row stride ekv); mask (without causal flash)
// the rows' additive mask; with `diagonal`, keys after column `last_visible` are left out.
// q: row g at q + g * q_stride; s: scratch [GB, T]; row g's accumulator at a + g * a_stride,
// its m and l at m[g * ml_stride], l[g * ml_stride].
// The scores of GB query rows (row g at q + g * q_stride) against the w keys of a tile, row
// g's at s + g * s_stride: from the transposed tile kt ([head_dim, T]) summed over dims in
// order, KB keys (KB / L vectors) by GB rows in registers per pass over the dims; or, with the
// keys in rows (kr), as scores_from_rows sums them; with neither, s holds them already.
template <int GB, int KB, class VT, int PF>
__attribute__((always_inline)) inline void tile_scores_body(const float *q, int64_t q_stride, const float *kt,
                                                            const float *kr, int64_t kr_stride, int64_t T, int64_t w,
                                                            int hd, float scale, float *s, int64_t s_stride,
                                                            LinePrefetch &pf)
{
    constexpr int L = int(sizeof(VT) / sizeof(float)); // lanes: 16 or 8
    int64_t c0 = kr || !kt ? w : 0;
    if (kr)
        for (int g = 0; g < GB; ++g)
            scores_from_rows(q + g * q_stride, kr, kr_stride, w, hd, scale, s + g * s_stride);
    for (; c0 + KB <= w; c0 += KB) {
        VT acc[GB][KB / L] = {};
        for (int d = 0; d < hd; ++d) {
            if constexpr (PF > 0)
                pf.template step<PF>();
            VT k[KB / L];
            #pragma GCC unroll 4
            for (int j = 0; j < KB / L; ++j)
                k[j] = loadv<VT>(kt + int64_t(d) * T + c0 + L * j);
            #pragma GCC unroll 8
            for (int g = 0; g < GB; ++g) {
                const float qd = q[g * q_stride + d];
                #pragma GCC unroll 4
                for (int j = 0; j < KB / L; ++j)
                    acc[g][j] += qd * k[j];
            }
        }
        #pragma GCC unroll 8
        for (int g = 0; g < GB; ++g)
            #pragma GCC unroll 4
            for (int j = 0; j < KB / L; ++j)
                storev(s + g * s_stride + c0 + L * j, acc[g][j] * scale);
    }
    for (; c0 + L <= w; c0 += L)
        #pragma GCC unroll 8
        for (int g = 0; g < GB; ++g) {
            VT acc = {};
            for (int d = 0; d < hd; ++d)
                acc += q[g * q_stride + d] * loadv<VT>(kt + int64_t(d) * T + c0);
            storev(s + g * s_stride + c0, acc * scale);
        }
    for (int g = 0; g < GB && (kt || kr); ++g)
        for (int64_t c = c0; c < w; ++c) {
            float x = 0.0f;
            for (int d = 0; d < hd; ++d)
                x += q[g * q_stride + d] * kt[int64_t(d) * T + c];
            s[g * s_stride + c] = x * scale;
        }
}

// acc = acc * alpha + sum_c p_c v_c for GB query rows, W dims at a time in registers across the
// tile's wv keys, from dim d0 on while W more fit (d0 is left past them). Each pass reads a W-dim
// slice of every value row of the tile, so one row block's values take hd / W passes over the
// tile's rows: wider passes, where few rows leave the registers free, read fewer and larger
// pieces of each row.
template <int W, int GB, class VT, int PF, class Values>
__attribute__((always_inline)) inline void values_pass(int &d0, int hd, const Values &vt, int64_t wv, const float *s,
                                                       int64_t T, float *a, int64_t a_stride, const float *alpha,
                                                       LinePrefetch &pf)
{
    constexpr int L = int(sizeof(VT) / sizeof(float));
    constexpr int NV = W / L;
    for (; d0 + W <= hd; d0 += W) {
        VT acc[GB][NV];
        #pragma GCC unroll 8
        for (int g = 0; g < GB; ++g)
            #pragma GCC unroll 4
            for (int j = 0; j < NV; ++j)
                acc[g][j] = loadv<VT>(a + g * a_stride + d0 + L * j) * alpha[g];
        for (int64_t cc = 0; cc < wv; ++cc) {
            if constexpr (PF > 0)
                pf.template step<PF>();
            VT v[NV];
            #pragma GCC unroll 4
            for (int j = 0; j < NV; ++j)
                v[j] = vt.template load<VT>(cc, d0 + L * j);
            #pragma GCC unroll 8
            for (int g = 0; g < GB; ++g) {
                const float pw = s[g * T + cc];
                #pragma GCC unroll 4
                for (int j = 0; j < NV; ++j)
                    acc[g][j] += pw * v[j];
            }
        }
        #pragma GCC unroll 8
        for (int g = 0; g < GB; ++g)
            #pragma GCC unroll 4
            for (int j = 0; j < NV; ++j)
                storev(a + g * a_stride + d0 + L * j, acc[g][j]);
    }
}

template <int GB, int KB, int VD, class VT, int PF, class Values>
__attribute__((always_inline)) inline void tile_rows_body(const float *q, int64_t q_stride, const float *kt,
                                                          const float *kr, int64_t kr_stride, int64_t T, int64_t w,
                                                          const Values &vt, int hd, float scale,
                                                          const TileMask &tm, float *s, float *a, int64_t a_stride,
                                                          float *m, float *l, int64_t ml_stride, LinePrefetch &pf)
{
    constexpr int L = int(sizeof(VT) / sizeof(float)); // lanes: 16 or 8
    // Keys past the last visible one carry zero weight in every row: their scores are not
    // computed (beyond the sixteen holding the last visible key) and their values not read.
    const int64_t wv = visible_width(tm, w);
    w = std::min(w, (wv + 15) / 16 * 16);
    tile_scores_body<GB, KB, VT, PF>(q, q_stride, kt, kr, kr_stride, T, w, hd, scale, s, T, pf);

    // The softmax step per row; a row with nothing visible yet keeps its state and adds zeros.
    float alpha[GB];
    bool rows_done = false;
    if constexpr (GB == 8 && std::is_same_v<VT, V16>) {
        if (w > 0 && w % 16 == 0) {
            softmax_tile_rows8(s, T, w, tm, m, l, ml_stride, alpha);
            rows_done = true;
        }
    }
    for (int g = 0; g < GB && !rows_done; ++g)
        if (!softmax_tile<VT>(s + g * T, w, tm, m[g * ml_stride], l[g * ml_stride], alpha[g])) {
            alpha[g] = 1.0f;
            std::fill(s + g * T, s + g * T + w, 0.0f);
        }

    // acc = acc * alpha + sum_c p_c v_c, VD dims by GB rows in registers across the tile, then
    // what is left 2 L dims at a time (values_pass).
    int d0 = 0;
    values_pass<VD, GB, VT, PF>(d0, hd, vt, wv, s, T, a, a_stride, alpha, pf);
    if constexpr (VD > 2 * L)
        values_pass<2 * L, GB, VT, PF>(d0, hd, vt, wv, s, T, a, a_stride, alpha, pf);
    for (int g = 0; g < GB; ++g)
        for (int d = d0; d < hd; ++d) {
            float ad = a[g * a_stride + d] * alpha[g];
            for (int64_t cc = 0; cc < wv; ++cc)
                ad += s[g * T + cc] * vt.at(cc, d);
            a[g * a_stride + d] = ad;
        }
}

// n_rows query rows sharing a kv head and a position, in blocks of rows whose accumulators fit
// the build's VR vector registers (a V16 is one register with AVX-512, two with AVX2): with 32,
// blocks of 8, 4, 2 and 1 rows by 32, 64, 64 and 64 keys, values 32 dims at a time; with 16,
// blocks of 4, 2 and 1 rows by 16, 32 and 32 keys, values 16 dims at a time. The key blocking
// keeps at least four independent chains. Blocks only group the work: every score and every
// accumulator sums its terms in the same order whatever the blocks, so both give the same bits.
// The keys come transposed (kt) or, where kr is given, in rows kr_stride apart; with neither,
// the rows' scores are given, row g's at s + g * T.
struct F16Values8; // below: F16 values read in place at the AVX2 level

template <int VR, int PF, class Values>
__attribute__((always_inline)) inline void
tile_rows_blocks_with(int n_rows, const float *q, int64_t q_stride, const float *kt, const float *kr, int64_t kr_stride,
                 int64_t T, int64_t w, const Values &vt, int hd, float scale, const TileMask &tm, float *s, float *a,
                 int64_t a_stride, float *m, float *l, int64_t ml_stride, LinePrefetch &pf)
{
#define LS_TILE_ROWS_BLOCK(GB, KB, VD)                                                                        \
    tile_rows_body<GB, KB, VD, VT, PF>(q + g * q_stride, q_stride, kt, kr, kr_stride, T, w, vt, hd, scale, tm,       \
                               kt || kr ? s : s + g * T,                                                     \
                               a + g * a_stride, a_stride, m + g * ml_stride, l + g * ml_stride, ml_stride, pf)
    // Sixteen lanes to a vector with 32 registers (one AVX-512 register each); eight with 16
    // (one AVX2 register each: GCC splits a 64-byte vector into two only in simple code, and
    // passed these blocks' through memory and general registers).
    using VT = std::conditional_t<(VR >= 32), V16, V8>;
    int g = 0;
    if constexpr (VR >= 32) {
        for (; g + 8 <= n_rows; g += 8)
            LS_TILE_ROWS_BLOCK(8, 32, 32);
        for (; g + 4 <= n_rows; g += 4)
            LS_TILE_ROWS_BLOCK(4, 64, 32);
        for (; g + 2 <= n_rows; g += 2)
            LS_TILE_ROWS_BLOCK(2, 64, 32);
        for (; g < n_rows; ++g)
            LS_TILE_ROWS_BLOCK(1, 64, 32);
    } else {
        for (; g + 4 <= n_rows; g += 4)
            LS_TILE_ROWS_BLOCK(4, 16, 16);
        // Values read in place from an F16 cache (F16Values8, decode): one or two rows take 32
        // dims a pass, so each key's row is read in 64-byte pieces. Llama-2-7B's heads (32 of
        // 128, one query row each) at depth 8192, one thread (scripts/bench-attention.cpp f16
        // f16 8192 32 32 128 5 1 4 tiled 2m): 13.6-13.8 ms a layer -> 11.8-12.8. A decoded
        // tile of float rows (a Q8_0 cache at this level) keeps 16: with 32 it read no
        // differently (22.2-24.7 ms against 23.0-29.9, a noisy host).
        constexpr int VDF = std::is_same_v<Values, F16Values8> ? 32 : 16;
        for (; g + 2 <= n_rows; g += 2)
            LS_TILE_ROWS_BLOCK(2, 32, VDF);
        for (; g < n_rows; ++g)
            LS_TILE_ROWS_BLOCK(1, 32, VDF);
    }
#undef LS_TILE_ROWS_BLOCK
}

// tile_rows_blocks_with, its loops asking for pf's lines where it has any (decode) and free of
// the requests' test where it has none (prefill).
template <int VR, class Values>
__attribute__((always_inline)) inline void
tile_rows_blocks(int n_rows, const float *q, int64_t q_stride, const float *kt, const float *kr, int64_t kr_stride,
                 int64_t T, int64_t w, const Values &vt, int hd, float scale, const TileMask &tm, float *s, float *a,
                 int64_t a_stride, float *m, float *l, int64_t ml_stride, LinePrefetch &pf)
{
    if (pf.active()) {
        // A copy the loops advance, which GCC keeps in registers; stepped through the caller's
        // reference, the pointers went to memory and back at every step (5% of a decode's
        // attention at depth 8192 with the cache in L3).
        LinePrefetch local = pf;
        if (pf.per_step >= 2)
            tile_rows_blocks_with<VR, 2>(n_rows, q, q_stride, kt, kr, kr_stride, T, w, vt, hd, scale, tm, s, a, a_stride,
                                         m, l, ml_stride, local);
        else
            tile_rows_blocks_with<VR, 1>(n_rows, q, q_stride, kt, kr, kr_stride, T, w, vt, hd, scale, tm, s, a, a_stride,
                                         m, l, ml_stride, local);
        pf = local;
    } else
        tile_rows_blocks_with<VR, 0>(n_rows, q, q_stride, kt, kr, kr_stride, T, w, vt, hd, scale, tm, s, a,
                                     a_stride, m, l, ml_stride, pf);
}

// Values as floats, row c at v + c * ekv.
struct FloatValues {
    const float *v;
    int64_t ekv;
    template <class VT> __attribute__((always_inline)) VT load(int64_t c, int d) const
    {
        return loadv<VT>(v + c * ekv + d);
    }
    __attribute__((always_inline)) float at(int64_t c, int d) const { return v[c * ekv + d]; }
};

template <int VR>
__attribute__((always_inline)) inline void
tile_rows_floats(int n_rows, const float *q, int64_t q_stride, const float *kt, const float *kr, int64_t kr_stride,
                 int64_t T, int64_t w, const float *vt, int64_t ekv, int hd, float scale, const TileMask &tm, float *s,
                 float *a, int64_t a_stride, float *m, float *l, int64_t ml_stride, LinePrefetch &pf)
{
    tile_rows_blocks<VR>(n_rows, q, q_stride, kt, kr, kr_stride, T, w, FloatValues{vt, ekv}, hd, scale, tm, s, a, a_stride,
                         m, l, ml_stride, pf);
}

// The AVX-512 build with its 32 vector registers, the others with 16 (AVX2: 16 of a 256-bit
// register's pairs spilled to the stack in the 32-register blocks, and the v3 build took 45% of
// a 512-token prefill's time on an AMD EPYC without AVX-512).
LS_ATTENTION_BUILDS_AS(tile_rows, tile_rows_floats<32>, tile_rows_floats<16>, tile_rows_floats<16>,
                    (int n_rows, const float *q, int64_t q_stride, const float *kt, const float *kr,
                     int64_t kr_stride, int64_t T, int64_t w, const float *vt, int64_t ekv, int hd, float scale,
                     const TileMask &tm, float *s, float *a, int64_t a_stride, float *m, float *l,
                     int64_t ml_stride, LinePrefetch &pf),
                    (n_rows, q, q_stride, kt, kr, kr_stride, T, w, vt, ekv, hd, scale, tm, s, a, a_stride, m, l,
                     ml_stride, pf))

// Plain attention's scores of n_rows query rows sharing a kv head (row g at q + g * q_stride)
// against the w keys of a transposed chunk kt ([head_dim, T]), row g's at s + g * s_stride:
// tile_scores_body in the tiled path's blocks of rows and keys, each score summing its dims in
// order, so that every build gives the same bits.
template <int VR>
__attribute__((always_inline)) inline void scores_of_chunk_body(int n_rows, const float *q, int64_t q_stride,
                                                                const float *kt, int64_t T, int64_t w, int hd,
                                                                float scale, float *s, int64_t s_stride)
{
    using VT = std::conditional_t<(VR >= 32), V16, V8>;
    LinePrefetch none;
    int g = 0;
#define LS_SCORES_BLOCK(GB, KB)                                                                               \
    tile_scores_body<GB, KB, VT, 0>(q + g * q_stride, q_stride, kt, nullptr, 0, T, w, hd, scale, s + g * s_stride, \
                                        s_stride, none)
    if constexpr (VR >= 32) {
        for (; g + 8 <= n_rows; g += 8)
            LS_SCORES_BLOCK(8, 32);
        for (; g + 4 <= n_rows; g += 4)
            LS_SCORES_BLOCK(4, 64);
        for (; g + 2 <= n_rows; g += 2)
            LS_SCORES_BLOCK(2, 64);
        for (; g < n_rows; ++g)
            LS_SCORES_BLOCK(1, 64);
    } else {
        for (; g + 4 <= n_rows; g += 4)
            LS_SCORES_BLOCK(4, 16);
        for (; g + 2 <= n_rows; g += 2)
            LS_SCORES_BLOCK(2, 32);
        for (; g < n_rows; ++g)
            LS_SCORES_BLOCK(1, 32);
    }
#undef LS_SCORES_BLOCK
}

LS_ATTENTION_BUILDS_AS(scores_of_chunk, scores_of_chunk_body<32>, scores_of_chunk_body<16>, scores_of_chunk_body<16>,
                       (int n_rows, const float *q, int64_t q_stride, const float *kt, int64_t T, int64_t w, int hd,
                        float scale, float *s, int64_t s_stride),
                       (n_rows, q, q_stride, kt, T, w, hd, scale, s, s_stride))

// Values straight from an F16 or Q8_0 cache (row c's slice of one kv head at v + c * rb, the
// head size a multiple of 32): sixteen of them decoded in registers as they are summed, the
// bits the decoder gives, so the result is that of the decoded rows. GCC only: Clang (the fuzz
// build) refuses a 64-byte vector returned into the generic body, and decodes the tile instead.
#if !defined(__clang__)
template <DType Type> struct EncodedValues {
    const uint8_t *v;
    size_t rb;
    template <class VT> VT load(int64_t c, int d) const
    {
        static_assert(sizeof(VT) == 64, "the decoder gives sixteen values");
        return encoded16_v4<Type>(v + size_t(c) * rb, d);
    }
    float at(int64_t, int) const { return 0.0f; } // never called: no dims after the last 32
};

// F16 values in place for the AVX2 build's blocks (eight lanes to a vector).
struct F16Values8 {
    const uint8_t *v;
    size_t rb;
    template <class VT> VT load(int64_t c, int d) const
    {
        static_assert(sizeof(VT) == 32, "the decoder gives eight values");
        return f16x8_v3(v + size_t(c) * rb, d);
    }
    float at(int64_t, int) const { return 0.0f; } // never called: no dims after the last 16
};

// tile_rows over an encoded cache's values, AVX-512 only (flatten: the decoder's intrinsics are
// inlined into the build's body).
template <DType Type>
__attribute__((target("arch=x86-64-v4"), flatten)) void
tile_rows_encoded_values(int n_rows, const float *q, int64_t q_stride, const float *kt, const float *kr,
                         int64_t kr_stride, int64_t T, int64_t w, const EncodedValues<Type> &vt, int hd, float scale,
                         const TileMask &tm, float *s, float *a, int64_t a_stride, float *m, float *l,
                         int64_t ml_stride, LinePrefetch &pf)
{
    tile_rows_blocks<32>(n_rows, q, q_stride, kt, kr, kr_stride, T, w, vt, hd, scale, tm, s, a, a_stride, m, l, ml_stride,
                         pf);
}

// F16 values at the AVX2 level, in the 16-register blocks.
__attribute__((target("arch=x86-64-v3"), flatten)) void
tile_rows_f16_values_v3(int n_rows, const float *q, int64_t q_stride, const float *kt, const float *kr,
                        int64_t kr_stride, int64_t T, int64_t w, const F16Values8 &vt, int hd, float scale,
                        const TileMask &tm, float *s, float *a, int64_t a_stride, float *m, float *l,
                        int64_t ml_stride, LinePrefetch &pf)
{
    tile_rows_blocks<16>(n_rows, q, q_stride, kt, kr, kr_stride, T, w, vt, hd, scale, tm, s, a, a_stride, m, l, ml_stride,
                         pf);
}
#endif

// The values of kv head kvh from key j0 on, in an F16 or Q8_0 cache.
struct CachedValues {
    DType type;
    const uint8_t *v;
    size_t rb;
};
CachedValues cached_values(const AttentionProblem &p, int kvh, int64_t j0)
{
    const size_t rb = row_bytes(p.v_type, int64_t(p.n_head_kv) * p.head_dim);
    return {p.v_type,
            static_cast<const uint8_t *>(p.v) + size_t(j0) * rb + row_bytes(p.v_type, int64_t(kvh) * p.head_dim), rb};
}

// tile_rows with the values read in place from the cache (values_from_cache).
void tile_rows_cached_values(int n_rows, const float *q, int64_t q_stride, const float *kt, const float *kr,
                             int64_t kr_stride, int64_t T, int64_t w, const CachedValues &vt, int hd, float scale,
                             const TileMask &tm, float *s, float *a, int64_t a_stride, float *m, float *l,
                             int64_t ml_stride, LinePrefetch &pf)
{
#if defined(__clang__)
    (void)n_rows, (void)q, (void)q_stride, (void)kt, (void)kr, (void)kr_stride, (void)T, (void)w, (void)vt, (void)hd,
        (void)scale, (void)tm, (void)s, (void)a, (void)a_stride, (void)m, (void)l, (void)ml_stride, (void)pf;
    throw std::logic_error("tile_rows_cached_values: not built");
#else
    if (!kernel_table().attention_v4) // F16 only (values_from_cache)
        tile_rows_f16_values_v3(n_rows, q, q_stride, kt, kr, kr_stride, T, w, {vt.v, vt.rb}, hd, scale, tm, s, a,
                                a_stride, m, l, ml_stride, pf);
    else if (vt.type == DType::F16)
        tile_rows_encoded_values<DType::F16>(n_rows, q, q_stride, kt, kr, kr_stride, T, w, {vt.v, vt.rb}, hd, scale,
                                             tm, s, a, a_stride, m, l, ml_stride, pf);
    else
        tile_rows_encoded_values<DType::Q8_0>(n_rows, q, q_stride, kt, kr, kr_stride, T, w, {vt.v, vt.rb}, hd, scale,
                                              tm, s, a, a_stride, m, l, ml_stride, pf);
#endif
}

// Whether the values are read in place from the cache (tile_rows_cached_values) rather than
// decoded into a float tile first: Q8_0 values always at the AVX-512 level; F16 values where
// `few_rows` (decode: eight query rows per kv head and position read each value once, and the
// float tile's writes and reads cost more than the conversions in the sums), at the AVX-512
// and AVX2 levels, not in prefill, where a decoded tile serves every query position of the
// block. (Q8_0 values in place at the AVX2 level were no faster: docs/cpu-kernels.md.)
bool values_from_cache(const AttentionProblem &p, bool few_rows)
{
#if defined(__clang__)
    (void)p, (void)few_rows;
    return false;
#else
    const CpuKernelTable &t = kernel_table();
    return p.head_dim % 32 == 0 && ((t.attention_v4 && (p.v_type == DType::Q8_0 || (few_rows && p.v_type == DType::F16))) ||
                                    (t.attention_v3 && few_rows && p.v_type == DType::F16));
#endif
}

// Decode (a few queries): a unit per kv head gives only n_head_kv units (four for TinyLlama),
// too few to keep many threads busy. Instead the visible key tiles are cut into
// attention_key_splits contiguous ranges shared out among the workers; each tile is read
// whole, kv head after kv head, while it is in cache. Every split keeps its own running
// (m, l, acc) per query row; they are merged at the end in split order: m = max m_s,
// out = sum_s e^{m_s - m} acc_s / sum_s e^{m_s - m} l_s. The split count depends only on the
// number of visible tiles, never on the number of threads, and neither does the result.
AttentionStats attention_tiled_split_keys(ThreadPool &pool, const AttentionProblem &p, bool causal_flash, int64_t T)
{
    AttentionStats stats;
    const int n_head = p.n_head, hd = p.head_dim;
    const int group = p.n_head / p.n_head_kv;
    const int64_t n_q = p.n_q, n_kv = p.n_kv, ekv = int64_t(p.n_head_kv) * hd;
    const float scale = score_scale(p);
    const int64_t n_tiles = (n_kv + T - 1) / T;
    const int64_t first_pos = p.q_pos0, last_pos = p.q_pos0 + n_q - 1;
    // With causal_flash, tiles starting beyond the last query's position are never touched;
    // in a sliding window, neither are those ending before the first query's window. The
    // tiles [first_tile, visible) are read.
    const int64_t visible = causal_flash ? std::min(n_tiles, last_pos / T + 1) : n_tiles;
    const int64_t first_tile = std::min(visible, p.window > 0 ? std::max<int64_t>(0, first_pos - p.window + 1) / T : 0);
    const int64_t n_read = visible - first_tile;
    stats.tiles_computed = n_read * n_head;
    stats.tiles_skipped = (n_tiles - n_read) * n_head;

    // Fewer than eight query rows per kv head (multi-head attention): their scores come from
    // the keys in rows, summed across lanes, instead of from a transposed copy of the tile,
    // whose cost (per key, about six operations per sixteen dims) only pays off when shared.
    // Q8_0 / Q4_0 keys are packed once per tile and kv head and scored in integers against
    // the query rows quantized once per call.
    const bool int_keys = keys_in_integers(p);
    const QkKernel qk = qk_kernel();
    const int nb = hd / 32;
    const bool keys_in_rows = !int_keys && group * n_q < 8 && hd % 16 == 0;
    // Such keys in an F16 or F32 cache, stored rotated, are scored from the cache itself at
    // the AVX-512 and AVX2 levels (scores_cached_rows_v4 / _v3), all the group's rows at once:
    // each key read once for them, and F16 keys not decoded into a float tile of every kv head
    // first (for 32 heads of 128, 1 MiB a tile: written to L2 and read back once per row) - the
    // same bits.
#if defined(__clang__)
    const bool keys_cached_rows = false; // not built (as the values read in place)
#else
    const bool keys_cached_rows = keys_in_rows && (p.k_type == DType::F16 || p.k_type == DType::F32) && !p.rotate_keys &&
                               (kernel_table().attention_v4 || kernel_table().attention_v3);
#endif
    // Transposed keys from an F16 or Q8_0 cache are decoded straight into the tile.
    const bool keys_direct = !int_keys && !keys_in_rows && keys_transposed_from_cache(p);
    // F16 and Q8_0 values are decoded as they are summed.
    const bool values_direct = values_from_cache(p, true);
    const int64_t n_splits = attention_key_splits;
    const size_t k_row = row_bytes(p.k_type, ekv), v_row = row_bytes(p.v_type, ekv);
    // Splits that hold tiles: the first `used` (all of them from 16 visible tiles on), each a
    // contiguous range of tiles.
    const int64_t used = std::min(n_splits, n_read);
    const int64_t rows = int64_t(n_head) * n_q; // row r = h * n_q + qi
    // State for every split is reserved (so the scratch does not depend on n_kv); only the
    // used ones are initialised, filled and merged. The buffer stays with the calling thread
    // from one call (one layer, one token) to the next instead of being allocated each time
    // (above malloc's mmap threshold for TinyLlama's 32 heads: a fresh mapping and its page
    // faults per layer).
    const size_t state = size_t(n_splits * rows), acc_state = size_t(n_splits * rows * hd);
    thread_local std::vector<float> split_state;
    if (split_state.size() < 2 * state + acc_state)
        split_state.resize(2 * state + acc_state);
    float *const part_m = split_state.data(), *const part_l = part_m + state, *const part_acc = part_l + state;
    std::fill(part_m, part_m + used * rows, kNegInf);
    std::fill(part_l, part_l + used * rows, 0.0f);
    std::fill(part_acc, part_acc + used * rows * hd, 0.0f);
    // Per worker: ktile [head_dim, T], the tile's keys of one kv head transposed (and rotated);
    // scores [8, T] for a block of rows; mask [n_q, T] without causal_flash. At most one set
    // per thread is alive at a time.
    // kbuf / vbuf [T, n_head_kv * head_dim]: the tile's rows decoded, for an encoded cache.
    // With integer scores: packed [the tile's keys of one kv head] instead of ktile and kbuf,
    // scores [group, T], and the quantized query rows qq [n_q, n_head, head_dim / 32] (shared).
    const size_t ktile_n = int_keys || keys_cached_rows ? 0 : size_t(T * hd),
                 scores_n = size_t(std::max(8, int_keys ? group : 0) * T),
                 mask_n = causal_flash ? 0 : size_t(n_q * T);
    const size_t kbuf_n = keys_direct || keys_cached_rows || int_keys ? 0 : decode_floats(p.k_type, T, ekv),
                 vbuf_n = values_direct ? 0 : decode_floats(p.v_type, T, ekv);
    const size_t packed_n = int_keys ? qk_packed_bytes(T, hd) : 0;
    std::vector<QkQueryBlock> qq(int_keys ? size_t(rows * nb) : 0);
    for (int64_t i = 0; i < n_q && int_keys; ++i)
        for (int h = 0; h < n_head; ++h)
            qk_quantize_query(p.q + (i * n_head + h) * hd, hd, scale, qq.data() + (i * n_head + h) * nb);
    stats.scratch_bytes = (2 * state + acc_state + size_t(std::min<int64_t>(pool.size(), n_splits)) *
                                                       (ktile_n + scores_n + mask_n + kbuf_n + vbuf_n)) *
                              sizeof(float) +
                          size_t(std::min<int64_t>(pool.size(), n_splits)) * packed_n +
                          qq.size() * sizeof(QkQueryBlock);

    // Only the splits that hold tiles are handed out, at least enough of them per thread to
    // be worth a thread: scores and the weighted sum, two multiply-adds per key, dim and row.
    const int64_t split_work = (n_read + used - 1) / std::max<int64_t>(1, used) * T * rows * hd * 2;
    pool.parallel_for(
        used,
        [&](int64_t begin, int64_t end) {
            AlignedVector<float> ktile(ktile_n), scores(scores_n), mask(mask_n), kbuf(kbuf_n), vbuf(vbuf_n);
            AlignedVector<uint8_t> packed(packed_n);
            for (int64_t split = begin; split < end; ++split) {
                float *m = part_m + split * rows, *l = part_l + split * rows;
                float *acc = part_acc + split * rows * hd;
                for (int64_t t = first_tile + n_read * split / used; t < first_tile + n_read * (split + 1) / used;
                     ++t) {
                    const int64_t j0 = t * T, w = std::min(T, n_kv - j0);
                    // The next tile's rows, asked for a kv head's share at a time (LinePrefetch).
                    const int64_t wn = std::max<int64_t>(0, std::min(T, n_kv - j0 - T));
                    const bool diagonal = causal_flash && j0 + w - 1 > first_pos;
                    if (!causal_flash)
                        fill_mask_tile(mask.data(), T, n_q, first_pos, j0, w, p.window);
                    // The tile's rows as floats: the cache itself, or decoded once for every kv head
                    // (keys not at all where they go straight into the transposed tile).
                    const FloatRows krows = keys_direct || keys_cached_rows || int_keys
                                                ? FloatRows{nullptr, 0}
                                                : cache_rows(p.k, p.k_type, ekv, j0, w, 0, ekv, kbuf.data());
                    const FloatRows vrows = values_direct ? FloatRows{nullptr, 0}
                                                          : cache_rows(p.v, p.v_type, ekv, j0, w, 0, ekv, vbuf.data());
                    for (int kvh = 0; kvh < p.n_head_kv; ++kvh) {
                        // Keys transposed, or in rows where few query rows share them: straight
                        // from the cache, or copied (and rotated) when it holds them unrotated.
                        const float *kr = nullptr;
                        int64_t kr_stride = 0;
                        const float *kh = krows.p ? krows.p + int64_t(kvh) * hd : nullptr;
                        const float *kt = ktile.data();
                        if (int_keys) {
                            pack_cached_keys(p, qk, kvh, j0, w, packed.data());
                            kt = nullptr;
                        } else if (keys_cached_rows) {
                            kt = nullptr; // scored below, into `scores`
                        } else if (keys_direct) {
                            transpose_encoded_keys(p, kvh, j0, w, ktile.data(), T);
                        } else if (!keys_in_rows) {
                            load_keys(p.rotate_keys, kh, krows.stride, ktile.data(), 1, T, j0, w, 1, hd);
                        } else if (p.rotate_keys) {
                            load_keys(p.rotate_keys, kh, krows.stride, ktile.data(), hd, 1, j0, w, 1, hd);
                            kr = ktile.data();
                            kr_stride = hd;
                        } else {
                            kr = kh;
                            kr_stride = krows.stride;
                        }
                        const float *vt = vrows.p ? vrows.p + int64_t(kvh) * hd : nullptr;
                        const int64_t n0 = j0 + T + wn * kvh / p.n_head_kv, n1 = j0 + T + wn * (kvh + 1) / p.n_head_kv;
                        // Spread over the steps the loops take: one per key and 32 dims of the
                        // value loop per block of rows, and (transposed keys) one per dim and
                        // block of keys of the score loop.
                        const int64_t lines = int64_t(n1 - n0) * int64_t(k_row + v_row) / 64;
                        const int row_blocks = group >= 8 ? group / 8 + __builtin_popcount(group % 8)
                                                          : __builtin_popcount(group);
                        const int64_t steps = std::max<int64_t>(1, row_blocks * w * std::max(1, hd / 32) +
                                                                       (kt && !kr ? row_blocks * hd * ((w + 31) / 32) : 0));
                        LinePrefetch pf(static_cast<const uint8_t *>(p.k) + size_t(n0) * k_row, size_t(n1 - n0) * k_row,
                                        static_cast<const uint8_t *>(p.v) + size_t(n0) * v_row, size_t(n1 - n0) * v_row,
                                        int(std::clamp<int64_t>((lines + steps - 1) / steps, 1, 2)));
                        // The group's query heads at each position together (rows h * n_q + qi).
                        const int h0 = kvh * group;
                        for (int64_t qi = 0; qi < n_q; ++qi) {
                            const int64_t r0 = int64_t(h0) * n_q + qi;
                            const TileMask tm = tile_mask(p, causal_flash ? nullptr : mask.data() + qi * T,
                                                          diagonal, first_pos + qi, j0);
                            if (int_keys)
                                qk_scores(qk, qq.data() + (qi * n_head + h0) * nb, nb, group, packed.data(), w, hd,
                                          scores.data(), T);
#if !defined(__clang__)
                            else if (keys_cached_rows)
                                (!kernel_table().attention_v4
                                     ? (p.k_type == DType::F16 ? scores_cached_rows_v3<DType::F16>
                                                               : scores_cached_rows_v3<DType::F32>)
                                     : (p.k_type == DType::F16 ? scores_cached_rows_v4<DType::F16>
                                                               : scores_cached_rows_v4<DType::F32>))(
                                    group, p.q + (qi * n_head + h0) * hd, hd,
                                    static_cast<const uint8_t *>(p.k) + size_t(j0) * k_row +
                                        row_bytes(p.k_type, int64_t(kvh) * hd),
                                    k_row, w, hd, scale, scores.data(), T);
#endif
                            if (values_direct)
                                tile_rows_cached_values(group, p.q + (qi * n_head + h0) * hd, hd, kt, kr, kr_stride, T,
                                                        w, cached_values(p, kvh, j0), hd, scale, tm, scores.data(),
                                                        acc + r0 * hd, n_q * hd, m + r0, l + r0, n_q, pf);
                            else
                                tile_rows(group, p.q + (qi * n_head + h0) * hd, hd, kt, kr, kr_stride, T, w, vt,
                                          vrows.stride, hd, scale, tm, scores.data(), acc + r0 * hd, n_q * hd, m + r0,
                                          l + r0, n_q, pf);
                        }
                        pf.rest();
                    }
                }
            }
        },
        min_items_per_thread(split_work));

    // Merge the splits; a row that saw no key at all (empty cache) gets zeros.
    for (int64_t qi = 0; qi < n_q; ++qi)
        for (int h = 0; h < n_head; ++h) {
            const int64_t r = int64_t(h) * n_q + qi;
            float *out = p.out + (qi * n_head + h) * hd;
            float mx = kNegInf;
            for (int64_t sp = 0; sp < used; ++sp)
                mx = std::max(mx, part_m[sp * rows + r]);
            if (mx == kNegInf) {
                std::fill(out, out + hd, 0.0f);
                continue;
            }
            float lsum = 0.0f;
            for (int d = 0; d < hd; ++d)
                out[d] = 0.0f;
            for (int64_t sp = 0; sp < used; ++sp) {
                const float ms = part_m[sp * rows + r];
                if (ms == kNegInf)
                    continue;
                const float f = std::exp(ms - mx);
                lsum += f * part_l[sp * rows + r];
                const float *a = part_acc + (sp * rows + r) * hd;
                for (int d = 0; d < hd; ++d)
                    out[d] += f * a[d];
            }
            const float inv = 1.0f / lsum;
            for (int d = 0; d < hd; ++d)
                out[d] *= inv;
        }
    return stats;
}

// Prefill on AMX tiles (cpu/amx.h): a unit's scores Q K^T and weighted values P V as two
// products on the tiles per key tile, each operand in two BF16 terms (16 significant bits; F16
// keys and values exactly), the softmax in floats between them as the other paths do it. Where
// the CPU has the tiles (kernel_table().amx_attention, the AVX-512 build) and keys are not
// scored in integers, with whole chunks of 32 dims and tiles of whole chunks of keys. One term
// a side would be twice as fast in the products but carries errors of ~1e-2 (tst_amx).
constexpr int amx_attention_terms = 2;

bool attention_on_tiles(const AttentionProblem &p, int64_t T)
{
    return attention_tiles_take(p.k_type, p.rotate_keys != nullptr, p.head_dim) && T % 32 == 0;
}

// Per worker: the operands, the tile's keys and values as floats (decoded, rotated), the
// weighted values of the tile and each row's rescale factor.
struct AmxAttention {
    AmxMatrix q, k, p, v;
    std::vector<float> kbuf, krot, vbuf, o, alpha;
    uint64_t bytes() const
    {
        return (q.buf.capacity() + k.buf.capacity() + p.buf.capacity() + v.buf.capacity()) * sizeof(uint16_t) +
               (kbuf.capacity() + krot.capacity() + vbuf.capacity() + o.capacity() + alpha.capacity()) * sizeof(float);
    }
};

// The vector steps of amx_softmax_rows and amx_rescale_add. The ones on the vec16 types take
// pointers only and have no target of their own: they are inlined into the AVX-512 builds that
// call them (Clang refuses a 64-byte vector passed between a function built for AVX-512 and one
// that is not). Those on AVX-512 intrinsics (exp_nonpositive16, exp_row_sum) carry the callers'
// target, x86-64-v4.
// Sixteen rows' rescale factors e^{m_old - m_new} (1 where m_new is -inf); alpha holds m_new
// on entry and m takes it.
__attribute__((always_inline)) inline void rescale_factors16(float *m, float *alpha)
{
    const V16 mo = load16(m), mn = load16(alpha), one = vec16::splat(1.0f);
    const V16i none = mn == kNegInf;
    const V16 e = vec16::exp16(mo - (none ? one : mn));
    store16(m, mn);
    store16(alpha, none ? one : e);
}

// s[c] = e^{s[c] - mn} for c < w32 (a multiple of 16); their sum, the lanes added in a tree
// (eight apart, then four, two, one).
__attribute__((target("arch=x86-64-v4"))) inline float exp_row_sum(float *s, int64_t w32, float mn)
{
    const __m512 mv = _mm512_set1_ps(mn);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = 0; c < w32; c += 16) {
        const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(s + c), mv));
        _mm512_storeu_ps(s + c, e);
        sum = _mm512_add_ps(sum, e);
    }
    // In registers: the same sums through an array on the stack were a store and narrower loads
    // back per step, which the store buffer could not forward (a third of this softmax's time at
    // 8192 tokens). Lane i of each step is lane i plus lane i + half of the one before.
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps(sum, 1));
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// acc = acc * f + o over hd values (a multiple of 16).
__attribute__((always_inline)) inline void rescale_add_row(float *acc, float f, const float *o, int hd)
{
    for (int d = 0; d < hd; d += 16)
        store16(acc + d, load16(acc + d) * f + load16(o + d));
}

// The softmax step of `rows` rows (row r: query r % bq of the block) over one key tile of
// scaled scores, rows T apart; past column w, zeros up to w32 (the tile's last chunk). As
// softmax_tile computes it, with the maxima and sums reduced in a tree and the rescale factors
// taken sixteen rows at a time.
__attribute__((target("arch=x86-64-v4"))) void amx_softmax_rows(const AttentionProblem &p, int64_t rows, int64_t bq,
                                                                  float *s, int64_t T, int64_t w, int64_t w32,
                                                                  const float *mask, bool diagonal,
                                                                  int64_t first_pos, int64_t j0, float *m, float *l,
                                                                  float *alpha)
{
    // The masks, and each row's new running max (into alpha for now); -inf past column w.
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t qi = r % bq;
        float *sr = s + r * T;
        mask_tile_row(sr, w, tile_mask(p, mask ? mask + qi * T : nullptr, diagonal, first_pos + qi, j0));
        std::fill(sr + w, sr + w32, kNegInf);
        __m512 mx = _mm512_loadu_ps(sr);
        for (int64_t c = 16; c < w32; c += 16)
            mx = _mm512_max_ps(mx, _mm512_loadu_ps(sr + c));
        alpha[r] = std::max(m[r], _mm512_reduce_max_ps(mx));
    }
    // The rescale factors e^{m_old - m_new}, sixteen rows at a time; 1 for a row that has seen no
    // visible key yet (its state stays: m = -inf, l = 0, acc = 0).
    int64_t r = 0;
    for (; r + 16 <= rows; r += 16)
        rescale_factors16(m + r, alpha + r);
    for (; r < rows; ++r) {
        const float mn = alpha[r];
        alpha[r] = mn == kNegInf ? 1.0f : std::exp(m[r] - mn);
        m[r] = mn;
    }
    // The weights e^{s - m_new} (0 where masked and past w: they are the tile's operand up to
    // w32) and their sums.
    for (r = 0; r < rows; ++r) {
        float *sr = s + r * T;
        const float mn = m[r];
        if (mn == kNegInf) {
            std::fill(sr, sr + w32, 0.0f);
            continue;
        }
        // One rounding, named: GCC fuses l * alpha + sum only where both sit in one block,
        // which would tie the bits to the code's shape.
        const float sum = exp_row_sum(sr, w32, mn);
        l[r] = std::fma(l[r], alpha[r], sum);
    }
}

// acc = acc * alpha + o, row by row (hd values each).
__attribute__((target("arch=x86-64-v4"))) void amx_rescale_add(int64_t rows, int hd, float *acc,
                                                                 const float *alpha, const float *o)
{
    for (int64_t r = 0; r < rows; ++r) {
        const float f = alpha[r];
        rescale_add_row(acc + r * hd, f, o + r * hd, hd);
    }
}

// One key tile [j0, j0 + w) of kv head kvh for a unit's rows on the tiles: the keys (rotated,
// decoded) by rows, scores into s [rows, T] (the query rows packed in st.q come scaled), the
// softmax step, the values by columns, acc [rows, hd] rescaled and added to. s and st.o have
// room for whole tiles of rows.
void amx_attention_tile(const AttentionProblem &p, AmxAttention &st, int kvh, int64_t j0, int64_t w, int64_t T,
                        int64_t rows, int64_t bq, const float *mask, bool diagonal, int64_t first_pos, float *s,
                        float *acc, float *m, float *l)
{
    const int hd = p.head_dim;
    const int64_t ekv = int64_t(p.n_head_kv) * hd, w32 = (w + 31) / 32 * 32;
    FloatRows kr = cache_rows(p.k, p.k_type, ekv, j0, w, int64_t(kvh) * hd, hd, st.kbuf.data());
    if (p.rotate_keys) {
        load_keys(p.rotate_keys, kr.p, kr.stride, st.krot.data(), hd, 1, j0, w, 1, hd);
        kr = {st.krot.data(), hd};
    }
    amx_pack_row_columns(kr.p, kr.stride, w, hd, amx_attention_terms, st.k);
    amx_product(st.q, st.k, s, T);
    amx_softmax_rows(p, rows, bq, s, T, w, w32, mask, diagonal, first_pos, j0, m, l, st.alpha.data());
    amx_pack_rows(s, T, rows, w32, amx_attention_terms, st.p);
    const FloatRows vr = cache_rows(p.v, p.v_type, ekv, j0, w, int64_t(kvh) * hd, hd, st.vbuf.data());
    amx_pack_columns(vr.p, vr.stride, w, hd, amx_attention_terms, st.v);
    amx_product(st.p, st.v, st.o.data(), hd);
    amx_rescale_add(rows, hd, acc, st.alpha.data(), st.o.data());
}

} // namespace

namespace {

// A row's output: out = a / l, sixteen at a time (the same quotients as one by one); a row that
// saw no key at all (l = 0: an empty cache) gets zeros. One by one, the division took a tenth
// of a 512-token prefill's attention.
__attribute__((always_inline)) inline void finish_row_body(const float *a, float l, float *out, int hd)
{
    if (!(l > 0.0f)) {
        std::fill(out, out + hd, 0.0f);
        return;
    }
    int d = 0;
    for (; d + 16 <= hd; d += 16)
        store16(out + d, load16(a + d) / l);
    for (; d < hd; ++d)
        out[d] = a[d] / l;
}
LS_ATTENTION_BUILDS(finish_row, finish_row_body, (const float *a, float l, float *out, int hd), (a, l, out, hd))

} // namespace

void softmax_inplace(float *x, int64_t n) { softmax_row(x, n); }

__attribute__((target("arch=x86-64-v4"))) void softmax_exp_x86_64_v4(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, exp_nonpositive16(_mm512_loadu_ps(x + i)));
}

bool attention_tiles_take(DType k_type, bool keys_rotated_on_load, int head_dim)
{
    const CpuKernelTable &t = kernel_table();
    return t.amx_attention && t.attention_v4 && !keys_scored_in_integers(k_type, keys_rotated_on_load) &&
           head_dim % 32 == 0;
}

AttentionStats attention_tiled(ThreadPool &pool, const AttentionProblem &p, bool causal_flash,
                               int tile)
{
    check_problem(p, "attention_tiled");
    if (tile <= 0)
        throw InvalidArgument("attention_tiled: tile must be positive (got " +
                              std::to_string(tile) + ")");
    AttentionStats stats;
    if (p.n_q == 0)
        return stats;
    const int n_head = p.n_head, hd = p.head_dim;
    const int group = p.n_head / p.n_head_kv;
    const int64_t n_q = p.n_q, n_kv = p.n_kv, ekv = int64_t(p.n_head_kv) * hd;
    const float scale = score_scale(p);
    const int64_t T = tile;
    if (n_q <= attention_split_keys_max_queries)
        return attention_tiled_split_keys(pool, p, causal_flash, T);
    const int64_t B = attention_query_block(tile);
    const int64_t n_qblocks = (n_q + B - 1) / B;
    const int64_t n_tiles = (n_kv + T - 1) / T;
    // A work unit is (kv head, query block): the `group` query heads sharing a kv head are
    // processed together so each key tile is loaded (and rotated) once for all of them.
    // Rows of a unit: r = g * bq + qi for query head kvh * group + g and query i0 + qi.
    const int64_t max_rows = int64_t(group) * std::min(B, n_q);
    const int64_t n_units = int64_t(p.n_head_kv) * n_qblocks;
    const bool int_keys = keys_in_integers(p);
    const bool on_tiles = attention_on_tiles(p, T);
    const bool keys_direct = !int_keys && !on_tiles && keys_transposed_from_cache(p),
               values_direct = !on_tiles && values_from_cache(p, false);
    const QkKernel qk = qk_kernel();
    const int nb = hd / 32;

    std::atomic<uint64_t> scratch{0};
    std::atomic<int64_t> computed{0}, skipped{0};

    // One chunk per worker, each taking every n_workers-th unit: causal blocks grow in cost
    // with the query position, and striding hands every worker a mix of cheap and dear ones.
    // The number of workers depends only on the pool and the number of units, never on n_kv,
    // so neither does the scratch (nor, units being independent, the result).
    const int64_t n_workers = std::min<int64_t>(pool.size(), n_units);
    pool.parallel_for(
        n_workers,
        [&](int64_t begin, int64_t end) {
            // Per-worker buffers, none of them proportional to n_kv or n_q:
            //   ktile  [head_dim, T]      the current key tile, transposed (and rotated)
            //   scores [max_rows, T]      one tile of scores / probabilities
            //   mask   [min(B, n_q), T]    explicit additive mask tile (without causal_flash)
            //   acc    [max_rows, head_dim], m [max_rows], l [max_rows]
            AlignedVector<float> ktile(int_keys || on_tiles ? 0 : static_cast<size_t>(T * hd));
            AlignedVector<float> scores(size_t((on_tiles ? (max_rows + 15) / 16 * 16 : max_rows) * T));
            AlignedVector<float> mask(causal_flash ? 0 : size_t(std::min(B, n_q) * T));
            AlignedVector<float> acc(static_cast<size_t>(max_rows * hd));
            std::vector<float> m(static_cast<size_t>(max_rows)), l(static_cast<size_t>(max_rows));
            //   kbuf, vbuf [T, head_dim]  the tile's rows of this kv head decoded (encoded cache)
            AlignedVector<float> kbuf(keys_direct || int_keys || on_tiles ? 0 : decode_floats(p.k_type, T, hd)),
                vbuf(values_direct || on_tiles ? 0 : decode_floats(p.v_type, T, hd));
            //   packed, qq  the tile's keys packed and the unit's queries quantized (integer scores)
            AlignedVector<uint8_t> packed(int_keys ? qk_packed_bytes(T, hd) : 0);
            std::vector<QkQueryBlock> qq(int_keys ? size_t(max_rows * nb) : 0);
            //   the operands and buffers of the tiles' path
            AmxAttention amx;
            LinePrefetch no_prefetch; // prefill asks for no lines: a tile serves a whole block of queries
            if (on_tiles) {
                amx.kbuf.resize(decode_floats(p.k_type, T, hd));
                amx.krot.resize(p.rotate_keys ? size_t(T * hd) : 0);
                amx.vbuf.resize(decode_floats(p.v_type, T, hd));
                amx.o.resize(size_t((max_rows + 15) / 16 * 16 * hd)); // whole tiles of rows
                amx.alpha.resize(size_t(max_rows));
                amx.q.shape(max_rows, hd, amx_attention_terms);
                amx.k.shape(T, hd, amx_attention_terms);
                amx.p.shape(max_rows, T, amx_attention_terms);
                amx.v.shape(hd, T, amx_attention_terms);
            }
            scratch += uint64_t(ktile.size() + scores.size() + mask.size() + acc.size() +
                                m.size() + l.size() + kbuf.size() + vbuf.size()) *
                           sizeof(float) +
                       packed.size() + qq.size() * sizeof(QkQueryBlock) + amx.bytes();
            int64_t n_computed = 0, n_skipped = 0;

            // parallel_for hands each chunk a single worker index (n_workers <= pool size).
            for (int64_t worker = begin; worker < end; ++worker)
            for (int64_t u = worker; u < n_units; u += n_workers) {
                const int kvh = int(u % p.n_head_kv);
                const int64_t qb = u / p.n_head_kv;
                const int64_t i0 = qb * B, bq = std::min(B, n_q - i0);
                const int64_t rows = int64_t(group) * bq;
                const int64_t first_pos = p.q_pos0 + i0, last_pos = first_pos + bq - 1;

                std::fill(m.begin(), m.begin() + rows, kNegInf);
                std::fill(l.begin(), l.begin() + rows, 0.0f);
                std::fill(acc.begin(), acc.begin() + rows * hd, 0.0f);
                // On the tiles: the unit's query rows (r = g * bq + qi), scaled, packed once.
                if (on_tiles) {
                    std::vector<float> &qrows = amx.o; // free until the first tile's values
                    for (int g = 0; g < group; ++g)
                        for (int64_t qi = 0; qi < bq; ++qi) {
                            const float *src = p.q + ((i0 + qi) * n_head + kvh * group + g) * hd;
                            float *dst = qrows.data() + (int64_t(g) * bq + qi) * hd;
                            for (int d = 0; d < hd; ++d)
                                dst[d] = src[d] * scale;
                        }
                    amx_pack_rows(qrows.data(), hd, rows, hd, amx_attention_terms, amx.q);
                }
                // The unit's query rows quantized once, [bq, group, head_dim / 32].
                for (int64_t qi = 0; qi < bq && int_keys; ++qi)
                    for (int g = 0; g < group; ++g)
                        qk_quantize_query(p.q + ((i0 + qi) * n_head + kvh * group + g) * hd, hd, scale,
                                          qq.data() + (qi * group + g) * nb);

                // In a sliding window, the tiles ending before the first query's window hold no
                // key any query of the block sees: never touched.
                const int64_t first_tile =
                    p.window > 0 ? std::min(n_tiles, std::max<int64_t>(0, first_pos - p.window + 1) / T) : 0;
                n_skipped += first_tile * group;
                for (int64_t t = first_tile; t < n_tiles; ++t) {
                    const int64_t j0 = t * T, w = std::min(T, n_kv - j0);
                    if (causal_flash && j0 > last_pos) {
                        // This tile and all later ones start beyond every query of the
                        // block: entirely above the diagonal, never touched.
                        n_skipped += (n_tiles - t) * group;
                        break;
                    }
                    n_computed += group;

                    if (on_tiles) {
                        const bool diagonal = causal_flash && j0 + w - 1 > first_pos;
                        if (!causal_flash)
                            fill_mask_tile(mask.data(), T, bq, first_pos, j0, w, p.window);
                        amx_attention_tile(p, amx, kvh, j0, w, T, rows, bq, causal_flash ? nullptr : mask.data(),
                                           diagonal, first_pos, scores.data(), acc.data(), m.data(), l.data());
                        continue;
                    }
                    // Keys of the tile for this kv head, transposed to kt [head_dim, T] (and
                    // rotated when the cache holds them unrotated): one load per (key, kv head)
                    // per unit, shared by its group * bq rows, and the score loop below runs
                    // over contiguous keys, which the compiler vectorises.
                    if (int_keys) {
                        pack_cached_keys(p, qk, kvh, j0, w, packed.data());
                    } else if (keys_direct) {
                        transpose_encoded_keys(p, kvh, j0, w, ktile.data(), T);
                    } else {
                        const FloatRows krows =
                            cache_rows(p.k, p.k_type, ekv, j0, w, int64_t(kvh) * hd, hd, kbuf.data());
                        load_keys(p.rotate_keys, krows.p, krows.stride, ktile.data(), 1, T, j0, w, 1, hd);
                    }
                    const float *kt = int_keys ? nullptr : ktile.data();
                    const FloatRows vrows = values_direct ? FloatRows{nullptr, 0}
                                                          : cache_rows(p.v, p.v_type, ekv, j0, w, int64_t(kvh) * hd, hd,
                                                                       vbuf.data());
                    const float *vt = vrows.p;

                    // Without causal_flash: the explicit mask tile [bq, w], 0 / -inf from
                    // positions (and the window), added to every head's scores. With it: keys
                    // past a query are left out by comparing positions, only on a tile crossing
                    // the diagonal, and keys before a query's window likewise.
                    const bool diagonal = causal_flash && j0 + w - 1 > first_pos;
                    if (!causal_flash)
                        fill_mask_tile(mask.data(), T, bq, first_pos, j0, w, p.window);

                    // The group's query heads at one position share each key and value load.
                    for (int64_t qi = 0; qi < bq; ++qi) {
                        const TileMask tm =
                            tile_mask(p, causal_flash ? nullptr : mask.data() + qi * T, diagonal, first_pos + qi, j0);
                        if (int_keys)
                            qk_scores(qk, qq.data() + qi * group * nb, nb, group, packed.data(), w, hd, scores.data(),
                                      T);
                        if (values_direct)
                            tile_rows_cached_values(group, p.q + ((i0 + qi) * n_head + kvh * group) * hd, hd, kt,
                                                    nullptr, 0, T, w, cached_values(p, kvh, j0), hd, scale, tm,
                                                    scores.data(), acc.data() + qi * hd, bq * hd, m.data() + qi,
                                                    l.data() + qi, bq, no_prefetch);
                        else
                            tile_rows(group, p.q + ((i0 + qi) * n_head + kvh * group) * hd, hd, kt, nullptr, 0, T, w,
                                      vt, vrows.stride, hd, scale, tm, scores.data(), acc.data() + qi * hd, bq * hd,
                                      m.data() + qi, l.data() + qi, bq, no_prefetch);
                    }
                }

                // out = acc / l; a row that saw no key at all (empty cache) gets zeros.
                for (int g = 0; g < group; ++g) {
                    const int h = kvh * group + g;
                    for (int64_t qi = 0; qi < bq; ++qi) {
                        const int64_t r = int64_t(g) * bq + qi;
                        float *out = p.out + ((i0 + qi) * n_head + h) * hd;
                        const float *a = acc.data() + r * hd;
                        const float lr = l[size_t(r)];
                        finish_row(a, lr, out, hd);
                    }
                }
            }
            computed += n_computed;
            skipped += n_skipped;
        },
        1);

    stats.scratch_bytes = scratch.load();
    stats.tiles_computed = computed.load();
    stats.tiles_skipped = skipped.load();
    return stats;
}

} // namespace longscope
