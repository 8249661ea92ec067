// The CPU attention variants (plain materialised, tiled online-softmax; each with an explicit
// mask or with causality from positions; keys stored rotated or rotated on load) against a
// double-precision reference written here with plain loops: an explicit causal condition
// (j < n_kv and j <= q_pos0 + i), RoPE as multiplication by e^{i theta} on complex pairs,
// a textbook softmax.
#include "support/cpu_options_scope.h"
#include "support/random_floats.h"
#include "support/test_size.h"

#include "cpu/attention.h"
#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"
#include "longscope/errors.h"

#include <QtTest>

#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace longscope;

namespace {

// Every variant the engine can select.
struct Variant {
    const char *name;
    bool tiled;
    bool causal_flash;
    int tile;
};
const Variant kVariants[] = {
    {"naive", false, false, 0},         {"naive+flash", false, true, 0},
    {"tiled1", true, false, 1},         {"tiled1+flash", true, true, 1},
    {"tiled7", true, false, 7},         {"tiled7+flash", true, true, 7},
    {"tiled64", true, false, 64},       {"tiled64+flash", true, true, 64},
    {"tiled128", true, false, 128},     {"tiled128+flash", true, true, 128}, // prefill's tiles
};
constexpr int kNumVariants = int(sizeof(kVariants) / sizeof(kVariants[0]));

AttentionStats run_variant(ThreadPool &pool, const Variant &v, const AttentionProblem &p)
{
    return v.tiled ? attention_tiled(pool, p, v.causal_flash, v.tile)
                   : attention_naive(pool, p, v.causal_flash);
}

enum Rot { NoRot = 0, RotInterleaved = 1, RotHalf = 2 };
const char *rot_name(int r) { return r == NoRot ? "rot=off" : r == RotInterleaved ? "rot=interleaved" : "rot=half"; }

struct Shape {
    int n_head, n_head_kv, head_dim;
};
// {16, 2, 64} is TinyLlama's head layout (eight query heads per kv head, 64 dims): keys are
// then transposed sixteen by sixteen in registers. With fewer query rows per kv head ({4, 4,
// 16}, {4, 2, 32}) decode reads the keys in rows and sums sixteen keys across lanes at once.
const Shape kShapes[] = {{8, 4, 8}, {4, 4, 16}, {6, 2, 12}, {16, 2, 64}, {4, 2, 32}};
constexpr int kNumShapes = int(std::size(kShapes));

struct Span {
    int64_t n_q, q_pos0, n_kv;
    const char *what;
};
const Span kSpans[] = {
    {1, 0, 1, "single"},   {1, 99, 100, "decode"},  {37, 0, 37, "prefill"},
    {17, 50, 67, "chunk"}, {5, 200, 205, "late"},   {64, 0, 64, "prefill64"},
    {65, 0, 65, "prefill65"}, {4, 60, 64, "decode4"},  {3, 130, 133, "decode3"},
    {1, 1999, 2000, "decode2000"}, {130, 0, 130, "prefill130"}, // two query blocks in one tile of 128
};

// An attention problem with its own buffers. `pad` extra rows after q, k, v and out are
// filled with NaN (k/v rows past n_kv, q rows past n_q, out rows past n_q) and out itself
// starts as NaN, so an out-of-bounds read or an unwritten output shows up as NaN.
struct Fixture {
    std::vector<float> q, k, v, out;
    std::vector<double> inv_freq;
    KeyRotation rot;
    AttentionProblem p;
    int pad = 0;
};

Fixture make_fixture(const Shape &s, const Span &sp, int rot, uint32_t seed, int pad = 0)
{
    Fixture f;
    f.pad = pad;
    const int64_t e = int64_t(s.n_head) * s.head_dim, ekv = int64_t(s.n_head_kv) * s.head_dim;
    std::mt19937 rng(seed);
    // q somewhat larger than k so the softmax is peaked and the running max keeps moving.
    longscope::test::Normal qd(0.0f, 1.5f), kd(0.0f, 1.0f);
    f.q.assign(size_t((sp.n_q + pad) * e), NAN);
    f.k.assign(size_t((sp.n_kv + pad) * ekv), NAN);
    f.v.assign(size_t((sp.n_kv + pad) * ekv), NAN);
    f.out.assign(size_t((sp.n_q + pad) * e), NAN);
    for (int64_t i = 0; i < sp.n_q * e; ++i)
        f.q[size_t(i)] = qd(rng);
    for (int64_t i = 0; i < sp.n_kv * ekv; ++i) {
        f.k[size_t(i)] = kd(rng);
        f.v[size_t(i)] = kd(rng);
    }
    f.p.n_head = s.n_head;
    f.p.n_head_kv = s.n_head_kv;
    f.p.head_dim = s.head_dim;
    f.p.q = f.q.data();
    f.p.n_q = sp.n_q;
    f.p.q_pos0 = sp.q_pos0;
    f.p.k = f.k.data();
    f.p.v = f.v.data();
    f.p.n_kv = sp.n_kv;
    f.p.out = f.out.data();
    if (rot != NoRot) {
        // Interleaved: full rotation at unit position scale. Rotate-half: partial rotation
        // (the last 4 dims untouched) with linear position scaling 0.5.
        f.rot.style = rot == RotInterleaved ? RopeStyle::Interleaved : RopeStyle::RotateHalf;
        f.rot.n_rot = rot == RotInterleaved ? s.head_dim : s.head_dim - 4;
        f.rot.pos_scale = rot == RotInterleaved ? 1.0 : 0.5;
        for (int i = 0; i < f.rot.n_rot / 2; ++i)
            f.inv_freq.push_back(std::pow(10000.0, -2.0 * i / f.rot.n_rot));
        f.rot.inv_freq = f.inv_freq;
        f.p.rotate_keys = &f.rot;
    }
    return f;
}

// The truth: out[i, h] in double, [n_q, n_head, head_dim].
std::vector<double> reference(const Fixture &f)
{
    const AttentionProblem &p = f.p;
    const int hd = p.head_dim, group = p.n_head / p.n_head_kv;
    const int64_t ekv = int64_t(p.n_head_kv) * hd;
    // Keys as attention sees them, in double, rotated with the complex-number formula.
    std::vector<double> keys(size_t(p.n_kv * ekv));
    for (int64_t j = 0; j < p.n_kv; ++j)
        for (int64_t c = 0; c < ekv; ++c)
            keys[size_t(j * ekv + c)] = static_cast<const float *>(p.k)[j * ekv + c];
    if (const KeyRotation *r = p.rotate_keys) {
        const int half = r->n_rot / 2;
        for (int64_t j = 0; j < p.n_kv; ++j)
            for (int kvh = 0; kvh < p.n_head_kv; ++kvh)
                for (int i = 0; i < half; ++i) {
                    const int a = r->style == RopeStyle::Interleaved ? 2 * i : i;
                    const int b = r->style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
                    double *x = keys.data() + j * ekv + kvh * hd;
                    const std::complex<double> z =
                        std::complex<double>(x[a], x[b]) *
                        std::polar(1.0, double(j) * r->pos_scale * r->inv_freq[size_t(i)]);
                    x[a] = z.real();
                    x[b] = z.imag();
                }
    }
    std::vector<double> out(size_t(p.n_q * p.n_head * hd), 0.0);
    std::vector<double> w(size_t(p.n_kv));
    for (int64_t i = 0; i < p.n_q; ++i)
        for (int h = 0; h < p.n_head; ++h) {
            const int kvh = h / group;
            const float *q = p.q + (i * p.n_head + h) * hd;
            double mx = -INFINITY;
            // Causal: a query sees itself and everything before; in a sliding window of W
            // positions only the last W of those.
            const int64_t pos = p.q_pos0 + i;
            const auto seen = [&](int64_t j) { return j <= pos && (p.window == 0 || pos - j < p.window); };
            for (int64_t j = 0; j < p.n_kv; ++j) {
                if (!seen(j))
                    continue;
                double s = 0;
                for (int d = 0; d < hd; ++d)
                    s += double(q[d]) * keys[size_t(j * ekv + kvh * hd + d)];
                s /= std::sqrt(double(hd));
                if (p.softcap > 0) // Gemma 2's soft cap: cap * tanh(s / cap)
                    s = p.softcap * std::tanh(s / p.softcap);
                w[size_t(j)] = s;
                mx = std::max(mx, w[size_t(j)]);
            }
            double sum = 0;
            for (int64_t j = 0; j < p.n_kv; ++j)
                if (seen(j))
                    sum += (w[size_t(j)] = std::exp(w[size_t(j)] - mx));
            double *o = out.data() + (i * p.n_head + h) * hd;
            for (int64_t j = 0; j < p.n_kv; ++j)
                if (seen(j))
                    for (int d = 0; d < hd; ++d)
                    o[d] += w[size_t(j)] / sum * static_cast<const float *>(p.v)[j * ekv + kvh * hd + d];
        }
    return out;
}

// Tolerance: |got - want| <= 3e-5 + 1e-4 |want|. Inputs are O(1), head_dim <= 64 and at most
// 205 keys (2000 for one decode), so float rounding (dot products of <= 64 terms, an exp per
// score, running sums of the weights, the rescales, the merge of key splits) stays around
// 1e-6. Outputs are convex combinations of values, so a dropped or duplicated key, a missing
// rescale or a wrong mask moves them by at least ~1/n_kv * |v| (~1e-3 for 205 keys): 3e-5 keeps a 30x margin over rounding and a 30x margin
// under the smallest real bug. xformers' fp32 tolerance (atol 3e-4, rtol 2e-5) is sized for
// long sequences and GPU reductions; with these short ones it would be 10x looser for no gain.
constexpr double kAtol = 3e-5, kRtol = 1e-4;

QString compare_to_reference(const Fixture &f, const std::vector<double> &want)
{
    const AttentionProblem &p = f.p;
    const int64_t e = int64_t(p.n_head) * p.head_dim;
    for (int64_t i = 0; i < p.n_q; ++i)
        for (int64_t c = 0; c < e; ++c) {
            const double got = f.out[size_t(i * e + c)], ref = want[size_t(i * e + c)];
            if (!std::isfinite(got) || std::fabs(got - ref) > kAtol + kRtol * std::fabs(ref))
                return QString("query %1 head %2 dim %3: got %4, want %5")
                    .arg(i)
                    .arg(c / p.head_dim)
                    .arg(c % p.head_dim)
                    .arg(got, 0, 'g', 9)
                    .arg(ref, 0, 'g', 9);
        }
    // Nothing written past the output.
    for (size_t i = size_t(p.n_q * e); i < f.out.size(); ++i)
        if (!std::isnan(f.out[i]))
            return QString("output padding at %1 was written").arg(i);
    return {};
}

// Expected tiled stats for a problem, counted here from the definition: every (query head,
// query block, key tile) triple; a key tile is skipped when (causal_flash only) its first key
// lies beyond the position of the block's last query, or when its last key lies before the
// sliding window of the block's first query.
void count_tiles(const AttentionProblem &p, int tile, bool causal_flash, int64_t &computed,
                 int64_t &skipped)
{
    const int64_t block = attention_query_block(tile);
    computed = skipped = 0;
    for (int h = 0; h < p.n_head; ++h)
        for (int64_t i0 = 0; i0 < p.n_q; i0 += block) {
            const int64_t first_pos = p.q_pos0 + i0, last_pos = p.q_pos0 + std::min(p.n_q, i0 + block) - 1;
            for (int64_t j0 = 0; j0 < p.n_kv; j0 += tile) {
                const int64_t j_last = std::min(p.n_kv, j0 + tile) - 1;
                if ((causal_flash && j0 > last_pos) || (p.window > 0 && first_pos - j_last >= p.window))
                    ++skipped;
                else
                    ++computed;
            }
        }
}

} // namespace

