// Quantized matrices re-laid out for the CPU's integer kernels.
//
// A Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL or IQ4_XS matrix is stored row after row (quant.h): a matrix-vector product then needs
// one horizontal reduction and one float scale step per row and sub-block. Packed, sixteen
// rows are interleaved so that each 32-bit lane of a 512-bit register holds one row: a single
// vpdpbusd multiplies four weights of each of the sixteen rows by the same four activation
// values (broadcast to every lane), and the scales are applied to sixteen rows at once. The
// weights stream as one sequence per group of sixteen rows, and the result of a group is one
// vector store.
//
// A group of 16 rows is the rows' super-blocks in order, each a block of a fixed size (a
// multiple of 64 bytes, so blocks stay aligned when the buffer is). Q4_K, 2368 bytes:
//
//   [   0,   32) f16 d[16]            the rows' super-block scales
//   [  32,   64) f16 dmin[16]         the rows' super-block minimum scales
//   [  64,  192) u8  sc[8][16]        6-bit scale of sub-block j of row r at 16 j + r
//   [ 192,  320) u8  m[8][16]         6-bit min of sub-block j of row r at 16 j + r
//   [ 320, 2368) u8  qs[4][8][16][4]  pair p (sub-blocks 2p, 2p+1), word w, row r: the four
//                                     bytes qs[32 p + 4 w .. + 3] of the row's block (low
//                                     nibbles: values 64 p + 4 w + c of sub-block 2p; high
//                                     nibbles: values 64 p + 32 + 4 w + c of sub-block 2p+1)
//
// Q5_K (5-bit codes, x = (d * sc) * q - dmin * m as Q4_K), 2880 bytes: the Q4_K block with
// each code's low four bits, then each code's fifth bit:
//
//   [2368, 2880) u8  qh[8][16][4]     word w, row r: the row's bytes qh[4 w .. 4 w + 3] (bit j
//                                     of qh[l]: the fifth bit of value l of sub-block j)
//
// Q6_K (6-bit codes q, x = (d * sc) * (q - 32), a scale per 16 values), 3392 bytes:
//
//   [   0,   32) f16 d[16]
//   [  32,  288) i8  sc[16][16]       scale of group g (values 16 g .. 16 g + 15) of row r
//   [ 288, 3360) per group g, 192 bytes: two 64-byte vectors of low four bits and one of high
//                two bits. Word w of the group is values 16 g + 4 w + c (c < 4); in each
//                vector, row r owns bytes 4 r + c. Vector 0 holds words 0 (low nibbles) and 1
//                (high nibbles), vector 1 words 2 and 3; the high-bit vector holds word w's
//                top two bits at bits 2 w, 2 w + 1.
//   [3360, 3392) zero
//
// Q3_K (3-bit codes q, x = (d * sc) * (q - 4), a signed scale per 16 values), 1856 bytes: the
// Q6_K block's d and sc (sc already minus 32), then the codes in 2 + 1 bits:
//
//   [ 288, 1824) per pair of groups 2k, 2k + 1, 192 bytes: the low two bits of group 2k, of
//                group 2k + 1 (64 bytes each: row r owns bytes 4 r + c, word w's code c at bits
//                2 w, 2 w + 1), then one vector of third bits (byte 4 r + c: group 2k's word w
//                at bit w, group 2k + 1's at bit 4 + w)
//   [1824, 1856) zero
//
// Q2_K (2-bit codes q, x = (d * sc) * q - dmin * m, a 4-bit scale and minimum per 16 values),
// 1600 bytes:
//
//   [   0,   32) f16 d[16]
//   [  32,   64) f16 dmin[16]
//   [  64,  320) u8  sc[16][16]       scale of group g of row r
//   [ 320,  576) u8  m[16][16]        minimum of group g of row r
//   [ 576, 1600) per group g, 64 bytes: row r owns bytes 4 r + c, word w's code c at bits 2 w,
//                2 w + 1
//
// Q8_0 (x = d * q) and Q4_0 (x = d * (q - 8)), a scale per 32 values, go in pairs of blocks,
// each pair the sixteen rows' scales of both blocks in one 64-byte line, then the two blocks'
// codes, so the group streams in order and every 64-byte vector of codes is aligned:
//
//   [ 0, 64)   f16 d[2][16]         the pair's scales, block 2k's then block 2k+1's (zeros
//                                   when the row's last block is alone in its pair)
//   Q8_0, then two blocks of u8 q[8][16][4]: word w (values 4 w .. 4 w + 3), row r: the four
//         codes + 128 (unsigned); 64 + 2 x 512 = 1088 bytes a pair
//   Q4_0, then two blocks of u8 qs[4][16][4]: word w, row r: the row's bytes qs[4 w .. 4 w + 3]
//         (low nibbles: values 4 w + c, high nibbles: values 16 + 4 w + c); 576 bytes a pair
//
// Q5_1 (x = d * q + m, 5-bit codes) has a second 64-byte line after the scales, the pair's
// minimums m[2][16], and each block is the Q4_0 block of low four bits followed by 64 bytes of
// fifth bits: byte 4 r + c, bit 2 w: of value 4 w + c, bit 2 w + 1: of value 16 + 4 w + c;
// 128 + 2 x 320 = 768 bytes a pair. Q4_1 (x = d * q + m, 4-bit codes) is Q5_1 without the fifth
// bits (128 + 2 x 256 = 640 bytes a pair), Q5_0 (x = d * (q - 16)) Q5_1 without the minimums
// (64 + 2 x 320 = 704), IQ4_NL (x = d * iq4_nl_values[q]) is laid out as Q4_0. IQ4_XS (x = dl *
// iq4_nl_values[q] per block of 32 of a super-block, dl = d * (scale - 32)) is IQ4_NL with each
// block's dl as f32, exact (an 11-bit d times a 6-bit scale; f16 cannot hold it): the pair's
// scales take two lines, block 2k's sixteen f32 then block 2k + 1's (128 + 2 x 256 = 640 bytes
// a pair).
//
// F16 and BF16 (at the AVX-512 and AVX2 levels without AMX tiles; the float kernel gemm_packed_half,
// gemm.h) go in panels of two groups, 32 rows: for each input in turn, the two groups'
// sixteen values, one 64-byte line, so that a prefill tile of 32 rows reads whole lines and
// decode reads a panel as one sequential stream (panel p at 32 p n_in values):
//
//   [64 i + 32 k, 64 i + 32 k + 32) f16 or bf16 w[16]   value i of rows 32 p + 16 k .. + 15
//
// Nothing is rounded: the packed matrix holds exactly the values of the original, and
// dequantize_packed_row gives the original row bit for bit.
#pragma once

