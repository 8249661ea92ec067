// The AMX tile path of the matrix products (cpu/amx.h), checked against products computed here
// in double precision: once against the exact product of the weights and activations (within the
// rounding bound of the BF16 terms), and once against the same sum of BF16 terms the path is meant
// to compute (within float accumulation), which catches any misplaced value in the tile layouts.
// Prefill attention on the tiles (cpu/attention.cpp) likewise, against attention computed here in
// double. Where the CPU has no AMX tiles or the kernel refuses them, every check says Skipped and why.
#include "cpu/amx.h"
#include "cpu/attention.h"
#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/packed.h"
#include "cpu/quant.h"
#include "cpu/thread_pool.h"
#include "longscope/cpu_options.h"
#include "longscope/hardware.h"
#include "model/weights.h"
#include "support/cpu_options_scope.h"

#include <QtTest>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace longscope;
using longscope::test::CpuOptionsScope;

namespace {

// Nearest-even rounding to BF16 and back, written out here: the upper half of the float, plus
// one where the lower half is above a half unit, or exactly half and the upper half is odd.
double bf16_round(double v)
{
    const float f = float(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint32_t lower = bits & 0xffffu;
    uint32_t upper = bits >> 16;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u)))
        ++upper;
    bits = upper << 16;
    float r;
    std::memcpy(&r, &bits, 4);
    return r;
}

struct Terms {
    std::vector<double> hi, lo;
};

Terms split(const std::vector<float> &v)
{
    Terms t;
    for (float f : v) {
        const double h = bf16_round(f);
        t.hi.push_back(h);
        t.lo.push_back(bf16_round(double(f) - h));
    }
    return t;
}

struct Weight {
    std::vector<uint8_t> storage, packed;
    WeightView view;
    std::vector<float> values; // [n_out][n_in] as float
};

Weight make_weight(DType type, int64_t n_in, int64_t n_out, uint32_t seed, bool pack)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    Weight w;
    w.values.resize(size_t(n_in * n_out));
    for (float &v : w.values)
        v = dist(rng);
    const size_t rb = row_bytes(type, n_in);
    w.storage.resize(rb * size_t(n_out) + 1);
    uint8_t *base = w.storage.data() + 1; // odd address: files promise no alignment
    for (int64_t o = 0; o < n_out; ++o) {
        float *row = w.values.data() + o * n_in;
        uint8_t *dst = base + size_t(o) * rb;
        if (type == DType::F32) {
            std::memcpy(dst, row, size_t(n_in) * 4);
        } else if (type == DType::F16 || type == DType::BF16) {
            for (int64_t i = 0; i < n_in; ++i) {
                const uint16_t h = type == DType::F16 ? f32_to_f16(row[i]) : f32_to_bf16(row[i]);
                std::memcpy(dst + 2 * i, &h, 2);
                row[i] = type == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
            }
        } else {
            quantize_row(type, row, dst, n_in);
            dequantize_row(type, dst, row, n_in);
        }
    }
    w.view.type = type;
    w.view.shape = {n_in, n_out};
    w.view.data = base;
    w.view.nbytes = rb * size_t(n_out);
    if (pack) {
        w.packed.resize(packed_size(type, n_in, n_out));
        pack_rows(type, base, n_in, w.packed.data(), 0, n_out / packed_group_rows);
        w.view.cpu_packed = w.packed.data();
    }
    return w;
}

std::vector<float> random_acts(int64_t n, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float &v : x)
        v = dist(rng) * (1.0f + float(rng() % 4)); // some spread in magnitude
    return x;
}

