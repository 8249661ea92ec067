// Perplexity by position against the independent llama2.c reference, and its windowing.
#include "support/llama2c_reference.h"

#include "longscope/errors.h"
#include "longscope/perplexity.h"

#include <QtTest>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace longscope;

namespace {

std::vector<int32_t> book_tokens(const Model &m, size_t n)
{
    std::ifstream in(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto ids = m.tokenizer().encode(ss.str().substr(3000, n * 8), false);
    ids.resize(n);
    return ids;
}

// -log softmax(logits)[target] in double.
double nll_of(const std::vector<float> &logits, int target)
{
    double m = -INFINITY, sum = 0;
    for (float x : logits)
        m = std::max(m, double(x));
    for (float x : logits)
        sum += std::exp(double(x) - m);
    return -(double(logits[size_t(target)]) - m - std::log(sum));
}

} // namespace

class TestPerplexity : public QObject {
    Q_OBJECT
    std::unique_ptr<Model> m_model;

private slots:
    void initTestCase() { m_model = Model::load(LONGSCOPE_BUNDLED_MODEL); }

    void matches_the_reference_data()
    {
        QTest::addColumn<int>("ctx");
        QTest::addColumn<int>("stride");
        QTest::newRow("one window") << 200 << 0;
        QTest::newRow("windows of 64") << 64 << 0;
        QTest::newRow("overlapping windows") << 64 << 20;
    }
    void matches_the_reference()
    {
        // Truth: the llama2.c reference fed each window token by token (BOS first), scoring
        // every text token once, in the first window where it is new.
        QFETCH(int, ctx);
        QFETCH(int, stride);
        const auto text = book_tokens(*m_model, 150);
        PerplexityOptions o;
        o.ctx = ctx;
        o.stride = stride;
        o.batch = 32;
        o.bucket = 16;
        PerplexityResult r = perplexity(*m_model, text, o);

        auto ref = longscope_test::Llama2cReference::load(LONGSCOPE_TEST_DATA "/stories260K/stories260K.bin");
        const int per_window = ctx - 1, step = stride > 0 ? stride : per_window;
        std::vector<double> want;
        std::vector<int> want_pos;
        for (int start = 0, scored_to = 0; scored_to < int(text.size()); start += step) {
            const int end = std::min(int(text.size()), start + per_window);
            ref.reset();
            std::vector<float> logits = ref.forward(1, 0);
            for (int i = start; i < end; ++i) {
                if (i >= scored_to) {
                    want.push_back(nll_of(logits, text[size_t(i)]));
                    want_pos.push_back(i - start + 1);
                }
                if (i + 1 < end)
                    logits = ref.forward(text[size_t(i)], i - start + 1);
            }
            scored_to = end;
        }
        QCOMPARE(r.n_scored, int64_t(text.size()));
        QCOMPARE(r.nll.size(), want.size());
        QCOMPARE(r.positions, want_pos);
        double sum = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            QVERIFY2(std::fabs(r.nll[i] - want[i]) < 1e-3, qPrintable(QString("token %1: %2 vs %3").arg(i).arg(r.nll[i]).arg(want[i])));
            sum += want[i];
        }
        QVERIFY(std::fabs(r.mean_nll - sum / double(want.size())) < 1e-4);
        // The curve adds up to the whole.
        int64_t count = 0;
        double weighted = 0;
        for (const PositionBucket &b : r.curve) {
            count += b.count;
            weighted += b.mean_nll * double(b.count);
            QVERIFY(b.end - b.begin <= 16);
        }
        QCOMPARE(count, r.n_scored);
        QVERIFY(std::fabs(weighted / double(count) - r.mean_nll) < 1e-5); // per-token values are stored as float
        // By the token's index in the text: the reference's values (each text token once, in
        // order) averaged over every 16.
        QCOMPARE(r.text_curve.size(), (text.size() + 15) / 16);
        for (size_t b = 0; b < r.text_curve.size(); ++b) {
            const size_t begin = b * 16, end = std::min(text.size(), begin + 16);
            double want_sum = 0;
            for (size_t i = begin; i < end; ++i)
                want_sum += want[i];
            QCOMPARE(r.text_curve[b].begin, int(begin));
            QCOMPARE(r.text_curve[b].end, int(end));
            QCOMPARE(r.text_curve[b].count, int64_t(end - begin));
            QVERIFY(std::fabs(r.text_curve[b].mean_nll - want_sum / double(end - begin)) < 1e-3);
        }
    }

    void auto_alpha_is_chosen_per_step()
    {
        // With auto alpha the prefill is scored in steps; each step uses the alpha for the
        // length reached at its end. Steps ending before the formula passes 1 (488 tokens for
        // this 512-token model) score exactly as alpha 1.
        const auto text = book_tokens(*m_model, 1023);
        PerplexityOptions plain;
        plain.ctx = 1024;
        plain.batch = 128;
        PerplexityOptions aut = plain;
        aut.settings.rope.ntk_auto = true;
        PerplexityResult a = perplexity(*m_model, text, plain), b = perplexity(*m_model, text, aut);
        for (size_t i = 0; i < a.nll.size(); ++i) {
            if (a.positions[i] < 384) // predicted from logits of steps ending at 128, 256, 384
                QCOMPARE(b.nll[i], a.nll[i]);
        }
        QVERIFY(std::fabs(a.mean_nll - b.mean_nll) > 1e-4);
        // One step for the whole window: alpha from the full length everywhere.
        PerplexityOptions one = aut;
        one.batch = 1024;
        QVERIFY(std::fabs(perplexity(*m_model, text, one).mean_nll - b.mean_nll) > 1e-5);
    }

    void bad_input()
    {
        PerplexityOptions o;
        o.ctx = 64;
        const std::vector<int32_t> one{5};
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, perplexity(*m_model, one, o));
        o.stride = 64;
        const auto text = book_tokens(*m_model, 100);
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, perplexity(*m_model, text, o));
        o.stride = 0;
        o.batch = 0;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, perplexity(*m_model, text, o));
    }

    void cancel_keeps_what_was_scored()
    {
        const auto text = book_tokens(*m_model, 300);
        PerplexityOptions o;
        o.ctx = 64;
        o.batch = 16;
        int calls = 0;
        o.progress = [&](int64_t, int64_t) { return ++calls < 3; };
        PerplexityResult r = perplexity(*m_model, text, o);
        QVERIFY(r.cancelled);
        QVERIFY(r.n_scored > 0 && r.n_scored < 300);
    }

    void reports_each_steps_metrics()
    {
        // Two windows of 64 (63 text tokens each), evaluated 16 tokens at a time: 8 steps.
        const auto text = book_tokens(*m_model, 126);
        PerplexityOptions o;
        o.ctx = 64;
        o.batch = 16;
        std::vector<StepMetrics> steps;
        o.metrics = [&](const StepMetrics &m) { steps.push_back(m); };
        const PerplexityResult r = perplexity(*m_model, text, o);
        QCOMPARE(r.windows, 2);
        QCOMPARE(steps.size(), size_t(8));
        int tokens = 0;
        for (const StepMetrics &m : steps) {
            tokens += m.n_tokens;
            QVERIFY(m.memory.peak_total >= m.memory.total && m.memory.total > 0);
            QCOMPARE(m.settings.context_limit, 64);
        }
        QCOMPARE(tokens, 2 * 64);
    }
};

QTEST_APPLESS_MAIN(TestPerplexity)
#include "tst_perplexity.moc"
