#include "cpu/packed.h"

#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/qdot.h"
#include "cpu/qdot_tiles.h"
#include "cpu/quant.h"
#include "cpu/thread_pool.h"
#include "cpu/transpose16.h"

#include <algorithm>
#include <cstring>
#include <immintrin.h>

#include "longscope/model.h"

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings; the values are defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace longscope {

namespace {

constexpr int64_t qk_k = 256;
constexpr int64_t q4_k_bytes = 144, q5_k_bytes = 176, q6_k_bytes = 210;
// Q4_K block offsets (Q5_K: the same, then the fifth bits)
constexpr int64_t off_d = 0, off_dmin = 32, off_sc = 64, off_m = 192, off_qs = 320, off5_qh = 2368;
static_assert(off_qs + 4 * 8 * 16 * 4 == packed_q4_k_block_bytes);
static_assert(packed_q4_k_block_bytes % 64 == 0);
static_assert(off5_qh + 8 * 16 * 4 == packed_q5_k_block_bytes);
static_assert(packed_q5_k_block_bytes % 64 == 0);
// Q6_K block offsets
constexpr int64_t off6_d = 0, off6_sc = 32, off6_q = 288;
static_assert(off6_q + 16 * 192 + 32 == packed_q6_k_block_bytes);
static_assert(packed_q6_k_block_bytes % 64 == 0);
// Q3_K block offsets: d and sc as Q6_K, then the codes
constexpr int64_t q3_k_bytes = 110, off3_q = 288;
static_assert(off3_q + 8 * 192 + 32 == packed_q3_k_block_bytes);
static_assert(packed_q3_k_block_bytes % 64 == 0);
// Q2_K block offsets
constexpr int64_t q2_k_bytes = 84, off2_dmin = 32, off2_sc = 64, off2_m = 320, off2_q = 576;
static_assert(off2_q + 16 * 64 == packed_q2_k_block_bytes);
static_assert(packed_q2_k_block_bytes % 64 == 0);

constexpr int64_t qk = 32; // Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 block
constexpr int64_t q8_0_bytes = 34, q4_0_bytes = 18, q4_1_bytes = 20, q5_0_bytes = 22, q5_1_bytes = 24;
constexpr int64_t iq4_xs_bytes = 136; // a super-block of 256: d, scales_h, scales_l[4], qs[128]

bool is_block32(DType type)
{
    return type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q5_0 ||
           type == DType::Q5_1 || type == DType::IQ4_NL || type == DType::IQ4_XS;
}
// The 32-value types with a minimum m (x = d * q + m), with a fifth bit per code, and the offset
// of their codes (x = d * (q - offset)).
constexpr bool b32_min(DType type) { return type == DType::Q4_1 || type == DType::Q5_1; }
constexpr bool b32_fifth(DType type) { return type == DType::Q5_0 || type == DType::Q5_1; }
// IQ4_NL and IQ4_XS (the Q4_0 block, x = d * iq4_nl_values[q]) take their values as codes + 128
// in the VNNI kernel, hence Q8_0's offset there.
constexpr bool b32_table(DType type) { return type == DType::IQ4_NL || type == DType::IQ4_XS; }
constexpr int b32_offset(DType type)
{
    return type == DType::Q8_0 || b32_table(type) ? 128 : type == DType::Q4_0 ? 8 : type == DType::Q5_0 ? 16 : 0;
}
// IQ4_XS's block scales, d * (6-bit scale - 32), are 17-bit products that f16 cannot hold: its
// pairs keep them as f32, block 2k's sixteen in the first 64-byte line, block 2k + 1's in the
// second (packed.h).
constexpr bool b32_f32_scales(DType type) { return type == DType::IQ4_XS; }

// Q4_K and Q5_K: the same scales and minimums, 4-bit codes with (Q5_K) a fifth bit.
bool is_q4_k_like(DType type) { return type == DType::Q4_K || type == DType::Q5_K; }

// Bytes of one packed super-block of sixteen rows (Q3_K, Q4_K, Q5_K, Q6_K).
constexpr int64_t packed_k_block_bytes(DType type)
{
    return type == DType::Q4_K   ? packed_q4_k_block_bytes
           : type == DType::Q5_K ? packed_q5_k_block_bytes
           : type == DType::Q3_K ? packed_q3_k_block_bytes
           : type == DType::Q2_K ? packed_q2_k_block_bytes
                                 : packed_q6_k_block_bytes;
}

// Q2_K, Q3_K and Q6_K: a scale per 16 values (Q2_K also a minimum; Q3_K, Q6_K codes with an
// offset), one kernel.
bool is_q6_k_like(DType type) { return type == DType::Q6_K || type == DType::Q3_K || type == DType::Q2_K; }

// Where the sixteen rows' scales of group g start in a packed Q2_K, Q3_K or Q6_K block.
constexpr int64_t k16_sc_offset(DType type) { return type == DType::Q2_K ? off2_sc : off6_sc; }

// Bytes of one block's codes in a packed group: Q8_0 512, Q4_0 and Q4_1 256, Q5_0 and Q5_1 320
// (the nibbles, then the fifth bits).
int64_t codes32_bytes(DType type)
{
    return type == DType::Q8_0 ? packed_q8_0_block_bytes
           : b32_fifth(type)   ? packed_q5_1_block_bytes
                               : packed_q4_0_block_bytes;
}

// Bytes of a pair's scales: the d of both blocks (64), and Q4_1's or Q5_1's m of both blocks (64
// more).
int64_t scales32_bytes(DType type) { return b32_min(type) || b32_f32_scales(type) ? 128 : 64; }

// Where block b's sixteen scales (Q4_1, Q5_1: its minimums 64 bytes further) and its codes start
// in a packed 32-value group: blocks go in pairs, the pair's scales, then its two blocks'
// codes (packed.h).
__attribute__((always_inline)) inline size_t scales32_offset(DType type, int64_t b)
{
    return size_t(b / 2 * (scales32_bytes(type) + 2 * codes32_bytes(type)) + (b32_f32_scales(type) ? 64 : 32) * (b % 2));
}

// Row r's scale of block b in a packed 32-value group (f16, or IQ4_XS's f32).
float scale32(DType type, const uint8_t *grp, int64_t b, int r)
{
    if (b32_f32_scales(type)) {
        float d;
        std::memcpy(&d, grp + scales32_offset(type, b) + 4 * r, 4);
        return d;
    }
    uint16_t hd;
    std::memcpy(&hd, grp + scales32_offset(type, b) + 2 * r, 2);
    return f16_to_f32(hd);
}
__attribute__((always_inline)) inline size_t codes32_offset(DType type, int64_t b)
{
    return size_t(b / 2 * (scales32_bytes(type) + 2 * codes32_bytes(type)) + scales32_bytes(type) +
                  codes32_bytes(type) * (b % 2));
}

// Bytes of a packed group of sixteen rows of n_in values.
size_t group_bytes(DType type, int64_t n_in)
{
    if (type == DType::F16 || type == DType::BF16)
        return size_t(32 * n_in);
    if (is_block32(type))
        return size_t((n_in / qk + 1) / 2 * scales32_bytes(type) + n_in / qk * codes32_bytes(type));
    return size_t(n_in / qk_k) * size_t(packed_k_block_bytes(type));
}

// The byte holding code j (0..31) of row r within a block's codes in a packed Q8_0, Q4_0 or
// Q5_1 group (Q4_0, Q5_1: codes j < 16 in the low nibbles, j + 16 in the high ones of the same
// bytes).
size_t code32_byte(DType type, int r, int j)
{
    return type == DType::Q8_0 ? size_t(64 * (j / 4) + 4 * r + j % 4) : size_t(64 * (j % 16 / 4) + 4 * r + j % 4);
}

// Q5_1's fifth bit of code j of row r: its byte within the block's codes, and the bit (word w
// = j % 16 / 4 holds the bits of codes 4 w + c and 16 + 4 w + c at bits 2 w and 2 w + 1).
size_t fifth32_byte(int r, int j) { return size_t(packed_q4_0_block_bytes + 4 * r + j % 4); }
int fifth32_bit(int j) { return 2 * (j % 16 / 4) + j / 16; }

// The 256 6-bit codes of a Q6_K super-block in value order (quant.h).
void q6_k_codes(const uint8_t *p, uint8_t q[256])
{
    for (int half = 0; half < 2; ++half) {
        const uint8_t *ql = p + 64 * half, *qh = p + 128 + 32 * half;
        uint8_t *y = q + 128 * half;
        for (int l = 0; l < 32; ++l) {
            y[l] = uint8_t((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4));
            y[l + 32] = uint8_t((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4));
            y[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            y[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

// Code of value i (0..255) of row r in a packed Q6_K block.
inline int q6_packed_code(const uint8_t *b, int r, int i)
{
    const int g = i / 16, w = (i % 16) / 4, c = i % 4;
    const uint8_t *grp = b + off6_q + 192 * g;
    const uint8_t nib = grp[64 * (w / 2) + 4 * r + c];
    const int low = w % 2 ? nib >> 4 : nib & 0x0f;
    const int high = (grp[128 + 4 * r + c] >> (2 * w)) & 3;
    return low | (high << 4);
}

// Code of value i (0..255) of row r in a packed Q3_K block (0..7; the value is code - 4).
inline int q3_packed_code(const uint8_t *b, int r, int i)
{
    const int g = i / 16, w = (i % 16) / 4, c = i % 4;
    const uint8_t *pair = b + off3_q + 192 * (g / 2);
    const int low = (pair[64 * (g % 2) + 4 * r + c] >> (2 * w)) & 3;
    const int high = (pair[128 + 4 * r + c] >> (4 * (g % 2) + w)) & 1;
    return low | (high << 2);
}

// Code of value i (0..255) of row r in a packed Q2_K block.
inline int q2_packed_code(const uint8_t *b, int r, int i)
{
    const int g = i / 16, w = (i % 16) / 4, c = i % 4;
    return (b[off2_q + 64 * g + 4 * r + c] >> (2 * w)) & 3;
}

} // namespace

bool packable(DType type, int64_t n_in, int64_t n_out)
{
    if (type == DType::F16 || type == DType::BF16)
        return n_in > 0 && n_out > 0 && n_out % (packed_half_panel_groups * packed_group_rows) == 0;
    const int64_t block = is_block32(type) && type != DType::IQ4_XS ? qk : qk_k;
    return (is_q4_k_like(type) || is_q6_k_like(type) || is_block32(type)) && n_in > 0 && n_in % block == 0 &&
           n_out > 0 && n_out % packed_group_rows == 0;
}


bool packed_kernel_available(QKernel k)
{
    const CpuFeatures &f = cpu_features();
    return k == QKernel::Avx2 ? f.avx2 : k == QKernel::Vnni && f.avx512_vnni;
}

bool cpu_wants_packed(const WeightView &w)
{
    return cpu_packs(kernel_table(), w);
}

bool cpu_packs(const CpuKernelTable &t, const WeightView &w)
{
    const bool half = w.type == DType::F16 || w.type == DType::BF16;
    return (half ? t.pack_half : t.pack_weights) && w.shape.size() == 2 &&
           packable(w.type, w.ne(0), w.ne(1));
}

size_t packed_size(DType type, int64_t n_in, int64_t n_out)
{
    return size_t(n_out / packed_group_rows) * group_bytes(type, n_in);
}

namespace {

// Calls pack_row(b, p, r) for every packed super-block b of groups [g0, g1) (zeroed first) and
// each of its sixteen rows r, p being that row's super-block in the source (src_bytes each).
template <class PackRow>
void for_each_k_block(DType type, int64_t src_bytes, const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0,
                      int64_t g1, PackRow pack_row)
{
    const int64_t nsb = n_in / qk_k;
    const size_t row_stride = size_t(nsb * src_bytes), block_bytes = size_t(packed_k_block_bytes(type));
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t sb = 0; sb < nsb; ++sb) {
            uint8_t *b = dst + (size_t(g) * size_t(nsb) + size_t(sb)) * block_bytes;
            std::memset(b, 0, block_bytes);
            for (int r = 0; r < packed_group_rows; ++r)
                pack_row(b, src + size_t(g * packed_group_rows + r) * row_stride + size_t(sb * src_bytes), r);
        }
}

// Q6_K (quant.h: ql[128], qh[64], scales[16], d).
void pack_q6_k(const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0, int64_t g1)
{
    for_each_k_block(DType::Q6_K, q6_k_bytes, src, n_in, dst, g0, g1, [](uint8_t *b, const uint8_t *p, int r) {
        std::memcpy(b + off6_d + 2 * r, p + 208, 2);
        for (int grp = 0; grp < 16; ++grp)
            b[off6_sc + 16 * grp + r] = p[192 + grp];
        uint8_t q[256];
        q6_k_codes(p, q);
        for (int i = 0; i < 256; ++i) {
            const int grp = i / 16, w = (i % 16) / 4, c = i % 4;
            uint8_t *v = b + off6_q + 192 * grp;
            v[64 * (w / 2) + 4 * r + c] |= uint8_t((q[i] & 0x0f) << (4 * (w % 2)));
            v[128 + 4 * r + c] |= uint8_t((q[i] >> 4) << (2 * w));
        }
    });
}

// Q3_K (quant.h: hmask[32], qs[64], scales[12], d).
void pack_q3_k(const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0, int64_t g1)
{
    for_each_k_block(DType::Q3_K, q3_k_bytes, src, n_in, dst, g0, g1, [](uint8_t *b, const uint8_t *p, int r) {
        std::memcpy(b + off6_d + 2 * r, p + 108, 2);
        int8_t sc[16];
        q3_k_scales(p + 96, sc);
        for (int grp = 0; grp < 16; ++grp)
            b[off6_sc + 16 * grp + r] = uint8_t(sc[grp]);
        uint8_t q[256];
        q3_k_codes(p, q);
        for (int i = 0; i < 256; ++i) {
            const int grp = i / 16, w = (i % 16) / 4, c = i % 4;
            uint8_t *pair = b + off3_q + 192 * (grp / 2);
            pair[64 * (grp % 2) + 4 * r + c] |= uint8_t((q[i] & 3) << (2 * w));
            pair[128 + 4 * r + c] |= uint8_t((q[i] >> 2) << (4 * (grp % 2) + w));
        }
    });
}

// Q2_K (quant.h: scales[16] (scale | min << 4), qs[64], d, dmin).
void pack_q2_k(const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0, int64_t g1)
{
    for_each_k_block(DType::Q2_K, q2_k_bytes, src, n_in, dst, g0, g1, [](uint8_t *b, const uint8_t *p, int r) {
        std::memcpy(b + off_d + 2 * r, p + 80, 2);
        std::memcpy(b + off2_dmin + 2 * r, p + 82, 2);
        for (int grp = 0; grp < 16; ++grp) {
            b[off2_sc + 16 * grp + r] = p[grp] & 0x0f;
            b[off2_m + 16 * grp + r] = p[grp] >> 4;
        }
        uint8_t q[256];
        q2_k_codes(p, q);
        for (int i = 0; i < 256; ++i) {
            const int grp = i / 16, w = (i % 16) / 4, c = i % 4;
            b[off2_q + 64 * grp + 4 * r + c] |= uint8_t(q[i] << (2 * w));
        }
    });
}

// Q4_K or Q5_K (quant.h: d, dmin, scales[12], Q5_K's qh[32], qs[128]).
void pack_q4_k(DType type, const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0, int64_t g1)
{
    const bool q5 = type == DType::Q5_K;
    const int64_t off_src_qs = q5 ? 48 : 16;
    for_each_k_block(type, q5 ? q5_k_bytes : q4_k_bytes, src, n_in, dst, g0, g1, [&](uint8_t *b, const uint8_t *p, int r) {
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
                std::memcpy(b + off_qs + ((pair * 8 + w) * 16 + r) * 4, p + off_src_qs + 32 * pair + 4 * w, 4);
        if (q5)
            for (int w = 0; w < 8; ++w)
                std::memcpy(b + off5_qh + (w * 16 + r) * 4, p + 16 + 4 * w, 4);
    });
}

// Q8_0: the codes + 128; Q4_0 (d, qs[16]) and Q4_1 (d, m, qs[16]): the bytes of qs as stored
// (two codes each); Q5_0 (d, qh[4], qs[16]) and Q5_1 (d, m, qh[4], qs[16]): the same, and each
// code's fifth bit (bit j of qh) at its place. IQ4_XS: each block of 32 of a super-block as an
// IQ4_NL block, its scale d * (scale - 32) as f32.
void pack_block32(DType type, const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0, int64_t g1)
{
    const int64_t nb = n_in / qk;
    const int64_t bb = type == DType::Q8_0   ? q8_0_bytes
                       : type == DType::Q4_1 ? q4_1_bytes
                       : type == DType::Q5_0 ? q5_0_bytes
                       : type == DType::Q5_1 ? q5_1_bytes
                                             : q4_0_bytes;
    const int64_t off_qh = b32_min(type) ? 4 : 2; // Q5_0, Q5_1
    const int64_t off_codes = 2 + (b32_min(type) ? 2 : 0) + (b32_fifth(type) ? 4 : 0);
    const size_t row_stride = type == DType::IQ4_XS ? size_t(nb / 8 * iq4_xs_bytes) : size_t(nb * bb);
    for (int64_t g = g0; g < g1; ++g) {
        uint8_t *grp = dst + size_t(g) * group_bytes(type, n_in);
        if (nb % 2) // the odd last block's pair has no second block: its scales are zeros
            for (int64_t at = 32; at < scales32_bytes(type); at += 64)
                std::memset(grp + scales32_offset(type, nb - 1) + at, 0, 32);
        for (int r = 0; r < packed_group_rows; ++r) {
            const uint8_t *row = src + size_t(g * packed_group_rows + r) * row_stride;
            for (int64_t b = 0; b < nb; ++b) {
                uint8_t *codes = grp + codes32_offset(type, b);
                if (type == DType::IQ4_XS) { // block ib of super-block b / 8: its scale, as dequantize_iq4_xs's
                    const uint8_t *sb = row + size_t(b / 8 * iq4_xs_bytes);
                    const int ib = int(b % 8);
                    const float d = f16_to_f32(qdot_detail::load_u16(sb)) * float(iq4_xs_scale(sb + 4, qdot_detail::load_u16(sb + 2), ib));
                    std::memcpy(grp + scales32_offset(type, b) + 4 * r, &d, 4);
                    for (int j = 0; j < 16; ++j)
                        codes[code32_byte(type, r, j)] = sb[8 + 16 * ib + j];
                    continue;
                }
                const uint8_t *p = row + size_t(b * bb);
                std::memcpy(grp + scales32_offset(type, b) + 2 * r, p, 2);
                for (int j = 0; j < int(bb - off_codes); ++j)
                    codes[code32_byte(type, r, j)] = type == DType::Q8_0 ? uint8_t(p[2 + j] ^ 0x80) : p[off_codes + j];
                if (b32_min(type))
                    std::memcpy(grp + scales32_offset(type, b) + 64 + 2 * r, p + 2, 2);
                if (!b32_fifth(type))
                    continue;
                uint32_t qh;
                std::memcpy(&qh, p + off_qh, 4);
                for (int c = 0; c < 4; ++c) { // the byte of codes c, 4 + c, ..., 28 + c
                    uint8_t bits = 0;
                    for (int j = c; j < qk; j += 4)
                        bits = uint8_t(bits | ((qh >> j) & 1) << fifth32_bit(j));
                    codes[fifth32_byte(r, c)] = bits;
                }
            }
        }
    }
}

// F16 and BF16 (2-byte values, copied as they are): value i of row r of group g to
// packed_half_at(n_in, g, i) + r. With AVX-512, two inputs of the group's sixteen rows at a time:
// one gather of 32-bit pairs and one permutation into input i's sixteen values and input
// i + 1's (value by value, TinyLlama F16 took 1.4-2.1 s longer to load than its plain copy).
__attribute__((target("avx512f,avx512bw"))) void pack_half_avx512(const uint8_t *src, int64_t n_in, uint16_t *dst,
                                                                 int64_t g0, int64_t g1)
{
    const int64_t row_bytes = 2 * n_in;
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(int32_t(row_bytes)));
    // Lane j of the result: the even halves (input i) of the sixteen pairs, then the odd ones.
    static constexpr uint16_t order[32] = {0, 2, 4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                           1, 3, 5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    const __m512i split = _mm512_loadu_si512(order);
    for (int64_t g = g0; g < g1; ++g) {
        const uint8_t *first = src + size_t(g * packed_group_rows) * size_t(row_bytes);
        int64_t i = 0;
        for (; i + 2 <= n_in; i += 2) {
            const __m512i pairs = _mm512_i32gather_epi32(rows, first + 2 * i, 1);
            const __m512i v = _mm512_permutexvar_epi16(split, pairs);
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + packed_half_at(n_in, g, i)), _mm512_castsi512_si256(v));
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + packed_half_at(n_in, g, i + 1)),
                                _mm512_extracti64x4_epi64(v, 1));
        }
        for (; i < n_in; ++i)
            for (int r = 0; r < packed_group_rows; ++r)
                std::memcpy(dst + packed_half_at(n_in, g, i) + r, first + size_t(r) * size_t(row_bytes) + 2 * i, 2);
    }
}

// Without AVX-512 (SSE2, every x86-64): eight inputs of eight rows at a time, one 8 x 8
// transpose of 16-bit values (three rounds of unpacks), twice per group.
void pack_half_sse2(const uint8_t *src, int64_t n_in, uint16_t *dst, int64_t g0, int64_t g1)
{
    const size_t row_bytes = size_t(2 * n_in);
    for (int64_t g = g0; g < g1; ++g) {
        const uint8_t *first = src + size_t(g * packed_group_rows) * row_bytes;
        int64_t i = 0;
        for (; i + 8 <= n_in; i += 8)
            for (int half = 0; half < 2; ++half) {
                __m128i r[8], t[8], u[8];
                for (int k = 0; k < 8; ++k)
                    r[k] = _mm_loadu_si128(
                        reinterpret_cast<const __m128i *>(first + size_t(8 * half + k) * row_bytes + 2 * size_t(i)));
                for (int k = 0; k < 4; ++k) { // pairs of rows, values 0-3 and 4-7
                    t[2 * k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
                    t[2 * k + 1] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
                }
                for (int k = 0; k < 2; ++k) // fours of rows: values (0, 1), (2, 3), (4, 5), (6, 7)
                    for (int q = 0; q < 2; ++q) {
                        u[4 * k + 2 * q] = _mm_unpacklo_epi32(t[4 * k + q], t[4 * k + 2 + q]);
                        u[4 * k + 2 * q + 1] = _mm_unpackhi_epi32(t[4 * k + q], t[4 * k + 2 + q]);
                    }
                for (int k = 0; k < 4; ++k) { // all eight rows: value 2 k, then 2 k + 1
                    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + packed_half_at(n_in, g, i + 2 * k) + 8 * half),
                                     _mm_unpacklo_epi64(u[k], u[4 + k]));
                    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + packed_half_at(n_in, g, i + 2 * k + 1) + 8 * half),
                                     _mm_unpackhi_epi64(u[k], u[4 + k]));
                }
            }
        for (; i < n_in; ++i)
            for (int r = 0; r < packed_group_rows; ++r)
                std::memcpy(dst + packed_half_at(n_in, g, i) + r, first + size_t(r) * row_bytes + 2 * i, 2);
    }
}

