// Quantized weight types: llama.cpp's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL and IQ4_XS.
//
// The truth from outside is tests/data/quant (see its README): blocks decoded by llama.cpp's
// gguf Python package and ggml's C code (which agree bit for bit), and ggml's reference
// quantizers' blocks for fixed inputs. Dequantization must match bit for bit; our quantizers
// are ports of ggml's reference ones and must match them too. On top: error bounds of the
// quantize -> dequantize round trip, matmul on quantized weights against a double reference,
// and whole models quantized by quantize_model_file.
#include "support/test_size.h"

#include "cpu/gemm.h"
#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/packed.h"
#include "cpu/qdot.h"
#include "cpu/quant.h"
#include "cpu/thread_pool.h"

#include "longscope/cpu_options.h"
#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "longscope/quantize.h"
#include "support/cpu_options_scope.h"
#include "support/gguf_writer.h"
#include "support/model_files.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

using namespace longscope;
using longscope::test::CpuOptionsScope;

Q_DECLARE_METATYPE(longscope::DType)

namespace {

const std::string fixture_dir = LONGSCOPE_TEST_DATA "/quant/";
const std::string bundled = LONGSCOPE_BUNDLED_MODEL;

std::vector<uint8_t> read_bytes(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return {};
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<float> read_floats(const std::string &path)
{
    const std::vector<uint8_t> b = read_bytes(path);
    std::vector<float> f(b.size() / 4);
    std::memcpy(f.data(), b.data(), f.size() * 4);
    return f;
}

uint32_t bits_of(float f)
{
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

void add_type_rows()
{
    QTest::addColumn<DType>("type");
    QTest::addColumn<QString>("file");
    QTest::newRow("Q8_0") << DType::Q8_0 << "q8_0";
    QTest::newRow("Q4_0") << DType::Q4_0 << "q4_0";
    QTest::newRow("Q4_K") << DType::Q4_K << "q4_k";
    QTest::newRow("Q6_K") << DType::Q6_K << "q6_k";
    QTest::newRow("Q4_1") << DType::Q4_1 << "q4_1";
    QTest::newRow("Q5_0") << DType::Q5_0 << "q5_0";
    QTest::newRow("Q5_1") << DType::Q5_1 << "q5_1";
    QTest::newRow("Q2_K") << DType::Q2_K << "q2_k";
    QTest::newRow("Q3_K") << DType::Q3_K << "q3_k";
    QTest::newRow("Q5_K") << DType::Q5_K << "q5_k";
    QTest::newRow("IQ4_NL") << DType::IQ4_NL << "iq4_nl";
    QTest::newRow("IQ4_XS") << DType::IQ4_XS << "iq4_xs";
}

const DType all_quant_types[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,  DType::Q5_1,   DType::Q2_K,
                                 DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

int64_t block_size(DType t) { return dtype_traits(uint32_t(t))->block_elems; }

// Random rows of the kinds of data weights hold.
std::vector<float> random_row(std::mt19937 &rng, int kind, int64_t n)
{
    std::vector<float> x(static_cast<size_t>(n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::student_t_distribution<float> heavy(3.0f);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
        switch (kind) {
        case 0: x[size_t(i)] = 0.02f * normal(rng); break;  // weight-like
        case 1: x[size_t(i)] = heavy(rng); break;           // heavy tails, outliers
        case 2: x[size_t(i)] = uni(rng) + 0.5f; break;      // mostly positive, offset
        default: x[size_t(i)] = normal(rng) * std::pow(10.0f, float(i / 32 % 4) - 2); break; // scales per 32
        }
    }
    return x;
}

struct OwnedQuantWeight {
    std::vector<uint8_t> storage;
    WeightView view;
    std::vector<float> values; // dequantized, row-major [n_out][n_in]
};

// A quantized [n_in, n_out] weight, placed at an odd address (mapped files promise nothing).
OwnedQuantWeight make_quant_weight(DType type, int64_t n_in, int64_t n_out, uint32_t seed)
{
    std::mt19937 rng(seed);
    OwnedQuantWeight w;
    const size_t rb = row_bytes(type, n_in);
    w.storage.resize(rb * size_t(n_out) + 1);
    uint8_t *base = w.storage.data() + 1;
    w.values.resize(size_t(n_in * n_out));
    for (int64_t o = 0; o < n_out; ++o) {
        std::vector<float> x = random_row(rng, int(o % 4), n_in);
        quantize_row(type, x.data(), base + size_t(o) * rb, n_in);
        dequantize_row(type, base + size_t(o) * rb, w.values.data() + o * n_in, n_in);
    }
    w.view.name = "test.weight";
    w.view.type = type;
    w.view.shape = {n_in, n_out};
    w.view.data = base;
    w.view.nbytes = rb * size_t(n_out);
    return w;
}

// The activations' 8-bit quantization as qdot.h documents it (llama.cpp's Q8_0 rule):
// per block of `span` values (32; 256 for llama.cpp's Q8_K span), d = max|x| / 127 and
// q = round-to-nearest-even(x * (127 / max|x|)). Blocks never straddle tokens: every row length
// here is a multiple of the span.
std::vector<float> quantize_acts_reference(const std::vector<float> &x, int span = 32)
{
    std::vector<float> out(x.size());
    for (size_t b = 0; b < x.size(); b += size_t(span)) {
        float amax = 0;
        for (size_t j = b; j < b + size_t(span); ++j)
            amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        for (size_t j = b; j < b + size_t(span); ++j)
            out[j] = d * std::nearbyint(x[j] * id);
    }
    return out;
}

double block_absmax(const std::vector<float> &x, size_t i, int span = 32)
{
    const size_t b = i / size_t(span) * size_t(span);
    double m = 0;
    for (size_t j = b; j < b + size_t(span); ++j)
        m = std::max(m, double(std::fabs(x[j])));
    return m;
}

// The span matmul quantizes the activations of a product with `type` over (qdot.h): 256 for
// the K types under the VNNI kernels unless the option is off, else 32. Stated here from the
// documentation, not asked of the code under test.
int expected_span(DType type)
{
    const bool k = type == DType::Q2_K || type == DType::Q3_K || type == DType::Q4_K || type == DType::Q5_K ||
                   type == DType::Q6_K;
    return k && qkernel() == QKernel::Vnni && cpu_options().k_act_span ? 256 : 32;
}

// The double-precision references for one (row o, token t) pair of a product with quantized
// weights `w` ([n_out, n_in] dequantized values) and activations x (xq: x after the documented
// 8-bit rounding): the exact product, the product with the rounded activations, sum |w xq| and
// the activations' rounding bound sum |w| d / 2.
struct PairReference {
    double ref = 0, ref_q = 0, mag = 0, bound = 0;
};
PairReference pair_reference(const std::vector<float> &w, const std::vector<float> &x, const std::vector<float> &xq,
                             int n_in, int o, int t, int span = 32)
{
    PairReference r;
    for (int i = 0; i < n_in; ++i) {
        const size_t xi = size_t(t * n_in + i);
        const double wv = w[size_t(o * n_in + i)];
        r.ref += wv * x[xi];
        r.ref_q += wv * xq[xi];
        r.mag += std::fabs(wv * xq[xi]);
        r.bound += std::fabs(wv) * block_absmax(x, xi, span) / 127.0 / 2.0;
    }
    return r;
}

// The products of packed matrix pk (the rows of w, `groups` groups of 16) with activations x
// (n_tokens tokens) quantized over `span` values, through every packed kernel this CPU runs
// (`kernels`, best first), against the double references and each other (packed_matrices).
void check_packed_products(DType type, int n_in, int n_out, const OwnedQuantWeight &w, const uint8_t *pk,
                       int64_t groups, const std::vector<QKernel> &kernels, const std::vector<float> &x,
                       int n_tokens, int span)
{
    const std::vector<float> xq = quantize_acts_reference(x, span);
    QuantizedActs acts;
    quantize_acts(nullptr, x.data(), n_tokens, n_in, acts, span);

    std::vector<float> y4, first;
    std::vector<std::vector<float>> of_kernel; // each kernel's products, kernels' order
    for (QKernel k : kernels) {
        // Tiles of 4 tokens (4 + 4 + 3), of 2 (2 + 2 + 2 + 2 + 2 + 1) and of 1 token: the same
        // bits.
        y4.assign(size_t(n_tokens * n_out), NAN);
        std::vector<float> y1(size_t(n_tokens * n_out), NAN), y2(size_t(n_tokens * n_out), NAN);
        for (int64_t g = 0; g < groups; ++g) {
            for (int t = 0; t < n_tokens; t += 4)
                packed_tile_with(k, type, pk, n_in, g, acts, t, std::min(4, n_tokens - t),
                                 y4.data() + t * n_out + g * 16, n_out);
            for (int t = 0; t < n_tokens; t += 2)
                packed_tile_with(k, type, pk, n_in, g, acts, t, std::min(2, n_tokens - t),
                                 y2.data() + t * n_out + g * 16, n_out);
            for (int t = 0; t < n_tokens; ++t)
                packed_tile_with(k, type, pk, n_in, g, acts, t, 1, y1.data() + t * n_out + g * 16, n_out);
        }
        for (size_t i = 0; i < y1.size(); ++i)
            QVERIFY2(bits_of(y2[i]) == bits_of(y1[i]),
                     qPrintable(QString("%1 tiles of 2, %2: %3 vs %4").arg(qkernel_name(k)).arg(i)
                                    .arg(y2[i], 0, 'g', 9).arg(y1[i], 0, 'g', 9)));
        // One token over every run of consecutive groups (the AVX2 Q8_0 kernel reads up to
        // four side by side, then three, two or one): the bits of one group at a time.
        for (int64_t g0 = 0; g0 < groups; ++g0)
            for (int64_t ng = 1; g0 + ng <= groups; ++ng) {
                std::vector<float> yg(size_t(16 * ng), NAN);
                for (int t = 0; t < n_tokens; ++t) {
                    packed_tiles_with(k, type, pk, n_in, g0, ng, acts, t, 1, yg.data(), n_out);
                    for (int64_t r = 0; r < 16 * ng; ++r)
                        QVERIFY2(bits_of(yg[size_t(r)]) == bits_of(y1[size_t(t * n_out + g0 * 16 + r)]),
                                 qPrintable(QString("%1, groups %2 + %3, t %4 row %5: %6 vs %7").arg(qkernel_name(k))
                                                .arg(g0).arg(ng).arg(t).arg(r).arg(yg[size_t(r)], 0, 'g', 9)
                                                .arg(y1[size_t(t * n_out + g0 * 16 + r)], 0, 'g', 9)));
                }
            }
        // One token without the requests for the bytes ahead (LONGSCOPE_PREFETCH=0): the
        // same bits.
        {
            std::vector<float> y1n(size_t(n_tokens * n_out), NAN);
            {
                CpuOptions o = cpu_options();
                o.decode_prefetch = false;
                CpuOptionsScope scope(o);
                QVERIFY(!kernel_table().decode_prefetch);
                for (int64_t g = 0; g < groups; ++g)
                    for (int t = 0; t < n_tokens; ++t)
                        packed_tile_with(k, type, pk, n_in, g, acts, t, 1, y1n.data() + t * n_out + g * 16,
                                         n_out);
            }
            QVERIFY(kernel_table().decode_prefetch);
            for (size_t i = 0; i < y1.size(); ++i)
                QVERIFY2(bits_of(y1n[i]) == bits_of(y1[i]), qPrintable(QString("%1 without prefetch, %2: %3 vs %4")
                                                                           .arg(qkernel_name(k)).arg(i)
                                                                           .arg(y1n[i], 0, 'g', 9).arg(y1[i], 0, 'g', 9)));
        }
        double worst = 0;
        for (int t = 0; t < n_tokens; ++t)
            for (int o = 0; o < n_out; ++o) {
                const size_t i = size_t(t * n_out + o);
                QVERIFY2(bits_of(y4[i]) == bits_of(y1[i]),
                         qPrintable(QString("%1 t %2 o %3: %4 vs %5").arg(qkernel_name(k)).arg(t).arg(o)
                                        .arg(y4[i], 0, 'g', 9).arg(y1[i], 0, 'g', 9)));
                // The VNNI and AVX2 kernels: the same float operations on exact sums (with
                // the span of 256 the VNNI K kernels apply the sub-block scales to
                // integer sums, the AVX2 ones per block: float rounding apart).
                if (!first.empty() && span == 32)
                    QVERIFY2(bits_of(y4[i]) == bits_of(first[i]),
                             qPrintable(QString("%1 vs %2, t %3 o %4: %5 vs %6").arg(qkernel_name(k))
                                            .arg(qkernel_name(kernels[0])).arg(t).arg(o).arg(y4[i], 0, 'g', 9)
                                            .arg(first[i], 0, 'g', 9)));
                const auto [ref, ref_q, mag, bound] = pair_reference(w.values, x, xq, n_in, o, t, span);
                const QString where = QString("%1 t %2 o %3: %4 vs %5 / %6").arg(qkernel_name(k)).arg(t).arg(o)
                                          .arg(y4[i], 0, 'g', 9).arg(ref_q, 0, 'g', 9).arg(ref, 0, 'g', 9);
                QVERIFY2(std::fabs(y4[i] - ref_q) <= 1e-5 * mag + 1e-30, qPrintable(where));
                QVERIFY2(std::fabs(y4[i] - ref) <= bound + 1e-5 * mag, qPrintable(where));
                worst = std::max(worst, std::fabs(y4[i] - ref_q) / mag);
            }
        qInfo("packed %s kernel (%s): worst |error| / sum|w x| against the documented rounding: %.2e",
              std::string(dtype_name(type)).c_str(), qkernel_name(k), worst);
        if (first.empty())
            first = y4;
        of_kernel.push_back(y4);
    }
    // A NaN or an infinity in a token's activations gives NaN for that token through the
    // packed kernels too (qdot.h's rule); the other tokens of the tile keep their bits.
    std::vector<float> xp = x;
    xp[size_t(2 * n_in + 5)] = std::numeric_limits<float>::quiet_NaN();
    xp[size_t(5 * n_in + n_in - 1)] = std::numeric_limits<float>::infinity();
    QuantizedActs poisoned;
    quantize_acts(nullptr, xp.data(), n_tokens, n_in, poisoned, span);
    for (size_t ki = 0; ki < kernels.size(); ++ki) {
        const QKernel k = kernels[ki];
        std::vector<float> yp(size_t(n_tokens * n_out), 0.0f);
        for (int64_t g = 0; g < groups; ++g)
            for (int t = 0; t < n_tokens; t += 4)
                packed_tile_with(k, type, pk, n_in, g, poisoned, t, std::min(4, n_tokens - t),
                                 yp.data() + t * n_out + g * 16, n_out);
        for (int t = 0; t < n_tokens; ++t)
            for (int o = 0; o < n_out; ++o) {
                const size_t i = size_t(t * n_out + o);
                if (t == 2 || t == 5)
                    QVERIFY2(std::isnan(yp[i]), qPrintable(QString("%1 t %2 o %3: %4").arg(qkernel_name(k)).arg(t)
                                                               .arg(o).arg(yp[i])));
                else
                    QVERIFY(bits_of(yp[i]) == bits_of(of_kernel[ki][i]));
            }
    }
    // The VNNI kernels over the tiles of four tokens pack_acts copies, one group at a time
    // and two or three side by side (fewer for the last ones), one tile at a time and two
    // together: the bits of the tiles above, NaN for the poisoned tokens.
    if (packed_kernel_available(QKernel::Vnni))
        for (const QuantizedActs *from : {&acts, &poisoned})
            for (int side_by_side : {1, 2, 3})
                for (int tiles_at_once : {1, 2}) {
                    PackedActs pa;
                    pack_acts(nullptr, *from, pa);
                    QCOMPARE(pa.n_tiles, int64_t(n_tokens / packed_act_tile));
                    std::vector<float> yt(size_t(n_tokens * n_out), 0.0f);
                    for (int64_t g = 0; g < groups; g += side_by_side)
                        for (int64_t tile = 0; tile < pa.n_tiles; tile += tiles_at_once)
                            packed_tile_acts(type, pk, n_in, g, int(std::min<int64_t>(side_by_side, groups - g)), pa,
                                             tile, yt.data() + tile * packed_act_tile * n_out + g * 16, n_out,
                                             int(std::min<int64_t>(tiles_at_once, pa.n_tiles - tile)));
                    for (int t = 0; t < pa.n_tiles * packed_act_tile; ++t)
                        for (int o = 0; o < n_out; ++o) {
                            const size_t i = size_t(t * n_out + o);
                            const QString where = QString("tiled (%1 groups, %2 tiles) t %3 o %4: %5 vs %6")
                                                      .arg(side_by_side).arg(tiles_at_once).arg(t).arg(o)
                                                      .arg(yt[i], 0, 'g', 9).arg(first[i], 0, 'g', 9);
                            if (from == &poisoned && (t == 2 || t == 5))
                                QVERIFY2(std::isnan(yt[i]), qPrintable(where));
                            else
                                QVERIFY2(bits_of(yt[i]) == bits_of(first[i]), qPrintable(where));
                        }
                }

    y4 = first;
    if (!packed_kernel_available(qkernel()))
        return; // matmul never packs here
    if (span == 256 && qkernel() != QKernel::Vnni)
        return; // matmul quantizes per 256 values only under the VNNI kernels (expected_span)
    // matmul picks the span by the option (expected_span): ask for this one.
    CpuOptions options = cpu_options();
    options.k_act_span = span == 256;
    CpuOptionsScope scope(options);
    QCOMPARE(expected_span(type), span);

    // Through matmul: a pool of 3 splits the rows at places that are not multiples of 16;
    // every group must be computed once (NaN marks a missing one).
    WeightView pv = w.view;
    pv.cpu_packed = pk;
    ThreadPool pool(3);
    for (int nt : {1, 2, 5, 7, 11}) { // 11: two tiles at once in the K types' kernels
        std::vector<float> yp(size_t(nt * n_out), NAN), yr(size_t(nt * n_out), NAN);
        matmul_with(pool, pv, x.data(), yp.data(), nt, QuantMatmul::Integer);
        matmul_with(pool, w.view, x.data(), yr.data(), nt, QuantMatmul::Integer);
        for (int t = 0; t < nt; ++t)
            for (int o = 0; o < n_out; ++o) {
                const size_t k = size_t(t * n_out + o);
                QVERIFY2(bits_of(yp[k]) == bits_of(y4[k]), qPrintable(QString("matmul %1 tokens, t %2 o %3").arg(nt).arg(t).arg(o)));
                double mag = 0;
                for (int i = 0; i < n_in; ++i)
                    mag += std::fabs(double(w.values[size_t(o * n_in + i)]) * xq[size_t(t * n_in + i)]);
                QVERIFY2(std::fabs(double(yp[k]) - yr[k]) <= 2e-5 * mag,
                         qPrintable(QString("packed vs rows, t %1 o %2: %3 vs %4").arg(t).arg(o).arg(yp[k]).arg(yr[k])));
            }
    }
}

std::string greedy_text(const Model &m, const std::string &prompt, int n)
{
    Session s(m, {0, 2});
    GenerateRequest req;
    req.prompt = m.tokenizer().encode(prompt, true);
    req.max_new_tokens = n;
    req.sampling.temperature = 0;
    req.stop_at_eos = false;
    return generate(s, req).text;
}

std::map<std::string, DType> tensor_types(const std::string &path)
{
    std::map<std::string, DType> out;
    auto g = GgufFile::open(path);
    for (const GgufTensorInfo &t : g->tensors())
        out[t.name] = t.type;
    return out;
}

// A small random model shape whose rows divide into 256-value blocks (so the K-quants apply).
RandomModelSpec small_k_quant_spec(int n_layer, uint64_t seed, int n_ctx)
{
    RandomModelSpec spec;
    spec.n_embd = 256;
    spec.n_layer = n_layer;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 512;
    spec.n_vocab = 512;
    spec.n_ctx = n_ctx;
    spec.type = DType::F16;
    spec.seed = seed;
    return spec;
}

// That model in F16 at f16_path and quantized to the Q4_K_M mix at q4k_path.
void write_small_k_quant_models(const std::string &f16_path, const std::string &q4k_path, int n_layer, uint64_t seed)
{
    write_random_model_file(f16_path, small_k_quant_spec(n_layer, seed, 128));
    quantize_model_file(f16_path, q4k_path, DType::Q4_K);
}

// The logits after a five-token prompt, on two threads.
std::vector<float> prompt_logits(const Model &m)
{
    Session s(m, {0, 2});
    auto l = s.eval(std::vector<int32_t>{1, 300, 301, 302, 303});
    return std::vector<float>(l.begin(), l.end());
}

} // namespace

class TestQuant : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;

    std::string tmp(const std::string &name) const { return m_tmp.filePath(QString::fromStdString(name)).toStdString(); }

private slots:
    void initTestCase() { QVERIFY(m_tmp.isValid()); }

    void layout_sizes()
    {
        // ggml's block sizes (ggml-common.h): 34, 18, 20, 22, 24, 18 bytes per 32 values; 84, 110,
        // 144, 176, 210, 136 per 256.
        QCOMPARE(row_bytes(DType::Q8_0, 64), size_t(68));
        QCOMPARE(row_bytes(DType::Q4_0, 64), size_t(36));
        QCOMPARE(row_bytes(DType::Q4_1, 64), size_t(40));
        QCOMPARE(row_bytes(DType::Q5_0, 64), size_t(44));
        QCOMPARE(row_bytes(DType::Q5_1, 64), size_t(48));
        QCOMPARE(row_bytes(DType::IQ4_NL, 64), size_t(36));
        QCOMPARE(row_bytes(DType::Q2_K, 512), size_t(168));
        QCOMPARE(row_bytes(DType::Q3_K, 512), size_t(220));
        QCOMPARE(row_bytes(DType::Q4_K, 512), size_t(288));
        QCOMPARE(row_bytes(DType::Q5_K, 512), size_t(352));
        QCOMPARE(row_bytes(DType::Q6_K, 512), size_t(420));
        QCOMPARE(row_bytes(DType::IQ4_XS, 512), size_t(272));
        QCOMPARE(row_bytes(DType::F16, 10), size_t(20));
        // The GGUF type ids (ggml_type) and names.
        QCOMPARE(dtype_name(DType(20)), std::string_view("IQ4_NL"));
        QCOMPARE(dtype_name(DType(23)), std::string_view("IQ4_XS"));
        QCOMPARE(dtype_name(DType(13)), std::string_view("Q5_K"));
        for (DType t : all_quant_types) {
            QVERIFY(dtype_supported(t));
            QVERIFY(is_quantized(t));
            QVERIFY(has_integer_dot(t));
        }
        QVERIFY(!dtype_supported(DType::Q8_K));
    }

    // Bit-exact against gguf.quants.dequantize (the fixtures' expected values).
    void dequantize_matches_fixtures_data() { add_type_rows(); }
    void dequantize_matches_fixtures()
    {
        QFETCH(DType, type);
        QFETCH(QString, file);
        const std::string base = fixture_dir + file.toStdString();
        const std::vector<uint8_t> blocks = read_bytes(base + ".blocks.bin");
        const std::vector<float> expect = read_floats(base + ".dequant.f32");
        QVERIFY2(!blocks.empty() && !expect.empty(), "fixture files missing");
        const int64_t n = int64_t(expect.size());
        QCOMPARE(row_bytes(type, n), blocks.size());
        // At an odd address too: the decoder must not assume alignment.
        std::vector<uint8_t> shifted(blocks.size() + 1);
        std::memcpy(shifted.data() + 1, blocks.data(), blocks.size());
        // Every kernel this CPU runs (the vector ones and the portable one).
        std::vector<VectorLevel> levels{VectorLevel::Portable};
        if (cpu_features().avx2)
            levels.push_back(VectorLevel::Avx2);
        if (cpu_features().avx512)
            levels.push_back(VectorLevel::Avx512);
        for (VectorLevel level : levels)
            for (const uint8_t *src : {blocks.data(), static_cast<const uint8_t *>(shifted.data() + 1)}) {
                std::vector<float> got(static_cast<size_t>(n));
                dequantize_row_with(level, type, src, got.data(), n);
                for (int64_t i = 0; i < n; ++i)
                    if (bits_of(got[size_t(i)]) != bits_of(expect[size_t(i)]))
                        QFAIL(qPrintable(QString("%1 kernel, element %2 (block %3): got %4, expected %5")
                                             .arg(vector_level_name(dequantize_level(type, level))).arg(i)
                                             .arg(i / block_size(type)).arg(double(got[size_t(i)]), 0, 'g', 9)
                                             .arg(double(expect[size_t(i)]), 0, 'g', 9)));
            }
        // weight_row_f32 (what matmul reads) gives the same rows: the fixture as [qk, n/qk]
        // for the 32-blocks, [256, n/256] for the K types.
        WeightView w;
        w.type = type;
        w.shape = {block_size(type), n / block_size(type)};
        w.data = blocks.data();
        w.nbytes = blocks.size();
        std::vector<float> row(static_cast<size_t>(block_size(type)));
        for (int64_t r = 0; r < w.shape[1]; ++r) {
            weight_row_f32(w, r, row.data());
            QVERIFY(std::memcmp(row.data(), expect.data() + r * block_size(type), row.size() * 4) == 0);
        }
    }

    // Our quantizers against ggml's quantize_row_*_ref on the same inputs.
    void quantize_matches_ggml_reference_data() { add_type_rows(); }
    void quantize_matches_ggml_reference()
    {
        QFETCH(DType, type);
        QFETCH(QString, file);
        const std::string base = fixture_dir + file.toStdString();
        const std::vector<float> input = read_floats(base + ".input.f32");
        const std::vector<uint8_t> expect = read_bytes(base + ".quant.bin");
        QVERIFY(!input.empty());
        QCOMPARE(row_bytes(type, int64_t(input.size())), expect.size());
        std::vector<uint8_t> got(expect.size());
        quantize_row(type, input.data(), got.data(), int64_t(input.size()));
        const size_t bb = dtype_traits(uint32_t(type))->block_bytes;
        for (size_t b = 0; b < expect.size() / bb; ++b)
            QVERIFY2(std::memcmp(got.data() + b * bb, expect.data() + b * bb, bb) == 0,
                     qPrintable(QString("block %1 differs from ggml's reference quantizer").arg(b)));
    }

    // Round trip error bounds, per block, on random rows of four kinds (weight-like, heavy
    // tails, offset, magnitudes changing every 32). With amax the block's largest magnitude:
    //   Q8_0: |err| <= 0.57 * amax/127  (half a step, plus d rounded to f16 times |q| <= 127)
    //   Q4_0: |err| <= 1.01 * amax/8    (one step: the far end opposite the extreme clamps
    //                                    at +7; elsewhere half a step)
    //   Q4_K: |err| <= (max(x, 0) - min(x, 0))/15 over each 256-block (one 4-bit step of the
    //                                    block's range: sub-block scales and mins are 6-bit
    //                                    fractions of the block's largest)
    //   Q6_K: |err| <= amax/31 over each 256-block
    // (measured worst cases: 0.94, 0.99, 0.72 and 0.52 of these), and the relative RMS error of
    // the weight-like rows at most Q8_0 0.007, Q4_0 0.10, Q4_K 0.085, Q6_K 0.022 (measured
    // 0.0055, 0.087, 0.072, 0.018). The types added later, with "range" max(x, 0) - min(x, 0)
    // over the block (32 or 256 values):
    //   Q4_1:   range * 0.55/15  (half a step of (max - min)/15, plus d and m rounded to f16)
    //   Q5_1:   range * 0.55/31
    //   Q5_0:   amax * 1.01/16   (one step, as Q4_0)
    //   Q5_K:   range / 31       (as Q4_K, one 5-bit step)
    //   Q2_K:   range / 3        (one 2-bit step: the sub-block scales and mins are 4-bit)
    //   Q3_K:   amax / 4         (one step of the 3-bit codes [-4, 3])
    //   IQ4_NL, IQ4_XS: amax / 8 (a 4-bit step as Q4_0's; the table's widest gap is 24/127 of
    //                             its end, and the fitted scale may clip the largest value)
    // (measured 0.92, 0.94, 0.99, 0.78, 0.71, 0.70, 0.87, 0.75 of these), relative RMS of the
    // weight-like rows at most Q4_1 0.10, Q5_0 0.055, Q5_1 0.05, Q5_K 0.045, Q2_K 0.36, Q3_K 0.19,
    // IQ4_NL and IQ4_XS 0.095 (measured 0.079, 0.044, 0.039, 0.037, 0.30, 0.15, 0.076, 0.077).
    void round_trip_error_bounds_data()
    {
        QTest::addColumn<DType>("type");
        QTest::addColumn<double>("max_err_factor"); // of the block's measure below
        QTest::addColumn<double>("max_rel_rms");
        QTest::newRow("Q8_0") << DType::Q8_0 << 0.57 / 127 << 0.007;
        QTest::newRow("Q4_0") << DType::Q4_0 << 1.01 / 8 << 0.10;
        QTest::newRow("Q4_K") << DType::Q4_K << 1.0 / 15 << 0.085;
        QTest::newRow("Q6_K") << DType::Q6_K << 1.0 / 31 << 0.022;
        QTest::newRow("Q4_1") << DType::Q4_1 << 0.55 / 15 << 0.10;
        QTest::newRow("Q5_1") << DType::Q5_1 << 0.55 / 31 << 0.05;
        QTest::newRow("Q5_0") << DType::Q5_0 << 1.01 / 16 << 0.055;
        QTest::newRow("Q5_K") << DType::Q5_K << 1.0 / 31 << 0.045;
        QTest::newRow("Q2_K") << DType::Q2_K << 1.0 / 3 << 0.36;
        QTest::newRow("Q3_K") << DType::Q3_K << 1.0 / 4 << 0.19;
        QTest::newRow("IQ4_NL") << DType::IQ4_NL << 1.0 / 8 << 0.095;
        QTest::newRow("IQ4_XS") << DType::IQ4_XS << 1.0 / 8 << 0.095;
    }
    void round_trip_error_bounds()
    {
        QFETCH(DType, type);
        QFETCH(double, max_err_factor);
        QFETCH(double, max_rel_rms);
        std::mt19937 rng(7);
        const int64_t n = 4096;
        const int64_t qk = block_size(type);
        std::vector<uint8_t> q(row_bytes(type, n));
        std::vector<float> y(static_cast<size_t>(n));
        double worst_ratio = 0, worst_rel = 0;
        for (int rep = 0; rep < 8; ++rep) {
            for (int kind = 0; kind < 4; ++kind) {
                std::vector<float> x = random_row(rng, kind, n);
                quantize_row(type, x.data(), q.data(), n);
                dequantize_row(type, q.data(), y.data(), n);
                double se = 0, sx = 0;
                for (int64_t b = 0; b < n / qk; ++b) {
                    double amax = 0, mn = 0, mx = 0, err = 0;
                    for (int64_t i = b * qk; i < (b + 1) * qk; ++i) {
                        const double v = x[size_t(i)];
                        amax = std::max(amax, std::fabs(v));
                        mn = std::min(mn, v);
                        mx = std::max(mx, v);
                        err = std::max(err, std::fabs(v - y[size_t(i)]));
                        se += (v - y[size_t(i)]) * (v - y[size_t(i)]);
                        sx += v * v;
                    }
                    const bool has_min = type == DType::Q4_K || type == DType::Q5_K || type == DType::Q2_K ||
                                         type == DType::Q4_1 || type == DType::Q5_1;
                    const double measure = has_min ? mx - mn : amax;
                    const double bound = max_err_factor * measure;
                    worst_ratio = std::max(worst_ratio, err / std::max(bound, 1e-30));
                    if (err > bound)
                        QFAIL(qPrintable(QString("kind %1 block %2: max error %3 above the bound %4")
                                             .arg(kind).arg(b).arg(err).arg(bound)));
                }
                if (kind == 0) {
                    const double rel = std::sqrt(se / sx);
                    worst_rel = std::max(worst_rel, rel);
                    QVERIFY2(rel <= max_rel_rms, qPrintable(QString("relative RMS error %1").arg(rel)));
                }
            }
        }
        qInfo("worst block error / bound: %.3f, relative RMS error of weight-like rows: %.4f",
              worst_ratio, worst_rel);
        // Zeros stay exactly zero.
        std::vector<float> zeros(size_t(n), 0.0f);
        quantize_row(type, zeros.data(), q.data(), n);
        dequantize_row(type, q.data(), y.data(), n);
        for (float v : y)
            QCOMPARE(v, 0.0f);
    }

    // matmul() on quantized weights: odd n_out and odd block counts (96 = 3 blocks, 160 = 5,
    // 768 = 3 super-blocks), several token counts. matmul quantizes the activations to 8 bits
    // per block of 32 (d = max|x| / 127, q = round(x / d), as documented in qdot.h) and sums
    // integer products. Two references in double over the dequantized weights:
    //  - with the activations as given: the error is bounded by sum_i |w_i| * d(i) / 2 (the
    //    activations' rounding) plus float accumulation;
    //  - with the activations quantized by the documented rule, written here independently:
    //    then only float accumulation differs.
    void matmul_on_quantized_weights_data()
    {
        QTest::addColumn<DType>("type");
        QTest::addColumn<int>("n_in");
        QTest::addColumn<int>("n_out");
        QTest::newRow("Q8_0 96x37") << DType::Q8_0 << 96 << 37;
        QTest::newRow("Q4_0 160x33") << DType::Q4_0 << 160 << 33;
        QTest::newRow("Q4_K 512x37") << DType::Q4_K << 512 << 37;
        QTest::newRow("Q6_K 768x29") << DType::Q6_K << 768 << 29;
        QTest::newRow("Q8_0 1024x1") << DType::Q8_0 << 1024 << 1;
        QTest::newRow("Q4_0 2080x9") << DType::Q4_0 << 2080 << 9;
        QTest::newRow("Q4_1 160x33") << DType::Q4_1 << 160 << 33;
        QTest::newRow("Q5_0 96x37") << DType::Q5_0 << 96 << 37;
        QTest::newRow("Q5_1 224x17") << DType::Q5_1 << 224 << 17;
        QTest::newRow("IQ4_NL 160x9") << DType::IQ4_NL << 160 << 9;
        QTest::newRow("Q2_K 768x29") << DType::Q2_K << 768 << 29;
        QTest::newRow("Q3_K 512x37") << DType::Q3_K << 512 << 37;
        QTest::newRow("Q5_K 768x29") << DType::Q5_K << 768 << 29;
        QTest::newRow("IQ4_XS 512x21") << DType::IQ4_XS << 512 << 21;
    }
    void matmul_on_quantized_weights()
    {
        QFETCH(DType, type);
        QFETCH(int, n_in);
        QFETCH(int, n_out);
        OwnedQuantWeight w = make_quant_weight(type, n_in, n_out, 11);
        ThreadPool pool(3);
        std::mt19937 rng(5);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        // With the K types' span of 256 (the default) and with it off (LONGSCOPE_ACT_SPAN=32).
        for (bool k_span : {true, false}) {
            CpuOptions options = cpu_options();
            options.k_act_span = k_span;
            CpuOptionsScope scope(options);
            const int span = expected_span(type);
            double worst_ratio = 0;
            for (int n_tokens : {1, 3, 5, 8, 21}) {
                std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
                for (float &v : x)
                    v = dist(rng);
                const std::vector<float> xq = quantize_acts_reference(x, span);
                std::vector<float> y(size_t(n_tokens * n_out), NAN);
                matmul_with(pool, w.view, x.data(), y.data(), n_tokens, QuantMatmul::Integer);
                for (int t = 0; t < n_tokens; ++t)
                    for (int o = 0; o < n_out; ++o) {
                        const auto [ref, ref_q, mag, bound] = pair_reference(w.values, x, xq, n_in, o, t, span);
                        const double got = y[size_t(t * n_out + o)];
                        const QString where = QString("span %1, tokens %2 t %3 o %4: %5 vs %6 / %7")
                                                  .arg(span).arg(n_tokens).arg(t).arg(o).arg(got, 0, 'g', 9)
                                                  .arg(ref_q, 0, 'g', 9).arg(ref, 0, 'g', 9);
                        QVERIFY2(std::fabs(got - ref_q) <= 1e-5 * mag + 1e-30, qPrintable(where));
                        QVERIFY2(std::fabs(got - ref) <= bound + 1e-5 * mag, qPrintable(where));
                        worst_ratio = std::max(worst_ratio, std::fabs(got - ref) / bound);
                    }
            }
            qInfo("span %d: worst |error| / activation-rounding bound: %.3f", span, worst_ratio);
        }
    }

    // The BF16 path (many tokens, CPUs with AVX-512 BF16): weights dequantized then rounded to
    // BF16, activations rounded to BF16, products summed in float. Each rounding is to nearest
    // with 8 significant bits (unit roundoff 2^-8), so |w^ x^ - w x| <= |w x| (2^-7 + 2^-16);
    // float accumulation adds a few ulps of the magnitude sum. Where the CPU lacks BF16 dot
    // products the path falls back to the integer one, and the integer bound is checked.
    void matmul_bf16_path_data() { matmul_on_quantized_weights_data(); }
    void matmul_bf16_path()
    {
        QFETCH(DType, type);
        QFETCH(int, n_in);
        QFETCH(int, n_out);
        OwnedQuantWeight w = make_quant_weight(type, n_in, n_out, 13);
        ThreadPool pool(3);
        std::mt19937 rng(7);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        const bool bf16 = has_bf16_dot();
        for (int n_tokens : {1, 6, 16, 37}) {
            std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
            for (float &v : x)
                v = dist(rng);
            std::vector<float> y(size_t(n_tokens * n_out), NAN);
            matmul_with(pool, w.view, x.data(), y.data(), n_tokens, QuantMatmul::Bf16);
            double worst = 0;
            for (int t = 0; t < n_tokens; ++t)
                for (int o = 0; o < n_out; ++o) {
                    double ref = 0, mag = 0, int_bound = 0;
                    for (int i = 0; i < n_in; ++i) {
                        const size_t xi = size_t(t * n_in + i);
                        const double wv = w.values[size_t(o * n_in + i)];
                        ref += wv * x[xi];
                        mag += std::fabs(wv * x[xi]);
                        int_bound += std::fabs(wv) * block_absmax(x, xi, expected_span(type)) / 127.0 / 2.0;
                    }
                    const double got = y[size_t(t * n_out + o)];
                    const double bound = bf16 ? mag * (1.0 / 128 + 1.0 / 65536) + 1e-5 * mag : int_bound + 2e-5 * mag;
                    QVERIFY2(std::fabs(got - ref) <= bound,
                             qPrintable(QString("tokens %1 t %2 o %3: %4 vs %5 (bound %6)").arg(n_tokens).arg(t).arg(o)
                                            .arg(got, 0, 'g', 9).arg(ref, 0, 'g', 9).arg(bound)));
                    worst = std::max(worst, std::fabs(got - ref) / mag);
                }
            qInfo("%s, %d tokens: worst |error| / sum|w x| = %.2e", bf16 ? "BF16 dot products" : "no BF16 on this CPU: integer path",
                  n_tokens, worst);
        }
    }

    // Every integer kernel this CPU runs (VNNI, AVX2, portable) on every tile shape: the same
    // values within float rounding, and within one kernel the same bits whatever the tile.
    void integer_kernels_agree_data() { add_type_rows(); }
    void integer_kernels_agree()
    {
        QFETCH(DType, type);
        const int n_in = block_size(type) == 256 ? 768 : 224; // 3 and 7 blocks
        const int n_out = 4, n_tokens = 4;
        OwnedQuantWeight w = make_quant_weight(type, n_in, n_out, 23);
        std::mt19937 rng(9);
        std::normal_distribution<float> dist(0.0f, 2.0f);
        std::vector<float> x(size_t(n_tokens * n_in));
        for (float &v : x)
            v = dist(rng);
        QuantizedActs acts;
        quantize_acts(nullptr, x.data(), n_tokens, n_in, acts);
        const size_t rb = row_bytes(type, n_in);
        const void *rows[4];
        for (int r = 0; r < 4; ++r)
            rows[r] = static_cast<const uint8_t *>(w.view.data) + size_t(r) * rb;
        QKernel kernels[3];
        const int nk = available_qkernels(kernels, 3);
        QVERIFY(nk >= 1 && kernels[nk - 1] == QKernel::Portable);
        std::vector<float> first(size_t(n_tokens * n_out));
        for (int k = 0; k < nk; ++k) {
            // Every tile shape R x NT covering the 4 x 4 pairs.
            std::vector<float> ref(size_t(n_tokens * n_out), NAN);
            qgemm_tile_with(kernels[k], type, rows, 4, acts, 0, 4, ref.data(), n_out);
            for (int R = 1; R <= 4; ++R)
                for (int NT = 1; NT <= 4; ++NT) {
                    std::vector<float> y(size_t(n_tokens * n_out), NAN);
                    for (int r = 0; r < 4; r += R)
                        for (int t = 0; t < 4; t += NT)
                            qgemm_tile_with(kernels[k], type, rows + r, std::min(R, 4 - r), acts, t,
                                            std::min(NT, 4 - t), y.data() + t * n_out + r, n_out);
                    for (size_t i = 0; i < y.size(); ++i)
                        QVERIFY2(bits_of(y[i]) == bits_of(ref[i]),
                                 qPrintable(QString("%1 tile %2x%3 pair %4: %5 vs %6")
                                                .arg(qkernel_name(kernels[k])).arg(R).arg(NT).arg(i)
                                                .arg(y[i], 0, 'g', 9).arg(ref[i], 0, 'g', 9)));
                }
            if (k == 0) {
                first = ref;
                continue;
            }
            for (size_t i = 0; i < ref.size(); ++i) {
                const int t = int(i) / n_out, o = int(i) % n_out;
                double mag = 0;
                for (int j = 0; j < n_in; ++j)
                    mag += std::fabs(double(w.values[size_t(o * n_in + j)]) * x[size_t(t * n_in + j)]);
                QVERIFY2(std::fabs(double(ref[i]) - first[i]) <= 1e-5 * mag,
                         qPrintable(QString("%1 vs %2 pair %3: %4 vs %5").arg(qkernel_name(kernels[k]))
                                        .arg(qkernel_name(kernels[0])).arg(i).arg(ref[i], 0, 'g', 9)
                                        .arg(first[i], 0, 'g', 9)));
            }
        }
        qInfo("kernels compared: %d (best: %s)", nk, qkernel_name(kernels[0]));
    }

    // Prefill (many tokens in one product) against decode (one token at a time) for every type,
    // at every kernel level this CPU runs, forced through the kernel table (AVX-512 with VNNI
    // and BF16 where the CPU has them, AVX2, portable). The integer path over many tokens gives
    // decode's bits: each (row, token) pair is computed by the same operations whatever the tile.
    // The automatic path over many tokens (BF16 dot products over weights dequantized to BF16
    // where the level has them, else the integer path) stays within the sum of the two paths'
    // bounds around the exact product: BF16 |w x| (2^-7 + 2^-16) + 1e-5 |w x|, integer
    // sum |w| d / 2 + 1e-5 |w x|.
    void prefill_matches_decode_data() { add_type_rows(); }
    void prefill_matches_decode()
    {
        QFETCH(DType, type);
        const int n_in = block_size(type) == 256 ? 512 : 160, n_out = 21, n_tokens = 19;
        OwnedQuantWeight w = make_quant_weight(type, n_in, n_out, 41);
        std::mt19937 rng(43);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(size_t(n_tokens * n_in));
        for (float &v : x)
            v = dist(rng);
        ThreadPool pool(3);
        int levels = 0;
        for (SimdLevel level : {SimdLevel::Avx512, SimdLevel::Avx2, SimdLevel::Portable}) {
            CpuOptions options;
            options.kernels = level;
            CpuOptionsScope scope(options);
            if ((level == SimdLevel::Avx512 && kernel_table().level != VectorLevel::Avx512) ||
                (level == SimdLevel::Avx2 && kernel_table().level != VectorLevel::Avx2))
                continue; // a level this CPU does not have
            ++levels;
            std::vector<float> decode(size_t(n_tokens * n_out), NAN), integer(decode), prefill(decode);
            for (int t = 0; t < n_tokens; ++t)
                matmul(pool, w.view, x.data() + t * n_in, decode.data() + t * n_out, 1);
            matmul_with(pool, w.view, x.data(), integer.data(), n_tokens, QuantMatmul::Integer);
            matmul(pool, w.view, x.data(), prefill.data(), n_tokens);
            const bool bf16 = has_bf16_dot();
            double worst = 0;
            for (int t = 0; t < n_tokens; ++t)
                for (int o = 0; o < n_out; ++o) {
                    const size_t i = size_t(t * n_out + o);
                    QVERIFY2(bits_of(integer[i]) == bits_of(decode[i]),
                             qPrintable(QString("%1 t %2 o %3: integer prefill %4, decode %5")
                                            .arg(qkernel_name(qkernel())).arg(t).arg(o).arg(integer[i], 0, 'g', 9)
                                            .arg(decode[i], 0, 'g', 9)));
                    double mag = 0, int_bound = 0;
                    for (int k = 0; k < n_in; ++k) {
                        const size_t xi = size_t(t * n_in + k);
                        const double wv = w.values[size_t(o * n_in + k)];
                        mag += std::fabs(wv * x[xi]);
                        int_bound += std::fabs(wv) * block_absmax(x, xi, expected_span(type)) / 127.0 / 2.0;
                    }
                    const double bound = (bf16 ? mag * (1.0 / 128 + 1.0 / 65536) : int_bound) + int_bound + 2e-5 * mag;
                    const double diff = std::fabs(double(prefill[i]) - decode[i]);
                    QVERIFY2(diff <= bound, qPrintable(QString("%1 t %2 o %3: prefill %4, decode %5 (bound %6)")
                                                           .arg(vector_level_name(kernel_table().level)).arg(t).arg(o)
                                                           .arg(prefill[i], 0, 'g', 9).arg(decode[i], 0, 'g', 9)
                                                           .arg(bound)));
                    worst = std::max(worst, diff / bound);
                }
            qInfo("%s (%s%s): worst |prefill - decode| / bound %.3f", vector_level_name(kernel_table().level),
                  qkernel_name(qkernel()), bf16 ? ", BF16 prefill" : "", worst);
        }
        QVERIFY(levels >= 1);
    }

    // Activations with a NaN or an infinity (a damaged norm weight) give NaN through every
    // integer kernel, as float arithmetic would, never a finite value made of a saturated
    // code; a token without them in the same tiles is unaffected, and one near 1e30 is
    // within rounding of the double product.
    void integer_kernels_non_finite_activations_data() { add_type_rows(); }
    void integer_kernels_non_finite_activations()
    {
        QFETCH(DType, type);
        const int n_in = block_size(type) == 256 ? 512 : 96;
        const int n_out = 4, n_tokens = 4;
        OwnedQuantWeight w = make_quant_weight(type, n_in, n_out, 31);
        std::mt19937 rng(4);
        std::normal_distribution<float> dist(0.0f, 2.0f);
        std::vector<float> x(size_t(n_tokens * n_in));
        for (float &v : x)
            v = dist(rng);
        x[size_t(1 * n_in + 37)] = std::numeric_limits<float>::quiet_NaN();
        x[size_t(2 * n_in + 64)] = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < n_in; ++j)
            x[size_t(3 * n_in + j)] *= 5e29f;
        const bool poisoned[n_tokens] = {false, true, true, false};
        QuantizedActs acts;
        quantize_acts(nullptr, x.data(), n_tokens, n_in, acts);
        const size_t rb = row_bytes(type, n_in);
        const void *rows[4];
        for (int r = 0; r < 4; ++r)
            rows[r] = static_cast<const uint8_t *>(w.view.data) + size_t(r) * rb;
        QKernel kernels[3];
        const int nk = available_qkernels(kernels, 3);
        for (int k = 0; k < nk; ++k) {
            std::vector<float> y(size_t(n_tokens * n_out), 0.0f);
            qgemm_tile_with(kernels[k], type, rows, 4, acts, 0, 4, y.data(), n_out);
            for (int t = 0; t < n_tokens; ++t)
                for (int o = 0; o < n_out; ++o) {
                    const float got = y[size_t(t * n_out + o)];
                    const QString where = QString("%1 token %2 row %3: %4").arg(qkernel_name(kernels[k])).arg(t).arg(o)
                                              .arg(got, 0, 'g', 9);
                    if (poisoned[t]) {
                        QVERIFY2(std::isnan(got), qPrintable(where));
                        continue;
                    }
                    // The activations' rounding bound (qdot.h) plus float rounding.
                    double want = 0, mag = 0, bound = 0;
                    for (int j = 0; j < n_in; ++j) {
                        const double wj = w.values[size_t(o * n_in + j)];
                        want += wj * x[size_t(t * n_in + j)];
                        mag += std::fabs(wj * x[size_t(t * n_in + j)]);
                        bound += std::fabs(wj) * acts.db_row(t)[j / 32] * 0.5;
                    }
                    QVERIFY2(std::isfinite(got) && std::fabs(got - want) <= bound + 1e-5 * mag, qPrintable(where));
                }
        }
    }

    // The packed Q5_K kernels at their integer extremes: every code 31 and every scale 63 (each
    // weight 63 x 31 = 1953), every activation 1 (code 127), so a pair sum of eight words would
    // be 8 x 2 x 31 x 127 = 62992, past 16 bits: each product must be n_in x 1953 exactly as the
    // sum of equal terms (up to float rounding), and the same bits with VNNI and AVX2.
    void packed_q5_k_extremes()
    {
        constexpr int n_in = 512, n_out = 16;
        std::vector<uint8_t> block(176, 0);
        block[0] = 0x00, block[1] = 0x3C; // d = 1 (f16), dmin = 0
        for (int j = 0; j < 4; ++j)
            block[4 + j] = 0xFF, block[12 + j] = 0x0F; // scales 63 (quant.h's 12-byte packing), mins 0
        std::memset(block.data() + 16, 0xFF, 32 + 128); // every fifth bit and nibble set: code 31
        std::vector<uint8_t> rows;
        for (int i = 0; i < n_out * n_in / 256; ++i)
            rows.insert(rows.end(), block.begin(), block.end());
        std::vector<float> values(n_in);
        dequantize_row(DType::Q5_K, rows.data(), values.data(), n_in);
        for (float v : values)
            QCOMPARE(v, 1953.0f);
        std::vector<uint8_t> packed(packed_size(DType::Q5_K, n_in, n_out));
        pack_rows(DType::Q5_K, rows.data(), n_in, packed.data(), 0, 1);
        const std::vector<float> x(size_t(2 * n_in), 1.0f);
        QuantizedActs acts;
        quantize_acts(nullptr, x.data(), 2, n_in, acts);
        std::vector<float> first;
        for (QKernel k : {QKernel::Vnni, QKernel::Avx2}) {
            if (!packed_kernel_available(k))
                continue;
            std::vector<float> y(size_t(2 * n_out), NAN);
            packed_tile_with(k, DType::Q5_K, packed.data(), n_in, 0, acts, 0, 2, y.data(), n_out);
            packed_tile_with(k, DType::Q5_K, packed.data(), n_in, 0, acts, 1, 1, y.data() + n_out, n_out);
            for (float v : y)
                QVERIFY2(std::fabs(v - 1953.0 * n_in) <= 1e-5 * 1953.0 * n_in,
                         qPrintable(QString("%1: %2").arg(qkernel_name(k)).arg(v, 0, 'g', 9)));
            if (!first.empty())
                QVERIFY(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)) == 0);
            first = y;
        }
        if (first.empty())
            qInfo("no AVX2 here: the packed kernels never run on this CPU");
    }

    // Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS matrices packed sixteen rows at a time (cpu/packed.h): decoding a packed
    // row gives the original row bit for bit; the packed kernel against the same two double
    // references as the row kernel above, the same bits for a token whatever the tile's token
    // count, and matmul over a packed matrix (groups split across threads at odd places) equal
    // to the packed kernel's own tiles and within float rounding of the row kernel.
    void packed_matrices_data()
    {
        QTest::addColumn<DType>("type");
        QTest::addColumn<int>("n_in");
        QTest::addColumn<int>("n_out");
        for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0, DType::Q4_0,
                        DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS}) {
            const std::string name(dtype_name(t));
            QTest::newRow((name + " 256x16").c_str()) << t << 256 << 16;
            QTest::newRow((name + " 768x48").c_str()) << t << 768 << 48;
            // Reduced (under a sanitizer): 768x48 is already three groups over threads.
            if (!longscope::test::reduced_size())
                QTest::newRow((name + " 2048x112").c_str()) << t << 2048 << 112;
        }
        // An odd number of blocks: the scales' area is padded to 64 bytes.
        QTest::newRow("Q8_0 96x48") << DType::Q8_0 << 96 << 48;
        QTest::newRow("Q8_0 5632x16") << DType::Q8_0 << 5632 << 16;
        QTest::newRow("Q4_0 160x48") << DType::Q4_0 << 160 << 48;
        QTest::newRow("Q5_1 160x48") << DType::Q5_1 << 160 << 48;
        QTest::newRow("Q4_1 160x48") << DType::Q4_1 << 160 << 48;
        QTest::newRow("Q5_0 160x48") << DType::Q5_0 << 160 << 48;
        QTest::newRow("IQ4_NL 160x48") << DType::IQ4_NL << 160 << 48;
    }
    void packed_matrices()
    {
        QFETCH(DType, type);
        QFETCH(int, n_in);
        QFETCH(int, n_out);
        QVERIFY(packable(type, n_in, n_out));
        QVERIFY(!packable(type, n_in, n_out + 8));
        // IQ4_XS: blocks of 32 as IQ4_NL's, in super-blocks of 256.
        const bool b32 = type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q5_0 ||
                         type == DType::Q5_1 || type == DType::IQ4_NL || type == DType::IQ4_XS;
        QVERIFY(!packable(type, n_in + (b32 && type != DType::IQ4_XS ? 16 : 32), n_out));
        QVERIFY(!packable(DType::IQ4_XS, 160, n_out));
        QVERIFY(!packable(DType::Q8_K, n_in, n_out));
        OwnedQuantWeight w = make_quant_weight(type, n_in, n_out, 31);
        const size_t bytes = packed_size(type, n_in, n_out);
        // Pairs of blocks: 64 bytes of scales (Q4_1, Q5_1: 128, with the minimums; IQ4_XS: 128, as
        // f32), then the codes (Q5_0, Q5_1: the nibbles and 64 bytes of fifth bits).
        const size_t pair_scales = type == DType::Q4_1 || type == DType::Q5_1 || type == DType::IQ4_XS ? 128 : 64;
        const bool fifth = type == DType::Q5_0 || type == DType::Q5_1;
        const size_t group = b32 ? size_t((n_in / 32 + 1) / 2 * pair_scales +
                                          n_in / 32 * (type == DType::Q8_0 ? 512 : fifth ? 320 : 256))
                                                 : size_t(n_in / 256) * size_t(type == DType::Q4_K ? packed_q4_k_block_bytes
                                                                               : type == DType::Q5_K ? packed_q5_k_block_bytes
                                                                               : type == DType::Q3_K ? packed_q3_k_block_bytes
                                                                               : type == DType::Q2_K ? packed_q2_k_block_bytes
                                                                                                     : packed_q6_k_block_bytes);
        QCOMPARE(bytes, size_t(n_out / 16) * group);
        std::vector<uint8_t> packed(bytes + 1, 0xA5); // odd address: the kernels load unaligned
        uint8_t *pk = packed.data() + 1;
        const auto *src = static_cast<const uint8_t *>(w.view.data);
        const int64_t groups = n_out / 16;
        pack_rows(type, src, n_in, pk, 0, groups / 2); // in two parts, as threads split it
        pack_rows(type, src, n_in, pk, groups / 2, groups);
        std::vector<float> row(static_cast<size_t>(n_in));
        for (int o = 0; o < n_out; ++o)
            for (bool vector : {true, false}) {
                if (vector)
                    dequantize_packed_row(type, pk, n_in, o, row.data());
                else
                    dequantize_packed_row_portable(type, pk, n_in, o, row.data());
                for (int i = 0; i < n_in; ++i)
                    QVERIFY2(bits_of(row[size_t(i)]) == bits_of(w.values[size_t(o * n_in + i)]),
                             qPrintable(QString("row %1 value %2 (%3): %4 vs %5").arg(o).arg(i)
                                            .arg(vector ? "vector" : "portable").arg(row[size_t(i)])
                                            .arg(w.values[size_t(o * n_in + i)])));
            }
        // Whole groups widened to BF16 blocks (the AMX panels' layout), where the type has a
        // kernel for it on this CPU: each value the file's, rounded to the nearest even BF16;
        // blocks `stride` values apart, the gap between them left alone.
        {
            const bool expected = (type == DType::Q8_0 || type == DType::Q4_K || type == DType::Q5_K) &&
                                  kernel_table().level == VectorLevel::Avx512 &&
                                  cpu_features().avx512_bf16;
            const size_t stride = 512 + 64, n_blocks = size_t(n_in / 32);
            std::vector<uint16_t> tiles(n_blocks * stride);
            for (int64_t g = 0; g < groups; ++g) {
                std::fill(tiles.begin(), tiles.end(), uint16_t(0x5555));
                const bool widened = widen_packed_group_bf16(type, pk, n_in, g, tiles.data(), stride);
                QCOMPARE(widened, expected);
                if (!widened)
                    break;
                for (size_t b = 0; b < n_blocks; ++b) {
                    for (int r = 0; r < 16; ++r)
                        for (int j = 0; j < 32; ++j) {
                            const float v = w.values[size_t((16 * g + r) * n_in) + 32 * b + size_t(j)];
                            const uint16_t got = tiles[b * stride + size_t(32 * r + j)];
                            QVERIFY2(got == f32_to_bf16(v), qPrintable(QString("group %1 row %2 value %3: %4 vs %5")
                                                                           .arg(g).arg(r).arg(32 * b + size_t(j))
                                                                           .arg(got, 4, 16, QChar('0'))
                                                                           .arg(f32_to_bf16(v), 4, 16, QChar('0'))));
                        }
                    for (size_t i = 512; i < stride; ++i)
                        QCOMPARE(tiles[b * stride + i], uint16_t(0x5555));
                }
            }
        }
        std::vector<QKernel> kernels;
        for (QKernel k : {QKernel::Vnni, QKernel::Avx2})
            if (packed_kernel_available(k))
                kernels.push_back(k);
        if (kernels.empty()) {
            qInfo("no AVX2 here: the packed kernels never run on this CPU (layout checked only)");
            return;
        }
        std::mt19937 rng(17);
        std::normal_distribution<float> dist(0.0f, 1.5f);
        const int n_tokens = 11; // two whole tiles of four and three more
        std::vector<float> x(size_t(n_tokens * n_in));
        for (float &v : x)
            v = dist(rng);
        // Activations with one scale per 32 values, and per 256 where the type is a K type.
        const bool k_type = block_size(type) == 256 && type != DType::IQ4_XS;
        for (int span : {32, 256}) {
            if (span == 256 && !k_type)
                continue;
            check_packed_products(type, n_in, n_out, w, pk, groups, kernels, x, n_tokens, span);
            if (QTest::currentTestFailed())
                return;
        }
    }

    // A Q4_K_M or Q5_K_M model loaded here: where this CPU's kernels pack (AVX-512 VNNI or AVX2),
    // every packable matrix has its packed copy, whose rows are the file's rows, and whose
    // products are those of the rows in the file within float rounding. With rows of 160 values
    // (not whole 256-value blocks) Q5_K_M holds Q5_1 and Q8_0 where it would hold Q5_K and Q6_K.
    // The one-pass quantize-and-interleave of prefill's activations gives the bytes of the two
    // passes it replaces (quantize_acts, then pack_acts): token counts with and without a last
    // partial tile, pools of one to three threads, a NaN in one token.
    void quantize_pack_acts_matches_two_passes()
    {
        // One scale per 32 values and per 256 (the K types' span under the VNNI kernels).
        for (int span : {act_span_block, act_span_super}) {
            // 67 blocks of 32: not a whole number of anything larger; for the span of 256, 9 spans.
            const int64_t n = span == act_span_block ? 2048 + 96 : 2048 + 256;
            std::mt19937 rng(17);
            std::normal_distribution<float> nd(0.0f, 2.0f);
            for (int64_t n_tokens : {4, 5, 8, 13, 64}) {
                std::vector<float> x(size_t(n_tokens * n));
                for (float &v : x)
                    v = nd(rng);
                x[size_t(n + 77)] = std::numeric_limits<float>::quiet_NaN();
                x[size_t(2 * n + 40)] = -std::numeric_limits<float>::infinity();
                std::fill(x.begin() + 3 * n + 64, x.begin() + 3 * n + 96, 0.0f); // a block of zeros
                for (int j = 0; j < 32; ++j) {
                    // A block at the largest float (127 / max is a normal number) and one too small
                    // for 127 / max to be finite (quantizes to zeros with the scale 0).
                    x[size_t(2 * n + 128 + j)] = j % 3 ? std::numeric_limits<float>::max() : -1e30f;
                    x[size_t(n + 160 + j)] = std::numeric_limits<float>::denorm_min() * float(j % 7);
                    x[size_t(3 * n + 192 + j)] = 1e-37f * float(j % 3); // normal, yet 127 / max overflows
                }
                QuantizedActs want_a;
                PackedActs want_p;
                quantize_acts(nullptr, x.data(), n_tokens, n, want_a, span);
                pack_acts(nullptr, want_a, want_p);
                for (int threads : {1, 2, 3}) {
                    ThreadPool pool(threads);
                    QuantizedActs a;
                    PackedActs p;
                    quantize_pack_acts(pool, x.data(), n_tokens, n, a, p, true, span);
                    const QString where = QString("span %1, %2 tokens, %3 threads").arg(span).arg(n_tokens).arg(threads);
                    QCOMPARE(p.span, span);
                    QCOMPARE(a.n_tokens, n_tokens);
                    QCOMPARE(p.n_tiles, n_tokens / packed_act_tile);
                    const auto same = [](const auto &u, const auto &v) {
                        return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(u[0])) == 0;
                    };
                    QVERIFY2(same(a.q, want_a.q) && same(a.dl, want_a.dl) && same(a.db, want_a.db) &&
                                 same(a.ds, want_a.ds) && same(a.s16, want_a.s16),
                             qPrintable(where + ": rows"));
                    QVERIFY2(same(p.q, want_p.q) && same(p.db, want_p.db) && same(p.ds, want_p.ds) &&
                                 same(p.b16, want_p.b16) && same(p.b32, want_p.b32),
                             qPrintable(where + ": tiles"));
                    // Straight into the tiles (the VNNI kernels' CPUs): the same tiles, and the rows
                    // of the tokens after the last whole tile.
                    if (!packed_kernel_available(QKernel::Vnni))
                        continue;
                    QuantizedActs a2;
                    PackedActs p2;
                    quantize_pack_acts(pool, x.data(), n_tokens, n, a2, p2, /*rows_of_tiles=*/false, span);
                    QVERIFY2(same(p2.q, want_p.q) && same(p2.db, want_p.db) && same(p2.ds, want_p.ds) &&
                                 same(p2.b16, want_p.b16) && same(p2.b32, want_p.b32),
                             qPrintable(where + ": tiles without rows"));
                    for (int64_t t = p2.n_tiles * packed_act_tile; t < n_tokens; ++t)
                        QVERIFY2(std::memcmp(a2.q_row(t), want_a.q_row(t), size_t(n)) == 0 &&
                                     std::memcmp(a2.db_row(t), want_a.db_row(t), size_t(n / 32) * 4) == 0 &&
                                     std::memcmp(a2.ds_row(t), want_a.ds_row(t), size_t(n / 32) * 4) == 0 &&
                                     std::memcmp(a2.dl_row(t), want_a.dl_row(t), size_t(n / 4) * 4) == 0 &&
                                     std::memcmp(a2.s16_row(t), want_a.s16_row(t), size_t(n / 16) * 4) == 0,
                                 qPrintable(where + QString(": row %1 without the tiles' rows").arg(t)));
                }
            }
        }
    }

    void model_packs_k_quant_matrices_data()
    {
        QTest::addColumn<DType>("mix");
        QTest::addColumn<int>("n_embd");
        // The types of the eight matrices below, in their order, by llama.cpp's rules: with two
        // layers, layer 0 is not one of use_more_bits' (attn_v and ffn_down keep the mix's type);
        // the output takes Q6_K, Q8_0 where its rows do not divide into 256.
        QTest::addColumn<QString>("types");
        QTest::newRow("Q4_K_M") << DType::Q4_K << 256 << "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q6_K";
        QTest::newRow("Q5_K_M") << DType::Q5_K << 256 << "Q5_K Q5_K Q5_K Q5_K Q5_K Q5_K Q5_K Q6_K";
        QTest::newRow("Q5_K_M 160") << DType::Q5_K << 160 << "Q5_1 Q5_1 Q5_1 Q5_1 Q5_1 Q5_1 Q5_K Q8_0";
        // Q3_K_M (k_mixes_follow_llama_cpp's rules): attn_v Q5_K in layer 0, attn_output Q4_K,
        // ffn_down Q4_K (no layer in the first sixteenth of two).
        QTest::newRow("Q3_K_M") << DType::Q3_K << 256 << "Q3_K Q3_K Q5_K Q4_K Q3_K Q3_K Q4_K Q6_K";
        // Q2_K: attn_v (fewer than 4 query heads per KV head), attn_output and ffn_down Q3_K.
        QTest::newRow("Q2_K") << DType::Q2_K << 256 << "Q2_K Q2_K Q3_K Q3_K Q2_K Q2_K Q3_K Q6_K";
    }
    void model_packs_k_quant_matrices()
    {
        QFETCH(DType, mix);
        QFETCH(int, n_embd);
        QFETCH(QString, types);
        const std::string f16 = tmp("pack-f16.gguf"), q = tmp("pack-q.gguf");
        RandomModelSpec spec = small_k_quant_spec(2, 5, 128);
        spec.n_embd = n_embd;
        write_random_model_file(f16, spec);
        quantize_model_file(f16, q, mix);
        auto m = Model::load(q);
        const LayerWeights &l = m->weights().layers[0];
        int packed = 0;
        QStringList seen;
        for (const WeightView *v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &m->weights().output}) {
            seen << QString::fromLatin1(dtype_name(v->type).data(), int(dtype_name(v->type).size()));
            QCOMPARE(v->cpu_packed != nullptr, cpu_wants_packed(*v));
            if (!v->cpu_packed)
                continue;
            ++packed;
            const int64_t n_in = v->ne(0);
            std::vector<float> a(static_cast<size_t>(n_in)), b(static_cast<size_t>(n_in));
            for (int64_t r : {int64_t(0), int64_t(17), v->ne(1) - 1}) {
                dequantize_packed_row(v->type, v->cpu_packed, n_in, r, a.data());
                dequantize_row(v->type, static_cast<const uint8_t *>(v->data) + size_t(r) * row_bytes(v->type, n_in),
                               b.data(), n_in);
                QVERIFY(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
            }
            WeightView rows = *v;
            rows.cpu_packed = nullptr;
            ThreadPool pool(2);
            std::vector<float> x(static_cast<size_t>(3 * n_in));
            std::mt19937 rng(3);
            std::normal_distribution<float> dist(0.0f, 1.0f);
            for (float &e : x)
                e = dist(rng);
            std::vector<float> yp(static_cast<size_t>(3 * v->ne(1))), yr(yp.size());
            matmul_with(pool, *v, x.data(), yp.data(), 3, QuantMatmul::Integer);
            matmul_with(pool, rows, x.data(), yr.data(), 3, QuantMatmul::Integer);
            for (size_t i = 0; i < yp.size(); ++i)
                QVERIFY2(std::fabs(yp[i] - yr[i]) <= 1e-4 * (std::fabs(yr[i]) + 1.0),
                         qPrintable(QString("%1 [%2]: %3 vs %4").arg(QString::fromStdString(v->name)).arg(i).arg(yp[i]).arg(yr[i])));
        }
        QCOMPARE(seen.join(' '), types);
        qInfo("packed matrices in layer 0 and output: %d (integer kernels: %s)", packed, qkernel_name(qkernel()));
        if (packed_kernel_available(qkernel()) && cpu_options().pack_weights)
            QVERIFY(packed == 8); // all eight: wq, wk, wv, wo, gate, up, down (layer 0), output
    }

    // The matrices are copied out of the file mapping at load (CpuOptions::copy_weights off
    // leaves them there); the copy changes nothing the model computes: the same logits, bit for bit,
    // for an F16 model (nothing packed) and for a Q4_K one (packed either way where this CPU
    // packs).
    void weights_copied_out_of_the_mapping()
    {
        const std::string f16 = tmp("copy-f16.gguf"), q4k = tmp("copy-q4k.gguf");
        write_small_k_quant_models(f16, q4k, 2, 9);
        for (const std::string &path : {f16, q4k}) {
            auto file = GgufFile::open(path);
            const GgufTensorInfo *t = file->find_tensor("blk.1.ffn_up.weight");
            QVERIFY(t);
            std::unique_ptr<Model> mapped;
            {
                CpuOptions no_copy = cpu_options();
                no_copy.copy_weights = false;
                CpuOptionsScope scope(no_copy);
                mapped = Model::load(path);
            }
            auto copied = Model::load(path);
            const WeightView &vm = mapped->weights().layers[1].w_up, &vc = copied->weights().layers[1].w_up;
            QCOMPARE(vm.nbytes, t->nbytes);
            QCOMPARE(vc.nbytes, t->nbytes);
            // The copy holds every matrix the forward pass multiplies by (not the embedding table
            // nor the norms), each at its size in the file (packed size if packed) rounded up to
            // 64 bytes.
            uint64_t expect = 0;
            size_t packed = 0;
            for (const GgufTensorInfo &ti : file->tensors()) {
                const bool matrix = ti.name.find("attn_norm") == std::string::npos &&
                                    ti.name.find("ffn_norm") == std::string::npos && ti.name != "output_norm.weight" &&
                                    ti.name != "token_embd.weight";
                if (!matrix)
                    continue;
                WeightView tv;
                tv.type = ti.type;
                tv.shape = {ti.shape[0], ti.shape[1]};
                const bool pk = cpu_wants_packed(tv);
                packed += pk;
                expect += ((pk ? packed_size(ti.type, ti.shape[0], ti.shape[1]) : ti.nbytes) + 63) / 64 * 64;
            }
            QCOMPARE(copied->info().cpu_copy_bytes, expect);
            QCOMPARE(copied->info().packed_matrices, packed);
            QCOMPARE(mapped->info().packed_matrices, packed);
            if (!vm.cpu_packed) { // in place: the bytes at the file's offset
                QVERIFY(std::memcmp(vm.data, t->data, size_t(t->nbytes)) == 0);
                QVERIFY(std::memcmp(vc.data, t->data, size_t(t->nbytes)) == 0);
                QVERIFY(vc.data != vm.data); // a copy of its own
            }
            const std::vector<float> a = prompt_logits(*mapped), b = prompt_logits(*copied);
            QCOMPARE(a.size(), size_t(512));
            QVERIFY(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
        }
    }

    // A model loaded for the CUDA backend leaves its matrices in the file mapping, unpacked;
    // the CPU still runs on them (F16: the same kernels, so the same bits, where F16 is not
    // packed, else the row kernels' float sums in another order; Q4_K: the row kernels
    // instead of the packed ones). Prepared later, it is what a CPU load is: the same
    // copy, the same packed matrices, bit-identical logits; a second call changes nothing.
    void weights_prepared_for_cpu_on_demand()
    {
        const std::string f16 = tmp("prep-f16.gguf"), q4k = tmp("prep-q4k.gguf");
        write_small_k_quant_models(f16, q4k, 2, 11);
        for (const std::string &path : {f16, q4k}) {
            auto cpu = Model::load(path);
            auto lazy = Model::load(path, {}, /*for_cpu=*/false);
            QVERIFY(cpu->prepared_for_cpu());
            QVERIFY(!lazy->prepared_for_cpu());
            QVERIFY(cpu->info().cpu_copy_bytes > 0);
            QCOMPARE(lazy->info().cpu_copy_bytes, uint64_t(0));
            QCOMPARE(lazy->info().packed_matrices, size_t(0));
            QVERIFY(lazy->weights().layers[1].w_up.cpu_packed == nullptr);
            const std::vector<float> want = prompt_logits(*cpu), in_place = prompt_logits(*lazy);
            QCOMPARE(want.size(), size_t(512));
            if (path == f16 && !kernel_table().pack_half) {
                QCOMPARE(cpu->info().packed_matrices, size_t(0));
                QVERIFY(std::memcmp(want.data(), in_place.data(), want.size() * 4) == 0);
            } else if (path == f16) {
                // The same products rounded in another order: float rounding only (no 8-bit
                // activations in between), a few units in the last place of the largest logit.
                QVERIFY(cpu->info().packed_matrices > 0);
                double worst = 0, scale = 0;
                for (size_t i = 0; i < want.size(); ++i) {
                    worst = std::max(worst, double(std::fabs(want[i] - in_place[i])));
                    scale = std::max(scale, double(std::fabs(want[i])));
                }
                QVERIFY2(worst <= 1e-5 * scale, qPrintable(QString("%1 of %2").arg(worst).arg(scale)));
            } else {
                QCOMPARE(cpu->info().packed_matrices > 0, packed_kernel_available(qkernel()));
                double worst = 0, scale = 0;
                for (size_t i = 0; i < want.size(); ++i) {
                    worst = std::max(worst, double(std::fabs(want[i] - in_place[i])));
                    scale = std::max(scale, double(std::fabs(want[i])));
                }
                // The two kernels agree per product within float rounding (checked above), but
                // each layer's activations are rounded to 8 bits again, and a value that lands on
                // the other side of a rounding step moves by a whole step: through two layers that
                // moved these logits by about 1% of the largest. Every Q4_K product 10% off moved
                // them by 7% (tried), zeroed by 108%.
                QVERIFY2(worst <= 0.05 * scale, qPrintable(QString("%1 of %2").arg(worst).arg(scale)));
            }
            lazy->prepare_for_cpu();
            QVERIFY(lazy->prepared_for_cpu());
            QCOMPARE(lazy->info().cpu_copy_bytes, cpu->info().cpu_copy_bytes);
            QCOMPARE(lazy->info().packed_matrices, cpu->info().packed_matrices);
            QCOMPARE(lazy->info().weight_bytes, cpu->info().weight_bytes);
            const std::vector<float> prepared = prompt_logits(*lazy);
            QVERIFY(std::memcmp(want.data(), prepared.data(), want.size() * 4) == 0);
            const void *w_up = lazy->weights().layers[1].w_up.data;
            lazy->prepare_for_cpu();
            QCOMPARE(lazy->info().cpu_copy_bytes, cpu->info().cpu_copy_bytes);
            QVERIFY(lazy->weights().layers[1].w_up.data == w_up);
        }
    }

    // A tied output matrix (no output.weight: the embedding table is the classifier) is copied
    // and packed like any other, and the embedding lookup reads that copy: the same logits, bit
    // for bit, as from a file whose output.weight is a separate copy of the same table.
    void tied_output_is_prepared_for_cpu()
    {
        const std::string f16 = tmp("tie-f16.gguf"), q4k = tmp("tie-q4k.gguf");
        write_small_k_quant_models(f16, q4k, 2, 13);
        // Q4_K, and F16 (packed too at the AVX-512 level without AMX tiles).
        for (const std::string &path : {q4k, f16}) {
            const std::string tied = tmp("tie-tied.gguf"), twin = tmp("tie-twin.gguf");
            const DType embd_type = path == q4k ? DType::Q4_K : DType::F16;
            {
                auto src = GgufFile::open(path);
                const GgufTensorInfo *embd = src->find_tensor("token_embd.weight");
                QVERIFY(embd && embd->type == embd_type);
                for (bool with_output : {false, true}) {
                    test::GgufWriter out;
                    test::copy_metadata(*src, out);
                    for (const GgufTensorInfo &t : src->tensors()) {
                        if (t.name == "output.weight" && !with_output)
                            continue;
                        const GgufTensorInfo &from = t.name == "output.weight" ? *embd : t;
                        out.add_tensor(t.name, from.shape, uint32_t(from.type),
                                       std::string(reinterpret_cast<const char *>(from.data), size_t(from.nbytes)));
                    }
                    QVERIFY(out.write(with_output ? twin : tied));
                }
            }
            auto a = Model::load(tied), b = Model::load(twin);
            const ModelWeights &wa = a->weights();
            QVERIFY(wa.output.data == wa.tok_embd.data); // tied
            QVERIFY(b->weights().output.data != b->weights().tok_embd.data);
            QCOMPARE(a->info().packed_matrices, b->info().packed_matrices);
            QCOMPARE(a->info().cpu_copy_bytes, b->info().cpu_copy_bytes);
            QCOMPARE(wa.output.cpu_packed != nullptr, cpu_wants_packed(wa.output));
            if (path == q4k)
                QCOMPARE(wa.output.cpu_packed != nullptr, packed_kernel_available(qkernel()));
            QVERIFY(wa.tok_embd.cpu_packed == wa.output.cpu_packed);
            const std::vector<float> la = prompt_logits(*a), lb = prompt_logits(*b);
            QCOMPARE(la.size(), size_t(512));
            QVERIFY(std::memcmp(la.data(), lb.data(), la.size() * 4) == 0);
        }
    }

    // stories260K quantized: rows are 64 wide (ffn_down 172), so every 2-D weight but ffn_down
    // (172 is no multiple of 32) is quantized: the 32-value types as asked; the 256-value types,
    // whose blocks do not divide 64, take llama.cpp's fallbacks (llama-quant.cpp,
    // tensor_type_fallback: Q2_K and Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0,
    // IQ4_XS to IQ4_NL; the output of a K mix to Q8_0), so `types` lists what may appear.
    // The file type is llama.cpp's LLAMA_FTYPE for the type (for the K types their _M mix).
    void quantized_stories260k_data()
    {
        QTest::addColumn<DType>("type");
        QTest::addColumn<QString>("types");
        QTest::addColumn<uint32_t>("file_type");
        QTest::addColumn<bool>("exact_text"); // the F16 model's continuation (at 5 bits and more)
        QTest::newRow("Q8_0") << DType::Q8_0 << "Q8_0" << 7u << true;
        QTest::newRow("Q4_0") << DType::Q4_0 << "Q4_0" << 2u << false;
        QTest::newRow("Q4_1") << DType::Q4_1 << "Q4_1" << 3u << false;
        QTest::newRow("Q5_0") << DType::Q5_0 << "Q5_0" << 8u << true;
        QTest::newRow("Q5_1") << DType::Q5_1 << "Q5_1" << 9u << true;
        QTest::newRow("IQ4_NL") << DType::IQ4_NL << "IQ4_NL" << 25u << false;
        QTest::newRow("Q2_K") << DType::Q2_K << "Q4_0 Q8_0" << 10u << false;
        QTest::newRow("Q3_K_M") << DType::Q3_K << "Q4_0 Q5_0 Q5_1 Q8_0" << 12u << false;
        QTest::newRow("Q4_K_M") << DType::Q4_K << "Q5_0 Q8_0" << 15u << true;
        QTest::newRow("Q5_K_M") << DType::Q5_K << "Q5_1 Q8_0" << 17u << true;
        QTest::newRow("Q6_K") << DType::Q6_K << "Q8_0" << 18u << true;
        QTest::newRow("IQ4_XS") << DType::IQ4_XS << "IQ4_NL" << 30u << false;
    }
    void quantized_stories260k()
    {
        QFETCH(DType, type);
        QFETCH(QString, types);
        QFETCH(uint32_t, file_type);
        QFETCH(bool, exact_text);
        const int n_quantized = 32; // 5 layers x 6 (ffn_down kept), token_embd, output
        const QStringList allowed = types.split(' ');
        const std::string out = tmp("stories-" + std::string(dtype_name(type)) + ".gguf");
        double last = -1;
        bool monotonic = true;
        quantize_model_file(bundled, out, type, [&](double f) {
            monotonic = monotonic && f >= last && f <= 1.0;
            last = f;
        });
        QVERIFY(monotonic);
        QCOMPARE(last, 1.0);

        auto src = GgufFile::open(bundled);
        auto q = GgufFile::open(out);
        // Same metadata, in the same order, with file_type and quantization_version set.
        std::vector<std::string> keys = src->metadata_order();
        keys.push_back("general.quantization_version");
        QCOMPARE(q->metadata_order(), keys);
        QCOMPARE(q->get_int("general.file_type").value(), int64_t(file_type));
        QCOMPARE(q->get_int("general.quantization_version").value(), int64_t(2));
        QCOMPARE(q->find("general.file_type")->type, GgufValueType::Uint32);
        for (const std::string &k : src->metadata_order()) {
            if (k == "general.file_type")
                continue;
            const GgufValue &a = *src->find(k), &b = *q->find(k);
            QCOMPARE(a.type, b.type);
            if (const GgufArray *arr = a.as_array()) {
                QCOMPARE(arr->items.size(), b.as_array()->items.size());
                for (size_t i = 0; i < arr->items.size(); ++i)
                    QVERIFY(arr->items[i].value == b.as_array()->items[i].value);
            } else {
                QVERIFY2(a.value == b.value, k.c_str());
            }
        }
        QCOMPARE(q->alignment(), uint64_t(32));

        int quantized = 0;
        for (const GgufTensorInfo &t : q->tensors()) {
            const GgufTensorInfo *s = src->find_tensor(t.name);
            QVERIFY(s);
            QCOMPARE(t.shape, s->shape);
            if (t.type != s->type) {
                ++quantized;
                QVERIFY2(allowed.contains(QString::fromStdString(std::string(dtype_name(t.type)))),
                         qPrintable(QString::fromStdString(t.name + " is " + std::string(dtype_name(t.type)))));
                QCOMPARE(t.shape.size(), size_t(2));
            } else {
                QVERIFY(t.shape.size() == 1 || t.shape[0] % 32 != 0);
                QVERIFY(std::memcmp(t.data, s->data, t.nbytes) == 0);
            }
        }
        QCOMPARE(quantized, n_quantized);

        auto m = Model::load(out);
        for (const auto &[name, count] : m->info().tensor_types)
            QVERIFY2(allowed.contains(QString::fromStdString(name)) || name == "F32", name.c_str());
        const std::string text = greedy_text(*m, "Once upon a time", 30);
        if (!exact_text) {
            QVERIFY(text.size() > 20); // runs; 4 bits or fewer on a 260K-parameter model drift early
        } else {
            QVERIFY2(text.rfind(", there was a little girl named Lily.", 0) == 0, text.c_str());
        }
    }

    // The Q4_K_M mix on a model whose rows divide into 256: output and the attn_v / ffn_down
    // of layers 0, 3, 6 and 7 of 8 (llama.cpp's use_more_bits) in Q6_K, the rest Q4_K; and the
    // quantized model computes nearly what the F16 one does.
    void q4_k_m_mix_and_accuracy()
    {
        const RandomModelSpec spec = small_k_quant_spec(8, 3, 256);
        const std::string f16 = tmp("mix-f16.gguf"), q4k = tmp("mix-q4k.gguf"), q8 = tmp("mix-q8.gguf");
        write_random_model_file(f16, spec);
        quantize_model_file(f16, q4k, DType::Q4_K);
        quantize_model_file(f16, q8, DType::Q8_0);

        auto types = tensor_types(q4k);
        QCOMPARE(types["output.weight"], DType::Q6_K);
        QCOMPARE(types["token_embd.weight"], DType::Q4_K);
        QCOMPARE(types["output_norm.weight"], DType::F32);
        for (int l = 0; l < 8; ++l) {
            const std::string p = "blk." + std::to_string(l) + ".";
            const DType more = (l == 0 || l == 3 || l == 6 || l == 7) ? DType::Q6_K : DType::Q4_K;
            QCOMPARE(types[p + "attn_v.weight"], more);
            QCOMPARE(types[p + "ffn_down.weight"], more);
            for (const char *n : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
                QCOMPARE(types[p + n + ".weight"], DType::Q4_K);
            QCOMPARE(types[p + "attn_norm.weight"], DType::F32);
        }

        auto m16 = Model::load(f16);
        auto m4 = Model::load(q4k);
        auto m8 = Model::load(q8);
        const std::vector<int32_t> prompt = {1, 300, 301, 302, 303, 304, 305, 306};
        auto logits = [&](const Model &m) {
            Session s(m, {0, 2});
            auto l = s.eval(prompt);
            return std::vector<float>(l.begin(), l.end());
        };
        const std::vector<float> a = logits(*m16), b4 = logits(*m4), b8 = logits(*m8);
        auto rel = [&](const std::vector<float> &b) {
            double se = 0, sa = 0;
            for (size_t i = 0; i < a.size(); ++i) {
                if (!std::isfinite(b[i]))
                    return double(INFINITY);
                se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
                sa += double(a[i]) * a[i];
            }
            return std::sqrt(se / sa);
        };
        const double r8 = rel(b8), r4 = rel(b4);
        qInfo("logits relative RMS difference to F16: Q8_0 %.4f, Q4_K_M %.4f", r8, r4);
        // Errors compound through 8 layers of a random (untrained, so not robust) model;
        // an actual mistake (a wrong row, a wrong scale) gives a difference of order 1.
        QVERIFY(r8 < 0.05);
        QVERIFY(r4 < 0.5);
        QVERIFY(r8 < r4);
    }

    // The Q2_K, Q3_K_M and Q5_K_M mixes on the 8-layer model above (rows of 256 and 512, 4
    // query heads over 2 KV heads), tensor by tensor as llama.cpp's llama-quant.cpp assigns
    // them to a dense model without an importance matrix:
    //   Q2_K:   output Q6_K; attn_v (fewer than 4 query heads per KV head), ffn_down and
    //           attn_output Q3_K; the rest Q2_K
    //   Q3_K_M: output Q6_K; attn_v Q5_K in layers 0 and 1, then Q4_K; ffn_down Q5_K in the
    //           first sixteenth of the layers (none of 8), then Q4_K; attn_output Q4_K; the rest Q3_K
    //   Q5_K_M: output Q6_K; attn_v and ffn_down Q6_K in layers 0, 3, 6, 7 (use_more_bits), the
    //           rest Q5_K
    // and the quantized models compute nearly what the F16 one does, closer with more bits.
    void k_mixes_follow_llama_cpp()
    {
        const RandomModelSpec spec = small_k_quant_spec(8, 3, 256);
        const std::string f16 = tmp("kmix-f16.gguf");
        write_random_model_file(f16, spec);
        auto m16 = Model::load(f16);
        const std::vector<int32_t> prompt = {1, 300, 301, 302, 303, 304, 305, 306};
        auto logits = [&](const Model &m) {
            Session s(m, {0, 2});
            auto l = s.eval(prompt);
            return std::vector<float>(l.begin(), l.end());
        };
        const std::vector<float> a = logits(*m16);
        std::map<DType, double> rel;
        for (DType mix : {DType::Q2_K, DType::Q3_K, DType::Q5_K}) {
            const std::string path = tmp("kmix-" + std::string(dtype_name(mix)) + ".gguf");
            quantize_model_file(f16, path, mix);
            auto types = tensor_types(path);
            QCOMPARE(types["output.weight"], DType::Q6_K);
            QCOMPARE(types["token_embd.weight"], mix);
            for (int l = 0; l < 8; ++l) {
                const std::string p = "blk." + std::to_string(l) + ".";
                const bool more = l == 0 || l == 3 || l == 6 || l == 7;
                DType v = mix, down = mix, out = mix;
                if (mix == DType::Q2_K) {
                    v = down = out = DType::Q3_K;
                } else if (mix == DType::Q3_K) {
                    v = l < 2 ? DType::Q5_K : DType::Q4_K;
                    down = out = DType::Q4_K;
                } else if (more) {
                    v = down = DType::Q6_K;
                }
                const QByteArray where = QByteArray(dtype_name(mix).data()) + " layer " + QByteArray::number(l);
                QVERIFY2(types[p + "attn_v.weight"] == v, where + " attn_v");
                QVERIFY2(types[p + "ffn_down.weight"] == down, where + " ffn_down");
                QVERIFY2(types[p + "attn_output.weight"] == out, where + " attn_output");
                for (const char *n : {"attn_q", "attn_k", "ffn_gate", "ffn_up"})
                    QVERIFY2(types[p + n + ".weight"] == mix, where + " " + n);
                QCOMPARE(types[p + "ffn_norm.weight"], DType::F32);
            }
            auto g = GgufFile::open(path);
            QCOMPARE(g->get_int("general.file_type").value(), int64_t(llama_file_type(mix)));
            const std::vector<float> b = logits(*Model::load(path));
            double se = 0, sa = 0;
            for (size_t i = 0; i < a.size(); ++i) {
                QVERIFY(std::isfinite(b[i]));
                se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
                sa += double(a[i]) * a[i];
            }
            rel[mix] = std::sqrt(se / sa);
        }
        QCOMPARE(llama_file_type(DType::Q2_K), 10u);
        QCOMPARE(llama_file_type(DType::Q3_K), 12u); // LLAMA_FTYPE_MOSTLY_Q3_K_M
        QCOMPARE(llama_file_type(DType::Q5_K), 17u); // LLAMA_FTYPE_MOSTLY_Q5_K_M
        qInfo("logits relative RMS difference to F16: Q2_K %.4f, Q3_K_M %.4f, Q5_K_M %.4f", rel[DType::Q2_K],
              rel[DType::Q3_K], rel[DType::Q5_K]);
        // As q4_k_m_mix_and_accuracy: errors compound through 8 random layers; a wrong row or
        // scale gives a difference of order 1.
        QVERIFY(rel[DType::Q5_K] < 0.3);
        QVERIFY(rel[DType::Q3_K] < 0.9);
        QVERIFY(rel[DType::Q5_K] < rel[DType::Q3_K]);
        QVERIFY(rel[DType::Q3_K] < rel[DType::Q2_K]);
    }

    // Rows that do not divide into 256 (a Qwen2.5-0.5B-like width: 160 here, ffn_down's 512
    // does divide) take llama.cpp's 32-value fallbacks: Q5_K -> Q5_1, Q6_K -> Q8_0 (and the
    // output of a K mix Q8_0); with 5 query heads per KV head Q2_K's attn_v is Q4_K, which falls
    // back to Q5_0. The model loads and runs on the mix.
    void k_mix_fallbacks()
    {
        RandomModelSpec spec = small_k_quant_spec(2, 9, 128);
        spec.n_embd = 160;
        spec.n_head = 5;
        spec.n_head_kv = 1;
        const std::string f16 = tmp("fb-f16.gguf"), q5 = tmp("fb-q5km.gguf"), q2 = tmp("fb-q2k.gguf");
        write_random_model_file(f16, spec);
        quantize_model_file(f16, q5, DType::Q5_K);
        quantize_model_file(f16, q2, DType::Q2_K);
        auto t5 = tensor_types(q5);
        QCOMPARE(t5["output.weight"], DType::Q8_0);
        QCOMPARE(t5["token_embd.weight"], DType::Q5_1);
        QCOMPARE(t5["blk.0.attn_v.weight"], DType::Q5_1); // Q5_K
        QCOMPARE(t5["blk.1.attn_v.weight"], DType::Q8_0); // Q6_K (use_more_bits(1, 2))
        QCOMPARE(t5["blk.0.attn_q.weight"], DType::Q5_1);
        QCOMPARE(t5["blk.1.ffn_up.weight"], DType::Q5_1);
        QCOMPARE(t5["blk.0.ffn_down.weight"], DType::Q5_K); // rows of 512
        QCOMPARE(t5["blk.1.ffn_down.weight"], DType::Q6_K);
        auto t2 = tensor_types(q2);
        QCOMPARE(t2["blk.0.attn_v.weight"], DType::Q5_0); // Q4_K (GQA 5)
        QCOMPARE(t2["blk.0.attn_q.weight"], DType::Q4_0); // Q2_K
        QCOMPARE(t2["blk.0.ffn_down.weight"], DType::Q3_K);
        for (const std::string &path : {q5, q2}) {
            auto m = Model::load(path);
            Session s(*m, {0, 2});
            auto l = s.eval(std::vector<int32_t>{1, 300, 301});
            for (float v : l)
                QVERIFY(std::isfinite(v));
        }
    }

    void quantize_rejects_quantized_input()
    {
        const std::string q8 = tmp("rq-q8.gguf");
        quantize_model_file(bundled, q8, DType::Q8_0);
        try {
            quantize_model_file(q8, tmp("rq-q4.gguf"), DType::Q4_0);
            QFAIL("no error");
        } catch (const FormatError &e) {
            QVERIFY2(std::string(e.what()).find("already Q8_0") != std::string::npos, e.what());
        }
        QVERIFY(!std::filesystem::exists(tmp("rq-q4.gguf")));
        QVERIFY(!std::filesystem::exists(tmp("rq-q4.gguf.partial")));
    }

    // A file cut inside a quantized tensor is refused by the loader, naming the tensor.
    void truncated_quantized_tensor_rejected()
    {
        const std::string q8 = tmp("trunc-q8.gguf");
        quantize_model_file(bundled, q8, DType::Q8_0);
        auto g = GgufFile::open(q8);
        // The last tensor of the file (stories260K's blk.4.ffn_up, quantized).
        const GgufTensorInfo *last = nullptr;
        for (const GgufTensorInfo &t : g->tensors())
            if (!last || t.offset > last->offset)
                last = &t;
        QVERIFY(last);
        QCOMPARE(last->type, DType::Q8_0);
        // The writer pads the data section to the alignment, so it starts at the file size
        // minus the padded end of the last tensor.
        const uint64_t end = (last->offset + last->nbytes + 31) / 32 * 32;
        const uint64_t data_start = g->file_size() - end;
        const uint64_t new_size = data_start + last->offset + last->nbytes - 10;
        const std::string name = last->name;
        g.reset();
        const std::string cut_path = tmp("trunc-cut.gguf");
        std::filesystem::copy_file(q8, cut_path);
        std::filesystem::resize_file(cut_path, new_size);
        try {
            Model::load(cut_path);
            QFAIL("a truncated file loaded");
        } catch (const FormatError &e) {
            QVERIFY2(std::string(e.what()).find("tensor " + name + " extends past end") != std::string::npos, e.what());
        }
        // Whole again (without the final padding, which no tensor needs) it loads.
        std::filesystem::resize_file(cut_path, new_size + 10);
        QVERIFY(Model::load(cut_path) != nullptr);
    }

    void random_model_is_deterministic()
    {
        RandomModelSpec spec;
        spec.n_embd = 256;
        spec.n_layer = 1;
        spec.n_head = 4;
        spec.n_head_kv = 4;
        spec.n_ff = 256;
        spec.n_vocab = 300;
        spec.type = DType::Q6_K;
        spec.seed = 42;
        write_random_model_file(tmp("det-a.gguf"), spec);
        write_random_model_file(tmp("det-b.gguf"), spec);
        spec.seed = 43;
        write_random_model_file(tmp("det-c.gguf"), spec);
        const auto a = read_bytes(tmp("det-a.gguf")), b = read_bytes(tmp("det-b.gguf")),
                   c = read_bytes(tmp("det-c.gguf"));
        QVERIFY(a == b);
        QVERIFY(a != c);
        QCOMPARE(a.size(), c.size());
        // Loads, with the byte-level vocabulary: any text round-trips through it.
        auto m = Model::load(tmp("det-a.gguf"));
        QCOMPARE(m->tokenizer().n_vocab(), 300);
        const std::string text = "Hello, wörld!";
        QCOMPARE(m->tokenizer().decode(m->tokenizer().encode(text, false)), text);
        // The weights: normal(0, 0.02) (one Q6_K tensor, dequantized).
        auto g = GgufFile::open(tmp("det-a.gguf"));
        const GgufTensorInfo *t = g->find_tensor("blk.0.ffn_up.weight");
        QVERIFY(t && t->type == DType::Q6_K);
        std::vector<float> v(static_cast<size_t>(t->n_elements()));
        dequantize_row(t->type, t->data, v.data(), int64_t(v.size()));
        double s = 0, s2 = 0;
        for (float x : v) {
            s += x;
            s2 += double(x) * x;
        }
        const double mean = s / double(v.size()), sd = std::sqrt(s2 / double(v.size()) - mean * mean);
        QVERIFY2(std::fabs(mean) < 0.001 && std::fabs(sd - 0.02) < 0.001,
                 qPrintable(QString("mean %1 sd %2").arg(mean).arg(sd)));
    }

    void invalid_shapes_rejected()
    {
        RandomModelSpec spec;
        spec.n_embd = 250;
        spec.n_layer = 1;
        spec.n_head = 4; // 250 is not divisible by 4
        spec.n_head_kv = 4;
        spec.n_ff = 256;
        spec.n_vocab = 300;
        QVERIFY_THROWS_EXCEPTION(ConfigError, write_random_model_file(tmp("bad.gguf"), spec));
        spec.n_embd = 256;
        spec.n_vocab = 100; // smaller than the byte-level vocabulary
        QVERIFY_THROWS_EXCEPTION(ConfigError, write_random_model_file(tmp("bad.gguf"), spec));
        QVERIFY(!std::filesystem::exists(tmp("bad.gguf")));
    }
};

QTEST_APPLESS_MAIN(TestQuant)
#include "tst_quant.moc"