uint32_t bits_of(float f)
{
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

// Checks y (from the AMX path) against the exact products and against the BF16-term products.
// Returns the worst |error| / sum|w x| against the exact products.
double check(const Weight &w, const std::vector<float> &x, const std::vector<float> &y, int64_t n_tokens,
             AmxTerms terms, double exact_bound)
{
    const int64_t n_in = w.view.ne(0), n_out = w.view.ne(1);
    const Terms wt = split(w.values), xt = split(x);
    double worst = 0;
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t o = 0; o < n_out; ++o) {
            double exact = 0, emulated = 0, mag = 0;
            for (int64_t i = 0; i < n_in; ++i) {
                const size_t wi = size_t(o * n_in + i), xi = size_t(t * n_in + i);
                exact += double(w.values[wi]) * x[xi];
                mag += std::fabs(double(w.values[wi]) * x[xi]);
                emulated += wt.hi[wi] * xt.hi[xi];
                if (terms.act == 2)
                    emulated += wt.hi[wi] * xt.lo[xi];
                if (terms.weight == 2)
                    emulated += wt.lo[wi] * xt.hi[xi];
            }
            const double got = y[size_t(t * n_out + o)];
            const QString where = QString("%1 [%2 x %3], t %4 o %5: %6, exact %7, terms %8")
                                      .arg(QString::fromStdString(std::string(dtype_name(w.view.type)))).arg(n_in).arg(n_out).arg(t).arg(o)
                                      .arg(got, 0, 'g', 9).arg(exact, 0, 'g', 9).arg(emulated, 0, 'g', 9);
            // Float accumulation of the products, in whatever order the tiles add them.
            if (!(std::fabs(got - emulated) <= 4e-6 * mag + 1e-30)) {
                QTest::qFail(qPrintable("against the BF16 terms: " + where), __FILE__, __LINE__);
                return 1;
            }
            if (!(std::fabs(got - exact) <= exact_bound * mag + 1e-30)) {
                QTest::qFail(qPrintable("against the exact product: " + where), __FILE__, __LINE__);
                return 1;
            }
            worst = std::max(worst, std::fabs(got - exact) / mag);
        }
    return worst;
}

// Attention in double: out[i, h] = sum_j softmax_j(s_ij) v_j over the keys query i sees
// (causal: j <= q_pos0 + i; in a window, j > q_pos0 + i - window), s_ij = q . k_j / sqrt(hd),
// soft-capped as cap * tanh(s / cap).
std::vector<double> attention_reference(const AttentionProblem &p)
{
    const int hd = p.head_dim, group = p.n_head / p.n_head_kv;
    const int64_t ekv = int64_t(p.n_head_kv) * hd;
    const float *k = static_cast<const float *>(p.k), *v = static_cast<const float *>(p.v);
    std::vector<double> out(size_t(p.n_q * p.n_head * hd), 0.0);
    for (int64_t i = 0; i < p.n_q; ++i)
        for (int h = 0; h < p.n_head; ++h) {
            const int64_t pos = p.q_pos0 + i;
            const float *q = p.q + (i * p.n_head + h) * hd;
            const int64_t kvo = int64_t(h / group) * hd;
            std::vector<double> s;
            std::vector<int64_t> js;
            for (int64_t j = 0; j <= pos && j < p.n_kv; ++j) {
                if (p.window > 0 && j <= pos - p.window)
                    continue;
                double d = 0;
                for (int e = 0; e < hd; ++e)
                    d += double(q[e]) * double(k[j * ekv + kvo + e]);
                d /= std::sqrt(double(hd));
                if (p.softcap > 0)
                    d = p.softcap * std::tanh(d / p.softcap);
                s.push_back(d);
                js.push_back(j);
            }
            double mx = -INFINITY, sum = 0;
            for (double x : s)
                mx = std::max(mx, x);
            for (double &x : s)
                sum += (x = std::exp(x - mx));
            double *o = out.data() + (i * p.n_head + h) * hd;
            for (size_t c = 0; c < s.size(); ++c)
                for (int e = 0; e < hd; ++e)
                    o[e] += s[c] / sum * double(v[js[c] * ekv + kvo + e]);
        }
    return out;
}

double max_error(const std::vector<float> &got, const std::vector<double> &want)
{
    double m = 0;
    for (size_t i = 0; i < want.size(); ++i)
        m = std::max(m, std::isfinite(got[i]) ? std::fabs(double(got[i]) - want[i]) : INFINITY);
    return m;
}

} // namespace

