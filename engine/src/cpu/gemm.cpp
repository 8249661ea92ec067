#include "cpu/gemm.h"

#include "cpu/aligned_vector.h"
#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/packed.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <immintrin.h>

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings inside the reduce
// intrinsics; the values are defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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
    // Every accumulator summed before the tail: the tail calls half_to_f32, and accumulators
    // live across a call were kept on the stack by GCC (12) in the main loop too, a load and a
    // store per FMA (F16 2048 x 2048 by 128 tokens, one core of an AMD EPYC without AVX-512:
    // 26.8 GFLOP/s before, against a 101 GFLOP/s FMA peak).
    float s[R][NT];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            s[r][t] = hsum8(acc[r][t]);
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < NT; ++t) {
            for (int64_t j = i; j < n; ++j)
                s[r][t] += load_one<T>(rows[r], j) * x[t * ldx + j];
            out[t * ldo + r] = s[r][t];
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

// The sums of 4 tokens' accumulators of one row, halfway: lanes 4t..4t+3 hold u_0..u_3 of
// token t, where a 16-lane sum v reduces as s_j = v_j + v_{j+8}, u_j = s_j + s_{j+4}, then
// (u_0 + u_2) + (u_1 + u_3): _mm512_reduce_add_ps's order, so the results keep its bits.
LS_AVX512 inline __m512 reduce_row_half(const __m512 a[4])
{
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a[0], a[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a[2], a[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lanes 4t..4t+3: (u_0 + u_2, u_1 + u_3) of rows a and b for token t.
LS_AVX512 inline __m512 reduce_rows_pair(__m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

// out[t * ldo + r] = the sum of acc[r][t] for r < R (2 or 4) and t < 4, all sixteen (or eight)
// reduced together: 13 shuffles and 7 additions per 4 x 4 accumulators where one at a time
// takes 4 and 3 each, the same additions in the same order.
template <int R> LS_AVX512 inline void reduce_store_4tokens(const __m512 (*acc)[4], float *out, int64_t ldo)
{
    static_assert(R == 2 || R == 4);
    const __m512 w01 = reduce_rows_pair(reduce_row_half(acc[0]), reduce_row_half(acc[1]));
    if constexpr (R == 4) {
        const __m512 w23 = reduce_rows_pair(reduce_row_half(acc[2]), reduce_row_half(acc[3]));
        const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_ps(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm_storeu_ps(out, _mm512_castps512_ps128(v));
        _mm_storeu_ps(out + ldo, _mm512_extractf32x4_ps(v, 1));
        _mm_storeu_ps(out + 2 * ldo, _mm512_extractf32x4_ps(v, 2));
        _mm_storeu_ps(out + 3 * ldo, _mm512_extractf32x4_ps(v, 3));
    } else {
        const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(w01, w01, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_ps(w01, w01, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm_storel_pi(reinterpret_cast<__m64 *>(out), _mm512_castps512_ps128(v));
        _mm_storel_pi(reinterpret_cast<__m64 *>(out + ldo), _mm512_extractf32x4_ps(v, 1));
        _mm_storel_pi(reinterpret_cast<__m64 *>(out + 2 * ldo), _mm512_extractf32x4_ps(v, 2));
        _mm_storel_pi(reinterpret_cast<__m64 *>(out + 3 * ldo), _mm512_extractf32x4_ps(v, 3));
    }
}

// Decode's requests for the line at byte offset `line` of its rows (see tile_avx512).
template <int R> LS_AVX512 inline void decode_prefetch_line(const void *const *rows, int64_t line)
{
    if constexpr (R == 1) {
        _mm_prefetch(static_cast<const char *>(rows[0]) + line + 2048, _MM_HINT_T0);
        _mm_prefetch(static_cast<const char *>(rows[0]) + line + 4096, _MM_HINT_T1);
    } else {
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
            _mm_prefetch(static_cast<const char *>(rows[r]) + line + 1024, _MM_HINT_T0);
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
    // Decode (one token), where kernel_table().decode_prefetch holds, one request per 64 bytes:
    // one row (products below 4096 inputs) asks for its lines 2 KiB ahead into L1 and 4 KiB
    // ahead into L2; eight rows (longer ones) each for theirs 1 KiB ahead into L1. TinyLlama F16
    // decode on the AMX Xeon, alternating, tokens/s: one thread 7.14-7.17 without, 7.74-7.75
    // with 2 KiB into L1 alone, 7.9-8.3 with 4 KiB into L2 as well; two threads 13.8-13.9,
    // 14.7-14.9, 14.9-15.2, and 15.3-15.4 with the eight rows' requests (1024 bytes and 4096
    // into L1 alone read less than 2048; 2048 + 8192 14.3-14.7; the eight rows' into L2 or 2
    // KiB ahead 14.9-15.3).
    constexpr int64_t per_line = 64 / (T == DType::F32 ? 4 : 2); // values per 64-byte line
    const bool prefetch = (R == 1 || R == 8) && NT == 1 && kernel_table().decode_prefetch;
    int64_t i = 0;
    if constexpr (NT == 1) {
        // One token: four blocks of 16 per step, the requests for the step's lines first, the
        // same sums in the same order as a block at a time (greedy text of TinyLlama F16 and
        // the bundled model identical; tst_ops single_token_equals_batched). The loop of one
        // block per step, with a test for a new line in each, held one core below its stream:
        // AMD EPYC family 26 (AVX-512), TinyLlama F16 decode on two threads, three alternating
        // rounds, 31.0 -> 33.7 tokens/s; 2048 x 5632 F16 products, two threads, 63-66 -> 67-71
        // GB/s (the machine's read bandwidth moves by 20% between runs).
        for (; i + 64 <= n; i += 64) {
            if (prefetch) {
                #pragma GCC unroll 4
                for (int64_t l = 0; l < 64; l += per_line)
                    decode_prefetch_line<R>(rows, 64 * ((i + l) / per_line));
            }
            #pragma GCC unroll 4
            for (int64_t k = 0; k < 64; k += 16) {
                const __m512 xv = _mm512_loadu_ps(x + i + k);
                #pragma GCC unroll 8
                for (int r = 0; r < R; ++r)
                    acc[r][0] = _mm512_fmadd_ps(load16<T>(rows[r], i + k), xv, acc[r][0]);
            }
        }
    }
    for (; i + 16 <= n; i += 16) {
        if (prefetch && i % per_line == 0) {
            decode_prefetch_line<R>(rows, 64 * (i / per_line));
        }
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
    if constexpr (NT == 4 && R % 2 == 0) {
        #pragma GCC unroll 4
        for (int r = 0; r + 4 <= R; r += 4)
            reduce_store_4tokens<4>(&acc[r], out + r, ldo);
        if constexpr (R % 4 == 2)
            reduce_store_4tokens<2>(&acc[R - 2], out + R - 2, ldo);
    } else {
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
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

// ---- many rows by many tokens ---------------------------------------------------------------

// The tile kernels of one level up to RMAX rows by NMAX tokens, indexed [R - 1][NT - 1].
template <DType T, int RMAX, int NMAX, template <DType, int, int> class K> struct TileTable {
    template <size_t... I> static std::array<TileFn, RMAX * NMAX> make(std::index_sequence<I...>)
    {
        return {K<T, int(I / NMAX) + 1, int(I % NMAX) + 1>::fn...};
    }
    static TileFn get(int R, int NT)
    {
        static const std::array<TileFn, RMAX * NMAX> table = make(std::make_index_sequence<RMAX * NMAX>());
        return table[size_t((R - 1) * NMAX + NT - 1)];
    }
};

template <DType T, int R, int NT> struct Avx512Tile {
    static constexpr TileFn fn = tile_avx512<T, R, NT>;
};

// The AVX-512 level's tile: 6 rows by 4 tokens, 24 of the 32 registers accumulating, each
// token's activation vector loaded once per 6 rows instead of 4 (one core, TinyLlama's F16
// matrices by 128 tokens: 7% less CPU time than 4 x 4 tiles, F32 8%).
constexpr int k_rows_avx512 = 6, k_tokens_avx512 = 4;

// The loops of a block of rows by many tokens: tokens in groups of `group`, rows in blocks of
// up to RB, each block against the group's tokens TB at a time; tile(rows, nr, t, nt) runs one.
template <int RB, class Tile>
void for_each_tile(const uint8_t *base, size_t stride, int64_t n_rows, int64_t n_tokens, int tb, int64_t group,
                   Tile &&tile)
{
    const void *rows[RB];
    for (int64_t g = 0; g < n_tokens; g += group) {
        const int64_t g_end = std::min(n_tokens, g + group);
        for (int64_t o = 0; o < n_rows; o += RB) {
            const int nr = int(std::min<int64_t>(RB, n_rows - o));
            for (int r = 0; r < nr; ++r)
                rows[r] = base + size_t(o + r) * stride;
            for (int64_t t = g; t < g_end; t += tb)
                tile(rows, nr, o, t, int(std::min<int64_t>(tb, g_end - t)));
        }
    }
}

template <DType T>
void rows_avx512(const uint8_t *base, size_t stride, int64_t n_rows, const float *x, int64_t n_tokens, int64_t n,
                 float *y, int64_t ldy)
{
    constexpr int RB = k_rows_avx512, TB = k_tokens_avx512;
    // Rows in blocks of up to 512 KiB (half a 1 MiB L2), each block against all the tokens, a
    // tile of 6 rows by 4 tokens at a time: the block's weights stream from memory once and
    // are then read from L2, each tile's activations once per block from L2 or L3. One core of
    // an AMD EPYC (family 26), F16 by 512 tokens, GFLOP/s before (tokens in groups of 128, each
    // group against every 6-row block) and after: 2048 x 2048 222 -> 240, 5632 rows of 2048
    // 219 -> 236, 2048 rows of 5632 179 -> 236 (the group's activations, 2.8 MiB, had spilled
    // from L2); LLaMA-7B-shaped 4096 rows of 11008 by 128 tokens 180 -> 221. Blocks of 384 KiB
    // or 768 KiB, and the inputs cut into pieces of 1024-4096 (the tile's accumulators kept
    // between pieces), read the same or less.
    constexpr int64_t block_bytes = 512 << 10;
    const int64_t row_bytes = n * (T == DType::F32 ? 4 : 2);
    const int64_t block = std::max<int64_t>(RB, block_bytes / row_bytes / RB * RB);
    const void *rows[RB];
    for (int64_t b0 = 0; b0 < n_rows; b0 += block) {
        const int64_t b1 = std::min(n_rows, b0 + block);
        for (int64_t t = 0; t < n_tokens; t += TB) {
            const int nt = int(std::min<int64_t>(TB, n_tokens - t));
            for (int64_t o = b0; o < b1; o += RB) {
                const int nr = int(std::min<int64_t>(RB, b1 - o));
                for (int r = 0; r < nr; ++r)
                    rows[r] = base + size_t(o + r) * stride;
                const TileFn fn = nr == RB && nt == TB ? tile_avx512<T, RB, TB>
                                                       : TileTable<T, RB, TB, Avx512Tile>::get(nr, nt);
                fn(rows, x + t * n, n, n, y + t * ldy + o, ldy);
            }
        }
    }
}

// The AVX2 level's tile for many tokens: 4 rows by 3 tokens, 12 of the 16 registers
// accumulating, 3 holding the tokens' activations. Each step loads 4 weight vectors (16 bytes
// each for F16) and 3 activation vectors (32 bytes) for 12 FMAs, where the 4 x 2 tile of
// gemm_tile loads 4 and 2 for 8: the 32-byte loads, not the FMAs, held that tile back. One
// core of an AMD EPYC without AVX-512, F16 by 128 tokens, best of 5-10 (two alternating
// rounds): 2048 x 2048 80.6-80.9 -> 84.3-84.4 GFLOP/s, 2048 rows of 5632 78.9-81.5 ->
// 83.4-86.0, 5632 rows of 2048 73.2-81.2 -> 85.6-86.4 (6 x 2 read 81-91, 3 x 4 79-86, 3 x 3
// 78-79, 2 x 4 and 7 x 2 about 50). Every sum runs in tile_avx2's order whatever the shape:
// the same bits as gemm_tile and decode.
constexpr int k_rows_avx2 = 4, k_tokens_avx2 = 3;

template <DType T>
void rows_avx2(const uint8_t *base, size_t stride, int64_t n_rows, const float *x, int64_t n_tokens, int64_t n,
               float *y, int64_t ldy)
{
    constexpr int RB = k_rows_avx2, TB = k_tokens_avx2;
    for_each_tile<RB>(base, stride, n_rows, n_tokens, TB, 32,
                      [&](const void *const *rows, int nr, int64_t o, int64_t t, int nt) {
                          const TileFn fn = nr == RB && nt == TB ? tile_avx2<T, RB, TB> : tile_avx2_fn<T>(nr, nt);
                          fn(rows, x + t * n, n, n, y + t * ldy + o, ldy);
                      });
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
    // row's arithmetic in the same order as the 1 x 1 one. With AVX2, rows of any length: one
    // row's single chain of FMAs (4 cycles each) held a core below the memory's speed (one
    // core of an AMD EPYC without AVX-512, F16 2048 x 2048 matrices: 12.4 GB/s a row at a
    // time, 20 eight at a time; TinyLlama F16 decode on two threads 8.2 -> 10.1 tokens/s).
    if (fn && (n > 4096 || kernel_table().level == VectorLevel::Avx2)) {
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

// ---- F16 and BF16 packed in panels of 32 rows (packed.h) ------------------------------------

namespace {

// Sixteen rows' values of one input, widened to floats.
template <DType T> LS_AVX512 inline __m512 load_packed16(const uint16_t *p)
{
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
    if constexpr (T == DType::F16)
        return _mm512_cvtph_ps(h);
    else
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Values per input of a panel (packed.h): 32, one 64-byte line.
constexpr int64_t k_half_input_stride = packed_half_panel_groups * packed_group_rows;

// G groups (16 G rows) by NT tokens, group g's value i at p + (g / 2) pstride + 16 (g % 2) + 32 i
// (consecutive panels pstride values apart), token t's value of input i at x[NT i + t] (a block
// of interleaved activations, interleave_half_acts; one token's row as it is): for each input
// i, the groups' sixteen values widened once and multiplied by each token's x_t[i] broadcast,
// G x NT accumulators; the results are stored as they stand (lanes are rows), no horizontal
// sums.
template <DType T, int G, int NT>
LS_AVX512 void packed_half_tile(const uint16_t *p, const float *x, int64_t n, float *out, int64_t ldo,
                               int64_t pstride = 0)
{
    constexpr int64_t PG = packed_half_panel_groups;
    __m512 acc[G][NT];
    #pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
        #pragma GCC unroll 12
        for (int t = 0; t < NT; ++t)
            acc[g][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
        __m512 w[G];
        #pragma GCC unroll 4
        for (int g = 0; g < G; ++g)
            w[g] = load_packed16<T>(p + (g / PG) * pstride + 16 * (g % PG) + k_half_input_stride * i);
        if constexpr (NT > 1) // the activations' one stream, 1 KiB ahead (it comes from L3)
            _mm_prefetch(reinterpret_cast<const char *>(x + NT * i) + 1024, _MM_HINT_T0);
        #pragma GCC unroll 12
        for (int t = 0; t < NT; ++t) {
            const __m512 xv = _mm512_set1_ps(x[NT * i + t]);
            #pragma GCC unroll 4
            for (int g = 0; g < G; ++g)
                acc[g][t] = _mm512_fmadd_ps(w[g], xv, acc[g][t]);
        }
    }
    #pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
        #pragma GCC unroll 12
        for (int t = 0; t < NT; ++t)
            _mm512_storeu_ps(out + t * ldo + 16 * g, acc[g][t]);
}

using PackedHalfFn = void (*)(const uint16_t *, const float *, int64_t, float *, int64_t, int64_t);

// Prefill's tile: four groups (two panels, 64 rows) by six tokens, 24 of the 32 registers
// accumulating, four holding the widened weights; each step loads four vectors of weights and
// broadcasts six activations for 24 multiply-adds. Broadcasts cost a vector slot on Zen 4: one
// core of an AMD EPYC family 25, F16 by 512 tokens, GFLOP/s, two groups by twelve tokens ->
// four by six (both with the activations interleaved): 2048 x 5632 104 -> 113-114, 5632 x
// 2048 103-104 -> 113-114, 2048 x 2048 103-104 -> 114, 2048 x 256 96-97 -> 102-107 (the FMA
// peak 118). On Zen 5 the shapes had measured alike (docs/cpu-kernels.md).
constexpr int k_packed_half_groups = 4;
static_assert(k_packed_half_groups == 2 * packed_half_panel_groups, "prefill's tile is two panels");
static_assert(packed_half_token_block == 6, "24 accumulators");

template <DType T, int G, size_t... I> constexpr std::array<PackedHalfFn, sizeof...(I)> packed_half_row(std::index_sequence<I...>)
{
    return {packed_half_tile<T, G, int(I) + 1>...};
}

// The same sums one at a time (below the AVX-512 level, where the kernel table was changed after
// the matrix was packed): a fused multiply-add rounds once, as vfmadd does, so the same bits.
void packed_half_portable(DType type, const uint16_t *packed, int64_t n, int64_t g0, int64_t g1, const float *x,
                         int64_t n_tokens, float *y, int64_t ldy)
{
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int r = 0; r < 16; ++r) {
                float acc = 0.0f;
                const uint16_t *v = packed + packed_half_at(n, g, 0) + r;
                for (int64_t i = 0; i < n; ++i) {
                    const uint16_t h = v[k_half_input_stride * i];
                    acc = std::fma(type == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h), x[t * n + i], acc);
                }
                y[t * ldy + 16 * g + r] = acc;
            }
}

thread_local AlignedVector<float> t_half_acts; // interleaved activations where the caller gave none

// Decode (one token) over groups [g0, g1): two whole panels at a time with `panels` (each one
// sequential stream of 64 bytes per input, independent chains: one chain waits four cycles per
// input on the multiply-add before it), a group at a time with `group` where a panel is split
// between two threads' ranges.
void packed_half_decode(const uint16_t *packed, int64_t n, int64_t g0, int64_t g1, const float *x, float *y,
                        int64_t ldy, PackedHalfFn panels, PackedHalfFn group)
{
    constexpr int64_t PG = packed_half_panel_groups;
    const int64_t pstride = packed_half_at(n, PG, 0);
    for (int64_t g = g0; g < g1;) {
        const uint16_t *p = packed + packed_half_at(n, g, 0);
        if (g % PG == 0 && g + 2 * PG <= g1) {
            panels(p, x, n, y + 16 * g, ldy, pstride);
            g += 2 * PG;
        } else {
            group(p, x, n, y + 16 * g, ldy, 0);
            ++g;
        }
    }
}

// The interleaved activations the caller made (xi), or this thread's own copy of them.
const float *interleaved_acts(const float *x, int64_t n, int64_t n_tokens, const float *xi)
{
    if (xi)
        return xi;
    t_half_acts.resize(static_cast<size_t>(n_tokens * n));
    interleave_half_acts(x, n, n_tokens, 0, (n_tokens + packed_half_token_block - 1) / packed_half_token_block,
                         t_half_acts.data());
    return t_half_acts.data();
}

template <DType T>
void packed_half_avx512(const uint16_t *packed, int64_t n, int64_t g0, int64_t g1, const float *x, int64_t n_tokens,
                        float *y, int64_t ldy, const float *xi)
{
    constexpr int64_t PG = packed_half_panel_groups;
    if (n_tokens == 1) // four chains of sixteen rows
        return packed_half_decode(packed, n, g0, g1, x, y, ldy, packed_half_tile<T, 2 * PG, 1>,
                                  packed_half_tile<T, 1, 1>);
    xi = interleaved_acts(x, n, n_tokens, xi);
    // Groups in blocks of up to 512 KiB (half a 1 MiB L2) but at least two panels (a tile), each
    // block against all the tokens, six at a time: the block streams from memory once and is
    // then read from L2. The six tokens' activations come interleaved, one stream asked for 1
    // KiB ahead: read as rows, 8 KiB apart at 2048 inputs, they fall in the same sets of the L1
    // cache (one core of an AMD EPYC family 25, F16 by 512 tokens, two groups by twelve tokens,
    // GFLOP/s, rows -> interleaved: 2048 x 5632 98-99 -> 104-105, 2048 x 2048 98-99 -> 103-104,
    // 5632 x 2048 105 -> 103-104 with the copy). Where a thread's range starts or ends inside
    // a pair of panels, one panel or one group at a time.
    static constexpr auto quad_tiles = packed_half_row<T, k_packed_half_groups>(std::make_index_sequence<packed_half_token_block>());
    static constexpr auto pair_tiles = packed_half_row<T, packed_half_panel_groups>(std::make_index_sequence<packed_half_token_block>());
    static constexpr auto group_tiles = packed_half_row<T, 1>(std::make_index_sequence<packed_half_token_block>());
    constexpr int TB = packed_half_token_block;
    const int64_t pstride = packed_half_at(n, PG, 0);
    const int64_t block = std::max<int64_t>(2 * PG, (int64_t(512) << 10) / (32 * n) / PG * PG);
    for (int64_t b0 = g0; b0 < g1;) {
        const int64_t b1 = std::min(g1, (b0 / PG) * PG + block);
        for (int64_t t = 0; t < n_tokens; t += TB) {
            const int nt = int(std::min<int64_t>(TB, n_tokens - t));
            const float *xt = xi + t * n;
            float *yt = y + t * ldy;
            for (int64_t g = b0; g < b1;) {
                const uint16_t *p = packed + packed_half_at(n, g, 0);
                if (g % PG == 0 && g + 2 * PG <= b1) { // two whole panels
                    quad_tiles[size_t(nt - 1)](p, xt, n, yt + 16 * g, ldy, pstride);
                    g += 2 * PG;
                } else if (g % PG == 0 && g + PG <= b1) { // a whole panel
                    pair_tiles[size_t(nt - 1)](p, xt, n, yt + 16 * g, ldy, 0);
                    g += PG;
                } else { // a panel's group alone (the other is in another thread's range)
                    group_tiles[size_t(nt - 1)](p, xt, n, yt + 16 * g, ldy, 0);
                    ++g;
                }
            }
        }
        b0 = b1;
    }
}

// The AVX2 level's tile: G groups (16 G rows, two vectors of eight each) by NT tokens, group
// g's value i at p + (g / 2) pstride + 16 (g % 2) + 32 i as in packed_half_tile, the same chain
// per (row, token): the same bits. With 16 vector registers, prefill takes one group by six
// tokens: 12 accumulators, two widened weight vectors and one broadcast; decode takes two
// panels (four groups, eight independent chains) at a time.
template <DType T, int G, int NT>
LS_AVX2 void packed_half_tile_avx2(const uint16_t *p, const float *x, int64_t n, float *out, int64_t ldo,
                                   int64_t pstride = 0)
{
    constexpr int64_t PG = packed_half_panel_groups;
    constexpr int V = 2 * G; // vectors of eight rows
    __m256 acc[V][NT];
    #pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
        #pragma GCC unroll 6
        for (int t = 0; t < NT; ++t)
            acc[v][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
        __m256 w[V];
        #pragma GCC unroll 8
        for (int v = 0; v < V; ++v)
            w[v] = load8<T>(p + (v / 2 / PG) * pstride + 16 * (v / 2 % PG) + 8 * (v % 2) + k_half_input_stride * i, 0);
        if constexpr (NT > 1) // the activations' one stream, 1 KiB ahead
            _mm_prefetch(reinterpret_cast<const char *>(x + NT * i) + 1024, _MM_HINT_T0);
        #pragma GCC unroll 6
        for (int t = 0; t < NT; ++t) {
            const __m256 xv = _mm256_broadcast_ss(x + NT * i + t);
            #pragma GCC unroll 8
            for (int v = 0; v < V; ++v)
                acc[v][t] = _mm256_fmadd_ps(w[v], xv, acc[v][t]);
        }
    }
    #pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
        #pragma GCC unroll 6
        for (int t = 0; t < NT; ++t)
            _mm256_storeu_ps(out + t * ldo + 8 * v, acc[v][t]);
}

template <DType T, size_t... I>
constexpr std::array<PackedHalfFn, sizeof...(I)> packed_half_row_avx2(std::index_sequence<I...>)
{
    return {packed_half_tile_avx2<T, 1, int(I) + 1>...};
}

template <DType T>
void packed_half_avx2(const uint16_t *packed, int64_t n, int64_t g0, int64_t g1, const float *x, int64_t n_tokens,
                      float *y, int64_t ldy, const float *xi)
{
    constexpr int64_t PG = packed_half_panel_groups;
    if (n_tokens == 1) // eight chains of eight rows
        return packed_half_decode(packed, n, g0, g1, x, y, ldy, packed_half_tile_avx2<T, 2 * PG, 1>,
                                  packed_half_tile_avx2<T, 1, 1>);
    xi = interleaved_acts(x, n, n_tokens, xi);
    // Groups in blocks of up to 256 KiB (half of the 512 KiB L2 of many AVX2 processors), each
    // block against all the tokens six at a time, a group at a time.
    static constexpr auto tiles = packed_half_row_avx2<T>(std::make_index_sequence<packed_half_token_block>());
    constexpr int TB = packed_half_token_block;
    const int64_t block = std::max<int64_t>(1, (int64_t(256) << 10) / (32 * n));
    for (int64_t b0 = g0; b0 < g1; b0 += block) {
        const int64_t b1 = std::min(g1, b0 + block);
        for (int64_t t = 0; t < n_tokens; t += TB) {
            const int nt = int(std::min<int64_t>(TB, n_tokens - t));
            for (int64_t g = b0; g < b1; ++g)
                tiles[size_t(nt - 1)](packed + packed_half_at(n, g, 0), xi + t * n, n, y + t * ldy + 16 * g, ldy, 0);
        }
    }
}

} // namespace

void gemm_rows(DType type, const void *base, size_t row_stride, int64_t n_rows, const float *x, int64_t n_tokens,
               int64_t n, float *y, int64_t ldy)
{
    const auto *b = static_cast<const uint8_t *>(base);
    if (kernel_table().level == VectorLevel::Avx512) {
        switch (type) {
        case DType::F16: rows_avx512<DType::F16>(b, row_stride, n_rows, x, n_tokens, n, y, ldy); return;
        case DType::BF16: rows_avx512<DType::BF16>(b, row_stride, n_rows, x, n_tokens, n, y, ldy); return;
        default: rows_avx512<DType::F32>(b, row_stride, n_rows, x, n_tokens, n, y, ldy); return;
        }
    }
    // Tokens in groups of 32: their activations (256 KiB at 2048 inputs) stay in a 512 KiB L2
    // cache while the rows stream past. One core of an AMD EPYC without AVX-512, F16 2048 x
    // 2048 by 128 tokens: 59 GFLOP/s with groups of 64 (which spill to L3), 74 with 32 or 16.
    if (kernel_table().level == VectorLevel::Avx2) {
        switch (type) {
        case DType::F16: rows_avx2<DType::F16>(b, row_stride, n_rows, x, n_tokens, n, y, ldy); return;
        case DType::BF16: rows_avx2<DType::BF16>(b, row_stride, n_rows, x, n_tokens, n, y, ldy); return;
        default: rows_avx2<DType::F32>(b, row_stride, n_rows, x, n_tokens, n, y, ldy); return;
        }
    }
    for_each_tile<4>(b, row_stride, n_rows, n_tokens, gemm_token_block(), 32,
                     [&](const void *const *rows, int nr, int64_t o, int64_t t, int nt) {
                         gemm_tile(type, rows, nr, x + t * n, n, nt, n, y + t * ldy + o, ldy);
                     });
}

namespace {

// One full block of six tokens, sixteen inputs at a time: the six rows' sixteen values (96
// floats) become six vectors of the interleaved block, value e of the stretch being input e / 6
// of token e % 6. Each output vector takes its lanes of tokens 0-1, 2-3 and 4-5 from one
// two-source permutation per pair, merged by two masked moves: 30 vector operations where the
// copy value by value made 96 loads and 96 stores. The inputs left (n % 16) go value by value.
LS_AVX512 int64_t interleave_six_avx512(const float *x, int64_t n, float *dst)
{
    static_assert(packed_half_token_block == 6, "six rows per block");
    struct Plan {
        alignas(64) int32_t idx[6][3][16];
        __mmask16 pair1[6], pair2[6];
    };
    static const Plan plan = [] {
        Plan p{};
        for (int k = 0; k < 6; ++k) {
            p.pair1[k] = p.pair2[k] = 0;
            for (int j = 0; j < 16; ++j) {
                const int e = 16 * k + j, i = e / 6, t = e % 6;
                for (int q = 0; q < 3; ++q)
                    p.idx[k][q][j] = i; // lanes of another pair: overwritten by the merge
                p.idx[k][t / 2][j] = i + 16 * (t % 2);
                if (t / 2 == 1)
                    p.pair1[k] = __mmask16(p.pair1[k] | (1u << j));
                if (t / 2 == 2)
                    p.pair2[k] = __mmask16(p.pair2[k] | (1u << j));
            }
        }
        return p;
    }();
    int64_t i0 = 0;
    for (; i0 + 16 <= n; i0 += 16) {
        __m512 r[6];
        #pragma GCC unroll 6
        for (int t = 0; t < 6; ++t)
            r[t] = _mm512_loadu_ps(x + t * n + i0);
        float *out = dst + 6 * i0;
        #pragma GCC unroll 6
        for (int k = 0; k < 6; ++k) {
            const __m512 a = _mm512_permutex2var_ps(
                r[0], _mm512_load_si512(reinterpret_cast<const void *>(plan.idx[k][0])), r[1]);
            const __m512 b = _mm512_permutex2var_ps(
                r[2], _mm512_load_si512(reinterpret_cast<const void *>(plan.idx[k][1])), r[3]);
            const __m512 c = _mm512_permutex2var_ps(
                r[4], _mm512_load_si512(reinterpret_cast<const void *>(plan.idx[k][2])), r[5]);
            _mm512_storeu_ps(out + 16 * k, _mm512_mask_mov_ps(_mm512_mask_mov_ps(a, plan.pair1[k], b), plan.pair2[k], c));
        }
    }
    return i0;
}

} // namespace

void interleave_half_acts(const float *x, int64_t n, int64_t n_tokens, int64_t b0, int64_t b1, float *xi)
{
    constexpr int64_t TB = packed_half_token_block;
    const bool vector = kernel_table().level == VectorLevel::Avx512;
    for (int64_t b = b0; b < b1; ++b) {
        const int64_t t0 = b * TB, nt = std::min(TB, n_tokens - t0);
        float *dst = xi + t0 * n;
        if (vector && nt == TB) {
            for (int64_t i = interleave_six_avx512(x + t0 * n, n, dst); i < n; ++i)
                for (int64_t t = 0; t < TB; ++t)
                    dst[TB * i + t] = x[(t0 + t) * n + i];
            continue;
        }
        // Inputs in stretches of 64, so that the block's stretch of output (3 KiB) stays in L1
        // while each token's 256 bytes of input are read in order.
        for (int64_t i0 = 0; i0 < n; i0 += 64) {
            const int64_t i1 = std::min(n, i0 + 64);
            for (int64_t t = 0; t < nt; ++t) {
                const float *src = x + (t0 + t) * n;
                for (int64_t i = i0; i < i1; ++i)
                    dst[nt * i + t] = src[i];
            }
        }
    }
}

void gemm_packed_half(DType type, const uint16_t *packed, int64_t n, int64_t g0, int64_t g1, const float *x,
                      int64_t n_tokens, float *y, int64_t ldy, const float *xi)
{
    if (kernel_table().level == VectorLevel::Avx2 && type == DType::F16)
        packed_half_avx2<DType::F16>(packed, n, g0, g1, x, n_tokens, y, ldy, xi);
    else if (kernel_table().level == VectorLevel::Avx2)
        packed_half_avx2<DType::BF16>(packed, n, g0, g1, x, n_tokens, y, ldy, xi);
    else if (kernel_table().level != VectorLevel::Avx512)
        packed_half_portable(type, packed, n, g0, g1, x, n_tokens, y, ldy);
    else if (type == DType::F16)
        packed_half_avx512<DType::F16>(packed, n, g0, g1, x, n_tokens, y, ldy, xi);
    else
        packed_half_avx512<DType::BF16>(packed, n, g0, g1, x, n_tokens, y, ldy, xi);
}

} // namespace longscope
