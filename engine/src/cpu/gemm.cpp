#include "cpu/gemm.h"

#include "cpu/kernel_table.h"
#include "cpu/ops.h"

#include <cstring>
#include <immintrin.h>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings inside the reduce
// intrinsics; the values are defined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace longscope {

namespace {

// Scalar element loads, shared by the portable kernel and the AVX2 tails.
template <DType T> inline float load_one(const void *row, int64_t i)
{
    const auto *b = static_cast<const uint8_t *>(row);
    if constexpr (T == DType::F32) {
        float f;
        std::memcpy(&f, b + 4 * i, 4);
        return f;
    } else {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        return T == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
}

// The tile loops below are unrolled completely (R and NT are template constants) so the
// R x NT accumulators live in registers; without it GCC keeps them on the stack at -O2.

// ---- portable -------------------------------------------------------------------------------

template <DType T>
void tile_portable(const void *const *rows, int R, const float *x, int64_t ldx, int NT, int64_t n, float *out,
                   int64_t ldo)
{
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < NT; ++t) {
            float acc = 0;
            for (int64_t i = 0; i < n; ++i)
                acc += load_one<T>(rows[r], i) * x[t * ldx + i];
            out[t * ldo + r] = acc;
        }
}

// ---- AVX2 -----------------------------------------------------------------------------------

#define LS_AVX2 __attribute__((target("avx2,fma,f16c")))

template <DType T> LS_AVX2 inline __m256 load8(const void *row, int64_t i)
{
    const auto *b = static_cast<const uint8_t *>(row);
    if constexpr (T == DType::F32) {
        return _mm256_loadu_ps(reinterpret_cast<const float *>(b) + i);
    } else if constexpr (T == DType::F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2 * i)));
    } else {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2 * i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
}

LS_AVX2 inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <DType T, int R, int NT>
LS_AVX2 void tile_avx2(const void *const *rows, const float *x, int64_t ldx, int64_t n, float *out, int64_t ldo)
{
    __m256 acc[R][NT];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv[NT];
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            xv[t] = _mm256_loadu_ps(x + t * ldx + i);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 w = load8<T>(rows[r], i);
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            float s = hsum8(acc[r][t]);
            for (int64_t j = i; j < n; ++j)
                s += load_one<T>(rows[r], j) * x[t * ldx + j];
            out[t * ldo + r] = s;
        }
}

// ---- AVX-512 --------------------------------------------------------------------------------

#define LS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

template <DType T> LS_AVX512 inline __m512 load16(const void *row, int64_t i)
{
    const auto *b = static_cast<const uint8_t *>(row);
    if constexpr (T == DType::F32) {
        return _mm512_loadu_ps(reinterpret_cast<const float *>(b) + i);
    } else if constexpr (T == DType::F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 2 * i)));
    } else {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 2 * i)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
}

template <DType T> LS_AVX512 inline __m512 load16_masked(const void *row, int64_t i, __mmask16 m)
{
    const auto *b = static_cast<const uint8_t *>(row);
    if constexpr (T == DType::F32) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float *>(b) + i);
    } else if constexpr (T == DType::F16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + 2 * i));
    } else {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, b + 2 * i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
}