void pack_half(const uint8_t *src, int64_t n_in, uint16_t *dst, int64_t g0, int64_t g1)
{
    // Row offsets of the gather are 32-bit: 15 rows of 2 n_in bytes.
    if (kernel_table().level == VectorLevel::Avx512 && 15 * 2 * n_in < int64_t(INT32_MAX))
        pack_half_avx512(src, n_in, dst, g0, g1);
    else
        pack_half_sse2(src, n_in, dst, g0, g1);
}

} // namespace

void pack_rows(DType type, const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0, int64_t g1)
{
    if (type == DType::F16 || type == DType::BF16) {
        pack_half(src, n_in, reinterpret_cast<uint16_t *>(dst), g0, g1);
        return;
    }
    if (is_q4_k_like(type))
        pack_q4_k(type, src, n_in, dst, g0, g1);
    else if (is_block32(type))
        pack_block32(type, src, n_in, dst, g0, g1);
    else if (type == DType::Q3_K)
        pack_q3_k(src, n_in, dst, g0, g1);
    else if (type == DType::Q2_K)
        pack_q2_k(src, n_in, dst, g0, g1);
    else
        pack_q6_k(src, n_in, dst, g0, g1);
}

// The arithmetic of dequantize_q3_k, dequantize_q4_k, dequantize_q5_k and dequantize_q6_k
// (quant.cpp): y = (d * sc) * (q - 4), y = (d * sc) * q - (dmin * m) and y = (d * sc) * (q - 32).
void dequantize_packed_row_portable(DType type, const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    if (type == DType::F16 || type == DType::BF16) {
        const int64_t g = row / packed_group_rows, r = row % packed_group_rows;
        for (int64_t i = 0; i < n_in; ++i) {
            uint16_t h;
            std::memcpy(&h, packed + 2 * size_t(packed_half_at(n_in, g, i) + r), 2);
            out[i] = type == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        return;
    }
    // x = d * q (dequantize_q8_0), d * (q - 8) (dequantize_q4_0), (q - 16) * d (dequantize_q5_0; the
    // same product), q * d + m (dequantize_q4_1, dequantize_q5_1), d * value (dequantize_iq4_nl).
    if (is_block32(type)) {
        const int r = int(row % packed_group_rows);
        const uint8_t *grp = packed + size_t(row / packed_group_rows) * group_bytes(type, n_in);
        for (int64_t b = 0; b < n_in / qk; ++b) {
            const uint8_t *codes = grp + codes32_offset(type, b);
            uint16_t hm;
            const float d = scale32(type, grp, b, r);
            // The code of value j: Q8_0's signed byte, else the nibble and (Q5_0, Q5_1) its fifth bit.
            const auto code = [&](int j) {
                const uint8_t c = codes[code32_byte(type, r, j)];
                if (type == DType::Q8_0)
                    return int(int8_t(c ^ 0x80));
                const int fifth = b32_fifth(type) ? (codes[fifth32_byte(r, j)] >> fifth32_bit(j)) & 1 : 0;
                return (j < 16 ? c & 0x0f : c >> 4) | fifth << 4;
            };
            if (b32_min(type)) {
                std::memcpy(&hm, grp + scales32_offset(type, b) + 64 + 2 * r, 2);
                const float m = f16_to_f32(hm);
                for (int j = 0; j < qk; ++j)
                    out[b * qk + j] = float(code(j)) * d + m;
                continue;
            }
            if (b32_table(type)) { // x = d * value (dequantize_iq4_nl, dequantize_iq4_xs)
                for (int j = 0; j < qk; ++j)
                    out[b * qk + j] = d * float(iq4_nl_values[code(j)]);
                continue;
            }
            for (int j = 0; j < qk; ++j)
                out[b * qk + j] = d * float(code(j) - (type == DType::Q8_0 ? 0 : b32_offset(type)));
        }
        return;
    }
    if (is_q6_k_like(type)) {
        const int64_t nsb = n_in / qk_k;
        const int64_t g = row / packed_group_rows;
        const int r = int(row % packed_group_rows);
        const bool q3 = type == DType::Q3_K;
        for (int64_t sb = 0; sb < nsb; ++sb) {
            const uint8_t *b = packed + (size_t(g) * size_t(nsb) + size_t(sb)) * size_t(packed_k_block_bytes(type));
            uint16_t hd;
            std::memcpy(&hd, b + off6_d + 2 * r, 2);
            const float d = f16_to_f32(hd);
            if (type == DType::Q2_K) { // y = (d * sc) * q - (dmin * m) (dequantize_q2_k)
                uint16_t hm;
                std::memcpy(&hm, b + off2_dmin + 2 * r, 2);
                const float dmin = f16_to_f32(hm);
                for (int i = 0; i < 256; ++i) {
                    const float dl = d * float(b[off2_sc + 16 * (i / 16) + r]);
                    const float ml = dmin * float(b[off2_m + 16 * (i / 16) + r]);
                    out[sb * qk_k + i] = dl * float(q2_packed_code(b, r, i)) - ml;
                }
                continue;
            }
            for (int i = 0; i < 256; ++i) {
                const int q = q3 ? q3_packed_code(b, r, i) - 4 : q6_packed_code(b, r, i) - 32;
                out[sb * qk_k + i] = d * float(int8_t(b[off6_sc + 16 * (i / 16) + r])) * float(q);
            }
        }
        return;
    }
    const int64_t nsb = n_in / qk_k;
    const int64_t g = row / packed_group_rows;
    const int r = int(row % packed_group_rows);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = packed + (size_t(g) * size_t(nsb) + size_t(sb)) * size_t(packed_k_block_bytes(type));
        uint16_t hd, hm;
        std::memcpy(&hd, b + off_d + 2 * r, 2);
        std::memcpy(&hm, b + off_dmin + 2 * r, 2);
        const float d = f16_to_f32(hd), dmin = f16_to_f32(hm);
        float *y = out + sb * qk_k;
        // Q5_K's fifth bit of value l of sub-block j: bit j of the row's qh[l].
        auto fifth = [&](int j, int l) {
            return type == DType::Q5_K ? ((b[off5_qh + ((l / 4) * 16 + r) * 4 + l % 4] >> j) & 1) << 4 : 0;
        };
        for (int pair = 0; pair < 4; ++pair) {
            const float d1 = d * float(b[off_sc + 16 * (2 * pair) + r]);
            const float m1 = dmin * float(b[off_m + 16 * (2 * pair) + r]);
            const float d2 = d * float(b[off_sc + 16 * (2 * pair + 1) + r]);
            const float m2 = dmin * float(b[off_m + 16 * (2 * pair + 1) + r]);
            for (int l = 0; l < 32; ++l) {
                const uint8_t q = b[off_qs + ((pair * 8 + l / 4) * 16 + r) * 4 + l % 4];
                y[64 * pair + l] = d1 * float((q & 0x0f) | fifth(2 * pair, l)) - m1;
                y[64 * pair + 32 + l] = d2 * float((q >> 4) | fifth(2 * pair + 1, l)) - m2;
            }
        }
    }
}

namespace {

#define LS_PACKED_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// Values 16 h .. 16 h + 15 of sub-block j of a packed Q4_K or Q5_K super-block for one row,
// (d * sc) * q - dmin * m with d1 = d * sc and m1 = dmin * m broadcast: q holds the row's 32 code
// bytes of the sub-block's pair (low nibbles: sub-block 2 p, high: 2 p + 1), qh (Q5_K) its 32
// bytes of fifth bits (bit j of byte l: value l of sub-block j).
template <bool Q5>
__attribute__((always_inline)) LS_PACKED_AVX512 inline __m512 q4_k_like_values16(__m256i q, __m256i qh, int j, int h,
                                                                                 __m512 d1, __m512 m1)
{
    const __m128i low = _mm_set1_epi8(0x0f), one = _mm_set1_epi8(1);
    const __m128i v = h == 0 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
    __m128i nib = j % 2 == 0 ? _mm_and_si128(v, low) : _mm_and_si128(_mm_srli_epi16(v, 4), low);
    if constexpr (Q5) {
        const __m128i hb = h == 0 ? _mm256_castsi256_si128(qh) : _mm256_extracti128_si256(qh, 1);
        const __m128i fifth = _mm_and_si128(_mm_srl_epi16(hb, _mm_cvtsi32_si128(j)), one);
        nib = _mm_or_si128(nib, _mm_slli_epi16(fifth, 4));
    }
    const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(nib));
    return _mm512_sub_ps(_mm512_mul_ps(d1, qf), m1);
}

// The same values with vector operations (the same float operations per value): the row's 32
// bytes of a pair are gathered from its eight words, 64 bytes apart; for Q5_K also the 32 bytes
// of fifth bits (bit j of byte l: value l of sub-block j) once per super-block.
template <bool Q5>
LS_PACKED_AVX512 void dequantize_packed_q4_k_like_avx512(const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    const int64_t nsb = n_in / qk_k;
    const int64_t g = row / packed_group_rows;
    const int r = int(row % packed_group_rows);
    const int64_t block_bytes = Q5 ? packed_q5_k_block_bytes : packed_q4_k_block_bytes;
    const __m256i words = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = packed + (size_t(g) * size_t(nsb) + size_t(sb)) * size_t(block_bytes);
        uint16_t hd, hm;
        std::memcpy(&hd, b + off_d + 2 * r, 2);
        std::memcpy(&hm, b + off_dmin + 2 * r, 2);
        const float d = _cvtsh_ss(hd), dmin = _cvtsh_ss(hm);
        float *y = out + sb * qk_k;
        __m256i qh = _mm256_setzero_si256();
        if constexpr (Q5)
            qh = _mm256_i32gather_epi32(reinterpret_cast<const int *>(b + off5_qh + 4 * r), words, 1);
        for (int pair = 0; pair < 4; ++pair) {
            const __m256i q = _mm256_i32gather_epi32(
                reinterpret_cast<const int *>(b + off_qs + (pair * 8 * 16 + r) * 4), words, 1);
            for (int sub = 0; sub < 2; ++sub) {
                const int j = 2 * pair + sub;
                const __m512 d1 = _mm512_set1_ps(d * float(b[off_sc + 16 * j + r]));
                const __m512 m1 = _mm512_set1_ps(dmin * float(b[off_m + 16 * j + r]));
                for (int h = 0; h < 2; ++h)
                    _mm512_storeu_ps(y + 64 * pair + 32 * sub + 16 * h, q4_k_like_values16<Q5>(q, qh, j, h, d1, m1));
            }
        }
    }
}

// Q8_0: x = d * q (dequantize_q8_0), the row's 32 codes of a block gathered from its eight
// words, 64 bytes apart (stored with 128 added: back to signed by flipping the top bit).
LS_PACKED_AVX512 void dequantize_packed_q8_0_avx512(const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    const int r = int(row % packed_group_rows);
    const uint8_t *grp = packed + size_t(row / packed_group_rows) * group_bytes(DType::Q8_0, n_in);
    const __m256i words = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
    const __m256i flip = _mm256_set1_epi8(char(0x80));
    for (int64_t b = 0; b < n_in / qk; ++b) {
        uint16_t hd;
        std::memcpy(&hd, grp + scales32_offset(DType::Q8_0, b) + 2 * r, 2);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(hd));
        const __m256i q = _mm256_xor_si256(
            _mm256_i32gather_epi32(reinterpret_cast<const int *>(grp + codes32_offset(DType::Q8_0, b) + 4 * r), words, 1),
            flip);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
        _mm512_storeu_ps(out + b * qk, _mm512_mul_ps(d, lo));
        _mm512_storeu_ps(out + b * qk + 16, _mm512_mul_ps(d, hi));
    }
}

// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: the row's sixteen code bytes of a block gathered from its four
// words, 64 bytes apart (codes j and j + 16 in the low and high nibbles of byte j), the fifth
// bits (Q5_0, Q5_1: bit 2 w of byte c for code 4 w + c, bit 2 w + 1 for code 16 + 4 w + c)
// shifted in per word; then the portable version's float operations: d * (q - offset),
// q * d + m, or d * table[q].
LS_PACKED_AVX512 void dequantize_packed_b32_avx512(DType type, const uint8_t *packed, int64_t n_in, int64_t row,
                                                   float *out)
{
    const int r = int(row % packed_group_rows);
    const uint8_t *grp = packed + size_t(row / packed_group_rows) * group_bytes(type, n_in);
    const __m128i words = _mm_setr_epi32(0, 64, 128, 192);
    const __m128i nibble = _mm_set1_epi8(0x0f), one = _mm_set1_epi8(1);
    const __m128i shift_lo = _mm_setr_epi32(0, 2, 4, 6), shift_hi = _mm_setr_epi32(1, 3, 5, 7);
    const __m512i offset = _mm512_set1_epi32(b32_offset(type));
    __m512 table = _mm512_setzero_ps();
    if (b32_table(type)) {
        alignas(64) float t[16];
        for (int i = 0; i < 16; ++i)
            t[i] = float(iq4_nl_values[i]);
        table = _mm512_load_ps(t);
    }
    for (int64_t b = 0; b < n_in / qk; ++b) {
        const uint8_t *codes = grp + codes32_offset(type, b);
        const __m512 d = _mm512_set1_ps(scale32(type, grp, b, r));
        const __m128i q = _mm_i32gather_epi32(reinterpret_cast<const int *>(codes + 4 * r), words, 1);
        __m128i lo = _mm_and_si128(q, nibble), hi = _mm_and_si128(_mm_srli_epi16(q, 4), nibble);
        if (b32_fifth(type)) {
            int32_t f;
            std::memcpy(&f, codes + packed_q4_0_block_bytes + 4 * r, 4);
            const __m128i fb = _mm_set1_epi32(f);
            lo = _mm_or_si128(lo, _mm_slli_epi16(_mm_and_si128(_mm_srlv_epi32(fb, shift_lo), one), 4));
            hi = _mm_or_si128(hi, _mm_slli_epi16(_mm_and_si128(_mm_srlv_epi32(fb, shift_hi), one), 4));
        }
        float *y = out + b * qk;
        for (int h = 0; h < 2; ++h) {
            const __m512i c = _mm512_cvtepu8_epi32(h == 0 ? lo : hi);
            __m512 v;
            if (b32_table(type)) {
                v = _mm512_mul_ps(d, _mm512_permutexvar_ps(c, table));
            } else if (b32_min(type)) {
                uint16_t hm;
                std::memcpy(&hm, grp + scales32_offset(type, b) + 64 + 2 * r, 2);
                v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(c), d), _mm512_set1_ps(_cvtsh_ss(hm)));
            } else {
                v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(c, offset)));
            }
            _mm512_storeu_ps(y + 16 * h, v);
        }
    }
}

// The sixteen values of group grp of a Q6_K (bias 32) or Q3_K (bias 4) super-block from their
// codes: (d * sc) * (code - bias).
LS_PACKED_AVX512 inline void q6_k_group_avx512(__m128i codes, float d, const uint8_t *b, int r, int grp, float *y,
                                               int bias = 32)
{
    const __m512 ds = _mm512_set1_ps(d * float(int8_t(b[off6_sc + 16 * grp + r])));
    const __m512 qf = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(codes), _mm512_set1_epi32(bias)));
    _mm512_storeu_ps(y + 16 * grp, _mm512_mul_ps(ds, qf));
}

// Four words of codes per group (one group per 32-bit lane; word w: the codes of values 4 w ..
// 4 w + 3) interleaved into value order: codes[grp] holds the sixteen codes of group grp.
LS_PACKED_AVX512 inline void interleave_words(__m512i w0, __m512i w1, __m512i w2, __m512i w3, __m128i codes[16])
{
    const __m512i a = _mm512_unpacklo_epi32(w0, w1), c = _mm512_unpackhi_epi32(w0, w1);
    const __m512i e = _mm512_unpacklo_epi32(w2, w3), f = _mm512_unpackhi_epi32(w2, w3);
    // v[k], 128-bit lane L: group 4 L + k.
    const __m512i v[4] = {_mm512_unpacklo_epi64(a, e), _mm512_unpackhi_epi64(a, e), _mm512_unpacklo_epi64(c, f),
                          _mm512_unpackhi_epi64(c, f)};
    for (int k = 0; k < 4; ++k) {
        codes[k] = _mm512_extracti32x4_epi32(v[k], 0);
        codes[4 + k] = _mm512_extracti32x4_epi32(v[k], 1);
        codes[8 + k] = _mm512_extracti32x4_epi32(v[k], 2);
        codes[12 + k] = _mm512_extracti32x4_epi32(v[k], 3);
    }
}

// Q6_K: y = d * sc * (q - 32) (dequantize_q6_k: (d * sc) first, as the portable version). For
// each super-block the row's three words of each of the sixteen groups (low nibbles of values
// 0-7 and 8-15, the high bits) are gathered, one group per 32-bit lane; each 4-value word w of
// the codes is assembled in place, and the four words of a group interleaved into value order.
LS_PACKED_AVX512 void dequantize_packed_q6_k_avx512(const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    const int64_t nsb = n_in / qk_k;
    const int64_t g = row / packed_group_rows;
    const int r = int(row % packed_group_rows);
    const __m512i groups = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(192));
    const __m512i low = _mm512_set1_epi8(0x0f), top = _mm512_set1_epi8(0x30);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = packed + (size_t(g) * size_t(nsb) + size_t(sb)) * size_t(packed_q6_k_block_bytes);
        uint16_t hd;
        std::memcpy(&hd, b + off6_d + 2 * r, 2);
        const float d = _cvtsh_ss(hd);
        const uint8_t *q = b + off6_q + 4 * r;
        const __m512i lo01 = _mm512_i32gather_epi32(groups, q, 1);
        const __m512i lo23 = _mm512_i32gather_epi32(groups, q + 64, 1);
        const __m512i hi = _mm512_i32gather_epi32(groups, q + 128, 1);
        const __m512i w0 = _mm512_or_si512(_mm512_and_si512(lo01, low), _mm512_and_si512(_mm512_slli_epi32(hi, 4), top));
        const __m512i w1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(lo01, 4), low),
                                           _mm512_and_si512(_mm512_slli_epi32(hi, 2), top));
        const __m512i w2 = _mm512_or_si512(_mm512_and_si512(lo23, low), _mm512_and_si512(hi, top));
        const __m512i w3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(lo23, 4), low),
                                           _mm512_and_si512(_mm512_srli_epi32(hi, 2), top));
        __m128i codes[16];
        interleave_words(w0, w1, w2, w3, codes);
        for (int grp = 0; grp < 16; ++grp)
            q6_k_group_avx512(codes[grp], d, b, r, grp, out + sb * qk_k);
    }
}

// Q3_K: y = (d * sc) * (code - 4) (dequantize_q3_k, as the portable version). Per super-block
// the row's words of the sixteen groups are gathered, one group per 32-bit lane: the low two
// bits of each code (word w at bits 2 w of each byte) and the third bits (bit 4 (g % 2) + w,
// shared by a pair of groups); each word's codes are assembled in place and interleaved into
// value order as Q6_K's.
LS_PACKED_AVX512 void dequantize_packed_q3_k_avx512(const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    const int64_t nsb = n_in / qk_k;
    const int64_t g = row / packed_group_rows;
    const int r = int(row % packed_group_rows);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i odd = _mm512_and_si512(lane, _mm512_set1_epi32(1));
    const __m512i pair = _mm512_mullo_epi32(_mm512_srli_epi32(lane, 1), _mm512_set1_epi32(192));
    const __m512i low_at = _mm512_add_epi32(pair, _mm512_slli_epi32(odd, 6)); // + 64 (g % 2)
    const __m512i high_at = _mm512_add_epi32(pair, _mm512_set1_epi32(128));
    const __m512i high_shift = _mm512_slli_epi32(odd, 2); // 4 (g % 2)
    const __m512i two = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = packed + (size_t(g) * size_t(nsb) + size_t(sb)) * size_t(packed_q3_k_block_bytes);
        uint16_t hd;
        std::memcpy(&hd, b + off6_d + 2 * r, 2);
        const float d = _cvtsh_ss(hd);
        const uint8_t *q = b + off3_q + 4 * r;
        const __m512i lo = _mm512_i32gather_epi32(low_at, q, 1);
        const __m512i hi = _mm512_srlv_epi32(_mm512_i32gather_epi32(high_at, q, 1), high_shift);
        __m512i w[4];
        for (int k = 0; k < 4; ++k)
            w[k] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(lo, 2 * k), two),
                                   _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hi, k), one), 2));
        __m128i codes[16];
        interleave_words(w[0], w[1], w[2], w[3], codes);
        for (int grp = 0; grp < 16; ++grp)
            q6_k_group_avx512(codes[grp], d, b, r, grp, out + sb * qk_k, 4);
    }
}

// The sixteen values of group grp of a Q2_K super-block from their codes: (d * sc) * code -
// (dmin * m), two roundings as dequantize_q2_k.
LS_PACKED_AVX512 inline void q2_k_group_avx512(__m128i codes, float d, float dmin, const uint8_t *b, int r, int grp,
                                               float *y)
{
    const __m512 dl = _mm512_set1_ps(d * float(b[off2_sc + 16 * grp + r]));
    const __m512 ml = _mm512_set1_ps(dmin * float(b[off2_m + 16 * grp + r]));
    const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes));
    _mm512_storeu_ps(y + 16 * grp, _mm512_sub_ps(_mm512_mul_ps(dl, qf), ml));
}

// Q2_K: the row's word of each group gathered (one group per 32-bit lane, word w of the codes
// at bits 2 w of each byte), interleaved into value order as Q6_K's.
LS_PACKED_AVX512 void dequantize_packed_q2_k_avx512(const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    const int64_t nsb = n_in / qk_k;
    const int64_t g = row / packed_group_rows;
    const int r = int(row % packed_group_rows);
    const __m512i groups = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(64));
    const __m512i two = _mm512_set1_epi8(3);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = packed + (size_t(g) * size_t(nsb) + size_t(sb)) * size_t(packed_q2_k_block_bytes);
        uint16_t hd, hm;
        std::memcpy(&hd, b + off_d + 2 * r, 2);
        std::memcpy(&hm, b + off2_dmin + 2 * r, 2);
        const float d = _cvtsh_ss(hd), dmin = _cvtsh_ss(hm);
        const __m512i q = _mm512_i32gather_epi32(groups, b + off2_q + 4 * r, 1);
        __m128i codes[16];
        interleave_words(_mm512_and_si512(q, two), _mm512_and_si512(_mm512_srli_epi32(q, 2), two),
                         _mm512_and_si512(_mm512_srli_epi32(q, 4), two), _mm512_and_si512(_mm512_srli_epi32(q, 6), two),
                         codes);
        for (int grp = 0; grp < 16; ++grp)
            q2_k_group_avx512(codes[grp], d, dmin, b, r, grp, out + sb * qk_k);
    }
}

} // namespace

VectorLevel dequantize_packed_level(DType type)
{
    return (is_q4_k_like(type) || is_q6_k_like(type) || is_block32(type)) &&
                   kernel_table().level == VectorLevel::Avx512
               ? VectorLevel::Avx512
               : VectorLevel::Portable;
}

namespace {

#define LS_PACKED_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

// Q8_0: a pair of blocks at a time. The sixteen words of the pair's codes (eight a block; word
// w holds the four codes 4 w .. 4 w + 3 of every row, row r in 32-bit lane r) transposed, so
// that register r holds row r's 32 codes of each block; then per row and block the
// operations of dequantize_packed_q8_0_avx512 (d * float(q)) and the rounding of the AMX
// panels (vcvtne2ps2bf16).
LS_PACKED_AVX512_BF16 void widen_group_q8_0(const uint8_t *grp, int64_t n_in, uint16_t *out, size_t block_stride)
{
    const int64_t nb = n_in / qk;
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    for (int64_t b = 0; b < nb; b += 2) {
        const bool pair = b + 1 < nb;
        alignas(64) float d[2][16];
        const __m512i hd = _mm512_loadu_si512(grp + scales32_offset(DType::Q8_0, b));
        _mm512_store_ps(d[0], _mm512_cvtph_ps(_mm512_castsi512_si256(hd)));
        _mm512_store_ps(d[1], _mm512_cvtph_ps(_mm512_extracti64x4_epi64(hd, 1)));
        __m512i w[16];
        for (int k = 0; k < 2; ++k) {
            const uint8_t *codes = grp + codes32_offset(DType::Q8_0, b + (pair ? k : 0));
            for (int i = 0; i < 8; ++i)
                w[8 * k + i] = _mm512_xor_si512(_mm512_loadu_si512(codes + 64 * i), flip);
        }
        transpose16(w);
        for (int k = 0; k < (pair ? 2 : 1); ++k) {
            uint16_t *dst = out + size_t(b + k) * block_stride;
            for (int r = 0; r < 16; ++r) {
                const __m256i q = k == 0 ? _mm512_castsi512_si256(w[r]) : _mm512_extracti64x4_epi64(w[r], 1);
                const __m512 dr = _mm512_set1_ps(d[k][r]);
                const __m512 lo = _mm512_mul_ps(dr, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))));
                const __m512 hi = _mm512_mul_ps(dr, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))));
                _mm512_storeu_si512(dst + 32 * r, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
            }
        }
    }
}

// Q4_K and Q5_K: per super-block, two pairs of sub-blocks at a time (the sixteen code words of
// both pairs transposed: register r holds row r's 32 bytes of each pair, the low nibbles one
// sub-block, the high nibbles the next; Q5_K's fifth bits transposed once per super-block),
// then per row and sub-block the operations of dequantize_packed_q4_k_like_avx512:
// (d * sc) * q - dmin * m, rounded as the AMX panels round.
template <bool Q5>
LS_PACKED_AVX512_BF16 void widen_group_q4_k_like(const uint8_t *grp, int64_t n_in, uint16_t *out, size_t block_stride)
{
    const int64_t nsb = n_in / qk_k, block_bytes = Q5 ? packed_q5_k_block_bytes : packed_q4_k_block_bytes;
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = grp + size_t(sb) * size_t(block_bytes);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off_d)));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off_dmin)));
        // Row r's d * sc and dmin * m of sub-block j, at [j][r].
        alignas(64) float ds[8][16], dm[8][16];
        for (int j = 0; j < 8; ++j) {
            const __m512 sc = _mm512_cvtepi32_ps(
                _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_sc + 16 * j))));
            const __m512 m = _mm512_cvtepi32_ps(
                _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_m + 16 * j))));
            _mm512_store_ps(ds[j], _mm512_mul_ps(d, sc));
            _mm512_store_ps(dm[j], _mm512_mul_ps(dmin, m));
        }
        __m512i qh[16];
        if constexpr (Q5) {
            for (int i = 0; i < 8; ++i) {
                qh[i] = _mm512_loadu_si512(b + off5_qh + 64 * i);
                qh[8 + i] = _mm512_setzero_si512();
            }
            transpose16(qh);
        }
        for (int pp = 0; pp < 4; pp += 2) {
            __m512i w[16];
            for (int i = 0; i < 16; ++i)
                w[i] = _mm512_loadu_si512(b + off_qs + size_t(pp) * 512 + 64 * size_t(i));
            transpose16(w);
            for (int k = 0; k < 2; ++k) {
                const int pair = pp + k;
                for (int r = 0; r < 16; ++r) {
                    const __m256i q = k == 0 ? _mm512_castsi512_si256(w[r]) : _mm512_extracti64x4_epi64(w[r], 1);
                    __m256i h5 = _mm256_setzero_si256();
                    if constexpr (Q5)
                        h5 = _mm512_castsi512_si256(qh[r]);
                    for (int sub = 0; sub < 2; ++sub) {
                        const int j = 2 * pair + sub;
                        const __m512 d1 = _mm512_set1_ps(ds[j][r]), m1 = _mm512_set1_ps(dm[j][r]);
                        __m512 x[2];
                        for (int h = 0; h < 2; ++h)
                            x[h] = q4_k_like_values16<Q5>(q, h5, j, h, d1, m1);
                        _mm512_storeu_si512(out + size_t(sb * 8 + j) * block_stride + 32 * size_t(r),
                                            __m512i(_mm512_cvtne2ps_pbh(x[1], x[0])));
                    }
                }
            }
        }
    }
}

} // namespace

bool widen_packed_group_bf16(DType type, const uint8_t *packed, int64_t n_in, int64_t g, uint16_t *out,
                             size_t block_stride)
{
    if (kernel_table().level != VectorLevel::Avx512 || !cpu_features().avx512_bf16)
        return false;
    const uint8_t *grp = packed + size_t(g) * group_bytes(type, n_in);
    if (type == DType::Q8_0)
        widen_group_q8_0(grp, n_in, out, block_stride);
    else if (type == DType::Q4_K)
        widen_group_q4_k_like<false>(grp, n_in, out, block_stride);
    else if (type == DType::Q5_K)
        widen_group_q4_k_like<true>(grp, n_in, out, block_stride);
    else
        return false;
    return true;
}

void dequantize_packed_row(DType type, const uint8_t *packed, int64_t n_in, int64_t row, float *out)
{
    if (dequantize_packed_level(type) == VectorLevel::Avx512 && type == DType::Q8_0)
        dequantize_packed_q8_0_avx512(packed, n_in, row, out);
    else if (dequantize_packed_level(type) == VectorLevel::Avx512 && type == DType::Q6_K)
        dequantize_packed_q6_k_avx512(packed, n_in, row, out);
    else if (dequantize_packed_level(type) == VectorLevel::Avx512 && type == DType::Q3_K)
        dequantize_packed_q3_k_avx512(packed, n_in, row, out);
    else if (dequantize_packed_level(type) == VectorLevel::Avx512 && type == DType::Q2_K)
        dequantize_packed_q2_k_avx512(packed, n_in, row, out);
    else if (dequantize_packed_level(type) == VectorLevel::Avx512 && is_block32(type))
        dequantize_packed_b32_avx512(type, packed, n_in, row, out);
    else if (dequantize_packed_level(type) == VectorLevel::Avx512 && type == DType::Q5_K)
        dequantize_packed_q4_k_like_avx512<true>(packed, n_in, row, out);
    else if (dequantize_packed_level(type) == VectorLevel::Avx512)
        dequantize_packed_q4_k_like_avx512<false>(packed, n_in, row, out);
    else
        dequantize_packed_row_portable(type, packed, n_in, row, out);
}

