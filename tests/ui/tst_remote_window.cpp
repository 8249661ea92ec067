// The window with a remote engine: a real `longscope-cli serve` of the bundled model on a free
// loopback port, the window connected to it through File > Connect to Server's path
// (connectToServer with the key in a secret store of the test's own). A streamed chat, Stop
// keeping the conversation, a wrong key (401) and an unknown model (404) refused with the
// local model kept, /metrics polled onto the plots and into the CSV, Explore's perplexity from
// the server equal to the local one position by position, a server without prompt
// log-probabilities refused with Explore's message, and two Longscope instances (this window
// local, then this window on the server) giving the same greedy text on the same plots.
// Nothing talks to anything but 127.0.0.1.
#include <QCheckBox>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMenu>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "../cli/canned_server.h"
#include "../cli/serve_process.h"
#include "core/chat_model.h"
#include "core/remote_endpoint.h"
#include "core/remote_worker.h"
#include "longscope/model.h"
#include "longscope/tokenizer.h"
#include "remote/openai_client.h"
#include "widgets/book_panel.h"
#include "widgets/generation_panel.h"
#include "widgets/long_context_panel.h"
#include "widgets/main_window.h"
#include "widgets/metrics_plots.h"

#include <memory>

using namespace longscope;
using namespace longscope::ui;

namespace {

const bool kOffscreen = [] {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    return true;
}();

constexpr int kTimeoutMs = 60000;
const QByteArray k_key = "sk-window-test";
const QString k_model = QStringLiteral("stories260K");
const QString k_story = QStringLiteral(
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. One day, she "
    "saw a big red ball in the park. She ran to the ball and kicked it.");

class TestWindow : public MainWindow {
public:
    using MainWindow::MainWindow;
    QStringList errors;

protected:
    void showError(const QString &title, const QString &text) override { errors << title + QStringLiteral(": ") + text; }
    bool askConfirmation(const QString &, const QString &) override { return true; }
    QString chooseOpenFile(const QString &, const QString &) override { return {}; }
    QString chooseDirectory(const QString &) override { return {}; }
    QString chooseSaveFile(const QString &, const QString &, const QString &) override { return {}; }
};

QString lastReply(const MainWindow &w)
{
    const ChatModel *m = w.chatController()->model();
    for (int i = m->count() - 1; i >= 0; --i)
        if (m->at(i).role == Message::Role::Assistant)
            return m->at(i).text;
    return {};
}

// One perplexity run on `worker` (as Explore queues it), waited for.
PerplexityRunResult score(InferenceWorker *worker, const QString &text, const QString &label, QStringList *errors = nullptr,
                          const longscope::Settings &settings = {}, int ctx = 512)
{
    QSignalSpy done(worker, &InferenceWorker::perplexityFinished);
    auto c = QObject::connect(worker, &InferenceWorker::errorOccurred, [&](const QString &e) {
        if (errors)
            *errors << e;
    });
    worker->queuePerplexity(text, settings, ctx, 1, label);
    done.wait(kTimeoutMs);
    QObject::disconnect(c);
    if (done.isEmpty())
        return PerplexityRunResult{};
    return done.first().at(1).value<PerplexityRunResult>();
}

// Two curves point by point: the same positions and counts, NLL within 1e-3.
void compareCurves(const QVector<PerplexityPoint> &remote, const QVector<PerplexityPoint> &local)
{
    QCOMPARE(remote.size(), local.size());
    for (int i = 0; i < local.size(); ++i) {
        QCOMPARE(remote[i].begin, local[i].begin);
        QCOMPARE(remote[i].end, local[i].end);
        QCOMPARE(remote[i].count, local[i].count);
        QVERIFY2(std::abs(remote[i].mean_nll - local[i].mean_nll) < 1e-3,
                 qPrintable(QStringLiteral("position %1: %2 vs %3")
                                .arg(local[i].begin)
                                .arg(remote[i].mean_nll)
                                .arg(local[i].mean_nll)));
    }
}

} // namespace

