#include "widgets/metrics_plots.h"

#include "core/session_stats.h"
#include "widgets/save_file.h"

#include <QFontMetrics>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <QListWidget>
#include <QMouseEvent>
#include <QPainter>
#include <QTimer>
#include <QToolTip>

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>

namespace longscope::ui {

namespace {

constexpr int kRefreshMs = 100;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kNumberRows = 3;   // rows of marker numbers above a plot, for close markers
constexpr int kHitPixels = 5;    // how near the pointer must be to a marker line for its tooltip
constexpr double kExportScale = 2.0;
constexpr int kBandPadding = 4;  // above the axes without marker numbers

const QColor kWeights(0x4e, 0x79, 0xa7);
const QColor kKvReserved(0xf2, 0x8e, 0x2b);
const QColor kKvResident(0xe1, 0x57, 0x59);
const QColor kScratch(0x59, 0xa1, 0x4f);
const QColor kTotal(0x33, 0x33, 0x33);
const QColor kPrefill(0xb0, 0x7a, 0xa1);
const QColor kDecode(0x4e, 0x79, 0xa7);
const QColor kMarker(0x8c, 0x56, 0x4b);
const QColor kServerKv(0x76, 0xb7, 0xb2);
const QColor kServerRunning(0xed, 0xc9, 0x48);
const QColor kServerWaiting(0xff, 0x9d, 0xa7);
const QColor kServerGeneration(0x9c, 0x75, 0x5f);

QFont smallFont(const QFont &base, double factor)
{
    QFont f = base;
    f.setPointSizeF(std::max(7.0, f.pointSizeF() * factor));
    return f;
}

QFont markerNumberFont(const QFont &base)
{
    QFont f = smallFont(base, 0.9);
    f.setBold(true);
    return f;
}

} // namespace

MetricsPlots::MetricsPlots(QWidget *parent) : QWidget(parent)
{
    m_memory = new QCustomPlot(this);
    m_speed = new QCustomPlot(this);
    m_memory->setObjectName(QStringLiteral("memoryPlot"));
    m_speed->setObjectName(QStringLiteral("speedPlot"));
    setUpPlot(m_memory, tr("Memory by category"), tr("MiB"));
    setUpPlot(m_speed, tr("Speed"), tr("decode tokens/s"));

    m_total = addGraph(m_memory, tr("total"), kTotal, false);
    m_weights = addGraph(m_memory, tr("weights"), kWeights, false);
    m_kvResident = addGraph(m_memory, tr("KV resident"), kKvResident, false);
    m_kvReserved = addGraph(m_memory, tr("KV reserved"), kKvReserved, false);
    m_scratch = addGraph(m_memory, tr("scratch"), kScratch, false);
    m_total->setPen(QPen(kTotal, 2.2));
    m_kvReserved->setPen(QPen(kKvReserved, 1.6, Qt::DashLine));

    // Decode on the left axis, prefill (often a hundred times faster) on the right one.
    m_decode = addGraph(m_speed, tr("decode"), kDecode, false);
    QColor raw = kDecode;
    raw.setAlpha(90);
    m_decode->setPen(QPen(raw, 1.0));
    m_decodeAvg = addGraph(m_speed, tr("decode (smoothed)"), kDecode, false);
    m_decodeAvg->setPen(QPen(kDecode, 2.2));
    m_prefill = addGraph(m_speed, tr("prefill (right axis)"), kPrefill, true, true);
    m_speed->yAxis2->setVisible(true);
    m_speed->yAxis2->setLabel(tr("prefill tokens/s"));
    m_speed->yAxis2->setLabelFont(m_speed->yAxis->labelFont());
    m_speed->yAxis2->setTickLabelFont(m_speed->yAxis->tickLabelFont());
    for (auto [axis, color] : {std::pair{m_speed->yAxis, kDecode}, std::pair{m_speed->yAxis2, kPrefill}}) {
        axis->setLabelColor(color);
        axis->setTickLabelColor(color);
        axis->setBasePen(QPen(color));
        axis->setTickPen(QPen(color));
        axis->setSubTickPen(QPen(color));
    }

    // A remote server's own figures, on the right axes; listed in the legends once they come.
    m_serverKv = addGraph(m_memory, tr("server KV %"), kServerKv, true, true);
    m_serverRunning = addGraph(m_memory, tr("running"), kServerRunning, true, true);
    m_serverWaiting = addGraph(m_memory, tr("waiting"), kServerWaiting, true, true);
    m_serverGeneration = addGraph(m_speed, tr("server generation"), kServerGeneration, true);
    for (QCPGraph *g : {m_serverKv, m_serverRunning, m_serverWaiting, m_serverGeneration})
        g->removeFromLegend();
    m_memory->yAxis2->setLabel(tr("server"));
    m_memory->yAxis2->setLabelFont(m_memory->yAxis->labelFont());
    m_memory->yAxis2->setTickLabelFont(m_memory->yAxis->tickLabelFont());

    m_markerList = new QListWidget(this);
    m_markerList->setObjectName(QStringLiteral("markerList"));
    m_markerList->setAccessibleName(tr("Setting changes"));
    m_markerList->setToolTip(tr("The setting changes marked on the plots, by number"));
    m_markerList->setWordWrap(true);
    m_markerList->setFont(smallFont(font(), 0.9));
    // Under the plots, a few lines high, so the plots keep the width a laptop screen has.
    m_markerList->setMinimumHeight(30);
    m_markerList->setMaximumHeight(56);
    m_markerList->setSelectionMode(QAbstractItemView::NoSelection);

    auto *plots = new QHBoxLayout;
    plots->setSpacing(6);
    plots->addWidget(m_memory, 1);
    plots->addWidget(m_speed, 1);
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(4);
    layout->addLayout(plots, 1);
    layout->addWidget(m_markerList, 0);
    setMinimumHeight(210);

    m_timer = new QTimer(this);
    m_timer->setInterval(kRefreshMs);
    connect(m_timer, &QTimer::timeout, this, &MetricsPlots::flush);
    updateMarkerList();
    rescale();
}

void MetricsPlots::setUpPlot(QCustomPlot *plot, const QString &title, const QString &yLabel)
{
    plot->setAntialiasedElements(QCP::aeLegend | QCP::aeLegendItems | QCP::aePlottables);
    plot->setNoAntialiasingOnDrag(true);
    plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    plot->setMinimumSize(240, 180);

    QFont titleFont = font();
    titleFont.setBold(true);
    plot->plotLayout()->insertRow(0);
    auto *titleElement = new QCPTextElement(plot, title, titleFont);
    plot->plotLayout()->addElement(0, 0, titleElement);

    const QFont axisFont = smallFont(font(), 0.9);
    for (QCPAxis *axis : {plot->xAxis, plot->yAxis}) {
        axis->setLabelFont(axisFont);
        axis->setTickLabelFont(axisFont);
        axis->grid()->setPen(QPen(QColor(0xe3, 0xe5, 0xe8), 1));
        axis->setBasePen(QPen(QColor(0x9a, 0xa0, 0xa6)));
        axis->setTickPen(QPen(QColor(0x9a, 0xa0, 0xa6)));
        axis->setSubTickPen(QPen(QColor(0xc0, 0xc4, 0xc8)));
    }
    plot->xAxis->setLabel(tr("token position"));
    plot->yAxis->setLabel(yLabel);
    plot->xAxis->ticker()->setTickCount(6);

    // The marker numbers sit in a band above the axes (as many rows high as they need), so
    // they never hide a curve.
    plot->axisRect()->setAutoMargins(QCP::msLeft | QCP::msRight | QCP::msBottom);
    plot->axisRect()->setMargins(QMargins(0, kBandPadding, 0, 0));
    connect(plot, &QCustomPlot::beforeReplot, this, [this, plot] {
        fitLegend(plot);
        layOutMarkerNumbers(plot);
    });
    plot->setMouseTracking(true);
    connect(plot, &QCustomPlot::mouseMove, this, [this, plot](QMouseEvent *event) {
        const QString tip = markerToolTip(plot, event->position().toPoint());
        if (tip.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(event->globalPosition().toPoint(), tip, plot);
    });

    // The legend sits in its own row under the axes, entries side by side, so it never hides
    // a curve.
    auto *legendGrid = new QCPLayoutGrid;
    plot->plotLayout()->addElement(2, 0, legendGrid);
    legendGrid->setMargins(QMargins(4, 0, 4, 4));
    plot->legend->setVisible(true);
    legendGrid->addElement(0, 0, plot->legend);
    plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    plot->legend->setBorderPen(Qt::NoPen);
    plot->legend->setBrush(Qt::NoBrush);
    plot->legend->setFont(axisFont);
    plot->legend->setIconSize(18, 10);
    plot->plotLayout()->setRowStretchFactor(2, 0.001);
    plot->plotLayout()->setRowSpacing(0);
}

QCPGraph *MetricsPlots::addGraph(QCustomPlot *plot, const QString &name, const QColor &color, bool scatter,
                                 bool rightAxis)
{
    QCPGraph *g = plot->addGraph(plot->xAxis, rightAxis ? plot->yAxis2 : plot->yAxis);
    g->setName(name);
    g->setPen(QPen(color, 1.6));
    if (scatter) {
        g->setLineStyle(QCPGraph::lsLine);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, color, 5));
    }
    g->setAdaptiveSampling(true);
    return g;
}