namespace {

// Decode streams each matrix once from memory; one group's bytes are a single stream, which the
// hardware prefetchers alone follow too closely: one core of an AMD EPYC without AVX-512 read
// 13 GB/s in a one-token Q8_0 product where the bandwidth probe reads 17, and on the AMX Xeon
// (docs/performance.md) TinyLlama Q8_0 decode ran at 22 tokens/s on two threads without the
// requests, 27 with them. So the one-token kernels ask for the lines a fixed distance further
// on, one request per 64-byte line, where kernel_table().decode_prefetch holds: the AVX2 ones
// 4096 bytes on into L1 at the start of each block (prefetch_ahead), the VNNI ones 1024 bytes
// (512 on AMD processors, prefetch_part) on into L1 and 4096 on into L2, spread over each
// block's loop (prefetch_part). A request
// past the end of the matrix is harmless: prefetches do not fault. The distances are the best
// measured, in whole decode steps alternating: 4096 for the AVX2 kernels (the EPYC); for the
// VNNI ones (the Xeon, two threads, tokens/s, all of a block's requests at its start): Q8_0
// 26.0-26.4 at 256 bytes into L1 alone, 26.9-27.0 at 1024, 25.0-25.2 at 4096, 22 without; with
// 4096 into L2 as well 27.3-28.6, with 512 + 2048 28.1-29.2, 1024 + 6144 25.3-25.6; Q4_K_M
// 43.1-43.5 -> 44.9-45.9, Q4_0 48.3-48.5 -> 51.5-51.6, Q6_K 29.6 -> 32.3-32.8, where 1024 +
// 3072 read 31.5-31.6 and 512 + 2048 31.1-31.3; 2048 into L2 alone 27.3-27.5 for Q8_0; NTA
// hints 15.7-15.8. Spreading them then gave, alternating with the build that asked at each
// block's start: Q8_0 27.1-27.5 -> 28.0-28.1, Q4_K_M 39.3 -> 44.4-45.8, Q5_K_M 34.1 -> 38.5,
// Q6_K 29.1-29.6 -> 34.3-34.9, Q4_0 49.2-50.6 -> 51.3-51.4, Q5_1 36.4-36.5 -> 39.6-40.4, Q2_K
// 53.3-53.4 -> 63.4-63.5, Q3_K_M 46.2 -> 54.4, IQ4_XS 44.8 -> 47.1).
constexpr size_t decode_prefetch_distance_avx2 = 4096;
__attribute__((always_inline)) inline void prefetch_ahead(const uint8_t *p, size_t bytes, size_t distance)
{
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char *>(p + distance + o), _MM_HINT_T0);
}

// The VNNI kernels' requests for a block of `bytes` (a multiple of 64) at p, spread over the
// `parts` steps of the block's loop: step `part` asks for its share of the block's lines, each
// `near` bytes on into L1 (kernel_table().decode_prefetch_near) and `far` bytes
// (decode_prefetch_far, 4096 unless the options set it) on into L2; where the two are equal,
// one request into L1 alone. On the AMD EPYC of family 26 (Zen 5, AVX-512 VNNI) 512 bytes into L1 read
// faster than the 1024 measured best on the Xeon: TinyLlama decode, two threads, three rounds
// alternating the two distances in one build, tokens/s: Q8_0 59.4, 60.3, 59.7 at 1024 against
// 62.6, 67.2, 66.9 at 512; Q6_K 68.6, 73.1, 72.1 against 73.5, 80.8, 77.1.
// All of a block's requests at its start
// instead read 8% slower (TinyLlama Q8_0 decode, two threads, the same binary alternating, 26.6-26.7
// tokens/s against 28.6-29.0; with the requests into L1 alone spread, 26.6-27.4).
// On the AMD EPYC of family 25 (Zen 4) the requests 512 bytes on into L1 and 4096 into L2 held
// decode below the hardware prefetchers alone, and 4096 into L1 alone reads the most of what was
// tried: a decode step's products for 22 TinyLlama layers (bench-decode-matvec layers, the
// settings in turn in one process), GB/s, one thread, 4096 alone / none / 512 + 4096 / 4096 +
// 8192: Q8_0 28.5 / 28.9 / 20.0 / 22.3, Q4_K 26.0 / 26.8 / 21.5 / 23.2, Q6_K 26.5 / 27.5 /
// 19.4 / 22.6, Q4_0 27.2 / 29.4 / 20.5 / 25.6, Q5_K 22.2 / 10.7 (its stream of fifth bits
// beside the codes is lost without them) / 23.0 / 21.9; two threads, Q8_0 54.1 / 53.7 / 38.6.
struct PrefetchDistance {
    size_t near = 0, far = 0;
    PrefetchDistance() = default;
    explicit PrefetchDistance(const CpuKernelTable &t)
        : near(size_t(t.decode_prefetch_near)), far(size_t(t.decode_prefetch_far)) {}
};

__attribute__((always_inline)) inline void prefetch_part(const uint8_t *p, size_t bytes, size_t part, size_t parts,
                                                         PrefetchDistance d)
{
    const size_t lines = bytes / 64;
    for (size_t l = lines * part / parts; l < lines * (part + 1) / parts; ++l) {
        _mm_prefetch(reinterpret_cast<const char *>(p + d.near + 64 * l), _MM_HINT_T0);
        if (d.far != d.near)
            _mm_prefetch(reinterpret_cast<const char *>(p + d.far + 64 * l), _MM_HINT_T1);
    }
}

#define LS_PACKED_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

inline int32_t load_i32(const int8_t *p)
{
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// The four bytes at p in every lane, in a register, for a word several vpdpbusd take (groups
// side by side): from a register they issue faster than with the broadcast embedded (see
// below). The asm keeps GCC from folding the load back into each instruction.
LS_PACKED_VNNI inline __m512i bcast_word(const int8_t *p)
{
#if defined(__GNUC__) && !defined(__clang__)
    __m512i r;
    asm("vpbroadcastd %1, %0" : "=v"(r) : "m"(*reinterpret_cast<const int32_t *>(p)));
    return r;
#else
    return _mm512_set1_epi32(load_i32(p));
#endif
}

// acc + the vpdpbusd of w and the four bytes at p in every lane. GCC (12) does not fold the
// broadcast into the instruction as clang does; a separate vpbroadcastd from memory costs a
// vector slot beside each vpdpbusd on this AMD EPYC (one core, a loop of eight independent
// vpdpbusd: 0.92 ns each with the separate broadcast, 0.69 embedded, 0.60 from registers).
LS_PACKED_VNNI inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const int8_t *p)
{
#if defined(__GNUC__) && !defined(__clang__)
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t *>(p)));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(load_i32(p)));
#endif
}

// The activations of NT tokens as the VNNI kernels read them, from each token's rows of
// QuantizedActs (any NT tokens; one pointer per token and kind of value) or from a tile of
// PackedActs (TileActs: four tokens, one pointer per kind of value). Both give the same values.
template <int NT> struct RowActs {
    const int8_t *q[NT];
    const float *d[NT], *s[NT];
    const int32_t *s16[NT];

    RowActs(const QuantizedActs &a, int64_t t0)
    {
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            q[t] = a.q_row(t0 + t);
            d[t] = a.db_row(t0 + t);
            s[t] = a.ds_row(t0 + t);
            s16[t] = a.s16_row(t0 + t);
        }
    }
    // Where word w (values 4 w .. 4 w + 3) of block b of token t is; the block's d and d *
    // sum(q); the sum of the codes of values 16 j .. 16 j + 15 and of block b.
    const int8_t *word(int t, int64_t b, int w) const { return q[t] + 32 * b + 4 * w; }
    float db(int t, int64_t b) const { return d[t][b]; }
    float ds(int t, int64_t b) const { return s[t][b]; }
    // Q6_K's bias term -32 sum(q) for values 16 j .. 16 j + 15; Q8_0's (-128) or Q4_0's (-8)
    // for block b.
    int32_t bias16(int t, int64_t j) const { return -32 * s16[t][j]; }
    // The sum of the codes of values 16 j .. 16 j + 15 (Q2_K's minimums).
    int32_t sum16(int t, int64_t j) const { return s16[t][j]; }
    template <DType T> int32_t bias32(int t, int64_t b) const
    {
        return -b32_offset(T) * (s16[t][2 * b] + s16[t][2 * b + 1]);
    }
};

struct TileActs {
    const int8_t *q;
    const float *d, *s;
    const int32_t *b16, *b32;

    TileActs(const PackedActs &a, int64_t tile)
    {
        constexpr int nt = packed_act_tile;
        q = a.q.data() + tile * a.n * nt;
        d = a.db.data() + tile * (a.n / qk) * nt;
        s = a.ds.data() + tile * (a.n / qk) * nt;
        b16 = a.b16.data() + tile * (a.n / 16) * nt;
        b32 = a.b32.data() + tile * (a.n / qk) * nt;
    }
    const int8_t *word(int t, int64_t b, int w) const { return q + packed_act_tile * (32 * b + 4 * w) + 4 * t; }
    float db(int t, int64_t b) const { return d[packed_act_tile * b + t]; }
    float ds(int t, int64_t b) const { return s[packed_act_tile * b + t]; }
    // Stored ready, so that a kernel broadcasts them straight from memory.
    const int32_t &bias16(int t, int64_t j) const { return b16[packed_act_tile * j + t]; }
    int32_t sum16(int t, int64_t j) const { return -(b16[packed_act_tile * j + t] / 32); } // exact
    template <DType T> int32_t bias32(int t, int64_t b) const
    {
        if constexpr (T == DType::Q8_0)
            return b32[packed_act_tile * b + t];
        else if constexpr (b32_offset(T) == 0)
            return 0;
        else // -8 or -16 sum(q): exact
            return b32[packed_act_tile * b + t] / (128 / b32_offset(T));
    }
};

// Two tiles of PackedActs as eight tokens (the K types' prefill kernels: a group's codes are
// unpacked once for eight tokens). The same values as each tile's TileActs.
struct TileActs8 {
    TileActs lo, hi;

    TileActs8(const PackedActs &a, int64_t tile) : lo(a, tile), hi(a, tile + 1) {}
    const int8_t *word(int t, int64_t b, int w) const { return t < 4 ? lo.word(t, b, w) : hi.word(t - 4, b, w); }
    float db(int t, int64_t b) const { return t < 4 ? lo.db(t, b) : hi.db(t - 4, b); }
    float ds(int t, int64_t b) const { return t < 4 ? lo.ds(t, b) : hi.ds(t - 4, b); }
    const int32_t &bias16(int t, int64_t j) const { return t < 4 ? lo.bias16(t, j) : hi.bias16(t - 4, j); }
    int32_t sum16(int t, int64_t j) const { return t < 4 ? lo.sum16(t, j) : hi.sum16(t - 4, j); }
};

// Bit `bit` of every byte of qh moved to bit 4 (the fifth bit of a Q5_K or Q5_1 code), the other
// bits 0: one 16-bit shift by at most 4 keeps each byte's bit within its byte.
LS_PACKED_VNNI inline __m512i fifth_bit(__m512i qh, int bit)
{
    const __m512i at4 = bit < 4 ? _mm512_slli_epi16(qh, 4 - bit) : bit > 4 ? _mm512_srli_epi16(qh, bit - 4) : qh;
    return _mm512_and_si512(at4, _mm512_set1_epi8(0x10));
}

// One group of 16 rows of Q4_K or Q5_K against NT tokens (prefill: eight, two tiles). Per
// super-block and token: for each pair of sub-blocks, exact int32 sums of weight code times
// activation code per row (lanes = rows), to float (exact: below 2^24), times the sub-block's
// scale times d (one product per sub-block and row, shared by the tokens), times the activation
// block's scale, added to the token's sum; then per sub-block the minimum's m dmin times (d_x
// sum q)_j subtracted.
// The sixteen rows' 6-bit scales of sub-block j of a packed Q4_K or Q5_K super-block, as floats.
LS_PACKED_VNNI inline __m512 sub_block_scale(const uint8_t *b, int j)
{
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_sc + 16 * j))));
}

// The exact int32 sums of pair `pair` of super-block sb of a Q4_K or Q5_K group (sub-blocks
// 2 pair in ie, 2 pair + 1 in io) for the NT tokens: each word loaded once for both halves.
template <int NT, DType T, class Acts>
__attribute__((always_inline)) LS_PACKED_VNNI inline void q4_k_pair_sums(const uint8_t *b, int64_t sb, int pair,
                                                                         const Acts &x, __m512i (&ie)[NT],
                                                                         __m512i (&io)[NT], bool prefetch,
                                                                         PrefetchDistance near)
{
    const __m512i low = _mm512_set1_epi8(0x0F);
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
        ie[t] = _mm512_setzero_si512();
        io[t] = _mm512_setzero_si512();
    }
    #pragma GCC unroll 8
    for (int w = 0; w < 8; ++w) {
        if (prefetch)
            prefetch_part(b, size_t(packed_k_block_bytes(T)), size_t(pair * 8 + w), 32, near);
        const __m512i v = _mm512_loadu_si512(b + off_qs + (pair * 8 + w) * 64);
        __m512i lo = _mm512_and_si512(v, low);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        if constexpr (T == DType::Q5_K) {
            const __m512i qh = _mm512_loadu_si512(b + off5_qh + w * 64);
            lo = _mm512_or_si512(lo, fifth_bit(qh, 2 * pair));
            hi = _mm512_or_si512(hi, fifth_bit(qh, 2 * pair + 1));
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            ie[t] = dpbusd_bcast(ie[t], lo, x.word(t, sb * 8 + 2 * pair, w));
            io[t] = dpbusd_bcast(io[t], hi, x.word(t, sb * 8 + 2 * pair + 1, w));
        }
    }
}

// The minimums of super-block sb of a Q4_K or Q5_K group subtracted from the NT tokens' sums:
// per sub-block m dmin (one product per row, shared) times the activations' d_x sum(q).
template <int NT, class Acts>
__attribute__((always_inline)) LS_PACKED_VNNI inline void q4_k_minimums(const uint8_t *b, int64_t sb, const Acts &x,
                                                                        __m512 (&acc)[NT])
{
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off_dmin)));
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
        const __m512 mjd = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_m + 16 * j)))),
            dmin);
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t)
            acc[t] = _mm512_fnmadd_ps(mjd, _mm512_set1_ps(x.ds(t, sb * 8 + j)), acc[t]);
    }
}

// Pair `pair` of super-block sb of a Q4_K or Q5_K group (sub-blocks 2 pair, 2 pair + 1) added
// to the NT tokens' sums (packed_q4_k_vnni).
template <int NT, DType T, class Acts>
__attribute__((always_inline)) LS_PACKED_VNNI inline void q4_k_pair(const uint8_t *b, int64_t sb, int pair, const Acts &x,
                                                                    __m512 d, __m512 (&acc)[NT], bool prefetch,
                                                                    PrefetchDistance near)
{
    __m512i ie[NT], io[NT];
    q4_k_pair_sums<NT, T>(b, sb, pair, x, ie, io, prefetch, near);
    const __m512 sed = _mm512_mul_ps(sub_block_scale(b, 2 * pair), d);
    const __m512 sod = _mm512_mul_ps(sub_block_scale(b, 2 * pair + 1), d);
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
        const int64_t blk = sb * 8 + 2 * pair;
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ie[t]), sed), _mm512_set1_ps(x.db(t, blk)), acc[t]);
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(io[t]), sod), _mm512_set1_ps(x.db(t, blk + 1)), acc[t]);
    }
}

template <int NT, DType T, class Acts>
LS_PACKED_VNNI void packed_q4_k_vnni(const uint8_t *group, int64_t n_in, const Acts &x, float *out, int64_t ldo)
{
    const bool prefetch = NT == 1 && kernel_table().decode_prefetch; // decode
    const PrefetchDistance near(kernel_table());
    const int64_t nsb = n_in / qk_k;
    __m512 acc[NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
        acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = group + size_t(sb) * packed_k_block_bytes(T);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off_d)));
        if constexpr (T == DType::Q4_K && NT > 4) {
            // Two pairs per pass: all four unrolled, eight tokens ran at a quarter of the speed
            // (one core of an AMD EPYC family 26, 2048 x 5632 by 64 tokens: 175 against 690
            // GOP/s). Q5_K keeps the four unrolled, its fifth bits' shifts by constants.
            #pragma GCC unroll 2
            for (int pair = 0; pair < 4; ++pair)
                q4_k_pair<NT, T>(b, sb, pair, x, d, acc, prefetch, near);
        } else {
            #pragma GCC unroll 4
            for (int pair = 0; pair < 4; ++pair)
                q4_k_pair<NT, T>(b, sb, pair, x, d, acc, prefetch, near);
        }
        q4_k_minimums<NT>(b, sb, x, acc);
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
        _mm512_storeu_ps(out + t * ldo, acc[t]);
}

// The same product against activations with one scale per 256 values (QuantizedActs::span
// act_span_super: every block of a super-block has the span's d_x). Per super-block and token,
// each sub-block's exact int32 sum (below 2^24: exact as a float) times its 6-bit scale is added
// to a running float sum (a conversion and a multiply-add), which is multiplied by d and d_x once
// at the super-block's end; the minimums as above (d_x sum(q) per sub-block). Per sub-block and
// token that is two operations beside the eight vpdpbusd where the kernel above takes three (the
// product by the block's d_x as well), all on the pipes vpdpbusd uses. (The scales applied to the
// integer sums with vpmulld and vpaddd instead measured slower: one core of an AMD EPYC family
// 25, 2048 x 5632 by 64 tokens, 309-315 GOP/s against 325-330.)
template <int NT, DType T, class Acts>
LS_PACKED_VNNI void packed_q4_k_span_vnni(const uint8_t *group, int64_t n_in, const Acts &x, float *out, int64_t ldo)
{
    const bool prefetch = NT == 1 && kernel_table().decode_prefetch; // decode
    const PrefetchDistance near(kernel_table());
    const int64_t nsb = n_in / qk_k;
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
        acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = group + size_t(sb) * packed_k_block_bytes(T);
        __m512 af[NT];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t)
            af[t] = _mm512_setzero_ps();
        if constexpr (NT <= 4) {
            // Both halves of each word at once, as packed_q4_k_vnni: each word loaded and
            // unpacked once, two chains of vpdpbusd per token.
            #pragma GCC unroll 4
            for (int pair = 0; pair < 4; ++pair) {
                __m512i ie[NT], io[NT];
                q4_k_pair_sums<NT, T>(b, sb, pair, x, ie, io, prefetch, near);
                const __m512 se = sub_block_scale(b, 2 * pair), so = sub_block_scale(b, 2 * pair + 1);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t)
                    af[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(io[t]), so,
                                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(ie[t]), se, af[t]));
            }
        } else {
            // A sub-block at a time (each word loaded for both of its halves): eight tokens'
            // sums, running sums and totals fill 24 of the 32 registers.
            #pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const int pair = j / 2;
                __m512i is[NT];
                #pragma GCC unroll 8
                for (int t = 0; t < NT; ++t)
                    is[t] = _mm512_setzero_si512();
                #pragma GCC unroll 8
                for (int w = 0; w < 8; ++w) {
                    const __m512i v = _mm512_loadu_si512(b + off_qs + (pair * 8 + w) * 64);
                    __m512i c = j % 2 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), low) : _mm512_and_si512(v, low);
                    if constexpr (T == DType::Q5_K)
                        c = _mm512_or_si512(c, fifth_bit(_mm512_loadu_si512(b + off5_qh + w * 64), j));
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t)
                        is[t] = dpbusd_bcast(is[t], c, x.word(t, sb * 8 + j, w));
                }
                const __m512 sc = sub_block_scale(b, j);
                #pragma GCC unroll 8
                for (int t = 0; t < NT; ++t)
                    af[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), sc, af[t]);
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off_d)));
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(af[t], d), _mm512_set1_ps(x.db(t, sb * 8)), acc[t]);
        q4_k_minimums<NT>(b, sb, x, acc);
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
        _mm512_storeu_ps(out + t * ldo, acc[t]);
}