class TestRemoteWindow : public QObject {
    Q_OBJECT

    longscope::test::ServeProcess m_server;
    QTemporaryDir m_dir;
    MemorySecretStore m_secrets;
    int m_windows = 0;

    std::unique_ptr<TestWindow> makeWindow()
    {
        auto *settings = new QSettings(m_dir.filePath(QStringLiteral("settings-%1.ini").arg(++m_windows)),
                                       QSettings::IniFormat, this);
        MainWindowOptions options;
        options.modelPath = QStringLiteral(LONGSCOPE_BUNDLED_MODEL);
        options.conversationDirectory = m_dir.filePath(QStringLiteral("conversations"));
        options.runsDirectory = m_dir.filePath(QStringLiteral("runs"));
        options.settings = settings;
        options.secrets = &m_secrets;
        options.interactive = false;
        auto w = std::make_unique<TestWindow>(options);
        w->resize(996, 568); // the minimum size
        w->show();
        if (!QTest::qWaitFor([&] { return w->isModelLoaded(); }, kTimeoutMs))
            return nullptr;
        // Greedy, short, no penalty: the same text from the engine here and from the server.
        GenerationParams p = w->generationPanel()->params();
        p.do_sample = false;
        p.max_new_tokens = 24;
        p.repetition_penalty = 1.0f;
        p.random_seed = false;
        w->generationPanel()->setParams(p);
        return w;
    }

    bool connectTo(TestWindow &w, const QString &model = k_model)
    {
        QSignalSpy connected(&w, &MainWindow::remoteConnected);
        QSignalSpy failed(&w, &MainWindow::remoteFailed);
        w.connectToServer(RemoteEndpoint{m_server.url(), model, true});
        (void)QTest::qWaitFor([&] { return !connected.isEmpty() || !failed.isEmpty(); }, kTimeoutMs);
        return !connected.isEmpty();
    }

    bool longscope() const { return m_server.kind() == QLatin1String("longscope"); }

    // An external server without prompt log-probabilities (llama-server): the run failed with
    // Explore's message (the caller skips the rest of the case then).
    bool withoutPromptLogprobs(const PerplexityRunResult &remote) const
    {
        return !longscope() && remote.failed() && remote.error.startsWith(RemoteWorker::explorePerplexityNeeds());
    }

    QString sendAndWait(TestWindow &w, const QString &text)
    {
        QSignalSpy finished(&w, &MainWindow::replyFinished);
        w.sendMessage(text);
        finished.wait(kTimeoutMs);
        return lastReply(w);
    }

private slots:
    void initTestCase()
    {
        QVERIFY(kOffscreen);
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        QVERIFY2(m_server.start({"--ctx", "512", "--api-key", QString::fromLatin1(k_key), "--threads", "1"}),
                 m_server.log().constData());
        QVERIFY(m_server.url().startsWith(QLatin1String("http://127.0.0.1:")));
        bool stored = false;
        m_secrets.write(m_server.url(), QString::fromLatin1(m_server.key(k_key)),
                        [&](const QString &error) { stored = error.isEmpty(); });
        QTRY_VERIFY(stored);
    }

