// Vector kernels for the hot loops, chosen at run time by the kernel table (AVX-512,
// AVX2+FMA+F16C, or portable C++), so one binary runs on any x86-64 and uses what it has.
#pragma once

#include "cpu/kernel_table.h"

#include <cstdint>

namespace longscope {

struct CpuKernels {
    const char *name;
    // sum_i a[i] * b[i]
    float (*dot)(const float *a, const float *b, int64_t n);
    // out[t] = sum_i w[i] * x[t * stride + i] for t < 4: one weight row against four tokens,
    // loading the row once.
    void (*dot4)(const float *w, const float *x, int64_t stride, int64_t n, float *out);
    // Half-precision rows to float (any alignment).
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*bf16_to_f32)(const uint16_t *src, float *dst, int64_t n);

    // Elementwise ops of the forward pass (ops.h). The portable set is the scalar reference
    // (std::exp, std::tanh, sequential sums); the AVX2 and AVX-512 sets run one vector body
    // sixteen values at a time and give each other's bits (the last few values of an array go
    // through a padded copy of the same arithmetic, so a value's result never depends on where
    // an array or a split starts). Vector exp within 1 ulp (0.88 measured), tanh within 1.5
    // (1.30; glibc's tanhf: 2.09), tst_ops over a dense sample of their range; std::exp's and
    // std::tanh's values at +-0, +-inf and NaN, overflow to inf, gradual underflow to 0.
    void (*exp)(const float *x, float *out, int64_t n);
    void (*tanh)(const float *x, float *out, int64_t n);
    // out = gate / (1 + exp(-gate)) * up
    void (*swiglu)(const float *gate, const float *up, float *out, int64_t n);
    // out = 0.5 gate (1 + tanh(sqrt(2/pi) (gate + 0.044715 gate^3))) * up
    void (*geglu)(const float *gate, const float *up, float *out, int64_t n);
    // x = cap * tanh(x / cap)
    void (*softcap)(float *x, float cap, int64_t n);
    // sum_i x[i]^2, accumulated in double (the float products are exact in double).
    double (*sum_squares)(const float *x, int64_t n);
    // out[i] = x[i] * s * w[i] (RMSNorm's scaling; out may be x).
    void (*scale_mul)(const float *x, float s, const float *w, float *out, int64_t n);
    // x[i] += y[i]; x[i] *= s.
    void (*add)(float *x, const float *y, int64_t n);
    void (*scale)(float *x, float s, int64_t n);
    // RoPE of one head's first n_rot dims in place: v[j] = v[j] * c[j] + v[partner(j)] * s[j]
    // with the table layout of ops.h (RopeTable); products rounded before the sum (no FMA), so
    // every level gives the scalar rotation's bits.
    void (*rope_head)(float *v, const float *c, const float *s, int n_rot, bool interleaved);
    // For heads h < heads: y_h[i] += w_h[j] * x[j * stride + i] for rows j = 0 .. rows - 1 in
    // turn, y_h = y + h * y_stride, w_h = w + h * w_stride, the rows whose weight is 0 skipped,
    // each product rounded before its sum (no FMA): the scalar loops' bits, head by head.
    void (*add_scaled_rows)(float *y, int64_t y_stride, const float *w, int64_t w_stride, int heads, const float *x,
                            int64_t stride, int64_t rows, int64_t n);
};

// The kernels of the kernel table's level (kernel_table.h): the best this CPU runs unless
// CpuOptions::kernels asks for a lower set (benchmarks and tests compare them).
const CpuKernels &cpu_kernels();

// The kernels of one level (one this CPU runs).
const CpuKernels &cpu_kernels_at(VectorLevel level);

// Every kernel set this CPU can run, best first.
int available_cpu_kernels(const CpuKernels **out, int max);

} // namespace longscope
