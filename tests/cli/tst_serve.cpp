// longscope-cli serve end to end: the server started as a user starts it (QProcess, a free
// loopback port), spoken to over real HTTP with QNetworkAccessManager.
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include "cli_runner.h"

namespace {

const QByteArray k_key = "sk-longscope-test";
const int k_ctx = 1024;

struct Reply {
    int status = 0;
    QByteArray body;
    QByteArray content_type;
    QJsonObject json() const { return QJsonDocument::fromJson(body).object(); }
};

QByteArray to_json(const QJsonObject &o) { return QJsonDocument(o).toJson(QJsonDocument::Compact); }

// The start of Alice's Adventures in Wonderland: about 670 tokens for stories260K, past its
// trained context of 512, so NTK scaling matters.
QString long_prompt()
{
    QFile f(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt"));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    const QString text = QString::fromUtf8(f.readAll());
    return text.mid(text.indexOf("Alice was beginning"), 1200);
}

// The data: payloads of a server-sent event stream, in order ("[DONE]" included).
QList<QByteArray> sse_payloads(const QByteArray &stream)
{
    QList<QByteArray> out;
    for (const QByteArray &event : stream.split('\n'))
        if (event.startsWith("data: "))
            out.push_back(event.mid(6));
    return out;
}

// The concatenated content of a streamed chat (delta.content) or completion (text).
QString stream_text(const QList<QByteArray> &payloads, QString *finish = nullptr)
{
    QString text;
    for (const QByteArray &p : payloads) {
        if (p == "[DONE]")
            continue;
        const QJsonObject o = QJsonDocument::fromJson(p).object();
        const QJsonArray choices = o["choices"].toArray();
        if (choices.isEmpty())
            continue;
        const QJsonObject c = choices.first().toObject();
        text += c.contains("delta") ? c["delta"].toObject()["content"].toString() : c["text"].toString();
        if (finish && c["finish_reason"].isString())
            *finish = c["finish_reason"].toString();
    }
    return text;
}

} // namespace

class TestServe : public QObject {
    Q_OBJECT

public:
    TestServe() { m_nam.setAutoDeleteReplies(false); }

private:
    QProcess m_server;
    QByteArray m_log;
    int m_port = 0;
    QNetworkAccessManager m_nam;
    QTemporaryDir m_dir;

    QNetworkRequest make_request(const QString &path, const QByteArray &key,
                                 const QByteArray &content_type = "application/json")
    {
        QNetworkRequest rq(QUrl(QStringLiteral("http://127.0.0.1:%1%2").arg(m_port).arg(path)));
        rq.setAttribute(QNetworkRequest::Http2AllowedAttribute, false);
        rq.setHeader(QNetworkRequest::ContentTypeHeader, content_type);
        if (!key.isEmpty())
            rq.setRawHeader("Authorization", "Bearer " + key);
        return rq;
    }

    Reply finish(QNetworkReply *r, int timeout_ms = 60000)
    {
        if (!r->isFinished()) {
            QEventLoop loop;
            QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
            connect(r, &QNetworkReply::finished, &loop, &QEventLoop::quit);
            loop.exec();
        }
        if (!r->isFinished())
            r->abort();
        Reply out;
        out.status = r->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
        out.body = r->readAll();
        out.content_type = r->header(QNetworkRequest::ContentTypeHeader).toByteArray();
        r->deleteLater();
        return out;
    }

    Reply get(const QString &path, const QByteArray &key = k_key)
    {
        return finish(m_nam.get(make_request(path, key)));
    }
    Reply post(const QString &path, const QByteArray &body, const QByteArray &key = k_key,
               const QByteArray &content_type = "application/json")
    {
        return finish(m_nam.post(make_request(path, key, content_type), body));
    }
    Reply post(const QString &path, const QJsonObject &body) { return post(path, to_json(body)); }