// ---------------------------------------------------------------------------------------
// Runs

void MetricsPlots::startRun()
{
    m_timer->stop();
    m_run = PlotHistory{};
    m_run.model = m_model;
    m_drawn = 0;
    m_closed = false;
    clearCurves();
    updateMarkerList();
    rescale();
}

void MetricsPlots::numberRun()
{
    if (m_closed)
        startRun(); // a restored run is the past: the reset context starts a new one
    if (m_run.run == 0)
        m_run.run = m_nextRun++;
}

void MetricsPlots::resetForContext()
{
    startRun();
}

void MetricsPlots::setModel(const QString &name)
{
    m_model = name;
    startRun();
}

void MetricsPlots::restoreHistory(const PlotHistory &history)
{
    if (history.isEmpty()) {
        startRun();
        return;
    }
    m_timer->stop();
    m_run = history;
    m_nextRun = std::max(m_nextRun, history.run + 1);
    m_drawn = 0;
    m_closed = true;
    clearCurves();
    for (int n = 1; n <= markerCount(); ++n)
        drawMarker(n);
    updateMarkerList();
    flush();
    rescale();
}

void MetricsPlots::addMetrics(const longscope::StepMetrics &metrics)
{
    if (!m_run.steps.isEmpty() && metrics.position < m_run.steps.last().position) {
        flush();
        startRun(); // a new context
    }
    numberRun();
    m_run.steps.append(metrics);
    if (!m_timer->isActive())
        m_timer->start();
}

