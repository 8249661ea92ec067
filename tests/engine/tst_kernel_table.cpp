// The CPU kernel table (cpu/kernel_table.h): the choices it derives from a CPU's features and
// the options, and that a forced level holds for every kernel family (float kernels,
// dequantizers, the activation quantizer, integer and BF16 dot products, packing, attention),
// with every kernel of every level giving the portable kernels' bits.
#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/packed.h"
#include "cpu/qdot.h"
#include "cpu/quant.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"
#include "support/attention_problem.h"
#include "support/cpu_options_scope.h"
#include "support/random_floats.h"

#include <QtTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

using namespace longscope;
using longscope::test::CpuOptionsScope;
using longscope::test::last_queries_problem;
using longscope::test::random_floats;

namespace {

CpuOptions with_kernels(SimdLevel level)
{
    CpuOptions o;
    o.kernels = level;
    return o;
}

// The levels this CPU runs, best first.
std::vector<VectorLevel> available_levels()
{
    std::vector<VectorLevel> v;
    if (cpu_features().avx512)
        v.push_back(VectorLevel::Avx512);
    if (cpu_features().avx2)
        v.push_back(VectorLevel::Avx2);
    v.push_back(VectorLevel::Portable);
    return v;
}

bool same_bits(const void *a, const void *b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

// Two quantizations of the same activations: the same codes, scales, sums and span, bit for bit.
bool same_acts(const QuantizedActs &got, const QuantizedActs &want)
{
    return got.span == want.span && got.q.size() == want.q.size() && got.dl.size() == want.dl.size() &&
           same_bits(got.q.data(), want.q.data(), want.q.size()) &&
           same_bits(got.dl.data(), want.dl.data(), want.dl.size() * 4) &&
           same_bits(got.db.data(), want.db.data(), want.db.size() * 4) &&
           same_bits(got.ds.data(), want.ds.data(), want.ds.size() * 4) &&
           same_bits(got.s16.data(), want.s16.data(), want.s16.size() * 4);
}

QString type_name(DType t) { return QString::fromStdString(std::string(dtype_name(t))); }

const DType k_quant_types[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,  DType::Q5_1,   DType::Q2_K,
                               DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

} // namespace

class TestKernelTable : public QObject {
    Q_OBJECT

private slots:
    // The table from the features and the options, for CPUs other than this one too.
    void table_from_features_and_options()
    {
        CpuFeatures all;
        all.avx2 = all.avx512 = all.avx512_vnni = all.avx512_bf16 = all.x86_64_v3 = all.x86_64_v4 = true;
        CpuKernelTable t = make_kernel_table(all, {});
        QCOMPARE(t.level, VectorLevel::Avx512);
        QCOMPARE(t.integer, QKernel::Vnni);
        QVERIFY(t.bf16_dot && t.pack_weights && t.copy_weights && t.attention_v4 && t.attention_v3);
        QVERIFY(!t.amx && !t.amx_attention); // no AMX tiles among the features
        QCOMPARE(t.quant_matmul, QuantMatmulPath::Auto);
        // The VNNI decode kernels' L1 prefetch distance, by vendor (packed.cpp: measured).
        QCOMPARE(t.decode_prefetch_near, 1024);
        CpuFeatures amd = all;
        amd.amd = true;
        QCOMPARE(make_kernel_table(amd, {}).decode_prefetch_near, 512);
        QCOMPARE(t.decode_prefetch_far, 4096);
        amd.family = 26; // Zen 5
        QCOMPARE(make_kernel_table(amd, {}).decode_prefetch_near, 512);
        amd.family = 25; // Zen 4: 4096 into L1 alone (far == near)
        QCOMPARE(make_kernel_table(amd, {}).decode_prefetch_near, 4096);
        QCOMPARE(make_kernel_table(amd, {}).decode_prefetch_far, 4096);
        CpuFeatures intel25 = all;
        intel25.family = 25; // the family alone is not enough
        QCOMPARE(make_kernel_table(intel25, {}).decode_prefetch_near, 1024);
        amd.family = 0;
        // Distances the options set replace the vendor's, in whole lines.
        CpuOptions distances;
        distances.decode_prefetch_near = 2048;
        distances.decode_prefetch_far = 8200;
        QCOMPARE(make_kernel_table(amd, distances).decode_prefetch_near, 2048);
        QCOMPARE(make_kernel_table(amd, distances).decode_prefetch_far, 8192);
        distances.decode_prefetch_near = 0;
        QCOMPARE(make_kernel_table(amd, distances).decode_prefetch_near, 512);
        QCOMPARE(make_kernel_table(all, distances).decode_prefetch_near, 1024);

        // AMX tiles: used at the AVX-512 level with BF16 (their operands are prepared with it),
        // unless the options turn them off.
        CpuFeatures amx = all;
        amx.amx_bf16 = true;
        QVERIFY(make_kernel_table(amx, {}).amx && make_kernel_table(amx, {}).amx_attention);
        QVERIFY(!make_kernel_table(amx, with_kernels(SimdLevel::Avx2)).amx);
        QVERIFY(!make_kernel_table(amx, with_kernels(SimdLevel::Avx2)).amx_attention);
        CpuOptions no_amx;
        no_amx.amx = false;
        QVERIFY(!make_kernel_table(amx, no_amx).amx && !make_kernel_table(amx, no_amx).amx_attention);
        // Attention alone off: the products keep the tiles.
        CpuOptions no_amx_attention;
        no_amx_attention.amx_attention = false;
        QVERIFY(make_kernel_table(amx, no_amx_attention).amx && !make_kernel_table(amx, no_amx_attention).amx_attention);
        CpuFeatures amx_no_bf16 = amx;
        amx_no_bf16.avx512_bf16 = false;
        QVERIFY(!make_kernel_table(amx_no_bf16, {}).amx);
        // F16 matrices are packed at the AVX-512 and AVX2 levels, not at the portable one, not where
        // the AMX tiles (which read their rows in place) are in use, nor with packing turned off.
        QVERIFY(make_kernel_table(all, {}).pack_half);
        QVERIFY(!make_kernel_table(amx, {}).pack_half && make_kernel_table(amx, no_amx).pack_half);
        QVERIFY(make_kernel_table(all, with_kernels(SimdLevel::Avx2)).pack_half);
        QVERIFY(!make_kernel_table(all, with_kernels(SimdLevel::Portable)).pack_half);
        CpuOptions no_pack;
        no_pack.pack_weights = false;
        QVERIFY(!make_kernel_table(all, no_pack).pack_half);
        QCOMPARE(make_kernel_table(all, with_kernels(SimdLevel::Avx512)).level, VectorLevel::Avx512);

        // Forced AVX2 on an AVX-512 CPU: nothing above AVX2 (no VNNI, no BF16, no v4 build).
        t = make_kernel_table(all, with_kernels(SimdLevel::Avx2));
        QCOMPARE(t.level, VectorLevel::Avx2);
        QCOMPARE(t.integer, QKernel::Avx2);
        QVERIFY(!t.bf16_dot && !t.attention_v4 && t.attention_v3 && t.pack_weights);

        // Forced portable: the portable kernels everywhere, and no packing (no portable packed kernel).
        // Attention keeps an FMA build (the baseline one rounds differently): v3, as at AVX2.
        t = make_kernel_table(all, with_kernels(SimdLevel::Portable));
        QCOMPARE(t.level, VectorLevel::Portable);
        QCOMPARE(t.integer, QKernel::Portable);
        QVERIFY(!t.bf16_dot && !t.attention_v4 && t.attention_v3 && !t.pack_weights);

        // AVX-512 without VNNI: the AVX2 integer kernels under the AVX-512 float ones.
        CpuFeatures no_vnni = all;
        no_vnni.avx512_vnni = no_vnni.avx512_bf16 = false;
        t = make_kernel_table(no_vnni, {});
        QCOMPARE(t.level, VectorLevel::Avx512);
        QCOMPARE(t.integer, QKernel::Avx2);
        QVERIFY(!t.bf16_dot);

        // A level the CPU lacks falls back to the best one below it.
        CpuFeatures avx2_only;
        avx2_only.avx2 = avx2_only.x86_64_v3 = true;
        QCOMPARE(make_kernel_table(avx2_only, with_kernels(SimdLevel::Avx512)).level, VectorLevel::Avx2);
        QCOMPARE(make_kernel_table(avx2_only, {}).integer, QKernel::Avx2);
        QVERIFY(!make_kernel_table(avx2_only, {}).attention_v4);
        const CpuFeatures none;
        t = make_kernel_table(none, with_kernels(SimdLevel::Avx2));
        QCOMPARE(t.level, VectorLevel::Portable);
        QCOMPARE(t.integer, QKernel::Portable);
        QVERIFY(!t.pack_weights && !t.attention_v3 && !t.attention_v4);

        // The other options pass through.
        CpuOptions o;
        o.quant_matmul = QuantMatmulPath::Dequantize;
        o.pack_weights = false;
        o.copy_weights = false;
        t = make_kernel_table(all, o);
        QCOMPARE(t.quant_matmul, QuantMatmulPath::Dequantize);
        QVERIFY(!t.pack_weights && !t.copy_weights && t.decode_prefetch);
        o.decode_prefetch = false;
        QVERIFY(!make_kernel_table(all, o).decode_prefetch);
    }

    // The family read from cpuid is the one the kernel reports in /proc/cpuinfo.
    void family_matches_proc_cpuinfo()
    {
        QFile f("/proc/cpuinfo");
        if (!f.open(QIODevice::ReadOnly))
            QSKIP("no /proc/cpuinfo here");
        const QStringList lines = QString::fromLatin1(f.readAll()).split('\n');
        for (const QString &line : lines) {
            if (line.startsWith("cpu family")) {
                QCOMPARE(cpu_features().family, line.section(':', 1).trimmed().toInt());
                QCOMPARE(cpu_features().amd, lines.filter("vendor_id").value(0).contains("AuthenticAMD"));
                return;
            }
        }
        QSKIP("/proc/cpuinfo names no cpu family");
    }

    // The switches the applications read, as cpu_options_from_switches understands them.
    void options_from_switches()
    {
        std::map<std::string, std::string> env;
        auto lookup = [&](const char *name) -> const char * {
            auto it = env.find(name);
            return it == env.end() ? nullptr : it->second.c_str();
        };
        CpuOptions o = cpu_options_from_switches(lookup);
        QCOMPARE(o.kernels, SimdLevel::Auto);
        QCOMPARE(o.quant_matmul, QuantMatmulPath::Auto);
        QVERIFY(o.pack_weights && o.copy_weights && o.amx && o.amx_attention && o.decode_prefetch && o.k_act_span);
        env = {{"LONGSCOPE_ACT_SPAN", "32"}};
        QVERIFY(!cpu_options_from_switches(lookup).k_act_span);
        env = {{"LONGSCOPE_ACT_SPAN", "256"}};
        QVERIFY(cpu_options_from_switches(lookup).k_act_span);
        env = {{"LONGSCOPE_SIMD", "avx2"}, {"LONGSCOPE_QUANT_MATMUL", "bf16"}, {"LONGSCOPE_PACK", "0"},
               {"LONGSCOPE_COPY_WEIGHTS", "0"}, {"LONGSCOPE_AMX", "0"}};
        o = cpu_options_from_switches(lookup);
        QCOMPARE(o.kernels, SimdLevel::Avx2);
        QCOMPARE(o.quant_matmul, QuantMatmulPath::Bf16);
        QVERIFY(!o.pack_weights && !o.copy_weights && !o.amx);
        env = {{"LONGSCOPE_AMX_ATTENTION", "0"}};
        o = cpu_options_from_switches(lookup);
        QVERIFY(o.amx && !o.amx_attention && o.decode_prefetch);
        env = {{"LONGSCOPE_PREFETCH", "0"}};
        o = cpu_options_from_switches(lookup);
        QVERIFY(!o.decode_prefetch && o.amx && o.pack_weights);
        env = {{"LONGSCOPE_PREFETCH", "1"}};
        QVERIFY(cpu_options_from_switches(lookup).decode_prefetch);
        QCOMPARE(cpu_options_from_switches(lookup).decode_prefetch_near, 0);
        // Distances: NEAR:FAR in bytes, each 64..65536; anything else keeps the default (0).
        const std::pair<const char *, std::pair<int, int>> distances[] = {
            {"1024:8192", {1024, 8192}}, {"256:0", {256, 0}},   {"0:2048", {0, 2048}},
            {"32:100000", {0, 0}},       {"x:4096", {0, 4096}}, {"512:4k", {512, 0}},
            {":", {0, 0}},               {"-64:64", {0, 64}},   {"65536:65537", {65536, 0}}};
        for (const auto &[text, want] : distances) {
            env = {{"LONGSCOPE_PREFETCH", text}};
            o = cpu_options_from_switches(lookup);
            QVERIFY2(o.decode_prefetch && o.decode_prefetch_near == want.first && o.decode_prefetch_far == want.second,
                     text);
        }
        env = {{"LONGSCOPE_QUANT_MATMUL", "amx"}, {"LONGSCOPE_AMX", "1"}};
        o = cpu_options_from_switches(lookup);
        QCOMPARE(o.quant_matmul, QuantMatmulPath::Amx);
        QVERIFY(o.amx);
        env = {{"LONGSCOPE_SIMD", "portable"}, {"LONGSCOPE_QUANT_MATMUL", "dequantize"}, {"LONGSCOPE_PACK", "1"}};
        o = cpu_options_from_switches(lookup);
        QCOMPARE(o.kernels, SimdLevel::Portable);
        QCOMPARE(o.quant_matmul, QuantMatmulPath::Dequantize);
        QVERIFY(o.pack_weights && o.copy_weights);
        env = {{"LONGSCOPE_SIMD", "avx512"}, {"LONGSCOPE_QUANT_MATMUL", "integer"}};
        o = cpu_options_from_switches(lookup);
        QCOMPARE(o.kernels, SimdLevel::Avx512);
        QCOMPARE(o.quant_matmul, QuantMatmulPath::Integer);
        env = {{"LONGSCOPE_SIMD", "sse"}, {"LONGSCOPE_QUANT_MATMUL", ""}};
        o = cpu_options_from_switches(lookup);
        QCOMPARE(o.kernels, SimdLevel::Auto);
        QCOMPARE(o.quant_matmul, QuantMatmulPath::Auto);
        QCOMPARE(cpu_options_from_switches({}).kernels, SimdLevel::Auto);
    }

    // Forced portable: every family reports its portable kernel, and nothing is packed.
    void forced_portable_reaches_every_family()
    {
        CpuOptionsScope scope(with_kernels(SimdLevel::Portable));
        QCOMPARE(kernel_table().level, VectorLevel::Portable);
        QCOMPARE(std::string(cpu_kernels().name), std::string("portable"));
        QCOMPARE(qkernel(), QKernel::Portable);
        QVERIFY(!has_bf16_dot());
        QCOMPARE(gemm_token_block(), 4);
        QCOMPARE(quantize_acts_level(), VectorLevel::Portable);
        for (DType t : {DType::F32, DType::F16, DType::BF16})
            QCOMPARE(dequantize_level(t), VectorLevel::Portable);
        for (DType t : k_quant_types)
            QCOMPARE(dequantize_level(t), VectorLevel::Portable);
        QCOMPARE(dequantize_packed_level(DType::Q4_K), VectorLevel::Portable);
        QCOMPARE(dequantize_packed_level(DType::Q6_K), VectorLevel::Portable);
        QVERIFY(!kernel_table().attention_v4);
        WeightView w;
        w.type = DType::Q4_K;
        w.shape = {256, 16};
        QVERIFY(packable(w.type, 256, 16));
        QVERIFY(!cpu_wants_packed(w));

        // What the families compute is the portable kernels' result.
        const int64_t n = 512;
        const std::vector<float> x = random_floats(size_t(3 * n), 5, 2.0f);
        QuantizedActs got, want;
        quantize_acts(nullptr, x.data(), 3, n, got);
        quantize_acts_with(VectorLevel::Portable, nullptr, x.data(), 3, n, want);
        QVERIFY(same_bits(got.q.data(), want.q.data(), want.q.size()));
        QVERIFY(same_bits(got.ds.data(), want.ds.data(), want.ds.size() * 4));
        for (DType t : k_quant_types) {
            std::vector<uint8_t> blocks(row_bytes(t, n));
            quantize_row(t, x.data(), blocks.data(), n);
            std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
            dequantize_row(t, blocks.data(), a.data(), n);
            dequantize_row_with(VectorLevel::Portable, t, blocks.data(), b.data(), n);
            QVERIFY2(same_bits(a.data(), b.data(), a.size() * 4), qPrintable(type_name(t)));
        }
        // The elementwise ops (the scalar reference at this level).
        std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
        swiglu(x.data(), x.data() + n, a.data(), n);
        cpu_kernels_at(VectorLevel::Portable).swiglu(x.data(), x.data() + n, b.data(), n);
        QVERIFY(same_bits(a.data(), b.data(), a.size() * 4));
    }

    // Forced AVX2 on a CPU with AVX-512: no family runs AVX-512 code, the activation quantizer
    // included.
    void forced_avx2_reaches_every_family()
    {
        if (!cpu_features().avx2)
            QSKIP("this CPU has no AVX2");
        CpuOptionsScope scope(with_kernels(SimdLevel::Avx2));
        QCOMPARE(kernel_table().level, VectorLevel::Avx2);
        QCOMPARE(std::string(cpu_kernels().name), std::string("avx2"));
        QCOMPARE(qkernel(), QKernel::Avx2);
        QVERIFY(!has_bf16_dot());
        QCOMPARE(gemm_token_block(), 2);
        QCOMPARE(quantize_acts_level(), VectorLevel::Avx2);
        QCOMPARE(dequantize_level(DType::Q8_0), VectorLevel::Avx2);
        for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q6_K})
            QCOMPARE(dequantize_level(t), VectorLevel::Portable); // no AVX2 build of these
        QCOMPARE(dequantize_packed_level(DType::Q4_K), VectorLevel::Portable);
        QVERIFY(!kernel_table().attention_v4);
        QCOMPARE(kernel_table().attention_v3, cpu_features().x86_64_v3);
        WeightView w;
        w.type = DType::Q6_K;
        w.shape = {256, 16};
        QVERIFY(cpu_wants_packed(w)); // the AVX2 packed kernels
    }

