// The compute probe behind bench's prefill roofline: a positive, finite rate for every
// instruction family at every kernel level, the family prefill's matrix products really take
// for each weight type, and a ceiling that a real matrix product (timed here, its operations
// counted from its shape) approaches but does not pass.
#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/packed.h"
#include "cpu/thread_pool.h"

#include "longscope/cpu_options.h"
#include "longscope/hardware.h"
#include "support/cpu_options_scope.h"

#include <QtTest>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

using namespace longscope;
using longscope::test::CpuOptionsScope;

namespace {

const ComputeFamily k_families[] = {ComputeFamily::F32Fma, ComputeFamily::Bf16Dot, ComputeFamily::Int8Dot,
                                    ComputeFamily::AmxBf16};

// Operations per second of a [n, n] F32 matrix times n_tokens activations on one thread, best of 3.
double matmul_rate(int64_t n, int64_t n_tokens)
{
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> w(size_t(n * n)), x(size_t(n * n_tokens)), y(size_t(n * n_tokens));
    for (float &v : w)
        v = dist(rng);
    for (float &v : x)
        v = dist(rng);
    WeightView view;
    view.name = "probe";
    view.type = DType::F32;
    view.shape = {n, n};
    view.data = w.data();
    view.nbytes = w.size() * sizeof(float);
    ThreadPool pool(1);
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        matmul(pool, view, x.data(), y.data(), n_tokens);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 2.0 * double(n) * double(n) * double(n_tokens) / s);
    }
    return best;
}

} // namespace

class TestComputePeak : public QObject {
    Q_OBJECT

private slots:
    void positiveAndFiniteAtEveryLevel_data()
    {
        QTest::addColumn<int>("level");
        QTest::addRow("auto") << int(SimdLevel::Auto);
        QTest::addRow("avx2") << int(SimdLevel::Avx2);
        QTest::addRow("portable") << int(SimdLevel::Portable);
    }

    void positiveAndFiniteAtEveryLevel()
    {
        QFETCH(int, level);
        CpuOptions o;
        o.kernels = SimdLevel(level);
        CpuOptionsScope scope(o);
        for (ComputeFamily f : k_families) {
            QVERIFY(!compute_family_name(f).empty());
            for (int threads : {1, 2}) {
                const double peak = measure_compute_peak(threads, f);
                QVERIFY2(std::isfinite(peak) && peak > 0, qPrintable(QString::fromStdString(compute_family_name(f))));
                // Not absurd either: under 10 TFLOP/s per thread for any vector unit of today.
                QVERIFY(peak < 1e13 * threads);
            }
        }
    }

    void familyFollowsTheMatmulPath()
    {
        // With AMX tiles every weight type but F32 takes them over many tokens.
        const CpuKernelTable &t0 = kernel_table();
        if (t0.amx) {
            for (const char *type : {"F16", "BF16", "Q8_0", "Q4_K", "IQ4_XS"})
                QCOMPARE(prefill_compute_family(type), ComputeFamily::AmxBf16);
            QCOMPARE(prefill_compute_family("F32"), ComputeFamily::F32Fma);
            // Packed types whose rows widen with scalar code keep the integer kernels.
            if (t0.pack_weights && dequantize_packed_level(DType::Q3_K) != VectorLevel::Avx512)
                QCOMPARE(prefill_compute_family("Q3_K"), ComputeFamily::Int8Dot);
        }
        // The rest as on a CPU without them.
        CpuOptions no_amx;
        no_amx.amx = false;
        CpuOptionsScope without(no_amx);
        const CpuKernelTable &t = kernel_table();
        QCOMPARE(prefill_compute_family("F32"), ComputeFamily::F32Fma);
        QCOMPARE(prefill_compute_family("F16"), ComputeFamily::F32Fma);
        QCOMPARE(prefill_compute_family("BF16"), ComputeFamily::F32Fma);
        QCOMPARE(prefill_compute_family("no such type"), ComputeFamily::F32Fma);
        // Quantized weights: 8-bit integer dot products for the types packed at load (where
        // the kernel table packs), else BF16 dot products over many tokens where the kernels
        // have them, else 8-bit integer ones.
        const ComputeFamily quant = t.bf16_dot ? ComputeFamily::Bf16Dot : ComputeFamily::Int8Dot;
        const ComputeFamily packed = t.pack_weights ? ComputeFamily::Int8Dot : quant;
        const char *const quant_types[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL",
                                           "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"};
        for (const char *type : quant_types)
            QCOMPARE(prefill_compute_family(type), packed);
        {
            // Matrices left in the file's row layout (packing off).
            CpuOptions unpacked = no_amx;
            unpacked.pack_weights = false;
            CpuOptionsScope rows(unpacked);
            QVERIFY(!kernel_table().pack_weights);
            for (const char *type : quant_types)
                QCOMPARE(prefill_compute_family(type), quant);
        }
        CpuOptions o;
        o.amx = false;
        o.quant_matmul = QuantMatmulPath::Integer;
        CpuOptionsScope scope(o);
        QCOMPARE(prefill_compute_family("Q4_K"), ComputeFamily::Int8Dot);
    }

