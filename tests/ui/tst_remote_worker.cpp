// The app's remote engine (ui/core/remote_worker, remote_endpoint) against a real
// `longscope-cli serve` on a free loopback port: models, a streamed chat equal to the
// server's non-streamed reply, Stop closing the request (the server says the client went
// away), client-measured speed, /metrics polling; and against canned loopback answers, each
// failure as a message with the text that came kept.
#include <QJsonArray>
#include <QJsonDocument>
#include <QSignalSpy>
#include <QTcpServer>
#include <QTcpSocket>
#include <QtTest>

#include "../cli/canned_server.h"
#include "../cli/serve_process.h"
#include "core/remote_endpoint.h"
#include "core/remote_worker.h"

using namespace longscope::ui;
using longscope::test::CannedServer;
using longscope::test::http;
using longscope::test::http_response;

namespace {

const QByteArray k_own_key = "sk-app-test";

ChatRequest chat(const QString &text, int max_tokens)
{
    ChatRequest r;
    r.turns.push_back({ChatTurn::Role::User, text});
    r.params.max_new_tokens = max_tokens;
    r.params.do_sample = false;
    r.params.repetition_penalty = 1.0f;
    return r;
}

// Runs a chat on `w` and waits for its end.
GenerationSummary run_chat(RemoteWorker &w, const ChatRequest &r, QString *streamed = nullptr,
                           QStringList *errors = nullptr)
{
    QSignalSpy done(&w, &RemoteWorker::generationFinished);
    auto c1 = QObject::connect(&w, &RemoteWorker::tokenStreamed, [&](const QString &t) {
        if (streamed)
            *streamed += t;
    });
    auto c2 = QObject::connect(&w, &RemoteWorker::errorOccurred, [&](const QString &e) {
        if (errors)
            errors->push_back(e);
    });
    w.generateChat(r);
    done.wait(60000);
    QObject::disconnect(c1);
    QObject::disconnect(c2);
    return done.isEmpty() ? GenerationSummary{FinishReason::Error, "<no answer>"}
                          : done.first().first().value<GenerationSummary>();
}

} // namespace

class TestRemoteWorker : public QObject {
    Q_OBJECT

    longscope::test::ServeProcess m_server;
    QByteArray m_key = m_server.key(k_own_key);
    int m_generated = 0; // completion tokens the server produced for this suite
    bool longscope() const { return m_server.kind() == QLatin1String("longscope"); }

    void point(RemoteWorker &w, const QString &url, const QByteArray &key = {}, const QString &model = "stories260K")
    {
        w.setEndpoint(url, QString::fromLatin1(key.isEmpty() ? m_key : key), model);
    }

private slots:
    void initTestCase()
    {
        QVERIFY2(m_server.start({"--ctx", "512", "--api-key", QString::fromLatin1(k_own_key), "--threads", "1"}),
                 m_server.log().constData());
    }

    void models_are_listed()
    {
        RemoteWorker w;
        point(w, m_server.url() + "/v1/", {}, {});
        QSignalSpy listed(&w, &RemoteWorker::modelsListed);
        w.listModels();
        QVERIFY(listed.wait(10000));
        const auto models = listed.first().first().value<QVector<RemoteModelInfo>>();
        QCOMPARE(models.size(), 1);
        QCOMPARE(models[0].context_length, 512); // serve --ctx 512; llama-server: the trained context
        if (!longscope()) {
            QVERIFY(!models[0].id.isEmpty());
            QVERIFY(!w.capabilities().per_request_settings);
            QVERIFY(!w.capabilities().reason.isEmpty());
            return;
        }
        QCOMPARE(models[0].id, QStringLiteral("stories260K"));
        QCOMPARE(models[0].architecture, QStringLiteral("llama"));
        QVERIFY(w.capabilities().per_request_settings); // Longscope takes the settings per request
    }

