// Live plots against token position (StepMetrics::position): memory by category from the
// engine's ledger, in MiB, and tokens/s (prefill and decode as separate graphs). Metrics
// arriving from the worker are buffered and the plots catch up on a ~10 Hz timer with a
// queued replot, so a fast stream of steps never stalls the UI. Setting changes are marked
// with vertical lines on both plots. Every step is kept for the CSV export.
#pragma once

#include "longscope/metrics.h"

#include <QVector>
#include <QWidget>

class QCPGraph;
class QCustomPlot;
class QTimer;

namespace longscope::ui {

class MetricsPlots : public QWidget {
    Q_OBJECT

public:
    explicit MetricsPlots(QWidget *parent = nullptr);

    // Buffered; drawn at the next refresh. A position lower than the last one starts a new
    // context: the plotted curves restart (the CSV keeps every step).
    void addMetrics(const longscope::StepMetrics &metrics);
    // A vertical marker at `position` on both plots, with a short label.
    void addMarker(int position, const QString &label);
    void clear();

    // Adds what is buffered to the curves now (the replot is still queued).
    void flush();
    // flush() and replot at once (before grabbing the window, say).
    void replotNow();

    // Both plots side by side in one PNG. False with `error` set on failure.
    bool exportPng(const QString &path, QString *error = nullptr);
    // metrics_csv_header() and one metrics_csv_row() per step received since clear().
    bool exportCsv(const QString &path, QString *error = nullptr) const;

    int stepCount() const { return int(m_history.size()); }
    int plottedPointCount() const; // points in the decode + prefill speed graphs
    int markerCount() const { return m_markerCount; }
    QCustomPlot *memoryPlot() const { return m_memory; }
    QCustomPlot *speedPlot() const { return m_speed; }

private:
    void setUpPlot(QCustomPlot *plot, const QString &title, const QString &yLabel);
    QCPGraph *addGraph(QCustomPlot *plot, const QString &name, const QColor &color, bool scatter);
    void clearCurves();
    void rescale();

    QCustomPlot *m_memory = nullptr;
    QCustomPlot *m_speed = nullptr;
    QCPGraph *m_weights = nullptr;
    QCPGraph *m_kvReserved = nullptr;
    QCPGraph *m_kvResident = nullptr;
    QCPGraph *m_scratch = nullptr;
    QCPGraph *m_total = nullptr;
    QCPGraph *m_prefill = nullptr;
    QCPGraph *m_decode = nullptr;
    QCPGraph *m_decodeAvg = nullptr;
    QTimer *m_timer = nullptr;

    QVector<longscope::StepMetrics> m_pending;
    QVector<longscope::StepMetrics> m_history;
    int m_lastPosition = -1;
    int m_markerCount = 0;
    double m_maxPosition = 0;
    double m_decodeEma = 0;
};

} // namespace longscope::ui