class TestAttention : public QObject {
    Q_OBJECT

private slots:
    // The AMX path's softmax exponential (scores less their row's maximum) against libm's e^x
    // in double: every 257th float of [-120, 0] by bit pattern (0 below -103.98, subnormal
    // results included), within the vector exp's bound (tst_ops: 0.88 ulp where the
    // multiply-adds are fused); -inf (a masked score) gives +0, -0 gives 1, NaN stays NaN.
    void softmax_exp_matches_libm()
    {
        if (!cpu_features().x86_64_v4)
            QSKIP("the CPU lacks x86-64-v4 (AVX-512): the AMX path's softmax never runs here");
        std::vector<float> x;
        for (uint32_t b = 0x80000000u;; b += 257) {
            float f;
            std::memcpy(&f, &b, 4);
            if (!(f >= -120.0f))
                break;
            x.push_back(f);
        }
        const size_t n_dense = x.size();
        x.push_back(-INFINITY);
        x.push_back(-0.0f);
        x.push_back(std::numeric_limits<float>::quiet_NaN());
        while (x.size() % 16)
            x.push_back(-1.0f);
        std::vector<float> y(x.size());
        softmax_exp_x86_64_v4(x.data(), y.data(), int64_t(x.size()));
        double worst = 0;
        float worst_x = 0;
        for (size_t i = 0; i < n_dense; ++i) {
            const double ref = std::exp(double(x[i]));
            const float r = float(ref);
            const double ulp = double(std::nextafter(r, INFINITY)) - double(r);
            const double e = std::fabs(double(y[i]) - ref) / ulp;
            if (!(e <= worst)) {
                worst = e;
                worst_x = x[i];
            }
        }
        qInfo("softmax exp: max error %.3f ulp (at %.9g) over %zu values", worst, double(worst_x), n_dense);
        QVERIFY2(worst <= 1.25, qPrintable(QString("exp(%1): %2 ulp").arg(double(worst_x), 0, 'g', 9).arg(worst)));
        QCOMPARE(y[n_dense], 0.0f);
        QVERIFY(!std::signbit(y[n_dense]));
        QCOMPARE(y[n_dense + 1], 1.0f);
        QVERIFY(std::isnan(y[n_dense + 2]));
        // The AVX-512 builds of both attention paths' softmax take this exponential where the
        // other builds take the vector exp (cpu/vec16.h): for x <= 0 the two must give the same
        // bits, or the builds' outputs part. Against every vector kernel set of this CPU whose
        // multiply-adds are fused (all but the portable one), over the same dense sample.
        const CpuKernels *ks[4];
        const int count = available_cpu_kernels(ks, 4);
        int compared = 0;
        for (int k = 0; k < count; ++k) {
            if (std::string(ks[k]->name) == "portable")
                continue;
            std::vector<float> v(x.size());
            ks[k]->exp(x.data(), v.data(), int64_t(x.size()));
            for (size_t i = 0; i < n_dense + 2; ++i)
                if (std::memcmp(&v[i], &y[i], 4) != 0)
                    QFAIL(qPrintable(QString("%1 exp(%2) = %3, the softmax exponential %4")
                                         .arg(ks[k]->name)
                                         .arg(double(x[i]), 0, 'g', 9)
                                         .arg(double(v[i]), 0, 'g', 9)
                                         .arg(double(y[i]), 0, 'g', 9)));
            ++compared;
        }
        QVERIFY(compared >= 1); // an AVX-512 CPU has at least the AVX-512 and AVX2 sets
    }
    void matches_reference_data()
    {
        QTest::addColumn<int>("variant");
        QTest::addColumn<int>("shape");
        QTest::addColumn<int>("span");
        QTest::addColumn<int>("rot");
        for (int vi = 0; vi < kNumVariants; ++vi)
            for (int si = 0; si < kNumShapes; ++si)
                for (int spi = 0; spi < int(std::size(kSpans)); ++spi)
                    for (int r : {NoRot, RotInterleaved, RotHalf}) {
                        const Shape &s = kShapes[si];
                        const Span &sp = kSpans[spi];
                        QTest::addRow("%s %d/%d/%d %s q=%lld@%lld kv=%lld %s", kVariants[vi].name,
                                      s.n_head, s.n_head_kv, s.head_dim, sp.what,
                                      (long long)sp.n_q, (long long)sp.q_pos0, (long long)sp.n_kv,
                                      rot_name(r))
                            << vi << si << spi << r;
                    }
    }
    void matches_reference()
    {
        QFETCH(int, variant);
        QFETCH(int, shape);
        QFETCH(int, span);
        QFETCH(int, rot);
        // Buffers sized exactly, so the ASan build catches any read or write past them.
        Fixture f = make_fixture(kShapes[shape], kSpans[span], rot, 1000u + uint32_t(span * 10 + shape));
        ThreadPool pool(2);
        run_variant(pool, kVariants[variant], f.p);
        const QString err = compare_to_reference(f, reference(f));
        QVERIFY2(err.isEmpty(), qPrintable(err));
    }

