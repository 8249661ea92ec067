// The live plots: setting-change markers numbered at their lines (with the list and the
// tooltips), decode and prefill on axes of their own, exports of exactly the run shown (CSV
// columns, PNG at twice the size with its caption), and the run following the context (a new
// model, a new chat, a reopened conversation), on the widget alone and in the window with the
// bundled model; and the Explore plot's PNG, which cuts off nothing.
#include "offscreen.h"

#include "core/chat_model.h"
#include "core/conversation.h"
#include "core/conversation_store.h"
#include "core/plot_history.h"
#include "core/settings_json.h"
#include "widgets/explore_plot.h"
#include "widgets/generation_panel.h"
#include "widgets/main_window.h"
#include "widgets/metrics_plots.h"

#include <QAction>
#include <QFile>
#include <QImage>
#include <QJsonArray>
#include <QListWidget>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <qcustomplot.h>

#include <cmath>
#include <memory>

using namespace longscope;
using namespace longscope::ui;

namespace {

constexpr int kTimeoutMs = 60000;

StepMetrics step(int position, StepPhase phase, double tokensPerSecond, const Settings &settings = {})
{
    static int64_t counter = 0;
    StepMetrics m;
    m.step = ++counter;
    m.phase = phase;
    m.n_tokens = phase == StepPhase::Prefill ? 64 : 1;
    m.position = position;
    m.seconds = m.n_tokens / tokensPerSecond;
    m.tokens_per_second = tokensPerSecond;
    m.settings = settings;
    m.memory.weights = 1 << 20;
    m.memory.kv_resident = uint64_t(position) * 4096;
    m.memory.kv_reserved = 8u << 20;
    m.memory.scratch = 1 << 18;
    m.memory.total = m.memory.weights + m.memory.kv_resident + m.memory.scratch;
    return m;
}

// Prefill in chunks of 64 up to `prefillTo`, then decode one token a step up to `decodeTo`.
void feed(MetricsPlots &plots, int from, int prefillTo, int decodeTo, const Settings &settings = {})
{
    for (int p = from + 64; p <= prefillTo; p += 64)
        plots.addMetrics(step(p, StepPhase::Prefill, 1750, settings));
    for (int p = prefillTo + 1; p <= decodeTo; ++p)
        plots.addMetrics(step(p, StepPhase::Decode, 16 + (p % 3), settings));
}

// RFC 4180 fields of one line (quotes doubled inside quoted fields).
QStringList csvCells(const QString &line)
{
    QStringList cells{QString()};
    bool quoted = false;
    for (int i = 0; i < line.size(); ++i) {
        const QChar c = line[i];
        if (quoted) {
            if (c == QLatin1Char('"') && i + 1 < line.size() && line[i + 1] == QLatin1Char('"'))
                cells.last() += QLatin1Char('"'), ++i;
            else if (c == QLatin1Char('"'))
                quoted = false;
            else
                cells.last() += c;
        } else if (c == QLatin1Char('"')) {
            quoted = true;
        } else if (c == QLatin1Char(',')) {
            cells << QString();
        } else {
            cells.last() += c;
        }
    }
    return cells;
}

QStringList readLines(const QString &path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return QString::fromUtf8(f.readAll()).trimmed().split(QLatin1Char('\n'));
}

// The pixel of `position` on `plot`'s x axis, from the axis rect and the range alone.
double expectedX(QCustomPlot *plot, double position)
{
    const QRect r = plot->axisRect()->rect();
    const QCPRange range = plot->xAxis->range();
    return r.left() + (position - range.lower) / (range.upper - range.lower) * r.width();
}

class TestWindow : public MainWindow {
public:
    using MainWindow::MainWindow;
    QStringList errors;
    QString saveDirectory;  // where the save dialog answers
    QString suggestedName; // what it was offered

protected:
    void showError(const QString &title, const QString &text) override { errors << title + QStringLiteral(": ") + text; }
    bool askConfirmation(const QString &, const QString &) override { return true; }
    QString chooseOpenFile(const QString &, const QString &) override { return {}; }
    QString chooseDirectory(const QString &) override { return {}; }
    QString chooseSaveFile(const QString &, const QString &suggested, const QString &) override
    {
        suggestedName = suggested;
        return saveDirectory.isEmpty() ? QString() : saveDirectory + QLatin1Char('/') + suggested;
    }
};

} // namespace

