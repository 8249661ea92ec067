// The Explore tab, off screen, with the bundled stories260K (trained context 512): the
// worker's runPerplexity against longscope::perplexity() called directly on the same tokens
// (the engine API the CLI uses), cancelling, the chat's context left alone; the view running
// two presets onto one plot with the trained-context line, its PNG and CSV exports, saved runs
// round-tripping through the store and reopening, corrupt run files skipped. The needle grid:
// a 2x3 grid run by the view for two settings, each cell's probability against exp of the
// log-probability perplexity() gives the answer's tokens, the heatmaps and their PNG and CSV,
// saving and reopening, bad input named; the preset groups covering every setting.
#include "offscreen.h"
#include "threaded_worker.h"

#include "core/book.h"
#include "core/engine_worker.h"
#include "core/explore_presets.h"
#include "core/explore_store.h"
#include "core/settings_json.h"
#include "widgets/chat_panel.h"
#include "widgets/explore_heatmaps.h"
#include "widgets/explore_needle_controls.h"
#include "widgets/explore_plot.h"
#include "widgets/explore_run_list.h"
#include "widgets/explore_run_table.h"
#include "widgets/explore_settings_list.h"
#include "widgets/explore_view.h"
#include "widgets/main_window.h"

#include "longscope/model.h"
#include "longscope/needle.h"
#include "longscope/perplexity.h"
#include "longscope/tokenizer.h"

#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QLineEdit>
#include <QProgressBar>
#include <QSet>
#include <QSettings>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>

using namespace longscope;
using namespace longscope::ui;
using longscope::test::ThreadedWorker;

namespace {

constexpr int kTimeoutMs = 60000;
const QString k_model = QStringLiteral(LONGSCOPE_BUNDLED_MODEL);
const QString k_alice = QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt");

// The worker's perplexity signals, received in the test thread (queued).
struct Runs : QObject {
    explicit Runs(EngineWorker *w)
    {
        connect(w, &EngineWorker::perplexityProgress, this,
                [this](const QString &label, qint64 done, qint64 total) { progress << std::make_tuple(label, done, total); });
        connect(w, &EngineWorker::perplexityFinished, this,
                [this](const QString &label, const PerplexityRunResult &r) { finished << qMakePair(label, r); });
        connect(w, &EngineWorker::errorOccurred, this, [this](const QString &e) { errors << e; });
        connect(w, &EngineWorker::streamFinished, this, [this](bool stopped, int n) { streamed << qMakePair(stopped, n); });
    }
    QList<std::tuple<QString, qint64, qint64>> progress;
    QList<QPair<QString, PerplexityRunResult>> finished;
    QStringList errors;
    QList<QPair<bool, int>> streamed;
};

class TestWindow : public MainWindow {
public:
    using MainWindow::MainWindow;
    QStringList errors;
    QString saveAnswer;

protected:
    void showError(const QString &title, const QString &text) override { errors << title + QStringLiteral(": ") + text; }
    bool askConfirmation(const QString &, const QString &) override { return true; }
    QString chooseOpenFile(const QString &, const QString &) override { return {}; }
    QString chooseDirectory(const QString &) override { return {}; }
    QString chooseSaveFile(const QString &, const QString &, const QString &) override { return saveAnswer; }
};

longscope::Settings preset(const QString &label)
{
    for (const ExplorePreset &p : explorePresets())
        if (p.label == label)
            return p.settings;
    qFatal("no preset %s", qPrintable(label));
}

PerplexityRunResult sampleRun(const QString &label, double nll, const QDateTime &created)
{
    PerplexityRunResult r;
    r.label = label;
    r.settings = preset(QStringLiteral("α auto · keys before RoPE"));
    r.settings.context_limit = 1024;
    r.ctx = 1024;
    r.bucket = 256;
    r.n_ctx_train = 512;
    r.model_name = QStringLiteral("stories260K");
    r.book_title = QStringLiteral("A \"Tale\", of Two Cities");
    r.created = created;
    for (int b = 0; b < 4; ++b)
        r.curve.append(PerplexityPoint{b * 256, (b + 1) * 256, 1023 - (b == 0 ? 1 : 0), nll + 0.25 * b});
    r.mean_nll = nll + 0.375;
    r.n_scored = 4092;
    r.n_total = 4092;
    r.windows = 4;
    r.seconds = 1.5;
    r.peak_memory_bytes = 3 * 1024 * 1024;
    r.tokens_per_second = 5000.5;
    r.steps = 16;
    return r;
}

} // namespace

class TestExplore : public QObject {
    Q_OBJECT

private:
    EngineWorker *w() { return m_tw->worker; }
    // Runs runPerplexity through a queued call and waits for its result.
    PerplexityRunResult score(Runs &runs, const QString &text, const longscope::Settings &s, int ctx, int bucket,
                              const QString &label, qint64 maxTokens = 0);
    std::unique_ptr<TestWindow> makeWindow();

    std::unique_ptr<ThreadedWorker> m_tw;
    std::unique_ptr<Model> m_model; // the test's own, for the direct engine call
    QString m_text;                 // a stretch of Alice (Gutenberg header stripped)
    QTemporaryDir m_dir;
    int m_windows = 0;

private slots:
    void initTestCase();
    void cleanupTestCase();
    void workerRunMatchesTheEngine();
    void workerRunKeepsTheChatContext();
    void cancelMidRunReportsCancelled();
    void badRequestsFailCleanly();
    void viewRunsTwoPresetsOntoOnePlot();
    void viewCancelStopsTheQueue();
    void closingMidRunIsClean();
    void runsRoundTripThroughTheStore();
    void savedRunsReopenInTheView();
    void corruptRunFilesAreSkipped();
    void viewRunsNeedleGridsAsHeatmaps();
    void needleGridsRoundTripAndReopen();
    void badNeedleInputIsNamed();
    void presetGroupsCoverEverySetting();
    void ropeScalingPresetsRunLikeTheEngine();
    void defaultContextIsTwiceTheTrained();
};

void TestExplore::initTestCase()
{
    QVERIFY(longscope::test::k_offscreen);
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(m_dir.isValid());
    QVERIFY2(QFile::exists(k_model), qPrintable(k_model));
    m_model = Model::load(k_model.toStdString());
    QString error;
    const std::optional<Book> book = loadBook(k_alice, &error);
    QVERIFY2(book, qPrintable(error));
    QVERIFY(book->stripped);
    m_text = book->text.left(2400);

    m_tw = std::make_unique<ThreadedWorker>();
    QVERIFY(m_tw->loadModel(k_model, kTimeoutMs));
}

void TestExplore::cleanupTestCase()
{
    m_tw.reset();
}

