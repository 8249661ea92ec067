// Sampling against its definitions: greedy is argmax, top-k / top-p keep exactly the tokens
// they should, draws follow the softmax at the temperature, the seed fixes the stream.
#include "longscope/errors.h"
#include "longscope/sampler.h"

#include <QtTest>

#include <cmath>
#include <map>
#include <set>
#include <vector>

using namespace longscope;

namespace {

std::vector<double> softmax(const std::vector<float> &l, double temp)
{
    double m = *std::max_element(l.begin(), l.end()), sum = 0;
    std::vector<double> p(l.size());
    for (size_t i = 0; i < l.size(); ++i)
        sum += p[i] = std::exp((l[i] - m) / temp);
    for (double &x : p)
        x /= sum;
    return p;
}

std::map<int32_t, int> histogram(const SamplingParams &params, const std::vector<float> &logits, int n)
{
    Sampler s(params);
    std::map<int32_t, int> h;
    for (int i = 0; i < n; ++i) {
        std::vector<float> l = logits;
        h[s.sample(l, {})]++;
    }
    return h;
}

const std::vector<float> k_logits = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f, 0.5f, -3.0f};

} // namespace

class TestSampler : public QObject {
    Q_OBJECT

private slots:
    void greedy_is_argmax()
    {
        SamplingParams p;
        p.temperature = 0;
        Sampler s(p);
        std::vector<float> l = k_logits;
        QCOMPARE(s.sample(l, {}), 1);
        std::vector<float> ties = {0.5f, 2.0f, 2.0f};
        QCOMPARE(s.sample(ties, {}), 1); // lowest index on ties
    }

    void distribution_follows_softmax_data()
    {
        QTest::addColumn<float>("temperature");
        QTest::newRow("t=1") << 1.0f;
        QTest::newRow("t=0.5") << 0.5f;
        QTest::newRow("t=2") << 2.0f;
    }
    void distribution_follows_softmax()
    {
        QFETCH(float, temperature);
        SamplingParams p;
        p.temperature = temperature;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.seed = 123;
        const int n = 200000;
        auto h = histogram(p, k_logits, n);
        auto want = softmax(k_logits, temperature);
        for (size_t i = 0; i < want.size(); ++i) {
            const double got = h[int32_t(i)] / double(n);
            // 5 standard deviations of a binomial proportion, plus a floor for tiny p.
            const double sd = std::sqrt(want[i] * (1 - want[i]) / n);
            QVERIFY2(std::fabs(got - want[i]) <= 5 * sd + 1e-4,
                     qPrintable(QString("token %1: %2 vs %3").arg(i).arg(got).arg(want[i])));
        }
    }

    void top_k_keeps_the_k_best()
    {
        SamplingParams p;
        p.temperature = 5.0f; // flat enough that every kept token shows up
        p.top_k = 3;
        p.top_p = 1.0f;
        auto h = histogram(p, k_logits, 20000);
        std::set<int32_t> seen;
        for (auto &[id, c] : h)
            seen.insert(id);
        QCOMPARE(seen, (std::set<int32_t>{1, 5, 2}));
    }

    void top_p_keeps_the_smallest_prefix()
    {
        SamplingParams p;
        p.temperature = 1.0f;
        p.top_k = 0;
        auto probs = softmax(k_logits, 1.0);
        // Sorted: 1 (3.0), 5 (2.9), 2 (2.5), 0 (1.0), ... Choose p just above the first two.
        p.top_p = float(probs[1] + probs[5] + 1e-3);
        auto h = histogram(p, k_logits, 20000);
        std::set<int32_t> seen;
        for (auto &[id, c] : h)
            seen.insert(id);
        QCOMPARE(seen, (std::set<int32_t>{1, 5, 2}));
        p.top_p = float(probs[1] * 0.5); // less than the best token alone: only it
        auto one = histogram(p, k_logits, 1000);
        QCOMPARE(one.size(), size_t(1));
        QCOMPARE(one.begin()->first, 1);
    }

    void repetition_penalty()
    {
        SamplingParams p;
        p.temperature = 0;
        p.repeat_penalty = 2.0f;
        Sampler s(p);
        std::vector<float> l = k_logits;
        // Token 1 (3.0) seen twice is penalised once: 1.5 < 2.9, so token 5 wins.
        std::vector<int32_t> history = {1, 1, 3};
        QCOMPARE(s.sample(l, history), 5);
        QCOMPARE(l[1], 1.5f);
        QCOMPARE(l[3], -2.0f); // negative logits are multiplied
        QCOMPARE(l[5], 2.9f);
    }

    void seed_fixes_the_stream()
    {
        SamplingParams p;
        p.temperature = 1.0f;
        p.top_k = 0;
        p.top_p = 1.0f;
        std::vector<int32_t> a, b, c;
        for (auto [seed, out] : {std::pair{7ull, &a}, {7ull, &b}, {8ull, &c}}) {
            p.seed = seed;
            Sampler s(p);
            for (int i = 0; i < 200; ++i) {
                std::vector<float> l = k_logits;
                out->push_back(s.sample(l, {}));
            }
        }
        QCOMPARE(a, b);
        QVERIFY(a != c);
    }

    void invalid_parameters_data()
    {
        QTest::addColumn<float>("temperature");
        QTest::addColumn<int>("top_k");
        QTest::addColumn<float>("top_p");
        QTest::addColumn<float>("penalty");
        QTest::newRow("nan temperature") << NAN << 40 << 0.9f << 1.0f;
        QTest::newRow("negative temperature") << -0.1f << 40 << 0.9f << 1.0f;
        QTest::newRow("negative top-k") << 0.8f << -1 << 0.9f << 1.0f;
        QTest::newRow("top-p 0") << 0.8f << 40 << 0.0f << 1.0f;
        QTest::newRow("top-p 1.5") << 0.8f << 40 << 1.5f << 1.0f;
        QTest::newRow("penalty 0") << 0.8f << 40 << 0.9f << 0.0f;
        QTest::newRow("penalty inf") << 0.8f << 40 << 0.9f << float(INFINITY);
    }
    void invalid_parameters()
    {
        QFETCH(float, temperature);
        QFETCH(int, top_k);
        QFETCH(float, top_p);
        QFETCH(float, penalty);
        SamplingParams p;
        p.temperature = temperature;
        p.top_k = top_k;
        p.top_p = top_p;
        p.repeat_penalty = penalty;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, Sampler{p});
    }
};

QTEST_APPLESS_MAIN(TestSampler)
#include "tst_sampler.moc"
