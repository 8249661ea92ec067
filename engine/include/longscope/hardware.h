// Hardware facts the benchmarks report beside their results: the CPU kernels in use, the
// memory read bandwidth measured in this process (the ceiling for batch-1 decode) and the
// peak rates of the instructions prefill's matrix products and attention run on (the
// ceilings for prefill).
#pragma once

#include "longscope/settings.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace longscope {

// The vector kernels this process runs ("avx512", "avx2" or "portable"), then in parentheses
// those for quantized weights (integer dot products; BF16 dot products for prefill).
std::string cpu_kernel_name();

// Empty when vector kernels run; otherwise why the portable ones do (the CPU lacks AVX2, FMA
// or F16C, or CpuOptions asked for them: LONGSCOPE_SIMD=portable in the apps) and that they
// are several times slower.
std::string cpu_kernel_warning();

// Reads a buffer of `bytes` (larger than the caches, in 2 MiB pages as the weights' copy) with
// `n_threads` threads, several times, each thread its chunk as one stream and as several side
// by side (many cores read nearby streams faster than one), and returns the best rate in bytes
// per second. Throws OutOfMemory if the buffer cannot be had.
double measure_read_bandwidth(int n_threads, uint64_t bytes = 512ull << 20);

// The same buffer and threads kept, to read again and again: `bench --paired-probe` reads it
// once after every decode step, so that each step is set against the bandwidth of the moment
// (on a shared machine the bandwidth moves within seconds). Throws OutOfMemory as above.
class ReadBandwidthProbe {
public:
    explicit ReadBandwidthProbe(int n_threads, uint64_t bytes = 512ull << 20);
    ~ReadBandwidthProbe();
    ReadBandwidthProbe(const ReadBandwidthProbe &) = delete;
    ReadBandwidthProbe &operator=(const ReadBandwidthProbe &) = delete;
    // One pass over the buffer in the pattern the faster here (one stream per thread or
    // several; the constructor compares them): bytes per second.
    double read();
    // One pass in each pattern, the better rate; read() then takes that pattern.
    double read_both();

    struct State;

private:
    std::unique_ptr<State> m_state;
};

// The instruction families of the CPU's matrix-product kernels: float multiply-adds (float
// weights, and quantized ones without a faster path), BF16 dot products, 8-bit integer dot
// products, AMX BF16 tile products.
enum class ComputeFamily { F32Fma, Bf16Dot, Int8Dot, AmxBf16 };

// The family prefill's matrix products run on here for weights of the named type (a GGUF
// type name such as "F16" or "Q4_K"; an unknown name counts as float), under the kernels in use.
ComputeFamily prefill_compute_family(std::string_view weight_type);

// The families prefill attention's two products run on here: the scores (queries by keys)
// and the weighted sum of the values, with keys cached as k_type. Keys cached as Q8_0 or Q4_0
// and not rotated as they are read (keys_before_rope false) are scored by 8-bit integer dot
// products, their values summed with float multiply-adds; memory-efficient attention on a CPU
// with AMX tiles for attention runs both on the tiles (float keys, head_dim a multiple of 32);
// otherwise both are float multiply-adds.
struct AttentionFamilies {
    ComputeFamily scores = ComputeFamily::F32Fma;
    ComputeFamily values = ComputeFamily::F32Fma;
};
AttentionFamilies prefill_attention_families(KvType k_type, bool keys_before_rope, bool memory_efficient,
                                             int head_dim);

// The instruction the compute probe runs for `family` here, e.g. "avx512 vdpbf16ps".
std::string compute_family_name(ComputeFamily family);

// Runs a tight loop of the family's instruction (independent accumulators, no memory traffic)
// on `n_threads` threads, several times, and returns the best rate in operations per second,
// a multiply-add counting two (the way prefill's GFLOP/s count them).
double measure_compute_peak(int n_threads, ComputeFamily family);

} // namespace longscope
