// longscope-cli quantize and make-model end to end, through QProcess.
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include "cli_runner.h"

namespace {

using Run = longscope::test::CliRun;
using longscope::test::run_cli;

QString bundled() { return QStringLiteral(LONGSCOPE_BUNDLED_MODEL); }
QString tok512() { return QStringLiteral(LONGSCOPE_TEST_DATA "/stories260K/tok512.model"); }
QString llama2_model() { return QStringLiteral(LONGSCOPE_TEST_DATA "/llama2-tokenizer/tokenizer.model"); }
QString llama2_gguf() { return QStringLiteral(LONGSCOPE_TEST_DATA "/llama2-tokenizer/llama2-vocab.gguf"); }

QJsonObject info_json(const QString &model)
{
    Run r = run_cli({"info", "-m", model, "--json"});
    return QJsonDocument::fromJson(r.out).object();
}

} // namespace

class TestModelTools : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    QString path(const QString &name) const { return m_dir.filePath(name); }

private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void quantize_bundled_q8_0_and_generate()
    {
        const QString out = path("stories-q8_0.gguf");
        Run q = run_cli({"quantize", bundled(), out, "--type", "q8_0"});
        QCOMPARE(q.code, 0);
        QVERIFY2(q.out.contains("Q8_0: 32"), q.out.constData());
        Run g = run_cli({"generate", "-m", out, "-p", "Once upon a time", "--temp", "0", "-n", "20"});
        QCOMPARE(g.code, 0);
        QVERIFY2(g.out.startsWith(", there was a little girl named Lily."), g.out.constData());
        QJsonObject o = info_json(out);
        QCOMPARE(o["tensor_types"].toObject()["Q8_0"].toInt(), 32);
        QCOMPARE(o["tensor_types"].toObject()["F32"].toInt(), 16); // norms and the 172-wide ffn_down
        QVERIFY(o["file_bytes"].toInteger() < QFileInfo(bundled()).size() / 2);
    }

    // Every type, on a small shape whose rows divide into 256; the stories260K vocabulary.
    void make_model_each_type_data()
    {
        QTest::addColumn<QString>("type");
        QTest::addColumn<QStringList>("expect_types"); // "NAME:COUNT"
        // 2 layers: 7 2-D weights each, token_embd, output; 2 norms each, output_norm.
        QTest::newRow("f32") << "f32" << QStringList{"F32:21"};
        QTest::newRow("f16") << "f16" << QStringList{"F16:16", "F32:5"};
        QTest::newRow("bf16") << "bf16" << QStringList{"BF16:16", "F32:5"};
        QTest::newRow("q8_0") << "q8_0" << QStringList{"Q8_0:16", "F32:5"};
        QTest::newRow("q4_0") << "q4_0" << QStringList{"Q4_0:16", "F32:5"};
        // Q4_K_M with 2 layers: output and layer 1's attn_v and ffn_down in Q6_K.
        QTest::newRow("q4_k") << "q4_k" << QStringList{"Q4_K:13", "Q6_K:3", "F32:5"};
        QTest::newRow("q6_k") << "q6_k" << QStringList{"Q6_K:16", "F32:5"};
        QTest::newRow("q4_1") << "q4_1" << QStringList{"Q4_1:16", "F32:5"};
        QTest::newRow("q5_0") << "q5_0" << QStringList{"Q5_0:16", "F32:5"};
        QTest::newRow("q5_1") << "q5_1" << QStringList{"Q5_1:16", "F32:5"};
        QTest::newRow("iq4_nl") << "iq4_nl" << QStringList{"IQ4_NL:16", "F32:5"};
        QTest::newRow("iq4_xs") << "iq4_xs" << QStringList{"IQ4_XS:16", "F32:5"};
        // llama.cpp's Q2_K mix (2 query heads per KV head): output Q6_K; attn_v, ffn_down and
        // attn_output Q3_K.
        QTest::newRow("q2_k") << "q2_k" << QStringList{"Q2_K:9", "Q3_K:6", "Q6_K:1", "F32:5"};
        // Q3_K_M: output Q6_K; attn_v Q5_K (layers 0, 1); ffn_down and attn_output Q4_K.
        QTest::newRow("q3_k_m") << "q3_k_m" << QStringList{"Q3_K:9", "Q4_K:4", "Q5_K:2", "Q6_K:1", "F32:5"};
        // Q5_K_M with 2 layers: output and layer 1's attn_v and ffn_down in Q6_K.
        QTest::newRow("q5_k_m") << "q5_k_m" << QStringList{"Q5_K:13", "Q6_K:3", "F32:5"};
    }
    void make_model_each_type()
    {
        QFETCH(QString, type);
        QFETCH(QStringList, expect_types);
        const QString out = path("random-" + type + ".gguf");
        Run m = run_cli({"make-model", "--shape", "256:2:4:2:512:512", "--type", type, "--vocab", tok512(),
                         "--seed", "7", "-o", out});
        QVERIFY2(m.code == 0, m.err.constData());
        QJsonObject o = info_json(out);
        QCOMPARE(o["embedding_length"].toInt(), 256);
        QCOMPARE(o["block_count"].toInt(), 2);
        QCOMPARE(o["head_count"].toInt(), 4);
        QCOMPARE(o["head_count_kv"].toInt(), 2);
        QCOMPARE(o["feed_forward_length"].toInt(), 512);
        QCOMPARE(o["vocab_size"].toInt(), 512);
        const QJsonObject types = o["tensor_types"].toObject();
        QCOMPARE(types.size(), expect_types.size());
        for (const QString &e : expect_types) {
            const QStringList kv = e.split(':');
            QCOMPARE(types[kv[0]].toInt(), kv[1].toInt());
        }
        // The `info` text lists the types too.
        Run t = run_cli({"info", "-m", out});
        for (const QString &e : expect_types)
            QVERIFY2(t.out.contains((e.split(':')[0] + ": " + e.split(':')[1]).toUtf8()), t.out.constData());
        // The vocabulary is tok512's: the same ids as the bundled model.
        Run a = run_cli({"tokenize", "-m", out, "Once upon a time, there was a little girl named Lily."});
        QCOMPARE(a.out, QByteArray("403 407 261 378 432 383 286 261 376 298 315 421 395 317 426\n"));
        // And it runs.
        Run g = run_cli({"generate", "-m", out, "-p", "Once upon a time", "-n", "8", "--temp", "0"});
        QVERIFY2(g.code == 0, g.err.constData());
    }

    // A sentencepiece .model and the same vocabulary as GGUF metadata give the same ids.
    void vocab_from_model_and_gguf_agree()
    {
        const QString a = path("v-model.gguf"), b = path("v-gguf.gguf");
        QCOMPARE(run_cli({"make-model", "--shape", "256:1:4:4:256:32000", "--type", "q8_0", "--vocab",
                          llama2_model(), "-o", a}).code, 0);
        QCOMPARE(run_cli({"make-model", "--shape", "256:1:4:4:256:32000", "--type", "q4_0", "--vocab",
                          llama2_gguf(), "-o", b}).code, 0);
        const QString text = QString::fromUtf8("Hello world, w\xc3\xb6rld \xf0\x9f\x98\x80");
        Run ta = run_cli({"tokenize", "--bos", "-m", a, text});
        Run tb = run_cli({"tokenize", "--bos", "-m", b, text});
        QCOMPARE(ta.code, 0);
        QCOMPARE(ta.out, tb.out);
        // LLaMA-2's ids for "Hello world" (BOS, "▁Hello", "▁world").
        QVERIFY2(ta.out.startsWith("1 15043 3186 "), ta.out.constData());
    }

    // Same seed, same bytes; no --vocab gives a byte-level vocabulary that still tokenizes.
    void seed_and_byte_vocab()
    {
        const QString a = path("s1.gguf"), b = path("s2.gguf"), c = path("s3.gguf");
        const QStringList base{"make-model", "--shape", "256:1:4:4:256:300", "--type", "q4_k", "--seed", "5", "-o"};
        QCOMPARE(run_cli(base + QStringList{a}).code, 0);
        QCOMPARE(run_cli(base + QStringList{b}).code, 0);
        QCOMPARE(run_cli({"make-model", "--shape", "256:1:4:4:256:300", "--type", "q4_k", "--seed", "6", "-o", c}).code, 0);
        auto bytes = [](const QString &p) {
            QFile f(p);
            return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
        };
        QCOMPARE(bytes(a), bytes(b));
        QVERIFY(bytes(a) != bytes(c));
        // <unk> <s> </s>, bytes 3..258, "▁" 259: "Hi" -> ▁ H i.
        Run t = run_cli({"tokenize", "-m", a, "Hi"});
        QCOMPARE(t.out, QByteArray("259 75 108\n"));
    }

    void failures_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("expected_code");
        QTest::addColumn<QString>("must_mention");
        const QString out = QDir::tempPath() + "/longscope-never-written.gguf";
        QTest::newRow("quantize without --type") << QStringList{"quantize", bundled(), out} << 2 << "--type";
        QTest::newRow("quantize bad --type") << QStringList{"quantize", bundled(), out, "--type", "iq2_xxs"} << 2 << "iq2_xxs";
        QTest::newRow("quantize one file") << QStringList{"quantize", bundled(), "--type", "q8_0"} << 2 << "IN OUT";
        QTest::newRow("quantize missing input") << QStringList{"quantize", "/nonexistent/in.gguf", out, "--type", "q8_0"} << 1 << "/nonexistent/in.gguf";
        QTest::newRow("quantize a Hugging Face directory") << QStringList{"quantize", LONGSCOPE_TEST_DATA "/vocab/hf-bpe", out, "--type", "q8_0"} << 1 << "Hugging Face";
        QTest::newRow("quantize not gguf") << QStringList{"quantize", tok512(), out, "--type", "q8_0"} << 1 << "GGUF";
        QTest::newRow("quantize unwritable output") << QStringList{"quantize", bundled(), "/nonexistent/dir/out.gguf", "--type", "q8_0"} << 1 << "/nonexistent/dir/out.gguf";
        QTest::newRow("make-model without --shape") << QStringList{"make-model", "--type", "f16", "-o", out} << 2 << "--shape";
        QTest::newRow("make-model unknown shape") << QStringList{"make-model", "--shape", "llama3-405b", "-o", out} << 2 << "llama3-405b";
        QTest::newRow("make-model shape of 5") << QStringList{"make-model", "--shape", "256:2:4:2:512", "-o", out} << 2 << "DIM:LAYERS";
        QTest::newRow("make-model shape zero") << QStringList{"make-model", "--shape", "256:0:4:2:512:512", "-o", out} << 2 << "LAYERS";
        QTest::newRow("make-model heads do not divide") << QStringList{"make-model", "--shape", "250:1:4:4:256:512", "-o", out} << 1 << "divisible";
        QTest::newRow("make-model without -o") << QStringList{"make-model", "--shape", "stories260k"} << 2 << "-o";
        QTest::newRow("make-model bad --type") << QStringList{"make-model", "--shape", "stories260k", "--type", "iq1_s", "-o", out} << 2 << "iq1_s";
        QTest::newRow("make-model missing vocab") << QStringList{"make-model", "--shape", "stories260k", "--vocab", "/nonexistent/tok.model", "-o", out} << 1 << "/nonexistent/tok.model";
        QTest::newRow("make-model vocab not a tokenizer") << QStringList{"make-model", "--shape", "stories260k", "--vocab", LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt", "-o", out} << 1 << "sentencepiece";
        QTest::newRow("make-model vocab larger than the model's") << QStringList{"make-model", "--shape", "256:1:4:4:256:1000", "--vocab", llama2_model(), "-o", out} << 1 << "32000";
        QTest::newRow("make-model byte vocab too small") << QStringList{"make-model", "--shape", "256:1:4:4:256:100", "-o", out} << 1 << "260";
    }
    void failures()
    {
        QFETCH(QStringList, args);
        QFETCH(int, expected_code);
        QFETCH(QString, must_mention);
        Run r = run_cli(args);
        QCOMPARE(r.code, expected_code);
        QVERIFY2(r.out.isEmpty(), r.out.constData());
        QVERIFY2(r.err.endsWith('\n') && r.err.count('\n') == 1, r.err.constData());
        QVERIFY2(r.err.contains(must_mention.toUtf8()), r.err.constData());
        QVERIFY(!QFile::exists(QDir::tempPath() + "/longscope-never-written.gguf"));
        QVERIFY(!QFile::exists(QDir::tempPath() + "/longscope-never-written.gguf.partial"));
    }

    void quantize_refuses_quantized_input()
    {
        const QString q8 = path("again-q8.gguf");
        QCOMPARE(run_cli({"quantize", bundled(), q8, "--type", "q8_0"}).code, 0);
        Run r = run_cli({"quantize", q8, path("again-q4.gguf"), "--type", "q4_0"});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("already Q8_0") && r.err.count('\n') == 1, r.err.constData());
        QVERIFY(!QFile::exists(path("again-q4.gguf")));
    }
};

QTEST_APPLESS_MAIN(TestModelTools)
#include "tst_model_tools.moc"