class TestAmx : public QObject {
    Q_OBJECT

private:
    bool m_amx = false;

private slots:
    void initTestCase()
    {
        m_amx = kernel_table().amx;
        qInfo("AMX BF16 tiles: %s", m_amx ? "in use" : amx_bf16_usable() ? "usable, but not at this kernel level" : "not usable here");
    }

    // Bounds: one term rounds a value to 8 significant bits (relative error 2^-9 each side, so
    // 2^-8 + 2^-18 per product); two terms hold 16 (2^-17 each side, plus the dropped lo*lo
    // term, 2^-18): 2^-15 per product covers both with room for float accumulation.
    void products_match_double_reference_data()
    {
        QTest::addColumn<int>("type");
        QTest::addColumn<int>("n_in");
        QTest::addColumn<int>("n_out");
        QTest::addColumn<bool>("pack");
        // Rows not a multiple of 16 or 32 (partial tiles), one chunk of 32 inputs, many.
        QTest::newRow("F32 32x40") << int(DType::F32) << 32 << 40 << false;
        QTest::newRow("F32 288x16") << int(DType::F32) << 288 << 16 << false;
        QTest::newRow("F16 96x48") << int(DType::F16) << 96 << 48 << false;
        QTest::newRow("F16 2048x33") << int(DType::F16) << 2048 << 33 << false;
        QTest::newRow("BF16 160x70") << int(DType::BF16) << 160 << 70 << false;
        QTest::newRow("Q8_0 256x48") << int(DType::Q8_0) << 256 << 48 << false;
        QTest::newRow("Q8_0 packed 256x48") << int(DType::Q8_0) << 256 << 48 << true;
        QTest::newRow("Q4_K 512x37") << int(DType::Q4_K) << 512 << 37 << false;
        QTest::newRow("Q4_K packed 512x64") << int(DType::Q4_K) << 512 << 64 << true;
        QTest::newRow("Q6_K packed 256x32") << int(DType::Q6_K) << 256 << 32 << true;
        QTest::newRow("IQ4_XS 256x20") << int(DType::IQ4_XS) << 256 << 20 << false;
        QTest::newRow("Q4_0 packed 64x48") << int(DType::Q4_0) << 64 << 48 << true;
        QTest::newRow("Q5_1 packed 160x32") << int(DType::Q5_1) << 160 << 32 << true;
        QTest::newRow("IQ4_NL packed 96x16") << int(DType::IQ4_NL) << 96 << 16 << true;
        QTest::newRow("Q5_K packed 256x16") << int(DType::Q5_K) << 256 << 16 << true;
        QTest::newRow("Q3_K packed 256x32") << int(DType::Q3_K) << 256 << 32 << true;
        QTest::newRow("Q2_K packed 512x48") << int(DType::Q2_K) << 512 << 48 << true;
    }
    void products_match_double_reference()
    {
        if (!m_amx)
            QSKIP("this CPU has no AMX BF16 tiles the kernel lets this process use (cpuid, XCR0, arch_prctl)");
        QFETCH(int, type);
        QFETCH(int, n_in);
        QFETCH(int, n_out);
        QFETCH(bool, pack);
        const DType dt = DType(type);
        const Weight w = make_weight(dt, n_in, n_out, uint32_t(n_in * 7 + n_out), pack);
        const AmxTerms terms = amx_default_terms(type);
        const double bound = terms.weight == 1 && terms.act == 1 ? 1.0 / 256 + 1.0 / 65536 + 1e-5 : 1.0 / 32768;
        ThreadPool pool(3);
        double worst = 0;
        for (int n_tokens : {1, 15, 16, 17, 40, 64}) {
            const std::vector<float> x = random_acts(int64_t(n_tokens) * n_in, uint32_t(n_tokens));
            std::vector<float> y(size_t(n_tokens * n_out), NAN);
            matmul_with(pool, w.view, x.data(), y.data(), n_tokens, QuantMatmul::Amx);
            worst = std::max(worst, check(w, x, y, n_tokens, terms, bound));
            if (QTest::currentTestFailed())
                return;
            // Auto takes the tiles from amx_min_tokens tokens on (F32 weights excepted: they keep
            // the exact float kernel): the same bits.
            // Packed matrices whose rows widen with scalar code keep the integer kernels.
            const bool scalar_panels = pack && dequantize_packed_level(dt) != VectorLevel::Avx512;
            if (n_tokens >= amx_min_tokens && dt == DType::F32)
                QCOMPARE(matmul_path(w.view, n_tokens), QuantMatmul::Dequantize);
            if (n_tokens >= amx_min_tokens && scalar_panels)
                QCOMPARE(matmul_path(w.view, n_tokens), QuantMatmul::Integer);
            if (n_tokens >= amx_min_tokens && dt != DType::F32 && !scalar_panels) {
                QCOMPARE(matmul_path(w.view, n_tokens), QuantMatmul::Amx);
                std::vector<float> z(y.size(), NAN);
                matmul(pool, w.view, x.data(), z.data(), n_tokens);
                for (size_t i = 0; i < y.size(); ++i)
                    QVERIFY2(bits_of(z[i]) == bits_of(y[i]), qPrintable(QString("Auto vs Amx at %1").arg(i)));
            }
        }
        qInfo("%d+%d terms: worst |error| / sum|w x| = %.2e (bound %.2e)", terms.weight, terms.act, worst, bound);
    }

