#include "widgets/explore_plot.h"

#include "core/explore_format.h"
#include "core/settings_json.h"
#include "widgets/save_file.h"

#include <QFontMetrics>
#include <QPainter>
#include <QPixmap>
#include <QKeyEvent>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace longscope::ui {

namespace {

constexpr int kFocusFrame = 2; // pixels around the plot, drawn in the highlight colour with the focus

// Pairs of one hue, dark then light (ColorBrewer "Paired" reordered), so the presets' two
// key placements of one alpha read as a pair.
const QColor k_palette[] = {QColor(0x1f, 0x78, 0xb4), QColor(0x7f, 0xb8, 0xe0), QColor(0x33, 0xa0, 0x2c),
                            QColor(0x8c, 0xd0, 0x6a), QColor(0xff, 0x7f, 0x00), QColor(0xf9, 0xb8, 0x5a),
                            QColor(0xd6, 0x27, 0x28), QColor(0xf0, 0x80, 0x80), QColor(0x6a, 0x3d, 0x9a),
                            QColor(0xb0, 0x94, 0xd0), QColor(0x8c, 0x56, 0x4b), QColor(0x17, 0xbe, 0xcf)};
const QColor k_trained(0x55, 0x5b, 0x63);
const QColor k_beyond(0xf3, 0xf1, 0xee);
const QColor k_grid(0xe3, 0xe5, 0xe8);
const QColor k_axis(0x9a, 0xa0, 0xa6);

// Tick labels for a log axis over [lo, hi]: 1-2-5 per decade, or every integer mantissa
// when the range spans less than a decade.
QMap<double, QString> logTicks(double lo, double hi)
{
    QMap<double, QString> ticks;
    const bool fine = hi / lo < 12;
    const std::vector<int> mantissas = fine ? std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9} : std::vector<int>{1, 2, 5};
    for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); ++e) {
        for (int m : mantissas) {
            const double v = m * std::pow(10.0, e);
            if (v >= lo && v <= hi)
                ticks.insert(v, QLocale().toString(v, 'g', 6));
        }
    }
    return ticks;
}

} // namespace

ExplorePlot::ExplorePlot(QWidget *parent) : QWidget(parent)
{
    m_plot = new QCustomPlot(this);
    m_plot->setObjectName(QStringLiteral("perplexityPlot"));
    m_plot->setAntialiasedElements(QCP::aeLegend | QCP::aeLegendItems | QCP::aePlottables | QCP::aeItems);
    m_plot->setNoAntialiasingOnDrag(true);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_plot->setMinimumSize(420, 300);
    m_plot->addLayer(QStringLiteral("shade"), m_plot->layer(QStringLiteral("grid")), QCustomPlot::limBelow);

    // Title and subtitle above the axes; the legend in a column of its own on the right, so
    // it never hides a curve.
    QFont titleFont = font();
    titleFont.setBold(true);
    titleFont.setPointSizeF(titleFont.pointSizeF() * 1.15);
    QFont smallFont = font();
    smallFont.setPointSizeF(std::max(7.0, smallFont.pointSizeF() * 0.9));
    m_plot->plotLayout()->insertRow(0);
    m_plot->plotLayout()->addElement(0, 0, new QCPTextElement(m_plot, tr("Perplexity by position"), titleFont));
    m_plot->plotLayout()->insertRow(1);
    m_subtitle = new QCPTextElement(m_plot, QString(), smallFont);
    m_subtitle->setTextColor(QColor(0x6b, 0x72, 0x7a));
    m_plot->plotLayout()->addElement(1, 0, m_subtitle);
    m_plot->plotLayout()->setRowSpacing(0);

    for (QCPAxis *axis : {m_plot->xAxis, m_plot->yAxis}) {
        axis->setLabelFont(smallFont);
        axis->setTickLabelFont(smallFont);
        axis->grid()->setPen(QPen(k_grid, 1));
        axis->grid()->setSubGridPen(QPen(QColor(0xf0, 0xf1, 0xf3), 1));
        axis->setBasePen(QPen(k_axis));
        axis->setTickPen(QPen(k_axis));
        axis->setSubTickPen(QPen(QColor(0xc0, 0xc4, 0xc8)));
    }
    m_plot->xAxis->setLabel(tr("position in the window (tokens of context before the token)"));
    m_plot->yAxis->setLabel(tr("perplexity"));

    auto *legendColumn = new QCPLayoutGrid;
    m_legendColumn = legendColumn;
    m_plot->plotLayout()->addElement(2, 1, legendColumn);
    auto *legendTitle = new QCPTextElement(m_plot, tr("setting — perplexity"), smallFont);
    legendTitle->setTextColor(QColor(0x6b, 0x72, 0x7a));
    legendTitle->setLayer(m_plot->legend->layer());
    legendColumn->addElement(0, 0, legendTitle);
    legendColumn->addElement(1, 0, m_plot->legend);
    legendColumn->setMargins(QMargins(0, 12, 10, 12));
    legendColumn->setRowSpacing(2);
    legendColumn->setRowStretchFactor(0, 0.01);
    legendColumn->setRowStretchFactor(1, 0.01);
    legendColumn->addElement(2, 0, new QCPLayoutElement(m_plot)); // pushes the legend to the top
    m_plot->plotLayout()->setColumnStretchFactor(1, 0.001);
    m_plot->legend->setVisible(true);
    m_plot->legend->setBorderPen(Qt::NoPen);
    m_plot->legend->setBrush(Qt::NoBrush);
    m_plot->legend->setFont(smallFont);
    m_plot->legend->setIconSize(28, 12);
    m_plot->legend->setRowSpacing(2);

    // Reached by Tab as one control, named, its curves described for a screen reader.
    setFocusPolicy(Qt::StrongFocus);
    m_plot->setFocusPolicy(Qt::NoFocus);
    setAccessibleName(tr("Perplexity by position plot"));
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(kFocusFrame, kFocusFrame, kFocusFrame, kFocusFrame);
    layout->addWidget(m_plot);
    // The subtitle wraps to the width the legend leaves it, on screen and in exports.
    connect(m_plot, &QCustomPlot::beforeReplot, this, [this] { fitSubtitle(m_plot->width()); });
    rebuild();
}

