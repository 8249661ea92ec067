#include "widgets/explore_heatmaps.h"

#include "widgets/save_file.h"

#include <QImage>
#include <QPainter>

#include <algorithm>
#include <cmath>

namespace longscope::ui {

namespace {

constexpr int kMaxColumns = 4;     // heatmaps per row
constexpr int kScaleHeight = 46;   // the colour bar and the marks' key, at the bottom
constexpr int kTitleHeight = 34;
constexpr int kAxisLeft = 44;      // depth labels
constexpr int kAxisBottom = 30;    // length labels
const QColor k_background(0xff, 0xff, 0xff);
const QColor k_text(0x2b, 0x2f, 0x33);
const QColor k_hint(0x6b, 0x72, 0x7a);
const QColor k_trained(0xd6, 0x27, 0x28);
const QColor k_missing(0xe6, 0xe8, 0xeb);

// Viridis at eight stops (matplotlib's, sampled), interpolated linearly.
const QColor k_stops[] = {QColor(0x44, 0x01, 0x54), QColor(0x46, 0x33, 0x7e), QColor(0x36, 0x5c, 0x8d),
                          QColor(0x27, 0x7f, 0x8e), QColor(0x1f, 0xa1, 0x87), QColor(0x4a, 0xc1, 0x6d),
                          QColor(0x9f, 0xda, 0x3a), QColor(0xfd, 0xe7, 0x25)};

QString lengthText(int length)
{
    return length >= 1024 && length % 1024 == 0 ? QStringLiteral("%1k").arg(length / 1024) : QString::number(length);
}

// Whether the colour is light enough for dark text and marks on it.
bool isLight(const QColor &c) { return 0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue() > 150; }

} // namespace

ExploreHeatmaps::ExploreHeatmaps(QWidget *parent) : QWidget(parent)
{
    setObjectName(QStringLiteral("exploreHeatmaps"));
    setMinimumSize(360, 260);
    setAutoFillBackground(true);
    // Reached by Tab as one control, named, its grids described for a screen reader.
    setFocusPolicy(Qt::StrongFocus);
    setAccessibleName(tr("Needle heatmaps"));
    setRuns({});
}

void ExploreHeatmaps::setRuns(const QVector<NeedleRunResult> &runs)
{
    m_runs = runs;
    QStringList grids;
    for (const NeedleRunResult &run : runs)
        grids << tr("%1: mean probability %2, %L3 of %L4 cells retrieved")
                     .arg(run.label, probabilityText(run.meanProbability()))
                     .arg(run.retrievedCells())
                     .arg(run.cells.size());
    setAccessibleDescription(grids.isEmpty() ? tr("No needle grid is shown") : grids.join(QStringLiteral("; ")));
    update();
}

QColor ExploreHeatmaps::colorFor(double p)
{
    const double x = std::clamp(std::isfinite(p) ? p : 0.0, 0.0, 1.0) * double(std::size(k_stops) - 1);
    const int i = std::min(int(x), int(std::size(k_stops)) - 2);
    const double t = x - i;
    const QColor &a = k_stops[i];
    const QColor &b = k_stops[i + 1];
    return QColor(int(std::lround(a.red() + t * (b.red() - a.red()))),
                  int(std::lround(a.green() + t * (b.green() - a.green()))),
                  int(std::lround(a.blue() + t * (b.blue() - a.blue()))));
}

QString ExploreHeatmaps::probabilityText(double p)
{
    return p >= 0.01 || p == 0 ? QString::number(p, 'f', 2) : QString::number(p, 'e', 0);
}

double ExploreHeatmaps::scalePosition(double probability) const
{
    if (!m_logScale)
        return probability;
    if (!(probability > 0))
        return 0;
    return std::clamp((std::log10(probability) - kLogFloor) / -kLogFloor, 0.0, 1.0);
}

void ExploreHeatmaps::setLogScale(bool on)
{
    m_logScale = on;
    update();
}

int ExploreHeatmaps::retrievedMarkCount() const
{
    int n = 0;
    for (const NeedleRunResult &r : m_runs)
        n += r.retrievedCells();
    return n;
}

int ExploreHeatmaps::trainedContextLineCount() const
{
    int n = 0;
    for (const NeedleRunResult &r : m_runs) {
        const auto within = std::count_if(r.lengths.begin(), r.lengths.end(), [&](int l) { return l <= r.n_ctx_train; });
        n += r.n_ctx_train > 0 && within > 0 && within < r.lengths.size() ? 1 : 0;
    }
    return n;
}

void ExploreHeatmaps::paintEvent(QPaintEvent *)
{
    QPainter p(this);
    paint(p, rect());
    if (hasFocus()) {
        p.setRenderHint(QPainter::Antialiasing, false);
        p.setBrush(Qt::NoBrush);
        p.setPen(QPen(palette().color(QPalette::Highlight), 2));
        p.drawRect(rect().adjusted(1, 1, -2, -2));
    }
}

void ExploreHeatmaps::focusInEvent(QFocusEvent *event)
{
    QWidget::focusInEvent(event);
    update();
}

void ExploreHeatmaps::focusOutEvent(QFocusEvent *event)
{
    QWidget::focusOutEvent(event);
    update();
}

void ExploreHeatmaps::paint(QPainter &p, const QRect &rect) const
{
    p.fillRect(rect, k_background);
    p.setRenderHint(QPainter::Antialiasing);
    if (m_runs.isEmpty()) {
        p.setPen(k_hint);
        p.drawText(rect, Qt::AlignCenter, tr("Run a needle grid, or check a saved one"));
        return;
    }
    const int columns = std::min(int(m_runs.size()), kMaxColumns);
    const int rows = (int(m_runs.size()) + columns - 1) / columns;
    const QRect area = rect.adjusted(8, 8, -8, -kScaleHeight);
    const int w = area.width() / columns;
    const int h = area.height() / rows;
    for (int i = 0; i < m_runs.size(); ++i)
        paintRun(p, m_runs[i], QRect(area.left() + (i % columns) * w, area.top() + (i / columns) * h, w, h));
    paintScale(p, QRect(rect.left() + 8, rect.bottom() - kScaleHeight + 8, rect.width() - 16, kScaleHeight - 12));
}

void ExploreHeatmaps::paintRun(QPainter &p, const NeedleRunResult &run, const QRect &box) const
{
    // The title: the label, then the task and how it went.
    const QRect titleRect(box.left() + 4, box.top(), box.width() - 8, kTitleHeight);
    QFont bold = p.font();
    bold.setBold(true);
    p.setFont(bold);
    p.setPen(k_text);
    const QFontMetrics fm(bold);
    p.drawText(titleRect.adjusted(0, 0, 0, -kTitleHeight / 2), Qt::AlignLeft | Qt::AlignVCenter,
               fm.elidedText(run.label + (run.cancelled ? tr(" (cancelled)") : QString()), Qt::ElideRight,
                             titleRect.width()));
    QFont normal = p.font();
    normal.setBold(false);
    p.setFont(normal);
    p.setPen(k_hint);
    const QString task = run.task == longscope::NeedleTask::Book ? tr("fact in “%1”").arg(run.book_title) : tr("passkey");
    p.drawText(titleRect.adjusted(0, kTitleHeight / 2, 0, 0), Qt::AlignLeft | Qt::AlignVCenter,
               QFontMetrics(normal).elidedText(tr("%1 · %2 retrieved of %3 · mean P %4")
                                                   .arg(task)
                                                   .arg(run.retrievedCells())
                                                   .arg(run.cells.size())
                                                   .arg(probabilityText(run.meanProbability())),
                                               Qt::ElideRight, titleRect.width()));

    const int nx = int(run.lengths.size());
    const int ny = int(run.depths.size());
    if (nx == 0 || ny == 0)
        return;
    const QRect grid(box.left() + kAxisLeft, box.top() + kTitleHeight + 4, box.width() - kAxisLeft - 12,
                     box.height() - kTitleHeight - kAxisBottom - 8);
    if (grid.width() < nx || grid.height() < ny)
        return;
    const double cw = double(grid.width()) / nx;
    const double ch = double(grid.height()) / ny;
    const bool showNumbers = cw >= 34 && ch >= 16;
    for (int x = 0; x < nx; ++x)
        for (int y = 0; y < ny; ++y) {
            const NeedleGridCell *c = run.cell(x, y);
            const QRectF r(grid.left() + x * cw, grid.top() + y * ch, cw, ch);
            if (!c || c->trials == 0) {
                p.fillRect(r, QBrush(k_missing, Qt::BDiagPattern));
                continue;
            }
            const QColor fill = colorFor(scalePosition(c->probability));
            p.fillRect(r, fill);
            const QColor ink = isLight(fill) ? QColor(0x20, 0x20, 0x20) : QColor(0xff, 0xff, 0xff);
            const double radius = std::min(cw, ch) * 0.16;
            const QPointF dot = showNumbers ? QPointF(r.right() - radius - 3, r.top() + radius + 3) : r.center();
            if (c->retrieved > 0) {
                p.setPen(QPen(ink, 1.5));
                p.setBrush(c->allRetrieved() ? QBrush(ink) : Qt::NoBrush);
                p.drawEllipse(dot, radius, radius);
                p.setBrush(Qt::NoBrush);
            }
            if (showNumbers) {
                p.setPen(ink);
                p.drawText(r, Qt::AlignCenter, probabilityText(c->probability));
            }
        }
    p.setPen(QPen(QColor(0xff, 0xff, 0xff), 1));
    for (int x = 1; x < nx; ++x)
        p.drawLine(QPointF(grid.left() + x * cw, grid.top()), QPointF(grid.left() + x * cw, grid.bottom() + 1));
    for (int y = 1; y < ny; ++y)
        p.drawLine(QPointF(grid.left(), grid.top() + y * ch), QPointF(grid.right() + 1, grid.top() + y * ch));

    // Axes: lengths below, depths on the left.
    p.setPen(k_text);
    for (int x = 0; x < nx; ++x)
        p.drawText(QRectF(grid.left() + x * cw, grid.bottom() + 2, cw, kAxisBottom / 2), Qt::AlignCenter,
                   lengthText(run.lengths[x]));
    p.setPen(k_hint);
    p.drawText(QRect(grid.left(), grid.bottom() + kAxisBottom / 2, grid.width(), kAxisBottom / 2), Qt::AlignCenter,
               tr("prompt length (tokens)"));
    p.setPen(k_text);
    for (int y = 0; y < ny; ++y)
        p.drawText(QRectF(box.left(), grid.top() + y * ch, kAxisLeft - 4, ch), Qt::AlignRight | Qt::AlignVCenter,
                   QStringLiteral("%1%").arg(run.depths[y] * 100, 0, 'g', 3));

    // The trained context: a line after the last length within it.
    const int within = int(std::count_if(run.lengths.begin(), run.lengths.end(), [&](int l) { return l <= run.n_ctx_train; }));
    if (run.n_ctx_train > 0 && within > 0 && within < nx) {
        const double lx = grid.left() + within * cw;
        p.setPen(QPen(k_trained, 2, Qt::DashLine));
        p.drawLine(QPointF(lx, grid.top() - 4), QPointF(lx, grid.bottom() + 4));
        p.drawText(QRectF(lx + 3, grid.top() - 2, cw, 14), Qt::AlignLeft | Qt::AlignTop,
                   tr("trained %1").arg(lengthText(run.n_ctx_train)));
    }
}

void ExploreHeatmaps::paintScale(QPainter &p, const QRect &rect) const
{
    const int barWidth = std::min(320, rect.width() / 2);
    const QRect bar(rect.left() + kAxisLeft, rect.top() + 4, barWidth, 12);
    for (int x = 0; x < bar.width(); ++x) {
        p.setPen(colorFor(double(x) / std::max(1, bar.width() - 1)));
        p.drawLine(bar.left() + x, bar.top(), bar.left() + x, bar.bottom());
    }
    p.setPen(k_text);
    p.drawText(QRect(rect.left(), bar.top() - 2, kAxisLeft - 6, 16), Qt::AlignRight | Qt::AlignVCenter,
               m_logScale ? QStringLiteral("1e%1").arg(kLogFloor) : QStringLiteral("0"));
    p.drawText(QRect(bar.right() + 6, bar.top() - 2, 20, 16), Qt::AlignLeft | Qt::AlignVCenter, QStringLiteral("1"));
    p.setPen(k_hint);
    const int keyLeft = std::max(bar.right() + 40, rect.left() + rect.width() / 2 + 40);
    p.drawText(QRect(bar.left(), bar.bottom() + 2, keyLeft - bar.left() - 8, 16), Qt::AlignLeft | Qt::AlignTop,
               m_logScale ? tr("P(answer), log scale: its tokens' probabilities multiplied (teacher-forced)")
                          : tr("P(answer): its tokens' probabilities multiplied (teacher-forced)"));
    p.setPen(QPen(k_text, 1.5));
    p.setBrush(k_text);
    p.drawEllipse(QPointF(keyLeft + 5, bar.center().y()), 4, 4);
    p.setBrush(Qt::NoBrush);
    p.drawEllipse(QPointF(keyLeft + 5, bar.center().y() + 16), 4, 4);
    p.setPen(k_hint);
    p.drawText(QRect(keyLeft + 14, bar.top() - 2, rect.right() - keyLeft - 14, 16), Qt::AlignLeft | Qt::AlignVCenter,
               tr("greedy decoding retrieves the answer in every trial"));
    p.drawText(QRect(keyLeft + 14, bar.top() + 14, rect.right() - keyLeft - 14, 16), Qt::AlignLeft | Qt::AlignVCenter,
               tr("in some trials · dashed: the trained context"));
}

bool ExploreHeatmaps::exportPng(const QString &path, QString *error, int width, int height) const
{
    const int w = width > 0 ? width : std::max(this->width(), 960);
    const int h = height > 0 ? height : std::max(this->height(), 540);
    QImage image(w, h, QImage::Format_ARGB32_Premultiplied);
    {
        QPainter p(&image);
        p.setFont(font());
        paint(p, QRect(0, 0, w, h));
    }
    return savePng(path, image, error);
}

bool ExploreHeatmaps::exportCsv(const QString &path, QString *error) const
{
    const QByteArray bytes = needleCsv(m_runs);
    return saveBytes(path, bytes, error);
}

} // namespace longscope::ui
