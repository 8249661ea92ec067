// Hardware facts the benchmarks report beside their results: the CPU kernels in use and the
// memory read bandwidth measured in this process, the ceiling for batch-1 decode.
#pragma once

#include <cstdint>
#include <string>

namespace longscope {

// The vector kernels this process runs ("avx512", "avx2" or "portable"), then in parentheses
// those for quantized weights (integer dot products; BF16 dot products for prefill).
std::string cpu_kernel_name();

// Empty when vector kernels run; otherwise why the portable ones do (the CPU lacks AVX2, FMA
// or F16C, or CpuOptions asked for them: LONGSCOPE_SIMD=portable in the apps) and that they
// are several times slower.
std::string cpu_kernel_warning();

// Reads a buffer of `bytes` (larger than the caches) with `n_threads` threads, several
// times, and returns the best rate in bytes per second. Throws OutOfMemory if the buffer
// cannot be had.
double measure_read_bandwidth(int n_threads, uint64_t bytes = 512ull << 20);

} // namespace longscope