    void nan_poisoning_data()
    {
        QTest::addColumn<int>("variant");
        QTest::addColumn<int>("span");
        for (int vi = 0; vi < kNumVariants; ++vi)
            for (int spi : {1, 3, 4, 6})
                QTest::addRow("%s %s", kVariants[vi].name, kSpans[spi].what) << vi << spi;
    }
    void nan_poisoning()
    {
        QFETCH(int, variant);
        QFETCH(int, span);
        // k/v rows past n_kv, q rows past n_q and the output are NaN: every result must be
        // finite and right, and the output padding untouched.
        for (int shape : {2, 3, 4})
            for (int rot : {NoRot, RotHalf}) {
                Fixture f = make_fixture(kShapes[shape], kSpans[span], rot, 77, /*pad=*/9);
                ThreadPool pool(3);
                run_variant(pool, kVariants[variant], f.p);
                const QString err = compare_to_reference(f, reference(f));
                QVERIFY2(err.isEmpty(), qPrintable(QString("head_dim %1 %2: ").arg(kShapes[shape].head_dim)
                                                       .arg(rot_name(rot)) + err));
            }
    }

    void empty_cache_gives_zeros_not_nan()
    {
        // No key visible at all: exp(-inf - -inf) must be guarded; the output is zero.
        Fixture f = make_fixture(kShapes[0], {3, 0, 0, "empty"}, NoRot, 5);
        ThreadPool pool(2);
        for (const Variant &v : kVariants) {
            std::fill(f.out.begin(), f.out.end(), NAN);
            run_variant(pool, v, f.p);
            for (float x : f.out)
                QVERIFY2(x == 0.0f, v.name);
        }
    }

