// What `longscope-cli serve` tells a remote client (docs/serve.md): /v1/models metadata,
// Prometheus /metrics, and log-probabilities on /v1/completions (echo + logprobs), against a
// real server on a free loopback port. The log-probabilities are checked against the
// engine's own perplexity of the same model, in this process.
#include <QFile>
#include <QJsonArray>
#include <QtTest>

#include <cmath>

#include "longscope/engine.h"
#include "longscope/model.h"
#include "longscope/perplexity.h"
#include "longscope/tokenizer.h"
#include "remote/prometheus.h"
#include "serve_process.h"

using namespace longscope;
using longscope::test::http;

namespace {

const int k_ctx = 512;

QByteArray to_json(const QJsonObject &o) { return QJsonDocument(o).toJson(QJsonDocument::Compact); }

QString alice(int chars)
{
    QFile f(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt"));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    const QString text = QString::fromUtf8(f.readAll());
    return text.mid(text.indexOf("Alice was beginning"), chars);
}

double metric(const remote::MetricsText &m, const char *name, const char *category = nullptr)
{
    for (const remote::MetricSample &s : m.samples)
        if (s.name == name && (!category || (s.labels.count("category") && s.labels.at("category") == category)))
            return s.value;
    return NAN;
}

} // namespace

class TestServeMetrics : public QObject {
    Q_OBJECT

    test::ServeProcess m_server;
    std::unique_ptr<Model> m_model;

    remote::MetricsText scrape()
    {
        const test::HttpReply r = http(m_server.url() + "/metrics");
        if (r.status != 200)
            return {};
        return remote::parse_metrics(r.body.toStdString());
    }

    test::HttpReply complete(const QJsonObject &body) { return http(m_server.url() + "/v1/completions", to_json(body)); }

private slots:
    void initTestCase()
    {
        QVERIFY2(m_server.start({"--ctx", QString::number(k_ctx), "--threads", "1"}), m_server.log().constData());
        m_model = Model::load(LONGSCOPE_BUNDLED_MODEL);
        QVERIFY(!alice(400).isEmpty());
    }

    void models_carry_the_context_and_architecture()
    {
        const test::HttpReply r = http(m_server.url() + "/v1/models");
        QCOMPARE(r.status, 200);
        const QJsonObject m = r.json()["data"].toArray().first().toObject();
        QCOMPARE(m["max_model_len"].toInt(), k_ctx); // the --ctx the server runs with
        QCOMPARE(m["context_length"].toInt(), k_ctx);
        QCOMPARE(m["architecture"].toString().toStdString(), m_model->hparams().architecture);
        QCOMPARE(m["meta"].toObject()["n_ctx_train"].toInt(), m_model->hparams().n_ctx_train);
        QCOMPARE(m["meta"].toObject()["n_vocab"].toInt(), m_model->hparams().n_vocab);
        const test::HttpReply one = http(m_server.url() + "/v1/models/" + m["id"].toString());
        QCOMPARE(one.json()["max_model_len"].toInt(), k_ctx);
    }

