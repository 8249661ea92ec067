#include "cpu/simd.h"

#include "cpu/vec16.h"

#include <cmath>
#include <cstring>
#include <immintrin.h>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings (_mm512_undefined_ps
// inside the reduce intrinsics); the values are defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace longscope {

namespace {

// ---- portable ----------------------------------------------------------------------------

float bits_to_f32(uint32_t b)
{
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

float half_to_f32(uint16_t h)
{
    const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0)
            return bits_to_f32(sign);
        float v = float(mant) * 5.9604644775390625e-8f;
        uint32_t b;
        std::memcpy(&b, &v, 4);
        return bits_to_f32(b | sign);
    }
    if (exp == 31)
        return bits_to_f32(sign | 0x7f800000u | (mant << 13));
    return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

float dot_portable(const float *a, const float *b, int64_t n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k)
            s[k] += a[i + k] * b[i + k];
    float tail = 0;
    for (; i < n; ++i)
        tail += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

void dot4_portable(const float *w, const float *x, int64_t stride, int64_t n, float *out)
{
    for (int t = 0; t < 4; ++t)
        out[t] = dot_portable(w, x + t * stride, n);
}

void f16_portable(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, reinterpret_cast<const uint8_t *>(src) + 2 * i, 2);
        dst[i] = half_to_f32(h);
    }
}

void bf16_portable(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, reinterpret_cast<const uint8_t *>(src) + 2 * i, 2);
        dst[i] = bits_to_f32(uint32_t(h) << 16);
    }
}

// The scalar elementwise reference.
constexpr float k_gelu = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float k_gelu_cubic = 0.044715f;

void exp_portable(const float *x, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        out[i] = std::exp(x[i]);
}

void tanh_portable(const float *x, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        out[i] = std::tanh(x[i]);
}

void swiglu_portable(const float *gate, const float *up, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void geglu_portable(const float *gate, const float *up, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = 0.5f * g * (1.0f + std::tanh(k_gelu * (g + k_gelu_cubic * g * g * g))) * up[i];
    }
}

void softcap_portable(float *x, float cap, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        x[i] = cap * std::tanh(x[i] / cap);
}

double sum_squares_portable(const float *x, int64_t n)
{
    double ss = 0;
    for (int64_t i = 0; i < n; ++i)
        ss += double(x[i]) * x[i];
    return ss;
}

void scale_mul_portable(const float *x, float s, const float *w, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        out[i] = x[i] * s * w[i];
}

void add_portable(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        x[i] += y[i];
}

void scale_portable(float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        x[i] *= s;
}


// ---- elementwise vector bodies -----------------------------------------------------------------

// Sixteen floats as one value (cpu/vec16.h): one AVX-512 register in the AVX-512 build of the
// bodies below, two AVX2 registers in the AVX2 build; the two compute the same bits.
using vec16::exp16;
using vec16::load16;
using vec16::splat;
using vec16::store16;
using vec16::V16;
using vec16::V16i;
typedef float V8 __attribute__((vector_size(32)));
typedef double V8d __attribute__((vector_size(64)));
#define LS_INLINE __attribute__((always_inline)) inline

// tanh(x), sixteen at a time, on |x| with the sign of x put back: below 0.625 the odd
// polynomial a + a^3 Q(a^2) (Q of degree 4 fitted to tanh by least squares in relative error,
// 0.2 ulp), above it 1 - 2 / (e^{2a} + 1) (tanh >= 0.55 there, so the subtraction loses under a
// bit). inf gives 1, NaN stays NaN, -0 stays -0.
LS_INLINE V16 tanh16(V16 x)
{
    const V16i sign = (V16i)x & int32_t(0x80000000u);
    const V16 a = (V16)((V16i)x & 0x7fffffff);
    const V16 z = a * a;
    V16 q = splat(-0.005705246236175299f);
    q = q * z + 0.02063940465450287f;
    q = q * z - 0.05373984947800636f;
    q = q * z + 0.13331444561481476f;
    q = q * z - 0.3333328068256378f;
    const V16 small = a + a * z * q;
    const V16 big = 1.0f - 2.0f / (exp16(a + a) + 1.0f);
    const V16 t = a < 0.625f ? small : big;
    return (V16)((V16i)t | sign);
}

