// The engine checked against truth from outside itself.
//
// support/llama2c_reference.{h,cpp} is an independent, naive float64 LLaMA forward pass over
// the ORIGINAL llama2.c checkpoint (stories260K.bin), sharing no code with the engine. It is
// first proven right on its own against the published known output of the model, then the
// engine (loading the same model from the bundled GGUF and from the HF directory, i.e. other
// files, other layouts, other RoPE conventions) must produce the same greedy tokens and the
// same logits.
#include "support/llama2c_reference.h"

#include "longscope/engine.h"
#include "longscope/model.h"
#include "longscope/tokenizer.h"

#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

using longscope_test::Llama2cReference;
using longscope_test::Llama2cTokenizer;

namespace {

const QString kDataDir = QStringLiteral(LONGSCOPE_TEST_DATA);
const QString kReferenceBin = kDataDir + QStringLiteral("/stories260K/stories260K.bin");
const QString kBundledGguf = QStringLiteral(LONGSCOPE_BUNDLED_MODEL);
const QString kHfDir = kDataDir + QStringLiteral("/stories260K/hf");

// BOS + "Once upon a time", as the llama2.c tokenizer encodes it.
const std::vector<int> kOnceUponATime = {1, 403, 407, 261, 378};

// The published greedy continuation of that prompt (stories260K README; two independent
// implementations agree). Reaching the newline after "high." takes 58 generated tokens.
const std::string kKnownText =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.\n";
constexpr int kKnownTextTokens = 64;

// The published ids of "Once upon a time, there was a little girl named Lily." (no BOS): the
// part after the prompt is the start of the greedy continuation.
const std::vector<int> kKnownIds = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};

constexpr int kNewTokens = 200;      // greedy tokens compared, engine vs reference
constexpr int kLogitSteps = 50;      // decode steps whose full logits are compared
// Engine vs reference logits. The reference computes in float64 (≈ exact for the float32
// weights); the engine accumulates in float32, in its own order (blocked/vectorised dot
// products, threads, fused kernels). Rounding alone then moves each logit by about
// eps_f32 (1.2e-7) x sqrt(terms) x |partial sums| through 5 layers: ~1e-5 for logits of
// magnitude ~20 at these widths (64, 172, 512). 1e-3 is two orders of magnitude above that
// noise, yet far below any real bug (a wrong RoPE pair, a wrong GQA head, a missing norm
// weight or an off-by-one position each move logits by ~0.1 to several units).
constexpr double kLogitTolerance = 1e-3;
// The same engine evaluating a prompt in one batch vs token by token: only the accumulation
// order of the batched kernels may differ, so the bound is tighter.
constexpr double kPrefillTolerance = 1e-4;

struct Diff {
    double max_abs = 0.0;
    int at = -1;
};

Diff max_abs_diff(std::span<const float> a, std::span<const float> b)
{
    Diff d;
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        const double e = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
        if (!(e <= d.max_abs)) { // NaN counts as the worst
            d.max_abs = std::isnan(e) ? INFINITY : e;
            d.at = static_cast<int>(i);
        }
    }
    return d;
}

QString ids_to_string(const std::vector<int> &ids)
{
    QStringList parts;
    for (int id : ids)
        parts << QString::number(id);
    return parts.join(QLatin1Char(' '));
}

// Top two (id, logit) of a logits vector.
QString top2(const std::vector<float> &v)
{
    int a = Llama2cReference::argmax(v);
    int b = a == 0 ? 1 : 0;
    for (int i = 0; i < static_cast<int>(v.size()); ++i) {
        if (i != a && v[static_cast<size_t>(i)] > v[static_cast<size_t>(b)])
            b = i;
    }
    return QStringLiteral("top-2 %1 (%2), %3 (%4), margin %5")
        .arg(a)
        .arg(static_cast<double>(v[static_cast<size_t>(a)]), 0, 'g', 9)
        .arg(b)
        .arg(static_cast<double>(v[static_cast<size_t>(b)]), 0, 'g', 9)
        .arg(static_cast<double>(v[static_cast<size_t>(a)] - v[static_cast<size_t>(b)]), 0, 'g', 6);
}