    // The default: the best this CPU has.
    void default_is_the_best_level()
    {
        CpuOptionsScope scope(CpuOptions{});
        const VectorLevel best = available_levels().front();
        QCOMPARE(kernel_table().level, best);
        QCOMPARE(quantize_acts_level(), best);
        QCOMPARE(dequantize_level(DType::Q4_K),
                 best == VectorLevel::Avx512 ? VectorLevel::Avx512 : VectorLevel::Portable);
        QCOMPARE(has_bf16_dot(), best == VectorLevel::Avx512 && cpu_features().avx512_bf16);
        QKernel ks[3];
        available_qkernels(ks, 3);
        QCOMPARE(qkernel(), ks[0]);
    }

    // Every level's activation quantizer gives the portable one's bits: ordinary values, an
    // all-zero block, values on rounding ties (x * 127 / max|x| = k + 0.5) and a block whose
    // largest value is negative.
    void quantize_acts_levels_agree()
    {
        const int64_t n = 1024, n_tokens = 5;
        std::vector<float> x = random_floats(size_t(n * n_tokens), 11, 1.5f);
        for (int j = 0; j < 32; ++j) {
            x[size_t(32 + j)] = 0.0f;
            x[size_t(64 + j)] = float(j) - 15.5f;
            x[size_t(96 + j)] = float(j) * 0.25f;
        }
        x[64] = -127.0f; // max|x| = 127: x * 1 rounds at every .5
        x[96 + 31] = -40.0f;
        QuantizedActs want;
        quantize_acts_with(VectorLevel::Portable, nullptr, x.data(), n_tokens, n, want);
        ThreadPool pool(2);
        for (VectorLevel level : available_levels()) {
            QuantizedActs got;
            quantize_acts_with(level, &pool, x.data(), n_tokens, n, got);
            const char *name = vector_level_name(level);
            QVERIFY2(same_acts(got, want), name);
        }
    }

