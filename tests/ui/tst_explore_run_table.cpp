// The Explore run table's summary columns, computed here from the points directly: perplexity
// within and beyond the trained context (by position in the context) and past the run's own
// context (by the token's index in the text), with "—" where a run has no such tokens.
#include "offscreen.h"

#include "widgets/explore_run_table.h"

#include <QLocale>
#include <QTest>

#include <cmath>

using namespace longscope::ui;

namespace {

PerplexityPoint point(int begin, int end, qint64 count, double nll) { return {begin, end, count, nll}; }

QString shown(double perplexity) { return QLocale().toString(perplexity, 'f', perplexity < 100 ? 1 : 0); }

// A streamed run over 4 contexts of 64 tokens: the first context scored at NLL 2, the rest
// at 3 and 4 (two points), by position in the context 0..63 and by index in the text.
PerplexityRunResult streamedRun()
{
    PerplexityRunResult run;
    run.label = QStringLiteral("shift");
    run.ctx = 64;
    run.bucket = 32;
    run.n_ctx_train = 48;
    run.streamed = true;
    run.curve = {point(0, 32, 31, 2.0), point(32, 64, 224, 3.5)};
    run.text_curve = {point(0, 32, 31, 2.0), point(32, 64, 32, 2.0), point(64, 160, 96, 3.0), point(160, 256, 96, 4.0)};
    run.n_scored = 255;
    return run;
}

} // namespace

class TestExploreRunTable : public QObject {
    Q_OBJECT

private slots:
    void pastTheContextUsesTheTextCurve()
    {
        const PerplexityRunResult run = streamedRun();
        // Text tokens 64..255: 96 at NLL 3 and 96 at NLL 4.
        QCOMPARE(ExploreRunTable::perplexityPastContext(run), std::exp((96 * 3.0 + 96 * 4.0) / 192.0));
        // Within the trained 48: only the point that ends by 48; beyond: points from 48 on.
        QCOMPARE(ExploreRunTable::perplexityWithin(run), std::exp(2.0));
        QCOMPARE(ExploreRunTable::perplexityBeyond(run), 0.0);
    }

    void aRunThatNeverWentPastShowsADash()
    {
        PerplexityRunResult stopped = streamedRun();
        stopped.text_curve.resize(2); // `error`: stopped where the context was full
        stopped.stopped = QStringLiteral("the context is full");
        PerplexityRunResult old = streamedRun();
        old.text_curve.clear(); // saved before the text curve was kept
        QCOMPARE(ExploreRunTable::perplexityPastContext(stopped), 0.0);
        QCOMPARE(ExploreRunTable::perplexityPastContext(old), 0.0);

        ExploreRunTable table;
        table.setRuns({streamedRun(), stopped, old});
        QCOMPARE(table.columnCount(), int(ExploreRunTable::ColumnCount));
        QCOMPARE(table.horizontalHeaderItem(ExploreRunTable::PastContext)->text(), QStringLiteral("Past the context"));
        QCOMPARE(table.item(0, ExploreRunTable::PastContext)->text(), shown(std::exp(3.5)));
        QCOMPARE(table.item(1, ExploreRunTable::PastContext)->text(), QStringLiteral("—"));
        QCOMPARE(table.item(2, ExploreRunTable::PastContext)->text(), QStringLiteral("—"));
        QCOMPARE(table.item(0, ExploreRunTable::Tokens)->text(), QLocale().toString(qint64(255)));
    }
};

QTEST_MAIN(TestExploreRunTable)
#include "tst_explore_run_table.moc"
