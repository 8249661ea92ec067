#include "cpu/compute_peak.h"

#include "cpu/amx.h"
#include "cpu/kernel_table.h"

#include <immintrin.h>

namespace longscope {

namespace {

// The loops measure the machine, not the build: a sanitizer's or a fuzzer's instrumentation
// (bounds checks on the accumulator array, shadow-memory checks, coverage counters) would
// keep the accumulators in memory and make the "peak" a fraction of what the kernels reach.
#if defined(__clang__)
#define LS_PROBE_PLAIN __attribute__((no_sanitize("address", "undefined", "thread", "coverage")))
#else
#define LS_PROBE_PLAIN __attribute__((no_sanitize("address", "undefined", "thread")))
#endif
#define LS_PROBE512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) LS_PROBE_PLAIN
#define LS_PROBE_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"))) LS_PROBE_PLAIN
#define LS_PROBE_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"))) LS_PROBE_PLAIN
#define LS_PROBE256 __attribute__((target("avx2,fma"))) LS_PROBE_PLAIN

constexpr int k_acc = 12;

LS_PROBE512 float first_and_last(__m512 v)
{
    alignas(64) float out[16];
    _mm512_store_ps(out, v);
    return out[0] + out[15];
}

// acc = acc * a + b converges to b / (1 - a) = 1: finite however long it runs.
LS_PROBE512 float fma512(int64_t iterations)
{
    __m512 acc[k_acc];
    for (int k = 0; k < k_acc; ++k)
        acc[k] = _mm512_set1_ps(float(k));
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
    for (int64_t i = 0; i < iterations; ++i)
        #pragma GCC unroll 12
        for (int k = 0; k < k_acc; ++k)
            acc[k] = _mm512_fmadd_ps(acc[k], a, b);
    for (int k = 1; k < k_acc; ++k)
        acc[0] = _mm512_add_ps(acc[0], acc[k]);
    return first_and_last(acc[0]);
}

LS_PROBE256 float fma256(int64_t iterations)
{
    __m256 acc[k_acc];
    for (int k = 0; k < k_acc; ++k)
        acc[k] = _mm256_set1_ps(float(k));
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
    for (int64_t i = 0; i < iterations; ++i)
        #pragma GCC unroll 12
        for (int k = 0; k < k_acc; ++k)
            acc[k] = _mm256_fmadd_ps(acc[k], a, b);
    for (int k = 1; k < k_acc; ++k)
        acc[0] = _mm256_add_ps(acc[0], acc[k]);
    alignas(32) float out[8];
    _mm256_store_ps(out, acc[0]);
    return out[0] + out[7];
}

// Pairs of BF16 products summed into F32 lanes; each lane grows by 64e-6 per iteration.
LS_PROBE_BF16 float bf16dot512(int64_t iterations)
{
    __m512 acc[k_acc];
    for (int k = 0; k < k_acc; ++k)
        acc[k] = _mm512_setzero_ps();
    const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.001f), _mm512_set1_ps(0.001f));
    const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.002f), _mm512_set1_ps(0.002f));
    for (int64_t i = 0; i < iterations; ++i)
        #pragma GCC unroll 12
        for (int k = 0; k < k_acc; ++k)
            acc[k] = _mm512_dpbf16_ps(acc[k], x, y);
    for (int k = 1; k < k_acc; ++k)
        acc[0] = _mm512_add_ps(acc[0], acc[k]);
    return first_and_last(acc[0]);
}

// Unsigned by signed bytes, four products summed into each int32 lane (wrapping harmlessly).
LS_PROBE_VNNI float vnni512(int64_t iterations)
{
    __m512i acc[k_acc];
    for (int k = 0; k < k_acc; ++k)
        acc[k] = _mm512_setzero_si512();
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (int64_t i = 0; i < iterations; ++i)
        #pragma GCC unroll 12
        for (int k = 0; k < k_acc; ++k)
            acc[k] = _mm512_dpbusd_epi32(acc[k], u, s);
    for (int k = 1; k < k_acc; ++k)
        acc[0] = _mm512_add_epi32(acc[0], acc[k]);
    alignas(64) int32_t out[16];
    _mm512_store_si512(out, acc[0]);
    return float(out[0]) + float(out[15]);
}

// Six accumulators: each product's chain to its accumulator is one add, and more would not
// fit the sixteen registers beside the operands.
constexpr int k_acc_avx2_int8 = 6;

// The AVX2 integer kernels' sequence for 32 byte products: pairs to int16, pairs to int32, add.
LS_PROBE256 float int8dot256(int64_t iterations)
{
    __m256i acc[k_acc_avx2_int8];
    for (int k = 0; k < k_acc_avx2_int8; ++k)
        acc[k] = _mm256_setzero_si256();
    __m256i u = _mm256_set1_epi8(3);
    const __m256i s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < iterations; ++i)
        #pragma GCC unroll 6
        for (int k = 0; k < k_acc_avx2_int8; ++k) {
            // The products do not depend on the accumulators: hide that u is the same each
            // time (an empty asm, no instruction), or the compiler computes them once.
            __asm__("" : "+x"(u));
            acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
        }
    for (int k = 1; k < k_acc_avx2_int8; ++k)
        acc[0] = _mm256_add_epi32(acc[0], acc[k]);
    alignas(32) int32_t out[8];
    _mm256_store_si256(reinterpret_cast<__m256i *>(out), acc[0]);
    return float(out[0]);
}

// The portable kernels' scalar multiply-adds (what the compiler makes of them at the baseline).
LS_PROBE_PLAIN float scalar(int64_t iterations)
{
    float acc[k_acc];
    for (int k = 0; k < k_acc; ++k)
        acc[k] = float(k);
    for (int64_t i = 0; i < iterations; ++i)
        for (int k = 0; k < k_acc; ++k)
            acc[k] = acc[k] * 0.999f + 0.001f;
    float sum = 0;
    for (float a : acc)
        sum += a;
    return sum;
}

} // namespace

ComputeLoop compute_loop(ComputeFamily family)
{
    const CpuKernelTable &t = kernel_table();
    const CpuFeatures &f = cpu_features();
    switch (family) {
    case ComputeFamily::Bf16Dot:
        if (t.bf16_dot && f.avx512_bf16)
            return {bf16dot512, k_acc * 16 * 4.0, "avx512 vdpbf16ps"};
        break;
    case ComputeFamily::Int8Dot:
        if (t.integer == QKernel::Vnni)
            return {vnni512, k_acc * 64 * 2.0, "avx512 vpdpbusd"};
        if (t.integer == QKernel::Avx2)
            return {int8dot256, k_acc_avx2_int8 * 32 * 2.0, "avx2 vpmaddubsw"};
        break;
    case ComputeFamily::AmxBf16:
        if (t.amx)
            return {amx_bf16_probe, amx_probe_ops_per_iteration, "amx tdpbf16ps"};
        break;
    case ComputeFamily::F32Fma:
        break;
    }
    if (t.level == VectorLevel::Avx512)
        return {fma512, k_acc * 16 * 2.0, "avx512 vfmadd"};
    if (t.level == VectorLevel::Avx2)
        return {fma256, k_acc * 8 * 2.0, "avx2 vfmadd"};
    return {scalar, k_acc * 2.0, "portable scalar multiply-add"};
}

} // namespace longscope
