// The one place the CPU backend's kernels are chosen. The CPU's features are read once
// (cpuid, through __builtin_cpu_supports) into CpuFeatures; the kernel table is derived from
// them and the application's CpuOptions (longscope/cpu_options.h); every chooser in cpu/
// reads the table and nothing else, so a forced level holds for every kernel family alike.
#pragma once

#include "longscope/cpu_options.h"

namespace longscope {

// What this CPU can run.
struct CpuFeatures {
    bool avx2 = false;        // AVX2, FMA and F16C: the baseline of every vector kernel
    bool avx512 = false;      // AVX-512 F, BW and VL, with the above
    bool avx512_vnni = false; // vpdpbusd (integer dot products)
    bool avx512_bf16 = false; // vdpbf16ps (BF16 dot products)
    bool x86_64_v3 = false;   // the whole x86-64-v3 level (attention's AVX2 build)
    bool x86_64_v4 = false;   // the whole x86-64-v4 level (attention's AVX-512 build)
    bool amx_bf16 = false;    // AMX tiles with BF16 products, granted to this process (cpu/amx.h)
    bool amd = false;         // an AMD processor (the decode prefetch distance is tuned per vendor)
    int family = 0;           // cpuid's family (with the extended family): AMD Zen 4 is 25, Zen 5 26
};

// The vector kernel set in use.
enum class VectorLevel { Portable, Avx2, Avx512 };

// The integer dot-product kernels for quantized weights (qdot.h): AVX-512 VNNI, AVX2, portable.
enum class QKernel { Vnni, Avx2, Portable };

struct CpuKernelTable {
    // Float kernels (simd.h, gemm.h), dequantizers (quant.h, packed.h), the 8-bit quantizer of
    // activations (qdot.h) and attention: none uses instructions above this level (attention
    // aside at the portable level, see below).
    VectorLevel level = VectorLevel::Portable;
    QKernel integer = QKernel::Portable;
    bool bf16_dot = false; // AVX-512 BF16 dot products for quantized weights over many tokens
    QuantMatmulPath quant_matmul = QuantMatmulPath::Auto; // a forced path, or Auto
    bool pack_weights = false; // Q2_K-Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS packed at load: asked for and a packed kernel for `integer`
    bool copy_weights = true;  // matrices copied out of the file mapping at load
    // F16 and BF16 matrices packed at load as well (sixteen rows to a vector, packed.h; their
    // kernel is gemm_packed_half): asked for (pack_weights' option), the AVX-512 or AVX2 level,
    // and no AMX tiles (which read their rows in place).
    bool pack_half = false;
    // AMX BF16 tiles for products over many tokens (cpu/amx.h): the CPU has them, the level is
    // AVX-512 (the tiles' operands are prepared with AVX-512 BF16) and the options allow them.
    bool amx = false;
    // Prefill attention's scores and weighted values on the tiles as well (cpu/attention.cpp).
    bool amx_attention = false;
    // Decode's kernels ask for the weight bytes ahead of the ones they read (packed.cpp, gemm.cpp).
    bool decode_prefetch = true;
    // How far ahead the VNNI decode kernels ask for lines into L1 and into L2 (bytes), unless
    // the options set them: 4096 into L1 alone on AMD's family 25 (Zen 4; far == near asks
    // once), 512 and 4096 on other AMD processors, 1024 and 4096 on others (packed.cpp says
    // what was measured).
    int decode_prefetch_near = 1024;
    int decode_prefetch_far = 4096;
    // Attention's build: x86-64-v4 at the AVX-512 level, else x86-64-v3 where the CPU has it
    // (whatever the level: the baseline build gives other bits), else the baseline.
    bool attention_v4 = false, attention_v3 = false;
};

// This CPU's features, read once.
const CpuFeatures &cpu_features();

// The table for a CPU with `features` under `options` (tests build tables for other CPUs).
CpuKernelTable make_kernel_table(const CpuFeatures &features, const CpuOptions &options);

// The table in use: this CPU's, under the options last given to set_cpu_options.
const CpuKernelTable &kernel_table();

const char *vector_level_name(VectorLevel level);
const char *qkernel_name(QKernel k);

} // namespace longscope
