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
};

// The kernels of the kernel table's level (kernel_table.h): the best this CPU runs unless
// CpuOptions::kernels asks for a lower set (benchmarks and tests compare them).
const CpuKernels &cpu_kernels();

// The kernels of one level (one this CPU runs).
const CpuKernels &cpu_kernels_at(VectorLevel level);

// Every kernel set this CPU can run, best first.
int available_cpu_kernels(const CpuKernels **out, int max);

} // namespace longscope