// out[i] = f(a[i], b[i]) over n values, sixteen at a time; the last n % 16 through a padded copy,
// so every value takes the same arithmetic wherever it sits in the array.
template <class F> LS_INLINE void map16(const float *a, const float *b, float *out, int64_t n, F f)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        store16(out + i, f(load16(a + i), load16(b + i)));
    if (i < n) {
        const size_t rest = size_t(n - i) * sizeof(float);
        float pa[16] = {}, pb[16] = {}, po[16];
        std::memcpy(pa, a + i, rest);
        std::memcpy(pb, b + i, rest);
        store16(po, f(load16(pa), load16(pb)));
        std::memcpy(out + i, po, rest);
    }
}

struct ExpOp {
    LS_INLINE V16 operator()(V16 x, V16) const { return exp16(x); }
};
struct TanhOp {
    LS_INLINE V16 operator()(V16 x, V16) const { return tanh16(x); }
};
struct SwigluOp {
    LS_INLINE V16 operator()(V16 g, V16 u) const { return g / (1.0f + exp16(-g)) * u; }
};
struct GegluOp {
    LS_INLINE V16 operator()(V16 g, V16 u) const
    {
        return 0.5f * g * (1.0f + tanh16(k_gelu * (g + k_gelu_cubic * g * g * g))) * u;
    }
};
struct SoftcapOp {
    float cap;
    LS_INLINE V16 operator()(V16 x, V16) const { return cap * tanh16(x / cap); }
};
struct ScaleMulOp {
    float s;
    LS_INLINE V16 operator()(V16 x, V16 w) const { return x * s * w; }
};
struct AddOp {
    LS_INLINE V16 operator()(V16 x, V16 y) const { return x + y; }
};
struct ScaleOp {
    float s;
    LS_INLINE V16 operator()(V16 x, V16) const { return x * s; }
};

// Sixteen values at a time into two double accumulators of eight, the rest one at a time, summed
// in a fixed order: the products of floats are exact in double, so the sum's only rounding is
// the additions' (relative error under (n / 16 + 4) 2^-53).
LS_INLINE double sum_squares16(const float *x, int64_t n)
{
    V8d acc0 = {}, acc1 = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        V8 lo, hi;
        std::memcpy(&lo, x + i, sizeof lo);
        std::memcpy(&hi, x + i + 8, sizeof hi);
        const V8d dl = __builtin_convertvector(lo, V8d), dh = __builtin_convertvector(hi, V8d);
        acc0 += dl * dl;
        acc1 += dh * dh;
    }
    double tail = 0;
    for (; i < n; ++i)
        tail += double(x[i]) * x[i];
    const V8d a = acc0 + acc1;
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tail;
}

// The kernels of one target from the bodies above.
#define LS_ELEMENTWISE_KERNELS(suffix, target)                                                              \
    target void exp_##suffix(const float *x, float *out, int64_t n) { map16(x, x, out, n, ExpOp{}); }      \
    target void tanh_##suffix(const float *x, float *out, int64_t n) { map16(x, x, out, n, TanhOp{}); }    \
    target void swiglu_##suffix(const float *g, const float *u, float *out, int64_t n)                     \
    {                                                                                                      \
        map16(g, u, out, n, SwigluOp{});                                                                   \
    }                                                                                                      \
    target void geglu_##suffix(const float *g, const float *u, float *out, int64_t n)                      \
    {                                                                                                      \
        map16(g, u, out, n, GegluOp{});                                                                    \
    }                                                                                                      \
    target void softcap_##suffix(float *x, float cap, int64_t n) { map16(x, x, x, n, SoftcapOp{cap}); }    \
    target double sum_squares_##suffix(const float *x, int64_t n) { return sum_squares16(x, n); }          \
    target void scale_mul_##suffix(const float *x, float s, const float *w, float *out, int64_t n)         \
    {                                                                                                      \
        map16(x, w, out, n, ScaleMulOp{s});                                                                \
    }                                                                                                      \
    target void add_##suffix(float *x, const float *y, int64_t n) { map16(x, y, x, n, AddOp{}); }          \
    target void scale_##suffix(float *x, float s, int64_t n) { map16(x, x, x, n, ScaleOp{s}); }

// ---- AVX2 + FMA + F16C ---------------------------------------------------------------------

#define LS_AVX2 __attribute__((target("avx2,fma,f16c")))

