// Matrix products over many tokens on Intel AMX tiles (Advanced Matrix Extensions): tdpbf16ps
// multiplies a 16 x 32 BF16 tile of weights by a 32 x 16 BF16 tile of activations into a
// 16 x 16 float tile, 8192 multiply-adds per instruction (a one-core loop of it on the Xeon in
// docs/cpu-kernels.md: 3.1-3.3 TFLOP/s, about four times its vpdpbusd loop's 8-bit rate).
//
// Each call rounds the activations to BF16 once into the tile layout (pairs of inputs
// interleaved per token), then every thread takes panels of up to 256 weight rows (about
// 1 MiB of BF16): a panel is widened to float (any weight type: quantized, packed, F16, F32,
// BF16), rounded to BF16 into tiles, and multiplied by every token in blocks of 32 rows by 32
// tokens (four accumulator tiles).
//
// Precision: a value v is carried as 1 or 2 BF16 terms, hi = bf16(v) and lo = bf16(v - hi),
// and the products summed are hi_w*hi_x (+ hi_w*lo_x + lo_w*hi_x with two terms each side;
// lo_w*lo_x is below float rounding). Two terms hold 16 significant bits: an F16 weight
// exactly, an F32 weight or activation to 2^-17 relative; one term holds 8 bits, as the
// AVX-512 BF16 path rounds them.
#pragma once

#include "cpu/aligned_vector.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace longscope {

class ThreadPool;
struct WeightView;

// Whether this CPU has AMX tiles with BF16 products (cpuid), the operating system saves
// their state (XCR0), and the kernel let this process use them (arch_prctl
// ARCH_REQ_XCOMP_PERM, asked on the first call; a process is refused, e.g., where a
// signal stack is too small for the tile state). Read once.
bool amx_bf16_usable();

// BF16 terms per value: weights, activations (1 or 2 each).
struct AmxTerms {
    int weight = 1;
    int act = 1;
};

// The terms used by default for weights of `type`: F32 and F16 two and two (F16 exact), BF16
// one and two, quantized types one and one (the AVX-512 BF16 path's rounding).
AmxTerms amx_default_terms(int dtype);

// ys[i][t * n_out_i + r] = row r of ws[i] . x_t for every weight in ws (all with n_in inputs,
// n_in a multiple of 32) and t < n_tokens; x is [n_tokens, n_in]. The activations are rounded
// once for all the weights. Each weight takes amx_default_terms of its type, or one term for
// weights and activations alike where `one_term` (the BF16 path's rounding, asked for).
// Needs amx_bf16_usable().
void matmul_amx(ThreadPool &pool, std::span<const WeightView *const> ws, std::span<float *const> ys,
                const float *x, int64_t n_tokens, bool one_term);

// The compute probe's loop (cpu/compute_peak.h): `iterations` times four tdpbf16ps on four
// accumulator tiles, amx_probe_ops_per_iteration operations each time. Needs amx_bf16_usable().
float amx_bf16_probe(int64_t iterations);
constexpr double amx_probe_ops_per_iteration = 4 * 16 * 16 * 32 * 2.0;

// Small products on the tiles (attention's scores and weighted values): an operand in BF16
// terms and tile layout, the first one by rows (row i: the k values that row i of the result
// sums over), the second by columns (column j: those of column j). k is padded to a multiple
// of 32 with zeros where the packer is given fewer (amx_pack_columns); the first operand's
// rows must already hold a multiple of 32 values. The buffer grows and is kept between uses.
struct AmxMatrix {
    AlignedVector<uint16_t> buf; // tiles on cache lines (a tile row across two lines loads slower)
    int64_t n = 0;                     // rows (first operand) or columns (second)
    int64_t n_tiles = 0, n_chunks = 0; // tiles of 16 along n, chunks of 32 along k
    int terms = 1;
    void shape(int64_t n, int64_t k, int terms);
    size_t term_stride() const;
};
// First operand: n rows of k values (k a multiple of 32), row i at x + i * ldx.
void amx_pack_rows(const float *x, int64_t ldx, int64_t n, int64_t k, int terms, AmxMatrix &out);
// Second operand whose column j is row j of x: n rows of k values (k a multiple of 32).
void amx_pack_row_columns(const float *x, int64_t ldx, int64_t n, int64_t k, int terms, AmxMatrix &out);
// Second operand whose column j is column j of x: k rows (any number) of n values (n a multiple
// of 16), row i at x + i * ldx.
void amx_pack_columns(const float *x, int64_t ldx, int64_t k, int64_t n, int terms, AmxMatrix &out);
// c[i * ldc + j] = sum over k of a[i][k] b[k][j], summing hi*hi (+ hi*lo where b has two terms,
// + lo*hi where a has), for whole tiles: i < 16 a.n_tiles, j < 16 b.n_tiles (c must have room;
// past a.n and b.n, what the padding gives). Needs amx_bf16_usable().
void amx_product(const AmxMatrix &a, const AmxMatrix &b, float *c, int64_t ldc);

// Bytes the calling thread keeps between calls (the activations in tile layout).
uint64_t amx_scratch_bytes();

} // namespace longscope