PerplexityRunResult TestExplore::score(Runs &runs, const QString &text, const longscope::Settings &s, int ctx,
                                       int bucket, const QString &label, qint64 maxTokens)
{
    const int before = int(runs.finished.size());
    QMetaObject::invokeMethod(
        w(), [worker = w(), text, s, ctx, bucket, label, maxTokens] { worker->runPerplexity(text, s, ctx, bucket, label, maxTokens); },
        Qt::QueuedConnection);
    if (!QTest::qWaitFor([&] { return runs.finished.size() > before; }, kTimeoutMs))
        return {};
    return runs.finished.last().second;
}

void TestExplore::workerRunMatchesTheEngine()
{
    // Truth: longscope::perplexity() on the text's tokens (no BOS), as longscope-cli does.
    const longscope::Settings settings = preset(QStringLiteral("α 2"));
    const QByteArray utf8 = m_text.toUtf8();
    const std::vector<int32_t> tokens = m_model->tokenizer().encode(std::string(utf8.constData(), size_t(utf8.size())), false);
    QVERIFY(tokens.size() > 512);
    PerplexityOptions o;
    o.ctx = 256;
    o.bucket = 64;
    o.n_threads = 2;
    o.settings = settings;
    const PerplexityResult want = perplexity(*m_model, tokens, o);

    Runs runs(w());
    const PerplexityRunResult got = score(runs, m_text, settings, 256, 64, QStringLiteral("α 2"));
    QCOMPARE(runs.finished.size(), 1);
    QCOMPARE(runs.finished.first().first, QStringLiteral("α 2"));
    QVERIFY(runs.errors.isEmpty());
    QVERIFY(!got.failed());
    QVERIFY(!got.cancelled);
    QCOMPARE(got.label, QStringLiteral("α 2"));
    QCOMPARE(got.ctx, 256);
    QCOMPARE(got.bucket, 64);
    QCOMPARE(got.n_ctx_train, 512);
    QCOMPARE(got.settings.rope.ntk_alpha, 2.0f);
    QCOMPARE(got.settings.context_limit, 256);
    QCOMPARE(got.n_scored, qint64(want.n_scored));
    QCOMPARE(got.n_scored, qint64(tokens.size()));
    QCOMPARE(got.n_total, got.n_scored);
    QCOMPARE(got.windows, want.windows);
    QVERIFY2(std::abs(got.mean_nll - want.mean_nll) < 1e-12,
             qPrintable(QStringLiteral("%1 vs %2").arg(got.mean_nll, 0, 'g', 17).arg(want.mean_nll, 0, 'g', 17)));
    QVERIFY(std::abs(got.perplexity() - want.perplexity()) < 1e-9);
    QCOMPARE(got.curve.size(), qsizetype(want.curve.size()));
    QCOMPARE(got.curve.size(), 4); // 256 positions in buckets of 64
    for (int i = 0; i < got.curve.size(); ++i) {
        QCOMPARE(got.curve[i].begin, want.curve[size_t(i)].begin);
        QCOMPARE(got.curve[i].end, want.curve[size_t(i)].end);
        QCOMPARE(got.curve[i].count, qint64(want.curve[size_t(i)].count));
        QVERIFY(std::abs(got.curve[i].mean_nll - want.curve[size_t(i)].mean_nll) < 1e-12);
    }
    // Progress after every step, ending at the total; cost from the run's StepMetrics.
    QVERIFY(!runs.progress.isEmpty());
    QCOMPARE(std::get<1>(runs.progress.last()), got.n_scored);
    QCOMPARE(std::get<2>(runs.progress.last()), got.n_scored);
    QCOMPARE(got.steps, int(runs.progress.size()));
    QVERIFY(got.tokens_per_second > 0);
    QVERIFY(got.peak_memory_bytes > 0);
    QVERIFY(got.seconds > 0);
    QVERIFY(got.created.isValid());

    // A token limit scores that many tokens, like the CLI's --max-tokens.
    const PerplexityRunResult limited = score(runs, m_text, settings, 256, 64, QStringLiteral("limited"), 300);
    QCOMPARE(limited.n_scored, qint64(300));
    QCOMPARE(limited.windows, 2);
}