    // The CLI's greedy text for the same prompt and settings.
    QByteArray cli_greedy(const QString &prompt, int n, const QStringList &extra = {})
    {
        const QString file = m_dir.filePath(QStringLiteral("prompt-%1.txt").arg(qHash(prompt)));
        QFile f(file);
        if (!f.exists() && f.open(QIODevice::WriteOnly))
            f.write(prompt.toUtf8());
        f.close();
        auto r = longscope::test::run_cli(QStringList{"generate", "-f", file, "--temp", "0", "-n", QString::number(n),
                                                      "--ctx", QString::number(k_ctx)} +
                                          extra);
        return r.code == 0 ? r.out : QByteArray("<cli failed: " + r.err + ">");
    }

    static void verify_error_shape(const Reply &r, int status, const QString &param = {}, const QString &code = {})
    {
        QVERIFY2(r.status == status, qPrintable(QStringLiteral("status %1, body %2").arg(r.status).arg(QString::fromUtf8(r.body))));
        QVERIFY2(r.content_type.startsWith("application/json"), r.content_type.constData());
        const QJsonObject e = r.json()["error"].toObject();
        QVERIFY2(e["message"].isString() && !e["message"].toString().isEmpty(), r.body.constData());
        QVERIFY(e["type"].isString());
        QVERIFY(e.contains("param"));
        QVERIFY(e.contains("code"));
        if (!param.isEmpty())
            QCOMPARE(e["param"].toString(), param);
        if (!code.isEmpty())
            QCOMPARE(e["code"].toString(), code);
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        QVERIFY(!long_prompt().isEmpty());
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.remove("LONGSCOPE_MODEL");
        env.remove("LONGSCOPE_API_KEY");
        m_server.setProcessEnvironment(env);
        connect(&m_server, &QProcess::readyReadStandardError, this, [this] { m_log += m_server.readAllStandardError(); });
        m_server.start(QStringLiteral(LONGSCOPE_CLI_PATH),
                       {"serve", "--port", "0", "--ctx", QString::number(k_ctx), "--api-key", QString::fromUtf8(k_key),
                        "--max-queue", "2"});
        QVERIFY(m_server.waitForStarted());
        static const QRegularExpression listening(R"(listening on http://127\.0\.0\.1:(\d+))");
        QTRY_VERIFY_WITH_TIMEOUT(listening.match(QString::fromUtf8(m_log)).hasMatch() ||
                                     m_server.state() == QProcess::NotRunning,
                                 30000);
        const auto m = listening.match(QString::fromUtf8(m_log));
        QVERIFY2(m.hasMatch(), m_log.constData());
        m_port = m.captured(1).toInt();
        QVERIFY(m_port > 0);
    }

    void cleanupTestCase()
    {
        if (m_server.state() == QProcess::NotRunning)
            return;
        // SIGTERM: a clean stop, exit status 0.
        m_server.terminate();
        QVERIFY(m_server.waitForFinished(15000));
        m_log += m_server.readAllStandardError();
        QCOMPARE(m_server.exitStatus(), QProcess::NormalExit);
        QCOMPARE(m_server.exitCode(), 0);
        QVERIFY2(m_log.contains("SIGTERM, shutting down"), m_log.constData());
    }

    void health_and_models()
    {
        Reply h = get("/health", {}); // no key needed
        QCOMPARE(h.status, 200);
        QCOMPARE(h.json()["status"].toString(), QString("ok"));

        Reply m = get("/v1/models");
        QCOMPARE(m.status, 200);
        QCOMPARE(m.json()["object"].toString(), QString("list"));
        const QJsonArray data = m.json()["data"].toArray();
        QCOMPARE(data.size(), 1);
        QCOMPARE(data[0].toObject()["id"].toString(), QString("stories260K"));
        QCOMPARE(data[0].toObject()["object"].toString(), QString("model"));
        QCOMPARE(get("/v1/models/stories260K").status, 200);
        verify_error_shape(get("/v1/models/gpt-4"), 404, "model", "model_not_found");
        verify_error_shape(get("/v1/nothing"), 404);
    }