    // The chat streams from the server; the header and status bar name it; the long-context
    // panel stays switchable (a Longscope server takes the switches per request); Regenerate
    // answers again; back to the local model.
    void chatStreamsThroughTheServer()
    {
        auto w = makeWindow();
        QVERIFY(w);
        QVERIFY(!w->isRemote());
        QVERIFY(connectTo(*w));
        QVERIFY(w->isRemote());
        QCOMPARE(w->activeWorker(), static_cast<InferenceWorker *>(w->remoteWorker()));
        QVERIFY(w->remoteName().startsWith(k_model + QStringLiteral(" @ 127.0.0.1:")));
        QVERIFY(w->longContextPanel()->isRemote());
        QCOMPARE(w->contextLimit(), 512); // the server's context
        QVERIFY(!w->useLocalModelAction()->text().isEmpty() && w->useLocalModelAction()->isEnabled());
        QVERIFY(!w->serversMenu()->isEmpty()); // remembered
        QVERIFY(w->serversMenu()->actions().first()->text().contains(m_server.url()));

        QSignalSpy streamed(w->remoteWorker(), &InferenceWorker::tokenStreamed);
        const QString reply = sendAndWait(*w, QStringLiteral("Tell me a story."));
        QVERIFY(!reply.isEmpty());
        QString pieces;
        for (const QList<QVariant> &piece : streamed)
            pieces += piece.first().toString();
        QCOMPARE(pieces, reply); // what streamed is what the conversation holds
        QVERIFY(w->contextUsed() > 0);
        QVERIFY(w->errors.isEmpty());

        QVERIFY(w->regenerateAction()->isEnabled());
        QSignalSpy finished(w.get(), &MainWindow::replyFinished);
        w->regenerate();
        QVERIFY(finished.wait(kTimeoutMs));
        QCOMPARE(lastReply(*w), reply); // greedy: the same answer again

        w->useLocalModel();
        QVERIFY(!w->isRemote());
        QVERIFY(!w->longContextPanel()->isRemote());
        QCOMPARE(w->activeWorker()->metaObject()->className(), "longscope::ui::EngineWorker");
        QVERIFY(!sendAndWait(*w, QStringLiteral("And then?")).isEmpty());
    }

    // Stop ends the reply mid-stream: the conversation keeps the question and what came.
    void stopMidStreamKeepsTheConversation()
    {
        auto w = makeWindow();
        QVERIFY(w);
        QVERIFY(connectTo(*w));
        GenerationParams p = w->generationPanel()->params();
        p.max_new_tokens = 400;
        w->generationPanel()->setParams(p);
        auto c = connect(w->remoteWorker(), &InferenceWorker::tokenStreamed, w.get(), [&] { w->stop(); });
        const QString reply = sendAndWait(*w, QStringLiteral("Tell me a long story."));
        disconnect(c);
        QVERIFY(!reply.isEmpty());
        QCOMPARE(w->chatController()->lastSummary().reason, FinishReason::Stopped);
        QVERIFY(w->chatController()->lastSummary().generated_tokens < 400);
        const ChatModel *m = w->chatController()->model();
        QVERIFY(m->count() >= 2);
        QCOMPARE(m->at(0).text, QStringLiteral("Tell me a long story."));
        QVERIFY(!w->isBusy());
        // The conversation goes on.
        disconnect(c);
        QVERIFY(!sendAndWait(*w, QStringLiteral("Go on.")).isEmpty());
    }

    void wrongKeyIsRefused()
    {
        auto w = makeWindow();
        QVERIFY(w);
        const QString url = m_server.url() + QStringLiteral("/v1"); // another URL: a key of its own
        bool stored = false;
        m_secrets.write(url, QStringLiteral("sk-wrong"), [&](const QString &) { stored = true; });
        QTRY_VERIFY(stored);
        QSignalSpy failed(w.get(), &MainWindow::remoteFailed);
        w->connectToServer(RemoteEndpoint{url, k_model, true});
        QVERIFY(failed.wait(kTimeoutMs));
        QVERIFY2(failed.first().first().toString().contains(QLatin1String("(401)")),
                 qPrintable(failed.first().first().toString()));
        QVERIFY(!w->isRemote());
        QVERIFY(w->isModelLoaded());
        QCOMPARE(w->errors.size(), 1);
        QVERIFY(w->errors.first().contains(QLatin1String("still loaded")));
    }