void TestExplore::workerRunKeepsTheChatContext()
{
    Runs runs(w());
    QMetaObject::invokeMethod(w(), [worker = w()] { worker->resetContext(); }, Qt::QueuedConnection);
    QMetaObject::invokeMethod(w(), [worker = w()] { worker->streamText(QStringLiteral("Once upon a time"), 0); },
                              Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(runs.streamed.size(), 1, kTimeoutMs);
    const int inContext = runs.streamed.first().second;
    QVERIFY(inContext > 0);

    const PerplexityRunResult r = score(runs, m_text, preset(QStringLiteral("α auto")), 128, 32, QStringLiteral("α auto"));
    QVERIFY(!r.failed());
    QVERIFY(r.n_scored > 0);

    // The chat's context is as it was: more text goes on after it.
    QMetaObject::invokeMethod(w(), [worker = w()] { worker->streamText(QStringLiteral(" there was a cat"), 0); },
                              Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(runs.streamed.size(), 2, kTimeoutMs);
    QVERIFY(!runs.streamed.last().first);
    QVERIFY(runs.streamed.last().second > inContext);
    QVERIFY(runs.errors.isEmpty());
    QCOMPARE(w()->settings().context_limit, 0); // the chat's settings were not touched either
}

void TestExplore::cancelMidRunReportsCancelled()
{
    Runs runs(w());
    // Stop from inside the first progress report (the worker's thread): the engine's
    // callback then answers false at once.
    int reports = 0;
    EngineWorker *worker = w();
    const auto connection = connect(
        worker, &EngineWorker::perplexityProgress, worker,
        [worker, &reports](const QString &, qint64, qint64) {
            if (++reports == 1)
                worker->requestStop();
        },
        Qt::DirectConnection);
    const PerplexityRunResult r = score(runs, m_text, preset(QStringLiteral("α 1")), 256, 64, QStringLiteral("α 1"));
    disconnect(connection);
    QVERIFY(!r.failed());
    QVERIFY(r.cancelled);
    QVERIFY(r.n_scored > 0);
    QVERIFY(r.n_scored < r.n_total);
    QCOMPARE(r.windows, 1);
    QVERIFY(!r.curve.isEmpty());
    QVERIFY(runs.errors.isEmpty());

    // The next run starts afresh.
    const PerplexityRunResult next = score(runs, m_text, preset(QStringLiteral("α 1")), 256, 64, QStringLiteral("α 1"), 400);
    QVERIFY(!next.cancelled);
    QCOMPARE(next.n_scored, qint64(400));
}

void TestExplore::badRequestsFailCleanly()
{
    Runs runs(w());
    const PerplexityRunResult tooShort = score(runs, m_text, {}, 1, 64, QStringLiteral("ctx 1"));
    QVERIFY(tooShort.failed());
    QCOMPARE(runs.errors.size(), 1);
    QCOMPARE(runs.errors.first(), tooShort.error);
    QCOMPARE(tooShort.label, QStringLiteral("ctx 1"));

    const PerplexityRunResult empty = score(runs, QString(), {}, 256, 64, QStringLiteral("empty"));
    QVERIFY(empty.failed());
    QVERIFY2(empty.error.contains(QLatin1String("too short")), qPrintable(empty.error));

    longscope::Settings bad;
    bad.rope.ntk_alpha = 0.5f;
    const PerplexityRunResult badAlpha = score(runs, m_text, bad, 256, 64, QStringLiteral("bad"));
    QVERIFY(badAlpha.failed());
    QCOMPARE(runs.errors.size(), 3);
}

std::unique_ptr<TestWindow> TestExplore::makeWindow()
{
    auto *settings = new QSettings(m_dir.filePath(QStringLiteral("settings-%1.ini").arg(++m_windows)),
                                  QSettings::IniFormat, this);
    MainWindowOptions options;
    options.modelPath = k_model;
    options.conversationDirectory = m_dir.filePath(QStringLiteral("conversations"));
    options.runsDirectory = m_dir.filePath(QStringLiteral("window-runs-%1").arg(m_windows));
    options.settings = settings;
    options.threads = 2;
    auto w = std::make_unique<TestWindow>(options);
    w->resize(1400, 900);
    w->show();
    return w;
}

void TestExplore::viewRunsTwoPresetsOntoOnePlot()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    ExploreView *view = w->exploreView();
    QVERIFY(!view->runButton()->isEnabled()); // no book yet
    QVERIFY(!view->run());

    QVERIFY(w->openExploreBook(k_alice));
    QCOMPARE(w->tabs()->currentWidget()->isAncestorOf(view), true);
    QCOMPARE(view->book().title, QStringLiteral("Alice’s Adventures in Wonderland"));
    QCOMPARE(view->contextLength(), ExploreView::kDefaultContext);
    QCOMPARE(view->settingsList()->count(), 8);
    view->setContextLength(256);
    view->setBucketSize(64);
    view->setWindowsPerRun(2);
    QCOMPARE(view->tokensPerRun(), qint64(2 * 255));
    view->settingsList()->checkOnly({QStringLiteral("α 1"), QStringLiteral("α 2")});
    QCOMPARE(view->settingsList()->checkedSettings().size(), 2);
    QVERIFY(view->runButton()->isEnabled());

    QSignalSpy finished(view, &ExploreView::explorationFinished);
    QVERIFY(view->run());
    QCOMPARE(w->activity(), MainWindow::Activity::Exploring);
    QVERIFY(!w->chatPanel()->sendButton()->isEnabled()); // the worker is busy: no chat meanwhile
    // The chat tab says who has the engine, and its Stop works on the runs.
    QVERIFY2(w->chatBusyText().contains(QStringLiteral("Explore")), qPrintable(w->chatBusyText()));
    QVERIFY(w->chatPanel()->stopButton()->isEnabled());
    QVERIFY(view->cancelButton()->isEnabled());
    QVERIFY(finished.wait(kTimeoutMs));
    QCOMPARE(w->activity(), MainWindow::Activity::Idle);
    QVERIFY2(view->lastError().isEmpty(), qPrintable(view->lastError()));
    QVERIFY(w->errors.isEmpty());
    QCOMPARE(view->finishedRunCount(), 2);
    QCOMPARE(view->overallProgress()->value(), view->overallProgress()->maximum());

    // One plot: two curves, the trained-context line at 512.
    ExplorePlot *plot = view->plot();
    QCOMPARE(plot->curveCount(), 2);
    QCOMPARE(plot->trainedContextLineCount(), 1);
    QVERIFY(plot->plot()->graph(0)->name().startsWith(QStringLiteral("α 1")));
    QVERIFY(plot->plot()->graph(1)->name().startsWith(QStringLiteral("α 2")));
    QCOMPARE(plot->plot()->graph(0)->dataCount(), 4);
    QVERIFY(plot->plot()->graph(0)->pen().color() != plot->plot()->graph(1)->pen().color());
    bool lineAt512 = false;
    for (int i = 0; i < plot->plot()->itemCount(); ++i)
        if (auto *line = qobject_cast<QCPItemStraightLine *>(plot->plot()->item(i)))
            lineAt512 = lineAt512 || line->point1->key() == 512.0;
    QVERIFY(lineAt512);
    QCOMPARE(plot->plot()->yAxis->scaleType(), QCPAxis::stLogarithmic);
    view->logScaleBox()->setChecked(false);
    QCOMPARE(plot->plot()->yAxis->scaleType(), QCPAxis::stLinear);
    QCOMPARE(view->runTable()->rowCount(), 2);
    QCOMPARE(view->runTable()->item(0, ExploreRunTable::Run)->text(), QStringLiteral("α 1"));

    const QVector<PerplexityRunResult> runs = view->plottedRuns();
    QCOMPARE(runs.size(), 2);
    for (const PerplexityRunResult &r : runs) {
        QCOMPARE(r.n_scored, qint64(510));
        QCOMPARE(r.book_title, QStringLiteral("Alice’s Adventures in Wonderland"));
        QCOMPARE(r.model_name, QStringLiteral("stories260K"));
        QVERIFY(!r.id.isEmpty());
    }
    // Both runs were saved.
    QCOMPARE(w->exploreStore()->list().size(), 2);

    // Exports, through the File menu's path (the save dialog answered by the test).
    const QString png = m_dir.filePath(QStringLiteral("explore.png"));
    const QString csv = m_dir.filePath(QStringLiteral("explore.csv"));
    w->saveAnswer = png;
    emit view->exportPngRequested();
    w->saveAnswer = csv;
    emit view->exportCsvRequested();
    QVERIFY(w->errors.isEmpty());
    const QImage image(png);
    QVERIFY(!image.isNull());
    QVERIFY(image.width() >= 960 && image.height() >= 540);
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), 1 + 2 * 4);
    QCOMPARE(lines.first(), QByteArray("label,settings,bucket_begin,bucket_end,count,mean_nll,perplexity"));
    QVERIFY(lines[1].startsWith("α 1,α 1 · keys after RoPE · mem-efficient · causal flash · KV static,0,64,"));
    QVERIFY(lines[8].startsWith("α 2,α 2 · keys after RoPE · mem-efficient · causal flash · KV static,192,256,128,"));
    qint64 counted = 0;
    for (int i = 1; i <= 4; ++i) {
        const QList<QByteArray> cells = lines[i].split(',');
        QCOMPARE(cells.size(), 7);
        counted += cells[4].toLongLong();
        QVERIFY(std::abs(std::exp(cells[5].toDouble()) - cells[6].toDouble()) < 1e-6 * cells[6].toDouble());
    }
    QCOMPARE(counted, qint64(510));

    // The chat still works afterwards.
    w->sendMessage(QStringLiteral("Hello"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    QVERIFY(w->errors.isEmpty());
}

void TestExplore::viewCancelStopsTheQueue()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    ExploreView *view = w->exploreView();
    QVERIFY(w->openExploreBook(k_alice));
    view->setContextLength(256);
    view->setWindowsPerRun(50);
    view->settingsList()->checkOnly({QStringLiteral("α 1"), QStringLiteral("α 2")});
    // Cancel at the first progress report (as a person pressing Cancel would).
    connect(view->runProgress(), &QProgressBar::valueChanged, view, [view](int v) {
        if (v > 0)
            view->cancelButton()->click();
    });
    QSignalSpy finished(view, &ExploreView::explorationFinished);
    QVERIFY(view->run());
    QVERIFY(finished.wait(kTimeoutMs));
    QVERIFY(!view->isRunning());
    QCOMPARE(w->activity(), MainWindow::Activity::Idle);
    // The first run stopped early and the second never started.
    const QVector<PerplexityRunResult> runs = view->plottedRuns();
    QCOMPARE(runs.size(), 1);
    QVERIFY(runs.first().cancelled);
    QVERIFY(runs.first().n_scored < 50 * 255);
    QVERIFY(view->plot()->plot()->graph(0)->name().contains(QStringLiteral("cancelled")));
    QVERIFY(view->runButton()->isEnabled());
}