    void port_in_use_is_an_error()
    {
        QProcess second;
        second.start(QStringLiteral(LONGSCOPE_CLI_PATH), {"serve", "--port", QString::number(m_port)});
        QVERIFY(second.waitForFinished(15000));
        QCOMPARE(second.exitCode(), 1);
        QVERIFY(second.readAllStandardError().contains("cannot listen on 127.0.0.1:" + QByteArray::number(m_port)));
        QCOMPARE(get("/health", {}).status, 200);
    }

    void api_key()
    {
        const QByteArray body = to_json({{"prompt", "Once"}, {"max_tokens", 2}});
        verify_error_shape(post("/v1/completions", body, {}), 401, {}, "invalid_api_key");
        verify_error_shape(post("/v1/completions", body, "sk-wrong"), 401, {}, "invalid_api_key");
        verify_error_shape(post("/v1/completions", body, k_key + "x"), 401, {}, "invalid_api_key");
        verify_error_shape(get("/v1/models", "sk-wrong"), 401);
        verify_error_shape(get("/v1/metrics", {}), 401);
        QCOMPARE(post("/v1/completions", body).status, 200);
    }

    void completion_matches_cli()
    {
        const Reply r = post("/v1/completions", QJsonObject{{"prompt", "Once upon a time"},
                                                            {"temperature", 0},
                                                            {"max_tokens", 60},
                                                            {"model", "anything"}});
        QCOMPARE(r.status, 200);
        const QJsonObject o = r.json();
        QVERIFY(o["id"].toString().startsWith("cmpl-"));
        QCOMPARE(o["object"].toString(), QString("text_completion"));
        QCOMPARE(o["model"].toString(), QString("stories260K"));
        QVERIFY(o["created"].toInteger() > 0);
        const QJsonObject choice = o["choices"].toArray().first().toObject();
        QCOMPARE(choice["index"].toInt(), 0);
        QCOMPARE(choice["finish_reason"].toString(), QString("length"));
        QCOMPARE(choice["text"].toString().toUtf8(), cli_greedy("Once upon a time", 60));
        QVERIFY(choice["text"].toString().startsWith(", there was a little girl named Lily."));
        const QJsonObject usage = o["usage"].toObject();
        QCOMPARE(usage["prompt_tokens"].toInt(), 5); // BOS + 4
        QCOMPARE(usage["completion_tokens"].toInt(), 60);
        QCOMPARE(usage["total_tokens"].toInt(), 65);

        // What `curl -d` sends: form-urlencoded, here over 8 KiB (JSON whitespace); still JSON to us.
        const QByteArray padded = to_json({{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 60}}) +
                                  QByteArray(10000, ' ');
        const Reply f = post("/v1/completions", padded, k_key, "application/x-www-form-urlencoded");
        QCOMPARE(f.status, 200);
        QCOMPARE(f.json()["choices"].toArray().first().toObject()["text"].toString(), choice["text"].toString());
    }