    // One term each side where asked for (matmul_amx's one_term): the BF16 path's rounding.
    void one_term_rounds_like_the_bf16_path()
    {
        if (!m_amx)
            QSKIP("this CPU has no AMX BF16 tiles the kernel lets this process use (cpuid, XCR0, arch_prctl)");
        const Weight w = make_weight(DType::F16, 256, 48, 3, false);
        const int n_tokens = 33;
        const std::vector<float> x = random_acts(int64_t(n_tokens) * 256, 9);
        std::vector<float> y(size_t(n_tokens * 48), NAN);
        ThreadPool pool(2);
        const WeightView *ws[] = {&w.view};
        float *ys[] = {y.data()};
        matmul_amx(pool, ws, ys, x.data(), n_tokens, true);
        const double worst = check(w, x, y, n_tokens, AmxTerms{1, 1}, 1.0 / 256 + 1.0 / 65536 + 1e-5);
        if (QTest::currentTestFailed())
            return;
        // One term loses what two keep: the error is far above the two-term bound somewhere.
        QVERIFY2(worst > 1.0 / 32768, qPrintable(QString::number(worst)));
    }

    // A group (Q, K, V of different types, as in mixed quantizations) gives each weight what
    // it gets alone, bit for bit, and any thread count gives the same bits.
    void groups_and_thread_counts_change_no_bits()
    {
        if (!m_amx)
            QSKIP("this CPU has no AMX BF16 tiles the kernel lets this process use (cpuid, XCR0, arch_prctl)");
        const int n_in = 256, n_tokens = 50;
        const Weight a = make_weight(DType::Q4_K, n_in, 64, 1, true), b = make_weight(DType::F16, n_in, 40, 2, false),
                     c = make_weight(DType::Q6_K, n_in, 32, 3, false);
        const std::vector<float> x = random_acts(int64_t(n_tokens) * n_in, 4);
        std::vector<std::vector<float>> alone;
        ThreadPool one(1), three(3);
        for (const Weight *w : {&a, &b, &c}) {
            std::vector<float> y(size_t(n_tokens * w->view.ne(1)), NAN);
            matmul(one, w->view, x.data(), y.data(), n_tokens);
            alone.push_back(y);
        }
        std::vector<std::vector<float>> grouped(3);
        std::vector<MatmulOut> outs;
        int i = 0;
        for (const Weight *w : {&a, &b, &c}) {
            grouped[size_t(i)].assign(alone[size_t(i)].size(), NAN);
            outs.push_back({&w->view, grouped[size_t(i)].data()});
            ++i;
        }
        matmul_group(three, outs, x.data(), n_tokens);
        for (size_t k = 0; k < 3; ++k)
            for (size_t j = 0; j < alone[k].size(); ++j)
                QVERIFY2(bits_of(alone[k][j]) == bits_of(grouped[k][j]),
                         qPrintable(QString("weight %1 value %2: %3 vs %4").arg(k).arg(j).arg(alone[k][j]).arg(grouped[k][j])));
    }