LS_AVX2 float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// One weight row against N token rows. Each token keeps two accumulators that take
// alternate 8-wide chunks, then a scalar tail: the same arithmetic for N = 1 and N = 4, so a
// token's result does not depend on how many tokens were evaluated with it (batched and
// single runs agree bit for bit).
template <int N> LS_AVX2 inline void dot_n_avx2(const float *w, const float *x, int64_t stride, int64_t n, float *out)
{
    __m256 acc0[N], acc1[N];
    for (int t = 0; t < N; ++t)
        acc0[t] = acc1[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
        for (int t = 0; t < N; ++t) {
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * stride + i), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * stride + i + 8), acc1[t]);
        }
    }
    if (i + 8 <= n) {
        const __m256 w0 = _mm256_loadu_ps(w + i);
        for (int t = 0; t < N; ++t)
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * stride + i), acc0[t]);
        i += 8;
    }
    for (int t = 0; t < N; ++t) {
        float r = hsum256(_mm256_add_ps(acc0[t], acc1[t]));
        for (int64_t j = i; j < n; ++j)
            r += w[j] * x[t * stride + j];
        out[t] = r;
    }
}

LS_AVX2 float dot_avx2(const float *a, const float *b, int64_t n)
{
    float r;
    dot_n_avx2<1>(a, b, 0, n, &r);
    return r;
}

LS_AVX2 void dot4_avx2(const float *w, const float *x, int64_t stride, int64_t n, float *out)
{
    dot_n_avx2<4>(w, x, stride, n, out);
}

LS_AVX2 void f16_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
    f16_portable(src + i, dst + i, n - i);
}

LS_ELEMENTWISE_KERNELS(avx2, LS_AVX2)

LS_AVX2 void bf16_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    bf16_portable(src + i, dst + i, n - i);
}

// ---- AVX-512F --------------------------------------------------------------------------------

#define LS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// As dot_n_avx2, 16 wide, the tail through a masked load.
template <int N> LS_AVX512 inline void dot_n_avx512(const float *w, const float *x, int64_t stride, int64_t n, float *out)
{
    __m512 acc0[N], acc1[N];
    for (int t = 0; t < N; ++t)
        acc0[t] = acc1[t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 w0 = _mm512_loadu_ps(w + i), w1 = _mm512_loadu_ps(w + i + 16);
        for (int t = 0; t < N; ++t) {
            acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * stride + i), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * stride + i + 16), acc1[t]);
        }
    }
    if (i + 16 <= n) {
        const __m512 w0 = _mm512_loadu_ps(w + i);
        for (int t = 0; t < N; ++t)
            acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * stride + i), acc0[t]);
        i += 16;
    }
    if (i < n) {
        const __mmask16 m = __mmask16((1u << (n - i)) - 1);
        const __m512 w0 = _mm512_maskz_loadu_ps(m, w + i);
        for (int t = 0; t < N; ++t)
            acc1[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x + t * stride + i), acc1[t]);
    }
    for (int t = 0; t < N; ++t)
        out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
}

LS_AVX512 float dot_avx512(const float *a, const float *b, int64_t n)
{
    float r;
    dot_n_avx512<1>(a, b, 0, n, &r);
    return r;
}

LS_AVX512 void dot4_avx512(const float *w, const float *x, int64_t stride, int64_t n, float *out)
{
    dot_n_avx512<4>(w, x, stride, n, out);
}

LS_AVX512 void f16_avx512(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i))));
    f16_avx2(src + i, dst + i, n - i);
}

LS_AVX512 void bf16_avx512(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    bf16_avx2(src + i, dst + i, n - i);
}

LS_ELEMENTWISE_KERNELS(avx512, LS_AVX512)

// RoPE's rotation without fused multiply-adds: x * c and x' * s are rounded before they are
// added, as in the scalar code, so every level rotates to the same bits. (With FMAs the query
// rotation, exact to float rounding either way, no longer matches the key rotation inside
// attention's keys-before-rope path as closely: logits of a prompt recomputed every step and
// of the same prompt decoded from a cache drifted apart by 3e-5 instead of 1e-6, tst_kv_quant.)
// GCC fuses across statements unless told (fp-contract=fast by default); clang fuses a * b + c
// within one expression (fp-contract=on) unless the standard pragma says off.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

// Pairs from first_pair on: dimension a and its partner b (see RopeTable in ops.h).
__attribute__((always_inline)) inline void rope_pairs(float *v, const float *c, const float *s, int64_t first_pair,
                                                      int n_rot, bool interleaved)
{
    const int half = n_rot / 2;
    for (int64_t i = first_pair; i < half; ++i) {
        const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[a] + x1 * s[a];
        v[b] = x1 * c[b] + x0 * s[b];
    }
}