    void tiled_scratch_is_flat_in_n_kv()
    {
        const Shape s = kShapes[0];
        for (int threads : {1, 3})
            for (int tile : {7, 64})
                for (bool flash : {false, true})
                    for (int64_t n_q : {int64_t(1), int64_t(32)})
                        for (int rot : {NoRot, RotInterleaved}) {
                            ThreadPool pool(threads);
                            uint64_t bytes[2];
                            int idx = 0;
                            for (int64_t n_kv : {int64_t(256), int64_t(4096)}) {
                                Fixture f = make_fixture(s, {n_q, n_kv - n_q, n_kv, ""}, rot, 3);
                                bytes[idx++] = attention_tiled(pool, f.p, flash, tile).scratch_bytes;
                            }
                            const QString what = QString("threads=%1 tile=%2 flash=%3 n_q=%4 rot=%5: %6 vs %7")
                                                     .arg(threads).arg(tile).arg(flash).arg(n_q).arg(rot)
                                                     .arg(bytes[0]).arg(bytes[1]);
                            QVERIFY2(bytes[0] > 0, qPrintable(what));
                            QVERIFY2(bytes[0] == bytes[1], qPrintable(what));
                            // Per worker a few tiles: far below a single [n_q, n_kv] matrix.
                            QVERIFY2(bytes[0] < uint64_t(threads) * 64 * 1024, qPrintable(what));
                        }
    }

