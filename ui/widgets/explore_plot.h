// Perplexity against position for several runs on one QCustomPlot: one colour per run (keys
// cached before RoPE drawn dashed), a legend with each run's label, a log or linear y axis,
// and a dashed vertical line at the model's trained context with the positions beyond it
// shaded. Exports the plot as PNG and the curves as CSV.
#pragma once

#include "core/perplexity_run.h"

#include <QByteArray>
#include <QColor>
#include <QIcon>
#include <QImage>
#include <QStringList>
#include <QVector>
#include <QWidget>

class QCustomPlot;
class QCPLayoutGrid;
class QCPTextElement;

namespace longscope::ui {

class ExplorePlot : public QWidget {
    Q_OBJECT

public:
    explicit ExplorePlot(QWidget *parent = nullptr);

    // The runs to overlay, drawn in this order; run i gets colorFor(i).
    void setRuns(const QVector<PerplexityRunResult> &runs);
    const QVector<PerplexityRunResult> &runs() const { return m_runs; }
    static QColor colorFor(int index);
    // A short line in a run's colour (dashed for keys before RoPE) for lists and tables; an
    // invalid colour gives a blank icon.
    static QIcon lineIcon(const QColor &color, bool dashed);

    void setLogScale(bool on);
    bool isLogScale() const { return m_logScale; }
    // x: the token's index in the text (PerplexityRunResult::text_curve) instead of its
    // position in the context; the dashed lines then mark where each run's context is full.
    // Runs saved before the text curve was kept draw nothing there.
    void setAcrossText(bool on);
    bool isAcrossText() const { return m_acrossText; }
    // The curve a run draws in the current mode.
    const QVector<PerplexityPoint> &shownCurve(const PerplexityRunResult &run) const;

    int curveCount() const;
    // Vertical "trained context" lines (one per distinct trained context among the runs);
    // across the text, "context full" lines (one per distinct context length).
    int trainedContextLineCount() const { return m_trainedLines; }
    QCustomPlot *plot() const { return m_plot; }

    void replotNow();
    // The plot alone at twice the size of `width` x `height`; 0: its size on screen (at least
    // 960 x 540). The subtitle is wrapped to that width, so nothing is cut off.
    QImage renderImage(int width = 0, int height = 0);
    bool exportPng(const QString &path, QString *error = nullptr, int width = 0, int height = 0);
    bool exportCsv(const QString &path, QString *error = nullptr) const;
    // "label,settings,bucket_begin,bucket_end,count,mean_nll,perplexity" and one row per
    // curve point of every run.
    // The subtitle as drawn (lines wrapped to the width the legend leaves).
    QString subtitle() const;
    static constexpr double kExportScale = 2.0;
    // Across the text, bucket_begin and bucket_end are indices in the text.
    static QByteArray csv(const QVector<PerplexityRunResult> &runs, bool acrossText = false);

signals:
    void logScaleChanged(bool on);

protected:
    // With the focus (Tab reaches the plot): Home shows every curve again after a drag or a
    // zoom; a frame shows the focus.
    void keyPressEvent(QKeyEvent *event) override;
    void paintEvent(QPaintEvent *event) override;
    void focusInEvent(QFocusEvent *event) override;
    void focusOutEvent(QFocusEvent *event) override;

private:
    void rebuild();
    void rescale();
    void fitSubtitle(int plotWidth);

    QCustomPlot *m_plot = nullptr;
    QCPTextElement *m_subtitle = nullptr;
    QCPLayoutGrid *m_legendColumn = nullptr;
    QStringList m_subtitleParts;
    QVector<PerplexityRunResult> m_runs;
    bool m_logScale = true;
    bool m_acrossText = false;
    int m_trainedLines = 0;
};

} // namespace longscope::ui
