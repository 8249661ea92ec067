#include "cpu/simd.h"

#include <cstring>
#include <immintrin.h>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings (_mm512_undefined_ps
// inside the reduce intrinsics); the values are defined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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

const CpuKernels k_avx512{"avx512", dot_avx512, dot4_avx512, f16_avx512, bf16_avx512};
const CpuKernels k_avx2{"avx2", dot_avx2, dot4_avx2, f16_avx2, bf16_avx2};
const CpuKernels k_portable{"portable", dot_portable, dot4_portable, f16_portable, bf16_portable};

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