    // Non-finite and extreme activations (a norm weight stored as NaN or infinity in a damaged
    // file) have one defined result on every level, the same bits everywhere: a block holding a
    // NaN or an infinity quantizes to q = 0 with the scale NaN (every product with it is NaN,
    // as in float arithmetic); a block too small for 127 / max|x| to be finite quantizes to
    // q = 0 with the scale 0; a block near the largest float quantizes as any other,
    // |x - d q| <= d / 2 with d = max|x| / 127. The other blocks of the token are untouched.
    void quantize_acts_non_finite()
    {
        const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
        const float big = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::denorm_min();
        struct Block {
            const char *name;
            std::vector<std::pair<int, float>> set; // (lane, value) over a block of ordinary values
            enum { NonFinite, Zero, Finite } kind;
        };
        const std::vector<Block> blocks = {
            {"NaN in lane 0", {{0, nan}}, Block::NonFinite},
            {"NaN in lane 31", {{31, nan}}, Block::NonFinite},
            {"NaN in lanes 7 and 20", {{7, nan}, {20, -nan}}, Block::NonFinite},
            {"+inf in lane 3", {{3, inf}}, Block::NonFinite},
            {"+inf in lanes 0 and 1", {{0, inf}, {1, inf}}, Block::NonFinite}, // two INT_MIN lanes summed once
            {"-inf in lane 16", {{16, -inf}}, Block::NonFinite},
            {"inf and NaN", {{5, inf}, {6, nan}}, Block::NonFinite},
            {"largest float", {{9, big}, {10, -big}, {11, big / 3}}, Block::Finite},
            {"ordinary", {}, Block::Finite},
        };
        const int64_t n = 32 * int64_t(blocks.size() + 3), n_tokens = 2;
        std::vector<float> x = random_floats(size_t(n * n_tokens), 5, 2.0f);
        for (size_t b = 0; b < blocks.size(); ++b)
            for (const auto &[lane, v] : blocks[b].set)
                x[32 * b + size_t(lane)] = v;
        for (int j = 0; j < 32; ++j) {
            x[32 * blocks.size() + size_t(j)] = nan;                          // all NaN
            x[32 * (blocks.size() + 1) + size_t(j)] = tiny * float(j % 5);    // 127 / max|x| overflows
            x[32 * (blocks.size() + 2) + size_t(j)] = j % 2 ? -big : big;     // all at the largest float
        }
        x[size_t(n + 40)] = inf; // token 1, block 1
        ThreadPool pool(2);
        QuantizedActs want;
        quantize_acts_with(VectorLevel::Portable, nullptr, x.data(), n_tokens, n, want);
        for (VectorLevel level : available_levels()) {
            QuantizedActs got;
            quantize_acts_with(level, &pool, x.data(), n_tokens, n, got);
            const char *name = vector_level_name(level);
            QVERIFY2(same_acts(got, want), name);
            // The defined result, block by block.
            for (int64_t t = 0; t < n_tokens; ++t)
                for (int64_t b = 0; b < n / 32; ++b) {
                    const float *xb = x.data() + t * n + b * 32;
                    const int8_t *q = got.q_row(t) + b * 32;
                    const float d = got.db_row(t)[b];
                    bool finite = true;
                    double amax = 0;
                    for (int j = 0; j < 32; ++j) {
                        finite = finite && std::isfinite(xb[j]);
                        if (std::isfinite(xb[j]))
                            amax = std::max(amax, std::fabs(double(xb[j])));
                    }
                    const QString where = QString("%1 token %2 block %3").arg(name).arg(t).arg(b);
                    for (int j = 0; j < 8; ++j)
                        QVERIFY2(same_bits(&got.dl_row(t)[b * 8 + j], &d, 4), qPrintable(where));
                    // Each half's sum of codes (the bias terms of the 16-value groups).
                    int sum = 0;
                    for (int h = 0; h < 2; ++h) {
                        int half = 0;
                        for (int j = 0; j < 16; ++j)
                            half += q[16 * h + j];
                        QCOMPARE(got.s16_row(t)[2 * b + h], half);
                        sum += half;
                    }
                    if (!finite || 127.0 / amax > double(std::numeric_limits<float>::max())) {
                        for (int j = 0; j < 32; ++j)
                            QVERIFY2(q[j] == 0, qPrintable(where + QString(" lane %1: q %2").arg(j).arg(q[j])));
                        QVERIFY2(finite ? d == 0.0f : std::isnan(d), qPrintable(where + QString(" d %1").arg(d)));
                        QVERIFY2(finite ? got.ds_row(t)[b] == 0.0f : std::isnan(got.ds_row(t)[b]), qPrintable(where));
                        continue;
                    }
                    QVERIFY2(std::fabs(double(d) - amax / 127.0) <= 1e-6 * amax / 127.0, qPrintable(where));
                    for (int j = 0; j < 32; ++j) {
                        QVERIFY2(std::abs(int(q[j])) <= 127, qPrintable(where));
                        QVERIFY2(std::fabs(double(xb[j]) - double(d) * q[j]) <= 0.5001 * double(d),
                                 qPrintable(where + QString(" lane %1: x %2 q %3 d %4").arg(j).arg(xb[j]).arg(q[j]).arg(d)));
                    }
                    QCOMPARE(got.ds_row(t)[b], d * float(sum));
                }
        }
    }

