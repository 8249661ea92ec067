#include "widgets/explore_run_table.h"

#include "core/settings_json.h"
#include "widgets/explore_plot.h"

#include <QHeaderView>

#include <cmath>

namespace longscope::ui {

namespace {

template <typename Keep>
double meanPerplexity(const QVector<PerplexityPoint> &points, Keep keep)
{
    double sum = 0;
    qint64 count = 0;
    for (const PerplexityPoint &p : points) {
        if (keep(p)) {
            sum += p.mean_nll * double(p.count);
            count += p.count;
        }
    }
    return count > 0 ? std::exp(sum / double(count)) : 0;
}

QString number(double v)
{
    return v <= 0 ? QStringLiteral("—") : QLocale().toString(v, 'f', v < 100 ? 1 : 0);
}

QTableWidgetItem *cell(const QString &text, Qt::Alignment alignment = Qt::AlignRight | Qt::AlignVCenter)
{
    auto *item = new QTableWidgetItem(text);
    item->setTextAlignment(alignment);
    item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable);
    return item;
}

} // namespace

ExploreRunTable::ExploreRunTable(QWidget *parent) : QTableWidget(0, ColumnCount, parent)
{
    setObjectName(QStringLiteral("exploreRunTable"));
    setHorizontalHeaderLabels({tr("Run"), tr("Perplexity"), tr("Within trained"), tr("Beyond trained"),
                               tr("Past the context"), tr("Tokens"),
                               tr("Tokens/s"), tr("Peak memory"), tr("Time")});
    horizontalHeaderItem(WithinTrained)->setToolTip(tr("Perplexity of the positions within the model's trained context"));
    horizontalHeaderItem(BeyondTrained)->setToolTip(tr("Perplexity of the positions beyond the model's trained context"));
    horizontalHeaderItem(PastContext)
        ->setToolTip(tr("Perplexity of the text after the run's first context was full: what its overflow policy "
                        "(shift, truncation) made of the rest of the text"));
    horizontalHeaderItem(Speed)->setToolTip(tr("Tokens evaluated per second of evaluation"));
    horizontalHeaderItem(PeakMemory)->setToolTip(tr("Peak of weights + KV cache + scratch during the run"));
    verticalHeader()->hide();
    verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 8);
    horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    horizontalHeader()->setSectionResizeMode(Run, QHeaderView::Stretch);
    horizontalHeader()->setHighlightSections(false);
    setSelectionMode(QAbstractItemView::NoSelection);
    setEditTriggers(QAbstractItemView::NoEditTriggers);
    setShowGrid(false);
    setAlternatingRowColors(true);
    setWordWrap(false);
    // Reached by Tab (the arrows then walk the cells); named for a screen reader.
    setFocusPolicy(Qt::StrongFocus);
    setTabKeyNavigation(false);
    setAccessibleName(tr("Plotted runs: perplexity and cost"));
}

double ExploreRunTable::perplexityWithin(const PerplexityRunResult &run)
{
    return meanPerplexity(run.curve, [&](const PerplexityPoint &p) { return run.n_ctx_train <= 0 || p.end <= run.n_ctx_train; });
}

double ExploreRunTable::perplexityBeyond(const PerplexityRunResult &run)
{
    return meanPerplexity(run.curve, [&](const PerplexityPoint &p) { return run.n_ctx_train > 0 && p.begin >= run.n_ctx_train; });
}

double ExploreRunTable::perplexityPastContext(const PerplexityRunResult &run)
{
    return meanPerplexity(run.text_curve, [&](const PerplexityPoint &p) { return run.ctx > 0 && p.begin >= run.ctx; });
}

void ExploreRunTable::setRuns(const QVector<PerplexityRunResult> &runs)
{
    setRowCount(0);
    setRowCount(int(runs.size()));
    for (int i = 0; i < runs.size(); ++i) {
        const PerplexityRunResult &run = runs[i];
        auto *name = cell(run.cancelled ? tr("%1 (cancelled)").arg(run.label) : run.label, Qt::AlignLeft | Qt::AlignVCenter);
        name->setIcon(ExplorePlot::lineIcon(ExplorePlot::colorFor(i), run.settings.rope.store_kv_before_rope));
        name->setToolTip(tr("%1\n%2 · windows of %L3 · buckets of %L4\n%5")
                             .arg(describeSettings(run.settings), run.model_name)
                             .arg(run.ctx)
                             .arg(run.bucket)
                             .arg(run.book_title));
        setItem(i, Run, name);
        setItem(i, Perplexity, cell(number(run.perplexity())));
        setItem(i, WithinTrained, cell(number(perplexityWithin(run))));
        setItem(i, BeyondTrained, cell(number(perplexityBeyond(run))));
        setItem(i, PastContext, cell(number(perplexityPastContext(run))));
        setItem(i, Tokens, cell(QLocale().toString(run.n_scored)));
        setItem(i, Speed, cell(number(run.tokens_per_second)));
        setItem(i, PeakMemory, cell(run.peak_memory_bytes > 0
                                        ? tr("%L1 MiB").arg(double(run.peak_memory_bytes) / (1024.0 * 1024.0), 0, 'f', 1)
                                        : QStringLiteral("—")));
        setItem(i, Time, cell(tr("%L1 s").arg(run.seconds, 0, 'f', run.seconds < 10 ? 1 : 0)));
    }
}

} // namespace longscope::ui