    // Runs first of the requests: the counters start at zero and count what usage reports.
    void metrics_count_what_the_requests_used()
    {
        const remote::MetricsText before = scrape();
        QVERIFY(!before.samples.empty());
        QCOMPARE(metric(before, "longscope:prompt_tokens_total"), 0.0);
        QCOMPARE(metric(before, "longscope:generation_tokens_total"), 0.0);
        QCOMPARE(before.types.at("longscope:prompt_tokens_total"), std::string("counter"));
        QCOMPARE(before.types.at("longscope:kv_cache_usage_ratio"), std::string("gauge"));

        const test::HttpReply r =
            complete({{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}, {"stop", QJsonArray()}});
        QCOMPARE(r.status, 200);
        const int prompt = r.json()["usage"].toObject()["prompt_tokens"].toInt();
        const int completion = r.json()["usage"].toObject()["completion_tokens"].toInt();
        QVERIFY(prompt > 1 && completion > 0);

        const remote::MetricsText after = scrape();
        QCOMPARE(metric(after, "longscope:prompt_tokens_total"), double(prompt));
        QCOMPARE(metric(after, "longscope:generation_tokens_total"), double(completion));
        QCOMPARE(metric(after, "longscope:requests_completed_total"), 1.0);
        QCOMPARE(metric(after, "longscope:requests_running"), 0.0);
        QCOMPARE(metric(after, "longscope:requests_waiting"), 0.0);
        QCOMPARE(metric(after, "longscope:context_limit_tokens"), double(k_ctx));
        // The context holds the prompt and the reply (the last token sampled need not be
        // evaluated yet).
        const double kv = metric(after, "longscope:kv_cache_tokens");
        QVERIFY2(kv >= prompt + completion - 1 && kv <= prompt + completion, QByteArray::number(kv));
        QCOMPARE(metric(after, "longscope:kv_cache_usage_ratio"), kv / k_ctx);
        QVERIFY(metric(after, "longscope:generation_tokens_per_second") > 0);
        // The latest step's thread count: the server's one thread (--threads 1), in both views.
        QCOMPARE(after.types.at("longscope:step_threads"), std::string("gauge"));
        QCOMPARE(metric(after, "longscope:step_threads"), 1.0);
        QCOMPARE(http(m_server.url() + "/v1/metrics").json()["step"].toObject()["threads"].toInt(), 1);

        // The ledger: the same numbers /v1/metrics gives as JSON, total = weights + KV + scratch.
        const QJsonObject ledger = http(m_server.url() + "/v1/metrics").json()["memory"].toObject();
        QCOMPARE(metric(after, "longscope:memory_bytes", "weights"), ledger["weights"].toDouble());
        QVERIFY(metric(after, "longscope:memory_bytes", "weights") > 0);
        QCOMPARE(metric(after, "longscope:memory_bytes", "total"),
                 metric(after, "longscope:memory_bytes", "weights") + metric(after, "longscope:memory_bytes", "kv_resident") +
                     metric(after, "longscope:memory_bytes", "scratch"));
        QVERIFY(metric(after, "longscope:memory_bytes", "kv_reserved") > 0);
    }

    // The prompt's log-probabilities are the engine's perplexity of the same tokens.
    void echo_logprobs_are_the_engines_perplexity()
    {
        const QString text = alice(600);
        const test::HttpReply r =
            complete({{"prompt", text}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}});
        QVERIFY2(r.status == 200, r.body.constData());
        const QJsonObject choice = r.json()["choices"].toArray().first().toObject();
        QCOMPARE(choice["text"].toString(), text); // echoed, nothing generated
        const QJsonObject lp = choice["logprobs"].toObject();
        const QJsonArray values = lp["token_logprobs"].toArray();
        QVERIFY(lp["top_logprobs"].isNull());

        const Tokenizer &tok = m_model->tokenizer();
        const std::vector<int32_t> ids = tok.encode(text.toStdString(), false);
        QCOMPARE(r.json()["usage"].toObject()["prompt_tokens"].toInt(), int(ids.size()) + 1); // with BOS
        QCOMPARE(values.size(), qsizetype(ids.size()) + 1);
        QVERIFY(values[0].isNull());