    void unknownModelIsRefused()
    {
        auto w = makeWindow();
        QVERIFY(w);
        QVERIFY(!connectTo(*w, QStringLiteral("no-such-model")));
        QVERIFY(!w->isRemote());
        QVERIFY2(w->errors.value(0).contains(QLatin1String("no model 'no-such-model' (it serves: stories260K)")),
                 qPrintable(w->errors.value(0)));
    }

    // /metrics is polled every second while the server is in use: the samples land on the
    // plots (KV usage, requests, generation throughput) and in the CSV export.
    void serverMetricsReachThePlots()
    {
        auto w = makeWindow();
        QVERIFY(w);
        QVERIFY(connectTo(*w));
        QVERIFY(!sendAndWait(*w, QStringLiteral("Tell me a story.")).isEmpty());
        MetricsPlots *plots = w->metricsPlots();
        QTRY_VERIFY_WITH_TIMEOUT(plots->history().server.size() >= 2, 10000);
        plots->flush();
        QCOMPARE(plots->history().serverEngine, m_server.kind());
        const ServerSample last = plots->history().server.last();
        if (longscope()) // llama-server publishes no KV usage (no llamacpp:kv_cache_usage_ratio since 2025)
            QVERIFY(last.kv_usage > 0 && last.kv_usage <= 1);
        QCOMPARE(last.requests_running, 0.0);
        QCOMPARE(last.requests_waiting, 0.0);
        QVERIFY(plots->serverPointCount() >= 3 * 2);
        QVERIFY(plots->plottedPointCount() >= 2); // the client's prefill and decode points
        if (const QString dir = qEnvironmentVariable("LONGSCOPE_TEST_ARTIFACTS"); !dir.isEmpty()) {
            plots->replotNow();
            QVERIFY(w->grab().save(QDir(dir).filePath(QStringLiteral("remote-window.png")))); // for a look by eye
        }
        const QByteArray csv = plots->history().toCsv();
        QVERIFY(csv.startsWith("run,model,"));
        QVERIFY(csv.contains(",server_kv_usage,"));
        QVERIFY(csv.contains(",server,"));
        // Saved with the conversation and read back.
        const auto back = PlotHistory::fromJson(plots->history().toJson());
        QVERIFY(back);
        QCOMPARE(back->server.size(), plots->history().server.size());
        QCOMPARE(back->toCsv(), csv);
    }

    // Explore's perplexity by position from the server's prompt log-probabilities equals the
    // local engine's on the same model and text, position by position.
    void explorePerplexityMatchesTheLocalOne()
    {
        auto w = makeWindow();
        QVERIFY(w);
        const PerplexityRunResult local = score(w->activeWorker(), k_story, QStringLiteral("local"));
        QVERIFY2(!local.failed(), qPrintable(local.error));
        QVERIFY(connectTo(*w));
        const PerplexityRunResult remote = score(w->activeWorker(), k_story, QStringLiteral("remote"));
        if (withoutPromptLogprobs(remote))
            QSKIP(qPrintable(QStringLiteral("the server returns no prompt log-probabilities; Explore said: ") + remote.error));
        QVERIFY2(!remote.failed(), qPrintable(remote.error));
        QVERIFY(local.curve.size() > 20);
        QCOMPARE(remote.curve.size(), local.curve.size());
        for (int i = 0; i < local.curve.size(); ++i) {
            QCOMPARE(remote.curve[i].begin, local.curve[i].begin);
            QCOMPARE(remote.curve[i].count, local.curve[i].count);
            QVERIFY2(std::abs(remote.curve[i].mean_nll - local.curve[i].mean_nll) < 1e-3,
                     qPrintable(QStringLiteral("position %1: %2 vs %3")
                                    .arg(local.curve[i].begin)
                                    .arg(remote.curve[i].mean_nll)
                                    .arg(local.curve[i].mean_nll)));
        }
        QVERIFY(std::abs(remote.mean_nll - local.mean_nll) < 1e-3);
        // Saved and reopened as a local run is.
        const auto reopened = PerplexityRunResult::fromJsonBytes(remote.toJsonBytes());
        QVERIFY(reopened);
        QCOMPARE(reopened->curve.size(), remote.curve.size());
    }

