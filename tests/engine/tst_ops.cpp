// CPU ops against naive references written here (double accumulation, textbook formulas),
// and half-precision conversions against the CPU's own F16C instructions.
#include "cpu/gemm.h"
#include "cpu/ops.h"
#include "cpu/packed.h"
#include "support/cpu_options_scope.h"
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
#include <string>
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

// Error of y in units in the last place of the exactly rounded value of ref: 0 where both are the
// same infinity or both NaN, infinite where only one is infinite or NaN.
double ulp_error(float y, double ref)
{
    const float r = float(ref);
    if (std::isnan(r) || std::isnan(y))
        return std::isnan(r) && std::isnan(y) ? 0.0 : INFINITY;
    if (std::isinf(r) || std::isinf(y))
        return r == y ? 0.0 : INFINITY;
    const float a = std::fabs(r);
    const double ulp = double(std::nextafter(a, INFINITY)) - double(a);
    return std::fabs(double(y) - ref) / ulp;
}

// Every `stride`-th float of [lo, hi] (lo < 0 < hi) by bit pattern, out from -0 and +0, with
// the subnormals and the ends.
std::vector<float> dense_range(float lo, float hi, uint32_t stride)
{
    std::vector<float> v;
    for (uint32_t b = 0x80000000u; float_of(b) >= lo; b += stride)
        v.push_back(float_of(b));
    for (uint32_t b = 0; float_of(b) <= hi; b += stride)
        v.push_back(float_of(b));
    v.push_back(lo);
    v.push_back(hi);
    return v;
}

// The sign of a result that is not NaN (NaN's sign is not specified).
bool same_sign(float a, float b) { return std::isnan(a) || std::isnan(b) || std::signbit(a) == std::signbit(b); }

