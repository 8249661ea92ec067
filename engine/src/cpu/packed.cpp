#include "cpu/packed.h"

#include "cpu/ops.h"
#include "cpu/qdot.h"
#include "cpu/quant.h"

#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <string_view>

#include "longscope/model.h"

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings; the values are defined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace longscope {

namespace {

constexpr int64_t qk_k = 256;
constexpr int64_t q4_k_bytes = 144;
constexpr int64_t off_d = 0, off_dmin = 32, off_sc = 64, off_m = 192, off_qs = 320;
static_assert(off_qs + 4 * 8 * 16 * 4 == packed_q4_k_block_bytes);
static_assert(packed_q4_k_block_bytes % 64 == 0);

bool pack_disabled()
{
    static const bool off = [] {
        const char *e = std::getenv("LONGSCOPE_PACK");
        return e && std::string_view(e) == "0";
    }();
    return off;
}

} // namespace

bool packable(DType type, int64_t n_in, int64_t n_out)
{
    return type == DType::Q4_K && n_in > 0 && n_in % qk_k == 0 && n_out > 0 && n_out % packed_group_rows == 0;
}

bool packed_kernel_available()
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

bool cpu_wants_packed(const WeightView &w)
{
    return w.shape.size() == 2 && packable(w.type, w.ne(0), w.ne(1)) && qkernel() == QKernel::Vnni &&
           packed_kernel_available() && !pack_disabled();
}

size_t packed_size(int64_t n_in, int64_t n_out)
{
    return size_t(n_out / packed_group_rows) * size_t(n_in / qk_k) * size_t(packed_q4_k_block_bytes);
}

void pack_q4_k(const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0, int64_t g1)
{
    const int64_t nsb = n_in / qk_k;
    const size_t row_stride = size_t(nsb) * q4_k_bytes;
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t sb = 0; sb < nsb; ++sb) {
            uint8_t *b = dst + (size_t(g) * size_t(nsb) + size_t(sb)) * packed_q4_k_block_bytes;
            for (int r = 0; r < packed_group_rows; ++r) {
                const uint8_t *p = src + size_t(g * packed_group_rows + r) * row_stride + size_t(sb) * q4_k_bytes;
                std::memcpy(b + off_d + 2 * r, p, 2);
                std::memcpy(b + off_dmin + 2 * r, p + 2, 2);
                uint8_t sc[8], m[8];
                q4_k_scales_mins(p + 4, sc, m);
                for (int j = 0; j < 8; ++j) {
                    b[off_sc + 16 * j + r] = sc[j];
                    b[off_m + 16 * j + r] = m[j];
                }
                for (int pair = 0; pair < 4; ++pair)
                    for (int w = 0; w < 8; ++w)
                        std::memcpy(b + off_qs + ((pair * 8 + w) * 16 + r) * 4, p + 16 + 32 * pair + 4 * w, 4);
            }
        }
}

// The arithmetic of dequantize_q4_k (quant.cpp): y = (d * sc) * q - (dmin * m).
void dequantize_packed_row_portable(const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    const int64_t nsb = n_in / qk_k;
    const int64_t g = row / packed_group_rows;
    const int r = int(row % packed_group_rows);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = packed + (size_t(g) * size_t(nsb) + size_t(sb)) * packed_q4_k_block_bytes;
        uint16_t hd, hm;
        std::memcpy(&hd, b + off_d + 2 * r, 2);
        std::memcpy(&hm, b + off_dmin + 2 * r, 2);
        const float d = f16_to_f32(hd), dmin = f16_to_f32(hm);
        float *y = out + sb * qk_k;
        for (int pair = 0; pair < 4; ++pair) {
            const float d1 = d * float(b[off_sc + 16 * (2 * pair) + r]);
            const float m1 = dmin * float(b[off_m + 16 * (2 * pair) + r]);
            const float d2 = d * float(b[off_sc + 16 * (2 * pair + 1) + r]);
            const float m2 = dmin * float(b[off_m + 16 * (2 * pair + 1) + r]);
            for (int l = 0; l < 32; ++l) {
                const uint8_t q = b[off_qs + ((pair * 8 + l / 4) * 16 + r) * 4 + l % 4];
                y[64 * pair + l] = d1 * float(q & 0x0f) - m1;
                y[64 * pair + 32 + l] = d2 * float(q >> 4) - m2;
            }
        }
    }
}