QString ExplorePlot::subtitle() const
{
    return m_subtitle->text();
}

QColor ExplorePlot::colorFor(int index)
{
    constexpr int n = int(sizeof(k_palette) / sizeof(k_palette[0]));
    return k_palette[((index % n) + n) % n];
}

QIcon ExplorePlot::lineIcon(const QColor &color, bool dashed)
{
    QPixmap pm(22, 12);
    pm.fill(Qt::transparent);
    if (color.isValid()) {
        QPainter p(&pm);
        p.setRenderHint(QPainter::Antialiasing);
        QPen pen(color, 2.5);
        if (dashed)
            pen.setStyle(Qt::DashLine);
        p.setPen(pen);
        p.drawLine(1, 6, 21, 6);
    }
    return QIcon(pm);
}

void ExplorePlot::setRuns(const QVector<PerplexityRunResult> &runs)
{
    m_runs = runs;
    rebuild();
    QStringList curves;
    for (const PerplexityRunResult &run : runs)
        curves << tr("%1: perplexity %L2").arg(run.label).arg(run.perplexity(), 0, 'f', 1);
    setAccessibleDescription(curves.isEmpty() ? tr("No run is plotted") : curves.join(QStringLiteral("; ")));
}

void ExplorePlot::keyPressEvent(QKeyEvent *event)
{
    if (event->key() == Qt::Key_Home) {
        rescale();
        event->accept();
        return;
    }
    QWidget::keyPressEvent(event);
}

void ExplorePlot::paintEvent(QPaintEvent *)
{
    if (!hasFocus())
        return;
    QPainter p(this);
    p.setPen(QPen(palette().color(QPalette::Highlight), kFocusFrame));
    p.drawRect(rect().adjusted(kFocusFrame / 2, kFocusFrame / 2, -kFocusFrame / 2 - 1, -kFocusFrame / 2 - 1));
}

void ExplorePlot::focusInEvent(QFocusEvent *event)
{
    QWidget::focusInEvent(event);
    update();
}

void ExplorePlot::focusOutEvent(QFocusEvent *event)
{
    QWidget::focusOutEvent(event);
    update();
}

void ExplorePlot::setLogScale(bool on)
{
    if (on == m_logScale)
        return;
    m_logScale = on;
    rescale();
    emit logScaleChanged(on);
}

void ExplorePlot::setAcrossText(bool on)
{
    if (on == m_acrossText)
        return;
    m_acrossText = on;
    m_plot->xAxis->setLabel(on ? tr("position in the text (tokens before the token)")
                               : tr("position in the window (tokens of context before the token)"));
    rebuild();
}

const QVector<PerplexityPoint> &ExplorePlot::shownCurve(const PerplexityRunResult &run) const
{
    return m_acrossText ? run.text_curve : run.curve;
}

int ExplorePlot::curveCount() const { return m_plot->graphCount(); }

