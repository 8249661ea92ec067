// Integer attention scores over Q8_0 / Q4_0 keys (attention_qk.h). The packed tile holds, per
// group of sixteen keys and per block of 32 dims, eight 64-byte vectors (vector d, lane i:
// dims 4d .. 4d+3 of key i, each as an unsigned byte quant + 128) and then the sixteen keys'
// block scales as floats. With the keys unsigned and the query signed, VNNI's vpdpbusd sums
// four products per lane; AVX2 widens the bytes to int16 pairs for vpmaddwd (vpmaddubsw
// would saturate: two products of 255 * 127 exceed int16). The integer sums are exact, so the
// kernels differ only in speed.
#include "cpu/attention_qk.h"

#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <immintrin.h>

namespace longscope {

namespace {

constexpr int kGroup = 16;                         // keys per packed group
constexpr int kBlock = 32;                         // dims per block
constexpr size_t kVecBytes = 64;                   // one vector: sixteen keys by four dims
constexpr size_t kGroupBlockBytes = 8 * kVecBytes + kGroup * sizeof(float); // + the scales

size_t block_bytes(DType type) { return type == DType::Q8_0 ? 34 : 18; }

// The quants of one block of a key as unsigned bytes (quant + 128): Q8_0's int8 quants, or
// Q4_0's nibbles (low nibbles are dims 0-15, high nibbles dims 16-31, each minus 8).
void key_block_bytes(DType type, const uint8_t *block, uint8_t out[kBlock])
{
    if (type == DType::Q8_0) {
        for (int i = 0; i < kBlock; ++i)
            out[i] = uint8_t(block[2 + i] ^ 0x80);
    } else {
        for (int i = 0; i < kBlock / 2; ++i) {
            out[i] = uint8_t((block[2 + i] & 0x0F) + 120);
            out[i + 16] = uint8_t((block[2 + i] >> 4) + 120);
        }
    }
}

float block_scale(const uint8_t *block)
{
    uint16_t h;
    std::memcpy(&h, block, 2);
    return f16_to_f32(h);
}

// Keys [0, n) (n <= 16) of one group, one value at a time; lanes n .. 15 get quant 0 and scale
// 0 (their scores are never stored).
void pack_group_portable(DType type, const uint8_t *src, size_t rb, int n, int nb, uint8_t *dst)
{
    const size_t bb = block_bytes(type);
    for (int b = 0; b < nb; ++b, dst += kGroupBlockBytes) {
        std::memset(dst, 0x80, 8 * kVecBytes);
        float scales[kGroup] = {};
        for (int i = 0; i < n; ++i) {
            const uint8_t *block = src + size_t(i) * rb + size_t(b) * bb;
            uint8_t bytes[kBlock];
            key_block_bytes(type, block, bytes);
            for (int d = 0; d < 8; ++d)
                std::memcpy(dst + size_t(d) * kVecBytes + size_t(i) * 4, bytes + 4 * d, 4);
            scales[i] = block_scale(block);
        }
        std::memcpy(dst + 8 * kVecBytes, scales, sizeof scales);
    }
}

// ---- AVX-512 ----------------------------------------------------------------------------

// Swaps bit b (4, 2 or 1) of the register index and of the lane index within each 256-bit
// half of eight registers: done for 4, 2 and 1 it transposes the two 8 x 8 blocks of dwords.
template <int b, bool take>
constexpr std::array<int32_t, 16> swap_lanes()
{
    std::array<int32_t, 16> a{};
    for (int l = 0; l < 16; ++l)
        a[size_t(l)] = take ? ((l & b) ? 16 + l : l + b) : ((l & b) ? 16 + l - b : l);
    return a;
}
template <int b>
__attribute__((target("arch=x86-64-v4"), always_inline)) inline void swap8(__m512i r[8])
{
    static constexpr std::array<int32_t, 16> keep = swap_lanes<b, false>(), take = swap_lanes<b, true>();
    const __m512i ik = _mm512_loadu_si512(keep.data()), it = _mm512_loadu_si512(take.data());
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
        if (!(i & b)) {
            const __m512i lo = r[i], hi = r[i + b];
            r[i] = _mm512_permutex2var_epi32(lo, ik, hi);
            r[i + b] = _mm512_permutex2var_epi32(lo, it, hi);
        }
}

// Block b of keys i and i + 8 as unsigned bytes, key i in the low 256 bits.
template <DType Type>
__attribute__((target("arch=x86-64-v4"), always_inline)) inline __m512i key_pair_v4(const uint8_t *ki,
                                                                                      const uint8_t *kj)
{
    if constexpr (Type == DType::Q8_0) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ki + 2));
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(kj + 2));
        return _mm512_xor_si512(_mm512_maskz_inserti64x4(0xff, _mm512_castsi256_si512(a), c, 1), _mm512_set1_epi8(char(0x80)));
    } else {
        const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(ki + 2)));
        const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kj + 2)));
        // [qs_i, qs_i, qs_j, qs_j], the second copy of each shifted down a nibble.
        const __m512i shifts = _mm512_setr_epi64(0, 0, 0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                                 0x0004000400040004LL, 0x0004000400040004LL);
        const __m512i x = _mm512_srlv_epi16(_mm512_maskz_inserti64x4(0xff, _mm512_castsi256_si512(a), c, 1), shifts);
        return _mm512_add_epi8(_mm512_and_si512(x, _mm512_set1_epi8(0x0F)), _mm512_set1_epi8(120));
    }
}