class TestMetricsPlots : public QObject {
    Q_OBJECT

private:
    std::unique_ptr<MetricsPlots> makePlots();
    QTemporaryDir m_dir;

private slots:
    void initTestCase();
    void markersAreNumberedAtTheirLines();
    void markerTooltipsAndList();
    void decodeAndPrefillHaveTheirOwnAxes();
    void csvHoldsTheShownRunWithItsColumns();
    void pngIsTwiceTheSizeWithACaption();
    void newModelAndNewChatStartFresh();
    void historyRoundTripsThroughAConversation();
    void badPlotHistoryIsRefused();
    void windowKeepsEachConversationsPlots();
    void explorePngCutsNothing_data();
    void explorePngCutsNothing();
};

void TestMetricsPlots::initTestCase()
{
    QVERIFY(longscope::test::k_offscreen);
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(m_dir.isValid());
}

std::unique_ptr<MetricsPlots> TestMetricsPlots::makePlots()
{
    auto plots = std::make_unique<MetricsPlots>();
    plots->resize(1200, 360);
    plots->show();
    return plots;
}

void TestMetricsPlots::markersAreNumberedAtTheirLines()
{
    auto plots = makePlots();
    plots->setModel(QStringLiteral("tiny"));
    // 480 and 500 are close; 990 is at the right edge, where a label used to jump to the left
    // of its line, beside another marker.
    const int positions[] = {100, 480, 500, 990};
    const char *labels[] = {"α 2", "causal flash on", "KV vmm", "mem-eff on"};
    feed(*plots, 0, 64, 100);
    for (int i = 0; i < 4; ++i) {
        plots->addMarker(positions[i], QString::fromUtf8(labels[i])); // between two steps
        feed(*plots, positions[i], positions[i], i < 3 ? positions[i + 1] : 1000);
    }
    plots->replotNow();
    QCOMPARE(plots->markerCount(), 4);
    QCOMPARE(plots->stepCount(), 1 + 36 + 900); // one prefill chunk, then decode to 1000

    for (QCustomPlot *plot : {plots->memoryPlot(), plots->speedPlot()}) {
        const QRect axisRect = plot->axisRect()->rect();
        QRectF previous;
        for (int n = 1; n <= 4; ++n) {
            const double x = expectedX(plot, positions[n - 1]);
            QVERIFY2(std::abs(plots->markerLineX(plot, n) - x) <= 1.0, qPrintable(QString::number(n)));
            QCOMPARE(plots->markerLabelText(plot, n), QString::number(n));
            const QRectF label = plots->markerLabelRect(plot, n);
            QVERIFY(label.isValid());
            // Centred on its own line, above the curves, inside the plot.
            QVERIFY2(std::abs(label.center().x() - x) <= 1.5,
                     qPrintable(QStringLiteral("marker %1: label at %2, line at %3").arg(n).arg(label.center().x()).arg(x)));
            QVERIFY2(label.bottom() <= axisRect.top() + 1, qPrintable(QString::number(label.bottom())));
            QVERIFY(label.top() >= 0 && label.right() <= plot->width());
            if (n == 3) // 500 next to 480: stacked, not on top of each other
                QVERIFY2(!label.intersects(previous), "labels 2 and 3 overlap");
            previous = label;
        }
    }
}

void TestMetricsPlots::markerTooltipsAndList()
{
    auto plots = makePlots();
    feed(*plots, 0, 256, 300);
    plots->addMarker(300, QStringLiteral("causal flash on"));
    feed(*plots, 300, 300, 450);
    plots->addMarker(450, QStringLiteral("KV vmm"));
    feed(*plots, 450, 450, 600);
    plots->replotNow();

    QCOMPARE(plots->markerList()->count(), 2);
    QCOMPARE(plots->markerList()->item(0)->text(), QStringLiteral("1 at token 300: causal flash on"));
    QCOMPARE(plots->markerList()->item(1)->text(), QStringLiteral("2 at token 450: KV vmm"));

    QCustomPlot *plot = plots->speedPlot();
    const int midY = plot->axisRect()->rect().center().y();
    const QString onSecond = plots->markerToolTip(plot, QPoint(int(std::lround(expectedX(plot, 450))), midY));
    QCOMPARE(onSecond, QStringLiteral("Setting change 2 at token 450: KV vmm"));
    const QRectF label = plots->markerLabelRect(plot, 1);
    QVERIFY(plots->markerToolTip(plot, label.center().toPoint()).contains(QStringLiteral("causal flash on")));
    QVERIFY(plots->markerToolTip(plot, QPoint(int(std::lround(expectedX(plot, 380))), midY)).isEmpty());
}

