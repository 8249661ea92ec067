// Choices for the CPU backend that an application makes once, at start: which vector kernels
// run, how quantized weights are multiplied, and how the weights are laid out in memory. The
// defaults are the fastest this CPU allows; the others exist for comparisons and benchmarks.
// The engine reads no environment variable: longscope-cli and the app read the switches
// documented in docs/performance.md (LONGSCOPE_SIMD, LONGSCOPE_QUANT_MATMUL, LONGSCOPE_PACK,
// LONGSCOPE_COPY_WEIGHTS, LONGSCOPE_AMX, LONGSCOPE_AMX_ATTENTION, LONGSCOPE_PREFETCH,
// LONGSCOPE_ACT_SPAN, LONGSCOPE_THREAD_TUNING) with cpu_options_from_switches and pass the result to set_cpu_options.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

namespace longscope {

// The vector kernel set: Auto is the best this CPU runs. A set the CPU lacks falls back to the
// best one below it (avx512 -> avx2 -> portable). The set caps every CPU kernel: float dot
// products, dequantizers, the 8-bit quantizer of activations, the integer and BF16 dot
// products of quantized weights, and attention.
enum class SimdLevel { Auto, Avx512, Avx2, Portable };

// How quantized weights are multiplied. Auto: AMX tiles from 16 tokens on where the CPU has
// them (cpu/amx.h; float weights too), else integer dot products on activations quantized to
// 8 bits for packed matrices and few tokens, BF16 dot products for other matrices from 16
// tokens on where the CPU has them. Dequantize:
// rows widened to float, then the float kernel (the reference path). A path the weight type or
// the CPU cannot take falls back as Auto would; Integer, Bf16 and Dequantize never use AMX.
// Amx: the AMX tiles at any token count (where the CPU has them).
enum class QuantMatmulPath { Auto, Integer, Bf16, Dequantize, Amx };

struct CpuOptions {
    SimdLevel kernels = SimdLevel::Auto;
    QuantMatmulPath quant_matmul = QuantMatmulPath::Auto;
    // Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS matrices re-laid out at load for the integer kernels (sixteen
    // rows interleaved, the same values); off keeps the file's row layout.
    bool pack_weights = true;
    // The matrices copied at load out of the file mapping into the model's own huge pages;
    // off leaves them in the mapping (packed matrices are still packed).
    bool copy_weights = true;
    // Intel AMX tiles for matrix products over many tokens where the CPU has them and the
    // kernel grants them; off keeps the AVX-512 kernels.
    bool amx = true;
    // Prefill attention on the AMX tiles too (where amx holds): scores and weighted values with
    // 16-bit operands; off keeps attention on the float kernels.
    bool amx_attention = true;
    // Decode's kernels (one token: the packed integer kernels, and at the AVX-512 level the
    // F32/F16/BF16 rows) ask for the weight bytes one to four kilobytes ahead of the ones they
    // read; off leaves the stream to the hardware prefetchers.
    bool decode_prefetch = true;
    // How far ahead (bytes) the packed VNNI decode kernels ask for lines into L1 and into L2;
    // 0 keeps this CPU's default (into L1 4096 on AMD's Zen 4, with no separate request into L2,
    // 512 on other AMD processors, 1024 on others; into L2 4096).
    // For tuning on a new CPU; values are rounded down to whole 64-byte lines.
    int decode_prefetch_near = 0;
    int decode_prefetch_far = 0;
    // Products whose matrices are all K types (Q2_K to Q6_K), under the VNNI kernels, quantize
    // their activations with one scale per 256 values (llama.cpp's Q8_K) where every other
    // product keeps one per 32: the packed Q4_K and Q5_K kernels then apply their sub-block
    // scales in integers. Off (LONGSCOPE_ACT_SPAN=32) keeps one scale per 32 everywhere.
    bool k_act_span = true;
    // Decode steps (one token per sequence, batches of up to 16 sequences) choose how many of
    // the threads they use from their own times (cpu/thread_tuner.h: all of them unless fewer
    // are clearly faster, as beside a busy process); off (LONGSCOPE_THREAD_TUNING=0) keeps
    // every step on all of them.
    bool decode_thread_tuning = true;
};

// Makes `options` the CPU backend's choices for this process. Call it before models are
// loaded (packing and copying happen when a model is prepared for the CPU) and never while
// another thread evaluates; the kernel choices apply from the next operation on.
void set_cpu_options(const CpuOptions &options);
// The choices in force (the defaults until set_cpu_options is called).
const CpuOptions &cpu_options();

// The switches' values: "avx512", "avx2", "portable"; "integer", "bf16", "dequantize", "amx".
// nullopt for anything else.
std::optional<SimdLevel> parse_simd_level(std::string_view text);
std::optional<QuantMatmulPath> parse_quant_matmul_path(std::string_view text);

// The options the documented switches ask for, from `lookup(name)`, which returns a switch's
// value or null when it is not set (an application passes its environment: std::getenv).
// LONGSCOPE_SIMD=avx512|avx2|portable, LONGSCOPE_QUANT_MATMUL=integer|bf16|dequantize|amx,
// LONGSCOPE_PACK=0, LONGSCOPE_COPY_WEIGHTS=0, LONGSCOPE_AMX=0, LONGSCOPE_AMX_ATTENTION=0,
// LONGSCOPE_PREFETCH=0, LONGSCOPE_PREFETCH=NEAR:FAR (the decode kernels' distances in bytes,
// e.g. 512:4096, each 64 to 65536, or 0 for the default), LONGSCOPE_ACT_SPAN=32,
// LONGSCOPE_THREAD_TUNING=0; any other
// value leaves the default.
CpuOptions cpu_options_from_switches(const std::function<const char *(const char *name)> &lookup);

} // namespace longscope