void ExplorePlot::rebuild()
{
    m_plot->clearGraphs();
    m_plot->clearItems();
    m_trainedLines = 0;

    for (int i = 0; i < m_runs.size(); ++i) {
        const PerplexityRunResult &run = m_runs[i];
        QCPGraph *g = m_plot->addGraph();
        const QColor color = colorFor(i);
        QPen pen(color, 2.0);
        if (run.settings.rope.store_kv_before_rope)
            pen.setStyle(Qt::DashLine);
        g->setPen(pen);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, color, 4.5));
        QString name = run.label;
        if (run.cancelled)
            name += tr(" (cancelled)");
        if (!run.stopped.isEmpty())
            name += tr(" (stopped at %L1)").arg(run.n_scored);
        name += tr("  —  %L1").arg(run.perplexity(), 0, 'f', run.perplexity() < 100 ? 1 : 0);
        g->setName(name);
        QVector<double> x, y;
        for (const PerplexityPoint &p : shownCurve(run)) {
            if (p.count <= 0)
                continue;
            x << 0.5 * (p.begin + p.end);
            y << p.perplexity();
        }
        g->setData(x, y, true);
    }

    // The trained context (across the text: where the context is full): a dashed line,
    // labelled, with the positions beyond it shaded.
    std::set<int> trained;
    for (const PerplexityRunResult &run : m_runs)
        if (const int edge = m_acrossText ? run.ctx : run.n_ctx_train; edge > 0)
            trained.insert(edge);
    QFont labelFont = font();
    labelFont.setPointSizeF(std::max(7.0, labelFont.pointSizeF() * 0.9));
    for (const int position : trained) {
        if (m_trainedLines == 0) {
            auto *shade = new QCPItemRect(m_plot);
            shade->setLayer(QStringLiteral("shade"));
            shade->topLeft->setTypeX(QCPItemPosition::ptPlotCoords);
            shade->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
            shade->bottomRight->setTypeX(QCPItemPosition::ptPlotCoords);
            shade->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
            shade->topLeft->setCoords(position, 0);
            shade->bottomRight->setCoords(1e9, 1);
            shade->setPen(Qt::NoPen);
            shade->setBrush(k_beyond);
            shade->setClipToAxisRect(true);
        }
        auto *line = new QCPItemStraightLine(m_plot);
        line->setObjectName(QStringLiteral("trainedContext"));
        line->setPen(QPen(k_trained, 1.4, Qt::DashLine));
        line->point1->setTypeX(QCPItemPosition::ptPlotCoords);
        line->point1->setTypeY(QCPItemPosition::ptAxisRectRatio);
        line->point2->setTypeX(QCPItemPosition::ptPlotCoords);
        line->point2->setTypeY(QCPItemPosition::ptAxisRectRatio);
        line->point1->setCoords(position, 0);
        line->point2->setCoords(position, 1);

        auto *text = new QCPItemText(m_plot);
        text->position->setTypeX(QCPItemPosition::ptPlotCoords);
        text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        text->position->setCoords(position, 0.015 + 0.07 * m_trainedLines);
        text->setObjectName(QStringLiteral("trainedContextLabel"));
        text->setText(m_acrossText ? tr("context full (%L1)").arg(position) : tr("trained context (%L1)").arg(position));
        text->setFont(labelFont);
        text->setColor(k_trained);
        text->setBrush(QColor(255, 255, 255, 200));
        text->setPadding(QMargins(4, 1, 4, 1));
        text->setClipToAxisRect(true);
        ++m_trainedLines;
    }

    QStringList about;
    if (!m_runs.isEmpty()) {
        const PerplexityRunResult &first = m_runs.first();
        if (!first.book_title.isEmpty())
            about << QStringLiteral("“%1”").arg(first.book_title);
        if (!first.model_name.isEmpty())
            about << first.model_name;
        int ctx = 0;
        int bucket = 0;
        qint64 scored = 0;
        for (const PerplexityRunResult &run : m_runs) {
            ctx = std::max(ctx, run.ctx);
            bucket = bucket == 0 || bucket == run.bucket ? run.bucket : -1;
            scored = std::max(scored, run.n_scored);
        }
        about << (m_acrossText ? tr("a context of %L1 tokens, by position in the text").arg(ctx)
                               : tr("windows of %L1 tokens").arg(ctx));
        if (bucket > 0)
            about << tr("buckets of %L1 positions").arg(bucket);
        about << tr("%L1 tokens scored per run").arg(scored);
        m_subtitleParts = about;
    } else {
        m_subtitleParts = QStringList{tr("Choose a book and the settings to compare, then press Run")};
    }
    fitSubtitle(m_plot->width());
    rescale();
}