void TestExplore::closingMidRunIsClean()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    ExploreView *view = w->exploreView();
    QVERIFY(w->openExploreBook(k_alice));
    view->setContextLength(256);
    view->setWindowsPerRun(200);
    QVERIFY(view->run());
    QTRY_VERIFY_WITH_TIMEOUT(view->runProgress()->value() > 0, kTimeoutMs);
    QElapsedTimer timer;
    timer.start();
    QVERIFY(w->close()); // stops the run at its next step and joins the worker's thread
    QVERIFY(!w->isWorkerThreadRunning());
    QVERIFY2(timer.elapsed() < 5000, "the run stopped promptly");
    w.reset();
}

void TestExplore::runsRoundTripThroughTheStore()
{
    ExploreStore store(m_dir.filePath(QStringLiteral("store")));
    const QDateTime t0 = QDateTime::currentDateTimeUtc().addSecs(-60);
    PerplexityRunResult a = sampleRun(QStringLiteral("α auto · keys before RoPE"), 4.0, t0);
    PerplexityRunResult b = sampleRun(QStringLiteral("α 2"), 3.5, t0.addSecs(10));
    b.cancelled = true;
    QSignalSpy saved(&store, &ExploreStore::runSaved);
    QVERIFY(store.save(a));
    QVERIFY(store.save(b));
    QCOMPARE(saved.size(), 2);
    QVERIFY(ExploreStore::isValidId(a.id));
    QVERIFY(a.id != b.id);
    QVERIFY(QFile::exists(store.filePath(a.id)));

    const QVector<PerplexityRunResult> listed = store.list();
    QVERIFY(store.lastErrors().isEmpty());
    QCOMPARE(listed.size(), 2);
    QCOMPARE(listed[0].id, b.id); // newest first
    QCOMPARE(listed[1].id, a.id);

    const std::optional<PerplexityRunResult> back = store.load(a.id);
    QVERIFY(back);
    QCOMPARE(back->label, a.label);
    QCOMPARE(back->book_title, a.book_title);
    QCOMPARE(back->model_name, a.model_name);
    QCOMPARE(back->created, a.created);
    QCOMPARE(back->ctx, 1024);
    QCOMPARE(back->bucket, 256);
    QCOMPARE(back->n_ctx_train, 512);
    QCOMPARE(back->settings.rope.ntk_auto, true);
    QCOMPARE(back->settings.rope.store_kv_before_rope, true);
    QCOMPARE(back->settings.attention.memory_efficient, true);
    QCOMPARE(back->settings.attention.causal_flash, true);
    QCOMPARE(back->settings.kv_mode, KvMode::Static);
    QCOMPARE(back->settings.context_limit, 1024);
    QCOMPARE(back->mean_nll, a.mean_nll);
    QCOMPARE(back->n_scored, a.n_scored);
    QCOMPARE(back->n_total, a.n_total);
    QCOMPARE(back->windows, 4);
    QCOMPARE(back->steps, 16);
    QCOMPARE(back->seconds, 1.5);
    QCOMPARE(back->peak_memory_bytes, a.peak_memory_bytes);
    QCOMPARE(back->tokens_per_second, 5000.5);
    QCOMPARE(back->cancelled, false);
    QCOMPARE(back->curve.size(), 4);
    for (int i = 0; i < 4; ++i) {
        QCOMPARE(back->curve[i].begin, a.curve[i].begin);
        QCOMPARE(back->curve[i].end, a.curve[i].end);
        QCOMPARE(back->curve[i].count, a.curve[i].count);
        QCOMPARE(back->curve[i].mean_nll, a.curve[i].mean_nll);
    }
    QVERIFY(store.load(b.id)->cancelled);

    QVERIFY(store.remove(a.id));
    QVERIFY(!QFile::exists(store.filePath(a.id)));
    QCOMPARE(store.list().size(), 1);
    QVERIFY(!store.remove(a.id));
    QVERIFY(!store.load(QStringLiteral("../escape")));
    QVERIFY(!store.remove(QStringLiteral("../escape")));
}

void TestExplore::savedRunsReopenInTheView()
{
    const QString dir = m_dir.filePath(QStringLiteral("reopen"));
    {
        ExploreStore store(dir);
        PerplexityRunResult a = sampleRun(QStringLiteral("α 1"), 4.0, QDateTime::currentDateTimeUtc().addSecs(-5));
        PerplexityRunResult b = sampleRun(QStringLiteral("α auto"), 5.0, QDateTime::currentDateTimeUtc());
        QVERIFY(store.save(a));
        QVERIFY(store.save(b));
    }
    // A later session: the saved runs are listed, unchecked; checking them overlays them.
    ExploreStore store(dir);
    ExploreView view(&store);
    view.resize(1200, 800);
    view.show();
    ExploreRunList *list = view.runList();
    QCOMPARE(list->count(), 2);
    QVERIFY(list->checkedIds().isEmpty());
    QCOMPARE(view.plot()->curveCount(), 0);
    const QStringList ids = list->ids();
    list->setChecked(ids[0], true);
    QCOMPARE(view.plot()->curveCount(), 1);
    list->setChecked(ids[1], true);
    QCOMPARE(view.plot()->curveCount(), 2);
    QCOMPARE(view.plot()->trainedContextLineCount(), 1);
    // Oldest first on the plot.
    QVERIFY(view.plot()->plot()->graph(0)->name().startsWith(QStringLiteral("α 1")));
    QCOMPARE(view.runTable()->rowCount(), 2);
    QCOMPARE(view.plottedRuns()[1].book_title, QStringLiteral("A \"Tale\", of Two Cities"));

    // CSV fields with commas and quotes are quoted.
    const QByteArray csv = ExplorePlot::csv(view.plottedRuns());
    QVERIFY(csv.contains("α 1,α auto · keys before RoPE · mem-efficient · causal flash · KV static,0,256,1022,4,"));

    // Deleting one takes it off the plot and the disk.
    QVERIFY(view.deleteRun(ids[0]));
    QCOMPARE(list->count(), 1);
    QCOMPARE(view.plot()->curveCount(), 1);
    QCOMPARE(store.list().size(), 1);
}

