// Live plots against token position (StepMetrics::position): memory by category from the
// engine's ledger, in MiB, and speed with decode (left axis) and prefill (right axis) on axes
// of their own, so a fast prefill never flattens decode to zero. Metrics arriving from the
// worker are buffered and the plots catch up on a ~10 Hz timer with a queued replot, so a
// fast stream of steps never stalls the UI.
//
// The plots show one run (PlotHistory): one model, one context, one conversation. A setting
// change is a dashed line at its token with its number above the plot (never on a curve),
// listed beside the plots and explained by a tooltip. The exports hold exactly that run.
#pragma once

#include "core/plot_history.h"

#include <QImage>
#include <QVector>
#include <QWidget>

class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;
class QCustomPlot;
class QListWidget;
class QTimer;

namespace longscope::ui {

class MetricsPlots : public QWidget {
    Q_OBJECT

public:
    explicit MetricsPlots(QWidget *parent = nullptr);

    // Buffered; drawn at the next refresh. A position lower than the last one is a new
    // context: a new run starts, with fresh curves.
    void addMetrics(const longscope::StepMetrics &metrics);
    // A remote server's /metrics at the conversation's token `sample.position` (no earlier
    // than the last step): the memory plot's right axis takes its KV-cache usage (percent) and
    // requests running and waiting, the speed plot its generation throughput. `engine` names
    // whose metrics they are. The curves and their legend entries show once a sample has them.
    void addServerSample(const ServerSample &sample, const QString &engine);
    // Setting change `label` took effect at token `position`: marker number markerCount().
    // A change at token 0 is not a change within the run (the caption gives the settings the
    // run started with) and is not marked; one below the last step starts a new run.
    void addMarker(int position, const QString &label);
    // A new model: a fresh run under its name.
    void setModel(const QString &name);

    // What is shown (all of it, drawn or still buffered).
    const PlotHistory &history() const { return m_run; }
    // Shows a saved run (a reopened conversation's plots) in place of the current one.
    void restoreHistory(const PlotHistory &history);

    // Adds what is buffered to the curves now (the replot is still queued).
    void flush();
    // flush() and replot at once (before grabbing the window, say).
    void replotNow();

    // Both plots side by side at twice their size on screen, with the caption (model, run,
    // settings, the numbered setting changes) under them; the caption is also the PNG's
    // "Description" text.
    QImage renderImage();
    bool exportPng(const QString &path, QString *error = nullptr);
    // PlotHistory::toCsv() of the shown run.
    bool exportCsv(const QString &path, QString *error = nullptr) const;

    int stepCount() const { return int(m_run.steps.size()); }
    int plottedPointCount() const; // points in the decode + prefill speed graphs
    // Points in the server's curves: KV usage, running, waiting, generation throughput.
    int serverPointCount() const;
    int markerCount() const { return int(m_run.markers.size()); }
    QCustomPlot *memoryPlot() const { return m_memory; }
    QCustomPlot *speedPlot() const { return m_speed; }
    QListWidget *markerList() const { return m_markerList; }
    // Where marker `number`'s line and its number label are drawn in `plot` (widget pixels,
    // after a replot); the label's text. For tests and tooltips.
    double markerLineX(QCustomPlot *plot, int number) const;
    QRectF markerLabelRect(QCustomPlot *plot, int number) const;
    QString markerLabelText(QCustomPlot *plot, int number) const;
    // The tooltip at `pos` in `plot`: the markers whose line or number is there; empty: none.
    QString markerToolTip(QCustomPlot *plot, const QPoint &pos) const;

public slots:
    // The context was reset (a new or reopened conversation, another model): a new run starts.
    void resetForContext();
    // View > Clear Plots: the same.
    void clear() { resetForContext(); }

private:
    struct MarkerItems {
        QCPItemStraightLine *line = nullptr;
        QCPItemText *number = nullptr;
    };

    void setUpPlot(QCustomPlot *plot, const QString &title, const QString &yLabel);
    QCPGraph *addGraph(QCustomPlot *plot, const QString &name, const QColor &color, bool scatter, bool rightAxis = false);
    void startRun(); // an empty run, numbered when something arrives
    void numberRun();
    void clearCurves();
    void drawServerSamples();
    void drawMarker(int number);
    void fitLegend(QCustomPlot *plot);
    void layOutMarkerNumbers(QCustomPlot *plot);
    void updateMarkerList();
    void rescale();
    QStringList captionLines() const;
    const QVector<MarkerItems> &itemsOf(QCustomPlot *plot) const;

    QCustomPlot *m_memory = nullptr;
    QCustomPlot *m_speed = nullptr;
    QListWidget *m_markerList = nullptr;
    QCPGraph *m_weights = nullptr;
    QCPGraph *m_kvReserved = nullptr;
    QCPGraph *m_kvResident = nullptr;
    QCPGraph *m_scratch = nullptr;
    QCPGraph *m_total = nullptr;
    QCPGraph *m_prefill = nullptr;
    QCPGraph *m_decode = nullptr;
    QCPGraph *m_decodeAvg = nullptr;
    QCPGraph *m_serverKv = nullptr;
    QCPGraph *m_serverRunning = nullptr;
    QCPGraph *m_serverWaiting = nullptr;
    QCPGraph *m_serverGeneration = nullptr;
    int m_serverDrawn = 0; // server samples of m_run already on the curves
    QTimer *m_timer = nullptr;

    PlotHistory m_run;
    QString m_model;       // the model loaded now: the next run's
    bool m_closed = false; // m_run was restored: anything new starts a new run
    int m_drawn = 0; // steps of m_run already on the curves
    int m_nextRun = 1;
    double m_maxPosition = 0;
    double m_decodeEma = 0;
    QVector<MarkerItems> m_memoryMarkers;
    QVector<MarkerItems> m_speedMarkers;
};

} // namespace longscope::ui