    void chat_streams_the_servers_reply()
    {
        RemoteWorker w;
        point(w, m_server.url());
        QSignalSpy fitted(&w, &RemoteWorker::promptFitted);
        QSignalSpy measured(&w, &RemoteWorker::requestMetrics);
        QSignalSpy steps(&w, &RemoteWorker::stepMetrics);
        QString streamed;
        const GenerationSummary s = run_chat(w, chat("Tell me a story.", 16), &streamed);
        QCOMPARE(s.reason, FinishReason::MaxTokens);
        QCOMPARE(streamed, s.text);
        const QJsonObject direct =
            http(m_server.url() + "/v1/chat/completions",
                 QJsonDocument(QJsonObject{{"messages", QJsonArray{QJsonObject{{"role", "user"},
                                                                               {"content", "Tell me a story."}}}},
                                           {"max_tokens", 16},
                                           {"temperature", 0}})
                     .toJson(),
                 m_key)
                .json();
        QCOMPARE(s.text, direct["choices"].toArray().first().toObject()["message"].toObject()["content"].toString());
        const int prompt = direct["usage"].toObject()["prompt_tokens"].toInt();
        QCOMPARE(fitted.size(), 1);
        QCOMPARE(fitted.first().first().toInt(), prompt);
        QCOMPARE(s.generated_tokens, 16);
        const auto m = measured.first().first().value<RemoteRequestMetrics>();
        QVERIFY(m.time_to_first_token_s > 0);
        QVERIFY(m.decode_tokens_per_second > 0);
        QCOMPARE(m.context_tokens, prompt + 16);
        QCOMPARE(steps.size(), 2); // the prompt as a prefill step, the reply as a decode step
        const auto prefill = steps.first().first().value<longscope::StepMetrics>();
        QCOMPARE(prefill.phase, longscope::StepPhase::Prefill);
        QCOMPARE(prefill.position, prompt);
        QCOMPARE(prefill.seconds, m.time_to_first_token_s);
        const auto step = steps.last().first().value<longscope::StepMetrics>();
        QCOMPARE(step.phase, longscope::StepPhase::Decode);
        QCOMPARE(step.position, prompt + 16);
        QCOMPARE(step.tokens_per_second, m.decode_tokens_per_second);
        m_generated += 32; // this reply and the direct one
    }

    // Stop aborts the request: the reply ends as stopped with what came, and the server
    // cancels the generation (it logs that the client went away).
    void stop_cancels_the_request()
    {
        RemoteWorker w;
        point(w, m_server.url());
        QSignalSpy done(&w, &RemoteWorker::generationFinished);
        connect(&w, &RemoteWorker::tokenStreamed, &w, &RemoteWorker::requestStop);
        ChatRequest r = chat("Tell me a long story.", 480);
        w.generateChat(r);
        QVERIFY(done.wait(30000));
        const auto s = done.first().first().value<GenerationSummary>();
        QCOMPARE(s.reason, FinishReason::Stopped);
        QVERIFY(!s.text.isEmpty());
        if (!longscope())
            return; // the cancellation is seen in Longscope's log only
        QElapsedTimer t;
        t.start();
        while (!m_server.log().contains("client went away") && t.elapsed() < 10000)
            QTest::qWait(50);
        QVERIFY2(m_server.log().contains("client went away"), m_server.log().right(400).constData());
    }

    // A Longscope server takes the long-context switches per request.
    void settings_go_with_each_request()
    {
        if (!longscope())
            QSKIP("the long-context request fields are Longscope serve's");
        RemoteWorker w;
        point(w, m_server.url());
        QSignalSpy listed(&w, &RemoteWorker::modelsListed);
        w.listModels();
        QVERIFY(listed.wait(10000));
        longscope::Settings s;
        s.kv_mode = longscope::KvMode::Concat;
        s.rope.ntk_auto = false;
        s.rope.ntk_alpha = 2.0f;
        s.attention.memory_efficient = true;
        w.setSettings(s);
        QCOMPARE(run_chat(w, chat("Once upon a time", 4)).reason, FinishReason::MaxTokens);
        const QJsonObject applied =
            http(m_server.url() + "/v1/metrics", {}, m_key).json()["step"].toObject()["settings"].toObject();
        QCOMPARE(applied["kv_mode"].toString(), QStringLiteral("concat"));
        QCOMPARE(applied["ntk_alpha"].toDouble(), 2.0);
        QCOMPARE(applied["memory_efficient_attention"].toBool(), true);
        m_generated += 4;
    }

    void metrics_are_polled()
    {
        RemoteWorker w;
        point(w, m_server.url());
        QSignalSpy polled(&w, &RemoteWorker::serverMetrics);
        // The reply an earlier case stopped may still hold a slot for a moment: a server notices
        // a client that left at its next write (llama-server does), so poll until it is idle.
        RemoteServerMetrics first;
        for (int attempt = 0; attempt < 50; ++attempt) {
            w.pollMetrics();
            QVERIFY(polled.wait(10000));
            first = polled.takeFirst().first().value<RemoteServerMetrics>();
            QVERIFY(first.metrics.requests_running.has_value());
            if (*first.metrics.requests_running == 0.0)
                break;
            QTest::qWait(100);
        }
        QCOMPARE(QString::fromStdString(first.metrics.engine), m_server.kind());
        QVERIFY(*first.metrics.generation_tokens_total >= m_generated); // plus the stopped reply's
        QCOMPARE(*first.metrics.requests_running, 0.0);
        if (longscope()) {
            QVERIFY(*first.metrics.kv_usage > 0 && *first.metrics.kv_usage <= 1);
            QVERIFY(first.metrics.memory_bytes.at("weights") > 0);
        }

        const GenerationSummary s = run_chat(w, chat("Once upon a time", 8));
        QCOMPARE(s.generated_tokens, 8);
        w.pollMetrics();
        QVERIFY(polled.wait(10000));
        const auto second = polled.takeFirst().first().value<RemoteServerMetrics>();
        QCOMPARE(*second.metrics.generation_tokens_total - *first.metrics.generation_tokens_total, 8.0);
        QVERIFY(second.generation_tokens_per_second && *second.generation_tokens_per_second > 0);

        // Polling on a timer.
        w.setPollInterval(100);
        QVERIFY(polled.wait(5000));
        w.setPollInterval(0);
    }