void TestExplore::corruptRunFilesAreSkipped()
{
    const QString dir = m_dir.filePath(QStringLiteral("corrupt"));
    ExploreStore store(dir);
    PerplexityRunResult good = sampleRun(QStringLiteral("α 1"), 4.0, QDateTime::currentDateTimeUtc());
    QVERIFY(store.save(good));
    const auto write = [&](const QString &name, const QByteArray &bytes) {
        QFile f(QDir(dir).filePath(name));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(bytes);
    };
    write(QStringLiteral("garbage.json"), "{ not json");
    write(QStringLiteral("foreign.json"), R"({"format": "something-else", "version": 1})");
    QByteArray truncated = good.toJsonBytes();
    truncated.replace("\"ctx\": 1024", "\"ctx\": -5");
    write(QStringLiteral("badnumber.json"), truncated);
    QByteArray badPoint = good.toJsonBytes();
    badPoint.replace("\"end\": 256", "\"end\": 0");
    write(QStringLiteral("badpoint.json"), badPoint);
    QByteArray badBackend = good.toJsonBytes();
    QVERIFY(badBackend.contains("\"backend\": \"cpu\""));
    badBackend.replace("\"backend\": \"cpu\"", "\"backend\": \"tpu\"");
    write(QStringLiteral("badbackend.json"), badBackend);
    write(QStringLiteral("bad name!.json"), good.toJsonBytes());
    write(QStringLiteral("notes.txt"), "not a run");

    const QVector<PerplexityRunResult> listed = store.list();
    QCOMPARE(listed.size(), 1);
    QCOMPARE(listed.first().id, good.id);
    QCOMPARE(store.lastErrors().size(), 6);
    QVERIFY(store.lastErrors().join(QLatin1Char('\n')).contains(QLatin1String("unknown backend \"tpu\"")));
    QVERIFY(!store.load(QStringLiteral("garbage")));

    ExploreView view(&store);
    QCOMPARE(view.runList()->count(), 1);
}

void TestExplore::viewRunsNeedleGridsAsHeatmaps()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    ExploreView *view = w->exploreView();
    view->setRunKind(ExploreView::RunKind::Needle);
    QVERIFY(view->needleControls()->isVisibleTo(view));
    QVERIFY(view->heatmaps()->isVisibleTo(view));
    QVERIFY(view->runButton()->isEnabled()); // the passkey needs no book
    view->needleControls()->setLengths({200, 600}); // within and past the trained 512
    view->needleControls()->setDepths({0, 0.5, 1});
    view->settingsList()->checkOnly({QStringLiteral("α 1"), QStringLiteral("α 4")});

    QSignalSpy finished(view, &ExploreView::explorationFinished);
    QVERIFY(view->run());
    QCOMPARE(w->activity(), MainWindow::Activity::Exploring);
    QVERIFY(finished.wait(kTimeoutMs));
    QVERIFY2(view->lastError().isEmpty(), qPrintable(view->lastError()));
    QVERIFY(w->errors.isEmpty());
    const QVector<NeedleRunResult> runs = view->shownNeedleRuns();
    QCOMPARE(runs.size(), 2);
    QCOMPARE(runs[0].label, QStringLiteral("α 1"));
    QCOMPARE(runs[1].label, QStringLiteral("α 4"));
    QCOMPARE(runs[1].settings.rope.ntk_alpha, 4.0f);

    // The grid's shape, and each probability against the perplexity code on the same tokens:
    // log p(answer) = -(sum of the answer tokens' NLL), exp of it the probability.
    NeedleOptions o; // the prompts the view's grid used: passkey, seed 1, trial 0
    for (const NeedleRunResult &run : runs) {
        QCOMPARE(run.lengths, QVector<int>({200, 600}));
        QCOMPARE(run.depths, QVector<double>({0, 0.5, 1}));
        QCOMPARE(run.cells.size(), 6);
        QCOMPARE(run.n_ctx_train, 512);
        QCOMPARE(run.model_name, QStringLiteral("stories260K"));
        QVERIFY(!run.cancelled);
        QVERIFY(!run.id.isEmpty());
        for (int row = 0; row < 2; ++row)
            for (int col = 0; col < 3; ++col) {
                const NeedleGridCell *c = run.cell(row, col);
                QVERIFY(c);
                QCOMPARE(c->length, run.lengths[row]);
                QCOMPARE(c->depth, run.depths[col]);
                QCOMPARE(c->trials, 1);
                QVERIFY(c->probability >= 0 && c->probability <= 1);
                const NeedlePrompt p = build_needle_prompt(m_model->tokenizer(), o, c->length, c->depth, 0);
                std::vector<int32_t> text(p.prompt.begin() + 1, p.prompt.end());
                text.insert(text.end(), p.answer.begin(), p.answer.end());
                PerplexityOptions po;
                po.ctx = int(text.size()) + 1;
                po.n_threads = 2;
                po.settings = run.settings;
                const PerplexityResult r = perplexity(*m_model, text, po);
                double logProb = 0;
                for (size_t i = r.nll.size() - p.answer.size(); i < r.nll.size(); ++i)
                    logProb -= r.nll[i];
                QVERIFY2(std::abs(c->probability - std::exp(logProb)) <= 1e-3 * std::exp(logProb),
                         qPrintable(QStringLiteral("%1 cell %2,%3: %4 vs exp(%5)")
                                        .arg(run.label)
                                        .arg(row)
                                        .arg(col)
                                        .arg(c->probability)
                                        .arg(logProb)));
            }
    }
    // Past the trained context alpha 4 sees the prompt differently from alpha 1.
    QVERIFY(runs[0].cell(1, 1)->log_prob != runs[1].cell(1, 1)->log_prob);

    // Side by side, the trained context marked in both.
    ExploreHeatmaps *maps = view->heatmaps();
    QCOMPARE(maps->heatmapCount(), 2);
    QCOMPARE(maps->trainedContextLineCount(), 2);
    QCOMPARE(maps->retrievedMarkCount(), runs[0].retrievedCells() + runs[1].retrievedCells());
    QCOMPARE(w->exploreStore()->listNeedleRuns().size(), 2);
    QCOMPARE(w->exploreStore()->list().size(), 0);
    QVERIFY(w->exploreStore()->lastErrors().isEmpty()); // needle files are not perplexity errors

    // Exports through the window's path.
    const QString png = m_dir.filePath(QStringLiteral("needle.png"));
    const QString csv = m_dir.filePath(QStringLiteral("needle.csv"));
    w->saveAnswer = png;
    emit view->exportPngRequested();
    w->saveAnswer = csv;
    emit view->exportCsvRequested();
    QVERIFY2(w->errors.isEmpty(), qPrintable(w->errors.join(QLatin1Char('\n'))));
    const QImage image(png);
    QVERIFY(!image.isNull());
    QVERIFY(image.width() >= 960 && image.height() >= 540);
    // Every cell's colour is in the picture.
    QSet<QRgb> colours;
    for (int y = 0; y < image.height(); ++y)
        for (int x = 0; x < image.width(); ++x)
            colours.insert(image.pixel(x, y) & 0xffffff);
    for (const NeedleRunResult &run : runs)
        for (const NeedleGridCell &c : run.cells)
            QVERIFY(colours.contains(ExploreHeatmaps::colorFor(c.probability).rgb() & 0xffffff));
    // On the log scale: the colours of log10 p from -30 to 0.
    view->needleLogScaleBox()->setChecked(true);
    QVERIFY(maps->isLogScale());
    const QString logPng = m_dir.filePath(QStringLiteral("needle-log.png"));
    QVERIFY(view->exportPng(logPng));
    const QImage logImage(logPng);
    QSet<QRgb> logColours;
    for (int y = 0; y < logImage.height(); ++y)
        for (int x = 0; x < logImage.width(); ++x)
            logColours.insert(logImage.pixel(x, y) & 0xffffff);
    for (const NeedleRunResult &run : runs)
        for (const NeedleGridCell &c : run.cells) {
            const double at = c.probability > 0 ? (std::log10(c.probability) + 30) / 30 : 0;
            QVERIFY(logColours.contains(ExploreHeatmaps::colorFor(std::clamp(at, 0.0, 1.0)).rgb() & 0xffffff));
        }
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), 1 + 2 * 6);
    QCOMPARE(lines.first(), QByteArray("label,settings,task,length,depth,actual_depth,trials,answer_tokens,log_prob,"
                                       "probability,mean_token_log_prob,retrieved,beyond_trained"));
    for (int i = 1; i < lines.size(); ++i) {
        const QList<QByteArray> cells = lines[i].split(',');
        QCOMPARE(cells.size(), 13);
        const NeedleRunResult &run = runs[(i - 1) / 6];
        const NeedleGridCell &c = run.cells[(i - 1) % 6];
        QCOMPARE(QString::fromUtf8(cells[0]), run.label);
        QCOMPARE(cells[2], QByteArray("passkey"));
        QCOMPARE(cells[3].toInt(), c.length);
        QCOMPARE(cells[4].toDouble(), c.depth);
        QVERIFY(std::abs(cells[9].toDouble() - c.probability) <= 1e-9 * c.probability);
        QVERIFY(std::abs(cells[9].toDouble() - std::exp(cells[8].toDouble())) <= 1e-6 * cells[9].toDouble());
        QCOMPARE(cells[11].toInt(), c.retrieved);
        QCOMPARE(cells[12], QByteArray(c.length > 512 ? "1" : "0"));
    }
}

