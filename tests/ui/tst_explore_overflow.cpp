// Explore's perplexity runs past the context, off screen, with the bundled stories260K
// (trained context 512): the text streamed 4x past a 512-token context with `shift` gives the
// per-position values of longscope::perplexity() streamed (the runtime called directly, and
// `longscope-cli perplexity --stream --overflow shift --json` as a separate process); `error`
// stops where the context is full and says why; truncation restarts the window; the
// "Sinks vs truncation" preset group expands to the right settings and runs in the view,
// plotted across the text; saved runs keep the new fields, and a run file saved before them
// still opens.
#include "offscreen.h"
#include "threaded_worker.h"

#include "core/book.h"
#include "core/engine_worker.h"
#include "core/explore_presets.h"
#include "core/explore_store.h"
#include "core/perplexity_run.h"
#include "core/settings_json.h"
#include "widgets/explore_plot.h"
#include "widgets/explore_run_list.h"
#include "widgets/explore_settings_list.h"
#include "widgets/explore_view.h"

#include "longscope/model.h"
#include "longscope/perplexity.h"
#include "longscope/tokenizer.h"

#include <QCheckBox>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include <qcustomplot.h>

#include <cmath>
#include <memory>

using namespace longscope;
using namespace longscope::ui;
using longscope::test::ThreadedWorker;

namespace {

constexpr int kTimeoutMs = 120000;
constexpr int kCtx = 512;                  // the bundled model's trained context
constexpr int kBucket = 64;
constexpr qint64 kTokens = 4 * (kCtx - 1); // four windows' worth: the stream goes 4x past the context
constexpr double kTolerance = 1e-5;
const QString k_model = QStringLiteral(LONGSCOPE_BUNDLED_MODEL);
const QString k_alice = QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt");
const QString k_group = QStringLiteral("Sinks vs truncation");

ExplorePresetGroup group(const QString &name)
{
    for (const ExplorePresetGroup &g : explorePresetGroups())
        if (g.name == name)
            return g;
    qFatal("no preset group %s", qPrintable(name));
}

// Mean NLL per bucket of text positions, written out plainly from per-token values.
struct NaiveBucket {
    qint64 count = 0;
    double sum = 0;
};

QVector<NaiveBucket> naiveTextBuckets(const std::vector<float> &nll)
{
    QVector<NaiveBucket> out;
    for (size_t i = 0; i < nll.size(); ++i) { // nll[i] is text token i's: the model has a BOS
        const int b = int(i) / kBucket;
        if (out.size() <= b)
            out.resize(b + 1);
        out[b].count += 1;
        out[b].sum += nll[i];
    }
    return out;
}

// Mean perplexity over text positions [from, to) of a curve.
double meanPerplexity(const QVector<PerplexityPoint> &curve, int from, int to)
{
    double sum = 0;
    qint64 n = 0;
    for (const PerplexityPoint &p : curve)
        if (p.begin >= from && p.end <= to) {
            sum += p.mean_nll * double(p.count);
            n += p.count;
        }
    return n ? std::exp(sum / double(n)) : 0;
}

} // namespace

class TestExploreOverflow : public QObject {
    Q_OBJECT

private:
    EngineWorker *w() { return m_tw->worker; }
    PerplexityRunResult score(const longscope::Settings &s, const QString &label);
    PerplexityResult direct(const longscope::Settings &s, bool stream);

    std::unique_ptr<ThreadedWorker> m_tw;
    std::unique_ptr<Model> m_model;
    Book m_book;
    std::vector<int32_t> m_tokens; // the first kTokens of the book, as the worker tokenizes it
    QTemporaryDir m_dir;

private slots:
    void initTestCase();
    void cleanupTestCase();
    void presetsExpandToTheRightSettings();
    void shiftRunEqualsTheStreamedRuntimeAndCli();
    void errorStopsAtTheContextAndTruncationGoesOn();
    void viewRunsTheGroupAcrossTheText();
    void savedRunsKeepTheNewFields();
    void runFilesFromBeforeStillOpen();
};

