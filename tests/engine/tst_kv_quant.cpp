// The quantized KV cache (settings.h KvType): rows stored as f16, q8_0 or q4_0 byte for byte
// as the `gguf` package's numpy quantizers encode them (tests/data/kv/rows.bin, written by
// scripts/gen_kv_quant_fixture.py); every attention variant over an encoded cache gives the
// bits it gives over the decoded rows as floats (except Q8_0 / Q4_0 keys stored rotated, scored
// in integers against the query rounded to blocks of 32: every kernel gives the same bits, and
// the outputs agree with a reference that rounds the query likewise and stay within the bound
// the rounding allows of the exact query), and agrees with a double-precision reference
// written here; the memory of every layout is what the block sizes say (34 bytes per 32 values
// for q8_0, 18 for q4_0); a switch of types between two decode steps converts the cached rows
// and continues as a cache of the new type filled from scratch would; bad values are refused.
#include "support/random_floats.h"
#include "support/test_size.h"
#include "support/comparisons.h"
#include "support/kv_models.h"

#include "cpu/attention.h"
#include "cpu/attention_qk.h"
#include "cpu/kernel_table.h"
#include "cpu/quant.h"
#include "cpu/thread_pool.h"
#include "kv/kv_store.h"
#include "kv/kv_vmm.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/quantize.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace longscope;
using longscope::test::expected_row_bytes;
using longscope::test::max_diff;
using longscope::test::random_kv_model;
using longscope::test::random_kv_tokens;

namespace {

// The fixture: rows and their encodings by the gguf package.
struct Fixture {
    int n_rows = 0, n = 0;
    std::vector<float> rows;
    std::string f16, q8_0, q4_0;