    // A text of several windows is scored in the run's windows (token boundaries from the
    // server's /tokenize, each window sent as token ids), or through one context of the run's
    // length that stops when it is full, as the local run does: the remote curves (by position
    // and along the text) equal the local ones point by point.
    void explorePerplexityInWindowsMatchesTheLocalOne_data()
    {
        QTest::addColumn<int>("overflow");
        QTest::newRow("windows (head-tail)") << int(OverflowPolicy::HeadTail);
        QTest::newRow("one context (error)") << int(OverflowPolicy::Error);
    }
    void explorePerplexityInWindowsMatchesTheLocalOne()
    {
        QFETCH(int, overflow);
        auto w = makeWindow();
        QVERIFY(w);
        const QString text = QStringList{k_story, k_story, k_story, k_story}.join(QLatin1Char(' '));
        longscope::Settings settings;
        settings.overflow = OverflowPolicy(overflow);
        constexpr int ctx = 64;
        const PerplexityRunResult local = score(w->activeWorker(), text, QStringLiteral("local"), nullptr, settings, ctx);
        QVERIFY2(!local.failed(), qPrintable(local.error));
        if (settings.overflow == OverflowPolicy::HeadTail)
            QVERIFY2(local.windows >= 3, qPrintable(QString::number(local.windows)));
        else
            QVERIFY(!local.stopped.isEmpty() && local.n_scored == ctx);
        QVERIFY(connectTo(*w));
        const PerplexityRunResult remote = score(w->activeWorker(), text, QStringLiteral("remote"), nullptr, settings, ctx);
        if (withoutPromptLogprobs(remote))
            QSKIP(qPrintable(QStringLiteral("the server returns no prompt log-probabilities; Explore said: ") + remote.error));
        QVERIFY2(!remote.failed(), qPrintable(remote.error));
        QVERIFY2(remote.note.isEmpty(), qPrintable(remote.note)); // the server has /tokenize
        QCOMPARE(remote.ctx, ctx);
        QCOMPARE(remote.windows, local.windows);
        QCOMPARE(remote.n_scored, local.n_scored);
        QCOMPARE(remote.streamed, local.streamed);
        QCOMPARE(remote.stopped.isEmpty(), local.stopped.isEmpty());
        compareCurves(remote.curve, local.curve);
        compareCurves(remote.text_curve, local.text_curve);
        QVERIFY(std::abs(remote.mean_nll - local.mean_nll) < 1e-3);
    }

    // The server's /tokenize, asked as the client asks it, gives the local tokenizer's ids
    // (and its BOS for an empty text with special tokens).
    void serverTokenizerGivesTheLocalTokens()
    {
        const auto model = longscope::Model::load(LONGSCOPE_BUNDLED_MODEL);
        QVERIFY(model);
        const std::string text = k_story.toStdString();
        auto tokenize = [&](const std::string &t, bool special) {
            const QByteArray body = QByteArray::fromStdString(remote::tokenize_request(k_model.toStdString(), t, special).dump());
            const auto reply = longscope::test::http(m_server.url() + QStringLiteral("/tokenize"), body, m_server.key(k_key));
            if (reply.status != 200)
                qWarning() << reply.status << reply.body;
            return remote::parse_tokens(reply.body.toStdString());
        };
        QCOMPARE(tokenize(text, false), model->tokenizer().encode(text, false));
        QCOMPARE(tokenize(std::string(), true), std::vector<int32_t>{model->tokenizer().bos_id()});
    }