void TestExploreOverflow::initTestCase()
{
    QVERIFY(longscope::test::k_offscreen);
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(m_dir.isValid());
    m_model = Model::load(k_model.toStdString());
    QCOMPARE(m_model->hparams().n_ctx_train, kCtx);
    QVERIFY(m_model->tokenizer().bos_id() >= 0);
    QString error;
    const std::optional<Book> book = loadBook(k_alice, &error);
    QVERIFY2(book, qPrintable(error));
    m_book = *book;
    const QByteArray utf8 = m_book.text.toUtf8();
    m_tokens = m_model->tokenizer().encode(std::string(utf8.constData(), size_t(utf8.size())), false);
    QVERIFY(qint64(m_tokens.size()) > kTokens);
    m_tokens.resize(size_t(kTokens));

    m_tw = std::make_unique<ThreadedWorker>();
    QVERIFY(m_tw->loadModel(k_model, kTimeoutMs));
}

void TestExploreOverflow::cleanupTestCase() { m_tw.reset(); }

PerplexityRunResult TestExploreOverflow::score(const longscope::Settings &s, const QString &label)
{
    QObject receiver;
    std::optional<PerplexityRunResult> result;
    connect(w(), &EngineWorker::perplexityFinished, &receiver,
            [&result](const QString &, const PerplexityRunResult &r) { result = r; });
    QMetaObject::invokeMethod(
        w(), [worker = w(), text = m_book.text, s, label] { worker->runPerplexity(text, s, kCtx, kBucket, label, kTokens); },
        Qt::QueuedConnection);
    if (!QTest::qWaitFor([&] { return result.has_value(); }, kTimeoutMs))
        return {};
    return *result;
}

// The runtime called directly, as `longscope-cli perplexity [--stream]` calls it.
PerplexityResult TestExploreOverflow::direct(const longscope::Settings &s, bool stream)
{
    PerplexityOptions o;
    o.ctx = kCtx;
    o.bucket = kBucket;
    o.n_threads = 2;
    o.settings = s;
    o.stream = stream;
    return perplexity(*m_model, m_tokens, o);
}

void TestExploreOverflow::presetsExpandToTheRightSettings()
{
    const ExplorePresetGroup g = group(k_group);
    QVERIFY(g.acrossText);
    QCOMPARE(g.presets.size(), 6);
    struct Want {
        OverflowPolicy policy;
        int sinks;
        int discard;
        const char *label;
    };
    const Want want[] = {
        {OverflowPolicy::Error, 4, 0, "α 1 · overflow error"},
        {OverflowPolicy::HeadTail, 4, 0, "α 1 · overflow head-tail"},
        {OverflowPolicy::Shift, 4, 0, "α 1 · shift, 4 sinks"},
        {OverflowPolicy::Shift, 0, 0, "α 1 · shift, 0 sinks"},
        {OverflowPolicy::Shift, 4, 1, "α 1 · shift, 4 sinks, drop 1"},
        {OverflowPolicy::Shift, 0, 1, "α 1 · shift, 0 sinks, drop 1"},
    };
    const longscope::Settings base = explorePresetBase();
    for (int i = 0; i < 6; ++i) {
        const longscope::Settings &s = g.presets[i].settings;
        QCOMPARE(g.presets[i].label, QString::fromUtf8(want[i].label));
        QCOMPARE(s.overflow, want[i].policy);
        QCOMPARE(s.sink_tokens, want[i].sinks);
        QCOMPARE(s.shift_discard, want[i].discard);
        // Everything else is the base's.
        longscope::Settings rest = s;
        rest.overflow = base.overflow;
        rest.sink_tokens = base.sink_tokens;
        rest.shift_discard = base.shift_discard;
        QVERIFY(rest == base);
        // Error and shift stream through one context; truncation restarts the window.
        QCOMPARE(perplexityStreams(s), want[i].policy != OverflowPolicy::HeadTail);
        // The compare list's tooltip names the sinks and the discard.
        if (s.overflow == OverflowPolicy::Shift)
            QVERIFY2(describeSettings(s).endsWith(QString::fromUtf8(want[i].label).mid(6)), qPrintable(describeSettings(s)));
    }
    // Every other group restarts its windows, as Explore's runs always did, and is plotted
    // by position in the context.
    QVERIFY(!perplexityStreams(base));
    for (const ExplorePresetGroup &other : explorePresetGroups())
        if (other.name != k_group) {
            QVERIFY2(!other.acrossText, qPrintable(other.name));
            for (const ExplorePreset &p : other.presets)
                QVERIFY2(!perplexityStreams(p.settings), qPrintable(p.label));
        }

    // The compare list keeps the six apart, and loading the group turns the plot across the text.
    ExploreView view(nullptr);
    QVERIFY(!view.acrossTextBox()->isChecked());
    view.loadPresetGroup(k_group);
    QCOMPARE(view.settingsList()->count(), 6);
    for (int i = 0; i < 6; ++i)
        QVERIFY(view.settingsList()->settingsAt(i).settings == g.presets[i].settings);
    QVERIFY(view.acrossTextBox()->isChecked());
    QVERIFY(view.plot()->isAcrossText());
    view.loadPresetGroup(QStringLiteral("KV cache layouts"));
    QVERIFY(!view.acrossTextBox()->isChecked());
}