std::vector<int> to_int(const std::vector<int32_t> &v) { return std::vector<int>(v.begin(), v.end()); }

void write_bytes(const QString &path, const std::string &bytes)
{
    std::ofstream out(path.toStdString(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const QString &path)
{
    std::ifstream in(path.toStdString(), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void put_i32(std::string &bytes, size_t offset, int32_t v) { std::memcpy(bytes.data() + offset, &v, 4); }

} // namespace

class TestReferenceModel : public QObject {
    Q_OBJECT

private:
    std::optional<Llama2cReference> m_ref;

    void add_engine_rows(bool multi_token_only);
    void check_engine_matches_reference(const QString &model, const QString &prompt);
    void check_prefill_equals_stepwise(const QString &model, const QString &prompt);

private slots:
    void initTestCase();

    // The reference alone.
    void reference_config();
    void reference_known_text_data();
    void reference_known_text();
    void reference_rejects_bad_files_data();
    void reference_rejects_bad_files();
    void reference_tokenizer_rejects_bad_files_data();
    void reference_tokenizer_rejects_bad_files();

    // The engine against the reference.
    void engine_matches_reference_data();
    void engine_matches_reference();
    void engine_prefill_equals_stepwise_data();
    void engine_prefill_equals_stepwise();
};

void TestReferenceModel::initTestCase()
{
    QVERIFY2(QFile::exists(kReferenceBin), qPrintable(kReferenceBin + " is missing"));
    m_ref.emplace(Llama2cReference::load(kReferenceBin.toStdString()));
}

void TestReferenceModel::reference_config()
{
    const auto &c = m_ref->config();
    QCOMPARE(c.dim, 64);
    QCOMPARE(c.hidden_dim, 172);
    QCOMPARE(c.n_layers, 5);
    QCOMPARE(c.n_heads, 8);
    QCOMPARE(c.n_kv_heads, 4);
    QCOMPARE(c.vocab_size, 512);
    QCOMPARE(c.seq_len, 512);
    // The header's vocab_size is positive (+512) and the file size leaves no room for a
    // separate classifier: the classifier is the token embedding (tied).
    QVERIFY(c.shared_classifier);
    QCOMPARE(c.head_size(), 8);
    QCOMPARE(c.kv_dim(), 32);
}

void TestReferenceModel::reference_known_text_data()
{
    // tok512.bin is the original llama2.c tokenizer file. tok512.model is the sentencepiece
    // model it was exported from; the reader converts it the way llama2.c's export does, so
    // both give the same pieces. Rows only for the files this tree carries.
    QTest::addColumn<QString>("tokenizer");
    int rows = 0;
    for (const char *name : {"tok512.bin", "tok512.model"}) {
        const QString path = kDataDir + QStringLiteral("/stories260K/") + QLatin1String(name);
        if (QFile::exists(path)) {
            QTest::newRow(name) << path;
            ++rows;
        }
    }
    if (rows == 0)
        QTest::newRow("no tokenizer file") << QString();
}

void TestReferenceModel::reference_known_text()
{
    QFETCH(QString, tokenizer);
    QVERIFY2(!tokenizer.isEmpty(), "tests/data/stories260K has neither tok512.bin nor tok512.model");
    const Llama2cTokenizer tok = Llama2cTokenizer::load(tokenizer.toStdString());
    QCOMPARE(tok.size(), 512);
    // The prompt ids are what the pieces say they are.
    QCOMPARE(tok.decode_all(kOnceUponATime, 0), std::string("\n<s>\nOnce upon a time"));
    QCOMPARE(tok.decode_all({403, 407, 261, 378}, 1), std::string("Once upon a time"));

    const std::vector<int> ids = m_ref->greedy(kOnceUponATime, kKnownTextTokens);
    QCOMPARE(static_cast<int>(ids.size()), kKnownTextTokens);
    QCOMPARE(std::vector<int>(ids.begin(), ids.begin() + static_cast<long>(kKnownIds.size())),
             kKnownIds);
    const std::string text = tok.decode_all(ids, kOnceUponATime.back());
    QVERIFY2(text.compare(0, kKnownText.size(), kKnownText) == 0,
             qPrintable(QStringLiteral("reference text:\n%1\nexpected to start with:\n%2")
                            .arg(QString::fromStdString(text), QString::fromStdString(kKnownText))));

    // Greedy is deterministic and reset() really forgets the cache.
    QCOMPARE(m_ref->greedy(kOnceUponATime, kKnownTextTokens), ids);
}

void TestReferenceModel::reference_rejects_bad_files_data()
{
    QTest::addColumn<QString>("mutation");
    QTest::newRow("missing file") << "missing";
    QTest::newRow("empty") << "empty";
    QTest::newRow("header cut") << "header_cut";
    QTest::newRow("weights cut by one float") << "truncated";
    QTest::newRow("one extra float") << "extra";
    QTest::newRow("negative vocab (unshared) without wcls") << "unshared";
    QTest::newRow("dim zero") << "dim0";
    QTest::newRow("negative layers") << "layers_neg";
    QTest::newRow("heads do not divide dim") << "heads7";
    QTest::newRow("kv heads do not divide heads") << "kv3";
    QTest::newRow("huge sizes") << "huge";
    QTest::newRow("NaN weight") << "nan";
}

void TestReferenceModel::reference_rejects_bad_files()
{
    QFETCH(QString, mutation);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("bad.bin"));
    std::string bytes = read_bytes(kReferenceBin);
    QVERIFY(bytes.size() > 1000);

    if (mutation == QLatin1String("empty"))
        bytes.clear();
    else if (mutation == QLatin1String("header_cut"))
        bytes.resize(20);
    else if (mutation == QLatin1String("truncated"))
        bytes.resize(bytes.size() - 4);
    else if (mutation == QLatin1String("extra"))
        bytes.append(4, '\0');
    else if (mutation == QLatin1String("unshared"))
        put_i32(bytes, 20, -512);
    else if (mutation == QLatin1String("dim0"))
        put_i32(bytes, 0, 0);
    else if (mutation == QLatin1String("layers_neg"))
        put_i32(bytes, 8, -5);
    else if (mutation == QLatin1String("heads7"))
        put_i32(bytes, 12, 7);
    else if (mutation == QLatin1String("kv3"))
        put_i32(bytes, 16, 3);
    else if (mutation == QLatin1String("huge")) {
        put_i32(bytes, 0, 0x7fffffff);
        put_i32(bytes, 4, 0x7fffffff);
    } else if (mutation == QLatin1String("nan")) {
        const float nan = NAN;
        std::memcpy(bytes.data() + 28 + 4 * 100, &nan, 4);
    }
    if (mutation != QLatin1String("missing"))
        write_bytes(path, bytes);

    bool threw = false;
    try {
        (void)Llama2cReference::load(path.toStdString());
    } catch (const std::runtime_error &e) {
        threw = true;
        QVERIFY2(std::string(e.what()).find(path.toStdString()) != std::string::npos, e.what());
    }
    QVERIFY2(threw, "a bad checkpoint was accepted");
}

void TestReferenceModel::reference_tokenizer_rejects_bad_files_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("name");
    auto le32 = [](int32_t v) { return QByteArray(reinterpret_cast<const char *>(&v), 4); };
    const QByteArray score = QByteArray(4, '\0');
    QTest::newRow("empty") << QByteArray() << "t.bin";
    QTest::newRow("no tokens") << le32(7) << "t.bin";
    QTest::newRow("record cut") << (le32(7) + score + le32(3) + "ab") << "t.bin";
    QTest::newRow("length over max") << (le32(2) + score + le32(3) + "abc") << "t.bin";
    QTest::newRow("negative length") << (le32(7) + score + le32(-1)) << "t.bin";
    QTest::newRow("protobuf cut") << QByteArray("\x0a\x10\x0a\x03<s>", 7) << "t.model";
}

void TestReferenceModel::reference_tokenizer_rejects_bad_files()
{
    QFETCH(QByteArray, bytes);
    QFETCH(QString, name);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(name);
    write_bytes(path, bytes.toStdString());
    bool threw = false;
    try {
        (void)Llama2cTokenizer::load(path.toStdString());
    } catch (const std::runtime_error &) {
        threw = true;
    }
    QVERIFY2(threw, "a bad tokenizer file was accepted");
}

void TestReferenceModel::add_engine_rows(bool multi_token_only)
{
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("prompt");
    // (tag, prompt, single token after BOS?)
    struct Prompt {
        const char *tag;
        const char *text;
        bool short_prompt;
    };
    const Prompt prompts[] = {
        {"once upon a time", "Once upon a time", false},
        {"tom and lily", "Tom and Lily went to the", false},
        {"the cat", "The cat", false},
        {"one word", "Lily", true},
        {"rare word", "Xylophone", false},
        {"non-ascii bytes", "Caf\xc3\xa9 \xe2\x98\x95 na\xc3\xafve", false},
        {"dialogue", "\"Can I play?\" asked Ben.\nMom said,", false},
        {"bos only", "", true},
    };
    const std::pair<const char *, QString> models[] = {{"gguf", kBundledGguf}, {"hf", kHfDir}};
    for (const auto &[fmt, path] : models) {
        for (const Prompt &p : prompts) {
            if (multi_token_only && p.short_prompt)
                continue;
            QTest::addRow("%s/%s", fmt, p.tag) << path << QString::fromUtf8(p.text);
        }
    }
}

void TestReferenceModel::engine_matches_reference_data() { add_engine_rows(false); }

// An engine exception fails the row with its message instead of aborting the whole suite.
#define LONGSCOPE_FAIL_ON_EXCEPTION(call)                                                     \
    do {                                                                                       \
        try {                                                                                  \
            call;                                                                              \
        } catch (const std::exception &e) {                                                    \
            QFAIL(qPrintable(QStringLiteral("exception: ") + QString::fromUtf8(e.what())));    \
        }                                                                                      \
    } while (false)

void TestReferenceModel::engine_matches_reference()
{
    QFETCH(QString, model);
    QFETCH(QString, prompt);
    LONGSCOPE_FAIL_ON_EXCEPTION(check_engine_matches_reference(model, prompt));
}

void TestReferenceModel::check_engine_matches_reference(const QString &model, const QString &prompt)
{
    std::unique_ptr<longscope::Model> m = longscope::Model::load(model.toStdString());
    QVERIFY(m);
    QCOMPARE(m->tokenizer().n_vocab(), m_ref->vocab_size());
    const std::vector<int32_t> prompt_ids = m->tokenizer().encode(prompt.toStdString(), true);
    QVERIFY(!prompt_ids.empty());
    QCOMPARE(prompt_ids.front(), 1);
    if (prompt == QLatin1String("Once upon a time"))
        QCOMPARE(to_int(prompt_ids), kOnceUponATime);

    // Reference: 200 greedy tokens with the logits each was chosen from.
    std::vector<std::vector<float>> ref_logits;
    const std::vector<int> ref_ids = m_ref->greedy(to_int(prompt_ids), kNewTokens, &ref_logits);

    longscope::Session session(*m, {/*n_ctx*/ 512, /*n_threads*/ 2});

    // 1. Logits, step by step along the reference's tokens: the prompt at once, then one
    //    generated token per eval. A failure is recorded (the first step whose numbers go
    //    wrong) and reported after the token comparison, so that both diagnostics show.
    QString logit_failure;
    {
        session.reset();
        double worst = 0.0;
        int worst_step = -1;
        for (int step = 0; step <= kLogitSteps; ++step) {
            std::span<const float> got;
            if (step == 0) {
                got = session.eval(std::span<const int32_t>(prompt_ids));
            } else {
                const int32_t tok = ref_ids[static_cast<size_t>(step - 1)];
                got = session.eval(std::span<const int32_t>(&tok, 1));
            }
            const std::vector<float> &want = ref_logits[static_cast<size_t>(step)];
            QCOMPARE(static_cast<int>(got.size()), m_ref->vocab_size());
            const Diff d = max_abs_diff(got, want);
            if (d.max_abs > worst) {
                worst = d.max_abs;
                worst_step = step;
            }
            if (d.max_abs > kLogitTolerance && logit_failure.isEmpty()) {
                const size_t at = static_cast<size_t>(std::max(d.at, 0));
                logit_failure =
                    QStringLiteral("logits differ beyond %1 first at step %2 (0 = after the prompt; "
                                   "position %3): max |engine - reference| = %4 at id %5 (engine "
                                   "%6, reference %7); reference %8; engine %9")
                        .arg(kLogitTolerance)
                        .arg(step)
                        .arg(static_cast<int>(prompt_ids.size()) - 1 + step)
                        .arg(d.max_abs, 0, 'g', 6)
                        .arg(d.at)
                        .arg(static_cast<double>(got[at]), 0, 'g', 9)
                        .arg(static_cast<double>(want[at]), 0, 'g', 9)
                        .arg(top2(want))
                        .arg(top2(std::vector<float>(got.begin(), got.end())));
                qWarning("%s", qPrintable(logit_failure));
            }
        }
        qInfo("logits: max |engine - reference| over %d steps = %.3g (step %d)", kLogitSteps + 1,
              worst, worst_step);
    }

    // 2. Greedy tokens: the engine's own generate() (fresh context, temperature 0, no EOS stop)
    //    must give exactly the reference's 200 ids.
    longscope::GenerateRequest req;
    req.prompt = prompt_ids;
    req.max_new_tokens = kNewTokens;
    req.sampling.temperature = 0;
    req.stop_at_eos = false;
    const longscope::GenerateResult res = longscope::generate(session, req);
    const std::vector<int> got_ids = to_int(res.tokens);
    if (got_ids != ref_ids) {
        size_t d = 0;
        while (d < got_ids.size() && d < ref_ids.size() && got_ids[d] == ref_ids[d])
            ++d;
        QString detail = QStringLiteral("engine gave %1 tokens, reference %2; first difference at "
                                        "generated token %3")
                             .arg(got_ids.size())
                             .arg(ref_ids.size())
                             .arg(d);
        if (d < got_ids.size() && d < ref_ids.size()) {
            const std::vector<float> &l = ref_logits[d];
            detail += QStringLiteral(": engine %1, reference %2; reference logits there: %3; "
                                     "reference logit of the engine's pick %4")
                          .arg(got_ids[d])
                          .arg(ref_ids[d])
                          .arg(top2(l))
                          .arg(static_cast<double>(l[static_cast<size_t>(got_ids[d])]), 0, 'g', 9);
        }
        qWarning("%s", qPrintable(detail));
        qWarning("engine:    %s", qPrintable(ids_to_string(got_ids)));
        qWarning("reference: %s", qPrintable(ids_to_string(ref_ids)));
    }
    QVERIFY2(logit_failure.isEmpty(), qPrintable(logit_failure));
    QCOMPARE(got_ids, ref_ids);
    QCOMPARE(static_cast<int>(res.tokens.size()), kNewTokens);
    QCOMPARE(res.stop, longscope::StopReason::MaxTokens);

    // Smallest top-2 margin along the way: how close to a tie greedy came (a small margin
    // with identical tokens shows the logits agree far below it).
    double margin = INFINITY;
    for (const auto &l : ref_logits) {
        std::vector<float> s = l;
        std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
        margin = std::min(margin, static_cast<double>(s[0] - s[1]));
    }
    qInfo("engine == reference for %d greedy tokens (smallest reference top-2 margin %.3g)",
          kNewTokens, margin);
}

void TestReferenceModel::engine_prefill_equals_stepwise_data() { add_engine_rows(true); }

void TestReferenceModel::engine_prefill_equals_stepwise()
{
    QFETCH(QString, model);
    QFETCH(QString, prompt);
    LONGSCOPE_FAIL_ON_EXCEPTION(check_prefill_equals_stepwise(model, prompt));
}

void TestReferenceModel::check_prefill_equals_stepwise(const QString &model, const QString &prompt)
{
    std::unique_ptr<longscope::Model> m = longscope::Model::load(model.toStdString());
    QVERIFY(m);
    const std::vector<int32_t> ids = m->tokenizer().encode(prompt.toStdString(), true);
    QVERIFY2(ids.size() >= 3, "the prompt should be several tokens");
    const size_t n_vocab = static_cast<size_t>(m->tokenizer().n_vocab());

    longscope::Session session(*m, {/*n_ctx*/ 512, /*n_threads*/ 2});

    // Token by token.
    std::vector<std::vector<float>> stepwise;
    for (int32_t id : ids) {
        const std::span<const float> l = session.eval(std::span<const int32_t>(&id, 1));
        QCOMPARE(l.size(), n_vocab);
        stepwise.emplace_back(l.begin(), l.end());
    }
    QCOMPARE(session.n_past(), static_cast<int>(ids.size()));

    // The whole prompt at once: last logits.
    session.reset();
    QCOMPARE(session.n_past(), 0);
    {
        const std::span<const float> l = session.eval(std::span<const int32_t>(ids));
        QCOMPARE(l.size(), n_vocab);
        const Diff d = max_abs_diff(l, stepwise.back());
        QVERIFY2(d.max_abs <= kPrefillTolerance,
                 qPrintable(QStringLiteral("batched vs stepwise last logits: max diff %1 at id %2")
                                .arg(d.max_abs, 0, 'g', 6)
                                .arg(d.at)));
    }

    // The whole prompt at once, every position's logits.
    session.reset();
    {
        const std::span<const float> all = session.eval(std::span<const int32_t>(ids), true);
        QCOMPARE(all.size(), ids.size() * n_vocab);
        double worst = 0.0;
        for (size_t t = 0; t < ids.size(); ++t) {
            const Diff d = max_abs_diff(all.subspan(t * n_vocab, n_vocab), stepwise[t]);
            worst = std::max(worst, d.max_abs);
            QVERIFY2(d.max_abs <= kPrefillTolerance,
                     qPrintable(QStringLiteral("batched (all_logits) vs stepwise at position %1: "
                                               "max diff %2 at id %3")
                                    .arg(t)
                                    .arg(d.max_abs, 0, 'g', 6)
                                    .arg(d.at)));
        }
        qInfo("%zu prompt tokens: max |batched - stepwise| over all positions = %.3g", ids.size(),
              worst);
    }

    // Split prefill: first half in one batch, the rest in another, equals stepwise too.
    session.reset();
    {
        const size_t half = ids.size() / 2;
        const std::span<const int32_t> all(ids);
        (void)session.eval(all.first(half));
        const std::span<const float> l = session.eval(all.subspan(half));
        const Diff d = max_abs_diff(l, stepwise.back());
        QVERIFY2(d.max_abs <= kPrefillTolerance,
                 qPrintable(QStringLiteral("two-batch prefill vs stepwise: max diff %1 at id %2")
                                .arg(d.max_abs, 0, 'g', 6)
                                .arg(d.at)));
    }
}

QTEST_APPLESS_MAIN(TestReferenceModel)
#include "tst_reference_model.moc"