void TestMetricsPlots::decodeAndPrefillHaveTheirOwnAxes()
{
    auto plots = makePlots();
    feed(*plots, 0, 1536, 1600); // a book at 1,750 tok/s, then decode at 16-18 tok/s
    plots->replotNow();
    QCustomPlot *plot = plots->speedPlot();
    QCPAxis *decodeAxis = nullptr;
    QCPAxis *prefillAxis = nullptr;
    for (int i = 0; i < plot->graphCount(); ++i) {
        if (plot->graph(i)->name().startsWith(QStringLiteral("prefill")))
            prefillAxis = plot->graph(i)->valueAxis();
        else
            decodeAxis = decodeAxis ? decodeAxis : plot->graph(i)->valueAxis();
    }
    QVERIFY(decodeAxis && prefillAxis && decodeAxis != prefillAxis);
    QVERIFY(prefillAxis->visible());
    QVERIFY2(prefillAxis->range().upper >= 1750, qPrintable(QString::number(prefillAxis->range().upper)));
    // Decode fills most of its axis instead of lying at zero.
    QVERIFY2(decodeAxis->range().upper >= 18 && decodeAxis->range().upper <= 30,
             qPrintable(QString::number(decodeAxis->range().upper)));
    const QRect r = plot->axisRect()->rect();
    QVERIFY(r.bottom() - decodeAxis->coordToPixel(16) > 0.5 * r.height());

    // Narrow, the legends take more rows rather than cutting names off.
    plots->resize(640, 360);
    QCoreApplication::processEvents();
    plots->replotNow();
    for (QCustomPlot *p : {plots->memoryPlot(), plots->speedPlot()}) {
        const QRect legend = p->legend->outerRect();
        QVERIFY2(legend.width() >= p->legend->minimumOuterSizeHint().width() && legend.right() <= p->width(),
                 qPrintable(QStringLiteral("%1: legend %2 wide, needs %3").arg(p->objectName()).arg(legend.width()).arg(p->legend->minimumOuterSizeHint().width())));
    }
}

void TestMetricsPlots::csvHoldsTheShownRunWithItsColumns()
{
    auto plots = makePlots();
    plots->setModel(QStringLiteral("first-model"));
    feed(*plots, 0, 128, 200);
    const int firstRun = plots->history().run;
    Settings changed;
    changed.rope.ntk_alpha = 2.0f;
    changed.kv_mode = KvMode::Vmm;
    plots->setModel(QStringLiteral("tiny, v2")); // a comma: the field is quoted
    feed(*plots, 0, 128, 160);
    plots->addMarker(160, QStringLiteral("α 2, KV vmm"));
    feed(*plots, 160, 160, 170, changed);
    QVERIFY(plots->history().run > firstRun);

    const QString path = m_dir.filePath(QStringLiteral("shown.csv"));
    QVERIFY(plots->exportCsv(path));
    const QStringList lines = readLines(path);
    QCOMPARE(lines.size(), 1 + 2 + 32 + 10); // header, 2 prefill chunks, 32 + 10 decode steps
    const QStringList header = csvCells(lines.first());
    QCOMPARE(header.mid(0, 6), (QStringList{QStringLiteral("run"), QStringLiteral("model"), QStringLiteral("marker"),
                                           QStringLiteral("settings"), QStringLiteral("step"), QStringLiteral("phase")}));
    const int positionColumn = int(header.indexOf(QStringLiteral("position")));
    const int kvColumn = int(header.indexOf(QStringLiteral("kv_mode")));
    QVERIFY(positionColumn > 0 && kvColumn > 0);
    int lastPosition = 0;
    for (int i = 1; i < lines.size(); ++i) {
        const QStringList cells = csvCells(lines[i]);
        QCOMPARE(cells.size(), header.size());
        QCOMPARE(cells[0], QString::number(plots->history().run));
        QCOMPARE(cells[1], QStringLiteral("tiny, v2"));
        const int position = cells[positionColumn].toInt();
        QVERIFY(position > lastPosition); // one run: no step of the first model's
        lastPosition = position;
        if (position <= 160) {
            QCOMPARE(cells[2], position == 160 ? QStringLiteral("1") : QStringLiteral("0"));
            QCOMPARE(cells[3], QStringLiteral("α 1 · keys after RoPE · naive attention · KV static"));
            QCOMPARE(cells[kvColumn], QStringLiteral("static"));
        } else {
            QCOMPARE(cells[2], QStringLiteral("1"));
            QCOMPARE(cells[3], QStringLiteral("α 2 · keys after RoPE · naive attention · KV vmm"));
            QCOMPARE(cells[kvColumn], QStringLiteral("vmm"));
        }
    }
    QCOMPARE(lastPosition, 170);
}