void MetricsPlots::addServerSample(const ServerSample &sample, const QString &engine)
{
    numberRun();
    ServerSample s = sample;
    if (!m_run.steps.isEmpty())
        s.position = std::max(s.position, m_run.steps.last().position);
    if (!m_run.server.isEmpty())
        s.position = std::max(s.position, m_run.server.last().position);
    m_run.serverEngine = engine;
    m_run.server.append(s);
    if (!m_timer->isActive())
        m_timer->start();
}

void MetricsPlots::drawServerSamples()
{
    for (; m_serverDrawn < m_run.server.size(); ++m_serverDrawn) {
        const ServerSample &s = m_run.server[m_serverDrawn];
        const double x = s.position;
        m_maxPosition = std::max(m_maxPosition, x);
        const std::pair<QCPGraph *, double> values[] = {{m_serverKv, s.kv_usage * 100.0},
                                                        {m_serverRunning, s.requests_running},
                                                        {m_serverWaiting, s.requests_waiting},
                                                        {m_serverGeneration, s.generation_tokens_per_second}};
        for (auto [graph, v] : values) {
            if (!std::isfinite(v))
                continue;
            if (graph->dataCount() == 0) {
                graph->addToLegend();
                if (graph->valueAxis() == m_memory->yAxis2)
                    m_memory->yAxis2->setVisible(true);
            }
            graph->addData(x, v);
        }
    }
}

