#include "widgets/metrics_plots.h"

#include <QFile>
#include <QHBoxLayout>
#include <QImage>
#include <QPainter>
#include <QSaveFile>
#include <QTimer>

#include <qcustomplot.h>

#include <algorithm>

namespace longscope::ui {

namespace {

constexpr int kRefreshMs = 100;
constexpr double kMiB = 1024.0 * 1024.0;

const QColor kWeights(0x4e, 0x79, 0xa7);
const QColor kKvReserved(0xf2, 0x8e, 0x2b);
const QColor kKvResident(0xe1, 0x57, 0x59);
const QColor kScratch(0x59, 0xa1, 0x4f);
const QColor kTotal(0x33, 0x33, 0x33);
const QColor kPrefill(0xb0, 0x7a, 0xa1);
const QColor kDecode(0x4e, 0x79, 0xa7);
const QColor kMarker(0x8c, 0x56, 0x4b);

} // namespace

MetricsPlots::MetricsPlots(QWidget *parent) : QWidget(parent)
{
    m_memory = new QCustomPlot(this);
    m_speed = new QCustomPlot(this);
    m_memory->setObjectName(QStringLiteral("memoryPlot"));
    m_speed->setObjectName(QStringLiteral("speedPlot"));
    setUpPlot(m_memory, tr("Memory by category"), tr("MiB"));
    setUpPlot(m_speed, tr("Speed"), tr("tokens/s"));

    m_total = addGraph(m_memory, tr("total"), kTotal, false);
    m_weights = addGraph(m_memory, tr("weights"), kWeights, false);
    m_kvResident = addGraph(m_memory, tr("KV resident"), kKvResident, false);
    m_kvReserved = addGraph(m_memory, tr("KV reserved"), kKvReserved, false);
    m_scratch = addGraph(m_memory, tr("scratch"), kScratch, false);
    m_total->setPen(QPen(kTotal, 2.2));
    m_kvReserved->setPen(QPen(kKvReserved, 1.6, Qt::DashLine));

    m_decode = addGraph(m_speed, tr("decode"), kDecode, false);
    QColor raw = kDecode;
    raw.setAlpha(90);
    m_decode->setPen(QPen(raw, 1.0));
    m_decodeAvg = addGraph(m_speed, tr("decode (smoothed)"), kDecode, false);
    m_decodeAvg->setPen(QPen(kDecode, 2.2));
    m_prefill = addGraph(m_speed, tr("prefill"), kPrefill, true);

    auto *layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(6);
    layout->addWidget(m_memory, 1);
    layout->addWidget(m_speed, 1);
    setMinimumHeight(200);

    m_timer = new QTimer(this);
    m_timer->setInterval(kRefreshMs);
    connect(m_timer, &QTimer::timeout, this, &MetricsPlots::flush);
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

    QFont axisFont = font();
    axisFont.setPointSizeF(std::max(7.0, axisFont.pointSizeF() * 0.9));
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

QCPGraph *MetricsPlots::addGraph(QCustomPlot *plot, const QString &name, const QColor &color, bool scatter)
{
    QCPGraph *g = plot->addGraph();
    g->setName(name);
    g->setPen(QPen(color, 1.6));
    if (scatter) {
        g->setLineStyle(QCPGraph::lsLine);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, color, 5));
    }
    g->setAdaptiveSampling(true);
    return g;
}

void MetricsPlots::addMetrics(const longscope::StepMetrics &metrics)
{
    m_pending.append(metrics);
    m_history.append(metrics);
    if (!m_timer->isActive())
        m_timer->start();
}

void MetricsPlots::addMarker(int position, const QString &label)
{
    flush();
    for (QCustomPlot *plot : {m_memory, m_speed}) {
        auto *line = new QCPItemStraightLine(plot);
        line->setPen(QPen(kMarker, 1.2, Qt::DashLine));
        line->point1->setTypeX(QCPItemPosition::ptPlotCoords);
        line->point1->setTypeY(QCPItemPosition::ptAxisRectRatio);
        line->point2->setTypeX(QCPItemPosition::ptPlotCoords);
        line->point2->setTypeY(QCPItemPosition::ptAxisRectRatio);
        line->point1->setCoords(position, 0);
        line->point2->setCoords(position, 1);

        auto *text = new QCPItemText(plot);
        text->position->setTypeX(QCPItemPosition::ptPlotCoords);
        text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        // Staggered so neighbouring markers' labels do not sit on top of each other.
        text->position->setCoords(position, 0.03 + 0.09 * (m_markerCount % 5));
        text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        text->setText(label);
        QFont f = font();
        f.setPointSizeF(std::max(7.0, f.pointSizeF() * 0.85));
        text->setFont(f);
        text->setColor(kMarker);
        text->setBrush(QColor(255, 255, 255, 170));
        text->setPadding(QMargins(3, 1, 3, 1));
        text->setClipToAxisRect(true);
    }
    ++m_markerCount;
    m_maxPosition = std::max(m_maxPosition, double(position));
    rescale();
}