    const std::string &bytes(KvType t) const { return t == KvType::F16 ? f16 : t == KvType::Q8_0 ? q8_0 : q4_0; }
};

Fixture load_fixture()
{
    Fixture f;
    std::ifstream in(LONGSCOPE_TEST_DATA "/kv/rows.bin", std::ios::binary);
    int32_t hdr[2] = {0, 0};
    in.read(reinterpret_cast<char *>(hdr), sizeof hdr);
    f.n_rows = hdr[0];
    f.n = hdr[1];
    const size_t values = size_t(f.n_rows) * size_t(f.n);
    f.rows.resize(values);
    in.read(reinterpret_cast<char *>(f.rows.data()), std::streamsize(values * 4));
    const auto take = [&](size_t bytes) {
        std::string s(bytes, '\0');
        in.read(s.data(), std::streamsize(bytes));
        return s;
    };
    f.f16 = take(values * 2);
    f.q8_0 = take(values / 32 * 34);
    f.q4_0 = take(values / 32 * 18);
    if (!in)
        f.n_rows = 0;
    return f;
}

const KvMode kModes[] = {KvMode::Concat, KvMode::Static, KvMode::Vmm};
const KvType kEncoded[] = {KvType::F16, KvType::Q8_0, KvType::Q4_0};

std::string bytes_of(const uint8_t *p, size_t n) { return std::string(reinterpret_cast<const char *>(p), n); }

// ---- attention reference ----------------------------------------------------------------

// The queries as attention over Q8_0 / Q4_0 keys sees them: every block of 32 rounded as
// ggml's quantize_row_q8_0_ref rounds it (d = max|x| / 127, q = round(x / d), ties away from
// zero), the scale kept as a float, the value d * q in double. n is a multiple of 32.
std::vector<double> quantized_queries(const float *q, size_t n)
{
    std::vector<double> out(n);
    for (size_t b = 0; b + 32 <= n; b += 32) {
        float amax = 0.0f;
        for (size_t i = b; i < b + 32; ++i)
            amax = std::max(amax, std::fabs(q[i]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (size_t i = b; i < b + 32; ++i)
            out[i] = double(d) * std::round(q[i] * id);
    }
    return out;
}

// out[i, h] = softmax_j(q . k_j / sqrt(hd)) v_j over j <= q_pos0 + i, j < n_kv, in double;
// the queries p.q, or qd where given.
std::vector<float> reference_attention(const AttentionProblem &p, const std::vector<float> &k,
                                       const std::vector<float> &v, const std::vector<double> *qd = nullptr)
{
    const int hd = p.head_dim, group = p.n_head / p.n_head_kv;
    const int64_t ekv = int64_t(p.n_head_kv) * hd;
    std::vector<float> out(size_t(p.n_q * p.n_head * hd), 0.0f);
    std::vector<double> qrow(static_cast<size_t>(hd));
    for (int64_t i = 0; i < p.n_q; ++i)
        for (int h = 0; h < p.n_head; ++h) {
            for (int e = 0; e < hd; ++e)
                qrow[size_t(e)] = qd ? (*qd)[size_t((i * p.n_head + h) * hd + e)] : p.q[(i * p.n_head + h) * hd + e];
            const double *q = qrow.data();
            const int64_t last = std::min(p.n_kv - 1, p.q_pos0 + i);
            std::vector<double> s(size_t(last + 1));
            double mx = -INFINITY;
            for (int64_t j = 0; j <= last; ++j) {
                double d = 0;
                for (int e = 0; e < hd; ++e)
                    d += q[e] * k[size_t(j * ekv + (h / group) * hd + e)];
                s[size_t(j)] = d / std::sqrt(double(hd));
                mx = std::max(mx, s[size_t(j)]);
            }
            double sum = 0;
            for (double &x : s)
                sum += (x = std::exp(x - mx));
            for (int e = 0; e < hd; ++e) {
                double acc = 0;
                for (int64_t j = 0; j <= last; ++j)
                    acc += s[size_t(j)] * v[size_t(j * ekv + (h / group) * hd + e)];
                out[size_t((i * p.n_head + h) * hd + e)] = float(acc / sum);
            }
        }
    return out;
}

// Rounding the query moves the score of key j by at most
//   delta_j = sum_e |q_e - qd_e| |k_je| / sqrt(hd),
// so with B the largest delta_j a query sees, every softmax weight changes by a factor within
// e^{-2B} .. e^{2B}, and an output, a convex combination of values, by at most
// (e^{2B} - 1) max_j |v_je - out_e| (the weights of both sum to 1). Checks `got` (attention with
// the rounded query) against the double reference with the exact query within that bound,
// plus 1e-4 for float rounding; causal, no window, keys not rotated. Empty when it holds.
QString check_query_rounding_bound(const AttentionProblem &p, const std::vector<float> &q,
                                   const std::vector<double> &qd, const std::vector<float> &k,
                                   const std::vector<float> &v, const std::vector<float> &got)
{
    const auto exact = reference_attention(p, k, v);
    const int hd = p.head_dim, group = p.n_head / p.n_head_kv;
    const int64_t ekv = int64_t(p.n_head_kv) * hd;
    double widest = 0.0;
    for (int64_t i = 0; i < p.n_q; ++i)
        for (int h = 0; h < p.n_head; ++h) {
            const int64_t row = (i * p.n_head + h) * hd, last = std::min(p.n_kv - 1, p.q_pos0 + i);
            const int64_t kv0 = int64_t(h / group) * hd;
            double b = 0.0;
            for (int64_t j = 0; j <= last; ++j) {
                double delta = 0.0;
                for (int e = 0; e < hd; ++e)
                    delta += std::fabs(double(q[size_t(row + e)]) - qd[size_t(row + e)]) *
                             std::fabs(double(k[size_t(j * ekv + kv0 + e)]));
                b = std::max(b, delta / std::sqrt(double(hd)));
            }
            for (int e = 0; e < hd; ++e) {
                const double want = exact[size_t(row + e)];
                double spread = 0.0;
                for (int64_t j = 0; j <= last; ++j)
                    spread = std::max(spread, std::fabs(double(v[size_t(j * ekv + kv0 + e)]) - want));
                const double bound = std::expm1(2.0 * b) * spread + 1e-4;
                widest = std::max(widest, bound);
                if (!(std::fabs(double(got[size_t(row + e)]) - want) <= bound))
                    return QStringLiteral("query %1 head %2 dim %3: %4 vs the exact query's %5, bound %6")
                        .arg(i)
                        .arg(h)
                        .arg(e)
                        .arg(double(got[size_t(row + e)]))
                        .arg(want)
                        .arg(bound);
            }
        }
    return {};
}

std::vector<uint8_t> encode(KvType t, const std::vector<float> &x)
{
    std::vector<uint8_t> b(size_t(expected_row_bytes(t, int(x.size()))));
    quantize_row(kv_dtype(t), x.data(), b.data(), int64_t(x.size()));
    return b;
}

std::vector<float> decode(KvType t, const std::vector<uint8_t> &b, int64_t n)
{
    std::vector<float> x(static_cast<size_t>(n));
    dequantize_row(kv_dtype(t), b.data(), x.data(), n);
    return x;
}

// ---- sessions --------------------------------------------------------------------------------

std::vector<float> eval_copy(Session &s, std::span<const int32_t> tokens)
{
    const auto l = s.eval(tokens);
    return {l.begin(), l.end()};
}

} // namespace

class TestKvQuant : public QObject {
    Q_OBJECT

    Fixture m_fx;

private slots:
    void initTestCase()
    {
        m_fx = load_fixture();
        QVERIFY2(m_fx.n_rows > 0, "tests/data/kv/rows.bin is missing or short");
        QCOMPARE(m_fx.n % 32, 0);
    }

    // ---- storage ------------------------------------------------------------------------

    void rows_are_the_gguf_quantizers_bytes_data()
    {
        QTest::addColumn<int>("mode");
        QTest::addColumn<int>("type");
        for (KvMode m : kModes)
            for (KvType t : kEncoded)
                QTest::addRow("%s %s", to_string(m).data(), to_string(t).data()) << int(m) << int(t);
    }
    void rows_are_the_gguf_quantizers_bytes()
    {
        // Written in two pieces (the second at an offset, as decode steps append), keys and
        // values each: the stored bytes are the gguf package's encoding of the rows.
        QFETCH(int, mode);
        QFETCH(int, type);
        const KvType t = KvType(type);
        auto store = make_kv_store(KvMode(mode), 2, m_fx.n_rows, m_fx.n, t, t);
        store->ensure(m_fx.n_rows);
        const int first = 5;
        for (int layer = 0; layer < 2; ++layer)
            for (int side = 0; side < 2; ++side) {
                write_kv_rows(*store, side, layer, 0, m_fx.rows.data(), first);
                write_kv_rows(*store, side, layer, first, m_fx.rows.data() + size_t(first) * size_t(m_fx.n),
                              m_fx.n_rows - first);
            }
        const std::string &want = m_fx.bytes(t);
        for (int layer = 0; layer < 2; ++layer) {
            QCOMPARE(bytes_of(store->key_data(layer), want.size()), want);
            QCOMPARE(bytes_of(store->value_data(layer), want.size()), want);
        }
        // An f32 view of encoded rows is refused rather than misread.
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, store->keys(0));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, store->values(1));
    }

