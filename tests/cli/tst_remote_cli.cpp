// `longscope-cli generate --remote` and `perplexity --remote` against a real `longscope-cli
// serve` on a free loopback port: what they print is what the same model gives locally
// (greedy text, perplexity within rounding), streaming, stop sequences, chat, and every
// failure as one clear line.
#include <QFile>
#include <QJsonArray>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "cli_runner.h"
#include "serve_process.h"

using longscope::test::CliRun;
using longscope::test::http;
using longscope::test::run_cli;

namespace {

const QByteArray k_own_key = "sk-remote-test";
const int k_ctx = 512;

QJsonObject json_of(const QByteArray &out) { return QJsonDocument::fromJson(out.trimmed()).object(); }

} // namespace

class TestRemoteCli : public QObject {
    Q_OBJECT

    longscope::test::ServeProcess m_server;
    QByteArray k_key = m_server.key(k_own_key);
    QTemporaryDir m_dir;
    bool longscope() const { return m_server.kind() == QLatin1String("longscope"); }
    QString m_text; // a text to score, well inside the context

    QStringList remote(const QStringList &args) const
    {
        return args + QStringList{"--remote", m_server.url() + "/v1", "--api-key-env", "TEST_KEY"};
    }
    CliRun run_remote(const QStringList &args) const
    {
        return run_cli(remote(args), {}, {"TEST_KEY=" + QString::fromLatin1(k_key)});
    }
    QString write(const QString &name, const QByteArray &bytes) const
    {
        QFile f(m_dir.filePath(name));
        f.open(QIODevice::WriteOnly);
        f.write(bytes);
        return f.fileName();
    }

private:
    // Mean NLL within 1e-4 and every curve point (same positions and counts) within 1e-3.
    static void same_perplexity(const QJsonObject &remote, const QJsonObject &local)
    {
        QVERIFY2(std::abs(remote["mean_nll"].toDouble() - local["mean_nll"].toDouble()) < 1e-4,
                 qPrintable(QStringLiteral("%1 vs %2").arg(remote["mean_nll"].toDouble()).arg(local["mean_nll"].toDouble())));
        const QJsonArray rc = remote["curve"].toArray(), lc = local["curve"].toArray();
        QCOMPARE(rc.size(), lc.size());
        for (qsizetype i = 0; i < rc.size(); ++i) {
            QCOMPARE(rc[i].toObject()["begin"].toInt(), lc[i].toObject()["begin"].toInt());
            QCOMPARE(rc[i].toObject()["end"].toInt(), lc[i].toObject()["end"].toInt());
            QCOMPARE(rc[i].toObject()["count"].toInt(), lc[i].toObject()["count"].toInt());
            QVERIFY(std::abs(rc[i].toObject()["mean_nll"].toDouble() - lc[i].toObject()["mean_nll"].toDouble()) < 1e-3);
        }
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        QVERIFY2(m_server.start({"--ctx", QString::number(k_ctx), "--api-key", QString::fromLatin1(k_own_key),
                                 "--threads", "1"}),
                 m_server.log().constData());
        QFile f(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QString book = QString::fromUtf8(f.readAll());
        m_text = book.mid(book.indexOf("Alice was beginning"), 700);
    }

    // Greedy text is the model's: the remote reply equals a local run of the same model.
    void generate_equals_local_greedy()
    {
        if (!longscope())
            QSKIP("compares with Longscope's own engine");
        const QStringList common{"generate", "-p", "Once upon a time", "-n", "24", "--temp", "0", "--json"};
        const CliRun r = run_remote(common);
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject remote = json_of(r.out);
        const CliRun l = run_cli(common + QStringList{"--ctx", QString::number(k_ctx), "--top-k", "0", "--top-p", "1"});
        QVERIFY2(l.code == 0, l.err.constData());
        const QJsonObject local = json_of(l.out);
        QVERIFY(!remote["text"].toString().isEmpty());
        QCOMPARE(remote["text"].toString(), local["text"].toString());
        QCOMPARE(remote["completion_tokens"].toInt(), local["n_generated_tokens"].toInt());
        QCOMPARE(remote["prompt_tokens"].toInt(), local["n_prompt_tokens"].toInt());
        QCOMPARE(remote["finish_reason"].toString(), QStringLiteral("length"));
        QCOMPARE(remote["model"].toString(), QStringLiteral("stories260K")); // picked from /v1/models
        QVERIFY(remote["time_to_first_token_s"].toDouble() > 0);
        QVERIFY(remote["decode_tokens_per_second"].toDouble() > 0);
    }

    // Without --json the text streams to stdout and nothing else goes there.
    void generate_streams_to_stdout()
    {
        const CliRun r = run_remote({"generate", "-p", "Once upon a time", "-n", "16", "--temp", "0"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject direct =
            http(m_server.url() + "/v1/completions",
                 QJsonDocument(QJsonObject{{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}})
                     .toJson(),
                 k_key)
                .json();
        QCOMPARE(QString::fromUtf8(r.out), direct["choices"].toArray().first().toObject()["text"].toString());
        QVERIFY2(r.err.contains("first token after") && r.err.contains("tok/s"), r.err.constData());
    }

    void stop_sequence_ends_the_reply()
    {
        const CliRun full = run_remote({"generate", "-p", "Once upon a time", "-n", "40", "--temp", "0", "--json"});
        const QString text = json_of(full.out)["text"].toString();
        const int stop = text.indexOf('.');
        QVERIFY2(stop > 0, qPrintable(text)); // the greedy story has a sentence end early on
        const CliRun r = run_remote({"generate", "-p", "Once upon a time", "-n", "40", "--temp", "0", "--stop", ".", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject o = json_of(r.out);
        QCOMPARE(o["text"].toString(), text.left(stop));
        QCOMPARE(o["finish_reason"].toString(), QStringLiteral("stop"));
    }

    void chat_goes_through_the_servers_template()
    {
        const QByteArray messages = R"([{"role": "user", "content": "Tell me a story."}])";
        const CliRun r = run_remote({"generate", "--chat", write("chat.json", messages), "-n", "12", "--temp", "0", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject direct =
            http(m_server.url() + "/v1/chat/completions",
                 QJsonDocument(QJsonObject{{"messages", QJsonDocument::fromJson(messages).array()},
                                           {"max_tokens", 12},
                                           {"temperature", 0}})
                     .toJson(),
                 k_key)
                .json();
        const QJsonObject o = json_of(r.out);
        QCOMPARE(o["text"].toString(),
                 direct["choices"].toArray().first().toObject()["message"].toObject()["content"].toString());
        QCOMPARE(o["prompt_tokens"].toInt(), direct["usage"].toObject()["prompt_tokens"].toInt());
    }

    // The server's prompt log-probabilities give the local perplexity of the same model.
    void perplexity_equals_local()
    {
        const QString file = write("text.txt", m_text.toUtf8());
        const CliRun r = run_remote({"perplexity", "-f", file, "--bucket", "32", "--json"});
        if (!longscope()) { // llama-server does not echo the prompt's log-probabilities: one clear line
            QCOMPARE(r.code, 1);
            QVERIFY2(r.err.contains("prompt log-probabilities") && r.err.trimmed().count('\n') == 0, r.err.constData());
            return;
        }
        QVERIFY2(r.code == 0, r.err.constData());
        const CliRun l = run_cli({"perplexity", "-f", file, "--ctx", QString::number(k_ctx), "--bucket", "32", "--json"});
        QVERIFY2(l.code == 0, l.err.constData());
        const QJsonObject remote = json_of(r.out), local = json_of(l.out);
        QCOMPARE(remote["n_scored"].toInt(), local["n_scored"].toInt());
        QVERIFY(remote["n_scored"].toInt() > 100);
        QCOMPARE(local["windows"].toInt(), 1);
        same_perplexity(remote, local);
        if (QTest::currentTestFailed())
            return;
        QCOMPARE(remote["context_length"].toInt(), k_ctx);
    }
    // Windows of --ctx tokens with --stride, as a local run scores them: the token
    // boundaries come from the server's /tokenize and each window goes as token ids.
    void perplexity_in_windows_equals_local()
    {
        const QString file = write("windows.txt", m_text.toUtf8());
        const QStringList common{"perplexity", "-f", file, "--ctx", "64", "--stride", "40", "--bucket", "8", "--json"};
        const CliRun r = run_remote(common);
        if (!longscope()) { // llama-server tokenizes, then refuses 'echo': one clear line
            QCOMPARE(r.code, 1);
            QVERIFY2(r.err.contains("prompt log-probabilities") && r.err.trimmed().count('\n') == 0, r.err.constData());
            return;
        }
        QVERIFY2(r.code == 0, r.err.constData());
        QVERIFY2(!r.err.contains("one window"), r.err.constData());
        const CliRun l = run_cli(common);
        QVERIFY2(l.code == 0, l.err.constData());
        const QJsonObject remote = json_of(r.out), local = json_of(l.out);
        QVERIFY2(local["windows"].toInt() >= 3, qPrintable(QString::number(local["windows"].toInt())));
        QCOMPARE(remote["windows"].toInt(), local["windows"].toInt());
        QCOMPARE(remote["n_scored"].toInt(), local["n_scored"].toInt());
        same_perplexity(remote, local);
        if (QTest::currentTestFailed())
            return;
        // A window that does not fit the server's context is refused before anything is sent.
        const CliRun big = run_remote({"perplexity", "-f", file, "--ctx", QString::number(k_ctx)});
        QCOMPARE(big.code, 2);
        QVERIFY2(big.err.contains("does not fit the server's context of 512 tokens"), big.err.constData());
    }

    void failures_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("key");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("says");
        QTest::newRow("wrong key") << QStringList{"generate", "-p", "hi"} << "sk-wrong" << 1
                                   << "refused the API key (401)";
        QTest::newRow("no key") << QStringList{"perplexity", "-f", "TEXT"} << "" << 2 << "TEST_KEY is not set";
        QTest::newRow("unknown model") << QStringList{"generate", "-p", "hi", "-m", "nope"} << QString(k_key) << 1
                                       << "has no model 'nope' (it serves: ";
        QTest::newRow("bad option") << QStringList{"generate", "-p", "hi", "--alpha", "2"} << QString(k_key) << 2
                                    << "--alpha";
        QTest::newRow("too long") << QStringList{"generate", "-p", "hi", "-n", "100000"} << QString(k_key) << 1
                                  << "maximum context length is 512";
    }
    void failures()
    {
        if (!longscope() && QByteArray(QTest::currentDataTag()) == "too long")
            QSKIP("llama-server answers an over-long request by stopping at the context");
        QFETCH(QStringList, args);
        QFETCH(QString, key);
        QFETCH(int, code);
        QFETCH(QString, says);
        args.replaceInStrings(QStringLiteral("TEXT"), write("t.txt", m_text.toUtf8()));
        const CliRun r = run_cli(remote(args), {}, key.isEmpty() ? QStringList{} : QStringList{"TEST_KEY=" + key});
        QCOMPARE(r.code, code);
        QVERIFY2(r.err.contains(says.toUtf8()), r.err.constData());
        QCOMPARE(r.err.trimmed().count('\n'), 0); // one line
        QVERIFY(r.out.isEmpty());
    }

    void transport_failures()
    {
        // A closed port: refused.
        QTcpServer probe;
        QVERIFY(probe.listen(QHostAddress::LocalHost));
        const int closed = probe.serverPort();
        probe.close();
        CliRun r = run_cli({"generate", "-p", "hi", "--remote", QStringLiteral("http://127.0.0.1:%1").arg(closed)});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("cannot reach the server at http://127.0.0.1:"), r.err.constData());
        // A listener that never answers: the timeout.
        QTcpServer silent;
        QVERIFY(silent.listen(QHostAddress::LocalHost));
        QElapsedTimer t;
        t.start();
        r = run_cli({"generate", "-p", "hi", "--timeout", "1", "--remote",
                     QStringLiteral("http://127.0.0.1:%1").arg(silent.serverPort())});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("did not answer within 1 s"), r.err.constData());
        QVERIFY(t.elapsed() < 20000);
        // Not a URL.
        r = run_cli({"generate", "-p", "hi", "--remote", "127.0.0.1:8000"});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("is not a server URL: no scheme"), r.err.constData());
    }

    void cleanupTestCase() { m_server.stop(); }
};

QTEST_GUILESS_MAIN(TestRemoteCli)
#include "tst_remote_cli.moc"