    // Switched off, or below the AVX-512 level, the tiles are not used.
    void options_turn_the_tiles_off()
    {
        if (!m_amx)
            QSKIP("this CPU has no AMX BF16 tiles the kernel lets this process use (cpuid, XCR0, arch_prctl)");
        const Weight w = make_weight(DType::Q8_0, 64, 16, 5, false);
        {
            CpuOptions o;
            o.amx = false;
            CpuOptionsScope scope(o);
            QVERIFY(!kernel_table().amx);
            QVERIFY(matmul_path(w.view, 64) != QuantMatmul::Amx);
            QVERIFY(matmul_path(w.view, 64, QuantMatmul::Amx) != QuantMatmul::Amx);
        }
        {
            CpuOptions o;
            o.kernels = SimdLevel::Avx2;
            CpuOptionsScope scope(o);
            QVERIFY(!kernel_table().amx);
        }
        QVERIFY(kernel_table().amx);
        QCOMPARE(prefill_compute_family("Q4_K"), ComputeFamily::AmxBf16);
        QCOMPARE(prefill_compute_family("F16"), ComputeFamily::AmxBf16);
        // Packed matrices take the tiles under Auto where their rows widen with vector code:
        // every packed type at the AVX-512 level (Q2_K and Q3_K the last to get it); packed or
        // not, below 16 tokens the other kernels.
        for (DType t : {DType::Q2_K, DType::Q3_K}) {
            const Weight packed = make_weight(t, 256, 16, 8, true), rows = make_weight(t, 256, 16, 8, false);
            QCOMPARE(dequantize_packed_level(t), VectorLevel::Avx512);
            QCOMPARE(matmul_path(packed.view, 64), QuantMatmul::Amx);
            QCOMPARE(matmul_path(rows.view, 64), QuantMatmul::Amx);
            QVERIFY(matmul_path(packed.view, 8) != QuantMatmul::Amx);
            QCOMPARE(matmul_path(packed.view, 8, QuantMatmul::Amx), QuantMatmul::Amx);
        }
        // Asked-for paths other than Amx keep their kernels.
        QCOMPARE(matmul_path(w.view, 64, QuantMatmul::Integer), QuantMatmul::Integer);
    }