    void keys_and_values_take_their_own_types()
    {
        auto store = make_kv_store(KvMode::Static, 1, m_fx.n_rows, m_fx.n, KvType::Q8_0, KvType::Q4_0);
        write_kv_rows(*store, 0, 0, 0, m_fx.rows.data(), m_fx.n_rows);
        write_kv_rows(*store, 1, 0, 0, m_fx.rows.data(), m_fx.n_rows);
        QCOMPARE(bytes_of(store->key_data(0), m_fx.q8_0.size()), m_fx.q8_0);
        QCOMPARE(bytes_of(store->value_data(0), m_fx.q4_0.size()), m_fx.q4_0);
    }

    void converting_rows_between_types_data()
    {
        QTest::addColumn<int>("from");
        QTest::addColumn<int>("to");
        QTest::newRow("f32 -> q8_0") << int(KvType::F32) << int(KvType::Q8_0);
        QTest::newRow("f32 -> q4_0") << int(KvType::F32) << int(KvType::Q4_0);
        QTest::newRow("f32 -> f16") << int(KvType::F32) << int(KvType::F16);
        QTest::newRow("q8_0 -> f32") << int(KvType::Q8_0) << int(KvType::F32);
        QTest::newRow("q4_0 -> f32") << int(KvType::Q4_0) << int(KvType::F32);
        QTest::newRow("f16 -> f32") << int(KvType::F16) << int(KvType::F32);
    }
    void converting_rows_between_types()
    {
        // copy_kv_rows between stores of different types (the live switch): from f32 the
        // rows are the gguf encoding; back to f32 they are the encoded values decoded, which
        // the gguf package's dequantizer gives (tst_quant checks dequantize_row against it).
        QFETCH(int, from);
        QFETCH(int, to);
        const KvType tf = KvType(from), tt = KvType(to);
        for (KvMode mf : kModes)
            for (KvMode mt : kModes) {
                auto a = make_kv_store(mf, 2, m_fx.n_rows, m_fx.n, tf, tf);
                auto b = make_kv_store(mt, 2, m_fx.n_rows, m_fx.n, tt, tt);
                a->ensure(m_fx.n_rows);
                if (tf == KvType::F32) {
                    for (int l = 0; l < 2; ++l)
                        for (int side = 0; side < 2; ++side)
                            write_kv_rows(*a, side, l, 0, m_fx.rows.data(), m_fx.n_rows);
                } else {
                    const std::string &src = m_fx.bytes(tf);
                    for (int l = 0; l < 2; ++l) {
                        std::memcpy(a->key_data(l), src.data(), src.size());
                        std::memcpy(a->value_data(l), src.data(), src.size());
                    }
                }
                copy_kv_rows(*a, *b, m_fx.n_rows);
                std::string want;
                if (tt != KvType::F32) {
                    want = m_fx.bytes(tt);
                } else {
                    std::vector<float> dec(m_fx.rows.size());
                    const std::string &src = m_fx.bytes(tf);
                    dequantize_row(kv_dtype(tf), src.data(), dec.data(), int64_t(dec.size()));
                    want = std::string(reinterpret_cast<const char *>(dec.data()), dec.size() * 4);
                }
                for (int l = 0; l < 2; ++l) {
                    QCOMPARE(bytes_of(b->key_data(l), want.size()), want);
                    QCOMPARE(bytes_of(b->value_data(l), want.size()), want);
                }
            }
    }

    void memory_is_what_the_blocks_say_data()
    {
        QTest::addColumn<int>("type_k");
        QTest::addColumn<int>("type_v");
        for (KvType k : {KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0})
            for (KvType v : {KvType::F32, KvType::Q8_0, KvType::Q4_0})
                QTest::addRow("k=%s v=%s", to_string(k).data(), to_string(v).data()) << int(k) << int(v);
    }
    void memory_is_what_the_blocks_say()
    {
        QFETCH(int, type_k);
        QFETCH(int, type_v);
        const KvType tk = KvType(type_k), tv = KvType(type_v);
        const int layers = 3, limit = 4000, n = 256, used = 1234;
        const uint64_t per_token = expected_row_bytes(tk, n) + expected_row_bytes(tv, n);
        // static: the whole limit, from the start.
        auto st = make_kv_store(KvMode::Static, layers, limit, n, tk, tv);
        QCOMPARE(st->resident_bytes(), uint64_t(limit) * layers * per_token);
        QCOMPARE(st->reserved_bytes(), uint64_t(limit) * layers * per_token);
        // concat: exactly the rows asked for.
        auto cc = make_kv_store(KvMode::Concat, layers, limit, n, tk, tv);
        cc->ensure(used);
        QCOMPARE(cc->resident_bytes(), uint64_t(used) * layers * per_token);
        // vmm: each region committed in whole granules.
        auto vm = make_kv_store(KvMode::Vmm, layers, limit, n, tk, tv);
        vm->ensure(used);
        const uint64_t g = VmmKvStore::commit_granule();
        const auto granules = [&](uint64_t bytes) { return (bytes + g - 1) / g * g; };
        QCOMPARE(vm->resident_bytes(), uint64_t(layers) * (granules(used * expected_row_bytes(tk, n)) +
                                                           granules(used * expected_row_bytes(tv, n))));
        QVERIFY(vm->capacity() >= used);
        // Rows written at the end of the committed range are readable (the regions are sized
        // per side).
        std::vector<float> row(size_t(n), 1.5f);
        for (int l = 0; l < layers; ++l) {
            write_kv_rows(*vm, 0, l, vm->capacity() - 1, row.data(), 1);
            write_kv_rows(*vm, 1, l, vm->capacity() - 1, row.data(), 1);
        }
    }

