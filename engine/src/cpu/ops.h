// CPU reference ops. Every other backend is checked against these.
#pragma once

#include "longscope/cpu_options.h"
#include "longscope/hparams.h"
#include "longscope/model.h"
#include "model/weights.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace longscope {

class ThreadPool;

float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);

// Row `row` of a weight as f32 into out[n_in].
void weight_row_f32(const WeightView &w, int64_t row, float *out);

float dot_f32(const float *a, const float *b, int64_t n);

// y[t, o] = sum_i W[o, i] * x[t, i] for t < n_tokens. x: [n_tokens, n_in], y: [n_tokens, n_out],
// W: [n_in, n_out] (n_out rows of n_in). Each weight row is read once for all tokens.
void matmul(ThreadPool &pool, const WeightView &w, const float *x, float *y, int64_t n_tokens);

// How quantized weights are multiplied. Auto: integer dot products (activations quantized to
// 8 bits per block of 32, qdot.h) for packed matrices (cpu/packed.h) and below
// bf16_min_tokens tokens; BF16 dot products (weights dequantized once per call, activations
// rounded to BF16) for other matrices from bf16_min_tokens tokens on where the CPU has them.
// Dequantize: rows widened to float into a buffer, then the float kernel (a reference path).
// Float weights take the float kernel, except F16 weights from bf16_min_tokens tokens on when
// Bf16 is asked for (rounded to BF16 like the activations; never under Auto).
// The kernel table's forced path (CpuOptions::quant_matmul) replaces Auto.
// Amx (cpu/amx.h), where the kernel table has the tiles: from amx_min_tokens tokens on under
// Auto every weight type but F32, and packed matrices only of the types whose packed rows
// widen with vector code (dequantize_packed_level); any type and token count when asked for.
using QuantMatmul = QuantMatmulPath;
constexpr int64_t bf16_min_tokens = 16;
constexpr int64_t amx_min_tokens = 16;
void matmul_with(ThreadPool &pool, const WeightView &w, const float *x, float *y, int64_t n_tokens, QuantMatmul how);
// The path `how` resolves to for weight w over n_tokens tokens (Dequantize for float weights:
// the float kernel, but for the F16 case above).
QuantMatmul matmul_path(const WeightView &w, int64_t n_tokens, QuantMatmul how = QuantMatmul::Auto);

// Bytes the calling thread's matrix products keep between calls (activations quantized to 8
// bits or rounded to BF16 for quantized weights), for the memory ledger's scratch.
uint64_t matmul_scratch_bytes();

// Several products of the same activations (Q, K and V; gate and up) in one pass over the
// thread pool: each out.y gets out.w times x, exactly as separate matmul calls give it.
struct MatmulOut {
    const WeightView *w;
    float *y;
};
void matmul_group(ThreadPool &pool, std::span<const MatmulOut> outs, const float *x, int64_t n_tokens,
                  QuantMatmul how = QuantMatmul::Auto);

// The elementwise ops below split their rows (or values) over `pool` when every thread gets
// at least k_min_work_per_thread operations (a decode step's single row stays on the caller);
// without a pool they run on the caller. Every row and value is computed alike whichever piece
// holds it: a split changes no bits.

// fn(begin, end) over rows [0, n_rows) of about `row_work` operations each.
void for_rows(ThreadPool *pool, int64_t n_rows, int64_t row_work, const std::function<void(int64_t, int64_t)> &fn);
// fn(begin, end) over values [0, n) of a few operations each, in pieces that start at multiples
// of 16 (whole vectors).
void for_values(ThreadPool *pool, int64_t n, const std::function<void(int64_t, int64_t)> &fn);

// out[t] = x[t] / rms(x[t]) * (weight_offset + weight), per row of width n.
void rmsnorm(const float *x, const WeightView &weight, float *out, int64_t n_tokens, int64_t n,
             float eps, float weight_offset = 0.0f, ThreadPool *pool = nullptr);

// The cos and sin of RoPE's angles for a run of positions, laid out so that one formula rotates
// either style: dimension j of a head (j < n_rot) becomes x[j] * cos[j] + x[partner(j)] * sin[j],
// partner(j) = j ^ 1 for interleaved pairs and j +- n_rot/2 for rotate_half pairs, the sin
// negated on the pair's first dimension. Row t (n_rot floats) is position t's.
struct RopeTable {
    int n_rot = 0;
    RopeStyle style = RopeStyle::Interleaved;
    std::vector<float> cos, sin;
};
// positions[t] is the (already scaled) position of token t; inv_freq[i] = base^(-2i/n_rot).
// Angles in double, cos and sin rounded to float (as the rotation always took them).
void rope_table(RopeTable &table, int n_rot, RopeStyle style, std::span<const double> positions,
                std::span<const double> inv_freq);
// Rotates the first table.n_rot dims of each head of x [n_tokens, n_heads, head_dim] in place,
// token t by the table's row t.
void rope_apply(float *x, int64_t n_tokens, int n_heads, int head_dim, const RopeTable &table,
                ThreadPool *pool = nullptr);
// Both in one call.
void rope(float *x, int64_t n_tokens, int n_heads, int head_dim, int n_rot, RopeStyle style,
          std::span<const double> positions, std::span<const double> inv_freq, ThreadPool *pool = nullptr);

// out = silu(gate) * up, elementwise over n values.
void swiglu(const float *gate, const float *up, float *out, int64_t n, ThreadPool *pool = nullptr);

// out = gelu(gate) * up (tanh approximation), elementwise over n values.
void geglu(const float *gate, const float *up, float *out, int64_t n, ThreadPool *pool = nullptr);

// x = cap * tanh(x / cap) over n values.
void softcap(float *x, float cap, int64_t n, ThreadPool *pool = nullptr);

// Softmax of n values in place (plain attention's, in cpu/attention.cpp): e^(x - max) by the
// attention kernels' vector exp, within 1 ulp, the sum in double; the same bits at every
// kernel level where the CPU has x86-64-v3.
void softmax_inplace(float *x, int64_t n);

} // namespace longscope