template <DType Type>
__attribute__((target("arch=x86-64-v4"))) void pack_keys_v4(const uint8_t *src, size_t rb, int64_t count, int nb,
                                                             uint8_t *dst)
{
    const size_t bb = block_bytes(Type);
    int64_t c0 = 0;
    for (; c0 + kGroup <= count; c0 += kGroup) {
        const uint8_t *g = src + size_t(c0) * rb;
        for (int b = 0; b < nb; ++b, dst += kGroupBlockBytes) {
            const uint8_t *gb = g + size_t(b) * bb;
            __m512i r[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i)
                r[i] = key_pair_v4<Type>(gb + size_t(i) * rb, gb + size_t(i + 8) * rb);
            swap8<4>(r);
            swap8<2>(r);
            swap8<1>(r);
            #pragma GCC unroll 8
            for (int d = 0; d < 8; ++d)
                _mm512_storeu_si512(dst + size_t(d) * kVecBytes, r[d]);
            // The scales, converted sixteen at a time (cheaper than a gather).
            alignas(32) uint16_t h[kGroup];
            #pragma GCC unroll 16
            for (int i = 0; i < kGroup; ++i)
                std::memcpy(&h[i], gb + size_t(i) * rb, 2);
            _mm512_storeu_ps(dst + 8 * kVecBytes,
                             _mm512_maskz_cvtph_ps(0xffff, _mm256_load_si256(reinterpret_cast<const __m256i *>(h))));
        }
    }
    if (c0 < count)
        pack_group_portable(Type, src + size_t(c0) * rb, rb, int(count - c0), nb, dst);
}

__attribute__((target("arch=x86-64-v4,avx512vnni"))) void scores_vnni(const QkQueryBlock *q, int64_t q_stride,
                                                                      int n_rows, const uint8_t *packed,
                                                                      int64_t count, int nb, float *s,
                                                                      int64_t s_stride)
{
    for (int64_t c0 = 0; c0 < count; c0 += kGroup) {
        const uint8_t *pg = packed + size_t(c0 / kGroup) * size_t(nb) * kGroupBlockBytes;
        const __mmask16 keep = count - c0 >= kGroup ? __mmask16(0xffff) : __mmask16((1u << (count - c0)) - 1);
        for (int r = 0; r < n_rows; ++r) {
            const QkQueryBlock *qb = q + r * q_stride;
            __m512 acc = _mm512_setzero_ps();
            for (int b = 0; b < nb; ++b) {
                const uint8_t *pb = pg + size_t(b) * kGroupBlockBytes;
                // Two chains of four, added (exactly) at the end.
                __m512i a0 = _mm512_set1_epi32(qb[b].corr), a1 = _mm512_setzero_si512();
                for (int d = 0; d < 8; d += 2) {
                    a0 = _mm512_dpbusd_epi32(a0, _mm512_loadu_si512(pb + size_t(d) * kVecBytes),
                                             _mm512_set1_epi32(qb[b].q4[d]));
                    a1 = _mm512_dpbusd_epi32(a1, _mm512_loadu_si512(pb + size_t(d + 1) * kVecBytes),
                                             _mm512_set1_epi32(qb[b].q4[d + 1]));
                }
                const __m512 f = _mm512_maskz_cvtepi32_ps(0xffff, _mm512_add_epi32(a0, a1));
                const __m512 sc = _mm512_mul_ps(_mm512_loadu_ps(pb + 8 * kVecBytes), _mm512_set1_ps(qb[b].d));
                acc = b == 0 ? _mm512_mul_ps(f, sc) : _mm512_fmadd_ps(f, sc, acc);
            }
            _mm512_mask_storeu_ps(s + r * s_stride + c0, keep, acc);
        }
    }
}