void TestMetricsPlots::pngIsTwiceTheSizeWithACaption()
{
    auto plots = makePlots();
    plots->setModel(QStringLiteral("tiny"));
    feed(*plots, 0, 256, 300);
    plots->addMarker(300, QStringLiteral("causal flash on")); // between two steps, as the worker applies it
    feed(*plots, 300, 300, 400);
    const QString path = m_dir.filePath(QStringLiteral("plots.png"));
    QVERIFY(plots->exportPng(path));
    const QImage image(path);
    QVERIFY(!image.isNull());
    const int plotsWidth = plots->memoryPlot()->width() + plots->speedPlot()->width();
    const int plotsHeight = std::max(plots->memoryPlot()->height(), plots->speedPlot()->height());
    QCOMPARE(image.width(), 2 * plotsWidth);
    QVERIFY2(image.height() > 2 * plotsHeight + 20, qPrintable(QString::number(image.height())));
    const QString caption = image.text(QStringLiteral("Description"));
    QVERIFY2(caption.contains(QStringLiteral("tiny · run ")), qPrintable(caption));
    QVERIFY2(caption.contains(QStringLiteral("α 1 · keys after RoPE · naive attention · KV static")), qPrintable(caption));
    QVERIFY2(caption.contains(QStringLiteral("1 at token 300: causal flash on")), qPrintable(caption));
    // The caption is drawn under the plots: dark text pixels in the band.
    int dark = 0;
    for (int y = 2 * plotsHeight; y < image.height(); ++y)
        for (int x = 0; x < image.width(); ++x)
            dark += qGray(image.pixel(x, y)) < 128;
    QVERIFY2(dark > 200, qPrintable(QString::number(dark)));

    QString error;
    QVERIFY(!plots->exportPng(m_dir.filePath(QStringLiteral("no/such/dir/plots.png")), &error));
    QVERIFY(error.contains(QStringLiteral("no/such/dir")));
}

void TestMetricsPlots::newModelAndNewChatStartFresh()
{
    auto plots = makePlots();
    plots->setModel(QStringLiteral("first"));
    feed(*plots, 0, 256, 300);
    plots->addMarker(300, QStringLiteral("KV vmm"));
    plots->flush();
    QVERIFY(plots->plottedPointCount() > 0);

    // A new model: nothing of the old one's.
    plots->setModel(QStringLiteral("second"));
    QCOMPARE(plots->stepCount(), 0);
    QCOMPARE(plots->markerCount(), 0);
    QCOMPARE(plots->plottedPointCount(), 0);
    QCOMPARE(plots->memoryPlot()->graph(0)->dataCount(), 0);
    QCOMPARE(plots->speedPlot()->itemCount(), 0);
    QCOMPARE(plots->history().model, QStringLiteral("second"));

    // New chat: settings applied at token 0 draw no marker over anything.
    feed(*plots, 0, 128, 150);
    plots->resetForContext();
    plots->addMarker(0, QStringLiteral("α auto"));
    QCOMPARE(plots->markerCount(), 0);
    QCOMPARE(plots->stepCount(), 0);
    QCOMPARE(plots->memoryPlot()->itemCount(), 0);
    QCOMPARE(plots->markerList()->count(), 1); // the hint line only
    QCOMPARE(plots->markerList()->item(0)->flags(), Qt::NoItemFlags);

    // A step below the last one is a new context: a new run, fresh curves.
    feed(*plots, 0, 128, 140);
    const int run = plots->history().run;
    plots->addMetrics(step(5, StepPhase::Decode, 20));
    QCOMPARE(plots->history().run, run + 1);
    QCOMPARE(plots->stepCount(), 1);
    plots->flush();
    QCOMPARE(plots->plottedPointCount(), 1);
}