    // Prefill attention's scores and values: integer dot products for keys cached as Q8_0 or
    // Q4_0 and read as they are (not rotated on load), AMX tiles for memory-efficient attention
    // where the kernel table uses them (float keys, heads of a multiple of 32), float
    // multiply-adds otherwise; values never on integers.
    void attentionFamiliesFollowTheKernels()
    {
        const auto is = [](AttentionFamilies a, ComputeFamily s, ComputeFamily v) {
            return a.scores == s && a.values == v;
        };
        const bool tiles = kernel_table().amx_attention && kernel_table().attention_v4;
        for (KvType k : {KvType::Q8_0, KvType::Q4_0}) {
            for (bool mem_eff : {false, true})
                QVERIFY(is(prefill_attention_families(k, false, mem_eff, 64), ComputeFamily::Int8Dot, ComputeFamily::F32Fma));
            // Keys kept before RoPE are decoded and rotated to floats first.
            QVERIFY(is(prefill_attention_families(k, true, false, 64), ComputeFamily::F32Fma, ComputeFamily::F32Fma));
        }
        for (KvType k : {KvType::F32, KvType::F16}) {
            QVERIFY(is(prefill_attention_families(k, false, false, 64), ComputeFamily::F32Fma, ComputeFamily::F32Fma));
            QVERIFY(is(prefill_attention_families(k, false, false, 40), ComputeFamily::F32Fma, ComputeFamily::F32Fma));
            const ComputeFamily mem_eff = tiles ? ComputeFamily::AmxBf16 : ComputeFamily::F32Fma;
            QVERIFY(is(prefill_attention_families(k, false, true, 64), mem_eff, mem_eff));
            QVERIFY(is(prefill_attention_families(k, true, true, 128), mem_eff, mem_eff));
            QVERIFY(is(prefill_attention_families(k, false, true, 40), ComputeFamily::F32Fma, ComputeFamily::F32Fma));
        }
        // Without AMX (or with its attention switched off) float keys are on multiply-adds.
        CpuOptions no_amx;
        no_amx.amx = false;
        CpuOptionsScope scope(no_amx);
        QVERIFY(is(prefill_attention_families(KvType::F16, false, true, 64), ComputeFamily::F32Fma, ComputeFamily::F32Fma));
        QVERIFY(is(prefill_attention_families(KvType::Q8_0, false, true, 64), ComputeFamily::Int8Dot, ComputeFamily::F32Fma));
    }

    void aRealMatmulStaysUnderTheCeiling()
    {
        // 2 x 768^2 x 64 operations on F32 weights, in cache, through the GEMM tiles.
        // Measured by turns, best of each: another process on the core during one of them
        // (ctest runs suites side by side) does not tilt the ratio. The float kernel, not the AMX
        // tiles (tst_amx checks those against their own probe).
        CpuOptions no_amx;
        no_amx.amx = false;
        CpuOptionsScope scope(no_amx);
        double peak = 0, rate = 0;
        for (int round = 0; round < 4; ++round) {
            peak = std::max(peak, measure_compute_peak(1, ComputeFamily::F32Fma));
            rate = std::max(rate, matmul_rate(768, 64));
        }
        const double fraction = rate / peak;
        qInfo("F32 matmul %.1f GFLOP/s, peak %.1f GFLOP/s (%s): fraction %.2f", rate / 1e9, peak / 1e9,
              compute_family_name(ComputeFamily::F32Fma).c_str(), fraction);
        QVERIFY(fraction > 0);
        QVERIFY2(fraction <= 1.5, "the probe's peak is not a ceiling for the kernel it stands for");
    }
};

QTEST_APPLESS_MAIN(TestComputePeak)
#include "tst_compute_peak.moc"