// ---- AVX2 -------------------------------------------------------------------------------

__attribute__((target("arch=x86-64-v3"))) void scores_avx2(const QkQueryBlock *q, int64_t q_stride, int n_rows,
                                                           const uint8_t *packed, int64_t count, int nb, float *s,
                                                           int64_t s_stride)
{
    const __m256i low_bytes = _mm256_set1_epi16(0x00FF);
    for (int64_t c0 = 0; c0 < count; c0 += 8) {
        // Keys c0 .. c0 + 7: half h of their group's vectors.
        const uint8_t *pg = packed + size_t(c0 / kGroup) * size_t(nb) * kGroupBlockBytes;
        const size_t h = size_t(c0 % kGroup) / 8 * 32;
        const int64_t n = std::min<int64_t>(8, count - c0);
        for (int r = 0; r < n_rows; ++r) {
            const QkQueryBlock *qb = q + r * q_stride;
            __m256 acc = _mm256_setzero_ps();
            for (int b = 0; b < nb; ++b) {
                const uint8_t *pb = pg + size_t(b) * kGroupBlockBytes;
                __m256i a0 = _mm256_set1_epi32(qb[b].corr), a1 = _mm256_setzero_si256();
                for (int d = 0; d < 8; ++d) {
                    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pb + size_t(d) * kVecBytes + h));
                    a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_and_si256(x, low_bytes), _mm256_set1_epi32(qb[b].lo[d])));
                    a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_srli_epi16(x, 8), _mm256_set1_epi32(qb[b].hi[d])));
                }
                const __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(a0, a1));
                const __m256 sc = _mm256_mul_ps(_mm256_loadu_ps(reinterpret_cast<const float *>(pb + 8 * kVecBytes + h)),
                                                _mm256_set1_ps(qb[b].d));
                acc = b == 0 ? _mm256_mul_ps(f, sc) : _mm256_fmadd_ps(f, sc, acc);
            }
            if (n == 8) {
                _mm256_storeu_ps(s + r * s_stride + c0, acc);
            } else {
                alignas(32) float tmp[8];
                _mm256_store_ps(tmp, acc);
                std::memcpy(s + r * s_stride + c0, tmp, size_t(n) * sizeof(float));
            }
        }
    }
}

// ---- portable ---------------------------------------------------------------------------

void scores_portable(const QkQueryBlock *q, int64_t q_stride, int n_rows, const uint8_t *packed, int64_t count,
                     int nb, float *s, int64_t s_stride)
{
    for (int64_t c = 0; c < count; ++c) {
        const uint8_t *pg = packed + size_t(c / kGroup) * size_t(nb) * kGroupBlockBytes;
        const size_t lane = size_t(c % kGroup);
        for (int r = 0; r < n_rows; ++r) {
            const QkQueryBlock *qb = q + r * q_stride;
            float acc = 0.0f;
            for (int b = 0; b < nb; ++b) {
                const uint8_t *pb = pg + size_t(b) * kGroupBlockBytes;
                int32_t dot = qb[b].corr;
                for (int d = 0; d < 8; ++d)
                    for (int t = 0; t < 4; ++t)
                        dot += int32_t(pb[size_t(d) * kVecBytes + lane * 4 + size_t(t)]) *
                               int32_t(int8_t(uint32_t(qb[b].q4[d]) >> (8 * t)));
                float scale;
                std::memcpy(&scale, pb + 8 * kVecBytes + lane * sizeof(float), sizeof scale);
                const float sc = scale * qb[b].d;
                acc = b == 0 ? float(dot) * sc : std::fma(float(dot), sc, acc);
            }
            s[r * s_stride + c] = acc;
        }
    }
}

} // namespace