int MetricsPlots::serverPointCount() const
{
    return m_serverKv->dataCount() + m_serverRunning->dataCount() + m_serverWaiting->dataCount() +
           m_serverGeneration->dataCount();
}

void MetricsPlots::addMarker(int position, const QString &label)
{
    flush();
    if (m_closed || (!m_run.steps.isEmpty() && position < m_run.steps.last().position))
        startRun(); // the change belongs to a new context
    if (position <= 0)
        return;
    numberRun();
    m_run.markers.append(PlotMarker{position, label});
    drawMarker(markerCount());
    updateMarkerList();
    m_maxPosition = std::max(m_maxPosition, double(position));
    rescale();
}

// ---------------------------------------------------------------------------------------
// Drawing

void MetricsPlots::clearCurves()
{
    for (QCustomPlot *plot : {m_memory, m_speed}) {
        for (int i = 0; i < plot->graphCount(); ++i)
            plot->graph(i)->data()->clear();
        plot->clearItems();
    }
    m_memoryMarkers.clear();
    m_speedMarkers.clear();
    m_maxPosition = 0;
    m_decodeEma = 0;
    m_serverDrawn = 0;
    for (QCPGraph *g : {m_serverKv, m_serverRunning, m_serverWaiting, m_serverGeneration})
        g->removeFromLegend();
    m_memory->yAxis2->setVisible(false);
}

const QVector<MetricsPlots::MarkerItems> &MetricsPlots::itemsOf(QCustomPlot *plot) const
{
    return plot == m_memory ? m_memoryMarkers : m_speedMarkers;
}

void MetricsPlots::drawMarker(int number)
{
    const PlotMarker &marker = m_run.markers[number - 1];
    const QFont numberFont = markerNumberFont(font());
    for (QCustomPlot *plot : {m_memory, m_speed}) {
        MarkerItems items;
        items.line = new QCPItemStraightLine(plot);
        items.line->setPen(QPen(kMarker, 1.2, Qt::DashLine));
        for (QCPItemPosition *p : {items.line->point1, items.line->point2}) {
            p->setTypeX(QCPItemPosition::ptPlotCoords);
            p->setTypeY(QCPItemPosition::ptAxisRectRatio);
        }
        items.line->point1->setCoords(marker.position, 0);
        items.line->point2->setCoords(marker.position, 1);

        // The number stands centred over its line, above the axis rect; a close neighbour
        // takes a higher row (layOutMarkerNumbers), never a place beside another line.
        items.number = new QCPItemText(plot);
        items.number->position->setTypeX(QCPItemPosition::ptPlotCoords);
        items.number->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        items.number->position->setCoords(marker.position, 0);
        items.number->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
        items.number->setText(QString::number(number));
        items.number->setFont(numberFont);
        items.number->setColor(kMarker);
        items.number->setClipToAxisRect(false);
        (plot == m_memory ? m_memoryMarkers : m_speedMarkers).append(items);
    }
}

void MetricsPlots::fitLegend(QCustomPlot *plot)
{
    // As many entries a row as the width takes, so no name is cut off.
    QCPLegend *legend = plot->legend;
    const int available = plot->width() - 12;
    for (int wrap = legend->itemCount(); wrap >= 1; --wrap) {
        if (legend->wrap() != wrap) {
            legend->setWrap(wrap);
            legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
        }
        if (legend->minimumOuterSizeHint().width() <= available)
            break;
    }
}

void MetricsPlots::layOutMarkerNumbers(QCustomPlot *plot)
{
    const QVector<MarkerItems> &items = itemsOf(plot);
    const QFontMetrics fm(markerNumberFont(font()));
    const int rowHeight = fm.height() + 1;
    int rowsUsed = 0;
    double rowEnd[kNumberRows];
    std::fill(std::begin(rowEnd), std::end(rowEnd), -1e9);
    const QCPRange range = plot->xAxis->range();
    for (int i = 0; i < items.size(); ++i) {
        const double position = m_run.markers[i].position;
        const bool visible = range.contains(position);
        items[i].number->setVisible(visible);
        items[i].line->setVisible(visible);
        if (!visible)
            continue;
        const double x = plot->xAxis->coordToPixel(position);
        const double half = (fm.horizontalAdvance(items[i].number->text()) + 6) / 2.0;
        int row = 0;
        while (row < kNumberRows && x - half < rowEnd[row])
            ++row;
        if (row == kNumberRows) // crowded: the row whose last number ends first
            row = int(std::min_element(std::begin(rowEnd), std::end(rowEnd)) - std::begin(rowEnd));
        rowEnd[row] = x + half;
        rowsUsed = std::max(rowsUsed, row + 1);
        items[i].number->setPadding(QMargins(3, 0, 3, 1 + row * rowHeight));
    }
    plot->axisRect()->setMargins(QMargins(0, rowsUsed * rowHeight + kBandPadding, 0, 0));
}