    void chat_stream_equals_non_stream()
    {
        const QJsonObject base{
            {"messages", QJsonArray{QJsonObject{{"role", "system"}, {"content", "You tell short stories."}},
                                    QJsonObject{{"role", "user"}, {"content", "Tell me about a cat."}}}},
            {"seed", 1234},
            {"temperature", 0.9},
            {"max_tokens", 48}};
        const Reply whole = post("/v1/chat/completions", base);
        QCOMPARE(whole.status, 200);
        const QJsonObject o = whole.json();
        QVERIFY(o["id"].toString().startsWith("chatcmpl-"));
        QCOMPARE(o["object"].toString(), QString("chat.completion"));
        const QJsonObject choice = o["choices"].toArray().first().toObject();
        QCOMPARE(choice["message"].toObject()["role"].toString(), QString("assistant"));
        const QString text = choice["message"].toObject()["content"].toString();
        QVERIFY(!text.isEmpty());
        const int completion_tokens = o["usage"].toObject()["completion_tokens"].toInt();
        QVERIFY(completion_tokens > 0 && completion_tokens <= 48);
        QCOMPARE(choice["finish_reason"].toString(), QString(completion_tokens == 48 ? "length" : "stop"));

        QJsonObject streamed = base;
        streamed["stream"] = true;
        streamed["stream_options"] = QJsonObject{{"include_usage", true}};
        const Reply s = post("/v1/chat/completions", streamed);
        QCOMPARE(s.status, 200);
        QVERIFY(s.content_type.startsWith("text/event-stream"));
        QVERIFY(s.body.endsWith("data: [DONE]\n\n"));
        const QList<QByteArray> events = sse_payloads(s.body);
        QVERIFY(events.size() >= 4);
        const QJsonObject first = QJsonDocument::fromJson(events.first()).object();
        QCOMPARE(first["object"].toString(), QString("chat.completion.chunk"));
        QCOMPARE(first["choices"].toArray().first().toObject()["delta"].toObject()["role"].toString(),
                 QString("assistant"));
        QString finish;
        QCOMPARE(stream_text(events, &finish), text);
        QCOMPARE(finish, choice["finish_reason"].toString());
        // The usage chunk (include_usage) comes last, with no choices.
        const QJsonObject usage_chunk = QJsonDocument::fromJson(events[events.size() - 2]).object();
        QVERIFY(usage_chunk["choices"].toArray().isEmpty());
        QCOMPARE(usage_chunk["usage"].toObject()["completion_tokens"].toInt(), completion_tokens);
        // Every chunk of one stream carries the same id.
        for (const QByteArray &e : events)
            if (e != "[DONE]")
                QCOMPARE(QJsonDocument::fromJson(e).object()["id"].toString(), first["id"].toString());
    }

    void stop_sequences()
    {
        // The greedy text is ", there was a little girl named Lily. She loved to play outside in the park."
        for (bool stream : {false, true}) {
            QJsonObject body{{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 60},
                             {"stop", QJsonArray{" park", "Lily"}}, {"stream", stream}};
            const Reply r = post("/v1/completions", body);
            QCOMPARE(r.status, 200);
            QString text, finish;
            if (stream) {
                text = stream_text(sse_payloads(r.body), &finish);
            } else {
                const QJsonObject c = r.json()["choices"].toArray().first().toObject();
                text = c["text"].toString();
                finish = c["finish_reason"].toString();
            }
            QCOMPARE(text, QString(", there was a little girl named "));
            QCOMPARE(finish, QString("stop"));
            body["stop"] = " in the";
            const Reply r2 = post("/v1/completions", body);
            const QString text2 = stream ? stream_text(sse_payloads(r2.body))
                                         : r2.json()["choices"].toArray().first().toObject()["text"].toString();
            QCOMPARE(text2, QString(", there was a little girl named Lily. She loved to play outside"));
        }
    }

    // The engine keeps the context of the last request: a prompt it begins with is not
    // evaluated again, and the text is the same as from a fresh context.
    void common_prefix_is_reused()
    {
        const QJsonObject body{{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 20}};
        const Reply first = post("/v1/completions", body);
        QCOMPARE(first.status, 200);
        const Reply again = post("/v1/completions", body);
        QCOMPARE(again.status, 200);
        QCOMPARE(again.json()["choices"].toArray().first().toObject()["text"].toString(),
                 first.json()["choices"].toArray().first().toObject()["text"].toString());
        const QJsonObject last = get("/v1/metrics").json()["last_request"].toObject();
        const int prompt_tokens = again.json()["usage"].toObject()["prompt_tokens"].toInt();
        QCOMPARE(last["prompt_tokens"].toInt(), prompt_tokens);
        QCOMPARE(last["cached_prompt_tokens"].toInt(), prompt_tokens - 1); // the last one is evaluated
    }