    // ---- attention ----------------------------------------------------------------------

    void attention_reads_encoded_rows_data()
    {
        QTest::addColumn<int>("type_k");
        QTest::addColumn<int>("type_v");
        QTest::addColumn<bool>("tiled");
        QTest::addColumn<bool>("causal_flash");
        QTest::addColumn<bool>("rotate");
        const std::pair<KvType, KvType> types[] = {{KvType::Q8_0, KvType::Q8_0},
                                                   {KvType::Q4_0, KvType::Q4_0},
                                                   {KvType::F16, KvType::F16},
                                                   {KvType::Q8_0, KvType::F32},
                                                   {KvType::F32, KvType::Q4_0}};
        for (const auto &[k, v] : types)
            for (bool tiled : {false, true})
                for (bool cf : {false, true})
                    for (bool rot : {false, true})
                        QTest::addRow("k=%s v=%s %s%s%s", to_string(k).data(), to_string(v).data(),
                                      tiled ? "tiled" : "plain", cf ? " causal-flash" : "", rot ? " rotated" : "")
                            << int(k) << int(v) << tiled << cf << rot;
    }
    void attention_reads_encoded_rows()
    {
        // The same problem over the encoded rows and over those rows decoded to f32: the same
        // bits (the kernels decode a tile at a time and then run as on f32 rows), and close
        // to a double-precision reference over the decoded rows. Q8_0 and Q4_0 keys stored
        // rotated are scored in integers against the query rounded to blocks of 32
        // (cpu/attention_qk.h): there the reference rounds the query as ggml's Q8_0 does and
        // the outputs stay within float rounding of it, and within the bound the query's
        // rounding allows of the reference with the exact query. Shapes: prefill (many
        // queries, the blocked tiled path), decode (one and three queries, the split-keys
        // path), TinyLlama's head layout and a multi-head one. The cache buffers hold nine
        // more rows of 0xff bytes (NaN scales, NaN halves) past n_kv, which must never be read.
        QFETCH(int, type_k);
        QFETCH(int, type_v);
        QFETCH(bool, tiled);
        QFETCH(bool, causal_flash);
        QFETCH(bool, rotate);
        const KvType tk = KvType(type_k), tv = KvType(type_v);
        ThreadPool pool(3);
        struct Shape {
            int n_head, n_head_kv, head_dim;
        };
        struct Span {
            int64_t n_q, q_pos0, n_kv;
        };
        std::mt19937 rng(11);
        longscope::test::Normal nd(0.0f, 1.0f);
        std::vector<double> inv_freq;
        // The prefill from position 0: 150 queries, 100 at the reduced size (two query blocks
        // either way).
        const int64_t prefill = longscope::test::sized(150, 100);
        // {6, 3, 12}: a head size that is no whole number of blocks (F16 and F32 only) and rows
        // whose length leaves a remainder for the vector decoders. {14, 2, 64}: seven query
        // heads per kv head, which decode scores from F16 keys in blocks of four, two and one
        // rows (as {4, 4, 32} and {6, 2, 96} take blocks of one and of two and one).
        for (const Shape sh : {Shape{16, 2, 64}, Shape{4, 4, 32}, Shape{6, 2, 96}, Shape{6, 3, 12}, Shape{14, 2, 64}})
            for (const Span sp : {Span{prefill, 0, prefill}, Span{1, 299, 300}, Span{3, 197, 200}, Span{70, 60, 130}}) {
                if (sh.head_dim % block_elems(kv_dtype(tk)) != 0 || sh.head_dim % block_elems(kv_dtype(tv)) != 0)
                    continue;
                const int64_t ekv = int64_t(sh.n_head_kv) * sh.head_dim;
                std::vector<float> q(size_t(sp.n_q * sh.n_head * sh.head_dim)), k(size_t(sp.n_kv * ekv)),
                    v(size_t(sp.n_kv * ekv));
                for (auto &x : q)
                    x = nd(rng);
                for (auto &x : k)
                    x = nd(rng);
                for (auto &x : v)
                    x = nd(rng);
                auto kq = encode(tk, k), vq = encode(tv, v);
                const auto kd = decode(tk, kq, int64_t(k.size())), vd = decode(tv, vq, int64_t(v.size()));
                kq.resize(kq.size() + size_t(9 * expected_row_bytes(tk, int(ekv))), 0xff);
                vq.resize(vq.size() + size_t(9 * expected_row_bytes(tv, int(ekv))), 0xff);
                const bool int_scores = (tk == KvType::Q8_0 || tk == KvType::Q4_0) && !rotate;
                inv_freq.assign(size_t(sh.head_dim / 2), 0.0);
                for (int i = 0; i < sh.head_dim / 2; ++i)
                    inv_freq[size_t(i)] = std::pow(10000.0, -2.0 * i / sh.head_dim);
                const KeyRotation rot{inv_freq, 1.0, sh.head_dim, RopeStyle::Interleaved};

                AttentionProblem p;
                p.n_head = sh.n_head;
                p.n_head_kv = sh.n_head_kv;
                p.head_dim = sh.head_dim;
                p.q = q.data();
                p.n_q = sp.n_q;
                p.q_pos0 = sp.q_pos0;
                p.n_kv = sp.n_kv;
                p.rotate_keys = rotate ? &rot : nullptr;
                std::vector<float> out_enc(q.size()), out_dec(q.size());
                p.k = kq.data();
                p.v = vq.data();
                p.k_type = kv_dtype(tk);
                p.v_type = kv_dtype(tv);
                p.out = out_enc.data();
                const auto run = [&](const AttentionProblem &pr) {
                    return tiled ? attention_tiled(pool, pr, causal_flash, 64) : attention_naive(pool, pr, causal_flash);
                };
                const AttentionStats se = run(p);
                AttentionProblem pd = p;
                pd.k = kd.data();
                pd.v = vd.data();
                pd.k_type = pd.v_type = DType::F32;
                pd.out = out_dec.data();
                const AttentionStats sd = run(pd);
                const QString where = QStringLiteral("heads %1/%2 x %3, n_q %4 at %5, n_kv %6")
                                          .arg(sh.n_head)
                                          .arg(sh.n_head_kv)
                                          .arg(sh.head_dim)
                                          .arg(sp.n_q)
                                          .arg(sp.q_pos0)
                                          .arg(sp.n_kv);
                if (!int_scores)
                    QVERIFY2(std::memcmp(out_enc.data(), out_dec.data(), out_enc.size() * 4) == 0,
                             qPrintable(where + QStringLiteral(": max diff %1").arg(max_diff(out_enc, out_dec))));
                // The decode buffers are per worker and per tile: the scratch does not hold a
                // decoded copy of the cache (a tile of 64 rows of every kv head per worker at
                // most beyond the f32 run's, and with integer scores the quantized rows of a
                // block of 64 queries of a kv head's query heads, 104 bytes per 32 values).
                const uint64_t query_blocks =
                    int_scores ? uint64_t(64 * sh.n_head / sh.n_head_kv * sh.head_dim / 32) * sizeof(QkQueryBlock) : 0;
                QVERIFY2(se.scratch_bytes <= sd.scratch_bytes + uint64_t(pool.size()) * (2 * 64 * ekv * 4 + query_blocks),
                         qPrintable(where + QStringLiteral(": scratch %1 vs %2").arg(se.scratch_bytes).arg(sd.scratch_bytes)));
                if (!rotate) {
                    const auto qd = int_scores ? quantized_queries(q.data(), q.size()) : std::vector<double>();
                    const auto ref = reference_attention(pd, kd, vd, int_scores ? &qd : nullptr);
                    QVERIFY2(max_diff(ref, out_enc) < 1e-4, qPrintable(where + QStringLiteral(": vs reference %1")
                                                                                  .arg(max_diff(ref, out_enc))));
                    if (int_scores) {
                        const QString err = check_query_rounding_bound(pd, q, qd, kd, vd, out_enc);
                        QVERIFY2(err.isEmpty(), qPrintable(where + QStringLiteral(": ") + err));
                    }
                }
                // A sliding window shorter than the span and a soft cap that bites (Gemma's
                // layers): the same bits over the encoded and the decoded rows, and close to the
                // plain kernel over the decoded rows (tst_attention holds both to a reference).
                p.window = pd.window = 45;
                p.softcap = pd.softcap = 1.0f;
                run(p);
                run(pd);
                if (!int_scores)
                    QVERIFY2(std::memcmp(out_enc.data(), out_dec.data(), out_enc.size() * 4) == 0,
                             qPrintable(where + QStringLiteral(" windowed: max diff %1").arg(max_diff(out_enc, out_dec))));
                // The plain kernel over the rows it would read in the same way: decoded, or the
                // encoded keys scored in integers.
                std::vector<float> out_plain(q.size());
                AttentionProblem pp = int_scores ? p : pd;
                pp.out = out_plain.data();
                attention_naive(pool, pp, true);
                QVERIFY2(max_diff(out_plain, out_enc) < 1e-4,
                         qPrintable(where + QStringLiteral(" windowed: vs plain %1").arg(max_diff(out_plain, out_enc))));
            }
    }