QkKernel qk_kernel()
{
    const CpuKernelTable &t = kernel_table();
    if (t.attention_v4 && t.integer == QKernel::Vnni)
        return QkKernel::Vnni;
    return t.attention_v3 ? QkKernel::Avx2 : QkKernel::Portable;
}

bool qk_kernel_available(QkKernel kernel)
{
    const CpuFeatures &f = cpu_features();
    switch (kernel) {
    case QkKernel::Vnni: return f.x86_64_v4 && f.avx512_vnni;
    case QkKernel::Avx2: return f.x86_64_v3;
    default: return true;
    }
}

bool keys_scored_in_integers(DType k_type, bool rotated_on_load)
{
    return !rotated_on_load && (k_type == DType::Q8_0 || k_type == DType::Q4_0);
}

size_t qk_packed_bytes(int64_t count, int head_dim)
{
    return size_t((count + kGroup - 1) / kGroup) * size_t(head_dim / kBlock) * kGroupBlockBytes;
}

void qk_quantize_query(const float *q, int head_dim, float scale, QkQueryBlock *dst)
{
    for (int b = 0; b < head_dim / kBlock; ++b, q += kBlock) {
        // ggml's Q8_0 rounding (quantize_row_q8_0_ref), the scale kept as a float.
        static_assert(kBlock == 32);
        int8_t qs[kBlock];
        const float d = quantize_block_q8_0_codes(q, qs);
        int32_t sum = 0;
        for (int i = 0; i < kBlock; ++i)
            sum += qs[i];
        QkQueryBlock &blk = dst[b];
        const auto word = [](int8_t a, int8_t c) { return int32_t(uint32_t(uint16_t(a)) | uint32_t(uint16_t(c)) << 16); };
        for (int w = 0; w < 8; ++w) {
            std::memcpy(&blk.q4[w], qs + 4 * w, 4);
            blk.lo[w] = word(qs[4 * w], qs[4 * w + 2]);
            blk.hi[w] = word(qs[4 * w + 1], qs[4 * w + 3]);
        }
        blk.d = d * scale;
        blk.corr = -128 * sum;
    }
}

void qk_pack_keys(QkKernel kernel, DType type, const uint8_t *src, size_t row_bytes, int64_t count, int head_dim,
                  uint8_t *dst)
{
    const int nb = head_dim / kBlock;
    if (kernel == QkKernel::Vnni) {
        if (type == DType::Q8_0)
            pack_keys_v4<DType::Q8_0>(src, row_bytes, count, nb, dst);
        else
            pack_keys_v4<DType::Q4_0>(src, row_bytes, count, nb, dst);
        return;
    }
    for (int64_t c0 = 0; c0 < count; c0 += kGroup, dst += size_t(nb) * kGroupBlockBytes)
        pack_group_portable(type, src + size_t(c0) * row_bytes, row_bytes, int(std::min<int64_t>(kGroup, count - c0)),
                            nb, dst);
}

void qk_scores(QkKernel kernel, const QkQueryBlock *q, int64_t q_stride, int n_rows, const uint8_t *packed,
               int64_t count, int head_dim, float *s, int64_t s_stride)
{
    const int nb = head_dim / kBlock;
    switch (kernel) {
    case QkKernel::Vnni: scores_vnni(q, q_stride, n_rows, packed, count, nb, s, s_stride); return;
    case QkKernel::Avx2: scores_avx2(q, q_stride, n_rows, packed, count, nb, s, s_stride); return;
    default: scores_portable(q, q_stride, n_rows, packed, count, nb, s, s_stride); return;
    }
}

} // namespace longscope