void TestExplore::needleGridsRoundTripAndReopen()
{
    NeedleRunResult run;
    run.label = QStringLiteral("RoPE linear ×4, \"quoted\"");
    run.settings = explorePresetBase();
    run.settings.rope.scaling = RopeScalingType::Linear;
    run.settings.rope.scaling_factor = 4;
    run.settings.overflow = OverflowPolicy::HeadTail;
    run.task = NeedleTask::Book;
    run.lengths = {256, 1024};
    run.depths = {0, 0.3333333333333333, 1};
    run.trials = 3;
    run.seed = 18446744073709551615ULL; // needs all 64 bits
    run.n_ctx_train = 512;
    run.model_name = QStringLiteral("stories260K");
    run.book_title = QStringLiteral("Alice");
    run.created = QDateTime::currentDateTimeUtc();
    run.seconds = 2.5;
    run.peak_memory_bytes = 12345678;
    run.steps = 40;
    for (int l : run.lengths)
        for (double d : run.depths)
            run.cells.append(NeedleGridCell{l, d, d * 0.98, 3, 5.0 / 3, -12.5, std::exp(-12.5) + d * 1e-9, -12.5 / 5, l == 256 ? 3 : 1});

    const std::optional<NeedleRunResult> back = NeedleRunResult::fromJsonBytes(run.toJsonBytes());
    QVERIFY(back);
    QCOMPARE(back->toJson(), run.toJson());
    QCOMPARE(back->seed, run.seed);
    QVERIFY(back->settings == run.settings);
    QCOMPARE(back->cells.size(), 6);
    QCOMPARE(back->cell(1, 1)->probability, run.cell(1, 1)->probability);
    QCOMPARE(back->retrievedCells(), 3);
    // The fuzz harness's seed is a grid (its last cell not reached).
    QFile seed(QStringLiteral(LONGSCOPE_TEST_DATA "/../fuzz/corpus/needle_run/grid.json"));
    QVERIFY(seed.open(QIODevice::ReadOnly));
    QString seedError;
    const std::optional<NeedleRunResult> seeded = NeedleRunResult::fromJsonBytes(seed.readAll(), &seedError);
    QVERIFY2(seeded, qPrintable(seedError));
    QCOMPARE(seeded->cells.size(), 4);
    QCOMPARE(seeded->cell(1, 1)->trials, 0);
    // Not a perplexity run, and the other way round.
    QVERIFY(!PerplexityRunResult::fromJsonBytes(run.toJsonBytes()));
    QVERIFY(!NeedleRunResult::fromJsonBytes(sampleRun(QStringLiteral("α 1"), 4, run.created).toJsonBytes()));

    // Malformed grids are refused with a reason.
    const auto refused = [&](QByteArray bytes, const QByteArray &from, const QByteArray &to) {
        if (!bytes.contains(from))
            return QStringLiteral("the file does not hold %1").arg(QString::fromUtf8(from));
        bytes.replace(from, to);
        QString why;
        return NeedleRunResult::fromJsonBytes(bytes, &why) ? QString() : why;
    };
    QVERIFY(refused(run.toJsonBytes(), "\"probability\": ", "\"probability\": 1.5, \"x\": ").contains("malformed"));
    QVERIFY(refused(run.toJsonBytes(), "\"task\": \"book\"", "\"task\": \"haystack\"").contains("unknown needle task"));
    QVERIFY(refused(run.toJsonBytes(), "\"retrieved\": 3", "\"retrieved\": 4").contains("malformed"));

    // Saved beside perplexity runs; a later session lists each kind in its own list.
    const QString dir = m_dir.filePath(QStringLiteral("needles"));
    {
        ExploreStore store(dir);
        QVERIFY(store.save(run));
        PerplexityRunResult ppl = sampleRun(QStringLiteral("α 1"), 4.0, run.created.addSecs(-5));
        QVERIFY(store.save(ppl));
        QFile bad(QDir(dir).filePath(QStringLiteral("badgrid.json")));
        QVERIFY(bad.open(QIODevice::WriteOnly));
        QByteArray bytes = run.toJsonBytes();
        bytes.replace("\"lengths\": [", "\"lengths\": [7, ");
        bad.write(bytes);
    }
    ExploreStore store(dir);
    const QVector<NeedleRunResult> listed = store.listNeedleRuns();
    QCOMPARE(listed.size(), 1);
    QCOMPARE(store.lastErrors().size(), 1); // the bad grid, named; the perplexity run is not an error
    QVERIFY(store.lastErrors().first().contains(QLatin1String("badgrid.json")));
    QCOMPARE(store.list().size(), 1);
    QVERIFY(store.lastErrors().isEmpty()); // needle files, bad or not, are not perplexity runs
    QVERIFY(store.loadNeedleRun(run.id));

    ExploreView view(&store);
    view.resize(1200, 800);
    view.show();
    view.setRunKind(ExploreView::RunKind::Needle);
    QCOMPARE(view.needleRunList()->count(), 1);
    QCOMPARE(view.runList()->count(), 1);
    QVERIFY(view.needleRunList()->checkedIds().isEmpty());
    QCOMPARE(view.heatmaps()->heatmapCount(), 0);
    view.needleRunList()->setChecked(run.id, true);
    QCOMPARE(view.heatmaps()->heatmapCount(), 1);
    QCOMPARE(view.heatmaps()->trainedContextLineCount(), 1);
    QCOMPARE(view.heatmaps()->retrievedMarkCount(), 3);
    QCOMPARE(view.shownNeedleRuns().first().toJson(), run.toJson());
    // The CSV of a reopened grid quotes the label.
    QVERIFY(needleCsv(view.shownNeedleRuns()).contains("\"RoPE linear ×4, \"\"quoted\"\"\","));
    QVERIFY(view.deleteRun(run.id));
    QCOMPARE(view.heatmaps()->heatmapCount(), 0);
    QCOMPARE(store.listNeedleRuns().size(), 0);
}