    void naive_scratch_grows_quadratically()
    {
        const Shape s = kShapes[0];
        ThreadPool pool(2);
        for (bool flash : {false, true}) {
            uint64_t bytes[2];
            int idx = 0;
            for (int64_t n : {int64_t(256), int64_t(512)}) {
                Fixture f = make_fixture(s, {n, 0, n, ""}, NoRot, 4);
                bytes[idx] = attention_naive(pool, f.p, flash).scratch_bytes;
                // Scores [n_head, n, n], plus the [n, n] mask without causal_flash, plus each
                // thread's transposed chunk of keys (64 keys), which does not grow.
                const uint64_t want = uint64_t(s.n_head + (flash ? 0 : 1)) * uint64_t(n * n) * 4 +
                                      uint64_t(pool.size()) * 64 * uint64_t(s.head_dim) * 4;
                QCOMPARE(bytes[idx], want);
                ++idx;
            }
            const double ratio = double(bytes[1]) / double(bytes[0]);
            QVERIFY2(ratio > 3.8 && ratio < 4.1, qPrintable(QString::number(ratio)));
        }
        // Rotating keys adds the [n_kv, n_head_kv * head_dim] rotated copy.
        Fixture f = make_fixture(s, {16, 40, 56, ""}, RotInterleaved, 4);
        QCOMPARE(attention_naive(pool, f.p, true).scratch_bytes,
                 uint64_t(s.n_head * 16 * 56 + 56 * s.n_head_kv * s.head_dim + pool.size() * 64 * s.head_dim) * 4);
    }

    void naive_out_of_memory_is_typed()
    {
        // A score matrix far beyond any machine: OutOfMemory naming the way out, before any
        // buffer is touched (the inputs here are far too small for the shape on purpose).
        Fixture f = make_fixture(kShapes[0], {1, 0, 1, ""}, NoRot, 6);
        f.p.n_q = int64_t(1) << 22;
        f.p.n_kv = int64_t(1) << 22;
        ThreadPool pool(1);
        try {
            attention_naive(pool, f.p, true);
            QFAIL("no OutOfMemory");
        } catch (const OutOfMemory &e) {
            QVERIFY2(QString(e.what()).contains("memory-efficient"), e.what());
        }
    }

