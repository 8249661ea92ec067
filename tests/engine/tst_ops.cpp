// CPU ops against naive references written here (double accumulation, textbook formulas),
// and half-precision conversions against the CPU's own F16C instructions.
#include "cpu/gemm.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"

#include <QtTest>

#include <atomic>
#include <cmath>
#include <complex>
#include <cpuid.h>
#include <cstring>
#include <immintrin.h>
#include <random>
#include <vector>

using namespace longscope;

namespace {

// From cpuid: clang's __builtin_cpu_supports (the fuzz build) does not know "f16c".
bool has_f16c()
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f)
{
    return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

uint32_t bits_of(float f)
{
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

float float_of(uint32_t b)
{
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

struct OwnedWeight {
    std::vector<uint8_t> bytes;
    WeightView view;
    std::vector<double> values; // the exact values the weight holds, as doubles
};

// A [n_in, n_out] weight of the given type with random values.
OwnedWeight make_weight(DType type, int64_t n_in, int64_t n_out, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    OwnedWeight w;
    const size_t n = size_t(n_in * n_out);
    w.values.resize(n);
    const size_t esize = type == DType::F32 ? 4 : 2;
    w.bytes.resize(n * esize);
    for (size_t i = 0; i < n; ++i) {
        float v = dist(rng);
        if (type == DType::F32) {
            std::memcpy(w.bytes.data() + 4 * i, &v, 4);
            w.values[i] = v;
        } else if (type == DType::F16) {
            uint16_t h = hw_f32_to_f16(v);
            std::memcpy(w.bytes.data() + 2 * i, &h, 2);
            w.values[i] = hw_f16_to_f32(h);
        } else { // BF16: truncation is an exactly representable value; that is all we need
            uint16_t h = uint16_t(bits_of(v) >> 16);
            std::memcpy(w.bytes.data() + 2 * i, &h, 2);
            w.values[i] = float_of(uint32_t(h) << 16);
        }
    }
    w.view.name = "test";
    w.view.type = type;
    w.view.shape = {n_in, n_out};
    w.view.data = w.bytes.data();
    w.view.nbytes = w.bytes.size();
    return w;
}

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float &x : v)
        x = dist(rng);
    return v;
}

} // namespace

class TestOps : public QObject {
    Q_OBJECT

private slots:
    void f16_to_f32_matches_hardware_for_every_value()
    {
        if (!has_f16c())
            QSKIP("this CPU has no F16C instructions to compare against");
        for (uint32_t h = 0; h < 65536; ++h) {
            const float a = f16_to_f32(uint16_t(h)), b = hw_f16_to_f32(uint16_t(h));
            if (std::isnan(b)) {
                QVERIFY2(std::isnan(a), qPrintable(QString::number(h, 16)));
                continue;
            }
            QVERIFY2(bits_of(a) == bits_of(b), qPrintable(QString::number(h, 16)));
        }
    }

