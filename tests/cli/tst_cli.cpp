// longscope-cli end to end: the program as a user runs it, through QProcess.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "cli_runner.h"
#include "support/vocab_files.h"
#include "longscope/backend.h"

namespace {

// The published greedy continuation of "Once upon a time" for stories260K (its README: two
// independent LLaMA implementations agree on it).
const QByteArray known_text =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.\n";

using Run = longscope::test::CliRun;
using longscope::test::run_cli;

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

    // The portable kernels (forced here; a CPU without AVX2 gets them too) still write the
    // known text, and the CLI says once, on stderr, that they are the slow ones.
    void portable_kernels_warn_and_keep_the_text()
    {
        Run fast = run_cli({"generate", "-p", "Once upon a time", "--temp", "0", "-n", "60"});
        QCOMPARE(fast.code, 0);
        QVERIFY2(!fast.err.contains("warning"), fast.err.constData());
        Run r = run_cli({"generate", "-p", "Once upon a time", "--temp", "0", "-n", "60"}, {},
                        {QStringLiteral("LONGSCOPE_SIMD=portable")});
        QCOMPARE(r.code, 0);
        QVERIFY2(r.out.startsWith(known_text), r.out.constData());
        QCOMPARE(r.err.count("warning:"), 1);
        QVERIFY2(r.err.contains("portable kernels"), r.err.constData());
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

    void vocabulary_only_gguf()
    {
        // llama.cpp's Qwen 2 vocabulary file: no tensors, a byte-level BPE. Ids as Qwen's own
        // tokenizer gives them (<|im_start|> 151644, "user" 872, "\n" 198, "Hello world"
        // 9707 1879 as in the file's test vectors, <|im_end|> 151645).
        QTemporaryDir dir;
        const QString path = QString::fromStdString(longscope::test::unpack_vocab("qwen2", dir.path().toStdString()));
        Run t = run_cli({"tokenize", "-m", path, "--special", "<|im_start|>user\nHello world<|im_end|>"});
        QCOMPARE(t.code, 0);
        QCOMPARE(t.out, QByteArray("151644 872 198 9707 1879 151645\n"));
        Run plain = run_cli({"tokenize", "-m", path, "<|im_end|>"});
        QVERIFY(!plain.out.contains("151645"));
        Run j = run_cli({"info", "-m", path, "--json"});
        QCOMPARE(j.code, 0);
        const QJsonObject o = QJsonDocument::fromJson(j.out).object();
        QCOMPARE(o["tokenizer_kind"].toString(), QString("bpe"));
        QCOMPARE(o["pre_tokenizer"].toString(), QString("qwen2"));
        QCOMPARE(o["eos_token_id"].toInt(), 151643);
        const QJsonArray eog = o["end_of_generation"].toArray();
        QCOMPARE(eog.size(), 2);
        QCOMPARE(eog[1].toObject()["text"].toString(), QString("<|im_end|>"));
        Run text = run_cli({"info", "-m", path});
        QCOMPARE(text.code, 0);
        QVERIFY(text.out.contains("151645 <|im_end|>"));
        Run m = run_cli({"info", "-m", bundled()});
        QVERIFY(m.out.contains("tokenizer:        sentencepiece"));
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
        QTest::newRow("unknown backend") << QStringList{"generate", "-p", "a", "--backend", "gpu"} << 2 << "--backend";
        // The bundled model's heads are 8 wide: no whole blocks of 32.
        QTest::newRow("q8_0 keys with a head size of 8") << QStringList{"generate", "-p", "a", "--kv-type-k", "q8_0"} << 1 << "head size is 8";
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

    // Without a usable GPU, --backend cuda is one clear line and exit 1 (with one, it runs).
    void cuda_backend_without_a_gpu_is_one_line()
    {
        for (const longscope::BackendStatus &b : longscope::probe_backends())
            if (b.name == "CUDA" && b.available)
                QSKIP("a GPU is usable here: --backend cuda runs (tst_cuda_forward covers it)");
        for (const QStringList &args : {QStringList{"generate", "-p", "Once", "-n", "4", "--backend", "cuda"},
                                        QStringList{"bench", "--input", "8", "--new", "2", "--kv", "static", "--attn",
                                                    "naive", "--no-probe", "--backend", "cuda"}}) {
            Run r = run_cli(args);
            QCOMPARE(r.code, 1);
            QVERIFY2(r.out.isEmpty(), r.out.constData());
            QVERIFY2(r.err.endsWith('\n') && r.err.count('\n') == 1, r.err.constData());
            QVERIFY2(r.err.contains("CUDA"), r.err.constData());
        }
    }

    void long_context_flags_keep_the_greedy_text_data()
    {
        QTest::addColumn<QStringList>("flags");
        QTest::newRow("vmm mem-efficient causal-flash keys-before-rope") << QStringList{"--kv", "vmm", "--attn", "mem-efficient", "--causal-flash", "--kv-before-rope"};
        QTest::newRow("concat naive") << QStringList{"--kv", "concat", "--attn", "naive"};
        QTest::newRow("none") << QStringList{"--kv", "none"};
        QTest::newRow("f16 keys and values") << QStringList{"--kv-type-k", "f16", "--kv-type-v", "f16"};
        QTest::newRow("alpha 1") << QStringList{"--alpha", "1"};
        QTest::newRow("alpha auto (short context: no scaling)") << QStringList{"--alpha", "auto", "--ctx", "2048"};
    }
    void long_context_flags_keep_the_greedy_text()
    {
        QFETCH(QStringList, flags);
        Run r = run_cli(QStringList{"generate", "-p", "Once upon a time", "--temp", "0", "-n", "60"} + flags);
        QCOMPARE(r.code, 0);
        QVERIFY2(r.out.startsWith(known_text), r.out.constData());
    }

    void metrics_file_has_a_row_per_step()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("m.csv");
        Run r = run_cli({"generate", "-p", "Once upon a time", "--temp", "0", "-n", "10", "--kv", "vmm", "--metrics", path});
        QCOMPARE(r.code, 0);
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
        // Header, the prefill, then 9 decode steps (the 10th token needs no forward pass).
        QCOMPARE(lines.size(), 1 + 1 + 9);
        const QList<QByteArray> header = lines[0].split(',');
        QVERIFY(header.contains("kv_resident") && header.contains("tokens_per_second") && header.contains("peak_total"));
        QVERIFY(header.contains("kv_type_k") && header.contains("kv_type_v"));
        for (int i = 1; i < lines.size(); ++i)
            QCOMPARE(lines[i].split(',').size(), header.size());
        QVERIFY(lines[1].contains(",prefill,5,5,"));
        QVERIFY(lines[2].contains(",decode,1,6,"));
        QVERIFY(lines[2].contains(",vmm,"));
    }

    void batch_file_gives_each_prompts_own_completion()
    {
        QTemporaryDir dir;
        QFile f(dir.filePath("prompts.txt"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("Once upon a time\r\nThe cat\n\nTom and Lily went to the big park\n");
        f.close();
        Run batch = run_cli({"generate", "--batch-file", f.fileName(), "--temp", "0", "-n", "25"});
        QCOMPARE(batch.code, 0);
        const QList<QByteArray> lines = batch.out.split('\n');
        QCOMPARE(lines.size(), 4); // three completions and the final newline
        const char *prompts[] = {"Once upon a time", "The cat", "Tom and Lily went to the big park"};
        for (int i = 0; i < 3; ++i) {
            Run single = run_cli({"generate", "-p", prompts[i], "--temp", "0", "-n", "25"});
            QCOMPARE(lines[i], single.out.replace("\\", "\\\\").replace("\n", "\\n"));
        }
    }

    void bench_reports_the_grid()
    {
        Run r = run_cli({"bench", "--input", "32,64", "--new", "8", "--kv", "static,vmm,concat", "--attn", "naive,mem-efficient", "--json"});
        QCOMPARE(r.code, 0);
        const QJsonArray rows = QJsonDocument::fromJson(r.out).array();
        QCOMPARE(rows.size(), 2 * 3 * 2);
        // stories260K's matrix weights per layer set (see below).
        const double layer_weights = 5.0 * (64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 172);
        // Of them the last layer's output projection and feed-forward, which a prompt multiplies
        // only for its last row, as the output matrix.
        const double last_tail = 64 * 64 + 3 * 64 * 172;
        for (const auto &v : rows) {
            const QJsonObject o = v.toObject();
            QVERIFY(o["decode_tok_s"].toDouble() > 0);
            QVERIFY(o["prefill_tok_s"].toDouble() > 0);
            QVERIFY(o["peak_total_bytes"].toDouble() > 0);
            // The roofline: bandwidth measured in the run, bytes per token at least the weights.
            QVERIFY(o["bandwidth_gb_s"].toDouble() > 0.1);
            QVERIFY(o["bytes_per_token"].toDouble() > 1e6);
            QVERIFY(o["roofline_fraction"].toDouble() > 0);
            QVERIFY(o["prefill_gflop_s"].toDouble() > 0);
            // The operations behind prefill GFLOP/s, from stories260K's shape (llama2.c: dim 64,
            // 5 layers, 8 heads, 4 KV heads, hidden 172, vocabulary 512): two per weight of the
            // layers' products per prompt token, attention's 4 x dim per key over half the
            // prompt in the first four layers; then for the one row whose logits are kept, the
            // last layer's attention over the whole prompt, its output projection and
            // feed-forward, and the output matrix.
            const double in = o["input_tokens"].toDouble();
            const double attention_flops = in * 4.0 * 4 * 64 * in / 2 + 4.0 * 64 * in;
            const double expected_flops =
                in * 2 * (layer_weights - last_tail) + 2.0 * last_tail + attention_flops + 2.0 * 512 * 64;
            const double flops = o["prefill_gflop_s"].toDouble() * 1e9 * in / o["prefill_tok_s"].toDouble();
            QVERIFY2(std::abs(flops / expected_flops - 1) < 1e-9, qPrintable(QString::number(flops)));
            // The prefill roofline: the time the products would take at the peak of the
            // instruction they run on plus attention's at its own (both measured in the run),
            // over prefill's time; positive and (noise aside) not above 1.
            QVERIFY(!o["compute_instruction"].toString().isEmpty());
            QVERIFY(!o["attention_instruction"].toString().isEmpty());
            const double peak = o["compute_peak_gflop_s"].toDouble(), fraction = o["prefill_roofline_fraction"].toDouble();
            const double attention_peak = o["attention_peak_gflop_s"].toDouble();
            QVERIFY(std::isfinite(peak) && peak > 0);
            QVERIFY(std::isfinite(attention_peak) && attention_peak > 0);
            QVERIFY2(fraction > 0 && fraction <= 1.5, qPrintable(QString::number(fraction)));
            const double seconds = in / o["prefill_tok_s"].toDouble();
            const double ideal = (expected_flops - attention_flops) / (peak * 1e9) + attention_flops / (attention_peak * 1e9);
            QVERIFY2(std::abs(fraction / (ideal / seconds) - 1) < 1e-6, qPrintable(QString::number(fraction)));
            if (o["kv_mode"].toString() == "concat")
                QVERIFY(o["kv_bytes_copied"].toDouble() > 0);
            else
                QCOMPARE(o["kv_bytes_copied"].toDouble(), 0.0);
        }
        // Weights on 8-bit integer dot products where the CPU has them, attention on float
        // multiply-adds: each part against its own peak (the bundled model quantized to Q8_0).
        QTemporaryDir qdir;
        const QString q8 = qdir.filePath("q8.gguf");
        QCOMPARE(run_cli({"quantize", bundled(), q8, "--type", "q8_0"}).code, 0);
        Run rq = run_cli({"bench", "-m", q8, "--input", "48", "--new", "2", "--kv", "static", "--attn", "mem-efficient",
                          "--causal-flash", "--json"});
        QCOMPARE(rq.code, 0);
        {
            const QJsonObject o = QJsonDocument::fromJson(rq.out).array().first().toObject();
            const double in = o["input_tokens"].toDouble(), seconds = in / o["prefill_tok_s"].toDouble();
            const double attention_flops = in * 4.0 * 4 * 64 * in / 2 + 4.0 * 64 * in;
            const double product_flops = in * 2 * (layer_weights - last_tail) + 2.0 * last_tail + 2.0 * 512 * 64;
            const double peak = o["compute_peak_gflop_s"].toDouble() * 1e9,
                         attention_peak = o["attention_peak_gflop_s"].toDouble() * 1e9;
            if (!o["cpu_kernels"].toString().startsWith("portable"))
                QVERIFY2(o["compute_instruction"].toString() != o["attention_instruction"].toString(),
                         rq.out.constData());
            const double ideal = product_flops / peak + attention_flops / attention_peak;
            QVERIFY2(std::abs(o["prefill_roofline_fraction"].toDouble() / (ideal / seconds) - 1) < 1e-6, rq.out.constData());
        }
        // The paired probe: a median over the decode steps, present only when asked for, and
        // refused without the probe.
        Run paired = run_cli({"bench", "--input", "16", "--new", "6", "--kv", "static", "--attn", "naive", "--json",
                              "--paired-probe"});
        QCOMPARE(paired.code, 0);
        const QJsonObject po = QJsonDocument::fromJson(paired.out).array().first().toObject();
        QVERIFY2(po["paired_bandwidth_gb_s"].toDouble() > 0, paired.out.constData());
        QVERIFY2(po["paired_roofline_fraction"].toDouble() > 0, paired.out.constData());
        Run unpaired = run_cli({"bench", "--input", "16", "--new", "4", "--kv", "static", "--attn", "naive", "--json",
                                "--no-probe"});
        const QJsonObject uo = QJsonDocument::fromJson(unpaired.out).array().first().toObject();
        QCOMPARE(uo["paired_roofline_fraction"].toDouble(), 0.0);
        // The decode steps' mean thread count: within the pool (its first steps on all of it,
        // before any trial of the decode thread tuner), and 1 on a one-thread pool.
        QVERIFY2(uo["decode_threads"].toDouble() == uo["threads"].toDouble(), unpaired.out.constData());
        Run one = run_cli({"bench", "--input", "16", "--new", "4", "--kv", "static", "--attn", "naive", "--json",
                           "--no-probe", "--threads", "1"});
        QCOMPARE(one.code, 0);
        QCOMPARE(QJsonDocument::fromJson(one.out).array().first().toObject()["decode_threads"].toDouble(), 1.0);
        Run refused = run_cli({"bench", "--input", "16", "--new", "4", "--no-probe", "--paired-probe"});
        QCOMPARE(refused.code, 2);
        QVERIFY2(refused.err.contains("--paired-probe"), refused.err.constData());
        Run table = run_cli({"bench", "--input", "16", "--new", "4", "--kv", "static", "--attn", "naive", "--no-probe"});
        QCOMPARE(table.code, 0);
        QVERIFY(table.out.contains("| batch | input | new |"));
        QVERIFY(table.out.contains("KV cache: keys f32, values f32"));

        // KV types: named in every output, and the static cache holds half the bytes in f16.
        const QStringList grid{"bench", "--input", "16", "--new", "4", "--kv", "static", "--attn", "naive", "--no-probe"};
        Run f32 = run_cli(grid + QStringList{"--json"});
        Run f16 = run_cli(grid + QStringList{"--json", "--kv-type-k", "f16", "--kv-type-v", "f16"});
        QCOMPARE(f16.code, 0);
        const QJsonObject a = QJsonDocument::fromJson(f32.out).array().first().toObject();
        const QJsonObject b = QJsonDocument::fromJson(f16.out).array().first().toObject();
        QCOMPARE(a["kv_type_k"].toString(), QString("f32"));
        QCOMPARE(b["kv_type_k"].toString(), QString("f16"));
        QCOMPARE(b["kv_type_v"].toString(), QString("f16"));
        QCOMPARE(b["kv_reserved_bytes"].toDouble() * 2, a["kv_reserved_bytes"].toDouble());
        Run csv = run_cli(grid + QStringList{"--csv", "--kv-type-v", "f16"});
        QCOMPARE(csv.code, 0);
        QVERIFY(csv.out.startsWith("batch_size,input_tokens,new_tokens,kv_mode,kv_type_k,kv_type_v,"));
        QVERIFY2(csv.out.contains(",static,f32,f16,"), csv.out.constData());
    }

    void bad_long_context_values_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("must_mention");
        QTest::newRow("alpha below 1") << QStringList{"--alpha", "0.5"} << "--alpha";
        QTest::newRow("alpha nan") << QStringList{"--alpha", "nan"} << "--alpha";
        QTest::newRow("alpha word") << QStringList{"--alpha", "big"} << "--alpha";
        QTest::newRow("unknown kv mode") << QStringList{"--kv", "paged"} << "--kv";
        QTest::newRow("unknown attention") << QStringList{"--attn", "fast"} << "--attn";
        QTest::newRow("unknown overflow") << QStringList{"--overflow", "truncate"} << "--overflow";
        QTest::newRow("unknown key type") << QStringList{"--kv-type-k", "q5_0"} << "--kv-type-k";
        QTest::newRow("unknown value type") << QStringList{"--kv-type-v", "Q8"} << "--kv-type-v";
    }
    void bad_long_context_values()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, must_mention);
        Run r = run_cli(QStringList{"generate", "-p", "Once upon a time"} + args);
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.count('\n') == 1 && r.err.contains(must_mention.toUtf8()), r.err.constData());
    }

    void head_tail_overflow_keeps_generating()
    {
        // 40 tokens of prompt into a limit of 24 with 8 to generate: head-tail keeps 8 + 8.
        const QString prompt = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends every day.";
        Run err = run_cli({"generate", "-p", prompt, "--ctx", "24", "-n", "8"});
        QCOMPARE(err.code, 1);
        QVERIFY(err.err.contains("context"));
        Run r = run_cli({"generate", "-p", prompt, "--ctx", "24", "-n", "8", "--overflow", "head-tail", "--temp", "0", "--json"});
        QCOMPARE(r.code, 0);
        const QJsonObject o = QJsonDocument::fromJson(r.out.split('\n').first()).object();
        QCOMPARE(o["n_prompt_tokens"].toInt(), 16);
        QCOMPARE(o["n_generated_tokens"].toInt(), 8);
        QVERIFY(r.err.contains("head-tail"));
    }

    void shift_overflow_goes_past_the_context()
    {
        // The same prompt, longer than the limit of 24, goes in whole, and 60 tokens are
        // generated: the context shifts, keeping 4 sink tokens.
        const QString prompt = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends every day.";
        Run r = run_cli({"generate", "-p", prompt, "--ctx", "24", "-n", "60", "--overflow", "shift", "--sinks", "4",
                         "--temp", "0", "--json"});
        QCOMPARE(r.code, 0);
        const QJsonObject o = QJsonDocument::fromJson(r.out.split('\n').first()).object();
        QVERIFY(o["n_prompt_tokens"].toInt() > 24);
        QVERIFY(o["n_generated_tokens"].toInt() > 24);

        // Sinks that fill the context, or a negative count, are refused in one line.
        Run full = run_cli({"generate", "-p", prompt, "--ctx", "24", "--overflow", "shift", "--sinks", "24"});
        QCOMPARE(full.code, 1);
        QVERIFY2(full.err.count('\n') == 1 && full.err.contains("24 sink tokens leave no room"), full.err.constData());
        Run negative = run_cli({"generate", "-p", prompt, "--overflow", "shift", "--sinks", "-1"});
        QCOMPARE(negative.code, 2);
        QVERIFY2(negative.err.contains("--sinks"), negative.err.constData());

        // perplexity streams under shift past the context; streamed under error it stops there.
        const QString book = QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt");
        Run ppl = run_cli({"perplexity", "-f", book, "--ctx", "64", "--max-tokens", "256", "--overflow", "shift", "--json"});
        QCOMPARE(ppl.code, 0);
        const QJsonObject p = QJsonDocument::fromJson(ppl.out).object();
        QCOMPARE(p["n_scored"].toInt(), 256);
        QVERIFY(!p.contains("stopped"));
        Run stopped = run_cli({"perplexity", "-f", book, "--ctx", "64", "--max-tokens", "256", "--stream", "--json"});
        QCOMPARE(stopped.code, 0);
        const QJsonObject q = QJsonDocument::fromJson(stopped.out).object();
        QCOMPARE(q["n_scored"].toInt(), 64);
        QVERIFY(q["stopped"].toString().contains("context limit of 64"));
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