    void causal_flash_skips_tiles_data()
    {
        QTest::addColumn<int>("tile");
        QTest::addColumn<int>("n_q");
        QTest::addColumn<int>("q_pos0");
        QTest::addColumn<int>("n_kv");
        QTest::newRow("prefill 256 tile 32") << 32 << 256 << 0 << 256;
        QTest::newRow("prefill 256 tile 7") << 7 << 256 << 0 << 256;
        QTest::newRow("prefill 200 tile 64") << 64 << 200 << 0 << 200;
        QTest::newRow("chunk 40@100 tile 16") << 16 << 40 << 100 << 140;
        QTest::newRow("prefill 30 tile 1") << 1 << 30 << 0 << 30;
        QTest::newRow("decode tile 32") << 32 << 1 << 255 << 256;
    }
    void causal_flash_skips_tiles()
    {
        QFETCH(int, tile);
        QFETCH(int, n_q);
        QFETCH(int, q_pos0);
        QFETCH(int, n_kv);
        Fixture f = make_fixture(kShapes[0], {n_q, q_pos0, n_kv, ""}, RotHalf, 8);
        const std::vector<double> want = reference(f);
        ThreadPool pool(2);
        for (bool flash : {false, true}) {
            int64_t computed = 0, skipped = 0;
            count_tiles(f.p, tile, flash, computed, skipped);
            const AttentionStats st = attention_tiled(pool, f.p, flash, tile);
            QCOMPARE(st.tiles_skipped, skipped);
            QCOMPARE(st.tiles_computed, computed);
            const QString err = compare_to_reference(f, want);
            QVERIFY2(err.isEmpty(), qPrintable(err));
            if (!flash)
                QCOMPARE(st.tiles_skipped, int64_t(0));
        }
        if (tile == 32 && n_q == 256) {
            // 8 query blocks x 8 key tiles per head: the 28 strictly above the diagonal.
            int64_t computed = 0, skipped = 0;
            count_tiles(f.p, tile, true, computed, skipped);
            QCOMPARE(skipped, int64_t(8 * 28));
            QVERIFY(attention_tiled(pool, f.p, true, tile).tiles_skipped > 0);
        }
    }

    // Gemma 2/3's sliding-window layers and soft-capped scores: every variant against the
    // reference, windows shorter than the sequence (a tile or less, several tiles), a cap that
    // bites (scores here have a spread of about 1.5, the cap is 1), both together; padded
    // buffers (NaN past n_q and n_kv), grouped-query and multi-head shapes, odd lengths, keys
    // rotated on load. The tiles wholly before a block's window are skipped, as counted from
    // the definition.
    void window_and_softcap_match_reference_data()
    {
        QTest::addColumn<int>("variant");
        QTest::addColumn<int>("window");
        QTest::addColumn<float>("softcap");
        // Reduced (under a sanitizer): the windows 0, 1 and 40 (one key, and one shorter than
        // some spans and longer than others).
        const std::vector<int> windows = longscope::test::reduced_size() ? std::vector<int>{0, 1, 40}
                                                                          : std::vector<int>{0, 1, 5, 16, 40, 100};
        for (int vi = 0; vi < kNumVariants; ++vi)
            for (int window : windows)
                for (float cap : {0.0f, 1.0f})
                    if (window != 0 || cap != 0.0f)
                        QTest::addRow("%s window %d cap %g", kVariants[vi].name, window, double(cap))
                            << vi << window << cap;
    }
    void window_and_softcap_match_reference()
    {
        QFETCH(int, variant);
        QFETCH(int, window);
        QFETCH(float, softcap);
        const Variant &v = kVariants[variant];
        for (int shape : {0, 2, 3, 4})
            for (const Span &sp : {kSpans[1], kSpans[2], kSpans[3], kSpans[4], kSpans[7], kSpans[8], Span{130, 0, 130, "prefill130"}})
                for (int rot : {NoRot, RotHalf}) {
                    Fixture f = make_fixture(kShapes[shape], sp, rot, 500u + uint32_t(shape * 7 + window), /*pad=*/3);
                    f.p.window = window;
                    f.p.softcap = softcap;
                    ThreadPool pool(2);
                    const AttentionStats st = run_variant(pool, v, f.p);
                    const QString where = QString("shape %1 %2 %3: ").arg(shape).arg(sp.what).arg(rot_name(rot));
                    const QString err = compare_to_reference(f, reference(f));
                    QVERIFY2(err.isEmpty(), qPrintable(where + err));
                    if (v.tiled && v.tile >= 4) { // decode's queries form one block
                        int64_t computed = 0, skipped = 0;
                        count_tiles(f.p, v.tile, v.causal_flash, computed, skipped);
                        QCOMPARE(st.tiles_computed, computed);
                        QCOMPARE(st.tiles_skipped, skipped);
                    }
                }
    }