void TestExploreOverflow::shiftRunEqualsTheStreamedRuntimeAndCli()
{
    for (const int sinks : {4, 0}) {
        longscope::Settings s = explorePresetBase();
        s.overflow = OverflowPolicy::Shift;
        s.sink_tokens = sinks;
        const PerplexityRunResult got = score(s, exploreLabel(s));
        QVERIFY2(!got.failed(), qPrintable(got.error));
        QVERIFY(got.streamed);
        QVERIFY(got.stopped.isEmpty());
        QCOMPARE(got.n_scored, kTokens);
        QCOMPARE(got.n_total, kTokens);

        // The runtime directly, streamed: the same tokens, per-token NLL bucketed here by
        // the token's index in the text.
        const PerplexityResult want = direct(s, true);
        QCOMPARE(qint64(want.n_scored), kTokens);
        QVERIFY(std::abs(got.mean_nll - want.mean_nll) < kTolerance);
        const QVector<NaiveBucket> buckets = naiveTextBuckets(want.nll);
        QCOMPARE(got.text_curve.size(), buckets.size());
        QCOMPARE(got.text_curve.size(), int((kTokens + kBucket - 1) / kBucket)); // across the whole text
        for (int b = 0; b < buckets.size(); ++b) {
            QCOMPARE(got.text_curve[b].begin, b * kBucket);
            QCOMPARE(got.text_curve[b].end, int(std::min<qint64>(kTokens, (b + 1) * kBucket)));
            QCOMPARE(got.text_curve[b].count, buckets[b].count);
            const double mean = buckets[b].sum / double(buckets[b].count);
            QVERIFY2(std::abs(got.text_curve[b].mean_nll - mean) < kTolerance,
                     qPrintable(QStringLiteral("bucket %1: %2 vs %3").arg(b).arg(got.text_curve[b].mean_nll).arg(mean)));
        }

        // The CLI, another process: `perplexity --stream --overflow shift` on the same text.
        const QString textFile = m_dir.filePath(QStringLiteral("book.txt"));
        QFile f(textFile);
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(m_book.text.toUtf8());
        f.close();
        QProcess cli;
        cli.start(QStringLiteral(LONGSCOPE_CLI_PATH),
                  {QStringLiteral("perplexity"), QStringLiteral("-m"), k_model, QStringLiteral("-f"), textFile,
                   QStringLiteral("--ctx"), QString::number(kCtx), QStringLiteral("--bucket"), QString::number(kBucket),
                   QStringLiteral("--max-tokens"), QString::number(kTokens), QStringLiteral("--stream"),
                   QStringLiteral("--overflow"), QStringLiteral("shift"), QStringLiteral("--sinks"), QString::number(sinks),
                   QStringLiteral("--attn"), QStringLiteral("mem-efficient"), QStringLiteral("--causal-flash"),
                   QStringLiteral("--kv"), QStringLiteral("static"), QStringLiteral("-t"), QStringLiteral("2"),
                   QStringLiteral("--json")});
        QVERIFY(cli.waitForFinished(kTimeoutMs));
        QVERIFY2(cli.exitCode() == 0, cli.readAllStandardError().constData());
        const QJsonObject j = QJsonDocument::fromJson(cli.readAllStandardOutput()).object();
        QCOMPARE(qint64(j.value(QStringLiteral("n_scored")).toDouble()), kTokens);
        QVERIFY(std::abs(j.value(QStringLiteral("mean_nll")).toDouble() - got.mean_nll) < kTolerance);
        const QJsonArray curve = j.value(QStringLiteral("curve")).toArray();
        QCOMPARE(curve.size(), got.curve.size());
        for (int i = 0; i < curve.size(); ++i) {
            const QJsonObject p = curve[i].toObject();
            QCOMPARE(p.value(QStringLiteral("begin")).toInt(), got.curve[i].begin);
            QCOMPARE(qint64(p.value(QStringLiteral("count")).toDouble()), got.curve[i].count);
            QVERIFY(std::abs(p.value(QStringLiteral("mean_nll")).toDouble() - got.curve[i].mean_nll) < kTolerance);
        }

        // Past the context the stream goes on at about its within-context perplexity.
        const double within = meanPerplexity(got.text_curve, 0, kCtx);
        const double past = meanPerplexity(got.text_curve, 3 * kCtx, int(kTokens));
        qInfo("shift, %d sinks: perplexity %.1f within the context, %.1f in its 4th length", sinks, within, past);
        QVERIFY2(past < 1.5 * within, qPrintable(QStringLiteral("%1 vs %2").arg(past).arg(within)));
    }
}