        PerplexityOptions o;
        o.ctx = k_ctx;
        o.n_threads = 1;
        const PerplexityResult local = perplexity(*m_model, ids, o);
        QCOMPARE(local.nll.size(), ids.size());
        double sum = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
            const double remote_nll = -values[qsizetype(i) + 1].toDouble();
            QVERIFY2(std::abs(remote_nll - local.nll[i]) < 1e-3,
                     qPrintable(QStringLiteral("token %1: %2 vs %3").arg(i).arg(remote_nll).arg(local.nll[i])));
            sum += remote_nll;
        }
        QVERIFY(std::abs(sum / double(ids.size()) - local.mean_nll) < 1e-4);
        // The token texts spell the prompt (sentencepiece's leading space aside).
        QString spelled;
        for (const QJsonValue &t : lp["tokens"].toArray())
            spelled += t.toString();
        QCOMPARE(spelled.trimmed(), text.trimmed());
    }

    // Greedy decoding picks the most likely token: each generated token is the first of its
    // alternatives, whose probabilities add up to at most 1.
    void generated_tokens_are_the_top_alternative_under_greedy()
    {
        const test::HttpReply r = complete(
            {{"prompt", "Once upon a time"}, {"logprobs", 3}, {"max_tokens", 6}, {"temperature", 0}});
        QVERIFY2(r.status == 200, r.body.constData());
        const QJsonObject choice = r.json()["choices"].toArray().first().toObject();
        const QJsonObject lp = choice["logprobs"].toObject();
        const QJsonArray tokens = lp["tokens"].toArray(), values = lp["token_logprobs"].toArray(),
                         top = lp["top_logprobs"].toArray();
        QCOMPARE(tokens.size(), qsizetype(r.json()["usage"].toObject()["completion_tokens"].toInt()));
        QCOMPARE(top.size(), tokens.size());
        QString spelled;
        for (qsizetype i = 0; i < tokens.size(); ++i) {
            spelled += tokens[i].toString();
            const QJsonObject alternatives = top[i].toObject();
            QVERIFY(alternatives.size() >= 1 && alternatives.size() <= 3);
            double best = -INFINITY, mass = 0;
            for (const QJsonValue &v : alternatives) {
                best = std::max(best, v.toDouble());
                mass += std::exp(v.toDouble());
            }
            QVERIFY(mass <= 1 + 1e-9);
            QCOMPARE(values[i].toDouble(), best);
            QCOMPARE(alternatives[tokens[i].toString()].toDouble(), values[i].toDouble());
        }
        QCOMPARE(spelled, choice["text"].toString());
        QCOMPARE(lp["text_offset"].toArray().size(), tokens.size());
    }

    void logprobs_refused_where_unsupported_data()
    {
        QTest::addColumn<QByteArray>("path");
        QTest::addColumn<QJsonObject>("body");
        QTest::addColumn<QString>("param");
        QTest::newRow("too many alternatives")
            << QByteArray("/v1/completions") << QJsonObject{{"prompt", "a"}, {"logprobs", 6}} << "logprobs";
        QTest::newRow("with stream") << QByteArray("/v1/completions")
                                     << QJsonObject{{"prompt", "a"}, {"logprobs", 1}, {"stream", true}} << "logprobs";
        QTest::newRow("max_tokens 0 without echo")
            << QByteArray("/v1/completions") << QJsonObject{{"prompt", "a"}, {"max_tokens", 0}} << "max_tokens";
        QTest::newRow("echo not a boolean")
            << QByteArray("/v1/completions") << QJsonObject{{"prompt", "a"}, {"echo", 1}} << "echo";
        QTest::newRow("chat logprobs")
            << QByteArray("/v1/chat/completions")
            << QJsonObject{{"messages", QJsonArray{QJsonObject{{"role", "user"}, {"content", "hi"}}}}, {"logprobs", true}}
            << "logprobs";
    }
    void logprobs_refused_where_unsupported()
    {
        QFETCH(QByteArray, path);
        QFETCH(QJsonObject, body);
        QFETCH(QString, param);
        const test::HttpReply r = http(m_server.url() + QString::fromLatin1(path), to_json(body));
        QCOMPARE(r.status, 400);
        QCOMPARE(r.json()["error"].toObject()["param"].toString(), param);
    }

    void streamed_echo_starts_with_the_prompt()
    {
        const test::HttpReply r = complete({{"prompt", "Once upon a time"}, {"echo", true}, {"max_tokens", 3},
                                            {"temperature", 0}, {"stream", true}});
        QCOMPARE(r.status, 200);
        const int first = r.body.indexOf("data: ");
        QVERIFY(first >= 0);
        const QByteArray payload = r.body.mid(first + 6, r.body.indexOf('\n', first) - first - 6);
        QCOMPARE(QJsonDocument::fromJson(payload).object()["choices"].toArray().first().toObject()["text"].toString(),
                 QStringLiteral("Once upon a time"));
    }

    void cleanupTestCase() { m_server.stop(); }
};

QTEST_GUILESS_MAIN(TestServeMetrics)
#include "tst_serve_metrics.moc"