void TestExplore::badNeedleInputIsNamed()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    ExploreView *view = w->exploreView();
    view->setRunKind(ExploreView::RunKind::Needle);
    view->settingsList()->checkOnly({QStringLiteral("α 1")});
    QSignalSpy status(view, &ExploreView::statusMessage);
    const auto refused = [&](const QString &lengths, const QString &depths) {
        view->needleControls()->lengthsEdit()->setText(lengths);
        view->needleControls()->depthsEdit()->setText(depths);
        status.clear();
        if (view->run() || status.isEmpty())
            return QString();
        return status.last().first().toString();
    };
    QCOMPARE(refused(QStringLiteral("300"), QStringLiteral("0, 1.5")),
             QStringLiteral("Depths: 1.5 is outside 0..1 (0 is the haystack's start, 1 its end)."));
    QCOMPARE(refused(QStringLiteral("300"), QStringLiteral("-0.5")),
             QStringLiteral("Depths: -0.5 is outside 0..1 (0 is the haystack's start, 1 its end)."));
    QCOMPARE(refused(QStringLiteral("3k"), QStringLiteral("0.5")),
             QStringLiteral("Lengths: “3k” is not a whole number of tokens from 1 to 16,777,216."));
    QCOMPARE(refused(QString(), QStringLiteral("0.5")), QStringLiteral("Lengths: give at least one prompt length."));
    QCOMPARE(refused(QStringLiteral("300,") + QStringLiteral("300,").repeated(99), QStringLiteral("0,").repeated(41) + QStringLiteral("1")),
             QStringLiteral("The grid has 4,200 cells, more than 4,096."));
    // The fact-in-a-book needs a book.
    view->needleControls()->setTask(NeedleTask::Book);
    QCOMPARE(refused(QStringLiteral("300"), QStringLiteral("0.5")), QStringLiteral("Open a book first."));
    QVERIFY(!view->runButton()->isEnabled());
    view->needleControls()->setTask(NeedleTask::Passkey);

    // A length too short for the needle reaches the engine, which names it; nothing is saved.
    view->needleControls()->setLengths({100});
    view->needleControls()->setDepths({0.5});
    QSignalSpy finished(view, &ExploreView::explorationFinished);
    QVERIFY(view->run());
    QVERIFY(finished.wait(kTimeoutMs));
    QVERIFY2(view->lastError().startsWith(QStringLiteral("the length 100 is too short: the needle, question and answer take ")),
             qPrintable(view->lastError()));
    QCOMPARE(w->exploreStore()->listNeedleRuns().size(), 0);
    QCOMPARE(view->heatmaps()->heatmapCount(), 0);
}