void TestExploreOverflow::errorStopsAtTheContextAndTruncationGoesOn()
{
    longscope::Settings error = explorePresetBase();
    error.overflow = OverflowPolicy::Error;
    const PerplexityRunResult stopped = score(error, QStringLiteral("error"));
    QVERIFY2(!stopped.failed(), qPrintable(stopped.error)); // a stop is not a failure
    QVERIFY(stopped.streamed);
    QVERIFY(!stopped.cancelled);
    // BOS and 511 text tokens fill the context, predicting 512 tokens; the next step does not fit.
    QCOMPARE(stopped.n_scored, qint64(kCtx));
    QCOMPARE(stopped.n_total, kTokens);
    QVERIFY2(stopped.stopped.contains(QString::number(kCtx)), qPrintable(stopped.stopped));
    QVERIFY(!stopped.text_curve.isEmpty());
    QCOMPARE(stopped.text_curve.last().end, kCtx);
    const PerplexityResult want = direct(error, true);
    QCOMPARE(QString::fromStdString(want.stopped), stopped.stopped);
    QCOMPARE(qint64(want.n_scored), stopped.n_scored);

    // Truncation: windows restarted from an empty context, on through the whole text.
    longscope::Settings truncation = explorePresetBase();
    truncation.overflow = OverflowPolicy::HeadTail;
    const PerplexityRunResult restarted = score(truncation, QStringLiteral("truncation"));
    QVERIFY(!restarted.streamed);
    QVERIFY(restarted.stopped.isEmpty());
    QCOMPARE(restarted.n_scored, kTokens);
    QCOMPARE(restarted.windows, 4);
    QCOMPARE(restarted.text_curve.last().end, int(kTokens));
    const PerplexityResult windows = direct(truncation, false);
    const QVector<NaiveBucket> buckets = naiveTextBuckets(windows.nll);
    QCOMPARE(restarted.text_curve.size(), buckets.size());
    for (int b = 0; b < buckets.size(); ++b)
        QVERIFY(std::abs(restarted.text_curve[b].mean_nll - buckets[b].sum / double(buckets[b].count)) < kTolerance);
}