// Bit `bit` of every byte of v moved to bit 2, the other bits 0 (Q3_K's third bit; one 16-bit
// shift by at most 5 keeps each byte's bit within its byte, as fifth_bit).
LS_PACKED_VNNI inline __m512i third_bit(__m512i v, int bit)
{
    const __m512i at2 = bit < 2 ? _mm512_slli_epi16(v, 2 - bit) : bit > 2 ? _mm512_srli_epi16(v, bit - 2) : v;
    return _mm512_and_si512(at2, _mm512_set1_epi8(0x04));
}

// The four words' codes of group 2k + e of a packed Q6_K or Q3_K block, as unsigned bytes whose
// value minus 32 is the signed code (Q3_K: code - 4 + 32, so both take the same bias term).
template <DType T> LS_PACKED_VNNI inline void q6_k_like_codes(const uint8_t *b, int k, int e, __m512i u[4])
{
    if constexpr (T == DType::Q2_K) { // the plain 2-bit codes, no bias
        const __m512i lo = _mm512_loadu_si512(b + off2_q + 64 * (2 * k + e)), m3 = _mm512_set1_epi8(0x03);
        #pragma GCC unroll 4
        for (int w = 0; w < 4; ++w)
            u[w] = _mm512_and_si512(w == 0 ? lo : _mm512_srli_epi16(lo, 2 * w), m3);
    } else if constexpr (T == DType::Q3_K) {
        const uint8_t *pair = b + off3_q + 192 * k;
        const __m512i lo = _mm512_loadu_si512(pair + 64 * e), h = _mm512_loadu_si512(pair + 128);
        const __m512i m3 = _mm512_set1_epi8(0x03), offset = _mm512_set1_epi8(28);
        #pragma GCC unroll 4
        for (int w = 0; w < 4; ++w) {
            const __m512i low = _mm512_and_si512(w == 0 ? lo : _mm512_srli_epi16(lo, 2 * w), m3);
            u[w] = _mm512_add_epi8(_mm512_or_si512(low, third_bit(h, 4 * e + w)), offset);
        }
    } else {
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
        const uint8_t *v = b + off6_q + 192 * (2 * k + e);
        const __m512i n0 = _mm512_loadu_si512(v), n1 = _mm512_loadu_si512(v + 64), h = _mm512_loadu_si512(v + 128);
        u[0] = _mm512_or_si512(_mm512_and_si512(n0, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
        u[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n0, 4), m4),
                               _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
        u[2] = _mm512_or_si512(_mm512_and_si512(n1, m4), _mm512_and_si512(h, m30));
        u[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n1, 4), m4),
                               _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
    }
}

// One group of 16 rows of Q6_K, Q3_K or Q2_K against NT tokens (prefill: eight, two tiles).
// Per group of 16 values and token: the exact int32 sum of code times activation code per row
// (lanes = rows), minus 32 times the sum of the 16 activation codes (the codes' bias; none for
// Q2_K), to float (|sum| < 2^24, exact), times the group's scale times d (one product per group
// and row, shared by the tokens); the two groups of a block of 32 summed (a product and a
// multiply-add), times the activation block's scale, added to the token's sum. Per block and
// token that is three float operations beside the eight vpdpbusd, where a product and a
// multiply-add per group took four (one core of an AMD EPYC family 25 model 17, Q6_K 2048 x 5632
// by 512 tokens: 266-275 -> 286-294 GOP/s; its multiply-adds and conversions issue on the pipes
// vpdpbusd uses). Q2_K's minimums: per group and token m dmin * (d_x * sum(q_x)), subtracted,
// the block's two groups before its sum.
// With Span (activations with one scale per 256 values, QuantizedActs::span act_span_super) the
// blocks' sums go into a running sum per super-block and token, times the span's d_x once at its
// end: a multiply-add per group where the product and the multiply-add by each block's d_x took
// three operations per block.
template <int NT, DType T, class Acts, bool Span = false>
LS_PACKED_VNNI void packed_q6_k_vnni(const uint8_t *group, int64_t n_in, const Acts &x, float *out, int64_t ldo)
{
    const bool prefetch = NT == 1 && kernel_table().decode_prefetch; // decode
    const PrefetchDistance near(kernel_table());
    const int64_t nsb = n_in / qk_k;
    __m512 acc[NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
        acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = group + size_t(sb) * packed_k_block_bytes(T);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off6_d)));
        __m512 af[NT];
        if constexpr (Span) {
            #pragma GCC unroll 8
            for (int t = 0; t < NT; ++t)
                af[t] = _mm512_setzero_ps();
        }
        for (int k = 0; k < 8; ++k) {
            // Block k of 32 values is groups 2 k and 2 k + 1, which share the activation block's
            // scale: per token, (float(is_2k) scd_2k + float(is_2k+1) scd_2k+1) times it.
            const int64_t blk = sb * 8 + k; // group 2 k + e is words 4 e .. 4 e + 3 of the block
            __m512i u[2][4];
            __m512 scd[2];
            #pragma GCC unroll 2
            for (int e = 0; e < 2; ++e) {
                const int g = 2 * k + e;
                if (prefetch)
                    prefetch_part(b, size_t(packed_k_block_bytes(T)), size_t(g), 16, near);
                q6_k_like_codes<T>(b, k, e, u[e]);
                scd[e] = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                        _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + k16_sc_offset(T) + 16 * g)))),
                    d);
                if constexpr (T == DType::Q2_K) {
                    const __m512 dmin =
                        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off2_dmin)));
                    const __m512 mgd = _mm512_mul_ps(
                        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                            _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off2_m + 16 * g)))),
                        dmin);
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t)
                        acc[t] = _mm512_fnmadd_ps(mgd, _mm512_set1_ps(x.db(t, blk) * float(x.sum16(t, sb * 16 + g))),
                                                  acc[t]);
                }
            }
            #pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                __m512i is[2];
                #pragma GCC unroll 2
                for (int e = 0; e < 2; ++e) {
                    is[e] = T == DType::Q2_K ? _mm512_setzero_si512()
                                             : _mm512_set1_epi32(x.bias16(t, sb * 16 + 2 * k + e));
                    is[e] = dpbusd_bcast(is[e], u[e][0], x.word(t, blk, 4 * e));
                    is[e] = dpbusd_bcast(is[e], u[e][1], x.word(t, blk, 4 * e + 1));
                    is[e] = dpbusd_bcast(is[e], u[e][2], x.word(t, blk, 4 * e + 2));
                    is[e] = dpbusd_bcast(is[e], u[e][3], x.word(t, blk, 4 * e + 3));
                }
                if constexpr (Span) {
                    af[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[1]), scd[1],
                                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[0]), scd[0], af[t]));
                } else {
                    const __m512 sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[1]), scd[1],
                                                       _mm512_mul_ps(_mm512_cvtepi32_ps(is[0]), scd[0]));
                    acc[t] = _mm512_fmadd_ps(sum, _mm512_set1_ps(x.db(t, blk)), acc[t]);
                }
            }
        }
        if constexpr (Span) {
            #pragma GCC unroll 8
            for (int t = 0; t < NT; ++t)
                acc[t] = _mm512_fmadd_ps(af[t], _mm512_set1_ps(x.db(t, sb * 8)), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
        _mm512_storeu_ps(out + t * ldo, acc[t]);
}

// The sixteen rows' scales of a block of 32 (f16, IQ4_XS's f32).
template <DType T> LS_PACKED_VNNI inline __m512 scales32_vnni(const uint8_t *p)
{
    if constexpr (b32_f32_scales(T))
        return _mm512_loadu_ps(p);
    else
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}

// IQ4_NL's sixteen values + 128 (1..241, unsigned) in every 128-bit lane, for vpshufb.
LS_PACKED_VNNI inline __m512i iq4_table_128()
{
    alignas(16) static constexpr uint8_t t[16] = {
        uint8_t(iq4_nl_values[0] + 128),  uint8_t(iq4_nl_values[1] + 128),  uint8_t(iq4_nl_values[2] + 128),
        uint8_t(iq4_nl_values[3] + 128),  uint8_t(iq4_nl_values[4] + 128),  uint8_t(iq4_nl_values[5] + 128),
        uint8_t(iq4_nl_values[6] + 128),  uint8_t(iq4_nl_values[7] + 128),  uint8_t(iq4_nl_values[8] + 128),
        uint8_t(iq4_nl_values[9] + 128),  uint8_t(iq4_nl_values[10] + 128), uint8_t(iq4_nl_values[11] + 128),
        uint8_t(iq4_nl_values[12] + 128), uint8_t(iq4_nl_values[13] + 128), uint8_t(iq4_nl_values[14] + 128),
        uint8_t(iq4_nl_values[15] + 128)};
    return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i *>(t)));
}

// One group of 16 rows of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL or IQ4_XS against NT tokens. Per block of 32 and
// token: the exact int32 sum of the unsigned code u (Q8_0 q + 128, Q4_0 the nibble, Q5_0 the
// 5-bit code) times the activation code per row (lanes = rows), started at -offset (128, 8, 16)
// times the sum of the block's activation codes, so it ends as sum(q x) with q the signed code;
// then acc += float(sum) * (d_w d_x). Q4_1, Q5_1: the 4- or 5-bit code, no offset, then acc +=
// m_w * (d_x sum(q_x)). IQ4_NL, IQ4_XS: the table's value + 128 for the nibble, Q8_0's offset.
template <DType T, int NT, class Acts, int NG = 1>
LS_PACKED_VNNI void packed_b32_vnni(const uint8_t *group, int64_t n_in, const Acts &x, float *out, int64_t ldo)
{
    static_assert(NG == 1 || NT > 1, "groups side by side for prefill tiles only");
    const bool prefetch = NT == 1 && kernel_table().decode_prefetch; // decode
    const PrefetchDistance near(kernel_table());
    const int64_t nb = n_in / qk;
    const size_t gstride = NG > 1 ? group_bytes(T, n_in) : 0;
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[NG][NT];
    #pragma GCC unroll 8
    for (int g = 0; g < NG; ++g)
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t)
            acc[g][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *c = group + codes32_offset(T, b);
        // A pair's scales and codes, over its blocks' four steps each.
        const uint8_t *pair = group + scales32_offset(T, b - b % 2);
        const size_t pair_bytes = size_t(scales32_bytes(T) + 2 * codes32_bytes(T));
        __m512i is[NG][NT];
        #pragma GCC unroll 8
        for (int g = 0; g < NG; ++g)
            #pragma GCC unroll 8
            for (int t = 0; t < NT; ++t)
                is[g][t] = b32_min(T) ? _mm512_setzero_si512() : _mm512_set1_epi32(x.template bias32<T>(t, b));
        if constexpr (T == DType::Q8_0 && NT == 1) {
            // One token (decode): two chains of four, so the loads of the next block start
            // sooner (the sums are exact either way).
            __m512i odd = _mm512_setzero_si512();
            #pragma GCC unroll 8
            for (int w = 0; w < 8; w += 2) {
                if (prefetch)
                    prefetch_part(pair, pair_bytes, size_t(4 * (b % 2) + w / 2), 8, near);
                is[0][0] = dpbusd_bcast(is[0][0], _mm512_loadu_si512(c + 64 * w), x.word(0, b, w));
                odd = dpbusd_bcast(odd, _mm512_loadu_si512(c + 64 * w + 64), x.word(0, b, w + 1));
            }
            is[0][0] = _mm512_add_epi32(is[0][0], odd);
        } else if constexpr (T == DType::Q8_0) {
            #pragma GCC unroll 8
            for (int w = 0; w < 8; ++w) {
                __m512i xw[NT];
                if constexpr (NG > 1) {
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t)
                        xw[t] = bcast_word(x.word(t, b, w));
                }
                #pragma GCC unroll 4
                for (int g = 0; g < NG; ++g) {
                    const __m512i v = _mm512_loadu_si512(c + g * gstride + 64 * w);
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t)
                        is[g][t] = NG > 1 ? _mm512_dpbusd_epi32(is[g][t], v, xw[t])
                                          : dpbusd_bcast(is[g][t], v, x.word(t, b, w));
                }
            }
        } else { // word w: low nibbles values 4 w .. 4 w + 3, high nibbles 16 + 4 w ..
            #pragma GCC unroll 4
            for (int w = 0; w < 4; ++w) {
                if (prefetch)
                    prefetch_part(pair, pair_bytes, size_t(4 * (b % 2) + w), 8, near);
                __m512i xl[NT], xh[NT];
                if constexpr (NG > 1) {
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t) {
                        xl[t] = bcast_word(x.word(t, b, w));
                        xh[t] = bcast_word(x.word(t, b, w + 4));
                    }
                }
                #pragma GCC unroll 4
                for (int g = 0; g < NG; ++g) {
                    const __m512i v = _mm512_loadu_si512(c + g * gstride + 64 * w);
                    __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                    if constexpr (b32_table(T)) { // the values + 128, from the table
                        lo = _mm512_shuffle_epi8(iq4_table_128(), lo);
                        hi = _mm512_shuffle_epi8(iq4_table_128(), hi);
                    }
                    if constexpr (b32_fifth(T)) {
                        const __m512i qh = _mm512_loadu_si512(c + g * gstride + packed_q4_0_block_bytes);
                        lo = _mm512_or_si512(lo, fifth_bit(qh, 2 * w));
                        hi = _mm512_or_si512(hi, fifth_bit(qh, 2 * w + 1));
                    }
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t) {
                        if constexpr (NG > 1) {
                            is[g][t] = _mm512_dpbusd_epi32(is[g][t], lo, xl[t]);
                            is[g][t] = _mm512_dpbusd_epi32(is[g][t], hi, xh[t]);
                        } else {
                            is[g][t] = dpbusd_bcast(is[g][t], lo, x.word(t, b, w));
                            is[g][t] = dpbusd_bcast(is[g][t], hi, x.word(t, b, w + 4));
                        }
                    }
                }
            }
        }
        #pragma GCC unroll 4
        for (int g = 0; g < NG; ++g) {
            const __m512 dw = scales32_vnni<T>(group + g * gstride + scales32_offset(T, b));
            #pragma GCC unroll 8
            for (int t = 0; t < NT; ++t)
                acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[g][t]), _mm512_mul_ps(dw, _mm512_set1_ps(x.db(t, b))),
                                            acc[g][t]);
            if constexpr (b32_min(T)) {
                const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(
                    reinterpret_cast<const __m256i *>(group + g * gstride + scales32_offset(T, b) + 64)));
                #pragma GCC unroll 8
                for (int t = 0; t < NT; ++t)
                    acc[g][t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x.ds(t, b)), acc[g][t]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t)
            _mm512_storeu_ps(out + t * ldo + g * packed_group_rows, acc[g][t]);
}

// ---- AVX2 (no vpdpbusd: vpmaddubsw + vpmaddwd), the same layout, rows 0-7 then 8-15 -----------

#define LS_PACKED_AVX2 __attribute__((target("avx2,fma,f16c")))

// The same per-lane arithmetic as the VNNI kernels (exact integer sums, then the same float
// operations in the same order), so the two give the same bits. Q4_K: the 16-bit pair sums of
// vpmaddubsw of the eight words of a pair stay below 2^15 (8 x 2 x 15 x 128), so they add in
// 16 bits and widen once per pair; Q5_K's (31 for 15) widen every four words.
// Sub-block `sub`'s scales of rows 8 h .. 8 h + 7 of a packed Q4_K or Q5_K super-block b, times
// the rows' super-block scales d.
LS_PACKED_AVX2 inline __m256 q4_k_sub_scale_avx2(const uint8_t *b, int sub, int h, __m256 d)
{
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                             _mm_loadl_epi64(reinterpret_cast<const __m128i *>(b + off_sc + 16 * sub + 8 * h)))),
                         d);
}

template <DType T> constexpr int words_in_16_bits = T == DType::Q5_K ? 4 : 8;

// Bit `bit` of every byte of qh moved to bit 4, the other bits 0 (fifth_bit in 256 bits).
LS_PACKED_AVX2 inline __m256i fifth_bit_avx2(__m256i qh, int bit)
{
    const __m256i at4 = bit < 4 ? _mm256_slli_epi16(qh, 4 - bit) : bit > 4 ? _mm256_srli_epi16(qh, bit - 4) : qh;
    return _mm256_and_si256(at4, _mm256_set1_epi8(0x10));
}

// The codes of word w of pair `pair` (32 bytes at offset 32 h of the word), even and odd
// sub-block: Q4_K the nibbles, Q5_K with their fifth bits.
template <DType T>
LS_PACKED_AVX2 inline void q4_k_like_codes_avx2(const uint8_t *b, int pair, int w, int h, __m256i &lo, __m256i &hi)
{
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off_qs + (pair * 8 + w) * 64 + 32 * h));
    lo = _mm256_and_si256(v, low);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    if constexpr (T == DType::Q5_K) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off5_qh + w * 64 + 32 * h));
        lo = _mm256_or_si256(lo, fifth_bit_avx2(qh, 2 * pair));
        hi = _mm256_or_si256(hi, fifth_bit_avx2(qh, 2 * pair + 1));
    }
}