#include "cpu/qdot.h"
#include "longscope/types.h"
#include "model/weights.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace longscope {

class ThreadPool;
struct WeightView;
struct CpuKernelTable;

constexpr int64_t packed_group_rows = 16;
// F16 and BF16: groups per panel, and where value i of group g's first row is (in values).
constexpr int64_t packed_half_panel_groups = 2;
constexpr int64_t packed_half_at(int64_t n_in, int64_t g, int64_t i)
{
    return (g / packed_half_panel_groups) * packed_half_panel_groups * packed_group_rows * n_in +
           i * packed_half_panel_groups * packed_group_rows + (g % packed_half_panel_groups) * packed_group_rows;
}
constexpr int64_t packed_q4_k_block_bytes = 2368;
constexpr int64_t packed_q5_k_block_bytes = 2880;
constexpr int64_t packed_q6_k_block_bytes = 3392;
constexpr int64_t packed_q3_k_block_bytes = 1856;
constexpr int64_t packed_q2_k_block_bytes = 1600;
constexpr int64_t packed_q8_0_block_bytes = 512; // the codes of one block of 32; the scales apart
constexpr int64_t packed_q4_0_block_bytes = 256;
constexpr int64_t packed_q5_1_block_bytes = 320;

// Whether matrices of this type and shape can be packed ([n_in, n_out] with n_out a multiple
// of 16 and n_in of 256 for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS, of 32 for Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1 and IQ4_NL, any n_in for F16 and BF16, whose n_out must be a multiple of 32).
bool packable(DType type, int64_t n_in, int64_t n_out);

// Whether the CPU kernels in use here want `w` packed: packable, a 2-D matrix, and the kernel
// table packs (a packed kernel for the integer kernel set in use, and CpuOptions::pack_weights).
bool cpu_wants_packed(const WeightView &w);
// The same for a given kernel table (the one a weight preparer was made with).
bool cpu_packs(const CpuKernelTable &t, const WeightView &w);

// Bytes of the packed copy of a packable [n_in, n_out] matrix.
size_t packed_size(DType type, int64_t n_in, int64_t n_out);

// Writes row groups [g0, g1) of the packed copy of `src` (the original rows, n_in per row)
// into dst (packed_size bytes). Groups are independent, so threads may split them.
void pack_rows(DType type, const uint8_t *src, int64_t n_in, uint8_t *dst, int64_t g0, int64_t g1);

// Row `row` of a packed matrix as floats, bit for bit what dequantize_row gives for the
// original row, with the kernel dequantize_packed_level names.
void dequantize_packed_row(DType type, const uint8_t *packed, int64_t n_in, int64_t row, float *out);
// The scalar version it uses below the AVX-512 level (the same bits).
void dequantize_packed_row_portable(DType type, const uint8_t *packed, int64_t n_in, int64_t row, float *out);
// The kernel dequantize_packed_row runs for `type` now: AVX-512 for every packed type at that
// level, else portable.
VectorLevel dequantize_packed_level(DType type);

// Rows 16 g .. 16 g + 15 (group g) of a packed matrix widened to BF16, the values
// dequantize_packed_row gives rounded to the nearest even BF16: for each block b of 32 inputs,
// sixteen rows of 32 BF16 at out + b * block_stride (row r 32 values on). The AMX panels'
// layout (amx.cpp), written a block at a time from the group's own layout instead of row by
// row. False where `type` has no such kernel (Q8_0, Q4_K and Q5_K have one) or the CPU lacks AVX-512
// BF16;
// the caller then widens row by row.
bool widen_packed_group_bf16(DType type, const uint8_t *packed, int64_t n_in, int64_t g, uint16_t *out,
                             size_t block_stride);