void rope_head_portable(float *v, const float *c, const float *s, int n_rot, bool interleaved)
{
    rope_pairs(v, c, s, 0, n_rot, interleaved);
}

// One head's rotation: interleaved pairs sit in one vector (partner = the neighbour, by a
// shuffle); rotate_half pairs are sixteen dims apart by n_rot / 2. Pairs past the last whole
// vector go one at a time.
LS_INLINE void rope_head16(float *v, const float *c, const float *s, int n_rot, bool interleaved)
{
    const int half = n_rot / 2;
    int64_t i = 0;
    if (interleaved) {
        for (; i + 16 <= n_rot; i += 16) {
            const V16 x = load16(v + i);
            const V16 p = __builtin_shufflevector(x, x, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
            store16(v + i, x * load16(c + i) + p * load16(s + i));
        }
        rope_pairs(v, c, s, i / 2, n_rot, true);
        return;
    }
    for (; i + 16 <= half; i += 16) {
        const V16 a = load16(v + i), b = load16(v + i + half);
        store16(v + i, a * load16(c + i) + b * load16(s + i));
        store16(v + i + half, b * load16(c + i + half) + a * load16(s + i + half));
    }
    rope_pairs(v, c, s, i, n_rot, false);
}

LS_AVX2 void rope_head_avx2(float *v, const float *c, const float *s, int n_rot, bool interleaved)
{
    rope_head16(v, c, s, n_rot, interleaved);
}

LS_AVX512 void rope_head_avx512(float *v, const float *c, const float *s, int n_rot, bool interleaved)
{
    rope_head16(v, c, s, n_rot, interleaved);
}

// For each of `heads` outputs y_h = y + h * y_stride with weights w_h = w + h * w_stride:
// y_h[i] += w_h[j] * x[j * stride + i] for j = 0, 1, ... in turn, rows whose weight is 0
// skipped, each product rounded before its sum (no FMA), at every level: the bits of the scalar
// loops, head by head. Plain attention's weighted sum of values for the query heads of a kv
// group. The vector levels keep up to 64 values of up to four heads' y (AVX2: 32 values of
// two heads) in registers while the rows go past, each row loaded once for them: the heads' sums
// are independent chains, where one head alone waits on each addition before the next.
__attribute__((always_inline)) inline void add_scaled_rows_tail(float *y, const float *w, const float *x,
                                                                int64_t stride, int64_t rows, int64_t i, int64_t n)
{
    for (int64_t j = 0; j < rows; ++j)
        if (w[j] != 0.0f)
            for (int64_t d = i; d < n; ++d)
                y[d] += w[j] * x[j * stride + d];
}

void add_scaled_rows_portable(float *y, int64_t y_stride, const float *w, int64_t w_stride, int heads,
                              const float *x, int64_t stride, int64_t rows, int64_t n)
{
    for (int h = 0; h < heads; ++h)
        add_scaled_rows_tail(y + h * y_stride, w + h * w_stride, x, stride, rows, 0, n);
}

// H heads by B vectors VT (sixteen values for AVX-512, eight for AVX2, where GCC builds a
// 64-byte vector times a float through the stack; the lanes' arithmetic is the same).
template <class VT, int H, int B>
LS_INLINE void add_scaled_rows_blocks(float *y, int64_t y_stride, const float *w, int64_t w_stride, const float *x,
                                      int64_t stride, int64_t rows)
{
    constexpr int L = int(sizeof(VT) / sizeof(float));
    // Unrolled completely, so that the sums stay in registers (GCC at -O2 kept them on the
    // stack otherwise, every addition waiting on the store before it).
    VT acc[H][B];
    #pragma GCC unroll 4
    for (int h = 0; h < H; ++h)
        #pragma GCC unroll 4
        for (int b = 0; b < B; ++b)
            acc[h][b] = vec16::loadv<VT>(y + h * y_stride + L * b);
    for (int64_t j = 0; j < rows; ++j) {
        VT v[B];
        #pragma GCC unroll 4
        for (int b = 0; b < B; ++b)
            v[b] = vec16::loadv<VT>(x + j * stride + L * b);
        #pragma GCC unroll 4
        for (int h = 0; h < H; ++h) {
            const float a = w[h * w_stride + j];
            if (a == 0.0f)
                continue;
            #pragma GCC unroll 4
            for (int b = 0; b < B; ++b)
                acc[h][b] = acc[h][b] + a * v[b];
        }
    }
    #pragma GCC unroll 4
    for (int h = 0; h < H; ++h)
        #pragma GCC unroll 4
        for (int b = 0; b < B; ++b)
            vec16::storev(y + h * y_stride + L * b, acc[h][b]);
}

// H heads from y, w: the values in blocks of B vectors, then one vector, then the tail.
template <class VT, int H, int B>
LS_INLINE void add_scaled_rows_heads(float *y, int64_t y_stride, const float *w, int64_t w_stride, const float *x,
                                     int64_t stride, int64_t rows, int64_t n)
{
    constexpr int L = int(sizeof(VT) / sizeof(float));
    int64_t i = 0;
    for (; i + L * B <= n; i += L * B)
        add_scaled_rows_blocks<VT, H, B>(y + i, y_stride, w, w_stride, x + i, stride, rows);
    for (; i + L <= n; i += L)
        add_scaled_rows_blocks<VT, H, 1>(y + i, y_stride, w, w_stride, x + i, stride, rows);
    for (int h = 0; h < H; ++h)
        add_scaled_rows_tail(y + h * y_stride, w + h * w_stride, x, stride, rows, i, n);
}

// H heads at a time, then the rest one by one. (Functions, not lambdas: a lambda's body is
// built for the default target, not for the enclosing function's, unless it is inlined.)
template <class VT, int H, int B>
LS_INLINE void add_scaled_rows_vec(float *y, int64_t y_stride, const float *w, int64_t w_stride, int heads,
                                   const float *x, int64_t stride, int64_t rows, int64_t n)
{
    int h0 = 0;
    for (; h0 + H <= heads; h0 += H)
        add_scaled_rows_heads<VT, H, B>(y + h0 * y_stride, y_stride, w + h0 * w_stride, w_stride, x, stride, rows, n);
    for (; h0 < heads; ++h0)
        add_scaled_rows_heads<VT, 1, B>(y + h0 * y_stride, y_stride, w + h0 * w_stride, w_stride, x, stride, rows, n);
}

LS_AVX2 void add_scaled_rows_avx2(float *y, int64_t y_stride, const float *w, int64_t w_stride, int heads,
                                  const float *x, int64_t stride, int64_t rows, int64_t n)
{
    add_scaled_rows_vec<V8, 2, 4>(y, y_stride, w, w_stride, heads, x, stride, rows, n);
}
LS_AVX512 void add_scaled_rows_avx512(float *y, int64_t y_stride, const float *w, int64_t w_stride, int heads,
                                      const float *x, int64_t stride, int64_t rows, int64_t n)
{
    add_scaled_rows_vec<V16, 4, 4>(y, y_stride, w, w_stride, heads, x, stride, rows, n);
}

#if defined(__clang__)
#pragma STDC FP_CONTRACT DEFAULT
#else
#pragma GCC pop_options
#endif

#define LS_ELEMENTWISE_ENTRIES(suffix)                                                                      \
    exp_##suffix, tanh_##suffix, swiglu_##suffix, geglu_##suffix, softcap_##suffix, sum_squares_##suffix,  \
        scale_mul_##suffix, add_##suffix, scale_##suffix, rope_head_##suffix, add_scaled_rows_##suffix

const CpuKernels k_avx512{"avx512", dot_avx512, dot4_avx512, f16_avx512, bf16_avx512, LS_ELEMENTWISE_ENTRIES(avx512)};
const CpuKernels k_avx2{"avx2", dot_avx2, dot4_avx2, f16_avx2, bf16_avx2, LS_ELEMENTWISE_ENTRIES(avx2)};
const CpuKernels k_portable{"portable",   dot_portable,   dot4_portable, f16_portable,
                            bf16_portable, LS_ELEMENTWISE_ENTRIES(portable)};

} // namespace

const CpuKernels &cpu_kernels_at(VectorLevel level)
{
    switch (level) {
    case VectorLevel::Avx512: return k_avx512;
    case VectorLevel::Avx2: return k_avx2;
    default: return k_portable;
    }
}

const CpuKernels &cpu_kernels() { return cpu_kernels_at(kernel_table().level); }

int available_cpu_kernels(const CpuKernels **out, int max)
{
    const CpuFeatures &f = cpu_features();
    int n = 0;
    if (f.avx512 && n < max)
        out[n++] = &k_avx512;
    if (f.avx2 && n < max)
        out[n++] = &k_avx2;
    if (n < max)
        out[n++] = &k_portable;
    return n;
}

} // namespace longscope
