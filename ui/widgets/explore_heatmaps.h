// Needle-in-a-haystack grids side by side, one heatmap per run: prompt length across, needle
// depth down (0 at the top), each cell coloured by the probability of the answer (one colour
// scale for all, 0 to 1 or logarithmic from 1e-30, shown as a bar), a dot where greedy decoding retrieved the needle in
// every trial (a ring where in some), the cells a cancelled run did not reach hatched, and a
// dashed line where the lengths pass the model's trained context. Exports PNG and CSV.
#pragma once

#include "core/explore_needle.h"

#include <QColor>
#include <QVector>
#include <QWidget>

class QPainter;

namespace longscope::ui {

class ExploreHeatmaps : public QWidget {
    Q_OBJECT

public:
    explicit ExploreHeatmaps(QWidget *parent = nullptr);

    void setRuns(const QVector<NeedleRunResult> &runs);
    const QVector<NeedleRunResult> &runs() const { return m_runs; }

    // The colour of a position in [0, 1] on the scale (perceptually ordered, dark to light).
    static QColor colorFor(double position);
    // Where a probability sits on the scale: itself, or on the log scale log10(p) from
    // kLogFloor (0) to 0 (1), so a weak model's tiny probabilities still read apart.
    static constexpr double kLogFloor = -30;
    // "0.42"; below 0.01 in powers of ten ("3e-22").
    static QString probabilityText(double probability);
    double scalePosition(double probability) const;
    void setLogScale(bool on);
    bool isLogScale() const { return m_logScale; }
    // Heatmaps drawn, and cells marked as retrieved (every trial) over all of them.
    int heatmapCount() const { return int(m_runs.size()); }
    int retrievedMarkCount() const;
    // Heatmaps with a trained-context line (some lengths within it and some beyond).
    int trainedContextLineCount() const;

    // Draws everything into `rect` (the widget and the PNG share it).
    void paint(QPainter &painter, const QRect &rect) const;
    // Width and height 0: the size on screen (at least 960 x 540).
    bool exportPng(const QString &path, QString *error = nullptr, int width = 0, int height = 0) const;
    bool exportCsv(const QString &path, QString *error = nullptr) const;

    QSize sizeHint() const override { return {900, 520}; }

protected:
    void paintEvent(QPaintEvent *event) override;
    // A frame shows the focus (on screen only, never in the PNG).
    void focusInEvent(QFocusEvent *event) override;
    void focusOutEvent(QFocusEvent *event) override;

private:
    void paintRun(QPainter &painter, const NeedleRunResult &run, const QRect &rect) const;
    void paintScale(QPainter &painter, const QRect &rect) const;

    QVector<NeedleRunResult> m_runs;
    bool m_logScale = false;
};

} // namespace longscope::ui