// Whether this CPU runs the packed kernel of integer kernel set k (VNNI or AVX2; there is no
// portable one).
bool packed_kernel_available(QKernel k);

// out[t * ldo + r] = row (16 g + r) . token (t0 + t) for r < 16 and t < n_tokens (<= 4), with
// the activations quantized to 8 bits (qdot.h), by the packed kernel of set k (available).
// Each (row, token) pair is computed by the same operations whatever n_tokens is, and the VNNI
// and AVX2 kernels do the same float operations on exact integer sums: the same bits.
void packed_tile_with(QKernel k, DType type, const uint8_t *packed, int64_t n_in, int64_t g, const QuantizedActs &a,
                      int64_t t0, int n_tokens, float *out, int64_t ldo);
// The same with the kernel set in use (qkernel()).
void packed_tile(DType type, const uint8_t *packed, int64_t n_in, int64_t g, const QuantizedActs &a, int64_t t0,
                 int n_tokens, float *out, int64_t ldo);
// packed_tile_with for the n_groups groups from g on, group g + i's rows at out + 16 i: the
// same bits. One token under the AVX2 kernels reads up to four groups side by side (a core
// reads several nearby streams faster than one).
void packed_tiles_with(QKernel k, DType type, const uint8_t *packed, int64_t n_in, int64_t g, int64_t n_groups,
                       const QuantizedActs &a, int64_t t0, int n_tokens, float *out, int64_t ldo);
// The same with the kernel set in use (qkernel()).
void packed_tiles(DType type, const uint8_t *packed, int64_t n_in, int64_t g, int64_t n_groups, const QuantizedActs &a,
                  int64_t t0, int n_tokens, float *out, int64_t ldo);

// Quantized activations (qdot.h) of tiles of packed_act_tile tokens interleaved for the VNNI
// kernels, so that one pointer reaches a tile's four tokens: tile k holds tokens 4 k .. 4 k + 3
// (the tokens after the last whole tile are not copied), and within it, for each block of 32
// values, word w (values 4 w .. 4 w + 3) of token t is at bytes 16 w + 4 t of the block's 128.
constexpr int packed_act_tile = 4;
struct PackedActs {
    int span = act_span_block;  // QuantizedActs::span of the activations copied
    int64_t n = 0;              // values per token
    int64_t n_tiles = 0;
    ScratchVector<int8_t> q;    // [tile][n / 32][8][4 tokens][4]
    ScratchVector<float> db, ds; // [tile][n / 32][4 tokens]: d and d * sum(q) per block
    // The kernels' bias terms, ready to broadcast from memory (a product and a move from a
    // general register per token took a slot of the vpdpbusd's pipe on an AMD EPYC):
    ScratchVector<int32_t> b16; // [tile][n / 16][4 tokens]: -32 sum(q) per 16 values (Q6_K)
    ScratchVector<int32_t> b32; // [tile][n / 32][4 tokens]: -128 sum(q) per block (Q8_0; Q4_0 / 16)

    size_t bytes() const { return q.capacity() + 4 * (db.capacity() + ds.capacity() + b16.capacity() + b32.capacity()); }
};

// Copies the whole tiles of `a` into `out`, reusing its storage; splits the tiles over `pool`.
void pack_acts(ThreadPool *pool, const QuantizedActs &a, PackedActs &out);
// quantize_acts(&pool, x, n_tokens, n, a) then pack_acts(&pool, a, out), the same bits, in one
// pass over the tiles: each tile is interleaved as soon as its tokens are quantized. Without
// rows_of_tiles the rows of `a` hold only the tokens after the last whole tile (the tiles go
// straight into `out`, for products that read whole tiles from it alone). The VNNI kernels'
// CPUs (AVX-512) only.
void quantize_pack_acts(ThreadPool &pool, const float *x, int64_t n_tokens, int64_t n, QuantizedActs &a,
                        PackedActs &out, bool rows_of_tiles = true, int span = act_span_block);

// packed_tile_with(QKernel::Vnni, ...) for the four tokens of tile `tile` of `a` (CPUs with
// the VNNI kernel only): the same operations, so the same bits. One pointer walks the tile's
// activations where the row layout needs one per token, which left the kernels short of
// general registers.
// n_groups (1 to 3) groups from group g on, side by side: rows 16 g .. 16 (g + n_groups) - 1
// (the groups share each activation load; each row's sums are the same operations).
// n_tiles (1 or 2): tiles tile and tile + 1 together, tokens 4 tile .. 4 tile + 7 (the K types
// unpack each group's codes once for both; the same operations per row and token).
void packed_tile_acts(DType type, const uint8_t *packed, int64_t n_in, int64_t g, int n_groups, const PackedActs &a,
                      int64_t tile, float *out, int64_t ldo,
                      int n_tiles = 1);

} // namespace longscope
