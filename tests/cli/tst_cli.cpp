// longscope-cli end to end: the program as a user runs it, through QProcess.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

namespace {

// The published greedy continuation of "Once upon a time" for stories260K (its README: two
// independent LLaMA implementations agree on it).
const QByteArray known_text =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.\n";

struct Run {
    int code = -1;
    QByteArray out;
    QByteArray err;
};

Run run_cli(const QStringList &args, const QByteArray &env_model = {})
{
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("LONGSCOPE_MODEL");
    if (!env_model.isEmpty())
        env.insert("LONGSCOPE_MODEL", QString::fromUtf8(env_model));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(LONGSCOPE_CLI_PATH), args);
    if (!p.waitForFinished(120000)) {
        p.kill();
        p.waitForFinished();
        return {};
    }
    Run r;
    r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

QString bundled() { return QStringLiteral(LONGSCOPE_BUNDLED_MODEL); }
QString hf_dir() { return QStringLiteral(LONGSCOPE_TEST_DATA "/stories260K/hf"); }

} // namespace

class TestCli : public QObject {
    Q_OBJECT

private slots:
    void generate_known_text_data()
    {
        QTest::addColumn<QStringList>("model_args");
        QTest::newRow("bundled default (no -m)") << QStringList{};
        QTest::newRow("gguf") << QStringList{"-m", bundled()};
        QTest::newRow("hf directory") << QStringList{"-m", hf_dir()};
    }
    void generate_known_text()
    {
        QFETCH(QStringList, model_args);
        Run r = run_cli(QStringList{"generate"} + model_args +
                        QStringList{"-p", "Once upon a time", "--temp", "0", "-n", "60"});
        QCOMPARE(r.code, 0);
        // stdout is exactly the generated text: no prompt, no statistics.
        QVERIFY2(r.out.startsWith(known_text), r.out.constData());
        QVERIFY(!r.out.contains("Once upon a time"));
        QVERIFY(r.err.contains("tok/s"));
    }

    void json_output()
    {
        Run plain = run_cli({"generate", "-p", "Once upon a time", "--temp", "0", "-n", "30"});
        Run r = run_cli({"generate", "-p", "Once upon a time", "--temp", "0", "-n", "30", "--json"});
        QCOMPARE(r.code, 0);
        QJsonParseError pe;
        QJsonDocument doc = QJsonDocument::fromJson(r.out, &pe);
        QVERIFY2(pe.error == QJsonParseError::NoError, qPrintable(pe.errorString()));
        QJsonObject o = doc.object();
        QCOMPARE(o["text"].toString().toUtf8(), plain.out);
        QCOMPARE(o["tokens"].toArray().size(), 30);
        QCOMPARE(o["n_generated_tokens"].toInt(), 30);
        QCOMPARE(o["n_prompt_tokens"].toInt(), 5); // BOS + 4 tokens of the prompt
        QVERIFY(o["prefill_tokens_per_second"].toDouble() > 0);
        QVERIFY(o["decode_tokens_per_second"].toDouble() > 0);
        // The ids, re-tokenized: " there" etc. are the model's, and the first is ','.
        Run tok = run_cli({"tokenize", ","});
        QCOMPARE(QByteArray::number(o["tokens"].toArray().at(0).toInt()), tok.out.trimmed().split(' ').last());
    }