    void settings_fields_change_results_as_in_cli()
    {
        const QString prompt = long_prompt();
        auto greedy = [&](QJsonObject extra) {
            extra["prompt"] = prompt;
            extra["temperature"] = 0;
            extra["max_tokens"] = 24;
            const Reply r = post("/v1/completions", extra);
            return r.status == 200 ? r.json()["choices"].toArray().first().toObject()["text"].toString()
                                   : QString("<status %1: %2>").arg(r.status).arg(QString::fromUtf8(r.body));
        };
        const QString plain = greedy({});
        const QString alpha1 = greedy({{"ntk_alpha", 1}});
        const QString alpha8 = greedy({{"ntk_alpha", 8}});
        QCOMPARE(alpha1, plain);
        QVERIFY2(alpha8 != alpha1, qPrintable(alpha8));
        QCOMPARE(plain.toUtf8(), cli_greedy(prompt, 24));
        QCOMPARE(alpha8.toUtf8(), cli_greedy(prompt, 24, {"--alpha", "8"}));
        const QString autoa = greedy({{"ntk_alpha", "auto"}, {"kv_before_rope", true}});
        QCOMPARE(autoa.toUtf8(), cli_greedy(prompt, 24, {"--alpha", "auto", "--kv-before-rope"}));
        // Cache modes and attention kinds change memory, not greedy text.
        QCOMPARE(greedy({{"kv_mode", "vmm"}}), plain);
        QCOMPARE(greedy({{"kv_mode", "concat"}, {"memory_efficient_attention", true}, {"causal_flash", true}}), plain);

        // The metrics show the last request's settings and its ledger: a short prompt in vmm
        // mode commits only part of the cache it reserves.
        const Reply short_vmm = post("/v1/completions", QJsonObject{{"prompt", "Once upon a time"},
                                                                    {"temperature", 0},
                                                                    {"max_tokens", 24},
                                                                    {"kv_mode", "vmm"},
                                                                    {"ntk_alpha", 2}});
        QCOMPARE(short_vmm.status, 200);
        const Reply m = get("/v1/metrics");
        QCOMPARE(m.status, 200);
        const QJsonObject j = m.json();
        const QJsonObject step = j["step"].toObject();
        QCOMPARE(step["settings"].toObject()["kv_mode"].toString(), QString("vmm"));
        QCOMPARE(step["settings"].toObject()["ntk_alpha"].toDouble(), 2.0);
        QCOMPARE(step["ntk_alpha"].toDouble(), 2.0);
        QCOMPARE(step["phase"].toString(), QString("decode"));
        QVERIFY(step["tokens_per_second"].toDouble() > 0);
        QVERIFY(step["memory"].toObject()["weights"].toDouble() > 0);
        QVERIFY(step["memory"].toObject()["kv_resident"].toDouble() > 0);
        QVERIFY(step["memory"].toObject()["kv_resident"].toDouble() < step["memory"].toObject()["kv_reserved"].toDouble());
        QVERIFY(j["memory"].toObject()["peak_total"].toDouble() > 0);
        QCOMPARE(j["last_request"].toObject()["completion_tokens"].toInt(), 24);
        QVERIFY(j["last_request"].toObject()["decode_tokens_per_second"].toDouble() > 0);
        QCOMPARE(j["server"].toObject()["context_limit"].toInt(), k_ctx);
        // Settings do not stick: the next request without fields runs with the defaults.
        QCOMPARE(greedy({}), plain);
        QCOMPARE(get("/v1/metrics").json()["step"].toObject()["settings"].toObject()["kv_mode"].toString(),
                 QString("static"));
    }

