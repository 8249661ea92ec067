#include "cpu/kernel_table.h"

#include "cpu/amx.h"

#include <cpuid.h>

namespace longscope {

namespace {

#if defined(__clang__)
// Clang's __builtin_cpu_supports (the fuzz build's compiler) knows neither "f16c" nor the
// x86-64 levels: those bits come from cpuid, and the levels from their definitions.
bool cpuid_bit(unsigned leaf, bool in_ecx, unsigned bit)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(leaf, &a, &b, &c, &d) && ((in_ecx ? c : d) & bit) != 0;
}
bool has_f16c() { return cpuid_bit(1, true, bit_F16C); }
bool is_x86_64_v3()
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
           __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
           cpuid_bit(1, true, bit_MOVBE) && cpuid_bit(0x80000001, true, bit_LZCNT);
}
bool is_x86_64_v4()
{
    return is_x86_64_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
}
#else
bool has_f16c() { return __builtin_cpu_supports("f16c"); }
bool is_x86_64_v3() { return __builtin_cpu_supports("x86-64-v3"); }
bool is_x86_64_v4() { return __builtin_cpu_supports("x86-64-v4"); }
#endif

CpuFeatures detect()
{
    // The table may be built from a static initializer, before libgcc's own constructor has
    // read cpuid.
    __builtin_cpu_init();
    CpuFeatures f;
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.x86_64_v3 = is_x86_64_v3();
    f.x86_64_v4 = is_x86_64_v4();
    f.amx_bf16 = f.avx512_bf16 && amx_bf16_usable();
    f.amd = __builtin_cpu_is("amd");
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        const int base = int((eax >> 8) & 0xf);
        f.family = base == 0xf ? base + int((eax >> 20) & 0xff) : base;
    }
    return f;
}

struct State {
    CpuOptions options;
    CpuKernelTable table;
};

// The process's choices: the CPU does not change under a running process, and the options
// change only through set_cpu_options.
State &state()
{
    static State s{CpuOptions{}, make_kernel_table(cpu_features(), CpuOptions{})};
    return s;
}

} // namespace

const CpuFeatures &cpu_features()
{
    static const CpuFeatures f = detect();
    return f;
}

CpuKernelTable make_kernel_table(const CpuFeatures &f, const CpuOptions &options)
{
    CpuKernelTable t;
    const SimdLevel want = options.kernels;
    if (want == SimdLevel::Portable)
        t.level = VectorLevel::Portable;
    else if (want == SimdLevel::Avx2)
        t.level = f.avx2 ? VectorLevel::Avx2 : VectorLevel::Portable;
    else
        t.level = f.avx512 ? VectorLevel::Avx512 : f.avx2 ? VectorLevel::Avx2 : VectorLevel::Portable;

    // The integer and BF16 dot products follow the float kernels: VNNI and BF16 only with the
    // AVX-512 set, so forcing avx2 measures what a CPU without AVX-512 does.
    if (t.level == VectorLevel::Avx512 && f.avx512_vnni)
        t.integer = QKernel::Vnni;
    else if (t.level != VectorLevel::Portable)
        t.integer = QKernel::Avx2;
    else
        t.integer = QKernel::Portable;
    t.bf16_dot = t.level == VectorLevel::Avx512 && f.avx512_bf16;
    t.quant_matmul = options.quant_matmul;
    // Packed matrices have a VNNI and an AVX2 kernel, no portable one.
    t.pack_weights = options.pack_weights && t.integer != QKernel::Portable;
    t.copy_weights = options.copy_weights;
    t.amx = options.amx && t.bf16_dot && f.amx_bf16;
    t.amx_attention = t.amx && options.amx_attention;
    t.pack_half = options.pack_weights && t.level != VectorLevel::Portable && !t.amx;
    t.decode_prefetch = options.decode_prefetch;
    const auto distance = [](int asked, int otherwise) { return asked > 0 ? asked / 64 * 64 : otherwise; };
    const bool zen4 = f.amd && f.family == 25;
    t.decode_prefetch_near = distance(options.decode_prefetch_near, zen4 ? 4096 : f.amd ? 512 : 1024);
    t.decode_prefetch_far = distance(options.decode_prefetch_far, 4096);
    // Attention's x86-64-v3 build computes the v4 build's bits (both fuse the same multiply-adds)
    // but the baseline build, without FMA, rounds differently: below the AVX-512 level the v3
    // build runs wherever the CPU has it, the portable level included, so that forcing a level
    // never changes attention's results.
    t.attention_v4 = t.level == VectorLevel::Avx512 && f.x86_64_v4;
    t.attention_v3 = f.x86_64_v3;
    return t;
}

const CpuKernelTable &kernel_table() { return state().table; }

void set_cpu_options(const CpuOptions &options)
{
    State &s = state();
    s.options = options;
    s.table = make_kernel_table(cpu_features(), options);
}

const CpuOptions &cpu_options() { return state().options; }

const char *vector_level_name(VectorLevel level)
{
    switch (level) {
    case VectorLevel::Avx512: return "avx512";
    case VectorLevel::Avx2: return "avx2";
    default: return "portable";
    }
}

const char *qkernel_name(QKernel k)
{
    switch (k) {
    case QKernel::Vnni: return "avx512-vnni";
    case QKernel::Avx2: return "avx2";
    default: return "portable";
    }
}

} // namespace longscope