    void prompt_from_file()
    {
        QTemporaryDir dir;
        QFile f(dir.filePath("prompt.txt"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("Once upon a time");
        f.close();
        Run r = run_cli({"generate", "-f", f.fileName(), "--temp", "0", "-n", "60"});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.startsWith(known_text));
    }

    void seed_reproducible()
    {
        const QStringList base{"generate", "-p", "Once upon a time", "--temp", "1.0", "-n", "80",
                               "--top-k", "0", "--top-p", "1"};
        Run a = run_cli(base + QStringList{"--seed", "42"});
        Run b = run_cli(base + QStringList{"--seed", "42"});
        Run c = run_cli(base + QStringList{"--seed", "43"});
        QCOMPARE(a.code, 0);
        QCOMPARE(a.out, b.out);
        QVERIFY(a.out != c.out);
        // Different thread counts do not change the text either.
        Run d = run_cli(base + QStringList{"--seed", "42", "--threads", "1"});
        QCOMPARE(d.out, a.out);
    }

    void tokenize_known_ids()
    {
        Run r = run_cli({"tokenize", "Once upon a time, there was a little girl named Lily."});
        QCOMPARE(r.code, 0);
        QCOMPARE(r.out, QByteArray("403 407 261 378 432 383 286 261 376 298 315 421 395 317 426\n"));
        Run b = run_cli({"tokenize", "--bos", "-m", hf_dir(), "Once upon a time"});
        QCOMPARE(b.out, QByteArray("1 403 407 261 378\n"));
    }

    void info_reports_model()
    {
        Run r = run_cli({"info", "-m", bundled()});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.contains("llama"));
        Run j = run_cli({"info", "-m", hf_dir(), "--json"});
        QCOMPARE(j.code, 0);
        QJsonObject o = QJsonDocument::fromJson(j.out).object();
        // Values from the model's README and config.json.
        QCOMPARE(o["embedding_length"].toInt(), 64);
        QCOMPARE(o["block_count"].toInt(), 5);
        QCOMPARE(o["head_count"].toInt(), 8);
        QCOMPARE(o["head_count_kv"].toInt(), 4);
        QCOMPARE(o["feed_forward_length"].toInt(), 172);
        QCOMPARE(o["vocab_size"].toInt(), 512);
        QCOMPARE(o["context_length"].toInt(), 512);
        QCOMPARE(o["tied_embeddings"].toBool(), true);
        QCOMPARE(o["format"].toString(), QString("huggingface"));
        QCOMPARE(o["rope_layout"].toString(), QString("rotate_half"));
        Run g = run_cli({"info", "-m", bundled(), "--json"});
        QJsonObject og = QJsonDocument::fromJson(g.out).object();
        QCOMPARE(og["format"].toString(), QString("gguf"));
        QCOMPARE(og["gguf_version"].toInt(), 3);
        QCOMPARE(og["file_bytes"].toInteger(), QFileInfo(bundled()).size());
        QCOMPARE(og["tensor_types"].toObject()["F32"].toInt(), og["tensor_count"].toInt());
    }

    void failures_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("expected_code");
        QTest::addColumn<QString>("must_mention");
        QTest::newRow("missing model") << QStringList{"generate", "-m", "/nonexistent/model.gguf", "-p", "x"} << 1 << "/nonexistent/model.gguf";
        QTest::newRow("model is not gguf") << QStringList{"generate", "-m", LONGSCOPE_TEST_DATA "/stories260K/tok512.model", "-p", "x"} << 1 << "GGUF";
        QTest::newRow("empty prompt") << QStringList{"generate", "-p", ""} << 2 << "empty";
        QTest::newRow("no prompt") << QStringList{"generate"} << 2 << "prompt";
        QTest::newRow("prompt and file") << QStringList{"generate", "-p", "a", "-f", "b"} << 2 << "once";
        QTest::newRow("prompt longer than ctx") << QStringList{"generate", "-p", "Once upon a time there was a dog", "--ctx", "4"} << 1 << "context";
        QTest::newRow("unknown option") << QStringList{"generate", "-p", "a", "--frobnicate"} << 2 << "--frobnicate";
        QTest::newRow("bad temperature") << QStringList{"generate", "-p", "a", "--temp", "hot"} << 2 << "--temp";
        QTest::newRow("negative temperature") << QStringList{"generate", "-p", "a", "--temp", "-1"} << 2 << "--temp";
        QTest::newRow("top-p above 1") << QStringList{"generate", "-p", "a", "--top-p", "1.5"} << 2 << "--top-p";
        QTest::newRow("missing value") << QStringList{"generate", "-p"} << 2 << "needs a value";
        QTest::newRow("ctx zero") << QStringList{"generate", "-p", "a", "--ctx", "0"} << 2 << "--ctx";
        QTest::newRow("missing prompt file") << QStringList{"generate", "-f", "/nonexistent/prompt.txt"} << 1 << "/nonexistent/prompt.txt";
        QTest::newRow("unknown command") << QStringList{"frobnicate"} << 2 << "frobnicate";
        QTest::newRow("tokenize nothing") << QStringList{"tokenize"} << 2 << "text";
        QTest::newRow("info on directory without config") << QStringList{"info", "-m", LONGSCOPE_TEST_DATA} << 1 << "config.json";
    }
    void failures()
    {
        QFETCH(QStringList, args);
        QFETCH(int, expected_code);
        QFETCH(QString, must_mention);
        Run r = run_cli(args);
        QCOMPARE(r.code, expected_code);
        QVERIFY2(r.out.isEmpty(), r.out.constData());
        // One clear line on stderr.
        QVERIFY2(r.err.endsWith('\n') && r.err.count('\n') == 1, r.err.constData());
        QVERIFY2(r.err.contains(must_mention.toUtf8()), r.err.constData());
    }

    void env_model_used_without_m()
    {
        Run r = run_cli({"info", "--json"}, hf_dir().toUtf8());
        QCOMPARE(r.code, 0);
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["format"].toString(), QString("huggingface"));
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