void TestMetricsPlots::historyRoundTripsThroughAConversation()
{
    auto plots = makePlots();
    plots->setModel(QStringLiteral("tiny"));
    Settings flash;
    flash.attention.causal_flash = true;
    flash.rope.ntk_auto = true;
    feed(*plots, 0, 192, 230);
    plots->addMarker(230, QStringLiteral("causal flash on, α auto"));
    feed(*plots, 230, 230, 260, flash);
    const PlotHistory shown = plots->history();

    Conversation c;
    c.appendMessage(Message::Role::User, QStringLiteral("hi"));
    c.setPlotHistory(shown);
    QString error;
    const std::optional<Conversation> back = Conversation::fromJsonBytes(c.toJsonBytes(), &error);
    QVERIFY2(back.has_value(), qPrintable(error));
    const PlotHistory &restored = back->plotHistory();
    QCOMPARE(restored.run, shown.run);
    QCOMPARE(restored.model, QStringLiteral("tiny"));
    QCOMPARE(restored.steps.size(), shown.steps.size());
    QCOMPARE(restored.markers.size(), 1);
    QVERIFY(restored.steps.last().settings == flash);
    QCOMPARE(restored.toCsv(), shown.toCsv()); // every column of every step

    // Shown again in place of another run; anything new afterwards is a new run of the
    // model loaded now.
    plots->setModel(QStringLiteral("other"));
    feed(*plots, 0, 64, 90);
    plots->restoreHistory(restored);
    QCOMPARE(plots->stepCount(), int(shown.steps.size()));
    QCOMPARE(plots->markerCount(), 1);
    QTRY_COMPARE(plots->plottedPointCount(), 3 + 38 + 30); // prefill chunks, decode before and after
    QCOMPARE(plots->markerList()->item(0)->text(), QStringLiteral("1 at token 230: causal flash on, α auto"));
    plots->addMetrics(step(300, StepPhase::Prefill, 1000));
    QCOMPARE(plots->stepCount(), 1);
    QCOMPARE(plots->markerCount(), 0);
    QCOMPARE(plots->history().model, QStringLiteral("other"));
    QVERIFY(plots->history().run > restored.run);

    // A conversation without plots restores to empty ones.
    plots->restoreHistory(PlotHistory{});
    QCOMPARE(plots->stepCount(), 0);
    QCOMPARE(plots->plottedPointCount(), 0);
}

void TestMetricsPlots::badPlotHistoryIsRefused()
{
    PlotHistory h;
    h.run = 1;
    h.model = QStringLiteral("tiny");
    h.steps << step(64, StepPhase::Prefill, 100);
    const QJsonObject good = h.toJson();
    QString error;
    QVERIFY(PlotHistory::fromJson(good, &error).has_value());

    QJsonObject shortStep = good;
    shortStep[QStringLiteral("steps")] = QJsonArray{QStringLiteral("1 p 64 64 0.5 100 1 10000 0")};
    QVERIFY(!PlotHistory::fromJson(shortStep, &error));
    QCOMPARE(error, QStringLiteral("plots: step 1 has 9 fields, not 24"));

    // A step saved before the thread count was recorded (23 fields) still loads, with none.
    QJsonObject olderStep = good;
    olderStep[QStringLiteral("steps")] =
        QJsonArray{QStringLiteral("1 p 64 64 0.5 100 1 10000 0 1 2 3 4 5 6 7 8 9 10 11 0 0 0")};
    const auto older = PlotHistory::fromJson(olderStep, &error);
    QVERIFY2(older.has_value(), qPrintable(error));
    QCOMPARE(older->steps.size(), qsizetype(1));
    QCOMPARE(older->steps.first().threads, 0);
    QCOMPARE(older->steps.first().memory.kv_bytes_copied, uint64_t(11));

    QJsonObject badSettings = good;
    badSettings[QStringLiteral("settings")] = QJsonArray{};
    QVERIFY(!PlotHistory::fromJson(badSettings, &error));
    QCOMPARE(error, QStringLiteral("plots: step 1 names settings 1 of 0"));

    QJsonObject notNumber = good;
    QString line = good[QStringLiteral("steps")].toArray().first().toString();
    line.replace(QStringLiteral(" p "), QStringLiteral(" x "));
    notNumber[QStringLiteral("steps")] = QJsonArray{line};
    QVERIFY(!PlotHistory::fromJson(notNumber, &error));
    QCOMPARE(error, QStringLiteral("plots: step 1 has the phase 'x', not p or d"));

    // A conversation with bad plots says so, with the key.
    Conversation c;
    c.appendMessage(Message::Role::User, QStringLiteral("hi"));
    QJsonObject json = c.toJson();
    json[QStringLiteral("plots")] = QStringLiteral("nonsense");
    QVERIFY(!Conversation::fromJson(json, &error));
    QCOMPARE(error, QStringLiteral("plots: not an object"));
}