void ExplorePlot::rescale()
{
    double right = 0;
    double lo = 0;
    double hi = 0;
    bool found = false;
    for (const PerplexityRunResult &run : m_runs) {
        right = std::max(right, double(run.ctx));
        for (const PerplexityPoint &p : shownCurve(run)) {
            right = std::max(right, double(p.end));
            if (p.count <= 0)
                continue;
            const double v = p.perplexity();
            lo = found ? std::min(lo, v) : v;
            hi = found ? std::max(hi, v) : v;
            found = true;
        }
    }
    for (int i = 0; i < m_plot->itemCount(); ++i)
        if (auto *text = qobject_cast<QCPItemText *>(m_plot->item(i)))
            right = std::max(right, text->position->key() * 1.1);
    m_plot->xAxis->setRange(0, right > 0 ? right : 2048);
    // A trained-context label reads to the right of its line where the right has room, else
    // to its left: never cut off by the axis rect's edge.
    const double shown = m_plot->xAxis->range().upper;
    for (int i = 0; i < m_plot->itemCount(); ++i)
        if (auto *text = qobject_cast<QCPItemText *>(m_plot->item(i)))
            text->setPositionAlignment((text->position->key() > 0.55 * shown ? Qt::AlignRight : Qt::AlignLeft) |
                                       Qt::AlignTop);

    if (m_logScale) {
        if (!found) {
            lo = 1;
            hi = 1000;
        }
        lo = std::max(lo / 1.25, 1e-3);
        hi = std::max(hi * 1.3, lo * 2);
        m_plot->yAxis->setScaleType(QCPAxis::stLogarithmic);
        auto ticker = QSharedPointer<QCPAxisTickerText>::create();
        ticker->setTicks(logTicks(lo, hi));
        ticker->setSubTickCount(0);
        m_plot->yAxis->setTicker(ticker);
        m_plot->yAxis->setRange(lo, hi);
        m_plot->yAxis->setLabel(tr("perplexity (log scale)"));
    } else {
        m_plot->yAxis->setScaleType(QCPAxis::stLinear);
        m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
        m_plot->yAxis->setRange(0, found ? hi * 1.1 : 100);
        m_plot->yAxis->setLabel(tr("perplexity"));
    }
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void ExplorePlot::replotNow()
{
    m_plot->replot(QCustomPlot::rpImmediateRefresh);
}

void ExplorePlot::fitSubtitle(int plotWidth)
{
    // What the legend column leaves of the width, less the subtitle's own margins.
    const int available = std::max(160, plotWidth - m_legendColumn->minimumOuterSizeHint().width() - 24);
    const QFontMetrics fm(m_subtitle->font());
    const QString separator = QStringLiteral("  ·  ");
    QStringList lines;
    for (const QString &part : m_subtitleParts) {
        if (!lines.isEmpty() && fm.horizontalAdvance(lines.last() + separator + part) <= available)
            lines.last() += separator + part;
        else
            lines << part;
    }
    const QString text = lines.join(QLatin1Char('\n'));
    if (text != m_subtitle->text())
        m_subtitle->setText(text);
}

QImage ExplorePlot::renderImage(int width, int height)
{
    const int w = width > 0 ? width : std::max(m_plot->width(), 960);
    const int h = height > 0 ? height : std::max(m_plot->height(), 540);
    fitSubtitle(w);
    const QImage image = m_plot->toPixmap(w, h, kExportScale).toImage();
    fitSubtitle(m_plot->width());
    return image;
}

bool ExplorePlot::exportPng(const QString &path, QString *error, int width, int height)
{
    const QImage pixmap = renderImage(width, height);
    return savePng(path, pixmap, error);
}

QByteArray ExplorePlot::csv(const QVector<PerplexityRunResult> &runs, bool acrossText)
{
    QByteArray out = "label,settings,bucket_begin,bucket_end,count,mean_nll,perplexity\n";
    for (const PerplexityRunResult &run : runs) {
        const QByteArray label = exploreCsvField(run.label);
        const QByteArray settings = exploreCsvField(describeSettings(run.settings));
        for (const PerplexityPoint &p : acrossText ? run.text_curve : run.curve) {
            out += label + ',' + settings + ',' + QByteArray::number(p.begin) + ',' + QByteArray::number(p.end) + ',' +
                   QByteArray::number(p.count) + ',' + QByteArray::number(p.mean_nll, 'g', 10) + ',' +
                   QByteArray::number(p.perplexity(), 'g', 10) + '\n';
        }
    }
    return out;
}

bool ExplorePlot::exportCsv(const QString &path, QString *error) const
{
    const QByteArray bytes = csv(m_runs, m_acrossText);
    return saveBytes(path, bytes, error);
}

} // namespace longscope::ui