    void failures_data()
    {
        QTest::addColumn<QByteArray>("response"); // empty: use the real server with a wrong key
        QTest::addColumn<QString>("says");
        QTest::addColumn<QString>("kept");
        QTest::newRow("401") << QByteArray() << "refused the API key (401)" << "";
        QTest::newRow("404 model") << http_response(404, "application/json",
                                                    R"({"object":"error","message":"The model `stories260K` does not exist."})")
                                   << "has no model 'stories260K'" << "";
        QTest::newRow("429") << http_response(429, "application/json", R"({"error":{"message":"slow down"}})")
                             << "rate limiting requests (429)" << "";
        QTest::newRow("503") << http_response(503, "text/plain", "loading") << "busy or not ready" << "";
        QTest::newRow("dropped") << http_response(200, "text/event-stream",
                                                  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Once\"}}]}\n\n",
                                                  true)
                                 << "dropped before the reply was finished" << "Once";
        QTest::newRow("not an API") << http_response(200, "text/event-stream", "data: <html>\n\n")
                                    << "is not JSON" << "";
    }
    void failures()
    {
        QFETCH(QByteArray, response);
        QFETCH(QString, says);
        QFETCH(QString, kept);
        CannedServer canned(response);
        RemoteWorker w;
        if (response.isEmpty())
            point(w, m_server.url(), "sk-wrong");
        else
            point(w, canned.url());
        QStringList errors;
        const GenerationSummary s = run_chat(w, chat("hi", 8), nullptr, &errors);
        QCOMPARE(s.reason, FinishReason::Error);
        QCOMPARE(errors.size(), 1);
        QVERIFY2(errors.first().contains(says), qPrintable(errors.first()));
        QCOMPARE(s.text, kept);
    }

    void connection_refused_and_timeout()
    {
        QTcpServer probe;
        QVERIFY(probe.listen(QHostAddress::LocalHost));
        const QString closed = QStringLiteral("http://127.0.0.1:%1").arg(probe.serverPort());
        probe.close();
        RemoteWorker w;
        point(w, closed);
        QStringList errors;
        QCOMPARE(run_chat(w, chat("hi", 8), nullptr, &errors).reason, FinishReason::Error);
        QVERIFY2(errors.value(0).contains("cannot reach the server"), qPrintable(errors.value(0)));

        CannedServer silent{QByteArray()};
        RemoteWorker slow;
        slow.setTimeout(0.5);
        point(slow, silent.url());
        errors.clear();
        QElapsedTimer t;
        t.start();
        QCOMPARE(run_chat(slow, chat("hi", 8), nullptr, &errors).reason, FinishReason::Error);
        QVERIFY2(errors.value(0).contains("did not answer within 0.5 s"), qPrintable(errors.value(0)));
        QVERIFY(t.elapsed() < 10000);
    }

    void metrics_missing_says_so()
    {
        CannedServer none(http_response(404, "text/plain", "Not Found"));
        RemoteWorker w;
        point(w, none.url());
        QSignalSpy missing(&w, &RemoteWorker::metricsUnavailable);
        w.pollMetrics();
        QVERIFY(missing.wait(10000));
        QVERIFY(missing.first().first().toString().contains("--metrics"));
    }

    void bad_url_is_reported()
    {
        RemoteWorker w;
        QSignalSpy errors(&w, &RemoteWorker::errorOccurred);
        w.setEndpoint("localhost:8000", {}, "m");
        QCOMPARE(errors.size(), 1);
        QVERIFY(errors.first().first().toString().contains("no scheme"));
    }

    // Keys go to the secret store, never into the settings.
    void keys_stay_out_of_the_settings()
    {
        MemorySecretStore store;
        bool written = false;
        store.write("http://gpu:8000", "sk-secret", [&](const QString &e) { written = e.isEmpty(); });
        QTRY_VERIFY(written);
        QString read;
        store.read("http://gpu:8000", [&](const QString &s, const QString &) { read = s; });
        QTRY_COMPARE(read, QStringLiteral("sk-secret"));
        const QJsonArray json = endpointsToJson({{"http://gpu:8000", "llama-70b", true}});
        QVERIFY(!QJsonDocument(json).toJson().contains("sk-secret"));
        const auto back = endpointsFromJson(json);
        QCOMPARE(back.size(), 1);
        QCOMPARE(back[0].model, QStringLiteral("llama-70b"));
        QVERIFY(back[0].has_key);
        QVERIFY(endpointsFromJson(QJsonArray{1, QJsonObject{{"model", "x"}}}).isEmpty());
    }

    void cleanupTestCase() { m_server.stop(); }
};

QTEST_GUILESS_MAIN(TestRemoteWorker)
#include "tst_remote_worker.moc"