    void integer_scores_data()
    {
        QTest::addColumn<int>("type");
        QTest::addColumn<int>("head_dim");
        for (KvType t : {KvType::Q8_0, KvType::Q4_0})
            for (int hd : {32, 64, 96})
                QTest::addRow("%s head %d", to_string(t).data(), hd) << int(t) << hd;
    }
    void integer_scores()
    {
        // The integer scores of a few query rows against keys of kv head 1 of 2 (rows of two
        // heads, so the head's blocks are strided), for counts that fill no, one and several
        // groups of sixteen and leave remainders: every kernel this CPU runs packs the same
        // bytes and gives the same bits as the portable one, writes nothing past the keys it
        // was given (NaN there stays NaN), reads nothing past them (the buffer is exactly
        // sized), and each score is the double-precision dot product of the rounded query
        // (quantized_queries) and the decoded key, times the scale, within float rounding:
        // the integer sums are exact, so only the block scales' products and the additions
        // of the blocks round (a few ulp of the magnitudes involved).
        QFETCH(int, type);
        QFETCH(int, head_dim);
        const KvType t = KvType(type);
        const DType dt = kv_dtype(t);
        const int hd = head_dim, n_rows = 3;
        const float scale = 0.125f;
        std::mt19937 rng(5);
        longscope::test::Normal nd(0.0f, 1.0f);
        for (int64_t count : {1, 5, 16, 17, 40, 64}) {
            const int64_t ekv = 2 * int64_t(hd);
            std::vector<float> k(size_t(count * ekv)), q(size_t(n_rows * hd));
            for (auto &x : k)
                x = nd(rng);
            for (auto &x : q)
                x = 2.0f * nd(rng);
            const auto kq = encode(t, k);
            const auto kd = decode(t, kq, int64_t(k.size()));
            const size_t rb = size_t(expected_row_bytes(t, int(ekv)));
            const uint8_t *head1 = kq.data() + rb / 2;
            std::vector<QkQueryBlock> qq(size_t(n_rows * hd / 32));
            for (int r = 0; r < n_rows; ++r)
                qk_quantize_query(q.data() + r * hd, hd, scale, qq.data() + r * hd / 32);
            const auto qd = quantized_queries(q.data(), q.size());

            const int64_t s_stride = count + 3;
            std::vector<uint8_t> packed_portable(qk_packed_bytes(count, hd));
            qk_pack_keys(QkKernel::Portable, dt, head1, rb, count, hd, packed_portable.data());
            std::vector<float> want(size_t(n_rows * s_stride), NAN);
            qk_scores(QkKernel::Portable, qq.data(), hd / 32, n_rows, packed_portable.data(), count, hd, want.data(),
                      s_stride);
            for (int r = 0; r < n_rows; ++r)
                for (int64_t c = 0; c < s_stride; ++c) {
                    const float got = want[size_t(r * s_stride + c)];
                    if (c >= count) {
                        QVERIFY2(std::isnan(got), "a score was written past the keys");
                        continue;
                    }
                    double dot = 0.0, mag = 0.0;
                    for (int e = 0; e < hd; ++e) {
                        const double x = qd[size_t(r * hd + e)] * double(kd[size_t(c * ekv + hd + e)]);
                        dot += x;
                        mag += std::fabs(x);
                    }
                    dot *= scale;
                    mag *= scale;
                    QVERIFY2(std::fabs(double(got) - dot) <= 1e-6 * mag + 1e-30,
                             qPrintable(QStringLiteral("count %1 row %2 key %3: %4 vs %5")
                                            .arg(count)
                                            .arg(r)
                                            .arg(c)
                                            .arg(double(got), 0, 'g', 9)
                                            .arg(dot, 0, 'g', 9)));
                }
            for (QkKernel kernel : {QkKernel::Vnni, QkKernel::Avx2}) {
                if (!qk_kernel_available(kernel))
                    continue; // this CPU cannot run it; the portable kernel above is checked
                std::vector<uint8_t> packed(qk_packed_bytes(count, hd));
                qk_pack_keys(kernel, dt, head1, rb, count, hd, packed.data());
                QVERIFY2(packed == packed_portable, qPrintable(QStringLiteral("count %1: packed bytes differ").arg(count)));
                std::vector<float> got(size_t(n_rows * s_stride), NAN);
                qk_scores(kernel, qq.data(), hd / 32, n_rows, packed.data(), count, hd, got.data(), s_stride);
                QVERIFY2(std::memcmp(got.data(), want.data(), got.size() * 4) == 0,
                         qPrintable(QStringLiteral("count %1 kernel %2: max diff %3")
                                        .arg(count)
                                        .arg(int(kernel))
                                        .arg(max_diff(got, want))));
            }
        }
    }