template <int NT, DType T = DType::Q4_K>
LS_PACKED_AVX2 void packed_q4_k_avx2(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0,
                                     float *out, int64_t ldo)
{
    const int64_t nsb = n_in / qk_k;
    const int8_t *xq[NT];
    const float *xd[NT], *xs[NT];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        xq[t] = a.q_row(t0 + t);
        xd[t] = a.db_row(t0 + t);
        xs[t] = a.ds_row(t0 + t);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    constexpr int span = words_in_16_bits<T>;
    for (int h = 0; h < 2; ++h) {
        __m256 acc[NT];
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            acc[t] = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < nsb; ++sb) {
            const uint8_t *b = group + size_t(sb) * packed_k_block_bytes(T);
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_d + 16 * h)));
            #pragma GCC unroll 4
            for (int pair = 0; pair < 4; ++pair) {
                __m256i ie[NT], io[NT]; // int32 sums
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    ie[t] = _mm256_setzero_si256();
                    io[t] = _mm256_setzero_si256();
                }
                #pragma GCC unroll 2
                for (int w0 = 0; w0 < 8; w0 += span) {
                    __m256i ie16[NT], io16[NT];
                    #pragma GCC unroll 4
                    for (int t = 0; t < NT; ++t) {
                        ie16[t] = _mm256_setzero_si256();
                        io16[t] = _mm256_setzero_si256();
                    }
                    #pragma GCC unroll 8
                    for (int w = w0; w < w0 + span; ++w) {
                        __m256i lo, hi;
                        q4_k_like_codes_avx2<T>(b, pair, w, h, lo, hi);
                        #pragma GCC unroll 4
                        for (int t = 0; t < NT; ++t) {
                            const int8_t *x = xq[t] + sb * qk_k + 64 * pair + 4 * w;
                            ie16[t] = _mm256_add_epi16(ie16[t], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load_i32(x))));
                            io16[t] =
                                _mm256_add_epi16(io16[t], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load_i32(x + 32))));
                            // Keep the sums in order, word by word (an empty asm, no instruction):
                            // GCC otherwise reassociated them into a tree, computed all 32
                            // products of the eight words first and kept them on the stack.
                            __asm__("" : "+x"(ie16[t]), "+x"(io16[t]));
                        }
                    }
                    #pragma GCC unroll 4
                    for (int t = 0; t < NT; ++t) {
                        ie[t] = _mm256_add_epi32(ie[t], _mm256_madd_epi16(ie16[t], ones));
                        io[t] = _mm256_add_epi32(io[t], _mm256_madd_epi16(io16[t], ones));
                    }
                }
                const __m256 sed = q4_k_sub_scale_avx2(b, 2 * pair, h, d), sod = q4_k_sub_scale_avx2(b, 2 * pair + 1, h, d);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    const float *dx = xd[t] + sb * 8 + 2 * pair;
                    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ie[t]), sed), _mm256_set1_ps(dx[0]), acc[t]);
                    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(io[t]), sod), _mm256_set1_ps(dx[1]), acc[t]);
                }
            }
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_dmin + 16 * h)));
            #pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const __m256 mjd = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                                     reinterpret_cast<const __m128i *>(b + off_m + 16 * j + 8 * h)))),
                                                 dmin);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t)
                    acc[t] = _mm256_fnmadd_ps(mjd, _mm256_set1_ps(xs[t][sb * 8 + j]), acc[t]);
            }
        }
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            _mm256_storeu_ps(out + t * ldo + 8 * h, acc[t]);
    }
}

// The one-token kernels' sums of G groups side by side: group k's rows 0-7 in acc[k][0], 8-15
// in acc[k][1].
template <int G> LS_PACKED_AVX2 inline void zero_group_sums(__m256 (&acc)[G][2])
{
    #pragma GCC unroll 4
    for (int k = 0; k < G; ++k)
        acc[k][0] = acc[k][1] = _mm256_setzero_ps();
}
template <int G> LS_PACKED_AVX2 inline void store_group_sums(const __m256 (&acc)[G][2], float *out)
{
    #pragma GCC unroll 4
    for (int k = 0; k < G; ++k) {
        _mm256_storeu_ps(out + 16 * k, acc[k][0]);
        _mm256_storeu_ps(out + 16 * k + 8, acc[k][1]);
    }
}

// One token (decode): both halves in one pass, so each word's 64 bytes and the activation
// words are loaded once. The same per-lane operations as packed_q4_k_avx2. G groups (1 to 4)
// side by side, each gstride bytes after the one before, group k's rows at out + 16 k: a pair
// of sub-blocks of each in turn (512 bytes of codes), so that the core reads G streams at once
// (packed_q8_0_avx2_groups); one group alone asks for its bytes ahead where the options allow.
template <DType T, int G>
LS_PACKED_AVX2 void packed_q4_k_avx2_groups(const uint8_t *group, size_t gstride, int64_t n_in,
                                            const QuantizedActs &a, int64_t t0, float *out)
{
    const bool prefetch = G == 1 && kernel_table().decode_prefetch;
    const int64_t nsb = n_in / qk_k;
    const int8_t *xq = a.q_row(t0);
    const float *xd = a.db_row(t0), *xs = a.ds_row(t0);
    const __m256i ones = _mm256_set1_epi16(1);
    constexpr int span = words_in_16_bits<T>;
    __m256 acc[G][2];
    zero_group_sums(acc);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        if (prefetch)
            prefetch_ahead(group + size_t(sb) * packed_k_block_bytes(T), packed_k_block_bytes(T),
                           decode_prefetch_distance_avx2);
        #pragma GCC unroll 4
        for (int pair = 0; pair < 4; ++pair) {
            const __m256 d0 = _mm256_set1_ps(xd[sb * 8 + 2 * pair]), d1 = _mm256_set1_ps(xd[sb * 8 + 2 * pair + 1]);
            #pragma GCC unroll 1
            for (int k = 0; k < G; ++k) {
                const uint8_t *b = group + k * gstride + size_t(sb) * packed_k_block_bytes(T);
                __m256i ie[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, io[2] = {ie[0], ie[0]}; // int32 sums
                #pragma GCC unroll 2
                for (int w0 = 0; w0 < 8; w0 += span) {
                    __m256i ie16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, io16[2] = {ie16[0], ie16[0]};
                    #pragma GCC unroll 8
                    for (int w = w0; w < w0 + span; ++w) {
                        const int8_t *x = xq + sb * qk_k + 64 * pair + 4 * w;
                        const __m256i xe = _mm256_set1_epi32(load_i32(x)), xo = _mm256_set1_epi32(load_i32(x + 32));
                        #pragma GCC unroll 2
                        for (int h = 0; h < 2; ++h) {
                            __m256i lo, hi;
                            q4_k_like_codes_avx2<T>(b, pair, w, h, lo, hi);
                            ie16[h] = _mm256_add_epi16(ie16[h], _mm256_maddubs_epi16(lo, xe));
                            io16[h] = _mm256_add_epi16(io16[h], _mm256_maddubs_epi16(hi, xo));
                            __asm__("" : "+x"(ie16[h]), "+x"(io16[h])); // the sums in order, as in the tile
                        }
                    }
                    #pragma GCC unroll 2
                    for (int h = 0; h < 2; ++h) {
                        ie[h] = _mm256_add_epi32(ie[h], _mm256_madd_epi16(ie16[h], ones));
                        io[h] = _mm256_add_epi32(io[h], _mm256_madd_epi16(io16[h], ones));
                    }
                }
                #pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_d + 16 * h)));
                    const __m256 sed = q4_k_sub_scale_avx2(b, 2 * pair, h, d),
                                 sod = q4_k_sub_scale_avx2(b, 2 * pair + 1, h, d);
                    acc[k][h] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ie[h]), sed), d0, acc[k][h]);
                    acc[k][h] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(io[h]), sod), d1, acc[k][h]);
                }
            }
        }
        #pragma GCC unroll 1
        for (int k = 0; k < G; ++k) {
            const uint8_t *b = group + k * gstride + size_t(sb) * packed_k_block_bytes(T);
            #pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off_dmin + 16 * h)));
                #pragma GCC unroll 8
                for (int j = 0; j < 8; ++j)
                    acc[k][h] = _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                                                   reinterpret_cast<const __m128i *>(b + off_m + 16 * j + 8 * h)))),
                                                               dmin),
                                                 _mm256_set1_ps(xs[sb * 8 + j]), acc[k][h]);
            }
        }
    }
    store_group_sums(acc, out);
}

// q6_k_like_codes for rows 8 h .. 8 h + 7 (bytes 32 h .. 32 h + 31 of each vector), group g.
template <DType T> LS_PACKED_AVX2 inline void q6_k_like_codes_avx2(const uint8_t *b, int g, int h, __m256i u[4])
{
    if constexpr (T == DType::Q2_K) {
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + off2_q + 64 * g + 32 * h));
        const __m256i m3 = _mm256_set1_epi8(0x03);
        #pragma GCC unroll 4
        for (int w = 0; w < 4; ++w)
            u[w] = _mm256_and_si256(w == 0 ? lo : _mm256_srli_epi16(lo, 2 * w), m3);
    } else if constexpr (T == DType::Q3_K) {
        const uint8_t *pair = b + off3_q + 192 * (g / 2) + 32 * h;
        const int e = g % 2;
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pair + 64 * e));
        const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pair + 128));
        const __m256i m3 = _mm256_set1_epi8(0x03), m4 = _mm256_set1_epi8(0x04), offset = _mm256_set1_epi8(28);
        #pragma GCC unroll 4
        for (int w = 0; w < 4; ++w) {
            const int bit = 4 * e + w;
            const __m256i at2 = bit < 2 ? _mm256_slli_epi16(hb, 2 - bit) : bit > 2 ? _mm256_srli_epi16(hb, bit - 2) : hb;
            const __m256i low = _mm256_and_si256(w == 0 ? lo : _mm256_srli_epi16(lo, 2 * w), m3);
            u[w] = _mm256_add_epi8(_mm256_or_si256(low, _mm256_and_si256(at2, m4)), offset);
        }
    } else {
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
        const uint8_t *v = b + off6_q + 192 * g + 32 * h;
        const __m256i n0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(v));
        const __m256i n1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(v + 64));
        const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(v + 128));
        u[0] = _mm256_or_si256(_mm256_and_si256(n0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
        u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n0, 4), m4),
                               _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
        u[2] = _mm256_or_si256(_mm256_and_si256(n1, m4), _mm256_and_si256(hb, m30));
        u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
    }
}

// Rows 8 h .. 8 h + 7 of group g: the group's scale times d, and (Q2_K) its minimum times dmin.
template <DType T> LS_PACKED_AVX2 inline __m256 q6_k_like_scale_avx2(const uint8_t *b, int g, int h, __m256 d)
{
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                             _mm_loadl_epi64(reinterpret_cast<const __m128i *>(b + k16_sc_offset(T) + 16 * g + 8 * h)))),
                         d);
}
LS_PACKED_AVX2 inline __m256 q2_k_min_avx2(const uint8_t *b, int g, int h)
{
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off2_dmin + 16 * h)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                             _mm_loadl_epi64(reinterpret_cast<const __m128i *>(b + off2_m + 16 * g + 8 * h)))),
                         dmin);
}

// Q6_K, Q3_K and Q2_K against NT tokens (2 to 4: prefill), both halves of a group (rows 0-7 and
// 8-15) in one pass. A vpmaddubsw pair sum is at most 2 x 63 x 128 = 16128, so two words add in
// 16 bits (Q3_K's codes + 28: 2 x 35 x 128). Codes stored with an offset (Q6_K q + 32, Q3_K
// q + 4, then + 28 here) come back through a bias of -32 sum(x) per 16 values, added to the
// exact integer sum; per block of 32 and (row, token) the float operations are the VNNI
// kernel's (Q2_K: its minimum terms first, then the block's sum), so the same bits. Each group of
// 16 values' activation words are broadcast once for the sixteen rows (twice with the halves in
// two passes), and a super-block's biases (-32 QuantizedActs::s16) are made once per token and
// broadcast from the stack (before: a shift, a move to a vector register and a broadcast for each
// group and token). The accumulators and the first group's products of a block live on the
// stack (AVX2 has 16 vector registers; the codes of both halves take eight). One core, the AMD
// EPYC without AVX-512 (family 25 model 1), GMAC/s of the kernel alone on a group of 2048 values
// against 64 tokens in tiles of four (scripts/bench-decode-matvec.cpp tile), three alternated
// rounds, two passes -> one: Q6_K 55.3 -> 61.5-61.8, Q3_K 51.7-51.8 -> 58.5-58.6, Q2_K 57.4-57.9
// -> 65.2-65.6; tiles of two, Q6_K 43.8-44.0 -> 47.8. TinyLlama's gate (2048 x 5632, `matmul`, 64
// tokens): Q6_K 102.4-108.5 -> 112.5-116.3 GOP/s.
template <int NT, DType T>
LS_PACKED_AVX2 void packed_q6_k_avx2_tokens(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0,
                                          float *out, int64_t ldo)
{
    const int64_t nsb = n_in / qk_k;
    const int8_t *xq[NT];
    const float *xd[NT];
    const int32_t *xs[NT];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        xq[t] = a.q_row(t0 + t);
        xd[t] = a.db_row(t0 + t);
        xs[t] = a.s16_row(t0 + t);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NT][2];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t *b = group + size_t(sb) * packed_k_block_bytes(T);
        const __m256 d[2] = {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off6_d))),
                             _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off6_d + 16)))};
        alignas(32) int32_t b16[NT][16];
        if constexpr (T != DType::Q2_K) {
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                #pragma GCC unroll 2
                for (int j = 0; j < 2; ++j)
                {
                    const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xs[t] + sb * 16 + 8 * j));
                    _mm256_store_si256(reinterpret_cast<__m256i *>(b16[t] + 8 * j),
                                       _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s16, 5)));
                }
        }
        for (int k = 0; k < 8; ++k) {
            __m256 part[NT][2];
            #pragma GCC unroll 2
            for (int e = 0; e < 2; ++e) {
                const int g = 2 * k + e;
                __m256i u[2][4];
                __m256 scd[2];
                #pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    q6_k_like_codes_avx2<T>(b, g, h, u[h]);
                    scd[h] = q6_k_like_scale_avx2<T>(b, g, h, d[h]);
                    if constexpr (T == DType::Q2_K) {
                        const __m256 mgd = q2_k_min_avx2(b, g, h);
                        #pragma GCC unroll 4
                        for (int t = 0; t < NT; ++t)
                            acc[t][h] = _mm256_fnmadd_ps(
                                mgd, _mm256_set1_ps(xd[t][sb * 8 + k] * float(xs[t][sb * 16 + g])), acc[t][h]);
                    }
                }
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    const int8_t *x = xq[t] + sb * qk_k + 16 * g;
                    const __m256i x0 = _mm256_set1_epi32(load_i32(x)), x1 = _mm256_set1_epi32(load_i32(x + 4)),
                                  x2 = _mm256_set1_epi32(load_i32(x + 8)), x3 = _mm256_set1_epi32(load_i32(x + 12));
                    const __m256i bias = T == DType::Q2_K ? _mm256_setzero_si256() : _mm256_set1_epi32(b16[t][g]);
                    #pragma GCC unroll 2
                    for (int h = 0; h < 2; ++h) {
                        const __m256i p01 =
                            _mm256_add_epi16(_mm256_maddubs_epi16(u[h][0], x0), _mm256_maddubs_epi16(u[h][1], x1));
                        const __m256i p23 =
                            _mm256_add_epi16(_mm256_maddubs_epi16(u[h][2], x2), _mm256_maddubs_epi16(u[h][3], x3));
                        const __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(
                            bias, _mm256_add_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones))));
                        if (e == 0)
                            part[t][h] = _mm256_mul_ps(f, scd[h]);
                        else
                            acc[t][h] = _mm256_fmadd_ps(_mm256_fmadd_ps(f, scd[h], part[t][h]),
                                                        _mm256_set1_ps(xd[t][sb * 8 + k]), acc[t][h]);
                    }
                }
            }
        }
    }
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        _mm256_storeu_ps(out + t * ldo, acc[t][0]);
        _mm256_storeu_ps(out + t * ldo + 8, acc[t][1]);
    }
}

// One token (decode): both halves in one pass, as packed_q4_k_avx2_groups; G groups side by
// side as packed_q4_k_avx2_groups, a block of 32 values of each in turn.
template <DType T, int G>
LS_PACKED_AVX2 void packed_q6_k_avx2_groups(const uint8_t *group, size_t gstride, int64_t n_in,
                                            const QuantizedActs &a, int64_t t0, float *out)
{
    const bool prefetch = G == 1 && kernel_table().decode_prefetch;
    const int64_t nsb = n_in / qk_k;
    const int8_t *xq = a.q_row(t0);
    const float *xd = a.db_row(t0);
    const int32_t *xs = a.s16_row(t0);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[G][2];
    zero_group_sums(acc);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        if (prefetch)
            prefetch_ahead(group + size_t(sb) * packed_k_block_bytes(T), size_t(packed_k_block_bytes(T)),
                           decode_prefetch_distance_avx2);
        for (int k = 0; k < 8; ++k) {
            // Block k of 32: groups 2 k and 2 k + 1, in the VNNI kernel's order.
            const __m256 dx = _mm256_set1_ps(xd[sb * 8 + k]);
            #pragma GCC unroll 1
            for (int i = 0; i < G; ++i) {
                const uint8_t *b = group + i * gstride + size_t(sb) * packed_k_block_bytes(T);
                #pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off6_d + 16 * h)));
                    __m256 f[2], scd[2];
                    #pragma GCC unroll 2
                    for (int e = 0; e < 2; ++e) {
                        const int g = 2 * k + e;
                        const int8_t *x = xq + sb * qk_k + 16 * g;
                        __m256i u[4];
                        q6_k_like_codes_avx2<T>(b, g, h, u);
                        scd[e] = q6_k_like_scale_avx2<T>(b, g, h, d);
                        if constexpr (T == DType::Q2_K) {
                            const __m256 mgd = q2_k_min_avx2(b, g, h);
                            acc[i][h] = _mm256_fnmadd_ps(mgd, _mm256_set1_ps(xd[sb * 8 + k] * float(xs[sb * 16 + g])),
                                                         acc[i][h]);
                        }
                        const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(u[0], _mm256_set1_epi32(load_i32(x))),
                                                             _mm256_maddubs_epi16(u[1], _mm256_set1_epi32(load_i32(x + 4))));
                        const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(u[2], _mm256_set1_epi32(load_i32(x + 8))),
                                                             _mm256_maddubs_epi16(u[3], _mm256_set1_epi32(load_i32(x + 12))));
                        const __m256i bias =
                            T == DType::Q2_K ? _mm256_setzero_si256() : _mm256_set1_epi32(-32 * xs[sb * 16 + g]);
                        f[e] = _mm256_cvtepi32_ps(_mm256_add_epi32(
                            bias, _mm256_add_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones))));
                    }
                    acc[i][h] = _mm256_fmadd_ps(_mm256_fmadd_ps(f[1], scd[1], _mm256_mul_ps(f[0], scd[0])), dx, acc[i][h]);
                }
            }
        }
    }
    store_group_sums(acc, out);
}