void TestExplore::presetGroupsCoverEverySetting()
{
    const QVector<ExplorePresetGroup> groups = explorePresetGroups();
    QStringList names;
    QStringList labels;
    QVector<longscope::Settings> all;
    for (const ExplorePresetGroup &g : groups) {
        names << g.name;
        QVERIFY(!g.presets.isEmpty());
        for (const ExplorePreset &p : g.presets) {
            QCOMPARE(p.label, exploreLabel(p.settings));
            // Saved with a run, the settings come back whole.
            const std::optional<longscope::Settings> back = settingsFromJson(settingsToJson(p.settings));
            QVERIFY(back && *back == p.settings);
            bool known = false;
            for (int i = 0; i < all.size(); ++i)
                if (sameExploreSettings(all[i], p.settings)) {
                    known = true;
                    QCOMPARE(labels[i], p.label); // the same settings in two groups, one label
                }
            if (!known) {
                QVERIFY2(!labels.contains(p.label), qPrintable(p.label)); // different settings, different labels
                labels << p.label;
                all << p.settings;
            }
        }
    }
    QCOMPARE(names.first(), QStringLiteral("NTK alpha and key placement"));
    QCOMPARE(groups.first().presets.size(), 8);
    for (const QString &n : {QStringLiteral("RoPE scaling methods"), QStringLiteral("Attention kernels"),
                             QStringLiteral("KV cache layouts"), QStringLiteral("Sinks vs truncation")})
        QVERIFY2(names.contains(n), qPrintable(n));
    // Entries the settings cannot hold yet are left out, not listed as duplicates of the base:
    // the KV precision group appears once the settings have KV types, the shift entry once the
    // overflow policy exists.
    const QJsonObject json = settingsToJson(longscope::Settings{});
    QCOMPARE(names.contains(QStringLiteral("KV cache precision")), json.contains(QStringLiteral("kv_type_k")));
    const ExplorePresetGroup &overflow = groups[int(names.indexOf(QStringLiteral("Sinks vs truncation")))];
    QCOMPARE(overflow.presets.size(), 6); // error, truncation, shift with 4 or 0 sinks dropping half or one
    QCOMPARE(overflow.presets[1].settings.overflow, OverflowPolicy::HeadTail);
    QCOMPARE(overflow.presets[1].label, QStringLiteral("α 1 · overflow head-tail"));
    const ExplorePresetGroup &scaling = groups[int(names.indexOf(QStringLiteral("RoPE scaling methods")))];
    QCOMPARE(scaling.presets[2].settings.rope.scaling, std::optional<RopeScalingType>(RopeScalingType::Linear));
    QCOMPARE(scaling.presets[2].settings.rope.scaling_factor, 4.0f);
    QCOMPARE(scaling.presets[2].label, QStringLiteral("α 1 · RoPE linear ×4"));

    // The compare list takes any settings, and tells apart what a run would measure apart.
    ExploreSettingsList list;
    list.setPresets({});
    longscope::Settings a = explorePresetBase();
    longscope::Settings b = a;
    b.overflow = OverflowPolicy::HeadTail;
    longscope::Settings c = a;
    c.context_limit = 4096; // a run sets its own: the same entry as a
    longscope::Settings d = a;
    d.backend = ComputeBackend::Cuda;
    QCOMPARE(list.addSettings(exploreLabel(a), a), 0);
    QCOMPARE(list.addSettings(exploreLabel(b), b), 1);
    QCOMPARE(list.addSettings(exploreLabel(c), c), 0);
    QCOMPARE(list.addSettings(exploreLabel(d), d), 2);
    QCOMPARE(list.settingsAt(2).label, QStringLiteral("α 1 · CUDA"));
    QCOMPARE(list.count(), 3);

    // The view's preset menu loads a group.
    ExploreView view(nullptr);
    view.loadPresetGroup(QStringLiteral("KV cache layouts"));
    QCOMPARE(view.settingsList()->count(), 4);
    QCOMPARE(view.settingsList()->settingsAt(3).settings.kv_mode, KvMode::None);
}

// Left at its default, the context length to score to is at least twice the trained context
// (so every run shows the region beyond it); a length the user chose stays.
void TestExplore::defaultContextIsTwiceTheTrained()
{
    ExploreStore store(m_dir.filePath(QStringLiteral("default-context-runs")));
    ExploreView view(&store);
    QCOMPARE(view.contextLength(), ExploreView::kDefaultContext);
    view.setModel(QStringLiteral("small"), 512);
    QVERIFY(view.contextLength() >= 2 * 512);
    view.setModel(QStringLiteral("trained on 2048"), 2048);
    QCOMPARE(view.contextLength(), 2 * 2048);
    view.setContextLength(3000);
    view.setModel(QStringLiteral("trained on 4096"), 4096);
    QCOMPARE(view.contextLength(), 3000);

    // The time left: what is done took `elapsed`, the rest takes elapsed × (1 − f) / f.
    QCOMPARE(ExploreView::timeLeftText(0.01, 60000), QStringLiteral(" · estimating time left…"));
    QCOMPARE(ExploreView::timeLeftText(0.5, 1000), QStringLiteral(" · estimating time left…"));
    QCOMPARE(ExploreView::timeLeftText(0.5, 20000), QStringLiteral(" · about 20 s left"));
    QCOMPARE(ExploreView::timeLeftText(0.25, 60000), QStringLiteral(" · about 3 min left"));
    QCOMPARE(ExploreView::timeLeftText(0.1, 30 * 60000), QStringLiteral(" · about 4 h 30 min left"));
}

// The "RoPE scaling methods" group: the model's own, none, and every method the engine has but
// LongRoPE (its factors come only with Phi-3 files) by 4. Each runs on the bundled model
// through the worker and scores what longscope::perplexity() scores with the same settings;
// the methods give different perplexities.
void TestExplore::ropeScalingPresetsRunLikeTheEngine()
{
    const QVector<ExplorePresetGroup> groups = explorePresetGroups();
    const auto group = std::find_if(groups.cbegin(), groups.cend(),
                                    [](const ExplorePresetGroup &g) { return g.name == QStringLiteral("RoPE scaling methods"); });
    QVERIFY(group != groups.cend());
    QStringList methods;
    for (const ExplorePreset &p : group->presets) {
        methods << (p.settings.rope.scaling ? QString::fromUtf8(to_string(*p.settings.rope.scaling).data())
                                            : QStringLiteral("model's own"));
        if (p.settings.rope.scaling && *p.settings.rope.scaling != RopeScalingType::None)
            QCOMPARE(p.settings.rope.scaling_factor, 4.0f);
    }
    QCOMPARE(methods, QStringList({QStringLiteral("model's own"), QStringLiteral("none"), QStringLiteral("linear"),
                                   QStringLiteral("ntk"), QStringLiteral("dynamic"), QStringLiteral("yarn"),
                                   QStringLiteral("llama3")}));

    const QByteArray utf8 = m_text.toUtf8();
    const std::vector<int32_t> tokens = m_model->tokenizer().encode(std::string(utf8.constData(), size_t(utf8.size())), false);
    constexpr int ctx = 128;
    const qint64 maxTokens = 4 * (ctx - 1);
    Runs runs(w());
    QSet<qint64> distinct; // perplexities, to 1e-6
    for (const ExplorePreset &p : group->presets) {
        const PerplexityRunResult got = score(runs, m_text, p.settings, ctx, 32, p.label, maxTokens);
        QVERIFY2(!got.failed(), qPrintable(p.label + QStringLiteral(": ") + got.error));
        PerplexityOptions o;
        o.ctx = ctx;
        o.bucket = 32;
        o.settings = p.settings;
        const PerplexityResult want =
            perplexity(*m_model, std::span<const int32_t>(tokens).first(size_t(maxTokens)), o);
        QCOMPARE(got.n_scored, qint64(want.n_scored));
        QVERIFY2(std::abs(got.mean_nll - want.mean_nll) <= 1e-9 * want.mean_nll,
                 qPrintable(QStringLiteral("%1: %2 vs %3").arg(p.label).arg(got.mean_nll).arg(want.mean_nll)));
        distinct.insert(qint64(std::llround(got.mean_nll * 1e6)));
    }
    // The model's own is none for the bundled model; every method by 4 changes the scores
    // (dynamic only past the original context: within 128 tokens of a 512-token model it is none).
    QCOMPARE(distinct.size(), qsizetype(group->presets.size()) - 2);
}

QTEST_MAIN(TestExplore)
#include "tst_explore.moc"