    void vector_levels_agree_on_integer_scores()
    {
        // Forcing the AVX2 kernels (and the portable level, whose attention still runs the
        // x86-64-v3 build where the CPU has it) changes no bit of attention over Q8_0 / Q4_0
        // keys, in the plain, blocked and split-keys paths, grouped and multi-head.
        ThreadPool pool(2);
        std::mt19937 rng(21);
        longscope::test::Normal nd(0.0f, 1.0f);
        struct Case {
            int n_head, n_head_kv, head_dim;
            int64_t n_q, q_pos0, n_kv;
        };
        for (KvType t : {KvType::Q8_0, KvType::Q4_0})
            for (const Case c : {Case{32, 4, 64, 1, 332, 333}, Case{4, 4, 64, 3, 97, 100}, Case{6, 2, 96, 70, 30, 100}})
                for (bool tiled : {false, true}) {
                    const int64_t ekv = int64_t(c.n_head_kv) * c.head_dim;
                    std::vector<float> q(size_t(c.n_q * c.n_head * c.head_dim)), k(size_t(c.n_kv * ekv)),
                        v(size_t(c.n_kv * ekv));
                    for (auto *x : {&q, &k, &v})
                        for (float &e : *x)
                            e = nd(rng);
                    const auto kq = encode(t, k), vq = encode(t, v);
                    AttentionProblem p;
                    p.n_head = c.n_head;
                    p.n_head_kv = c.n_head_kv;
                    p.head_dim = c.head_dim;
                    p.q = q.data();
                    p.n_q = c.n_q;
                    p.q_pos0 = c.q_pos0;
                    p.n_kv = c.n_kv;
                    p.k = kq.data();
                    p.v = vq.data();
                    p.k_type = p.v_type = kv_dtype(t);
                    std::vector<std::vector<float>> outs;
                    for (SimdLevel level : {SimdLevel::Auto, SimdLevel::Avx2, SimdLevel::Portable}) {
                        CpuOptions o;
                        o.kernels = level;
                        set_cpu_options(o);
                        outs.emplace_back(q.size());
                        p.out = outs.back().data();
                        if (tiled)
                            attention_tiled(pool, p, true);
                        else
                            attention_naive(pool, p, true);
                    }
                    set_cpu_options(CpuOptions{});
                    for (size_t i = 1; i < outs.size(); ++i)
                        QVERIFY2(std::memcmp(outs[i].data(), outs[0].data(), q.size() * 4) == 0,
                                 qPrintable(QStringLiteral("%1 heads %2/%3 n_q %4 level %5: max diff %6")
                                                .arg(QString::fromUtf8(to_string(t).data()))
                                                .arg(c.n_head)
                                                .arg(c.n_head_kv)
                                                .arg(c.n_q)
                                                .arg(i)
                                                .arg(max_diff(outs[i], outs[0]))));
                }
    }