    // A change on the long-context panel waits for the next request ("Change sent"); a
    // Longscope server takes it with that request, and the marker clears then: "Applied at
    // token N" and a marker on the plots.
    void pendingChangeClearsAtTheNextRequest()
    {
        auto w = makeWindow();
        QVERIFY(w);
        QVERIFY(connectTo(*w));
        LongContextPanel *panel = w->longContextPanel();
        if (!longscope()) {
            // The toggles are greyed with the reason: nothing can be pending.
            QVERIFY(!panel->memoryEfficientBox()->isEnabled());
            QVERIFY(!panel->appliedLabel()->text().contains(QLatin1String("next step")));
            QSKIP("the server fixes the long-context switches when it starts (checked: greyed, nothing pending)");
        }
        QVERIFY(!sendAndWait(*w, QStringLiteral("Tell me a story.")).isEmpty());
        const int markers = w->metricsPlots()->markerCount();
        QVERIFY(panel->memoryEfficientBox()->isEnabled());
        panel->memoryEfficientBox()->setChecked(!panel->memoryEfficientBox()->isChecked());
        QCOMPARE(panel->appliedLabel()->text(), QStringLiteral("Change sent: applies at the next step"));
        QVERIFY(!sendAndWait(*w, QStringLiteral("And then?")).isEmpty());
        const QString applied = panel->appliedLabel()->text();
        const QRegularExpressionMatch m = QRegularExpression(QStringLiteral("Applied at token ([\\d,.\\s]+)")).match(applied);
        QVERIFY2(m.hasMatch(), qPrintable(applied));
        QVERIFY2(m.captured(1).remove(QRegularExpression(QStringLiteral("\\D"))).toInt() > 0, qPrintable(applied));
        QCOMPARE(w->metricsPlots()->markerCount(), markers + 1);
        // A request without a change applies nothing new.
        QVERIFY(!sendAndWait(*w, QStringLiteral("Go on.")).isEmpty());
        QCOMPARE(w->metricsPlots()->markerCount(), markers + 1);
    }

    // A server that fixes the switches when it starts (anything but Longscope serve) gets no
    // "Change sent" marker: its toggles are greyed, and a change that reaches the window
    // anyway (a preset, settings restored) is not waited for.
    void greyedTogglesLeaveNothingPending()
    {
        longscope::test::CannedServer other(longscope::test::http_response(
            200, "application/json", R"({"object":"list","data":[{"id":"stories260K","object":"model","owned_by":"vllm"}]})"));
        auto w = makeWindow();
        QVERIFY(w);
        QSignalSpy connected(w.get(), &MainWindow::remoteConnected);
        w->connectToServer(RemoteEndpoint{other.url(), k_model, false});
        QVERIFY(connected.wait(kTimeoutMs));
        LongContextPanel *panel = w->longContextPanel();
        QVERIFY(!panel->memoryEfficientBox()->isEnabled());
        const QString reason = panel->appliedLabel()->text();
        QVERIFY(!reason.isEmpty());
        longscope::Settings changed = panel->settings();
        changed.attention.memory_efficient = !changed.attention.memory_efficient;
        emit panel->settingsChanged(changed);
        QCOMPARE(panel->appliedLabel()->text(), reason);
    }

    // A server that echoes no prompt log-probabilities (llama-server's /v1/completions) gets
    // Explore's message; a needle grid says it needs a local model.
    void exploreSaysWhatTheServerLacks()
    {
        longscope::test::CannedServer plain(longscope::test::http_response(
            200, "application/json",
            R"({"choices":[{"index":0,"text":" the","finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":1}})"));
        RemoteWorker w;
        w.setEndpoint(plain.url(), {}, k_model);
        QStringList errors;
        const PerplexityRunResult r = score(&w, k_story, QStringLiteral("plain"), &errors);
        QVERIFY(r.failed());
        QVERIFY2(r.error.startsWith(QLatin1String("Explore needs a local model or a server that returns prompt "
                                                  "log-probabilities (echo with logprobs)")),
                 qPrintable(r.error));
        QCOMPARE(errors, QStringList{r.error});
        // Its /tokenize answers no tokens either: the text went as one window, and the run says so.
        QVERIFY2(r.note.contains(QLatin1String("one window")), qPrintable(r.note));

        QSignalSpy needles(&w, &InferenceWorker::needleFinished);
        w.queueNeedle(NeedleRequest{});
        QVERIFY(needles.wait(5000));
        QVERIFY(needles.first().at(1).value<NeedleRunResult>().error.contains(QLatin1String("local model only")));
    }