void TestMetricsPlots::windowKeepsEachConversationsPlots()
{
    auto *settings = new QSettings(m_dir.filePath(QStringLiteral("settings.ini")), QSettings::IniFormat, this);
    MainWindowOptions options;
    options.modelPath = QStringLiteral(LONGSCOPE_BUNDLED_MODEL);
    options.conversationDirectory = m_dir.filePath(QStringLiteral("conversations"));
    options.runsDirectory = m_dir.filePath(QStringLiteral("runs"));
    options.settings = settings;
    auto w = std::make_unique<TestWindow>(options);
    w->resize(1366, 768);
    w->show();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    MetricsPlots *plots = w->metricsPlots();
    QCOMPARE(plots->history().model, QStringLiteral("stories260K"));
    w->generationPanel()->maxNewTokensBox()->setValue(12);

    auto sendAndWait = [&](const QString &text) {
        w->sendMessage(text);
        QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    };
    sendAndWait(QStringLiteral("Once upon a time"));
    const QString first = w->chatController()->conversation().id();
    const QByteArray firstCsv = plots->history().toCsv();
    QVERIFY(plots->stepCount() > 1);

    // New chat: empty plots, no marker at token 0.
    w->clearConversation();
    QCOMPARE(plots->stepCount(), 0);
    QCOMPARE(plots->markerCount(), 0);
    QCOMPARE(plots->plottedPointCount(), 0);
    // The second conversation holds a book, streamed chunk by chunk.
    QSignalSpy streamed(w.get(), &MainWindow::bookStreamFinished);
    QVERIFY(w->openBook(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt")));
    w->streamBook();
    QTRY_VERIFY_WITH_TIMEOUT(streamed.count() == 1, kTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    const QString second = w->chatController()->conversation().id();
    QVERIFY(second != first);
    const QByteArray secondCsv = plots->history().toCsv();
    QVERIFY(plots->stepCount() >= 8);
    QVERIFY(secondCsv != firstCsv);
    w->clearConversation(); // saves the book's conversation

    // Reopening shows each conversation's own plots, saved with it: never the book's in
    // the first one.
    w->openConversation(first);
    QCOMPARE(plots->history().toCsv(), firstCsv);
    QTRY_VERIFY(plots->plottedPointCount() > 0);
    w->openConversation(second);
    QCOMPARE(plots->history().toCsv(), secondCsv);
    w->openConversation(first);
    QCOMPARE(plots->history().toCsv(), firstCsv);
    const std::optional<Conversation> saved = w->conversationStore()->load(first);
    QVERIFY(saved.has_value());
    QCOMPARE(saved->plotHistory().toCsv(), firstCsv);

    // File > Export Plots as CSV: named after the run, holding it alone.
    w->saveDirectory = m_dir.path();
    QAction *exportCsv = nullptr;
    for (QAction *a : w->findChildren<QAction *>())
        if (a->text().contains(QStringLiteral("Plots as &CSV")))
            exportCsv = a;
    QVERIFY(exportCsv);
    exportCsv->trigger();
    QCOMPARE(w->suggestedName, QStringLiteral("longscope-stories260K-run%1.csv").arg(plots->history().run));
    const QStringList lines = readLines(m_dir.filePath(w->suggestedName));
    QCOMPARE(lines.size(), plots->stepCount() + 1);
    for (int i = 1; i < lines.size(); ++i)
        QCOMPARE(csvCells(lines[i]).mid(0, 2), (QStringList{QString::number(plots->history().run), QStringLiteral("stories260K")}));

    // Another model (the same file again: a new session) starts fresh curves.
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadModel(QStringLiteral(LONGSCOPE_BUNDLED_MODEL));
    QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1, kTimeoutMs);
    QCOMPARE(plots->stepCount(), 0);
    QCOMPARE(plots->plottedPointCount(), 0);
    QVERIFY(w->errors.isEmpty());
}

void TestMetricsPlots::explorePngCutsNothing_data()
{
    QTest::addColumn<int>("ctx");
    QTest::addColumn<int>("width");
    QTest::newRow("trained context mid-plot, 960 wide") << 1024 << 960;
    QTest::newRow("trained context near the right edge, 960 wide") << 600 << 960;
    QTest::newRow("trained context mid-plot, 1400 wide") << 2048 << 1400;
}

void TestMetricsPlots::explorePngCutsNothing()
{
    QFETCH(int, ctx);
    QFETCH(int, width);
    // The eight preset runs of a book with a long title, as the Explore tab shows them.
    QVector<PerplexityRunResult> runs;
    for (const float alpha : {1.0f, 2.0f, 4.0f, 0.0f}) {
        for (const bool beforeRope : {false, true}) {
            PerplexityRunResult r;
            r.settings.rope.ntk_auto = alpha == 0.0f;
            r.settings.rope.ntk_alpha = alpha == 0.0f ? 1.0f : alpha;
            r.settings.rope.store_kv_before_rope = beforeRope;
            r.label = describeSettings(r.settings);
            r.ctx = ctx;
            r.bucket = 64;
            r.n_ctx_train = 512;
            r.model_name = QStringLiteral("stories260K");
            r.book_title = QStringLiteral("Alice’s Adventures in Wonderland, with a long subtitle for good measure");
            for (int b = 0; b + 64 <= ctx; b += 64)
                r.curve.push_back(PerplexityPoint{b, b + 64, 64, 3.0 + 0.001 * b});
            r.n_scored = 64 * r.curve.size();
            runs.push_back(r);
        }
    }
    ExplorePlot plot;
    plot.resize(720, 420); // smaller on screen than the export
    plot.show();
    plot.setRuns(runs);
    const QImage image = plot.renderImage(width, 540);
    QCOMPARE(image.size(), QSize(2 * width, 2 * 540));

    // The layout the export was drawn with stays until the next replot.
    QCustomPlot *p = plot.plot();
    auto *subtitle = qobject_cast<QCPTextElement *>(p->plotLayout()->element(1, 0));
    QVERIFY(subtitle);
    const QFontMetrics subtitleFm(subtitle->font());
    for (const QString &line : subtitle->text().split(QLatin1Char('\n')))
        QVERIFY2(subtitleFm.horizontalAdvance(line) <= subtitle->rect().width(),
                 qPrintable(QStringLiteral("subtitle line '%1' is wider than %2").arg(line).arg(subtitle->rect().width())));
    QVERIFY(subtitle->text().contains(QStringLiteral("stories260K")));
    QVERIFY(subtitle->outerRect().bottom() <= p->axisRect()->outerRect().top() + 1);

    const QRect legend = p->legend->outerRect();
    QVERIFY2(legend.right() <= width && legend.left() >= 0, qPrintable(QString::number(legend.right())));
    QVERIFY2(legend.width() >= p->legend->minimumOuterSizeHint().width(),
             qPrintable(QStringLiteral("legend %1 wide, needs %2").arg(legend.width()).arg(p->legend->minimumOuterSizeHint().width())));

    QCPItemText *trained = nullptr;
    for (int i = 0; i < p->itemCount(); ++i)
        if (p->item(i)->objectName() == QStringLiteral("trainedContextLabel"))
            trained = qobject_cast<QCPItemText *>(p->item(i));
    QVERIFY(trained);
    const QRectF label(trained->topLeft->pixelPosition(), trained->bottomRight->pixelPosition());
    const QRect axes = p->axisRect()->rect();
    QVERIFY2(label.left() >= axes.left() && label.right() <= axes.right() + 1,
             qPrintable(QStringLiteral("label %1-%2, axes %3-%4").arg(label.left()).arg(label.right()).arg(axes.left()).arg(axes.right())));
    // Beside its own line: one edge of the label box sits at the line.
    const double lineX = p->xAxis->coordToPixel(512);
    QVERIFY(std::min(std::abs(label.left() - lineX), std::abs(label.right() - lineX)) <= 1.5);
}

QTEST_MAIN(TestMetricsPlots)
#include "tst_metrics_plots.moc"