    void window_skips_tiles()
    {
        // 256 keys in tiles of 16, the last query (decode) with a window of 40: the tiles
        // holding keys 215 .. 255 are read (13 .. 15), the thirteen before are not; for a
        // prefill block of 64 queries from 192 the same window reaches back to key 153.
        Fixture f = make_fixture(kShapes[0], {1, 255, 256, ""}, NoRot, 12);
        f.p.window = 40;
        ThreadPool pool(2);
        AttentionStats st = attention_tiled(pool, f.p, true, 16);
        QCOMPARE(st.tiles_computed, int64_t(3 * f.p.n_head));
        QCOMPARE(st.tiles_skipped, int64_t(13 * f.p.n_head));
        QVERIFY(compare_to_reference(f, reference(f)).isEmpty());
        Fixture g = make_fixture(kShapes[0], {64, 192, 256, ""}, NoRot, 12);
        g.p.window = 40;
        st = attention_tiled(pool, g.p, true, 64);
        // One block of 64 queries at 192 .. 255; its first query sees keys 153 .. 192: tiles
        // 2 and 3 are read, 0 and 1 are skipped.
        QCOMPARE(st.tiles_computed, int64_t(2 * g.p.n_head));
        QCOMPARE(st.tiles_skipped, int64_t(2 * g.p.n_head));
        QVERIFY(compare_to_reference(g, reference(g)).isEmpty());
    }

    // The tiled kernels' AVX-512 build (sixteen lanes to a vector, blocks of eight rows) and
    // their AVX2 build (eight lanes, blocks of four) add every score, every softmax sum and
    // every accumulator in the same order (the softmax's sixteen-lane sums included, which
    // both reduce by halving), prefill and decode, every head layout. Built with -O2 they give
    // the same bits. With -O3 (Release) GCC compiles some of the scalar tails differently in
    // the two builds, and the last bit of some outputs differs (head_dim 16, and the
    // five-query span; the same before the halving sums). So this checks agreement within
    // 2^-20 of the output's scale, far below any real difference between the builds (a key
    // left out, a wrong lane), and counts exact matches in the log.
    void vector_builds_agree()
    {
        if (!cpu_features().x86_64_v4 || !cpu_features().x86_64_v3)
            QSKIP("the CPU lacks x86-64-v4 (AVX-512) or x86-64-v3: one build of the kernels runs here");
        ThreadPool pool(2);
        int n_same = 0, n_cases = 0;
        for (int shape = 0; shape < kNumShapes; ++shape)
            for (const Span &sp : kSpans)
                for (int rot : {NoRot, RotHalf})
                    for (const Variant &v : kVariants) {
                        if (!v.tiled)
                            continue;
                        Fixture f = make_fixture(kShapes[shape], sp, rot, 77u + uint32_t(shape));
                        QVERIFY(kernel_table().attention_v4);
                        run_variant(pool, v, f.p);
                        const std::vector<float> wide = f.out;
                        std::fill(f.out.begin(), f.out.end(), NAN);
                        {
                            CpuOptions avx2;
                            avx2.kernels = SimdLevel::Avx2;
                            test::CpuOptionsScope scope(avx2);
                            QVERIFY(!kernel_table().attention_v4 && kernel_table().attention_v3);
                            run_variant(pool, v, f.p);
                        }
                        const bool same = std::memcmp(wide.data(), f.out.data(), wide.size() * sizeof(float)) == 0;
                        n_same += same;
                        ++n_cases;
                        for (size_t i = 0; i < wide.size() && !same; ++i)
                            QVERIFY2(std::fabs(wide[i] - f.out[i]) <= 0x1p-20f * std::max(1.0f, std::fabs(wide[i])),
                                     qPrintable(QString("shape %1 %2 %3 %4, output %5: %6 vs %7")
                                                    .arg(shape)
                                                    .arg(sp.what, rot_name(rot), v.name)
                                                    .arg(i)
                                                    .arg(wide[i], 0, 'g', 9)
                                                    .arg(f.out[i], 0, 'g', 9)));
                    }
        qInfo("AVX-512 and AVX2 builds of tiled attention: %d of %d cases bit for bit, the rest within 2^-20",
              n_same, n_cases);
    }