    void bad_requests_data()
    {
        QTest::addColumn<QString>("path");
        QTest::addColumn<QByteArray>("body");
        QTest::addColumn<QString>("param");
        const QString chat = "/v1/chat/completions", cmpl = "/v1/completions";
        const QByteArray msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
        auto with = [&](const char *field) { return "{" + msgs + ", " + field + "}"; };
        QTest::newRow("not json") << chat << QByteArray("{\"messages\": [") << QString();
        QTest::newRow("not an object") << chat << QByteArray("[1, 2]") << QString();
        QTest::newRow("empty body") << cmpl << QByteArray("") << QString();
        QTest::newRow("no messages") << chat << QByteArray("{}") << QString("messages");
        QTest::newRow("messages not an array") << chat << QByteArray(R"({"messages": "Hi"})") << QString("messages");
        QTest::newRow("bad role") << chat << QByteArray(R"({"messages": [{"role": "wizard", "content": "Hi"}]})")
                                  << QString("messages[0].role");
        QTest::newRow("content a number") << chat << QByteArray(R"({"messages": [{"role": "user", "content": 5}]})")
                                          << QString("messages[0].content");
        QTest::newRow("temperature 5") << chat << with(R"("temperature": 5)") << QString("temperature");
        QTest::newRow("temperature a string") << chat << with(R"("temperature": "hot")") << QString("temperature");
        QTest::newRow("n 2") << chat << with(R"("n": 2)") << QString("n");
        QTest::newRow("max_tokens 0") << chat << with(R"("max_tokens": 0)") << QString("max_tokens");
        QTest::newRow("max_tokens a string") << chat << with(R"("max_tokens": "ten")") << QString("max_tokens");
        QTest::newRow("top_p 1.5") << chat << with(R"("top_p": 1.5)") << QString("top_p");
        QTest::newRow("stream a string") << chat << with(R"("stream": "yes")") << QString("stream");
        QTest::newRow("five stops") << chat << with(R"("stop": ["a", "b", "c", "d", "e"])") << QString("stop");
        QTest::newRow("unknown kv_mode") << chat << with(R"("kv_mode": "paged")") << QString("kv_mode");
        QTest::newRow("ntk_alpha 0.5") << chat << with(R"("ntk_alpha": 0.5)") << QString("ntk_alpha");
        QTest::newRow("ntk_alpha fast") << chat << with(R"("ntk_alpha": "fast")") << QString("ntk_alpha");
        QTest::newRow("kv_before_rope a string") << chat << with(R"("kv_before_rope": "yes")") << QString("kv_before_rope");
        QTest::newRow("causal_flash a number") << chat << with(R"("causal_flash": 1)") << QString("causal_flash");
        QTest::newRow("unknown field") << chat << with(R"("temprature": 0.5)") << QString("temprature");
        QTest::newRow("tools") << chat << with(R"("tools": [{"type": "function"}])") << QString("tools");
        QTest::newRow("no prompt") << cmpl << QByteArray(R"({"max_tokens": 5})") << QString("prompt");
        QTest::newRow("two prompts") << cmpl << QByteArray(R"({"prompt": ["a", "b"]})") << QString("prompt");
        QTest::newRow("token out of vocabulary") << cmpl << QByteArray(R"({"prompt": [1, 100000]})") << QString("prompt");
        QTest::newRow("deep nesting") << cmpl << QByteArray(R"({"prompt": )") + QByteArray(100000, '[') << QString();
    }
    void bad_requests()
    {
        QFETCH(QString, path);
        QFETCH(QByteArray, body);
        QFETCH(QString, param);
        const Reply r = post(path, body);
        verify_error_shape(r, 400, param);
        QCOMPARE(r.json()["error"].toObject()["type"].toString(), QString("invalid_request_error"));
    }

    void oversized_body()
    {
        const QByteArray big = to_json({{"prompt", QString(2 * 1024 * 1024, 'a')}});
        verify_error_shape(post("/v1/completions", big), 413, {}, "request_too_large");
        QCOMPARE(get("/health").status, 200);
    }

