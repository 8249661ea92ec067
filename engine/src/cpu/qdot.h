// Integer dot products between quantized weights (Q8_0, Q4_0, Q4_K, Q6_K) and activations
// quantized to 8 bits on the fly, the scheme llama.cpp uses on CPUs: the weights are never
// widened to floats; each block's integer products are summed exactly in int32 and scaled once.
//
// Activations: each block of 32 values x gets d = max|x| / 127 and q = round(x / d), so
// |x - d q| <= d / 2 (products whose matrices are all K types take the max over 256 values
// instead under the VNNI kernels, whatever the number of tokens: QuantizedActs::span, as
// llama.cpp's Q8_K). A weight block with values s * (u - bias) (u the stored unsigned code,
// s its scale) contributes s * d * (sum(u q) - bias * sum(q)); Q4_K adds - dmin * m * d * sum(q)
// per sub-block. Every integer sum is exact; the only error beyond float rounding is the
// activations' rounding, bounded by sum_i |w_i| * d_block(i) / 2.
//
// Kernels, chosen at run time: AVX-512 VNNI (vpdpbusd, 64 products per instruction), AVX2
// (vpmaddubsw + vpmaddwd) and portable C++. Each (row, token) pair is computed by the same
// sequence of operations whatever the tile it sits in, so batched and single-token runs agree
// bit for bit.
#pragma once

#include "cpu/aligned_vector.h"
#include "cpu/kernel_table.h"
#include "longscope/types.h"

#include <cstdint>
#include <vector>

namespace longscope {

class ThreadPool;

// One scale per 32 values (the default), or per 256 (qk_k): the span a block's scale is found
// over. With 256 every block of a span stores the span's d (d = max|x| over the 256 / 127), so
// kernels that read a scale per block read the same layout; the packed Q4_K and Q5_K kernels
// apply their sub-block scales to integer sums and convert once per super-block instead
// (packed.cpp). llama.cpp's Q8_K activations take the same span.
constexpr int act_span_block = 32;
constexpr int act_span_super = 256;

struct QuantizedActs {
    int64_t n = 0;        // values per token (a multiple of 32; of 256 with span 256)
    int64_t n_tokens = 0;
    int span = act_span_block; // values sharing one scale: 32 or 256
    ScratchVector<int8_t> q; // [n_tokens, n]
    ScratchVector<float> dl; // [n_tokens, n / 4]: the scale d of the block each group of 4 values is in
    ScratchVector<float> db; // [n_tokens, n / 32]: d per block
    ScratchVector<float> ds; // [n_tokens, n / 32]: d * sum(q) per block
    ScratchVector<int32_t> s16; // [n_tokens, n / 16]: sum(q) per 16 values (packed Q6_K's bias)

    const int8_t *q_row(int64_t t) const { return q.data() + t * n; }
    const float *dl_row(int64_t t) const { return dl.data() + t * (n / 4); }
    const float *db_row(int64_t t) const { return db.data() + t * (n / 32); }
    const float *ds_row(int64_t t) const { return ds.data() + t * (n / 32); }
    const int32_t *s16_row(int64_t t) const { return s16.data() + t * (n / 16); }
};

// Quantizes x [n_tokens, n] (n a multiple of 32) into `out`, reusing its storage. Splits the
// tokens over `pool` when there are several. The kernel is the kernel table's level
// (quantize_acts_level); every level gives the same bits.
// `span`: act_span_block or act_span_super (n then a multiple of 256).
void quantize_acts(ThreadPool *pool, const float *x, int64_t n_tokens, int64_t n, QuantizedActs &out,
                   int span = act_span_block);
// The same with the kernel of `level` (one this CPU runs).
void quantize_acts_with(VectorLevel level, ThreadPool *pool, const float *x, int64_t n_tokens, int64_t n,
                        QuantizedActs &out, int span = act_span_block);
// The level quantize_acts uses now.
VectorLevel quantize_acts_level();
// quantize_acts in parts: `out` sized for n_tokens tokens of n values (storage reused), then
// tokens [t0, t1) of x [n_tokens, n] quantized into it at quantize_acts_level(), the same bits.
void quantize_acts_shape(QuantizedActs &out, int64_t n_tokens, int64_t n, int span = act_span_block);
void quantize_acts_tokens(const float *x, int64_t t0, int64_t t1, QuantizedActs &out);
// Four tokens of x (rows n apart) quantized as quantize_acts does (the same bits), written only
// in the tile layout the packed VNNI kernels read (PackedActs, packed.h: this tile's q, db, ds,
// b16 and b32). CPUs with AVX-512 (those the VNNI kernels run on) only.
void quantize_tile_vnni(const float *x, int64_t n, int8_t *q, float *db, float *ds, int32_t *b16, int32_t *b32,
                        int span = act_span_block);

// Whether the integer path handles weights of this type.
bool has_integer_dot(DType type);

// The kernel in use, the kernel table's (kernel_table.h): VNNI where the CPU has AVX-512 VNNI
// and the level is AVX-512, else AVX2, else portable (a lower forced level lowers it with it).
QKernel qkernel();
// Every kernel this CPU runs, best first (tests compare them).
int available_qkernels(QKernel *out, int max);

// out[t * ldo + r] = sum_i w_r[i] * x_(t0 + t)[i] for r < n_rows (<= 4), t < n_tokens (<= 4),
// with x the quantized activations `a`; rows[r] points at row r's first block.
void qgemm_tile(DType type, const void *const *rows, int n_rows, const QuantizedActs &a, int64_t t0, int n_tokens,
                float *out, int64_t ldo);
void qgemm_tile_with(QKernel k, DType type, const void *const *rows, int n_rows, const QuantizedActs &a, int64_t t0,
                     int n_tokens, float *out, int64_t ldo);

// y[r] = row r . token t for r < n_rows, row r at base + r * row_stride: the 1 x 1 tile (the
// same bits) with the kernel chosen once for all the rows (decode).
void qgemv_rows(QKernel k, DType type, const void *base, size_t row_stride, int64_t n_rows, const QuantizedActs &a,
                int64_t t, float *y);

// The token block the kernel handles best (4 with VNNI, 2 with AVX2, 4 portable).
int qgemm_token_block(QKernel k);

} // namespace longscope