    void f32_to_f16_matches_hardware()
    {
        if (!has_f16c())
            QSKIP("this CPU has no F16C instructions to compare against");
        std::mt19937 rng(7);
        std::vector<float> cases = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e9f,
                                    -1e9f, 6.0e-8f, 2.9e-8f, 3.0e-8f, 1e-10f, 6.1035156e-05f,
                                    INFINITY, -INFINITY};
        for (int i = 0; i < 1000000; ++i)
            cases.push_back(float_of(rng()));
        std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
        for (int i = 0; i < 200000; ++i)
            cases.push_back(small(rng));
        for (float f : cases) {
            if (std::isnan(f)) {
                QVERIFY(std::isnan(f16_to_f32(f32_to_f16(f))));
                continue;
            }
            QVERIFY2(f32_to_f16(f) == hw_f32_to_f16(f), qPrintable(QString::number(double(f), 'g', 10)));
        }
    }

    void f32_to_bf16_rounds_to_nearest_even()
    {
        std::mt19937 rng(11);
        for (int i = 0; i < 200000; ++i) {
            const float f = float_of(rng());
            if (std::isnan(f) || std::isinf(f))
                continue;
            const uint16_t got = f32_to_bf16(f);
            // Naive reference: of the two neighbouring bf16 values, the nearer; ties to even.
            const uint16_t lo = uint16_t(bits_of(f) >> 16);
            const uint16_t hi = uint16_t(lo + 1);
            const double dlo = std::fabs(double(float_of(uint32_t(lo) << 16)) - f);
            // Past the largest finite value, the next step up is infinity, standing at 2^128.
            double vhi = float_of(uint32_t(hi) << 16);
            if (std::isinf(vhi))
                vhi = std::copysign(std::ldexp(1.0, 128), vhi);
            const double dhi = std::fabs(vhi - f);
            const uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
            QVERIFY2(got == want, qPrintable(QString::number(double(f), 'g', 10)));
        }
    }

    void matmul_matches_naive_data()
    {
        QTest::addColumn<int>("type");
        QTest::addColumn<int>("n_in");
        QTest::addColumn<int>("n_out");
        QTest::addColumn<int>("n_tokens");
        for (DType t : {DType::F32, DType::F16, DType::BF16})
            for (auto [i, o, n] : {std::tuple{37, 53, 1}, {64, 172, 3}, {172, 64, 7}, {1, 5, 2},
                                   {300, 9, 11}, {8, 1000, 1}, {4161, 7, 1}, {5632, 13, 1}})
                QTest::addRow("%s %dx%d tokens=%d", dtype_name(t).data(), i, o, n)
                    << int(t) << i << o << n;
    }
    void matmul_matches_naive()
    {
        QFETCH(int, type);
        QFETCH(int, n_in);
        QFETCH(int, n_out);
        QFETCH(int, n_tokens);
        OwnedWeight w = make_weight(DType(type), n_in, n_out, 1234);
        std::vector<float> x = random_vec(size_t(n_in * n_tokens), 99);
        for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            std::vector<float> y(size_t(n_out * n_tokens), NAN);
            matmul(pool, w.view, x.data(), y.data(), n_tokens);
            for (int t = 0; t < n_tokens; ++t)
                for (int o = 0; o < n_out; ++o) {
                    double ref = 0, mag = 0;
                    for (int i = 0; i < n_in; ++i) {
                        ref += w.values[size_t(o * n_in + i)] * x[size_t(t * n_in + i)];
                        mag += std::fabs(w.values[size_t(o * n_in + i)] * x[size_t(t * n_in + i)]);
                    }
                    // f32 accumulation: error bounded by ~n * eps * sum|terms|.
                    const double tol = 1e-6 * n_in * mag + 1e-6;
                    const double got = y[size_t(t * n_out + o)];
                    QVERIFY2(std::fabs(got - ref) <= tol,
                             qPrintable(QString("t=%1 o=%2 got %3 want %4").arg(t).arg(o).arg(got).arg(ref)));
                }
        }
    }

    // F16 weights stay on the exact float kernel unless the BF16 dot products are asked for;
    // asked for, over 16 tokens and more, the product is that of the weights and activations
    // rounded to BF16 (to nearest even), summed in float.
    void f16_weights_take_bf16_dot_products_only_when_asked()
    {
        const int n_in = 96, n_out = 40, n_tokens = 20;
        OwnedWeight w = make_weight(DType::F16, n_in, n_out, 4321);
        QCOMPARE(matmul_path(w.view, n_tokens), QuantMatmul::Dequantize);
        QCOMPARE(matmul_path(w.view, bf16_min_tokens - 1, QuantMatmul::Bf16), QuantMatmul::Dequantize);
        QCOMPARE(matmul_path(w.view, n_tokens, QuantMatmul::Bf16),
                 has_bf16_dot() ? QuantMatmul::Bf16 : QuantMatmul::Dequantize);
        std::vector<float> x = random_vec(size_t(n_in * n_tokens), 4322);
        for (int threads : {1, 2}) {
            ThreadPool pool(threads);
            std::vector<float> y(size_t(n_out * n_tokens), NAN);
            matmul_with(pool, w.view, x.data(), y.data(), n_tokens, QuantMatmul::Bf16);
            for (int t = 0; t < n_tokens; ++t)
                for (int o = 0; o < n_out; ++o) {
                    double ref = 0, ref_bf = 0, mag = 0;
                    for (int i = 0; i < n_in; ++i) {
                        const double wv = w.values[size_t(o * n_in + i)];
                        const float xv = x[size_t(t * n_in + i)];
                        ref += wv * xv;
                        ref_bf += double(bf16_to_f32(f32_to_bf16(float(wv)))) * bf16_to_f32(f32_to_bf16(xv));
                        mag += std::fabs(wv * xv);
                    }
                    const double got = y[size_t(t * n_out + o)];
                    const double want = has_bf16_dot() ? ref_bf : ref;
                    // Float accumulation of 96 terms: within 1e-5 of sum|w x|, far under the BF16 rounding.
                    QVERIFY2(std::fabs(got - want) <= 1e-5 * mag + 1e-6,
                             qPrintable(QString("threads=%1 t=%2 o=%3: %4 vs %5 (exact %6)").arg(threads).arg(t).arg(o)
                                            .arg(got, 0, 'g', 9).arg(want, 0, 'g', 9).arg(ref, 0, 'g', 9)));
                }
        }
        if (!has_bf16_dot())
            qInfo("no AVX-512 BF16 here: F16 weights stay on the float kernel even when BF16 is asked for");
    }

    // A token multiplied alone (decode: rows one or eight at a time) gives the same bits as in a
    // batch of several (tiles of up to 6 x 4, whose sums are reduced together), for short rows
    // and for rows above 4096, with whole and partial tiles of rows (6, 6, 6, 5; 6 x 4 + 4;
    // 6 x 4 + 2) and of tokens, and a batch over one token group (128).
    void single_token_equals_batched_data()
    {
        QTest::addColumn<int>("type");
        QTest::addColumn<int>("n_in");
        QTest::addColumn<int>("n_out");
        QTest::addColumn<int>("n_tokens");
        for (DType t : {DType::F32, DType::F16, DType::BF16})
            for (auto [n, o, nt] : {std::tuple{300, 23, 5}, {4161, 23, 5}, {300, 28, 9}, {200, 26, 131}})
                QTest::addRow("%s n_in=%d n_out=%d tokens=%d", dtype_name(t).data(), n, o, nt) << int(t) << n << o << nt;
    }
    void single_token_equals_batched()
    {
        QFETCH(int, type);
        QFETCH(int, n_in);
        QFETCH(int, n_out);
        QFETCH(int, n_tokens);
        OwnedWeight w = make_weight(DType(type), n_in, n_out, 77);
        std::vector<float> x = random_vec(size_t(n_in * n_tokens), 78);
        // One thread takes all the rows at once (long rows: blocks of eight, then one at a
        // time); two split them into smaller pieces.
        for (int threads : {1, 2}) {
            ThreadPool pool(threads);
            std::vector<float> batched(size_t(n_out * n_tokens), NAN), one(size_t(n_out), NAN);
            matmul(pool, w.view, x.data(), batched.data(), n_tokens);
            for (int t = 0; t < n_tokens; ++t) {
                matmul(pool, w.view, x.data() + size_t(t * n_in), one.data(), 1);
                for (int o = 0; o < n_out; ++o)
                    QVERIFY2(bits_of(one[size_t(o)]) == bits_of(batched[size_t(t * n_out + o)]),
                             qPrintable(QString("threads=%1 t=%2 o=%3: %4 vs %5").arg(threads).arg(t).arg(o)
                                            .arg(one[size_t(o)], 0, 'g', 9)
                                            .arg(batched[size_t(t * n_out + o)], 0, 'g', 9)));
            }
        }
    }

    void rmsnorm_matches_naive()
    {
        const int n = 67, tokens = 3;
        OwnedWeight w = make_weight(DType::F32, n, 1, 5);
        std::vector<float> x = random_vec(size_t(n * tokens), 6, 3.0f), out(size_t(n * tokens));
        rmsnorm(x.data(), w.view, out.data(), tokens, n, 1e-5f);
        for (int t = 0; t < tokens; ++t) {
            double ss = 0;
            for (int i = 0; i < n; ++i)
                ss += double(x[size_t(t * n + i)]) * x[size_t(t * n + i)];
            const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
            for (int i = 0; i < n; ++i)
                QVERIFY(std::fabs(out[size_t(t * n + i)] - x[size_t(t * n + i)] * inv * w.values[size_t(i)]) < 1e-5);
        }
    }

    void rope_matches_complex_rotation()
    {
        // Interleaved RoPE is multiplication of (x[2i] + i x[2i+1]) by exp(i * pos * theta_i).
        const int heads = 3, hd = 16, n_rot = 12, tokens = 4;
        const double base = 10000.0;
        std::vector<double> pos = {0, 1, 17, 511}, inv(size_t(n_rot / 2));
        for (int i = 0; i < n_rot / 2; ++i)
            inv[size_t(i)] = std::pow(base, -2.0 * i / n_rot);
        std::vector<float> x = random_vec(size_t(tokens * heads * hd), 3), y = x;
        rope(y.data(), tokens, heads, hd, n_rot, RopeStyle::Interleaved, pos, inv);
        for (int t = 0; t < tokens; ++t)
            for (int h = 0; h < heads; ++h) {
                const float *a = x.data() + (t * heads + h) * hd;
                const float *b = y.data() + (t * heads + h) * hd;
                for (int i = 0; i < n_rot / 2; ++i) {
                    std::complex<double> z(a[2 * i], a[2 * i + 1]);
                    z *= std::polar(1.0, pos[size_t(t)] * std::pow(base, -2.0 * i / n_rot));
                    QVERIFY(std::fabs(b[2 * i] - z.real()) < 1e-5);
                    QVERIFY(std::fabs(b[2 * i + 1] - z.imag()) < 1e-5);
                }
                for (int d = n_rot; d < hd; ++d) // dimensions past n_rot are untouched
                    QCOMPARE(b[d], a[d]);
            }
    }

    void rope_layouts_agree_under_the_hf_permutation()
    {
        // HF checkpoints permute q/k rows so that interleaved pair (2i, 2i+1) sits at
        // (i, i + d/2). Rotating the permuted vector rotate_half-style must give the
        // permuted result of the interleaved rotation.
        const int hd = 8, tokens = 2;
        std::vector<double> pos = {3, 250}, inv(size_t(hd / 2));
        for (int i = 0; i < hd / 2; ++i)
            inv[size_t(i)] = std::pow(10000.0, -2.0 * i / hd);
        std::vector<float> x = random_vec(size_t(tokens * hd), 8), p(x.size());
        for (int t = 0; t < tokens; ++t)
            for (int i = 0; i < hd / 2; ++i) {
                p[size_t(t * hd + i)] = x[size_t(t * hd + 2 * i)];
                p[size_t(t * hd + i + hd / 2)] = x[size_t(t * hd + 2 * i + 1)];
            }
        rope(x.data(), tokens, 1, hd, hd, RopeStyle::Interleaved, pos, inv);
        rope(p.data(), tokens, 1, hd, hd, RopeStyle::RotateHalf, pos, inv);
        for (int t = 0; t < tokens; ++t)
            for (int i = 0; i < hd / 2; ++i) {
                QCOMPARE(p[size_t(t * hd + i)], x[size_t(t * hd + 2 * i)]);
                QCOMPARE(p[size_t(t * hd + i + hd / 2)], x[size_t(t * hd + 2 * i + 1)]);
            }
    }

    void softmax_and_swiglu_match_naive()
    {
        std::vector<float> x = random_vec(50, 4, 10.0f), s = x;
        softmax_inplace(s.data(), int64_t(s.size()));
        double denom = 0;
        for (float v : x)
            denom += std::exp(double(v));
        for (size_t i = 0; i < x.size(); ++i)
            QVERIFY(std::fabs(s[i] - std::exp(double(x[i])) / denom) < 1e-6);
        std::vector<float> g = random_vec(33, 1, 4.0f), u = random_vec(33, 2), o(33);
        swiglu(g.data(), u.data(), o.data(), 33);
        for (size_t i = 0; i < 33; ++i)
            QVERIFY(std::fabs(o[i] - g[i] / (1 + std::exp(-double(g[i]))) * u[i]) < 1e-5);
    }

    void simd_kernels_match_naive_data()
    {
        QTest::addColumn<int>("kernel");
        QTest::addColumn<int>("n");
        const CpuKernels *ks[4];
        const int count = available_cpu_kernels(ks, 4);
        for (int k = 0; k < count; ++k)
            for (int n : {1, 7, 8, 15, 16, 17, 31, 33, 64, 100, 1000, 4099})
                QTest::addRow("%s n=%d", ks[k]->name, n) << k << n;
    }
    void simd_kernels_match_naive()
    {
        QFETCH(int, kernel);
        QFETCH(int, n);
        const CpuKernels *ks[4];
        available_cpu_kernels(ks, 4);
        const CpuKernels &k = *ks[kernel];
        // Misaligned starts (+1 float) catch aligned-load assumptions.
        std::vector<float> w = random_vec(size_t(n) + 1, 21), x = random_vec(4 * (size_t(n) + 1) + 1, 22);
        const float *wp = w.data() + 1, *xp = x.data() + 1;
        float out[4];
        k.dot4(wp, xp, n + 1, n, out);
        for (int t = 0; t < 4; ++t) {
            double ref = 0, mag = 0;
            for (int i = 0; i < n; ++i) {
                ref += double(wp[i]) * xp[t * (n + 1) + i];
                mag += std::fabs(double(wp[i]) * xp[t * (n + 1) + i]);
            }
            QVERIFY(std::fabs(out[t] - ref) <= 1e-6 * n * mag + 1e-6);
            // A token's result does not depend on the tokens evaluated with it.
            QCOMPARE(out[t], k.dot(wp, xp + t * (n + 1), n));
        }
        // Half-precision rows, including an odd (misaligned) start, against the scalar truth.
        std::vector<uint16_t> h(size_t(n) + 1);
        std::mt19937 rng(static_cast<uint32_t>(n));
        for (auto &v : h)
            v = uint16_t(rng() & 0x7bff); // finite values
        std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
        k.f16_to_f32(h.data() + 1, a.data(), n);
        k.bf16_to_f32(h.data() + 1, b.data(), n);
        for (int i = 0; i < n; ++i) {
            QCOMPARE(a[size_t(i)], f16_to_f32(h[size_t(i) + 1]));
            QCOMPARE(b[size_t(i)], bf16_to_f32(h[size_t(i) + 1]));
        }
    }

    void thread_pool_covers_every_index_once_data()
    {
        QTest::addColumn<int>("threads");
        QTest::addColumn<int>("n");
        for (int t : {1, 2, 3, 8})
            for (int n : {1, 2, 7, 1000})
                QTest::addRow("threads=%d n=%d", t, n) << t << n;
    }
    void thread_pool_covers_every_index_once()
    {
        QFETCH(int, threads);
        QFETCH(int, n);
        ThreadPool pool(threads);
        for (int round = 0; round < 50; ++round) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i)
                    hits[size_t(i)]++;
            });
            for (auto &h : hits)
                QCOMPARE(h.load(), 1);
        }
    }
};

QTEST_APPLESS_MAIN(TestOps)
#include "tst_ops.moc"
