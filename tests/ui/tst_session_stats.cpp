// SessionStats: the context length and speeds the status bar shows, from step metrics and
// reply summaries.
#include "core/engine_worker.h"
#include "core/session_stats.h"

#include <QtTest>

using namespace longscope::ui;
using longscope::StepMetrics;
using longscope::StepPhase;

namespace {

StepMetrics step(StepPhase phase, int position, double tokensPerSecond, double alpha = 1.0)
{
    StepMetrics m;
    m.phase = phase;
    m.position = position;
    m.tokens_per_second = tokensPerSecond;
    m.ntk_alpha = alpha;
    return m;
}

} // namespace

class TestSessionStats : public QObject {
    Q_OBJECT

private slots:
    void stepsAndReplies()
    {
        SessionStats s;
        QCOMPARE(s.contextUsed(), 0);
        QCOMPARE(s.ntkAlpha(), 1.0);
        s.addStep(step(StepPhase::Prefill, 20, 800.0, 2.0));
        QCOMPARE(s.contextUsed(), 20);
        QCOMPARE(s.ntkAlpha(), 2.0);
        QCOMPARE(s.prefillRate(), 800.0);
        QCOMPARE(s.decodeRate(), 0.0);
        // The first decode step sets the rate, the next ones are smoothed.
        s.addStep(step(StepPhase::Decode, 21, 100.0));
        QCOMPARE(s.decodeRate(), 100.0);
        s.addStep(step(StepPhase::Decode, 22, 200.0));
        QCOMPARE(s.decodeRate(), 0.85 * 100.0 + 0.15 * 200.0);
        QCOMPARE(s.contextUsed(), 22);

        // A reply's own averages win; zeros leave the running rates alone.
        GenerationSummary summary;
        summary.decode_tokens_per_second = 150.0;
        s.addReply(summary);
        QCOMPARE(s.decodeRate(), 150.0);
        QCOMPARE(s.prefillRate(), 800.0);

        s.startReply();
        QCOMPARE(s.decodeRate(), 0.0);
        QCOMPARE(s.prefillRate(), 800.0);
        s.clearContext();
        QCOMPARE(s.contextUsed(), 0);
        s.setContextUsed(300);
        QCOMPARE(s.contextUsed(), 300);
        s.reset();
        QCOMPARE(s.contextUsed(), 0);
        QCOMPARE(s.prefillRate(), 0.0);
    }

    void decodeThreadsIsTheCountOfMostRecentSteps()
    {
        SessionStats s;
        QCOMPARE(s.decodeThreads(), 0);
        auto decodeOn = [&](int threads) {
            StepMetrics m = step(StepPhase::Decode, 30, 20.0);
            m.threads = threads;
            s.addStep(m);
        };
        for (int i = 0; i < 8; ++i)
            decodeOn(2);
        QCOMPARE(s.decodeThreads(), 2);
        // A trial's steps on one thread among them leave the shown count alone.
        for (int i = 0; i < 3; ++i)
            decodeOn(1);
        QCOMPARE(s.decodeThreads(), 2);
        // Once most of the window ran on one thread, that is the count.
        for (int i = 0; i < 3; ++i)
            decodeOn(1);
        QCOMPARE(s.decodeThreads(), 1);
        // Prefill steps do not count.
        StepMetrics prefill = step(StepPhase::Prefill, 40, 500.0);
        prefill.threads = 2;
        for (int i = 0; i < 8; ++i)
            s.addStep(prefill);
        QCOMPARE(s.decodeThreads(), 1);
        s.reset();
        QCOMPARE(s.decodeThreads(), 0);
    }
};

QTEST_GUILESS_MAIN(TestSessionStats)
#include "tst_session_stats.moc"