namespace {

#define LS_PACKED_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// The same values with vector operations (the same float operations per value): the row's 32
// bytes of a pair are gathered from its eight words, 64 bytes apart.
LS_PACKED_AVX512 void dequantize_packed_row_avx512(const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    const int64_t nsb = n_in / qk_k;
    const int64_t g = row / packed_group_rows;
    const int r = int(row % packed_group_rows);
    const __m256i words = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
    const __m128i low = _mm_set1_epi8(0x0f);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = packed + (size_t(g) * size_t(nsb) + size_t(sb)) * packed_q4_k_block_bytes;
        uint16_t hd, hm;
        std::memcpy(&hd, b + off_d + 2 * r, 2);
        std::memcpy(&hm, b + off_dmin + 2 * r, 2);
        const float d = _cvtsh_ss(hd), dmin = _cvtsh_ss(hm);
        float *y = out + sb * qk_k;
        for (int pair = 0; pair < 4; ++pair) {
            const __m256i q = _mm256_i32gather_epi32(
                reinterpret_cast<const int *>(b + off_qs + (pair * 8 * 16 + r) * 4), words, 1);
            for (int sub = 0; sub < 2; ++sub) {
                const int j = 2 * pair + sub;
                const __m512 d1 = _mm512_set1_ps(d * float(b[off_sc + 16 * j + r]));
                const __m512 m1 = _mm512_set1_ps(dmin * float(b[off_m + 16 * j + r]));
                for (int h = 0; h < 2; ++h) {
                    const __m128i v = h == 0 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
                    const __m128i nib = sub == 0 ? _mm_and_si128(v, low) : _mm_and_si128(_mm_srli_epi16(v, 4), low);
                    const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(nib));
                    _mm512_storeu_ps(y + 64 * pair + 32 * sub + 16 * h, _mm512_sub_ps(_mm512_mul_ps(d1, qf), m1));
                }
            }
        }
    }
}

} // namespace

void dequantize_packed_row(const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    static const bool vector = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
                               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (vector)
        dequantize_packed_row_avx512(packed, n_in, row, out);
    else
        dequantize_packed_row_portable(packed, n_in, row, out);
}

namespace {

#define LS_PACKED_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

inline int32_t load_i32(const int8_t *p)
{
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// One group of 16 rows against NT tokens. Per super-block and token: for each pair of
// sub-blocks, exact int32 sums of weight code times activation code per row (lanes = rows),
// times the sub-block scale (the product stays below 2^24, so it is exact in float), times the
// activation block's scale, summed over the even and the odd sub-blocks apart; the minimums as
// sum_j m_j * (d_x sum q)_j; then acc += d * sums - dmin * mins.
template <int NT>
LS_PACKED_VNNI void packed_q4_k_vnni(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0,
                                     float *out, int64_t ldo)
{
    const int64_t nsb = n_in / qk_k;
    const int8_t *xq[NT];
    const float *xd[NT], *xs[NT];
    __m512 acc[NT];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        xq[t] = a.q_row(t0 + t);
        xd[t] = a.db_row(t0 + t);
        xs[t] = a.ds_row(t0 + t);
        acc[t] = _mm512_setzero_ps();
    }
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = group + size_t(sb) * packed_q4_k_block_bytes;
        __m512 fe[NT], fo[NT], mn[NT];
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            fe[t] = _mm512_setzero_ps();
            fo[t] = _mm512_setzero_ps();
            mn[t] = _mm512_setzero_ps();
        }
        #pragma GCC unroll 4
        for (int pair = 0; pair < 4; ++pair) {
            __m512i ie[NT], io[NT];
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                ie[t] = _mm512_setzero_si512();
                io[t] = _mm512_setzero_si512();
            }
            #pragma GCC unroll 8
            for (int w = 0; w < 8; ++w) {
                const __m512i v = _mm512_loadu_si512(b + off_qs + (pair * 8 + w) * 64);
                const __m512i lo = _mm512_and_si512(v, low);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    const int8_t *x = xq[t] + sb * qk_k + 64 * pair + 4 * w;
                    ie[t] = _mm512_dpbusd_epi32(ie[t], lo, _mm512_set1_epi32(load_i32(x)));
                    io[t] = _mm512_dpbusd_epi32(io[t], hi, _mm512_set1_epi32(load_i32(x + 32)));
                }
            }
            const __m512 se = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_sc + 16 * (2 * pair)))));
            const __m512 so = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_sc + 16 * (2 * pair + 1)))));
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                const float *d = xd[t] + sb * 8 + 2 * pair;
                fe[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ie[t]), se), _mm512_set1_ps(d[0]), fe[t]);
                fo[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(io[t]), so), _mm512_set1_ps(d[1]), fo[t]);
            }
        }
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const __m512 mj = _mm512_cvtepi32_ps(
                _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_m + 16 * j))));
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                mn[t] = _mm512_fmadd_ps(mj, _mm512_set1_ps(xs[t][sb * 8 + j]), mn[t]);
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off_d)));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off_dmin)));
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            acc[t] = _mm512_fmadd_ps(d, _mm512_add_ps(fe[t], fo[t]), acc[t]);
            acc[t] = _mm512_fnmadd_ps(dmin, mn[t], acc[t]);
        }
    }
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
        _mm512_storeu_ps(out + t * ldo, acc[t]);
}

} // namespace

void packed_tile(const uint8_t *packed, int64_t n_in, int64_t g, const QuantizedActs &a, int64_t t0, int n_tokens,
                 float *out, int64_t ldo)
{
    const uint8_t *group = packed + size_t(g) * size_t(n_in / qk_k) * packed_q4_k_block_bytes;
    switch (n_tokens) {
    case 1: packed_q4_k_vnni<1>(group, n_in, a, t0, out, ldo); return;
    case 2: packed_q4_k_vnni<2>(group, n_in, a, t0, out, ldo); return;
    case 3: packed_q4_k_vnni<3>(group, n_in, a, t0, out, ldo); return;
    default: packed_q4_k_vnni<4>(group, n_in, a, t0, out, ldo); return;
    }
}

} // namespace longscope