void MetricsPlots::updateMarkerList()
{
    m_markerList->clear();
    const QStringList lines = m_run.markerLines();
    if (lines.isEmpty()) {
        auto *item = new QListWidgetItem(tr("Setting changes are numbered here and on the plots."));
        item->setFlags(Qt::NoItemFlags);
        m_markerList->addItem(item);
        return;
    }
    for (const QString &line : lines) {
        auto *item = new QListWidgetItem(line);
        item->setToolTip(line);
        item->setForeground(kMarker);
        m_markerList->addItem(item);
    }
    m_markerList->scrollToBottom();
}

void MetricsPlots::flush()
{
    m_timer->stop();
    if (m_drawn >= m_run.steps.size() && m_serverDrawn >= m_run.server.size())
        return;
    drawServerSamples();
    for (; m_drawn < m_run.steps.size(); ++m_drawn) {
        const StepMetrics &m = m_run.steps[m_drawn];
        const double x = m.position;
        m_maxPosition = std::max(m_maxPosition, x);
        m_weights->addData(x, double(m.memory.weights) / kMiB);
        m_kvReserved->addData(x, double(m.memory.kv_reserved) / kMiB);
        m_kvResident->addData(x, double(m.memory.kv_resident) / kMiB);
        m_scratch->addData(x, double(m.memory.scratch) / kMiB);
        m_total->addData(x, double(m.memory.total) / kMiB);
        if (m.phase == StepPhase::Prefill) {
            m_prefill->addData(x, m.tokens_per_second);
        } else {
            // One step's rate is noisy (a token takes microseconds on a small model); the
            // smoothed curve is the status bar's moving average.
            m_decodeEma = m_decodeEma > 0
                              ? SessionStats::kDecodeKeep * m_decodeEma + SessionStats::kDecodeNew * m.tokens_per_second
                              : m.tokens_per_second;
            m_decode->addData(x, m.tokens_per_second);
            m_decodeAvg->addData(x, m_decodeEma);
        }
    }
    rescale();
}

void MetricsPlots::rescale()
{
    const double right = std::max(16.0, m_maxPosition * 1.03);
    for (QCustomPlot *plot : {m_memory, m_speed}) {
        plot->xAxis->setRange(0, right);
        for (QCPAxis *axis : {plot->yAxis, plot->yAxis2}) {
            double top = 0;
            for (int i = 0; i < plot->graphCount(); ++i) {
                if (plot->graph(i)->valueAxis() != axis)
                    continue;
                bool ok = false;
                const QCPRange r = plot->graph(i)->getValueRange(ok);
                if (ok)
                    top = std::max(top, r.upper);
            }
            axis->setRange(0, top > 0 ? top * 1.12 : 1.0);
        }
        plot->replot(QCustomPlot::rpQueuedReplot);
    }
}

void MetricsPlots::replotNow()
{
    flush();
    for (QCustomPlot *plot : {m_memory, m_speed}) {
        plot->replot(QCustomPlot::rpImmediateRefresh);
        plot->replot(QCustomPlot::rpImmediateRefresh); // the numbers laid out on the final axes
    }
}

int MetricsPlots::plottedPointCount() const
{
    return m_prefill->dataCount() + m_decode->dataCount();
}

// ---------------------------------------------------------------------------------------
// Markers as the pointer and the tests see them

double MetricsPlots::markerLineX(QCustomPlot *plot, int number) const
{
    const QVector<MarkerItems> &items = itemsOf(plot);
    if (number < 1 || number > items.size())
        return std::nan("");
    return items[number - 1].line->point1->pixelPosition().x();
}