    void threads_are_bit_identical_data()
    {
        QTest::addColumn<int>("variant");
        for (int vi = 0; vi < kNumVariants; ++vi)
            QTest::newRow(kVariants[vi].name) << vi;
    }
    void threads_are_bit_identical()
    {
        QFETCH(int, variant);
        const Span spans[] = {{70, 30, 100, "chunk"}, {1, 299, 300, "decode"}, {130, 0, 130, "prefill"}};
        for (const Span &sp : spans)
            for (int rot : {NoRot, RotHalf}) {
                Fixture f = make_fixture(kShapes[2], sp, rot, 9);
                ThreadPool one(1), three(3);
                run_variant(one, kVariants[variant], f.p);
                const std::vector<float> a = f.out;
                std::fill(f.out.begin(), f.out.end(), NAN);
                run_variant(three, kVariants[variant], f.p);
                QVERIFY2(std::memcmp(a.data(), f.out.data(), a.size() * sizeof(float)) == 0,
                         qPrintable(QString("%1 %2").arg(sp.what, rot_name(rot))));
            }
    }

    void rotation_matches_prerotated_rope_data()
    {
        QTest::addColumn<int>("variant");
        QTest::addColumn<int>("rot");
        for (int vi = 0; vi < kNumVariants; ++vi)
            for (int r : {RotInterleaved, RotHalf})
                QTest::addRow("%s %s", kVariants[vi].name, rot_name(r)) << vi << r;
    }
    void rotation_matches_prerotated_rope()
    {
        QFETCH(int, variant);
        QFETCH(int, rot);
        for (const Span &sp : {Span{17, 150, 167, "chunk"}, Span{1, 999, 1000, "decode"}}) {
            const Shape s = kShapes[1];
            Fixture f = make_fixture(s, sp, rot, 10);
            ThreadPool pool(2);
            run_variant(pool, kVariants[variant], f.p);
            const std::vector<float> on_load = f.out;

            // The same keys rotated up front by ops.h rope(), then attention without rotation.
            std::vector<double> pos(size_t(sp.n_kv));
            for (int64_t j = 0; j < sp.n_kv; ++j)
                pos[size_t(j)] = double(j) * f.rot.pos_scale;
            std::vector<float> k = f.k;
            rope(k.data(), sp.n_kv, s.n_head_kv, s.head_dim, f.rot.n_rot, f.rot.style, pos, f.inv_freq);
            AttentionProblem p = f.p;
            p.k = k.data();
            p.rotate_keys = nullptr;
            std::vector<float> out(f.out.size(), NAN);
            p.out = out.data();
            run_variant(pool, kVariants[variant], p);
            for (size_t i = 0; i < out.size(); ++i)
                QVERIFY2(std::fabs(out[i] - on_load[i]) <= 1e-5,
                         qPrintable(QString("%1 at %2: %3 vs %4").arg(sp.what).arg(i).arg(out[i]).arg(on_load[i])));
            // The cache itself is never modified.
            Fixture g = make_fixture(s, sp, rot, 10);
            QVERIFY(std::memcmp(g.k.data(), f.k.data(), f.k.size() * sizeof(float)) == 0);
        }
    }

    void bad_arguments_are_rejected()
    {
        Fixture f = make_fixture(kShapes[0], {4, 0, 4, ""}, NoRot, 11);
        ThreadPool pool(1);
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, attention_tiled(pool, f.p, true, 0));
        AttentionProblem p = f.p;
        p.n_head_kv = 3;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, attention_naive(pool, p, false));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, attention_tiled(pool, p, false, 16));
        p = f.p;
        p.window = -1;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, attention_tiled(pool, p, true));
        p = f.p;
        p.softcap = -1.0f;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, attention_naive(pool, p, true));
    }
};

QTEST_APPLESS_MAIN(TestAttention)
#include "tst_attention.moc"