    // Activations with one scale per 256 values (QuantizedActs::span act_span_super, the K
    // types' products under the VNNI kernels): every level and the tile quantizer give the
    // portable one's bits, and the bits follow the documented rule, written here on its own:
    // every block of a span stores d = max|x| over the 256 / 127, q = round-to-nearest-even(x *
    // 127 / max), ds = d * sum(q); a span holding a NaN or an infinity stores q = 0 and d = NaN
    // in all eight blocks; a span of zeros q = 0 and d = 0.
    void quantize_acts_span_of_256()
    {
        const int64_t n = 1024, n_tokens = 8;
        std::vector<float> x = random_floats(size_t(n * n_tokens), 23, 1.5f);
        x[3] = 40.0f;                                                  // token 0, span 0: one large value
        x[size_t(n + 256 + 77)] = std::numeric_limits<float>::quiet_NaN(); // token 1, span 1
        x[size_t(2 * n + 700)] = -std::numeric_limits<float>::infinity();  // token 2, span 2
        std::fill(x.begin() + 3 * n + 512, x.begin() + 3 * n + 768, 0.0f); // token 3, span 2: zeros
        QuantizedActs want;
        quantize_acts_with(VectorLevel::Portable, nullptr, x.data(), n_tokens, n, want, act_span_super);
        QCOMPARE(want.span, act_span_super);
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t sp = 0; sp < n / 256; ++sp) {
                const float *xs = x.data() + t * n + sp * 256;
                bool finite = true;
                float amax = 0;
                for (int j = 0; j < 256; ++j) {
                    finite = finite && std::isfinite(xs[j]);
                    amax = std::max(amax, std::fabs(xs[j]));
                }
                for (int b = 0; b < 8; ++b) {
                    const int64_t blk = sp * 8 + b;
                    const QString where = QString("token %1 span %2 block %3").arg(t).arg(sp).arg(b);
                    const float d = want.db_row(t)[blk];
                    const int8_t *q = want.q_row(t) + blk * 32;
                    int sum = 0;
                    for (int j = 0; j < 32; ++j) {
                        const float v = xs[32 * b + j];
                        const int expect = !finite || amax == 0.0f ? 0 : int(std::nearbyint(v * (127.0f / amax)));
                        QVERIFY2(q[j] == expect, qPrintable(where + QString(" lane %1: %2 vs %3").arg(j).arg(q[j]).arg(expect)));
                        sum += q[j];
                    }
                    if (!finite) {
                        QVERIFY2(std::isnan(d), qPrintable(where));
                        continue;
                    }
                    QVERIFY2(d == amax / 127.0f, qPrintable(where));
                    QVERIFY2(want.ds_row(t)[blk] == d * float(sum), qPrintable(where));
                    for (int j = 0; j < 8; ++j)
                        QVERIFY2(want.dl_row(t)[blk * 8 + j] == d, qPrintable(where));
                }
            }
        ThreadPool pool(2);
        for (VectorLevel level : available_levels()) {
            QuantizedActs got;
            quantize_acts_with(level, &pool, x.data(), n_tokens, n, got, act_span_super);
            const char *name = vector_level_name(level);
            QVERIFY2(same_acts(got, want), name);
        }
        // The tile quantizer (four tokens straight into the packed layout) against the rows
        // interleaved by pack_acts.
        if (kernel_table().level == VectorLevel::Avx512) {
            PackedActs from_rows, direct;
            pack_acts(nullptr, want, from_rows);
            QCOMPARE(from_rows.span, act_span_super);
            QuantizedActs rows;
            quantize_pack_acts(pool, x.data(), n_tokens, n, rows, direct, /*rows_of_tiles=*/false, act_span_super);
            QCOMPARE(direct.span, act_span_super);
            const auto same = [](const auto &u, const auto &v) {
                return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(u[0])) == 0;
            };
            QVERIFY(same(direct.q, from_rows.q));
            QVERIFY(same(direct.db, from_rows.db));
            QVERIFY(same(direct.ds, from_rows.ds));
            QVERIFY(same(direct.b16, from_rows.b16));
            QVERIFY(same(direct.b32, from_rows.b32));
        }
    }

    // Every level's dequantizers give the portable ones' bits, row layout and packed layout.
    void dequantizers_agree()
    {
        const int64_t n_in = 768, n_out = 32;
        const std::vector<float> x = random_floats(size_t(n_in * n_out), 13, 0.7f);
        for (DType t : k_quant_types) {
            const size_t rb = row_bytes(t, n_in);
            std::vector<uint8_t> blocks(rb * size_t(n_out));
            for (int64_t r = 0; r < n_out; ++r)
                quantize_row(t, x.data() + r * n_in, blocks.data() + size_t(r) * rb, n_in);
            std::vector<float> want(size_t(n_in) * n_out), got(want.size());
            for (int64_t r = 0; r < n_out; ++r)
                dequantize_row_with(VectorLevel::Portable, t, blocks.data() + size_t(r) * rb, want.data() + r * n_in,
                                    n_in);
            for (VectorLevel level : available_levels()) {
                for (int64_t r = 0; r < n_out; ++r)
                    dequantize_row_with(level, t, blocks.data() + size_t(r) * rb, got.data() + r * n_in, n_in);
                QVERIFY2(same_bits(got.data(), want.data(), want.size() * 4),
                         qPrintable(QString("%1 %2").arg(type_name(t)).arg(vector_level_name(level))));
            }
            if (!packable(t, n_in, n_out))
                continue;
            std::vector<uint8_t> packed(packed_size(t, n_in, n_out));
            pack_rows(t, blocks.data(), n_in, packed.data(), 0, n_out / packed_group_rows);
            for (SimdLevel forced : {SimdLevel::Auto, SimdLevel::Avx2, SimdLevel::Portable}) {
                CpuOptionsScope scope(with_kernels(forced));
                for (int64_t r = 0; r < n_out; ++r)
                    dequantize_packed_row(t, packed.data(), n_in, r, got.data() + r * n_in);
                QVERIFY2(same_bits(got.data(), want.data(), want.size() * 4),
                         qPrintable(QString("packed %1 %2").arg(type_name(t))
                                        .arg(vector_level_name(kernel_table().level))));
            }
        }
    }

    // Tiled attention under every forced level gives the default's bits (the x86-64-v4 and -v3
    // builds agree), with and without a mask tile, with keys rotated as they are loaded or not,
    // and for decode. (Plain attention's dot products are the float kernels of the level, whose
    // sums are grouped differently at each level; prefill on AMX tiles, with its BF16 terms, is
    // held to a double-precision reference by tst_amx instead, so the tiles are off here.)
    void attention_builds_agree()
    {
        const int n_head = 4, n_head_kv = 2, hd = 64;
        const int64_t n_q = 37, n_kv = 150;
        const std::vector<float> q = random_floats(size_t(n_q * n_head * hd), 21, 1.0f);
        const std::vector<float> k = random_floats(size_t(n_kv * n_head_kv * hd), 22, 1.0f);
        const std::vector<float> v = random_floats(size_t(n_kv * n_head_kv * hd), 23, 1.0f);
        AttentionProblem p = last_queries_problem(n_head, n_head_kv, hd, q.data(), n_q, k.data(), v.data(), n_kv);
        ThreadPool pool(2);
        auto run = [&](SimdLevel level, int which) {
            CpuOptions o = with_kernels(level);
            o.amx = false;
            CpuOptionsScope scope(o);
            std::vector<float> out(q.size(), NAN);
            p.out = out.data();
            if (which == 0)
                attention_tiled(pool, p, true);
            else
                attention_tiled(pool, p, false, 32);
            return out;
        };
        std::vector<double> inv_freq(hd / 2);
        for (int i = 0; i < hd / 2; ++i)
            inv_freq[size_t(i)] = std::pow(10000.0, -2.0 * i / hd);
        KeyRotation rot;
        rot.inv_freq = inv_freq;
        rot.n_rot = hd;
        for (const KeyRotation *r : {static_cast<const KeyRotation *>(nullptr), static_cast<const KeyRotation *>(&rot)}) {
            p.rotate_keys = r;
            for (int which = 0; which < 2; ++which) {
                const std::vector<float> best = run(SimdLevel::Auto, which);
                for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Portable})
                    QVERIFY2(same_bits(run(level, which).data(), best.data(), best.size() * 4),
                             qPrintable(QString("variant %1, level %2, rotated %3").arg(which).arg(int(level))
                                            .arg(r != nullptr)));
            }
        }
        p.rotate_keys = nullptr;
        // Decode: the split-keys path.
        p.n_q = 1;
        p.q_pos0 = n_kv - 1;
        const std::vector<float> best = run(SimdLevel::Auto, 0);
        for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Portable}) {
            const std::vector<float> got = run(level, 0);
            QVERIFY(same_bits(got.data(), best.data(), size_t(n_head * hd) * 4));
        }
    }

    // The forced path for quantized weights and the packing switch reach matmul's choices.
    void matmul_options()
    {
        CpuOptions o;
        o.quant_matmul = QuantMatmulPath::Dequantize;
        o.pack_weights = false;
        CpuOptionsScope scope(o);
        QCOMPARE(kernel_table().quant_matmul, QuantMatmulPath::Dequantize);
        WeightView w;
        w.type = DType::Q4_K;
        w.shape = {256, 16};
        QVERIFY(!cpu_wants_packed(w));
        // Dequantize forced: matmul with Auto equals the float kernel on the widened rows.
        const int64_t n_in = 256, n_out = 16, n_tokens = 3;
        const std::vector<float> values = random_floats(size_t(n_in * n_out), 31, 0.5f);
        std::vector<uint8_t> blocks(row_bytes(DType::Q4_K, n_in) * size_t(n_out));
        for (int64_t r = 0; r < n_out; ++r)
            quantize_row(DType::Q4_K, values.data() + r * n_in, blocks.data() + size_t(r) * row_bytes(DType::Q4_K, n_in),
                         n_in);
        w.data = blocks.data();
        w.nbytes = blocks.size();
        const std::vector<float> x = random_floats(size_t(n_tokens * n_in), 32, 1.0f);
        std::vector<float> y_auto(size_t(n_tokens * n_out)), y_deq(y_auto.size());
        ThreadPool pool(2);
        matmul(pool, w, x.data(), y_auto.data(), n_tokens);
        matmul_with(pool, w, x.data(), y_deq.data(), n_tokens, QuantMatmul::Dequantize);
        QVERIFY(same_bits(y_auto.data(), y_deq.data(), y_auto.size() * 4));
    }
};

QTEST_APPLESS_MAIN(TestKernelTable)
#include "tst_kernel_table.moc"