    // Prefill attention on the tiles: scores and weighted values each as two BF16 terms a side
    // (16 significant bits) with float sums, within 1e-4 of attention in double, the bound
    // tst_kv_quant and tst_attention hold every path to (values ~N(0, 1): a dropped key or a
    // missing rescale moves outputs by ~1e-2). The tiles did run: their bits differ from the
    // float kernels'; and the result does not depend on the number of threads. TinyLlama's heads
    // (16/2 here, 64 dims), a prefill and a later chunk, causal by positions or by an explicit
    // mask, a sliding window with a soft cap.
    void attention_on_tiles_data()
    {
        QTest::addColumn<bool>("causal_flash");
        QTest::addColumn<int>("window");
        QTest::addColumn<int>("n_q");
        QTest::addColumn<int>("q_pos0");
        for (bool cf : {true, false})
            for (int window : {0, 100})
                for (auto [n_q, pos0] : {std::pair{300, 0}, std::pair{70, 290}})
                    QTest::addRow("%s window %d n_q %d at %d", cf ? "causal-flash" : "mask", window, n_q, pos0)
                        << cf << window << n_q << pos0;
    }
    void attention_on_tiles()
    {
        if (!m_amx)
            QSKIP("this CPU has no AMX BF16 tiles the kernel lets this process use (cpuid, XCR0, arch_prctl)");
        QFETCH(bool, causal_flash);
        QFETCH(int, window);
        QFETCH(int, n_q);
        QFETCH(int, q_pos0);
        const int n_head = 16, n_head_kv = 2, hd = 64;
        const int64_t n_kv = q_pos0 + n_q, ekv = int64_t(n_head_kv) * hd;
        std::mt19937 rng(uint32_t(n_q + window));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> q(size_t(n_q * n_head * hd)), k(size_t(n_kv * ekv)), v(size_t(n_kv * ekv));
        for (auto &x : q)
            x = 1.5f * nd(rng); // peaked weights: the running max keeps moving
        for (auto &x : k)
            x = nd(rng);
        for (auto &x : v)
            x = nd(rng);
        AttentionProblem p;
        p.n_head = n_head;
        p.n_head_kv = n_head_kv;
        p.head_dim = hd;
        p.q = q.data();
        p.n_q = n_q;
        p.q_pos0 = q_pos0;
        p.k = k.data();
        p.v = v.data();
        p.n_kv = n_kv;
        p.window = window;
        p.softcap = window > 0 ? 20.0f : 0.0f;
        const std::vector<double> want = attention_reference(p);
        const auto run = [&](int threads) {
            std::vector<float> out(q.size(), NAN);
            AttentionProblem pr = p;
            pr.out = out.data();
            ThreadPool pool(threads);
            attention_tiled(pool, pr, causal_flash);
            return out;
        };
        const std::vector<float> tiles = run(2), tiles1 = run(1), tiles3 = run(3);
        std::vector<float> floats, floats_amx_off;
        {
            CpuOptions o;
            o.amx_attention = false;
            CpuOptionsScope scope(o);
            QVERIFY(kernel_table().amx && !kernel_table().amx_attention);
            floats = run(2);
        }
        {
            CpuOptions o;
            o.amx = false;
            CpuOptionsScope scope(o);
            floats_amx_off = run(2);
        }
        const double e_tiles = max_error(tiles, want), e_floats = max_error(floats, want);
        qInfo("max error: tiles %.3g, float kernels %.3g", e_tiles, e_floats);
        QVERIFY2(e_tiles < 1e-4, qPrintable(QString("tiles: %1").arg(e_tiles)));
        QVERIFY2(e_floats < 1e-4, qPrintable(QString("float kernels: %1").arg(e_floats)));
        const auto same = [](const std::vector<float> &a, const std::vector<float> &b) {
            return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
        };
        QVERIFY(!same(tiles, floats));
        QVERIFY(same(floats, floats_amx_off)); // either switch gives the float kernels
        QVERIFY(same(tiles, tiles1));
        QVERIFY(same(tiles, tiles3));
    }

    // The compute probe's tile loop: a real rate, and a matrix product through the tiles stays
    // under it.
    void probe_is_a_ceiling()
    {
        if (!m_amx)
            QSKIP("this CPU has no AMX BF16 tiles the kernel lets this process use (cpuid, XCR0, arch_prctl)");
        const double peak = measure_compute_peak(1, ComputeFamily::AmxBf16);
        QCOMPARE(compute_family_name(ComputeFamily::AmxBf16), std::string("amx tdpbf16ps"));
        const Weight w = make_weight(DType::Q8_0, 2048, 256, 6, false);
        const int n_tokens = 256;
        const std::vector<float> x = random_acts(int64_t(n_tokens) * 2048, 7);
        std::vector<float> y(size_t(n_tokens * 256));
        ThreadPool pool(1);
        double best = 0;
        for (int rep = 0; rep < 3; ++rep) {
            QElapsedTimer timer;
            timer.start();
            matmul(pool, w.view, x.data(), y.data(), n_tokens);
            const double s = double(timer.nsecsElapsed()) * 1e-9;
            best = std::max(best, 2.0 * 2048 * 256 * n_tokens / s);
        }
        qInfo("one thread: peak %.0f GFLOP/s, a Q8_0 2048x256 product over 256 tokens %.0f GFLOP/s", peak * 1e-9,
              best * 1e-9);
        QVERIFY(peak > 0);
        QVERIFY(best < 1.05 * peak);
    }
};

QTEST_GUILESS_MAIN(TestAmx)
#include "tst_amx.moc"