void TestExploreOverflow::viewRunsTheGroupAcrossTheText()
{
    ExploreStore store(m_dir.filePath(QStringLiteral("view-runs")));
    ExploreView view(&store);
    view.resize(1400, 900);
    view.show();
    view.setWorker(w());
    view.setModel(QStringLiteral("stories260K"), kCtx);
    view.setEngineAvailable(true);
    view.setBook(m_book);
    view.setContextLength(kCtx);
    view.setBucketSize(kBucket);
    view.setWindowsPerRun(4);
    QCOMPARE(view.tokensPerRun(), kTokens);
    view.loadPresetGroup(k_group);
    QSignalSpy finished(&view, &ExploreView::explorationFinished);
    QVERIFY(view.run());
    QVERIFY(finished.wait(kTimeoutMs));
    QVERIFY2(view.lastError().isEmpty(), qPrintable(view.lastError()));
    QCOMPARE(view.finishedRunCount(), 6);

    const QVector<PerplexityRunResult> runs = view.plottedRuns();
    QCOMPARE(runs.size(), 6);
    ExplorePlot *plot = view.plot();
    QVERIFY(plot->isAcrossText());
    QCOMPARE(plot->curveCount(), 6);
    // The error curve ends where the context is full; the others go on across the text.
    for (int i = 0; i < 6; ++i) {
        const QCPGraph *g = plot->plot()->graph(i);
        const double lastX = (g->data()->constEnd() - 1)->key;
        if (runs[i].settings.overflow == OverflowPolicy::Error) {
            QVERIFY(lastX < kCtx);
            QVERIFY2(g->name().contains(QStringLiteral("stopped at 512")), qPrintable(g->name()));
        } else {
            QVERIFY2(lastX > 3 * kCtx, qPrintable(g->name()));
        }
    }
    // One "context full" line at 512.
    QCOMPARE(plot->trainedContextLineCount(), 1);
    // The status says which run stopped and why.
    bool said = false;
    for (QLabel *l : view.findChildren<QLabel *>())
        said = said || (l->text().contains(QStringLiteral("stopped after 512 tokens")) && l->text().contains(QStringLiteral("error")));
    QVERIFY(said);
    // The CSV across the text has the text positions.
    const QByteArray csv = ExplorePlot::csv(runs, true);
    QVERIFY(csv.contains(",1984,2044,"));

    // What the figure shows, for the docs: perplexity within the first context and in the
    // fourth, per run.
    for (const PerplexityRunResult &r : runs)
        qInfo("%s: %.1f within the context, %.1f in the 4th length, %.1f overall", qPrintable(r.label),
              meanPerplexity(r.text_curve, 0, kCtx), meanPerplexity(r.text_curve, 3 * kCtx, int(kTokens)), r.perplexity());
    const QString png = qEnvironmentVariable("LONGSCOPE_EXPLORE_OVERFLOW_PNG");
    if (!png.isEmpty())
        QVERIFY(plot->exportPng(png));
}

void TestExploreOverflow::savedRunsKeepTheNewFields()
{
    ExploreStore store(m_dir.filePath(QStringLiteral("round-trip")));
    PerplexityRunResult run;
    run.label = QStringLiteral("α 1 · shift, 0 sinks, drop 1");
    run.settings = explorePresetBase();
    run.settings.overflow = OverflowPolicy::Shift;
    run.settings.sink_tokens = 0;
    run.settings.shift_discard = 1;
    run.settings.context_limit = kCtx;
    run.ctx = kCtx;
    run.bucket = kBucket;
    run.n_ctx_train = kCtx;
    run.created = QDateTime::currentDateTimeUtc();
    run.curve = {{0, 64, 64, 5.5}, {448, 513, 1980, 5.25}};
    run.text_curve = {{0, 64, 64, 5.5}, {64, 128, 64, 5.0}, {1984, 2044, 60, 5.75}};
    run.streamed = true;
    run.n_scored = run.n_total = kTokens;
    run.mean_nll = 5.4;
    run.windows = 1;
    QVERIFY(store.save(run));
    const std::optional<PerplexityRunResult> back = store.load(run.id);
    QVERIFY(back);
    QVERIFY(back->settings == run.settings);
    QCOMPARE(back->streamed, true);
    QVERIFY(back->stopped.isEmpty());
    QCOMPARE(back->text_curve.size(), 3);
    for (int i = 0; i < 3; ++i) {
        QCOMPARE(back->text_curve[i].begin, run.text_curve[i].begin);
        QCOMPARE(back->text_curve[i].end, run.text_curve[i].end);
        QCOMPARE(back->text_curve[i].count, run.text_curve[i].count);
        QCOMPARE(back->text_curve[i].mean_nll, run.text_curve[i].mean_nll);
    }
    QCOMPARE(back->curve.size(), 2);

    PerplexityRunResult stopped = run;
    stopped.id.clear();
    stopped.settings.overflow = OverflowPolicy::Error;
    stopped.stopped = QStringLiteral("1 tokens do not fit in the context limit of 512");
    QVERIFY(store.save(stopped));
    QCOMPARE(store.load(stopped.id)->stopped, stopped.stopped);
    QCOMPARE(store.load(stopped.id)->settings.overflow, OverflowPolicy::Error);

    // Malformed new fields are named, not read as absent.
    QJsonObject bad = run.toJson();
    bad.insert(QStringLiteral("text_curve"), QStringLiteral("not a list"));
    QString why;
    QVERIFY(!PerplexityRunResult::fromJson(bad, &why));
    QVERIFY2(why.contains(QStringLiteral("text_curve")), qPrintable(why));
    bad = run.toJson();
    bad.insert(QStringLiteral("text_curve"), QJsonArray{QJsonObject{{QStringLiteral("begin"), 9}, {QStringLiteral("end"), 3},
                                                                    {QStringLiteral("count"), 1}, {QStringLiteral("mean_nll"), 1.0}}});
    QVERIFY(!PerplexityRunResult::fromJson(bad, &why));
    QCOMPARE(why, QStringLiteral("a text curve point is malformed"));
}