const std::vector<float> &special_values()
{
    static const std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 1e-30f,
                                         -1e-30f, 0.625f, -0.625f, 1e30f, -1e30f, 88.72283f, 88.72284f, 89.5f,
                                         -87.33655f, -103.97208f, -103.97209f, -104.5f, 3.4e38f, -3.4e38f};
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

    // F16 and BF16 matrices packed sixteen rows to a vector (packed.h; at load at the AVX-512 and
    // AVX2 levels without AMX, here by hand on any machine): the packed copy gives back every row exactly,
    // and every product is, bit for bit, the layout's documented order: one fused multiply-add
    // chain per (row, token) over the inputs in turn, from zero (computed here with std::fma),
    // whatever the token count (decode's four groups, prefill's 4 x 6 tiles at the AVX-512
    // level and 1 x 6 at AVX2, and their edges) and the threads. The chain is also checked
    // against the exact sum.
    void packed_half_is_one_fma_chain_data()
    {
        QTest::addColumn<int>("type");
        QTest::addColumn<int>("n_in");
        QTest::addColumn<int>("n_out");
        QTest::addColumn<int>("n_tokens");
        for (DType t : {DType::F16, DType::BF16})
            for (auto [n, o, nt] : {std::tuple{300, 64, 5}, {64, 32, 1}, {4161, 96, 1}, {200, 128, 131}, {37, 320, 25},
                                    {2048, 96, 13}, {4161, 64, 14}})
                QTest::addRow("%s n_in=%d n_out=%d tokens=%d", dtype_name(t).data(), n, o, nt) << int(t) << n << o << nt;
    }
    void packed_half_is_one_fma_chain()
    {
        QFETCH(int, type);
        QFETCH(int, n_in);
        QFETCH(int, n_out);
        QFETCH(int, n_tokens);
        const DType dt = DType(type);
        OwnedWeight w = make_weight(dt, n_in, n_out, 91);
        QVERIFY(packable(dt, n_in, n_out));
        QVERIFY(!packable(dt, n_in, n_out + 16)); // whole panels of 32 rows only
        std::vector<uint8_t> packed(packed_size(dt, n_in, n_out), 0xAB);
        const int64_t groups = n_out / packed_group_rows;
        pack_rows(dt, w.bytes.data(), n_in, packed.data(), 0, groups / 2); // in two parts, as threads split it
        pack_rows(dt, w.bytes.data(), n_in, packed.data(), groups / 2, groups);
        {
            // Packed at the AVX2 level (eight-by-eight transposes where AVX-512 gathers): the
            // same bytes.
            CpuOptions opts;
            opts.kernels = SimdLevel::Avx2;
            test::CpuOptionsScope scope(opts);
            std::vector<uint8_t> again(packed.size(), 0xCD);
            pack_rows(dt, w.bytes.data(), n_in, again.data(), 0, groups);
            QVERIFY(again == packed);
        }
        std::vector<float> row(static_cast<size_t>(n_in));
        for (int r = 0; r < n_out; ++r) {
            dequantize_packed_row(dt, packed.data(), n_in, r, row.data());
            for (int i = 0; i < n_in; ++i)
                QCOMPARE(double(row[size_t(i)]), w.values[size_t(r * n_in + i)]);
        }
        WeightView pv = w.view;
        pv.cpu_packed = packed.data();
        std::vector<float> x = random_vec(size_t(n_in * n_tokens), 92);
        std::vector<float> want(size_t(n_out * n_tokens));
        for (int t = 0; t < n_tokens; ++t)
            for (int o = 0; o < n_out; ++o) {
                float acc = 0.0f;
                double ref = 0, mag = 0;
                for (int i = 0; i < n_in; ++i) {
                    const double wv = w.values[size_t(o * n_in + i)], xv = x[size_t(t * n_in + i)];
                    acc = std::fma(float(wv), float(xv), acc);
                    ref += wv * xv;
                    mag += std::fabs(wv * xv);
                }
                QVERIFY(std::fabs(double(acc) - ref) <= 1e-6 * n_in * mag + 1e-6);
                want[size_t(t * n_out + o)] = acc;
            }
        // The AVX2 kernel runs the same chains, and so does the portable loop where the kernel
        // level is lowered after a matrix was packed (LONGSCOPE_SIMD set by a test, say): the
        // same bits.
        for (SimdLevel level : {SimdLevel::Auto, SimdLevel::Avx2, SimdLevel::Portable})
        for (int threads : {1, 2, 3}) {
            CpuOptions opts;
            opts.kernels = level;
            test::CpuOptionsScope scope(opts);
            ThreadPool pool(threads);
            std::vector<float> y(size_t(n_out * n_tokens), NAN), one(size_t(n_out), NAN);
            matmul(pool, pv, x.data(), y.data(), n_tokens);
            for (size_t k = 0; k < y.size(); ++k)
                QVERIFY2(bits_of(y[k]) == bits_of(want[k]),
                         qPrintable(QString("threads=%1 token %2 row %3: %4 vs %5").arg(threads)
                                        .arg(k / size_t(n_out)).arg(k % size_t(n_out))
                                        .arg(y[k], 0, 'g', 9).arg(want[k], 0, 'g', 9)));
            for (int t = 0; t < n_tokens; t += std::max(1, n_tokens / 4)) {
                matmul(pool, pv, x.data() + size_t(t * n_in), one.data(), 1);
                for (int o = 0; o < n_out; ++o)
                    QVERIFY(bits_of(one[size_t(o)]) == bits_of(want[size_t(t * n_out + o)]));
            }
        }
    }

    // Several packed F16 and BF16 matrices in one product group (Q, K and V; gate and up) share
    // one interleaved copy of the activations, with threads splitting the rows across matrices
    // (panels split between threads at the matrices' edges): every product is still the
    // documented chain, bit for bit; so is the interleaved copy itself.
    void packed_half_groups_share_the_activations()
    {
        const int n_in = 300, n_tokens = 29;
        struct Part {
            DType type;
            int n_out;
        };
        const Part parts[] = {{DType::F16, 64}, {DType::BF16, 32}, {DType::F16, 96}};
        std::vector<OwnedWeight> ws;
        std::vector<std::vector<uint8_t>> packs;
        for (const Part &p : parts) {
            ws.push_back(make_weight(p.type, n_in, p.n_out, uint32_t(50 + ws.size())));
            packs.emplace_back(packed_size(p.type, n_in, p.n_out));
            pack_rows(p.type, ws.back().bytes.data(), n_in, packs.back().data(), 0, p.n_out / packed_group_rows);
        }
        const std::vector<float> x = random_vec(size_t(n_in * n_tokens), 93);
        std::vector<float> xi(x.size(), NAN);
        interleave_half_acts(x.data(), n_in, n_tokens, 0, (n_tokens + packed_half_token_block - 1) / packed_half_token_block,
                             xi.data());
        const int tb = int(packed_half_token_block);
        for (int t = 0; t < n_tokens; ++t) {
            const int b = t / tb, nt = std::min(tb, n_tokens - tb * b);
            for (int i = 0; i < n_in; ++i)
                QCOMPARE(xi[size_t(tb * b * n_in + nt * i + t % tb)], x[size_t(t * n_in + i)]);
        }
        const auto chain = [&](size_t k, int t, int o) {
            float acc = 0.0f;
            for (int i = 0; i < n_in; ++i)
                acc = std::fma(float(ws[k].values[size_t(o * n_in + i)]), x[size_t(t * n_in + i)], acc);
            return acc;
        };
        // Called with no interleaved copy, the kernel makes its own.
        for (size_t k = 0; k < ws.size(); ++k) {
            std::vector<float> y(size_t(parts[k].n_out * n_tokens), NAN);
            gemm_packed_half(parts[k].type, reinterpret_cast<const uint16_t *>(packs[k].data()), n_in, 0,
                             parts[k].n_out / packed_group_rows, x.data(), n_tokens, y.data(), parts[k].n_out);
            for (int t = 0; t < n_tokens; ++t)
                for (int o = 0; o < parts[k].n_out; ++o)
                    QVERIFY(bits_of(y[size_t(t * parts[k].n_out + o)]) == bits_of(chain(k, t, o)));
        }
        for (SimdLevel level : {SimdLevel::Auto, SimdLevel::Avx2})
        for (int threads : {1, 2, 3}) {
            CpuOptions opts;
            opts.kernels = level;
            test::CpuOptionsScope scope(opts);
            ThreadPool pool(threads);
            std::vector<std::vector<float>> ys;
            std::vector<WeightView> views;
            for (size_t k = 0; k < ws.size(); ++k) {
                views.push_back(ws[k].view);
                views.back().cpu_packed = packs[k].data();
                ys.emplace_back(size_t(parts[k].n_out * n_tokens), NAN);
            }
            std::vector<MatmulOut> outs;
            for (size_t k = 0; k < ws.size(); ++k)
                outs.push_back({&views[k], ys[k].data()});
            matmul_group(pool, outs, x.data(), n_tokens);
            for (size_t k = 0; k < ws.size(); ++k)
                for (int t = 0; t < n_tokens; ++t)
                    for (int o = 0; o < parts[k].n_out; ++o) {
                        QVERIFY2(bits_of(ys[k][size_t(t * parts[k].n_out + o)]) == bits_of(chain(k, t, o)),
                                 qPrintable(QString("threads=%1 matrix %2 token %3 row %4").arg(threads).arg(k).arg(t).arg(o)));
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
        // Under Auto: the exact float kernel, or the AMX tiles (two BF16 terms per value, tst_amx).
        QCOMPARE(matmul_path(w.view, n_tokens), kernel_table().amx ? QuantMatmul::Amx : QuantMatmul::Dequantize);
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

    // The vector exp and tanh against the libm's (accurate to under an ulp) over a dense sample
    // of their whole range, and at the special values, for every kernel set of this CPU.
    void vector_exp_and_tanh_match_libm_data()
    {
        QTest::addColumn<int>("kernel");
        const CpuKernels *ks[4];
        const int count = available_cpu_kernels(ks, 4);
        for (int k = 0; k < count; ++k)
            QTest::addRow("%s", ks[k]->name) << k;
    }
    void vector_exp_and_tanh_match_libm()
    {
        QFETCH(int, kernel);
        const CpuKernels *ks[4];
        available_cpu_kernels(ks, 4);
        const CpuKernels &k = *ks[kernel];
        // The vector sets' bounds; the portable set is the C library's (glibc's tanhf measures
        // 2.09 ulp at -0.2512).
        // The vector exp reads 0.88 ulp where the compiler fuses its polynomial's multiply-adds
        // (GCC at -O2 and above, clang) and 1.16 where it does not (GCC at -O1: the TSan build).
        const bool vector = std::string(k.name) != "portable";
        const double exp_bound = vector ? 1.25 : 1.0, tanh_bound = vector ? 1.5 : 2.5;
        // exp: every 257th float from -110 (0 below -103.98) to 90 (inf above 88.73), about 8.7
        // million values (32768 a binade), subnormal results included.
        std::vector<float> x = dense_range(-110.0f, 90.0f, 257), y(x.size());
        k.exp(x.data(), y.data(), int64_t(x.size()));
        double worst = 0;
        float worst_x = 0;
        for (size_t i = 0; i < x.size(); ++i)
            if (const double e = ulp_error(y[i], std::exp(double(x[i]))); e > worst) {
                worst = e;
                worst_x = x[i];
            }
        qInfo("%s exp: max error %.3f ulp (at %.9g) over %zu values", k.name, worst, double(worst_x), x.size());
        QVERIFY2(worst <= exp_bound, qPrintable(QString("exp(%1): %2 ulp").arg(double(worst_x), 0, 'g', 9).arg(worst)));
        // tanh: every 257th float in [-12, 12] (+-1 beyond), subnormals included.
        x = dense_range(-12.0f, 12.0f, 257);
        y.resize(x.size());
        k.tanh(x.data(), y.data(), int64_t(x.size()));
        worst = 0;
        for (size_t i = 0; i < x.size(); ++i)
            if (const double e = ulp_error(y[i], std::tanh(double(x[i]))); e > worst) {
                worst = e;
                worst_x = x[i];
            }
        qInfo("%s tanh: max error %.3f ulp (at %.9g) over %zu values", k.name, worst, double(worst_x), x.size());
        QVERIFY2(worst <= tanh_bound, qPrintable(QString("tanh(%1): %2 ulp").arg(double(worst_x), 0, 'g', 9).arg(worst)));
        // Special values: the same as std::exp's and std::tanh's (zeros with their sign).
        const std::vector<float> &sp = special_values();
        std::vector<float> e(sp.size()), t(sp.size());
        k.exp(sp.data(), e.data(), int64_t(sp.size()));
        k.tanh(sp.data(), t.data(), int64_t(sp.size()));
        for (size_t i = 0; i < sp.size(); ++i) {
            const float want_e = std::exp(sp[i]), want_t = std::tanh(sp[i]);
            QVERIFY2(ulp_error(e[i], double(want_e)) <= exp_bound + 0.5 && (want_e != 0.0f || e[i] == 0.0f),
                     qPrintable(QString("exp(%1) = %2, std::exp %3").arg(sp[i]).arg(e[i]).arg(want_e)));
            QVERIFY2(ulp_error(t[i], double(want_t)) <= tanh_bound + 0.5 && same_sign(t[i], want_t),
                     qPrintable(QString("tanh(%1) = %2, std::tanh %3").arg(sp[i]).arg(t[i]).arg(want_t)));
        }
    }

    // SwiGLU, GeGLU, soft-capping, RMSNorm's pieces and RoPE's rotation of each kernel set against
    // double-precision formulas; the vector sets against each other bit for bit (and at any
    // offset and length, so that a split of the values changes nothing); special values as the
    // scalar reference gives them.
    void elementwise_kernels_match_reference_data()
    {
        QTest::addColumn<int>("kernel");
        const CpuKernels *ks[4];
        const int count = available_cpu_kernels(ks, 4);
        for (int k = 0; k < count; ++k)
            QTest::addRow("%s", ks[k]->name) << k;
    }
    void elementwise_kernels_match_reference()
    {
        QFETCH(int, kernel);
        const CpuKernels *ks[4];
        const int count = available_cpu_kernels(ks, 4);
        const CpuKernels &k = *ks[kernel];
        const CpuKernels &scalar = *ks[count - 1]; // portable
        const int n = 1000;
        std::vector<float> g = random_vec(n, 31, 4.0f), u = random_vec(n, 32), o(n), o2(n);
        k.swiglu(g.data(), u.data(), o.data(), n);
        for (int i = 0; i < n; ++i) {
            const double gd = g[size_t(i)], ref = gd / (1.0 + std::exp(-gd)) * u[size_t(i)];
            QVERIFY2(std::fabs(o[size_t(i)] - ref) <= 6e-7 * std::fabs(ref) + 1e-30,
                     qPrintable(QString("swiglu(%1): %2 vs %3").arg(gd).arg(o[size_t(i)]).arg(ref)));
        }
        k.geglu(g.data(), u.data(), o.data(), n);
        for (int i = 0; i < n; ++i) {
            const double gd = g[size_t(i)];
            const double ref = 0.5 * gd * (1.0 + std::tanh(0.7978845608028654 * (gd + 0.044715 * gd * gd * gd))) *
                               u[size_t(i)];
            // 1 + tanh cancels for negative gate values: the error is relative to |gate * up|.
            QVERIFY2(std::fabs(o[size_t(i)] - ref) <= 5e-7 * std::fabs(gd * u[size_t(i)]),
                     qPrintable(QString("geglu(%1): %2 vs %3").arg(gd).arg(o[size_t(i)]).arg(ref)));
        }
        o = g;
        k.softcap(o.data(), 3.0f, n);
        for (int i = 0; i < n; ++i) {
            const double ref = 3.0 * std::tanh(double(g[size_t(i)]) / 3.0);
            QVERIFY(std::fabs(o[size_t(i)] - ref) <= 6e-7 * std::fabs(ref) + 1e-30);
        }
        double ss = 0;
        for (int i = 0; i < 999; ++i)
            ss += double(g[size_t(i)]) * g[size_t(i)];
        QVERIFY(std::fabs(k.sum_squares(g.data(), 999) - ss) <= 1e-14 * ss);
        k.scale_mul(g.data(), 0.37f, u.data(), o.data(), n);
        for (int i = 0; i < n; ++i) // two float multiplies in this order: exact bits
            QCOMPARE(o[size_t(i)], g[size_t(i)] * 0.37f * u[size_t(i)]);
        // Weighted rows of 100 values 103 apart (64 in registers, 16, and 4 one at a time) for 1
        // to 6 heads (blocks of four or two heads and the heads left over); rows 1 and 5 weigh 0
        // for every head and hold a NaN that must not reach y, row 2 weighs 0 for head 1 only.
        for (int heads = 1; heads <= 6; ++heads) {
            const int64_t rows = 7, width = 100, stride = 103, y_stride = 111, w_stride = 9;
            std::vector<float> wr = random_vec(size_t(heads * w_stride), 34 + heads),
                               xr = random_vec(size_t(rows * stride), 35);
            for (int h = 0; h < heads; ++h)
                wr[size_t(h * w_stride + 1)] = wr[size_t(h * w_stride + 5)] = 0.0f;
            if (heads > 1)
                wr[size_t(w_stride + 2)] = 0.0f;
            xr[size_t(1 * stride + 70)] = xr[size_t(5 * stride + 3)] = std::nanf("");
            std::vector<float> yr = random_vec(size_t(heads * y_stride), 36), ref = yr;
            k.add_scaled_rows(yr.data(), y_stride, wr.data(), w_stride, heads, xr.data(), stride, rows, width);
            for (int h = 0; h < heads; ++h)
                for (int64_t j = 0; j < rows; ++j) {
                    const float a = wr[size_t(h * w_stride + j)];
                    if (a != 0.0f)
                        for (int64_t d = 0; d < width; ++d) { // the product rounded, then the sum (no FMA)
                            const volatile float prod = a * xr[size_t(j * stride + d)];
                            float &r = ref[size_t(h * y_stride + d)];
                            r = r + prod;
                        }
                }
            QVERIFY2(std::memcmp(yr.data(), ref.data(), ref.size() * 4) == 0, qPrintable(QString("heads %1").arg(heads)));
        }

        // RoPE of one head, both layouts, against the double rotation.
        for (bool interleaved : {true, false})
            for (int n_rot : {64, 48, 6}) {
                std::vector<float> v = random_vec(static_cast<size_t>(n_rot), 33), c(static_cast<size_t>(n_rot)),
                                   sn(static_cast<size_t>(n_rot));
                std::vector<double> ang(static_cast<size_t>(n_rot / 2));
                for (int i = 0; i < n_rot / 2; ++i) {
                    ang[size_t(i)] = 0.37 * (i + 1);
                    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + n_rot / 2;
                    c[size_t(a)] = c[size_t(b)] = float(std::cos(ang[size_t(i)]));
                    sn[size_t(a)] = -float(std::sin(ang[size_t(i)]));
                    sn[size_t(b)] = float(std::sin(ang[size_t(i)]));
                }
                std::vector<float> r = v, r_scalar = v;
                k.rope_head(r.data(), c.data(), sn.data(), n_rot, interleaved);
                // Without fused multiply-adds at every level: the scalar rotation's bits.
                scalar.rope_head(r_scalar.data(), c.data(), sn.data(), n_rot, interleaved);
                QVERIFY(std::memcmp(r.data(), r_scalar.data(), r.size() * 4) == 0);
                for (int i = 0; i < n_rot / 2; ++i) {
                    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + n_rot / 2;
                    const std::complex<double> z = std::complex<double>(v[size_t(a)], v[size_t(b)]) *
                                                   std::polar(1.0, ang[size_t(i)]);
                    QVERIFY(std::fabs(r[size_t(a)] - z.real()) < 2e-6);
                    QVERIFY(std::fabs(r[size_t(b)] - z.imag()) < 2e-6);
                }
            }

        // Special values as the scalar reference gives them.
        const std::vector<float> &sp = special_values();
        const std::vector<float> ones(sp.size(), 1.5f);
        std::vector<float> want(sp.size()), got(sp.size());
        for (auto fn : {&CpuKernels::swiglu, &CpuKernels::geglu}) {
            (scalar.*fn)(sp.data(), ones.data(), want.data(), int64_t(sp.size()));
            (k.*fn)(sp.data(), ones.data(), got.data(), int64_t(sp.size()));
            for (size_t i = 0; i < sp.size(); ++i)
                QVERIFY2(ulp_error(got[i], double(want[i])) <= 2.0 && same_sign(got[i], want[i]),
                         qPrintable(QString("gate %1: %2, scalar %3").arg(sp[i]).arg(got[i]).arg(want[i])));
        }

        // Offsets and lengths: every value's bits depend on the value alone.
        if (&k == &scalar)
            return;
        k.swiglu(g.data(), u.data(), o.data(), n);
        k.geglu(g.data(), u.data(), o2.data(), n);
        for (int off : {0, 1, 5, 16, 17})
            for (int len : {1, 3, 15, 16, 17, 40}) {
                std::vector<float> p(static_cast<size_t>(len)), q(static_cast<size_t>(len));
                k.swiglu(g.data() + off, u.data() + off, p.data(), len);
                k.geglu(g.data() + off, u.data() + off, q.data(), len);
                for (int i = 0; i < len; ++i) {
                    QCOMPARE(bits_of(p[size_t(i)]), bits_of(o[size_t(off + i)]));
                    QCOMPARE(bits_of(q[size_t(i)]), bits_of(o2[size_t(off + i)]));
                }
            }
        // The vector sets compute the same bits.
        for (int j = 0; j < count - 1; ++j) {
            const CpuKernels &other = *ks[j];
            std::vector<float> a(n), b(n);
            k.swiglu(g.data(), u.data(), a.data(), n);
            other.swiglu(g.data(), u.data(), b.data(), n);
            QVERIFY(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
            k.geglu(g.data(), u.data(), a.data(), n);
            other.geglu(g.data(), u.data(), b.data(), n);
            QVERIFY(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
            a = g;
            b = g;
            k.softcap(a.data(), 3.0f, n);
            other.softcap(b.data(), 3.0f, n);
            QVERIFY(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
            QCOMPARE(k.sum_squares(g.data(), 999), other.sum_squares(g.data(), 999));
        }
    }

    void elementwise_ops_split_over_threads_change_no_bits()
    {
        // The same op over a pool of 1 and of 3 threads: rows and values are computed alike
        // whichever piece holds them. Large enough to be split.
        const int64_t rows = 64, width = 2048, n = rows * width;
        std::vector<float> g = random_vec(size_t(n), 41, 3.0f), u = random_vec(size_t(n), 42);
        OwnedWeight w = make_weight(DType::F32, width, 1, 43);
        ThreadPool one(1), three(3);
        std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
        swiglu(g.data(), u.data(), a.data(), n, &one);
        swiglu(g.data(), u.data(), b.data(), n, &three);
        QVERIFY(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
        rmsnorm(g.data(), w.view, a.data(), rows, width, 1e-5f, 0.0f, &one);
        rmsnorm(g.data(), w.view, b.data(), rows, width, 1e-5f, 0.0f, &three);
        QVERIFY(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
        std::vector<double> pos(static_cast<size_t>(rows)), inv(32);
        for (int64_t t = 0; t < rows; ++t)
            pos[size_t(t)] = double(t + 100);
        for (int i = 0; i < 32; ++i)
            inv[size_t(i)] = std::pow(10000.0, -2.0 * i / 64);
        a = g;
        b = g;
        rope(a.data(), rows, 32, 64, 64, RopeStyle::Interleaved, pos, inv, &one);
        rope(b.data(), rows, 32, 64, 64, RopeStyle::Interleaved, pos, inv, &three);
        QVERIFY(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
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