void MetricsPlots::clearCurves()
{
    for (QCustomPlot *plot : {m_memory, m_speed}) {
        for (int i = 0; i < plot->graphCount(); ++i)
            plot->graph(i)->data()->clear();
        plot->clearItems();
    }
    m_markerCount = 0;
    m_maxPosition = 0;
    m_lastPosition = -1;
    m_decodeEma = 0;
}

void MetricsPlots::clear()
{
    m_pending.clear();
    m_history.clear();
    m_timer->stop();
    clearCurves();
    rescale();
}

void MetricsPlots::flush()
{
    m_timer->stop();
    if (m_pending.isEmpty())
        return;
    const QVector<StepMetrics> batch = std::exchange(m_pending, {});
    for (const StepMetrics &m : batch) {
        if (m.position < m_lastPosition)
            clearCurves(); // a new context: the curves start over
        m_lastPosition = m.position;
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
            // smoothed curve is an exponential moving average over about ten steps.
            m_decodeEma = m_decodeEma > 0 ? 0.9 * m_decodeEma + 0.1 * m.tokens_per_second : m.tokens_per_second;
            m_decode->addData(x, m.tokens_per_second);
            m_decodeAvg->addData(x, m_decodeEma);
        }
    }
    rescale();
}

void MetricsPlots::rescale()
{
    for (QCustomPlot *plot : {m_memory, m_speed}) {
        bool found = false;
        double top = 0;
        for (int i = 0; i < plot->graphCount(); ++i) {
            bool ok = false;
            const QCPRange r = plot->graph(i)->getValueRange(ok);
            if (ok) {
                top = found ? std::max(top, r.upper) : r.upper;
                found = true;
            }
        }
        const double right = std::max(16.0, m_maxPosition * 1.03);
        plot->xAxis->setRange(0, right);
        plot->yAxis->setRange(0, found && top > 0 ? top * 1.12 : 1.0);
        // Labels of markers near the right edge go to the left of their line, so they are
        // not cut off.
        for (int i = 0; i < plot->itemCount(); ++i) {
            if (auto *text = qobject_cast<QCPItemText *>(plot->item(i))) {
                const bool nearRight = text->position->key() > 0.6 * right;
                text->setPositionAlignment((nearRight ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignTop);
            }
        }
        plot->replot(QCustomPlot::rpQueuedReplot);
    }
}

void MetricsPlots::replotNow()
{
    flush();
    m_memory->replot(QCustomPlot::rpImmediateRefresh);
    m_speed->replot(QCustomPlot::rpImmediateRefresh);
}

int MetricsPlots::plottedPointCount() const
{
    return m_prefill->dataCount() + m_decode->dataCount();
}

bool MetricsPlots::exportPng(const QString &path, QString *error)
{
    flush();
    const int w = std::max(m_memory->width(), 480);
    const int h = std::max(m_memory->height(), 320);
    const QPixmap a = m_memory->toPixmap(w, h);
    const QPixmap b = m_speed->toPixmap(w, h);
    QImage image(a.width() + b.width(), std::max(a.height(), b.height()), QImage::Format_ARGB32);
    image.fill(Qt::white);
    {
        QPainter p(&image);
        p.drawPixmap(0, 0, a);
        p.drawPixmap(a.width(), 0, b);
    }
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || !image.save(&file, "PNG") || !file.commit()) {
        if (error)
            *error = tr("Cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

bool MetricsPlots::exportCsv(const QString &path, QString *error) const
{
    QByteArray bytes = QByteArray::fromStdString(metrics_csv_header());
    if (!bytes.endsWith('\n'))
        bytes += '\n';
    for (const StepMetrics &m : m_history) {
        bytes += QByteArray::fromStdString(metrics_csv_row(m));
        if (!bytes.endsWith('\n'))
            bytes += '\n';
    }
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit()) {
        if (error)
            *error = tr("Cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

} // namespace longscope::ui