// A run file as Explore wrote it before runs streamed: no text curve, no streamed or stopped
// field, settings without sinks or discard.
void TestExploreOverflow::runFilesFromBeforeStillOpen()
{
    const QByteArray old = R"({
    "bucket": 256, "cancelled": false, "created": "2026-11-20T10:00:00.000Z", "ctx": 1024,
    "curve": [{"begin": 0, "count": 1023, "end": 256, "mean_nll": 4.0},
              {"begin": 256, "count": 1024, "end": 512, "mean_nll": 4.25}],
    "format": "longscope-perplexity-run", "id": "20261120-100000-000-abcd", "label": "α 2",
    "mean_nll": 4.1, "model": "stories260K", "book": "Alice", "n_ctx_train": 512, "n_scored": 2047,
    "n_total": 2047, "peak_memory_bytes": 1048576, "perplexity": 60.3, "seconds": 1.5, "steps": 8,
    "tokens_per_second": 4000, "version": 1, "windows": 2,
    "settings": {"ntk_alpha": 2, "ntk_auto": false, "store_kv_before_rope": false, "memory_efficient": true,
                 "causal_flash": true, "kv_mode": "static", "context_limit": 1024, "overflow": "error"}
})";
    QString why;
    const std::optional<PerplexityRunResult> r = PerplexityRunResult::fromJsonBytes(old, &why);
    QVERIFY2(r, qPrintable(why));
    QCOMPARE(r->label, QStringLiteral("α 2"));
    QCOMPARE(r->curve.size(), 2);
    QVERIFY(r->text_curve.isEmpty());
    QVERIFY(!r->streamed);
    QVERIFY(r->stopped.isEmpty());
    QCOMPARE(r->settings.overflow, OverflowPolicy::Error);
    QCOMPARE(r->settings.sink_tokens, 4);
    QCOMPARE(r->settings.shift_discard, 0);

    // Listed by the store and plotted; across the text it has nothing to draw.
    const QString dir = m_dir.filePath(QStringLiteral("old-runs"));
    QVERIFY(QDir().mkpath(dir));
    QFile f(ExploreStore(dir).filePath(QStringLiteral("20261120-100000-000-abcd")));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(old);
    f.close();
    ExploreStore store(dir);
    QCOMPARE(store.list().size(), 1);
    QVERIFY(store.lastErrors().isEmpty());
    ExploreView view(&store);
    view.runList()->setChecked(view.runList()->ids().first(), true);
    QCOMPARE(view.plot()->plot()->graph(0)->dataCount(), 2);
    view.acrossTextBox()->setChecked(true);
    QCOMPARE(view.plot()->plot()->graph(0)->dataCount(), 0);
}

QTEST_MAIN(TestExploreOverflow)
#include "tst_explore_overflow.moc"