QRectF MetricsPlots::markerLabelRect(QCustomPlot *plot, int number) const
{
    const QVector<MarkerItems> &items = itemsOf(plot);
    if (number < 1 || number > items.size())
        return {};
    const QCPItemText *text = items[number - 1].number;
    // The box includes the padding that lifts the number into its row: the text is its top.
    const QRectF box(text->topLeft->pixelPosition(), text->bottomRight->pixelPosition());
    const double textHeight = QFontMetrics(text->font()).height();
    return QRectF(box.left(), box.top(), box.width(), std::min(box.height(), textHeight));
}

QString MetricsPlots::markerLabelText(QCustomPlot *plot, int number) const
{
    const QVector<MarkerItems> &items = itemsOf(plot);
    return number >= 1 && number <= items.size() ? items[number - 1].number->text() : QString();
}

QString MetricsPlots::markerToolTip(QCustomPlot *plot, const QPoint &pos) const
{
    const QVector<MarkerItems> &items = itemsOf(plot);
    const QStringList lines = m_run.markerLines();
    const QRect rect = plot->axisRect()->rect();
    QStringList hits;
    for (int i = 0; i < items.size(); ++i) {
        if (!items[i].line->visible())
            continue;
        const double x = markerLineX(plot, i + 1);
        const bool onLine = std::abs(pos.x() - x) <= kHitPixels && pos.y() >= rect.top() && pos.y() <= rect.bottom();
        if (onLine || markerLabelRect(plot, i + 1).adjusted(-2, -2, 2, 2).contains(pos))
            hits << tr("Setting change %1").arg(lines[i]);
    }
    return hits.join(QLatin1Char('\n'));
}

// ---------------------------------------------------------------------------------------
// Exports

QStringList MetricsPlots::captionLines() const
{
    QStringList lines{m_run.caption()};
    const QStringList markers = m_run.markerLines();
    if (!markers.isEmpty())
        lines << tr("Setting changes: %1").arg(markers.join(QStringLiteral("; ")));
    if (!m_run.server.isEmpty())
        lines << tr("Server metrics (%1 /metrics, %L2 polls): KV-cache use and requests on the memory plot's right "
                    "axis, generation throughput on the speed plot")
                     .arg(m_run.serverEngine.isEmpty() ? tr("unknown engine") : m_run.serverEngine)
                     .arg(m_run.server.size());
    return lines;
}

QImage MetricsPlots::renderImage()
{
    replotNow();
    const QPixmap a = m_memory->toPixmap(m_memory->width(), m_memory->height(), kExportScale);
    const QPixmap b = m_speed->toPixmap(m_speed->width(), m_speed->height(), kExportScale);
    const int width = a.width() + b.width();
    const int plotsHeight = std::max(a.height(), b.height());

    QFont captionFont = font();
    captionFont.setPixelSize(int(std::lround(12 * kExportScale)));
    const int margin = int(8 * kExportScale);
    const QString caption = captionLines().join(QLatin1Char('\n'));
    const QRect textArea(margin, plotsHeight + margin, width - 2 * margin, 1 << 20);
    const QRect textRect = QFontMetrics(captionFont).boundingRect(textArea, Qt::TextWordWrap, caption);

    QImage image(width, plotsHeight + textRect.height() + 2 * margin, QImage::Format_ARGB32);
    image.fill(Qt::white);
    {
        QPainter p(&image);
        p.drawPixmap(0, 0, a);
        p.drawPixmap(a.width(), 0, b);
        p.setFont(captionFont);
        p.setPen(QColor(0x33, 0x33, 0x33));
        p.drawText(textArea, Qt::TextWordWrap, caption);
    }
    image.setText(QStringLiteral("Description"), caption);
    return image;
}

bool MetricsPlots::exportPng(const QString &path, QString *error)
{
    const QImage image = renderImage();
    return savePng(path, image, error);
}

bool MetricsPlots::exportCsv(const QString &path, QString *error) const
{
    const QByteArray bytes = m_run.toCsv();
    return saveBytes(path, bytes, error);
}

} // namespace longscope::ui