// Q4_0: the nibbles, the sum started at -8 times the activations' (pair sums at most 2 x 15 x
// 127, two words' add in 16 bits); Q5_1: the 5-bit codes, no bias (2 x 2 x 31 x 127 < 2^15);
// IQ4_NL and IQ4_XS: the table's signed values through the sign trick (packed_q8_0_avx2_tokens).
// The sums are sum(q x) as in the VNNI kernel, and the same float operations follow. Block b's
// rows 8 h .. 8 h + 7 for the NH halves h = h0 .. h0 + NH - 1 (one, or both) of a group against
// NT tokens, added to acc[NH t + h - h0]; both halves take each 64-byte line of codes whole.
template <DType T, int NT, int NH = 1>
LS_PACKED_AVX2 inline __attribute__((always_inline)) void
b32_block_avx2(const uint8_t *group, int64_t b, int h0, const QuantizedActs &a, int64_t t0, __m256 *acc)
{
    static_assert(T != DType::Q8_0, "Q8_0 has its own kernels (packed_q8_0_avx2_tokens)");
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0F);
    const uint8_t *c = group + codes32_offset(T, b) + 32 * h0;
    __m256i is[NT][NH];
    constexpr int bias = b32_table(T) ? 0 : b32_offset(T); // Q4_1, Q5_1, IQ4_NL, IQ4_XS: none
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        const int32_t *s16 = a.s16_row(t0 + t);
        #pragma GCC unroll 2
        for (int k = 0; k < NH; ++k)
            is[t][k] = _mm256_set1_epi32(-bias * (s16[2 * b] + s16[2 * b + 1]));
    }
    #pragma GCC unroll 4
    for (int w = 0; w < 4; ++w)
        #pragma GCC unroll 2
        for (int k = 0; k < NH; ++k) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(c + 64 * w + 32 * k));
            __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            if constexpr (b32_fifth(T)) {
                const __m256i qh =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i *>(c + 32 * k + packed_q4_0_block_bytes));
                lo = _mm256_or_si256(lo, fifth_bit_avx2(qh, 2 * w));
                hi = _mm256_or_si256(hi, fifth_bit_avx2(qh, 2 * w + 1));
            }
            if constexpr (b32_table(T)) {
                // The signed values from the table, through the sign trick (|v| and x with
                // v's sign; pair sums at most 2 x 127 x 128 < 2^15): sum(v x) exactly, as
                // the VNNI kernel's sum((v + 128) x) - 128 sum(x).
                const __m256i table = _mm256_broadcastsi128_si256(
                    _mm_loadu_si128(reinterpret_cast<const __m128i *>(iq4_nl_values)));
                const __m256i vl = _mm256_shuffle_epi8(table, lo), vh = _mm256_shuffle_epi8(table, hi);
                #pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    const int8_t *x = a.q_row(t0 + t) + b * qk + 4 * w;
                    const __m256i pl = _mm256_maddubs_epi16(
                        _mm256_sign_epi8(vl, vl), _mm256_sign_epi8(_mm256_set1_epi32(load_i32(x)), vl));
                    const __m256i ph = _mm256_maddubs_epi16(
                        _mm256_sign_epi8(vh, vh), _mm256_sign_epi8(_mm256_set1_epi32(load_i32(x + 16)), vh));
                    is[t][k] = _mm256_add_epi32(is[t][k], _mm256_add_epi32(_mm256_madd_epi16(pl, ones),
                                                                           _mm256_madd_epi16(ph, ones)));
                }
                continue;
            }
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                const int8_t *x = a.q_row(t0 + t) + b * qk + 4 * w;
                const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(load_i32(x))),
                                                   _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load_i32(x + 16))));
                is[t][k] = _mm256_add_epi32(is[t][k], _mm256_madd_epi16(p, ones));
            }
        }
    #pragma GCC unroll 2
    for (int k = 0; k < NH; ++k) {
        const int h = h0 + k;
        const __m256 dw = b32_f32_scales(T) ? _mm256_loadu_ps(reinterpret_cast<const float *>(
                                                  group + scales32_offset(T, b) + 32 * h))
                                            : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(
                                                  group + scales32_offset(T, b) + 16 * h)));
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            acc[NH * t + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t][k]),
                                              _mm256_mul_ps(dw, _mm256_set1_ps(a.db_row(t0 + t)[b])), acc[NH * t + k]);
        if constexpr (b32_min(T)) {
            const __m256 mw = _mm256_cvtph_ps(
                _mm_loadu_si128(reinterpret_cast<const __m128i *>(group + scales32_offset(T, b) + 64 + 16 * h)));
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
                acc[NH * t + k] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.ds_row(t0 + t)[b]), acc[NH * t + k]);
        }
    }
}

// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL or IQ4_XS against NT tokens (2 to 4: prefill), both halves of a
// block in one pass: each 64-byte line read once and its codes unpacked once for the NT tokens.
// Against two passes of two tokens (one per half), one core, 64 tokens, TinyLlama's gate (2048 x
// 5632), GOP/s: Q4_0 126 -> 165-170, Q4_1 128 -> 170, Q5_0 103 -> 140, Q5_1 103 -> 147, IQ4_NL 85
// -> 109 (two passes of four tokens: 146, 146, 124, 124, 106). The float sums stay in memory,
// as packed_q8_0_avx2_tokens's.
template <DType T, int NT>
LS_PACKED_AVX2 void packed_b32_avx2_tokens(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0,
                                           float *out, int64_t ldo)
{
    const int64_t nb = n_in / qk;
    __m256 acc[2 * NT];
    #pragma GCC unroll 8
    for (int i = 0; i < 2 * NT; ++i)
        acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b)
        b32_block_avx2<T, NT, 2>(group, b, 0, a, t0, acc);
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        _mm256_storeu_ps(out + t * ldo, acc[2 * t]);
        _mm256_storeu_ps(out + t * ldo + 8, acc[2 * t + 1]);
    }
}

// One token of Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL or IQ4_XS: G groups (1 to 4) side by side as
// packed_q8_0_avx2_groups, a block (both halves) of each in turn, the operations of
// packed_b32_avx2_tokens per row (so the same bits), each line read once.
template <DType T, int G>
LS_PACKED_AVX2 void packed_b32_avx2_groups(const uint8_t *group, size_t gstride, int64_t n_in, const QuantizedActs &a,
                                           int64_t t0, float *out)
{
    const int64_t nb = n_in / qk;
    __m256 acc[G][2];
    zero_group_sums(acc);
    for (int64_t b = 0; b < nb; ++b)
        #pragma GCC unroll 1
        for (int k = 0; k < G; ++k)
            #pragma GCC unroll 2
            for (int h = 0; h < 2; ++h)
                b32_block_avx2<T, 1>(group + k * gstride, b, h, a, t0, &acc[k][h]);
    store_group_sums(acc, out);
}

// One Q8_0 token (decode): both halves of a group in one pass, so the weights stream through
// once in address order (two passes, one per half, read each 64-byte line twice, the second
// time from L2). The same integer sums and float operations as packed_q8_0_avx2_tokens. G groups
// (1 to 4) side by side, each gstride bytes after the one before, group k's rows at
// out + 16 k; a block of each in turn, so that the core reads G streams at once. One stream
// is read more slowly than several on the AMD EPYC without AVX-512 (family 25 model 1): one
// core reading 98 MB, GB/s, in 64-byte steps from one / two / four streams 34 KiB apart (a
// TinyLlama row group's bytes) 19.4-20.3 / 23.9-25.4 / 27.3-28.5, four streams in 512-byte
// steps (a block) 27.6-28.3 and in 2 KiB steps 23.1-23.7, one stream with requests 4 KiB
// ahead 18.6-18.8 and four with them 20.7. So a single group (the last of a thread's range)
// asks for its bytes ahead where the options allow (prefetch) and several groups do not.
template <int G>
LS_PACKED_AVX2 void packed_q8_0_avx2_groups(const uint8_t *group, size_t gstride, int64_t n_in, const QuantizedActs &a,
                                            int64_t t0, float *out)
{
    const bool prefetch = G == 1 && kernel_table().decode_prefetch;
    const int64_t nb = n_in / qk;
    const int8_t *xq = a.q_row(t0);
    const float *xd = a.db_row(t0);
    const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
    __m256 acc[G][2];
    zero_group_sums(acc);
    for (int64_t b = 0; b < nb; ++b) {
        if (prefetch && b % 2 == 0) // a pair's scales and codes
            prefetch_ahead(group + scales32_offset(DType::Q8_0, b), size_t(64 + 2 * packed_q8_0_block_bytes),
                           decode_prefetch_distance_avx2);
        const __m256 db = _mm256_set1_ps(xd[b]);
        #pragma GCC unroll 4
        for (int k = 0; k < G; ++k) {
            const uint8_t *c = group + k * gstride + codes32_offset(DType::Q8_0, b);
            __m256i is[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            #pragma GCC unroll 8
            for (int w = 0; w < 8; ++w) {
                const __m256i x = _mm256_set1_epi32(load_i32(xq + b * qk + 4 * w));
                #pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256i q = _mm256_xor_si256(
                        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(c + 64 * w + 32 * h)), flip);
                    is[h] = _mm256_add_epi32(
                        is[h], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)), ones));
                }
            }
            const uint8_t *sc = group + k * gstride + scales32_offset(DType::Q8_0, b);
            #pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sc + 16 * h)));
                acc[k][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[h]), _mm256_mul_ps(dw, db), acc[k][h]);
            }
        }
    }
    store_group_sums(acc, out);
}

// Q8_0 against NT tokens (2 to 4: prefill), both halves of a group in one pass. The codes q
// (stored q + 128) go through the sign trick: |q| as vpmaddubsw's unsigned operand and x with
// q's sign as the signed one (pair sums at most 2 x 128 x 127 < 2^15, so exact), then vpmaddwd
// into int32; per block and (row, token) acc += float(sum) * (d_w d_x), as the VNNI kernel, so
// the same bits. Each 64-byte line of codes is read once (two passes, one per half, read it
// twice) and each activation word is broadcast once for the sixteen rows; a word's |q| serves
// the NT tokens. vpsignb, vpmaddubsw and vpmaddwd share two of the four vector pipes on the AMD
// EPYC without AVX-512 (family 25 model 1: each alone 2 per cycle, any two mixed 2 to 3), so the
// kernel is bound by them, four of its five operations per vpmaddubsw; what the one pass saves is
// the second pass's |q| and loads. One core, 64 tokens, TinyLlama's gate (2048 x 5632): 110.7-113.0
// GOP/s with the two passes, 122.4-125.3 with one; two threads 219.5-226.6 against 242.6-253.5
// (scripts/bench-decode-matvec.cpp). The float sums stay in memory (the 2 NT integer sums, the
// four registers of codes and the temporaries take AVX2's 16 vector registers); they are touched
// once per block.
template <int NT>
LS_PACKED_AVX2 void packed_q8_0_avx2_tokens(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0,
                                            float *out, int64_t ldo)
{
    const int64_t nb = n_in / qk;
    const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
    const int8_t *xq[NT];
    const float *xd[NT];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        xq[t] = a.q_row(t0 + t);
        xd[t] = a.db_row(t0 + t);
    }
    __m256 acc[NT][2];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *c = group + codes32_offset(DType::Q8_0, b);
        __m256i is[NT][2];
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
            is[t][0] = is[t][1] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int w = 0; w < 8; ++w) {
            const __m256i q0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(c + 64 * w)), flip),
                          q1 = _mm256_xor_si256(
                              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(c + 64 * w + 32)), flip);
            const __m256i aq0 = _mm256_sign_epi8(q0, q0), aq1 = _mm256_sign_epi8(q1, q1);
            #pragma GCC unroll 4
            for (int t = 0; t < NT; ++t) {
                const __m256i x = _mm256_set1_epi32(load_i32(xq[t] + b * qk + 4 * w));
                is[t][0] = _mm256_add_epi32(is[t][0], _mm256_madd_epi16(_mm256_maddubs_epi16(aq0, _mm256_sign_epi8(x, q0)), ones));
                is[t][1] = _mm256_add_epi32(is[t][1], _mm256_madd_epi16(_mm256_maddubs_epi16(aq1, _mm256_sign_epi8(x, q1)), ones));
                __asm__("" : "+x"(is[t][0]), "+x"(is[t][1])); // the sums in order (a tree of them spills)
            }
        }
        const uint8_t *sc = group + scales32_offset(DType::Q8_0, b);
        const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sc))),
                     dw1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sc + 16)));
        #pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            const __m256 db = _mm256_set1_ps(xd[t][b]);
            acc[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t][0]), _mm256_mul_ps(dw0, db), acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t][1]), _mm256_mul_ps(dw1, db), acc[t][1]);
        }
    }
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        _mm256_storeu_ps(out + t * ldo, acc[t][0]);
        _mm256_storeu_ps(out + t * ldo + 8, acc[t][1]);
    }
}

// packed_b32_vnni for n_tokens (1..4) tokens.
template <DType T>
void packed_b32_vnni_n(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0, int n_tokens,
                       float *out, int64_t ldo)
{
    switch (n_tokens) {
    case 1: packed_b32_vnni<T, 1>(group, n_in, RowActs<1>(a, t0), out, ldo); return;
    case 2: packed_b32_vnni<T, 2>(group, n_in, RowActs<2>(a, t0), out, ldo); return;
    case 3: packed_b32_vnni<T, 3>(group, n_in, RowActs<3>(a, t0), out, ldo); return;
    default: packed_b32_vnni<T, 4>(group, n_in, RowActs<4>(a, t0), out, ldo); return;
    }
}

// packed_q4_k_vnni for n_tokens (1..4) tokens.
template <DType T>
void packed_q4_k_like_vnni(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0, int n_tokens,
                           float *out, int64_t ldo)
{
    if (a.span == act_span_super) {
        switch (n_tokens) {
        case 1: packed_q4_k_span_vnni<1, T>(group, n_in, RowActs<1>(a, t0), out, ldo); return;
        case 2: packed_q4_k_span_vnni<2, T>(group, n_in, RowActs<2>(a, t0), out, ldo); return;
        case 3: packed_q4_k_span_vnni<3, T>(group, n_in, RowActs<3>(a, t0), out, ldo); return;
        default: packed_q4_k_span_vnni<4, T>(group, n_in, RowActs<4>(a, t0), out, ldo); return;
        }
    }
    switch (n_tokens) {
    case 1: packed_q4_k_vnni<1, T>(group, n_in, RowActs<1>(a, t0), out, ldo); return;
    case 2: packed_q4_k_vnni<2, T>(group, n_in, RowActs<2>(a, t0), out, ldo); return;
    case 3: packed_q4_k_vnni<3, T>(group, n_in, RowActs<3>(a, t0), out, ldo); return;
    default: packed_q4_k_vnni<4, T>(group, n_in, RowActs<4>(a, t0), out, ldo); return;
    }
}

// packed_q6_k_vnni for n_tokens (1..4) tokens.
template <DType T>
void packed_q6_k_like_vnni(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0, int n_tokens,
                           float *out, int64_t ldo)
{
    if (a.span == act_span_super) {
        switch (n_tokens) {
        case 1: packed_q6_k_vnni<1, T, RowActs<1>, true>(group, n_in, RowActs<1>(a, t0), out, ldo); return;
        case 2: packed_q6_k_vnni<2, T, RowActs<2>, true>(group, n_in, RowActs<2>(a, t0), out, ldo); return;
        case 3: packed_q6_k_vnni<3, T, RowActs<3>, true>(group, n_in, RowActs<3>(a, t0), out, ldo); return;
        default: packed_q6_k_vnni<4, T, RowActs<4>, true>(group, n_in, RowActs<4>(a, t0), out, ldo); return;
        }
    }
    switch (n_tokens) {
    case 1: packed_q6_k_vnni<1, T>(group, n_in, RowActs<1>(a, t0), out, ldo); return;
    case 2: packed_q6_k_vnni<2, T>(group, n_in, RowActs<2>(a, t0), out, ldo); return;
    case 3: packed_q6_k_vnni<3, T>(group, n_in, RowActs<3>(a, t0), out, ldo); return;
    default: packed_q6_k_vnni<4, T>(group, n_in, RowActs<4>(a, t0), out, ldo); return;
    }
}

} // namespace

