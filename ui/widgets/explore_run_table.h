// What each plotted run cost and how it did, one row per run in the plot's colours: perplexity
// overall, within the trained context and beyond it, past the run's own context (the text
// after the first context was full: what the overflow policy made of it), tokens scored,
// tokens/s and peak memory (from the run's StepMetrics) and time.
#pragma once

#include "core/perplexity_run.h"

#include <QTableWidget>

namespace longscope::ui {

class ExploreRunTable : public QTableWidget {
    Q_OBJECT

public:
    enum Column { Run, Perplexity, WithinTrained, BeyondTrained, PastContext, Tokens, Speed, PeakMemory, Time, ColumnCount };

    explicit ExploreRunTable(QWidget *parent = nullptr);

    // Row i is drawn in ExplorePlot::colorFor(i).
    void setRuns(const QVector<PerplexityRunResult> &runs);

    // Perplexity over the curve points that end within the trained context / begin at or
    // beyond it (0 when there are none).
    static double perplexityWithin(const PerplexityRunResult &run);
    static double perplexityBeyond(const PerplexityRunResult &run);
    // Perplexity over the text_curve points that begin at or past the run's context length
    // (token index in the text >= ctx: scored after the first context was full; 0 when the
    // run never got there, stopped there, or was saved without a text curve).
    static double perplexityPastContext(const PerplexityRunResult &run);
};

} // namespace longscope::ui