    void attention_refuses_heads_that_are_not_whole_blocks()
    {
        ThreadPool pool(1);
        std::vector<float> q(48), out(48);
        std::vector<uint8_t> kq(64);
        AttentionProblem p;
        p.n_head = p.n_head_kv = 1;
        p.head_dim = 48;
        p.q = q.data();
        p.n_q = 1;
        p.n_kv = 1;
        p.k = p.v = kq.data();
        p.k_type = DType::Q8_0;
        p.out = out.data();
        try {
            attention_tiled(pool, p, true);
            QFAIL("a q8_0 cache with a head size of 48 was accepted");
        } catch (const InvalidArgument &e) {
            QVERIFY2(std::string(e.what()).find("48") != std::string::npos, e.what());
        }
    }

    // ---- sessions -----------------------------------------------------------------------

    void layouts_and_paths_agree_on_an_encoded_cache_data()
    {
        QTest::addColumn<bool>("mem_efficient");
        QTest::addColumn<bool>("causal_flash");
        QTest::addColumn<bool>("before_rope");
        for (bool me : {false, true})
            for (bool cf : {false, true})
                for (bool br : {false, true})
                    QTest::addRow("%s%s%s", me ? "mem-efficient" : "naive", cf ? " causal-flash" : "",
                                  br ? " keys-before-rope" : "")
                        << me << cf << br;
    }
    void layouts_and_paths_agree_on_an_encoded_cache()
    {
        // Every layout holds the same q8_0 / q4_0 rows, so the logits of a prompt and of
        // decode steps are the same bits in concat, static and vmm, and in the no-cache mode
        // (which recomputes into a q8_0 / q4_0 scratch cache every step).
        QFETCH(bool, mem_efficient);
        QFETCH(bool, causal_flash);
        QFETCH(bool, before_rope);
        QTemporaryDir dir;
        const auto model = random_kv_model(dir.path().toStdString(), 2);
        const auto prompt = random_kv_tokens(90, 3), more = random_kv_tokens(4, 4);
        std::vector<std::vector<float>> first;
        for (KvMode mode : {KvMode::Static, KvMode::Concat, KvMode::Vmm, KvMode::None}) {
            SessionOptions o;
            o.n_ctx = 128;
            o.n_threads = 2;
            o.settings.kv_mode = mode;
            o.settings.kv_type_k = KvType::Q8_0;
            o.settings.kv_type_v = KvType::Q4_0;
            o.settings.attention.memory_efficient = mem_efficient;
            o.settings.attention.causal_flash = causal_flash;
            o.settings.rope.store_kv_before_rope = before_rope;
            Session s(*model, o);
            std::vector<std::vector<float>> got{eval_copy(s, prompt)};
            for (int32_t id : more)
                got.push_back(eval_copy(s, std::span<const int32_t>(&id, 1)));
            if (first.empty()) {
                first = got;
                continue;
            }
            // The no-cache mode recomputes the prompt every step through prefill attention: on
            // AMX tiles (where in use) its operands carry 16 significant bits, and tst_amx holds
            // it to 1e-4 of attention in double; the other modes decode on the float kernels.
            const double tolerance = mode == KvMode::None && mem_efficient && kernel_table().amx ? 1e-4 : 1e-5;
            for (size_t i = 0; i < got.size(); ++i)
                QVERIFY2(max_diff(got[i], first[i]) <= tolerance,
                         qPrintable(QStringLiteral("kv %1 step %2: %3")
                                        .arg(QString::fromUtf8(to_string(mode).data()))
                                        .arg(i)
                                        .arg(max_diff(got[i], first[i]))));
        }
    }