    void context_overflow()
    {
        // Over the context with the default 16 completion tokens...
        const QString huge = long_prompt().repeated(2);
        verify_error_shape(post("/v1/completions", QJsonObject{{"prompt", huge}}), 400, "prompt",
                           "context_length_exceeded");
        // ...and a short chat whose max_tokens does not fit.
        const QJsonObject chat{{"messages", QJsonArray{QJsonObject{{"role", "user"}, {"content", "Hi"}}}},
                               {"max_tokens", k_ctx}};
        verify_error_shape(post("/v1/chat/completions", chat), 400, "messages", "context_length_exceeded");
        QVERIFY(post("/v1/chat/completions", chat).json()["error"].toObject()["message"].toString().contains(
            QString::number(k_ctx)));
    }

    // A slow streamed generation (no KV cache: every step recomputes ~680 tokens, about half a
    // second a token): the client reads one chunk and hangs up; the server must cancel it.
    void early_disconnect_cancels()
    {
        const QJsonObject slow{{"prompt", long_prompt()}, {"max_tokens", 300}, {"kv_mode", "none"},
                               {"temperature", 0}, {"stream", true}};
        QNetworkReply *r = m_nam.post(make_request("/v1/completions", k_key), to_json(slow));
        QByteArray got;
        connect(r, &QNetworkReply::readyRead, this, [&] { got += r->readAll(); });
        QTRY_VERIFY_WITH_TIMEOUT(got.contains("data: {"), 30000);
        r->abort();
        r->deleteLater();

        QElapsedTimer t;
        t.start();
        const Reply next = post("/v1/completions", QJsonObject{{"prompt", "Once upon a time"}, {"temperature", 0},
                                                               {"max_tokens", 20}});
        QCOMPARE(next.status, 200);
        QVERIFY(next.json()["choices"].toArray().first().toObject()["text"].toString().startsWith(", there was"));
        // 300 tokens would take minutes; a cancelled generation frees the engine at once.
        QVERIFY2(t.elapsed() < 10000, qPrintable(QString("next request took %1 ms").arg(t.elapsed())));
        QTRY_VERIFY_WITH_TIMEOUT(m_log.contains("(client went away)"), 5000);
        QCOMPARE(m_server.state(), QProcess::Running);
    }

    // --max-queue 2: with the engine busy and two requests waiting, the next one is a 503.
    void full_queue_is_503()
    {
        const QJsonObject slow{{"prompt", long_prompt()}, {"max_tokens", 300}, {"kv_mode", "none"},
                               {"temperature", 0}, {"stream", true}};
        QNetworkReply *busy = m_nam.post(make_request("/v1/completions", k_key), to_json(slow));
        QByteArray got;
        connect(busy, &QNetworkReply::readyRead, this, [&] { got += busy->readAll(); });
        QTRY_VERIFY_WITH_TIMEOUT(got.contains("data: {"), 30000);

        const QByteArray quick = to_json({{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 5},
                                          {"stream", true}});
        QNetworkReply *waiting[2] = {m_nam.post(make_request("/v1/completions", k_key), quick),
                                     m_nam.post(make_request("/v1/completions", k_key), quick)};
        // A streamed request answers its headers once it is queued.
        for (QNetworkReply *w : waiting)
            QTRY_COMPARE_WITH_TIMEOUT(w->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt(), 200, 10000);

        const Reply rejected = post("/v1/completions", quick);
        verify_error_shape(rejected, 503, {}, "server_busy");

        busy->abort();
        busy->deleteLater();
        for (QNetworkReply *w : waiting) {
            const Reply done = finish(w, 20000);
            QCOMPARE(done.status, 200);
            QCOMPARE(stream_text(sse_payloads(done.body)), QString(", there was a little"));
            QVERIFY(done.body.endsWith("data: [DONE]\n\n"));
        }
    }
};

QTEST_GUILESS_MAIN(TestServe)
#include "tst_serve.moc"