    // A book streamed into the context goes to the server as a long prompt ahead of the chat:
    // the server counts its tokens (as many as a completion over it reports), the question
    // after it is answered, and Continue writes on from it.
    void bookGoesAheadAsALongPrompt()
    {
        auto w = makeWindow();
        QVERIFY(w);
        QVERIFY(connectTo(*w));
        const QString path = m_dir.filePath(QStringLiteral("story.txt"));
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(k_story.toUtf8());
        }
        QVERIFY(w->openBook(path));
        const QString book = w->bookPanel()->book().text; // as read: a line break at its end
        QVERIFY(book.startsWith(k_story));
        QSignalSpy streamed(w.get(), &MainWindow::bookStreamFinished);
        w->streamBook();
        QVERIFY(streamed.wait(kTimeoutMs));
        QCOMPARE(streamed.first().at(0).toBool(), false);
        const int tokens = streamed.first().at(1).toInt();
        const QJsonObject direct =
            longscope::test::http(m_server.url() + QStringLiteral("/v1/completions"),
                                  QJsonDocument(QJsonObject{{"model", k_model}, {"prompt", book}, {"max_tokens", 1}})
                                      .toJson(),
                                  m_server.key(k_key))
                .json();
        QCOMPARE(tokens, direct["usage"].toObject()["prompt_tokens"].toInt());
        QCOMPARE(w->contextUsed(), tokens);
        QCOMPARE(w->remoteWorker()->document(), book);

        QVERIFY(!sendAndWait(*w, QStringLiteral("What did Lily kick?")).isEmpty());
        QVERIFY(w->contextUsed() > tokens); // the reply's context holds the book

        QSignalSpy finished(w.get(), &MainWindow::replyFinished);
        w->clearConversation(); // forgets the book
        QCOMPARE(w->remoteWorker()->document(), QString());
        QVERIFY(w->openBook(path));
        w->streamBook();
        QVERIFY(streamed.wait(kTimeoutMs));
        w->continueText();
        QVERIFY(finished.wait(kTimeoutMs));
        QVERIFY(!lastReply(*w).isEmpty());
        QCOMPARE(w->remoteWorker()->document(), book + lastReply(*w)); // what Continue wrote joined it
    }

    // Two Longscope instances: this window's engine and the server (another process with the
    // same model) give the same greedy text, and both put points on the same plots.
    void twoInstancesGiveTheSameText()
    {
        if (!longscope())
            QSKIP("compares with Longscope's own engine and chat template (another server formats the chat its own way)");
        auto w = makeWindow();
        QVERIFY(w);
        MetricsPlots *plots = w->metricsPlots();
        const QString local = sendAndWait(*w, QStringLiteral("Once upon a time"));
        QVERIFY(!local.isEmpty());
        plots->flush();
        const int localPoints = plots->plottedPointCount();
        QVERIFY(localPoints > 0);
        QVERIFY(connectTo(*w));
        w->clearConversation();
        const QString remote = sendAndWait(*w, QStringLiteral("Once upon a time"));
        QCOMPARE(remote.trimmed(), local.trimmed());
        plots->flush();
        QVERIFY(plots->plottedPointCount() > 0);
        QVERIFY(plots->history().model.startsWith(k_model + QStringLiteral(" @ ")));
        QVERIFY(w->width() <= 1000); // still the minimum window
    }
};

QTEST_MAIN(TestRemoteWindow)
#include "tst_remote_window.moc"
