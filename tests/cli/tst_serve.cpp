// longscope-cli serve end to end: the server started as a user starts it (QProcess, a free
// loopback port), spoken to over real HTTP with QNetworkAccessManager.
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QHostAddress>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QProcess>
#include <QRegularExpression>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <memory>
#include <numeric>
#include <vector>

#include "cli_runner.h"

// Whether this build runs under AddressSanitizer (and the server, built with it, too).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool k_address_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool k_address_sanitizer = true;
#else
constexpr bool k_address_sanitizer = false;
#endif
#else
constexpr bool k_address_sanitizer = false;
#endif
#include "support/test_size.h"

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

// A generation slow enough to still be running when the test acts on it: no KV cache, so
// every one of its 300 steps recomputes the whole prompt. At the reduced size (sanitizers,
// where each step is many times slower anyway) the prompt is 400 characters, about 230 tokens.
QJsonObject slow_generation(bool stream)
{
    return QJsonObject{{"prompt", long_prompt().left(longscope::test::sized(1200, 400))},
                       {"max_tokens", 300},
                       {"kv_mode", "none"},
                       {"temperature", 0},
                       {"stream", stream}};
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

// A response read off a raw connection: the status line's code (0 when none came), the whole
// text, how long it took to arrive, and whether the server closed the connection after it.
struct RawReply {
    int status = 0;
    QByteArray text;
    qint64 ms = 0;
    bool closed = false;
    QByteArray header(const QByteArray &name) const
    {
        for (const QByteArray &line : text.left(text.indexOf("\r\n\r\n")).split('\n'))
            if (line.toLower().startsWith(name.toLower() + ":"))
                return line.mid(name.size() + 1).trimmed();
        return {};
    }
};

// Whether `text` holds a whole response: its head and Content-Length bytes of body.
bool whole_response(const QByteArray &text)
{
    const qsizetype end = text.indexOf("\r\n\r\n");
    if (end < 0)
        return false;
    static const QRegularExpression length(R"((?im)^content-length:\s*(\d+))");
    const auto m = length.match(QString::fromLatin1(text.left(end)));
    return !m.hasMatch() || text.size() - (end + 4) >= m.captured(1).toLongLong();
}

// Sends `bytes` on a fresh loopback connection (as fast as the server reads them) and reads
// until a whole response arrives or the server closes, for at most `timeout_ms`. For what
// QNetworkAccessManager cannot send: hand-made heads, unfinished bodies, floods.
RawReply raw_request(int port, const QByteArray &bytes, int timeout_ms = 5000)
{
    RawReply r;
    QElapsedTimer t;
    t.start();
    QTcpSocket s;
    s.connectToHost(QHostAddress::LocalHost, quint16(port));
    if (!s.waitForConnected(timeout_ms))
        return r;
    s.write(bytes);
    while (t.elapsed() < timeout_ms && !whole_response(r.text)) {
        if (s.bytesToWrite() > 0)
            s.waitForBytesWritten(20);
        if (s.bytesAvailable() > 0 || s.waitForReadyRead(20))
            r.text += s.readAll();
        if (s.state() != QAbstractSocket::ConnectedState) {
            r.text += s.readAll();
            r.closed = true;
            break;
        }
    }
    r.ms = t.elapsed();
    if (r.text.startsWith("HTTP/1."))
        r.status = r.text.mid(9, 3).toInt();
    // A response that says it closes the connection: see that it does.
    if (!r.closed && whole_response(r.text) && r.header("Connection").toLower() == "close")
        r.closed = !s.waitForReadyRead(3000) && s.state() != QAbstractSocket::ConnectedState;
    return r;
}

// The peak resident memory of a process (VmHWM), in bytes; 0 where /proc does not tell.
qint64 peak_rss(qint64 pid)
{
    QFile f(QStringLiteral("/proc/%1/status").arg(pid));
    if (!f.open(QIODevice::ReadOnly))
        return 0;
    for (const QByteArray &line : f.readAll().split('\n'))
        if (line.startsWith("VmHWM:"))
            return line.mid(6).trimmed().split(' ').first().toLongLong() * 1024;
    return 0;
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

    // After a client of slow_generation left: the engine was freed at once, the abandoned
    // generation stopped short of its 300 tokens (the server's log line since log_from gives
    // its count) instead of running to the end before the next request, and the server still
    // runs. Counted, not timed: a wall-clock bound on the next request failed under TSan on a
    // slower CPU while the cancellation itself worked.
    void verify_abandoned_generation_stopped(qsizetype log_from)
    {
        QTRY_VERIFY_WITH_TIMEOUT(m_log.mid(log_from).contains("(client went away)"), 5000);
        static const QRegularExpression gone(R"((\d+) completion tokens[^\n]*\(client went away\))");
        const QRegularExpressionMatch match = gone.match(QString::fromUtf8(m_log.mid(log_from)));
        QVERIFY2(match.hasMatch(), m_log.mid(log_from).constData());
        QVERIFY2(match.captured(1).toInt() < 300, qPrintable(match.captured(0)));
        QCOMPARE(m_server.state(), QProcess::Running);
    }

    Reply finish(QNetworkReply *r, int timeout_ms = 180000)
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

    // A request head as a client sends it; `fields` are extra "Name: value\r\n" lines.
    QByteArray head(const QByteArray &method, const QByteArray &path, const QByteArray &fields = {},
                    bool with_host = true) const
    {
        QByteArray h = method + " " + path + " HTTP/1.1\r\n";
        if (with_host)
            h += "Host: 127.0.0.1:" + QByteArray::number(m_port) + "\r\n";
        return h + "Authorization: Bearer " + k_key + "\r\n" + fields;
    }
    QByteArray json_post(const QByteArray &body, const QByteArray &path = "/v1/completions") const
    {
        return head("POST", path,
                    "Content-Type: application/json\r\nContent-Length: " + QByteArray::number(body.size()) +
                        "\r\n\r\n") +
               body;
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

    // An error answered on a raw connection has OpenAI's shape with `code`.
    static void verify_raw_error(const RawReply &r, const QString &code)
    {
        const QJsonObject e =
            QJsonDocument::fromJson(r.text.mid(r.text.indexOf("\r\n\r\n") + 4)).object()["error"].toObject();
        QVERIFY2(e["message"].isString() && !e["message"].toString().isEmpty(), r.text.constData());
        QCOMPARE(e["code"].toString(), code);
    }

    // Starts `longscope-cli serve` on a free loopback port with `args`; its stderr collects in
    // `log`. Returns the port, 0 when it did not start.
    int start_server(QProcess &server, QByteArray &log, const QStringList &args)
    {
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.remove("LONGSCOPE_MODEL");
        env.remove("LONGSCOPE_API_KEY");
        server.setProcessEnvironment(env);
        connect(&server, &QProcess::readyReadStandardError, this, [&server, &log] { log += server.readAllStandardError(); });
        server.start(QStringLiteral(LONGSCOPE_CLI_PATH), QStringList{"serve", "--port", "0"} + args);
        if (!server.waitForStarted())
            return 0;
        static const QRegularExpression listening(R"(listening on http://127\.0\.0\.1:(\d+))");
        QElapsedTimer t;
        t.start();
        while (!listening.match(QString::fromUtf8(log)).hasMatch() && server.state() != QProcess::NotRunning &&
               t.elapsed() < 30000)
            QTest::qWait(20);
        const auto m = listening.match(QString::fromUtf8(log));
        return m.hasMatch() ? m.captured(1).toInt() : 0;
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        QVERIFY(!long_prompt().isEmpty());
        m_port = start_server(m_server, m_log,
                              {"--ctx", QString::number(k_ctx), "--api-key", QString::fromUtf8(k_key), "--max-queue", "2"});
        QVERIFY2(m_port > 0, m_log.constData());
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

    // /tokenize in llama-server's and vLLM's shapes, /detokenize back; the ids as a
    // /v1/completions prompt (a list of ints, no BOS added) give what the text gives.
    void tokenize_and_detokenize()
    {
        const Reply llama = post("/tokenize", QJsonObject{{"content", "Once upon a time"}});
        QCOMPARE(llama.status, 200);
        const QJsonArray ids = llama.json()["tokens"].toArray();
        QCOMPARE(ids.size(), 4); // as usage.prompt_tokens counts it: BOS + 4
        QCOMPARE(llama.json()["count"].toInt(), 4);
        QCOMPARE(llama.json()["max_model_len"].toInt(), k_ctx);
        const Reply vllm = post("/tokenize", QJsonObject{{"model", "stories260K"}, {"prompt", "Once upon a time"}});
        QCOMPARE(vllm.status, 200);
        const QJsonArray with_bos = vllm.json()["tokens"].toArray(); // vLLM adds special tokens by default
        QCOMPARE(with_bos.size(), 5);
        QCOMPARE(with_bos[0].toInt(), 1); // the model's BOS
        QCOMPARE(with_bos.last().toInt(), ids.last().toInt());
        const Reply empty = post("/tokenize", QJsonObject{{"content", ""}, {"add_special", true}});
        QCOMPARE(empty.json()["tokens"].toArray(), (QJsonArray{1}));

        const Reply back = post("/detokenize", QJsonObject{{"tokens", ids}});
        QCOMPARE(back.status, 200);
        QCOMPARE(back.json()["content"].toString(), QString("Once upon a time"));
        QCOMPARE(back.json()["prompt"].toString(), QString("Once upon a time"));

        auto greedy = [&](const QJsonValue &prompt) {
            const Reply r = post("/v1/completions",
                                 QJsonObject{{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 20}});
            return QPair<int, QString>(r.json()["usage"].toObject()["prompt_tokens"].toInt(),
                                       r.json()["choices"].toArray().first().toObject()["text"].toString());
        };
        const auto from_text = greedy("Once upon a time");
        QCOMPARE(greedy(with_bos), from_text);
        QVERIFY(!from_text.second.isEmpty());

        verify_error_shape(post("/tokenize", QJsonObject{{"text", "x"}}), 400, "prompt");
        verify_error_shape(post("/tokenize", QJsonObject{{"content", 3}}), 400, "content");
        verify_error_shape(post("/tokenize", QJsonObject{{"content", "x"}, {"add_special", "yes"}}), 400, "add_special");
        verify_error_shape(post("/tokenize", QJsonObject{{"model", "gpt-4"}, {"prompt", "x"}}), 404, "model",
                           "model_not_found");
        verify_error_shape(post("/detokenize", QJsonObject{{"tokens", QJsonArray{1, 100000}}}), 400, "tokens");
        verify_error_shape(post("/detokenize", QJsonObject{{"tokens", QJsonArray{-1}}}), 400, "tokens[0]");
        verify_error_shape(post("/detokenize", QJsonObject{}), 400, "tokens");
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

    // --chat-template: the messages go to that template; what it refuses is a 400 with its
    // words, and the prompt is jinja2's rendering, tokenized as the CLI tokenizes it.
    void chat_template_over_http()
    {
        const QString tmpl = QStringLiteral(LONGSCOPE_TEST_DATA "/templates/corpus/llama.cpp-templates__google-gemma-2-2b-it.jinja");
        QProcess second;
        QByteArray log;
        const int port = start_server(second, log, {"--chat-template", tmpl, "--api-key", QString::fromUtf8(k_key)});
        QVERIFY2(port > 0, log.constData());
        const int main_port = m_port;
        m_port = port;
        auto restore = qScopeGuard([&] {
            m_port = main_port;
            second.terminate();
            second.waitForFinished(15000);
        });
        // Gemma 2's template raises on a system message.
        const QByteArray with_system =
            R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "max_tokens": 2})";
        const Reply refused = post("/v1/chat/completions", with_system);
        verify_error_shape(refused, 400, "messages", "template_error");
        QVERIFY2(refused.json()["error"].toObject()["message"].toString().contains("System role not supported"),
                 refused.body.constData());

        // Accepted: the prompt counted is jinja2's text for the "single" conversation.
        const Reply ok = post("/v1/chat/completions",
                              QByteArray(R"({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2, "temperature": 0})"));
        QCOMPARE(ok.status, 200);
        QString want;
        QFile expected(QStringLiteral(LONGSCOPE_TEST_DATA "/templates/expected.json"));
        QVERIFY(expected.open(QIODevice::ReadOnly));
        for (const QJsonValue &e : QJsonDocument::fromJson(expected.readAll()).array())
            if (e["template"].toString().endsWith("google-gemma-2-2b-it.jinja") && e["conversation"] == "single")
                want = e["output"].toString();
        QVERIFY(!want.isEmpty());
        const QString file = m_dir.filePath(QStringLiteral("gemma-single.txt"));
        QFile f(file);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(want.toUtf8());
        f.close();
        const auto tokens = longscope::test::run_cli({"tokenize", "--special", "-f", file});
        QCOMPARE(tokens.code, 0);
        const int counted = int(tokens.out.trimmed().split(' ').size());
        QCOMPARE(ok.json()["usage"].toObject()["prompt_tokens"].toInt(), counted);
        // tools are taken (this template writes none); the reply has no tool calls to parse.
        const Reply tools = post("/v1/chat/completions",
                                 QByteArray(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                                    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})"));
        QCOMPARE(tools.status, 200);
        QCOMPARE(tools.json()["choices"].toArray()[0].toObject()["finish_reason"].toString(), QString("length"));
    }

    void chat_template_file_checked_at_start()
    {
        const QString bad = m_dir.filePath(QStringLiteral("bad.jinja"));
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{% for m in messages %}{{ m.content | no_such_filter }}{% endfor %}");
        f.close();
        QProcess p;
        p.start(QStringLiteral(LONGSCOPE_CLI_PATH), {"serve", "--port", "0", "--chat-template", bad});
        QVERIFY(p.waitForFinished(30000));
        QCOMPARE(p.exitCode(), 1);
        const QByteArray err = p.readAllStandardError();
        QVERIFY2(err.contains("--chat-template " + bad.toUtf8()) && err.contains("no_such_filter"), err.constData());
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

        // A media type with parameters is still JSON; a body over 8 KiB (JSON whitespace) too.
        const QByteArray padded = to_json({{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 60}}) +
                                  QByteArray(10000, ' ');
        const Reply f = post("/v1/completions", padded, k_key, "Application/JSON; charset=utf-8");
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
        // About 670 tokens, reduced (under a sanitizer) about 230: twelve generations, four of
        // them by the CLI.
        const QString prompt = long_prompt().left(longscope::test::sized(1200, 400));
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
        // KV types per request, as the CLI flags give them; a quantized type on this model's
        // 8-wide heads is refused naming the head size.
        QCOMPARE(greedy({{"kv_type_k", "f16"}, {"kv_type_v", "f16"}}).toUtf8(),
                 cli_greedy(prompt, 24, {"--kv-type-k", "f16", "--kv-type-v", "f16"}));
        const QString refused = greedy({{"kv_type_k", "q8_0"}});
        QVERIFY2(refused.startsWith("<status 400") && refused.contains("head size is 8"), qPrintable(refused));

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
        QTest::newRow("unknown kv_type_k") << chat << with(R"("kv_type_k": "q5_0")") << QString("kv_type_k");
        QTest::newRow("kv_type_v a number") << chat << with(R"("kv_type_v": 8)") << QString("kv_type_v");
        QTest::newRow("ntk_alpha 0.5") << chat << with(R"("ntk_alpha": 0.5)") << QString("ntk_alpha");
        QTest::newRow("ntk_alpha fast") << chat << with(R"("ntk_alpha": "fast")") << QString("ntk_alpha");
        QTest::newRow("kv_before_rope a string") << chat << with(R"("kv_before_rope": "yes")") << QString("kv_before_rope");
        QTest::newRow("causal_flash a number") << chat << with(R"("causal_flash": 1)") << QString("causal_flash");
        QTest::newRow("unknown field") << chat << with(R"("temprature": 0.5)") << QString("temprature");
        QTest::newRow("tool without function") << chat << with(R"("tools": [{"type": "function"}])") << QString("tools[0]");
        QTest::newRow("tool_choice required") << chat << with(R"("tool_choice": "required")") << QString("tool_choice");
        QTest::newRow("no prompt") << cmpl << QByteArray(R"({"max_tokens": 5})") << QString("prompt");
        QTest::newRow("two prompts") << cmpl << QByteArray(R"({"prompt": ["a", "b"]})") << QString("prompt");
        QTest::newRow("token out of vocabulary") << cmpl << QByteArray(R"({"prompt": [1, 100000]})") << QString("prompt");
        // Numbers nlohmann-json cannot hold, values of the wrong type where it converts.
        QTest::newRow("temperature 1e999") << chat << with(R"("temperature": 1e999)") << QString("temperature");
        QTest::newRow("top_p -1e999") << chat << with(R"("top_p": -1e999)") << QString("top_p");
        QTest::newRow("max_tokens 1e999") << chat << with(R"("max_tokens": 1e999)") << QString("max_tokens");
        QTest::newRow("seed 1e400") << chat << with(R"("seed": 1e400)") << QString("seed");
        QTest::newRow("ntk_alpha 1e999") << chat << with(R"("ntk_alpha": 1e999)") << QString("ntk_alpha");
        QTest::newRow("response_format type a number") << chat << with(R"("response_format": {"type": 5})")
                                                       << QString("response_format");
        QTest::newRow("content part type a number")
            << chat << QByteArray(R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "Hi"}]}]})")
            << QString("messages[0].content[0]");
        QTest::newRow("top_k 1e30") << chat << with(R"("top_k": 1e30)") << QString("top_k");
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

    // A slow streamed generation (slow_generation: every step recomputes the whole prompt):
    // the client reads one chunk and hangs up; the server must cancel it.
    void early_disconnect_cancels()
    {
        const qsizetype log_from = m_log.size();
        const QJsonObject slow = slow_generation(true);
        QNetworkReply *r = m_nam.post(make_request("/v1/completions", k_key), to_json(slow));
        QByteArray got;
        connect(r, &QNetworkReply::readyRead, this, [&] { got += r->readAll(); });
        QTRY_VERIFY_WITH_TIMEOUT(got.contains("data: {"), 120000);
        r->abort();
        r->deleteLater();

        QElapsedTimer t;
        t.start();
        const Reply next = post("/v1/completions", QJsonObject{{"prompt", "Once upon a time"}, {"temperature", 0},
                                                               {"max_tokens", 20}});
        QCOMPARE(next.status, 200);
        QVERIFY(next.json()["choices"].toArray().first().toObject()["text"].toString().startsWith(", there was"));
        qInfo("the next request took %lld ms", qlonglong(t.elapsed()));
        verify_abandoned_generation_stopped(log_from);
    }

    // --max-queue 2: with the engine busy and two requests waiting, the next one is a 503.
    void full_queue_is_503()
    {
        const QJsonObject slow = slow_generation(true);
        QNetworkReply *busy = m_nam.post(make_request("/v1/completions", k_key), to_json(slow));
        QByteArray got;
        connect(busy, &QNetworkReply::readyRead, this, [&] { got += busy->readAll(); });
        QTRY_VERIFY_WITH_TIMEOUT(got.contains("data: {"), 120000);

        const QByteArray quick = to_json({{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 5},
                                          {"stream", true}});
        QNetworkReply *waiting[2] = {m_nam.post(make_request("/v1/completions", k_key), quick),
                                     m_nam.post(make_request("/v1/completions", k_key), quick)};
        // A streamed request answers its headers once it is queued.
        for (QNetworkReply *w : waiting)
            QTRY_COMPARE_WITH_TIMEOUT(w->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt(), 200, 60000);

        const Reply rejected = post("/v1/completions", quick);
        verify_error_shape(rejected, 503, {}, "server_busy");

        busy->abort();
        busy->deleteLater();
        for (QNetworkReply *w : waiting) {
            const Reply done = finish(w, 180000);
            QCOMPARE(done.status, 200);
            QCOMPARE(stream_text(sse_payloads(done.body)), QString(", there was a little"));
            QVERIFY(done.body.endsWith("data: [DONE]\n\n"));
        }
    }

    // The body limit holds for every transfer encoding while the body arrives: a chunked body
    // past --max-body (1 MiB) is a 413 as soon as the limit is passed, without waiting for
    // the rest (which never comes here: no last chunk).
    void chunked_body_over_the_limit()
    {
        const QByteArray ct = "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        QByteArray req = head("POST", "/v1/completions", ct);
        const QByteArray chunk = QByteArray::number(64 * 1024, 16) + "\r\n" + QByteArray(64 * 1024, ' ') + "\r\n";
        for (int i = 0; i < 48; ++i) // 3 MiB
            req += chunk;
        const RawReply r = raw_request(m_port, req, 8000);
        QVERIFY2(r.status == 413, r.text.left(400).constData());
        QVERIFY(r.text.contains("request_too_large"));
        QVERIFY(r.closed);

        // A compressed body counts decoded: 10 KiB of deflate that decode to 10 MiB.
        const QByteArray bomb = qCompress(to_json({{"prompt", QString(10 << 20, ' ')}}), 9).mid(4); // zlib stream
        QVERIFY(bomb.size() < (1 << 20));
        const RawReply inflated = raw_request(
            m_port, head("POST", "/v1/completions",
                         "Content-Type: application/json\r\nContent-Encoding: deflate\r\nContent-Length: " +
                             QByteArray::number(bomb.size()) + "\r\n\r\n") +
                        bomb);
        QVERIFY2(inflated.status == 413, inflated.text.left(400).constData());

        // A chunked body within the limit is read as any other.
        const QByteArray body = to_json({{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 5}});
        const QByteArray half = body.left(10), rest = body.mid(10);
        const RawReply ok = raw_request(m_port, head("POST", "/v1/completions", ct) + QByteArray::number(half.size(), 16) +
                                                    "\r\n" + half + "\r\n" + QByteArray::number(rest.size(), 16) +
                                                    "\r\n" + rest + "\r\n0\r\n\r\n");
        QVERIFY2(ok.status == 200, ok.text.constData());
        QVERIFY(ok.text.contains(", there was a little"));
    }

    // Header count and size are bounded while the head arrives: 431, the connection closed.
    void header_limits()
    {
        QByteArray many = head("GET", "/health"); // fields without end
        for (int i = 0; i < 5000; ++i)
            many += "X-Fill-" + QByteArray::number(i) + ": " + QByteArray(20, 'a') + "\r\n";
        RawReply r = raw_request(m_port, many);
        QVERIFY2(r.status == 431, r.text.left(400).constData());
        QVERIFY(r.closed);
        verify_raw_error(r, "request_header_fields_too_large");

        r = raw_request(m_port, head("GET", "/health") + "X-Long: " + QByteArray(1 << 20, 'a')); // a line without end
        QVERIFY2(r.status == 431, r.text.left(400).constData());
        QVERIFY(r.closed);

        QByteArray counted = head("GET", "/health"); // a head that ends, with too many fields
        for (int i = 0; i < 150; ++i)
            counted += "X-" + QByteArray::number(i) + ": 1\r\n";
        r = raw_request(m_port, counted + "\r\n");
        QVERIFY2(r.status == 431, r.text.left(400).constData());

        QCOMPARE(raw_request(m_port, head("GET", "/health", "\r\n")).status, 200);
    }

    // A POST's body framing is checked before anything is read: no length is a 411 and a
    // malformed one a 400, at once (not when a read times out).
    void body_framing()
    {
        const QByteArray body = to_json({{"prompt", "Once"}, {"max_tokens", 2}});
        const QByteArray ct = "Content-Type: application/json\r\n";
        auto answer = [&](const QByteArray &fields) {
            return raw_request(m_port, head("POST", "/v1/completions", ct + fields + "\r\n") + body, 3000);
        };
        RawReply r = answer({});
        QVERIFY2(r.status == 411, r.text.constData());
        QVERIFY(r.ms < 2000);
        for (const QByteArray &bad : {QByteArray("Content-Length: -5\r\n"), QByteArray("Content-Length: 12abc\r\n"),
                                      QByteArray("Content-Length: 5\r\nContent-Length: 6\r\n"),
                                      QByteArray("Content-Length: 99999999999999999999999\r\n"),
                                      QByteArray("Content-Length: 20\r\nTransfer-Encoding: chunked\r\n")}) {
            r = answer(bad);
            QVERIFY2(r.status == 400, (bad + r.text).constData());
            QVERIFY(r.ms < 2000);
            QVERIFY(r.closed);
        }
        r = answer("Transfer-Encoding: gzip, chunked\r\n");
        QVERIFY2(r.status == 501, r.text.constData());
        r = answer("Content-Length: 2000000\r\n"); // over --max-body: refused before it is sent
        QVERIFY2(r.status == 413, r.text.constData());
        QVERIFY(r.ms < 2000);
        // With "Expect: 100-continue" the refusal comes instead of "100 Continue".
        r = raw_request(m_port, head("POST", "/v1/completions", ct + "Expect: 100-continue\r\nContent-Length: 2000000\r\n\r\n"));
        QVERIFY2(r.status == 413, r.text.constData());
        r = raw_request(m_port, head("POST", "/v1/completions", "Content-Type: text/plain\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
        QVERIFY2(r.status == 415, r.text.constData());
        // POST to a path that takes no body: answered without reading one.
        r = raw_request(m_port, head("POST", "/health", ct + "Content-Length: 100000000\r\n\r\n"), 3000);
        QVERIFY2(r.status == 404, r.text.constData());
        QVERIFY(r.ms < 2000);
        QCOMPARE(raw_request(m_port, json_post(body)).status, 200);
    }

    // JSON bodies only, so that a browser must ask (a preflight) before it posts one.
    void json_content_type_required()
    {
        const QByteArray body = to_json({{"prompt", "Once"}, {"max_tokens", 2}});
        for (const QByteArray &type : {QByteArray("text/plain"), QByteArray("application/x-www-form-urlencoded"),
                                       QByteArray("multipart/form-data; boundary=x"), QByteArray("application/jsonx")})
            verify_error_shape(post("/v1/completions", body, k_key, type), 415, {}, "unsupported_media_type");
        const RawReply none = raw_request(
            m_port, head("POST", "/v1/completions", "Content-Length: " + QByteArray::number(body.size()) + "\r\n\r\n") +
                        body);
        QVERIFY2(none.status == 415, none.text.constData());
    }

    // The Host header must name this server: the bound address, or localhost names when bound
    // to loopback (a page of another site, its name rebound to 127.0.0.1, cannot read it).
    void host_checked()
    {
        const QByteArray port = QByteArray::number(m_port);
        auto status = [&](const QByteArray &fields) {
            return raw_request(m_port, "GET /health HTTP/1.1\r\n" + fields + "\r\n").status;
        };
        QCOMPARE(status("Host: 127.0.0.1:" + port + "\r\n"), 200);
        QCOMPARE(status("Host: localhost:" + port + "\r\n"), 200);
        QCOMPARE(status("Host: LocalHost\r\n"), 200);
        QCOMPARE(status("Host: [::1]:" + port + "\r\n"), 200);
        QCOMPARE(status("Host: evil.example:" + port + "\r\n"), 403);
        QCOMPARE(status("Host: 127.0.0.1.evil.example\r\n"), 403);
        QCOMPARE(status("Host: localhost.evil.example\r\n"), 403);
        QCOMPARE(status("Host: 127.0.0.1:" + port + "\r\nHost: evil.example\r\n"), 400);
        QCOMPARE(status({}), 400); // HTTP/1.1 requires one, HTTP/1.0 does not (browsers send one)
        QCOMPARE(raw_request(m_port, "GET /health HTTP/1.0\r\n\r\n").status, 200);
        QCOMPARE(raw_request(m_port, "GET /health HTTP/1.0\r\nHost: evil.example\r\n\r\n").status, 403);
        const RawReply r = raw_request(m_port, "GET /v1/models HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " +
                                                   k_key + "\r\n\r\n");
        QCOMPARE(r.status, 403);
        verify_raw_error(r, "host_not_allowed");
        const RawReply p = raw_request(m_port, "POST /v1/completions HTTP/1.1\r\nHost: evil.example\r\nAuthorization: "
                                               "Bearer " + k_key + "\r\nContent-Type: application/json\r\n"
                                               "Content-Length: 2\r\n\r\n{}");
        QCOMPARE(p.status, 403);
    }

    // With --overflow shift a prompt longer than the context is taken whole: the session
    // shifts its context instead of the 400 context_overflow gives.
    void shift_overflow_takes_long_prompts()
    {
        QProcess server;
        QByteArray log;
        // Reduced size: a context of 256 and the 670-token prompt, instead of 1024 and twice it.
        const int ctx = longscope::test::sized(k_ctx, 256);
        const int port = start_server(server, log, {"--ctx", QString::number(ctx), "--overflow", "shift"});
        QVERIFY2(port > 0, log.constData());
        const QByteArray body = to_json(QJsonObject{
            {"prompt", long_prompt().repeated(longscope::test::sized(2, 1))}, {"max_tokens", 8}, {"temperature", 0}});
        const RawReply r = raw_request(port, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                             "Content-Type: application/json\r\nContent-Length: " +
                                                 QByteArray::number(body.size()) + "\r\n\r\n" + body,
                                       240000);
        QVERIFY2(r.status == 200, (r.text + log).constData());
        const QJsonObject usage =
            QJsonDocument::fromJson(r.text.mid(r.text.indexOf("\r\n\r\n") + 4)).object()["usage"].toObject();
        QVERIFY2(usage["prompt_tokens"].toInt() > ctx, r.text.constData());
        QVERIFY(usage["completion_tokens"].toInt() > 0);
        server.terminate();
        QVERIFY(server.waitForFinished(15000));
    }

    // --allow-host names further Host values (a reverse proxy's name); the others stay refused.
    void allow_host()
    {
        QProcess server;
        QByteArray log;
        const int port = start_server(server, log, {"--allow-host", "example.test", "--allow-host", "Other.Test"});
        QVERIFY2(port > 0, log.constData());
        auto status = [&](const QByteArray &host) {
            return raw_request(port, "GET /health HTTP/1.1\r\nHost: " + host + "\r\n\r\n").status;
        };
        QCOMPARE(status("example.test:8443"), 200);
        QCOMPARE(status("other.test"), 200);
        QCOMPARE(status("127.0.0.1"), 200);
        QCOMPARE(status("evil.example"), 403);
        QCOMPARE(status("sub.example.test"), 403);
        server.terminate();
        QVERIFY(server.waitForFinished(15000));
    }

    // Connections beyond the workers and as many waiting are answered 503 at once; idle ones
    // holding the workers are dropped while others wait, so the server recovers by itself.
    void connection_cap()
    {
        QProcess server;
        QByteArray log;
        const int port = start_server(server, log, {"--max-connections", "3", "--max-queue", "1"});
        QVERIFY2(port > 0, log.constData());
        std::vector<std::unique_ptr<QTcpSocket>> silent;
        for (int i = 0; i < 6; ++i) { // three served, three waiting: none sends anything
            silent.push_back(std::make_unique<QTcpSocket>());
            silent.back()->connectToHost(QHostAddress::LocalHost, quint16(port));
            QVERIFY(silent.back()->waitForConnected(2000));
        }
        QTest::qWait(200);
        const RawReply refused = raw_request(port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        QVERIFY2(refused.status == 503, (refused.text + log).constData());
        QCOMPARE(refused.header("Retry-After"), QByteArray("1"));
        verify_raw_error(refused, "server_busy");
        QVERIFY(refused.ms < 1000);
        QTRY_COMPARE_WITH_TIMEOUT(raw_request(port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").status, 200,
                                  5000);
        server.terminate();
        QVERIFY(server.waitForFinished(15000));
    }

    // A non-streamed request whose client leaves is cancelled like a streamed one.
    void non_streaming_client_leaving_cancels()
    {
        const qsizetype log_from = m_log.size();
        const QJsonObject slow = slow_generation(false);
        QNetworkReply *r = m_nam.post(make_request("/v1/completions", k_key), to_json(slow));
        QTRY_VERIFY_WITH_TIMEOUT(get("/v1/metrics").json()["server"].toObject()["busy"].toBool(), 120000);
        r->abort();
        r->deleteLater();

        QElapsedTimer t;
        t.start();
        const Reply next = post("/v1/completions", QJsonObject{{"prompt", "Once upon a time"}, {"temperature", 0},
                                                               {"max_tokens", 20}});
        QCOMPARE(next.status, 200);
        qInfo("the next request took %lld ms", qlonglong(t.elapsed()));
        verify_abandoned_generation_stopped(log_from);
    }

    // More slow clients than the server has workers (16), each sending a byte at a time:
    // /health still answers at once.
    void slow_clients_do_not_starve_health()
    {
        std::vector<std::unique_ptr<QTcpSocket>> slow;
        for (int i = 0; i < 20; ++i) {
            slow.push_back(std::make_unique<QTcpSocket>());
            slow.back()->connectToHost(QHostAddress::LocalHost, quint16(m_port));
            QVERIFY(slow.back()->waitForConnected(2000));
            slow.back()->write("GET /health HTTP/1.1\r\nX-Slow: ");
        }
        QTimer trickle;
        connect(&trickle, &QTimer::timeout, this, [&] {
            for (auto &s : slow)
                if (s->state() == QAbstractSocket::ConnectedState)
                    s->write("a");
        });
        trickle.start(300);
        QTest::qWait(1500); // every worker holds a slow client by now
        QElapsedTimer t;
        t.start();
        QNetworkAccessManager fresh; // a new connection, not one a worker already holds
        const Reply h = finish(fresh.get(make_request("/health", {})), 10000);
        QCOMPARE(h.status, 200);
        QVERIFY2(t.elapsed() < 3000, qPrintable(QString("/health took %1 ms").arg(t.elapsed())));
    }

    // The load test, bounded (loopback, fixed counts, 3 seconds): 24 slow clients (more than
    // the 16 workers; each reconnects when dropped), one client sending header fields without
    // end and one sending a chunked body without end (each also reconnecting). /health, asked
    // six times meanwhile, answers each time within 3 s; the server's peak memory grows by
    // less than 32 MiB (the floods send up to 30 MiB each); a completion still works after.
    void load_health_answers()
    {
        struct Client {
            std::unique_ptr<QTcpSocket> socket = std::make_unique<QTcpSocket>();
            QByteArray opening, feed;
            int connects = 0;
        };
        std::vector<Client> clients(26);
        QByteArray fields;
        while (fields.size() < (1 << 20))
            fields += "X-Fill: aaaaaaaaaaaaaaaa\r\n";
        const QByteArray chunk = QByteArray::number(1 << 20, 16) + "\r\n" + QByteArray(1 << 20, ' ') + "\r\n";
        for (size_t i = 0; i < clients.size(); ++i) {
            Client &c = clients[i];
            if (i == 0) {
                c.opening = head("GET", "/health");
                c.feed = fields;
            } else if (i == 1) {
                c.opening = head("POST", "/v1/completions",
                                 "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
                c.feed = chunk;
            } else {
                c.opening = "GET /health HTTP/1.1\r\nX-Slow: ";
                c.feed = "a";
            }
        }
        bool running = true;
        auto connect_client = [&](Client &c) {
            c.socket->abort();
            c.socket->connectToHost(QHostAddress::LocalHost, quint16(m_port));
            ++c.connects;
        };
        // The context of every connection and queued reconnect below. Declared after what they
        // use and destroyed before it (on every way out of this function), it drops them
        // first: the sockets, destroyed last, emit `disconnected` as they go, and a reconnect
        // still queued would run in a later test.
        QObject scope;
        for (Client &c : clients) {
            Client *cp = &c;
            connect(c.socket.get(), &QTcpSocket::connected, &scope, [cp] { cp->socket->write(cp->opening); });
            connect(c.socket.get(), &QTcpSocket::disconnected, &scope, [&scope, cp, &running, &connect_client] {
                if (running)
                    QTimer::singleShot(0, &scope, [cp, &connect_client] { connect_client(*cp); });
            });
            connect_client(c);
        }
        QTimer feed;
        connect(&feed, &QTimer::timeout, this, [&] {
            for (Client &c : clients)
                if (c.socket->state() == QAbstractSocket::ConnectedState && c.socket->bytesToWrite() < (4 << 20))
                    c.socket->write(c.feed);
        });
        feed.start(100);

        const qint64 pid = m_server.processId();
        const qint64 peak_before = peak_rss(pid);
        QTest::qWait(500);
        qint64 slowest = 0;
        for (int i = 0; i < 6; ++i) {
            QElapsedTimer t;
            t.start();
            QNetworkAccessManager fresh; // a new connection, not one a worker already holds
            const Reply h = finish(fresh.get(make_request("/health", {})), 10000);
            slowest = std::max(slowest, t.elapsed());
            QVERIFY2(h.status == 200, qPrintable(QString("/health %1: status %2 after %3 ms").arg(i).arg(h.status).arg(t.elapsed())));
            QTest::qWait(250);
        }
        running = false;
        feed.stop();
        const qint64 peak_after = peak_rss(pid);
        qInfo("load: slowest /health %lld ms; connections: header flood %d, chunked flood %d, slow clients %d; "
              "server peak RSS %lld -> %lld KiB",
              slowest, clients[0].connects, clients[1].connects,
              int(std::accumulate(clients.begin() + 2, clients.end(), 0, [](int n, const Client &c) { return n + c.connects; })),
              peak_before / 1024, peak_after / 1024);
        for (Client &c : clients)
            c.socket->abort();
        QVERIFY2(slowest < 3000, qPrintable(QString("/health took %1 ms").arg(slowest)));
        QVERIFY(clients[0].connects > 1); // the floods were cut off (and came back)
        QVERIFY(clients[1].connects > 1);
        // Under AddressSanitizer every freed block waits in its quarantine (256 MiB by default)
        // before it is reused, so the peak RSS counts the floods' churn of buffers, not what the
        // server holds (33 MB there against 0.1 MB in Release); the bound holds in the other
        // builds (the Release suite in CI).
        if (peak_before > 0 && !k_address_sanitizer)
            QVERIFY2(peak_after - peak_before < (32 << 20),
                     qPrintable(QString("peak RSS %1 -> %2 KiB").arg(peak_before / 1024).arg(peak_after / 1024)));
        const Reply after = post("/v1/completions", QJsonObject{{"prompt", "Once upon a time"}, {"temperature", 0},
                                                                {"max_tokens", 5}});
        QCOMPARE(after.status, 200);
    }
};

QTEST_GUILESS_MAIN(TestServe)
#include "tst_serve.moc"