template <DType T, int R, int NT>
LS_AVX512 void tile_avx512(const void *const *rows, const float *x, int64_t ldx, int64_t n, float *out, int64_t ldo)
{
    __m512 acc[R][NT];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            acc[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 xv[NT];
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            xv[t] = _mm512_loadu_ps(x + t * ldx + i);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m512 w = load16<T>(rows[r], i);
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                acc[r][t] = _mm512_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
    if (i < n) { // the tail through masked loads, into the same accumulators
        const __mmask16 m = __mmask16((1u << (n - i)) - 1);
        __m512 xv[NT];
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            xv[t] = _mm512_maskz_loadu_ps(m, x + t * ldx + i);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m512 w = load16_masked<T>(rows[r], i, m);
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                acc[r][t] = _mm512_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// ---- dispatch over the tile shape -------------------------------------------------------------

using TileFn = void (*)(const void *const *, const float *, int64_t, int64_t, float *, int64_t);


#define LS_TILE_TABLE(kernel)                                                                                \
    template <DType T> TileFn kernel##_fn(int R, int NT)                                                    \
    {                                                                                                        \
        static const TileFn table[4][4] = {                                                                  \
            {kernel<T, 1, 1>, kernel<T, 1, 2>, kernel<T, 1, 3>, kernel<T, 1, 4>},                            \
            {kernel<T, 2, 1>, kernel<T, 2, 2>, kernel<T, 2, 3>, kernel<T, 2, 4>},                            \
            {kernel<T, 3, 1>, kernel<T, 3, 2>, kernel<T, 3, 3>, kernel<T, 3, 4>},                            \
            {kernel<T, 4, 1>, kernel<T, 4, 2>, kernel<T, 4, 3>, kernel<T, 4, 4>}};                           \
        return table[R - 1][NT - 1];                                                                         \
    }

LS_TILE_TABLE(tile_avx2)
LS_TILE_TABLE(tile_avx512)

template <DType T>
void run(const void *const *rows, int R, const float *x, int64_t ldx, int NT, int64_t n, float *out, int64_t ldo)
{
    switch (kernel_table().level) {
    case VectorLevel::Avx512: tile_avx512_fn<T>(R, NT)(rows, x, ldx, n, out, ldo); return;
    case VectorLevel::Avx2: tile_avx2_fn<T>(R, NT)(rows, x, ldx, n, out, ldo); return;
    default: tile_portable<T>(rows, R, x, ldx, NT, n, out, ldo); return;
    }
}

template <DType T> TileFn vector_tile_fn(int R, int NT)
{
    switch (kernel_table().level) {
    case VectorLevel::Avx512: return tile_avx512_fn<T>(R, NT);
    case VectorLevel::Avx2: return tile_avx2_fn<T>(R, NT);
    default: return nullptr;
    }
}

TileFn vector_tile_for(DType type, int R, int NT)
{
    return type == DType::F16    ? vector_tile_fn<DType::F16>(R, NT)
           : type == DType::BF16 ? vector_tile_fn<DType::BF16>(R, NT)
                                 : vector_tile_fn<DType::F32>(R, NT);
}

// Eight rows by one token (the decode of long rows), or null for the portable kernels.
template <DType T> TileFn vector_tile8_fn()
{
    switch (kernel_table().level) {
    case VectorLevel::Avx512: return tile_avx512<T, 8, 1>;
    case VectorLevel::Avx2: return tile_avx2<T, 8, 1>;
    default: return nullptr;
    }
}

TileFn vector_tile8_for(DType type)
{
    return type == DType::F16    ? vector_tile8_fn<DType::F16>()
           : type == DType::BF16 ? vector_tile8_fn<DType::BF16>()
                                 : vector_tile8_fn<DType::F32>();
}

} // namespace

void gemv_rows(DType type, const void *base, size_t row_stride, int64_t n_rows, const float *x, int64_t n, float *y)
{
    const TileFn fn = vector_tile_for(type, 1, 1);
    const auto *b = static_cast<const uint8_t *>(base);
    int64_t r = 0;
    // Rows longer than 4096 values (activations above 16 KiB): eight rows at a time, so each
    // activation block is loaded once per eight rows. The weight stream pushes the activations
    // out of the 32 KiB L1 cache, and reading them back for every row halved the speed of
    // ffn_down (5632 inputs) here; one core, F16, stand-alone: 15 GB/s a row at a time, 17
    // four at a time, 20-21 eight at a time (22 at 11008 inputs). An 8 x 1 tile does each
    // row's arithmetic in the same order as the 1 x 1 one.
    if (fn && n > 4096) {
        const TileFn fn8 = vector_tile8_for(type);
        for (; r + 8 <= n_rows; r += 8) {
            const void *rows[8];
            for (int k = 0; k < 8; ++k)
                rows[k] = b + size_t(r + k) * row_stride;
            fn8(rows, x, n, n, y + r, 1);
        }
    }
    for (; r < n_rows; ++r) {
        const void *row = b + size_t(r) * row_stride;
        if (fn)
            fn(&row, x, n, n, y + r, 1);
        else
            gemm_tile(type, &row, 1, x, n, 1, n, y + r, 1);
    }
}

void gemm_tile(DType type, const void *const *rows, int n_rows, const float *x, int64_t ldx, int n_tokens,
               int64_t n, float *out, int64_t ldo)
{
    switch (type) {
    case DType::F16:
        run<DType::F16>(rows, n_rows, x, ldx, n_tokens, n, out, ldo);
        return;
    case DType::BF16:
        run<DType::BF16>(rows, n_rows, x, ldx, n_tokens, n, out, ldo);
        return;
    default:
        run<DType::F32>(rows, n_rows, x, ldx, n_tokens, n, out, ldo);
        return;
    }
}

// ---- AVX-512 BF16 ---------------------------------------------------------------------------

#define LS_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

namespace {

template <int R, int NT>
LS_BF16 void tile_bf16(const uint16_t *const *rows, const uint16_t *x, int64_t ldx, int64_t n, float *out, int64_t ldo)
{
    __m512 acc[R][NT];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            acc[r][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
        __m512bh xv[NT];
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            xv[t] = (__m512bh)_mm512_loadu_si512(x + t * ldx + i);
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const __m512bh w = (__m512bh)_mm512_loadu_si512(rows[r] + i);
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], w, xv[t]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);
}

using Bf16TileFn = void (*)(const uint16_t *const *, const uint16_t *, int64_t, int64_t, float *, int64_t);

} // namespace

bool has_bf16_dot() { return kernel_table().bf16_dot; }

void gemm_tile_bf16dot(const uint16_t *const *rows, int n_rows, const uint16_t *x, int64_t ldx, int n_tokens,
                       int64_t n, float *out, int64_t ldo)
{
    static const Bf16TileFn table[4][4] = {
        {tile_bf16<1, 1>, tile_bf16<1, 2>, tile_bf16<1, 3>, tile_bf16<1, 4>},
        {tile_bf16<2, 1>, tile_bf16<2, 2>, tile_bf16<2, 3>, tile_bf16<2, 4>},
        {tile_bf16<3, 1>, tile_bf16<3, 2>, tile_bf16<3, 3>, tile_bf16<3, 4>},
        {tile_bf16<4, 1>, tile_bf16<4, 2>, tile_bf16<4, 3>, tile_bf16<4, 4>}};
    table[n_rows - 1][n_tokens - 1](rows, x, ldx, n, out, ldo);
}

LS_BF16 void f32_to_bf16_rne(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
    for (; i < n; ++i)
        dst[i] = f32_to_bf16(src[i]);
}

int gemm_token_block() { return kernel_table().level == VectorLevel::Avx2 ? 2 : 4; }

} // namespace longscope