    void live_switch_converts_the_cache_data()
    {
        QTest::addColumn<int>("n_layer");
        QTest::addColumn<int>("to");
        QTest::addColumn<bool>("mem_efficient");
        QTest::addColumn<double>("tol");
        // One layer: the cached rows depend only on the tokens, so the converted cache is the
        // one a fresh q8_0 evaluation writes, and the logits agree to float rounding (the
        // prompt evaluated in one batch against token by token: 1e-4, as tst_techniques).
        // Two layers: layer 1's cached rows also carry layer 0's attention, which read f32
        // rows in the converted run and q8_0 rows in the fresh one; the difference is
        // quantization noise, bounded here at 0.05 in logits spanning several units.
        for (bool me : {false, true}) {
            QTest::addRow("1 layer -> q8_0%s", me ? " mem-efficient" : "") << 1 << int(KvType::Q8_0) << me << 1e-4;
            QTest::addRow("1 layer -> q4_0%s", me ? " mem-efficient" : "") << 1 << int(KvType::Q4_0) << me << 1e-4;
            QTest::addRow("2 layers -> q8_0%s", me ? " mem-efficient" : "") << 2 << int(KvType::Q8_0) << me << 0.05;
        }
    }
    void live_switch_converts_the_cache()
    {
        // N tokens with f32 keys and values, then the settings switch to q8_0 (or q4_0) and
        // generation goes on with the same tokens; compared with a session that evaluated the
        // same tokens fresh with the new type. The ledger shows the new size at the first step
        // after the switch.
        QFETCH(int, n_layer);
        QFETCH(int, to);
        QFETCH(bool, mem_efficient);
        QFETCH(double, tol);
        const KvType tt = KvType(to);
        QTemporaryDir dir;
        const auto model = random_kv_model(dir.path().toStdString(), n_layer);
        const int n_ctx = 200;
        const auto prompt = random_kv_tokens(60, 9), cont = random_kv_tokens(12, 10);
        SessionOptions o;
        o.n_ctx = n_ctx;
        o.n_threads = 2;
        o.settings.kv_mode = KvMode::Static;
        o.settings.attention.memory_efficient = mem_efficient;
        Session live(*model, o), plain(*model, o);
        std::vector<StepMetrics> metrics;
        live.set_metrics_callback([&](const StepMetrics &m) { metrics.push_back(m); });
        eval_copy(live, prompt);
        eval_copy(plain, prompt);
        for (int i = 0; i < 6; ++i) {
            eval_copy(live, std::span<const int32_t>(&cont[size_t(i)], 1));
            eval_copy(plain, std::span<const int32_t>(&cont[size_t(i)], 1));
        }
        const uint64_t f32_resident = metrics.back().memory.kv_resident;
        const int ekv = model->hparams().n_embd_kv();
        QCOMPARE(f32_resident, uint64_t(n_ctx) * n_layer * 2 * expected_row_bytes(KvType::F32, ekv));

        Settings st = live.settings();
        st.kv_type_k = st.kv_type_v = tt;
        live.set_settings(st);

        SessionOptions fo = o;
        fo.settings.kv_type_k = fo.settings.kv_type_v = tt;
        Session fresh(*model, fo);
        std::vector<int32_t> so_far = prompt;
        so_far.insert(so_far.end(), cont.begin(), cont.begin() + 6);
        eval_copy(fresh, so_far);

        double worst = 0, moved = 0;
        for (int i = 6; i < int(cont.size()); ++i) {
            const std::span<const int32_t> tok(&cont[size_t(i)], 1);
            const auto a = eval_copy(live, tok), b = eval_copy(fresh, tok), c = eval_copy(plain, tok);
            worst = std::max(worst, max_diff(a, b));
            moved = std::max(moved, max_diff(a, c));
            QCOMPARE(metrics.back().settings.kv_type_k, tt);
            QCOMPARE(metrics.back().memory.kv_resident,
                     uint64_t(n_ctx) * n_layer * 2 * expected_row_bytes(tt, ekv));
        }
        qInfo("max logit difference after the switch: converted vs fresh %g, converted vs f32 %g", worst, moved);
        QVERIFY2(worst <= tol, qPrintable(QStringLiteral("converted vs fresh: %1").arg(worst)));
        // The switch took effect: the logits left those of the session that stayed f32, and
        // came closer to the fresh q8_0 / q4_0 session's than to them (measured: one layer 0
        // against 0.039 / 0.90; two layers 0.015 against 0.031).
        QVERIFY2(moved > 1e-5, qPrintable(QStringLiteral("converted vs f32: %1").arg(moved)));
        QVERIFY2(worst < moved, qPrintable(QStringLiteral("converted vs fresh %1, vs f32 %2").arg(worst).arg(moved)));
        // The memory after the switch is the new type's (q8_0: 34 / 128 of f32).
        QVERIFY(metrics.back().memory.kv_resident < f32_resident / 3);

        // And back: q8_0 -> f32 keeps the decoded rows; generation goes on.
        st.kv_type_k = st.kv_type_v = KvType::F32;
        live.set_settings(st);
        const auto back = eval_copy(live, std::span<const int32_t>(&cont[0], 1));
        QVERIFY(std::isfinite(back.front()));
        QCOMPARE(metrics.back().memory.kv_resident, f32_resident);
    }

    void bad_values_are_refused()
    {
        for (const char *bad : {"", "q8", "Q8_0", "q5_0", "f64", "bf16"})
            QVERIFY2(!parse_kv_type(bad).has_value(), bad);
        for (KvType t : {KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0})
            QVERIFY(parse_kv_type(to_string(t)) == t);

        // A store whose rows are not whole blocks.
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, make_kv_store(KvMode::Static, 1, 8, 48, KvType::Q8_0, KvType::F32));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, make_kv_store(KvMode::Vmm, 1, 8, 48, KvType::F32, KvType::Q4_0));

        // The bundled model's head size is 8: a quantized type names it, at construction and
        // when switched live (the old settings stay).
        auto small = Model::load(LONGSCOPE_BUNDLED_MODEL);
        SessionOptions o;
        o.n_ctx = 64;
        o.settings.kv_type_v = KvType::Q4_0;
        try {
            Session s(*small, o);
            QFAIL("q4_0 values with a head size of 8 were accepted");
        } catch (const InvalidArgument &e) {
            const std::string msg = e.what();
            QVERIFY2(msg.find("head size is 8") != std::string::npos && msg.find("q4_0") != std::string::npos,
                     e.what());
        }
        o.settings.kv_type_v = KvType::F16; // f16 has no blocks: any head size
        Session s(*small, o);
        Settings st = s.settings();
        st.kv_type_k = KvType::Q8_0;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, s.set_settings(st));
        QCOMPARE(s.settings().kv_type_k, KvType::F32);
        const std::vector<int32_t> t{1, 50, 60};
        QVERIFY(std::isfinite(s.eval(t).front()));

        // The CUDA cache stores every type too (tst_cuda_backend checks its rows); the head
        // size rule is the same there.
        Settings cuda;
        cuda.backend = ComputeBackend::Cuda;
        cuda.kv_type_k = KvType::Q8_0;
        check_kv_types(cuda, 64);
        try {
            check_kv_types(cuda, 8);
            QFAIL("q8_0 keys with a head size of 8 were accepted on CUDA");
        } catch (const InvalidArgument &e) {
            QVERIFY2(std::string(e.what()).find("head size is 8") != std::string::npos, e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestKvQuant)
#include "tst_kv_quant.moc"