namespace {

// The AVX2 kernels of type T for n_tokens (1..4) tokens. The blocks-of-32 types and the K types
// with a scale per 16 values (Q6_K, Q3_K, Q2_K): their kernels for one token and for several
// (both halves of a group in one pass). Q4_K and Q5_K: four tokens in one pass where a tile has
// four (prefill), so that each weight vector is loaded and unpacked once for four tokens, not
// two. Some accumulators live on the stack then (AVX2 has 16 vector registers), and it is still
// faster: one core, 64 tokens, 2048 x 5632, Q4_K 131-137 -> 147-156 GOP/s, Q5_K 94 -> 111-112
// (scripts/bench-decode-matvec.cpp); otherwise two tokens at a time, then one. The same
// operations per (row, token) pair whatever the count, so the same bits.
template <DType T>
void packed_tokens_avx2(const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0, int n_tokens,
                        float *out, int64_t ldo)
{
    constexpr bool b32 = T == DType::Q8_0 || T == DType::Q4_0 || T == DType::Q4_1 || T == DType::Q5_0 ||
                         T == DType::Q5_1 || b32_table(T);
    constexpr bool k16 = T == DType::Q6_K || T == DType::Q3_K || T == DType::Q2_K;
    if constexpr (b32 || k16) {
        const auto tokens = [&](auto nt) {
            if constexpr (T == DType::Q8_0)
                packed_q8_0_avx2_tokens<nt.value>(group, n_in, a, t0, out, ldo);
            else if constexpr (k16)
                packed_q6_k_avx2_tokens<nt.value, T>(group, n_in, a, t0, out, ldo);
            else
                packed_b32_avx2_tokens<T, nt.value>(group, n_in, a, t0, out, ldo);
        };
        switch (n_tokens) {
        case 4: return tokens(std::integral_constant<int, 4>{});
        case 3: return tokens(std::integral_constant<int, 3>{});
        case 2: return tokens(std::integral_constant<int, 2>{});
        default:
            if constexpr (T == DType::Q8_0)
                return packed_q8_0_avx2_groups<1>(group, 0, n_in, a, t0, out);
            else if constexpr (k16)
                return packed_q6_k_avx2_groups<T, 1>(group, 0, n_in, a, t0, out);
            else
                return packed_b32_avx2_groups<T, 1>(group, 0, n_in, a, t0, out);
        }
    } else {
        if (n_tokens == 4)
            return packed_q4_k_avx2<4, T>(group, n_in, a, t0, out, ldo);
        for (int t = 0; t < n_tokens; t += 2) {
            float *o = out + t * ldo;
            if (t + 1 < n_tokens)
                packed_q4_k_avx2<2, T>(group, n_in, a, t0 + t, o, ldo);
            else
                packed_q4_k_avx2_groups<T, 1>(group, 0, n_in, a, t0 + t, o);
        }
    }
}

// The kernels of set k for type T (VNNI: any 1..4 tokens in one pass).
template <DType T>
void packed_tokens(QKernel k, const uint8_t *group, int64_t n_in, const QuantizedActs &a, int64_t t0, int n_tokens,
                   float *out, int64_t ldo)
{
    if (k == QKernel::Avx2)
        packed_tokens_avx2<T>(group, n_in, a, t0, n_tokens, out, ldo);
    else if constexpr (T == DType::Q6_K || T == DType::Q3_K || T == DType::Q2_K)
        packed_q6_k_like_vnni<T>(group, n_in, a, t0, n_tokens, out, ldo);
    else if constexpr (T == DType::Q4_K || T == DType::Q5_K)
        packed_q4_k_like_vnni<T>(group, n_in, a, t0, n_tokens, out, ldo);
    else
        packed_b32_vnni_n<T>(group, n_in, a, t0, n_tokens, out, ldo);
}

// f(std::integral_constant<DType, T>{}) for the packed type T == type (Q4_K for any other: the
// callers only see packed types).
template <class F> void with_packed_type(DType type, F &&f)
{
    switch (type) {
    case DType::Q8_0: return f(std::integral_constant<DType, DType::Q8_0>{});
    case DType::Q4_0: return f(std::integral_constant<DType, DType::Q4_0>{});
    case DType::Q4_1: return f(std::integral_constant<DType, DType::Q4_1>{});
    case DType::Q5_0: return f(std::integral_constant<DType, DType::Q5_0>{});
    case DType::Q5_1: return f(std::integral_constant<DType, DType::Q5_1>{});
    case DType::IQ4_NL: return f(std::integral_constant<DType, DType::IQ4_NL>{});
    case DType::IQ4_XS: return f(std::integral_constant<DType, DType::IQ4_XS>{});
    case DType::Q2_K: return f(std::integral_constant<DType, DType::Q2_K>{});
    case DType::Q3_K: return f(std::integral_constant<DType, DType::Q3_K>{});
    case DType::Q5_K: return f(std::integral_constant<DType, DType::Q5_K>{});
    case DType::Q6_K: return f(std::integral_constant<DType, DType::Q6_K>{});
    default: return f(std::integral_constant<DType, DType::Q4_K>{});
    }
}

} // namespace

void packed_tile_with(QKernel k, DType type, const uint8_t *packed, int64_t n_in, int64_t g, const QuantizedActs &a,
                      int64_t t0, int n_tokens, float *out, int64_t ldo)
{
    const uint8_t *group = packed + size_t(g) * group_bytes(type, n_in);
    with_packed_type(type, [&](auto t) { packed_tokens<decltype(t)::value>(k, group, n_in, a, t0, n_tokens, out, ldo); });
}

void packed_tile(DType type, const uint8_t *packed, int64_t n_in, int64_t g, const QuantizedActs &a, int64_t t0,
                 int n_tokens, float *out, int64_t ldo)
{
    packed_tile_with(qkernel(), type, packed, n_in, g, a, t0, n_tokens, out, ldo);
}

namespace {

// run(G, i) for groups i .. i + G - 1 of n_groups: four at a time, then the rest together.
template <class Run> void side_by_side(int64_t n_groups, const Run &run)
{
    int64_t i = 0;
    for (; i + 4 <= n_groups; i += 4)
        run(std::integral_constant<int, 4>{}, i);
    switch (n_groups - i) {
    case 3: run(std::integral_constant<int, 3>{}, i); return;
    case 2: run(std::integral_constant<int, 2>{}, i); return;
    case 1: run(std::integral_constant<int, 1>{}, i); return;
    default: return;
    }
}

// One token against the n_groups groups of type T from `first` on (gb bytes apart), G at a
// time (side_by_side), group i's rows at out + 16 i. Q5_K one group at a time, each asking for
// its bytes ahead (where the options allow): its super-block is read in five places (the codes
// of a pair of sub-blocks and all the fifth bits, then the next pair's codes and the same fifth
// bits again), and four groups of it side by side kept more vectors than AVX2's sixteen
// registers hold (GCC spilled them) while the core's own prefetchers fell behind. The AMD EPYC
// without AVX-512 (family 25 model 1), TinyLlama's gate (2048 x 5632) eight times, one token,
// GB/s (scripts/bench-decode-matvec.cpp matmul, alternated runs): one thread 11.1-11.8 -> 16.1-16.9,
// two 17.3-19.6 -> 19.0-25.6; a decode step's products over 22 layers (`layers`), one thread
// 10.5-10.7 -> 12.8-14.6, two 17.2-18.9 -> 23.6-24.7. The other types read as fast or faster
// four at a time there (Q4_K, Q6_K, Q5_0), or within the host's spread (Q5_1).
template <DType T>
void one_token_groups(const uint8_t *first, size_t gb, int64_t n_in, int64_t n_groups, const QuantizedActs &a,
                      int64_t t0, float *out)
{
    if constexpr (T == DType::Q5_K) {
        for (int64_t i = 0; i < n_groups; ++i)
            packed_q4_k_avx2_groups<T, 1>(first + size_t(i) * gb, 0, n_in, a, t0, out + 16 * i);
    } else
        side_by_side(n_groups, [&](auto G, int64_t i) {
            const uint8_t *p = first + size_t(i) * gb;
            if constexpr (T == DType::Q8_0)
                packed_q8_0_avx2_groups<G.value>(p, gb, n_in, a, t0, out + 16 * i);
            else if constexpr (T == DType::Q4_K)
                packed_q4_k_avx2_groups<T, G.value>(p, gb, n_in, a, t0, out + 16 * i);
            else if constexpr (T == DType::Q6_K || T == DType::Q3_K || T == DType::Q2_K)
                packed_q6_k_avx2_groups<T, G.value>(p, gb, n_in, a, t0, out + 16 * i);
            else
                packed_b32_avx2_groups<T, G.value>(p, gb, n_in, a, t0, out + 16 * i);
        });
}

} // namespace

void packed_tiles_with(QKernel k, DType type, const uint8_t *packed, int64_t n_in, int64_t g, int64_t n_groups,
                       const QuantizedActs &a, int64_t t0, int n_tokens, float *out, int64_t ldo)
{
    if (k == QKernel::Avx2 && n_tokens == 1) {
        const size_t gb = group_bytes(type, n_in);
        const uint8_t *first = packed + size_t(g) * gb;
        return with_packed_type(
            type, [&](auto t) { one_token_groups<decltype(t)::value>(first, gb, n_in, n_groups, a, t0, out); });
    }
    for (int64_t i = 0; i < n_groups; ++i)
        packed_tile_with(k, type, packed, n_in, g + i, a, t0, n_tokens, out + 16 * i, ldo);
}

void packed_tiles(DType type, const uint8_t *packed, int64_t n_in, int64_t g, int64_t n_groups, const QuantizedActs &a,
                  int64_t t0, int n_tokens, float *out, int64_t ldo)
{
    packed_tiles_with(qkernel(), type, packed, n_in, g, n_groups, a, t0, n_tokens, out, ldo);
}

namespace {

// out[4 i + t] = rows[t][i] for i < n: four rows of 32-bit values interleaved, a 4 x 4 transpose
// per four values.
void interleave4(const void *const rows[4], int64_t n, void *out)
{
    const auto *r = reinterpret_cast<const uint32_t *const *>(rows);
    auto *o = static_cast<uint32_t *>(out);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(r[0] + i));
        const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(r[1] + i));
        const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(r[2] + i));
        const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(r[3] + i));
        const __m128i lo01 = _mm_unpacklo_epi32(r0, r1), lo23 = _mm_unpacklo_epi32(r2, r3);
        const __m128i hi01 = _mm_unpackhi_epi32(r0, r1), hi23 = _mm_unpackhi_epi32(r2, r3);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(o + 4 * i), _mm_unpacklo_epi64(lo01, lo23));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(o + 4 * i + 4), _mm_unpackhi_epi64(lo01, lo23));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(o + 4 * i + 8), _mm_unpacklo_epi64(hi01, hi23));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(o + 4 * i + 12), _mm_unpackhi_epi64(hi01, hi23));
    }
    for (; i < n; ++i)
        for (int t = 0; t < 4; ++t)
            o[4 * i + t] = r[t][i];
}

} // namespace

namespace {

// pack_acts's storage for the whole tiles of `a`.
void pack_acts_shape(const QuantizedActs &a, PackedActs &out)
{
    constexpr int nt = packed_act_tile;
    const int64_t n = a.n, nb = n / qk, tiles = a.n_tokens / nt;
    out.span = a.span;
    out.n = n;
    out.n_tiles = tiles;
    out.q.resize(size_t(tiles * nt * n));
    out.db.resize(size_t(tiles * nt * nb));
    out.ds.resize(out.db.size());
    out.b32.resize(out.db.size());
    out.b16.resize(size_t(tiles * nt * (n / 16)));
}

// Tiles [begin, end) of `a` copied into `out` (sized by pack_acts_shape).
void pack_acts_tiles(const QuantizedActs &a, PackedActs &out, int64_t begin, int64_t end)
{
    static_assert(packed_act_tile == 4, "interleave4 takes four tokens");
    constexpr int nt = packed_act_tile;
    const int64_t n = a.n, nb = n / qk;
    for (int64_t k = begin; k < end; ++k) {
        const void *q[nt], *db[nt], *ds[nt], *s16[nt];
        for (int t = 0; t < nt; ++t) {
            q[t] = a.q_row(k * nt + t);
            db[t] = a.db_row(k * nt + t);
            ds[t] = a.ds_row(k * nt + t);
            s16[t] = a.s16_row(k * nt + t);
        }
        interleave4(q, n / 4, out.q.data() + k * nt * n);
        interleave4(db, nb, out.db.data() + k * nt * nb);
        interleave4(ds, nb, out.ds.data() + k * nt * nb);
        // The sums per 16 values, interleaved, then the bias terms made of them.
        int32_t *b16 = out.b16.data() + k * nt * (n / 16);
        interleave4(s16, n / 16, b16);
        int32_t *b32 = out.b32.data() + k * nt * nb;
        for (int64_t b = 0; b < nb; ++b)
            for (int t = 0; t < nt; ++t)
                b32[nt * b + t] = -128 * (b16[nt * 2 * b + t] + b16[nt * (2 * b + 1) + t]);
        for (int64_t j = 0; j < nt * (n / 16); ++j)
            b16[j] *= -32;
    }
}

} // namespace

void pack_acts(ThreadPool *pool, const QuantizedActs &a, PackedActs &out)
{
    pack_acts_shape(a, out);
    const auto copy = [&](int64_t begin, int64_t end) { pack_acts_tiles(a, out, begin, end); };
    if (pool)
        pool->parallel_for(out.n_tiles, copy, min_items_per_thread(a.n * packed_act_tile));
    else
        copy(0, out.n_tiles);
}

void quantize_pack_acts(ThreadPool &pool, const float *x, int64_t n_tokens, int64_t n, QuantizedActs &a,
                        PackedActs &out, bool rows_of_tiles, int span)
{
    constexpr int nt = packed_act_tile;
    quantize_acts_shape(a, n_tokens, n, span);
    pack_acts_shape(a, out);
    const int64_t nb = n / qk;
    // A tile of four tokens per item (the tokens after the last whole tile in one more): straight
    // into the tile layout, or, where the rows are wanted too, quantized in rows and then
    // interleaved while they are in the core's cache.
    const int64_t items = (n_tokens + nt - 1) / nt;
    pool.parallel_for(
        items,
        [&](int64_t begin, int64_t end) {
            for (int64_t k = begin; k < end; ++k) {
                if (k < out.n_tiles && !rows_of_tiles) {
                    quantize_tile_vnni(x + k * nt * n, n, out.q.data() + k * nt * n, out.db.data() + k * nt * nb,
                                       out.ds.data() + k * nt * nb, out.b16.data() + k * nt * (n / 16),
                                       out.b32.data() + k * nt * nb, span);
                    continue;
                }
                quantize_acts_tokens(x, k * nt, std::min(n_tokens, (k + 1) * nt), a);
                if (k < out.n_tiles)
                    pack_acts_tiles(a, out, k, k + 1);
            }
        },
        min_items_per_thread(n * nt));
}

namespace {

// A tile against NG groups of a blocks-of-32 type side by side.
template <int NG>
void b32_tile_acts(DType type, const uint8_t *group, int64_t n_in, const TileActs &x, float *out, int64_t ldo)
{
    constexpr int nt = packed_act_tile;
    switch (type) {
    case DType::Q8_0: packed_b32_vnni<DType::Q8_0, nt, TileActs, NG>(group, n_in, x, out, ldo); return;
    case DType::Q4_0: packed_b32_vnni<DType::Q4_0, nt, TileActs, NG>(group, n_in, x, out, ldo); return;
    case DType::Q5_1: packed_b32_vnni<DType::Q5_1, nt, TileActs, NG>(group, n_in, x, out, ldo); return;
    case DType::Q4_1: packed_b32_vnni<DType::Q4_1, nt, TileActs, NG>(group, n_in, x, out, ldo); return;
    case DType::Q5_0: packed_b32_vnni<DType::Q5_0, nt, TileActs, NG>(group, n_in, x, out, ldo); return;
    case DType::IQ4_NL: packed_b32_vnni<DType::IQ4_NL, nt, TileActs, NG>(group, n_in, x, out, ldo); return;
    default: packed_b32_vnni<DType::IQ4_XS, nt, TileActs, NG>(group, n_in, x, out, ldo); return;
    }
}

// One group of a K type against the NT tokens of x.
template <int NT, class Acts>
void k_quant_tile(DType type, const uint8_t *group, int64_t n_in, const Acts &x, float *out, int64_t ldo, int span)
{
    if (span == act_span_super) {
        switch (type) {
        case DType::Q4_K: packed_q4_k_span_vnni<NT, DType::Q4_K>(group, n_in, x, out, ldo); return;
        case DType::Q5_K: packed_q4_k_span_vnni<NT, DType::Q5_K>(group, n_in, x, out, ldo); return;
        case DType::Q3_K: packed_q6_k_vnni<NT, DType::Q3_K, Acts, true>(group, n_in, x, out, ldo); return;
        case DType::Q2_K: packed_q6_k_vnni<NT, DType::Q2_K, Acts, true>(group, n_in, x, out, ldo); return;
        default: packed_q6_k_vnni<NT, DType::Q6_K, Acts, true>(group, n_in, x, out, ldo); return;
        }
    }
    switch (type) {
    case DType::Q4_K: packed_q4_k_vnni<NT, DType::Q4_K>(group, n_in, x, out, ldo); return;
    case DType::Q5_K: packed_q4_k_vnni<NT, DType::Q5_K>(group, n_in, x, out, ldo); return;
    case DType::Q3_K: packed_q6_k_vnni<NT, DType::Q3_K>(group, n_in, x, out, ldo); return;
    case DType::Q2_K: packed_q6_k_vnni<NT, DType::Q2_K>(group, n_in, x, out, ldo); return;
    default: packed_q6_k_vnni<NT, DType::Q6_K>(group, n_in, x, out, ldo); return;
    }
}

} // namespace

void packed_tile_acts(DType type, const uint8_t *packed, int64_t n_in, int64_t g, int n_groups, const PackedActs &a,
                      int64_t tile, float *out, int64_t ldo, int n_tiles)
{
    const uint8_t *group = packed + size_t(g) * group_bytes(type, n_in);
    constexpr int nt = packed_act_tile;
    if (is_block32(type)) {
        for (int k = 0; k < n_tiles; ++k) {
            const TileActs x(a, tile + k);
            float *o = out + k * nt * ldo;
            switch (n_groups) {
            case 3: b32_tile_acts<3>(type, group, n_in, x, o, ldo); break;
            case 2: b32_tile_acts<2>(type, group, n_in, x, o, ldo); break;
            default: b32_tile_acts<1>(type, group, n_in, x, o, ldo); break;
            }
        }
        return;
    }
    // The K types a group at a time (side by side measured slower for them: docs/cpu-kernels.md),
    // two tiles together.
    for (int k = 0; k < n_groups; ++k, group += group_bytes(type, n_in), out += packed_group_rows) {
        if (n_tiles == 2)
            k_quant_tile<2 * nt>(type, group, n_in, TileActs8(a, tile), out, ldo, a.span);
        else
            k_quant_tile<nt>(type, group, n_in, TileActs(a, tile), out, ldo, a.span);
    }
}

} // namespace longscope
