// The remote client's protocol code (remote/): the Prometheus text format on samples of
// vLLM, SGLang and llama.cpp output (tests/data/remote/), server-sent events cut at every
// byte, base URLs, request bodies, /v1/models shapes, prompt log-probabilities and the
// messages of every failure. No server: tst_remote_cli talks to one.
#include <QFile>
#include <QtTest>

#include <cmath>

#include "remote/openai_client.h"
#include "remote/prometheus.h"
#include "remote/server_metrics.h"

using namespace longscope::remote;

namespace {

std::string data_file(const char *name)
{
    QFile f(QStringLiteral(LONGSCOPE_TEST_DATA "/remote/") + QLatin1String(name));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return f.readAll().toStdString();
}

ServerMetrics metrics_of(const char *file) { return server_metrics(parse_metrics(data_file(file))); }

bool contains(const std::string &text, const char *part) { return text.find(part) != std::string::npos; }

// The message of the ClientError `f` throws, and its kind.
template <class F>
std::pair<Failure, std::string> failure_of(F f)
{
    try {
        f();
    } catch (const ClientError &e) {
        return {e.failure(), e.what()};
    }
    return {Failure::Protocol, "<nothing thrown>"};
}

} // namespace

class TestRemoteProtocol : public QObject {
    Q_OBJECT

private slots:
    void vllm_v1_metrics()
    {
        const MetricsText m = parse_metrics(data_file("vllm_v1.prom"));
        QCOMPARE(m.types.at("vllm:time_to_first_token_seconds"), std::string("histogram"));
        double success = 0;
        QVERIFY(m.sum("vllm:request_success_total", success));
        QCOMPARE(success, 48.0); // 40 stop + 7 length + 1 abort, summed over the label sets
        const MetricSample *inf = nullptr;
        for (const MetricSample &s : m.samples)
            if (s.name == "vllm:time_to_first_token_seconds_bucket" && s.labels.at("le") == "+Inf")
                inf = &s;
        QVERIFY(inf);
        QCOMPARE(inf->value, 48.0);
        QCOMPARE(inf->labels.at("model_name"), std::string("meta-llama/Llama-3.1-70B-Instruct"));

        const ServerMetrics s = server_metrics(m);
        QCOMPARE(s.engine, std::string("vllm"));
        QCOMPARE(*s.kv_usage, 0.4375);
        QCOMPARE(*s.requests_running, 3.0);
        QCOMPARE(*s.requests_waiting, 2.0);
        QCOMPARE(*s.prompt_tokens_total, 81920.0);
        QCOMPARE(*s.generation_tokens_total, 12345.0);
        QVERIFY(!s.generation_tokens_per_second); // V1 publishes no average throughput
        QVERIFY(!s.kv_tokens);
    }

    void vllm_v0_metrics()
    {
        const ServerMetrics s = metrics_of("vllm_v0.prom");
        QCOMPARE(s.engine, std::string("vllm"));
        QCOMPARE(*s.kv_usage, 0.0125); // gpu_cache_usage_perc: a fraction despite its name
        QCOMPARE(*s.prompt_tokens_total, 2048.0);
        QCOMPARE(*s.prompt_tokens_per_second, 512.5);
        QCOMPARE(*s.generation_tokens_per_second, 87.25);
    }

    void llama_cpp_metrics()
    {
        const MetricsText m = parse_metrics(data_file("llamacpp.prom"));
        QCOMPARE(m.samples.size(), size_t(12));
        QVERIFY(m.samples.front().labels.empty());
        const ServerMetrics s = server_metrics(m);
        QCOMPARE(s.engine, std::string("llama.cpp"));
        QCOMPARE(*s.prompt_tokens_total, 1.23457e+06);
        QCOMPARE(*s.generation_tokens_total, 4096.0);
        QCOMPARE(*s.requests_running, 1.0);
        QCOMPARE(*s.requests_waiting, 4.0);
        QCOMPARE(*s.prompt_tokens_per_second, 29748.7);
        QCOMPARE(*s.generation_tokens_per_second, 64.0);
        QVERIFY(!s.kv_usage); // this llama-server version publishes none
    }

    void sglang_metrics()
    {
        const ServerMetrics s = metrics_of("sglang.prom");
        QCOMPARE(s.engine, std::string("sglang"));
        QCOMPARE(*s.kv_usage, 0.28);
        QCOMPARE(*s.kv_tokens, 123859.0);
        QCOMPARE(*s.requests_running, 324.0); // two tensor-parallel ranks
        QCOMPARE(*s.requests_waiting, 2826.0);
        QCOMPARE(*s.prompt_tokens_total, 8.128902e+06);
        QCOMPARE(*s.generation_tokens_per_second, 86.50814177726902);
    }

    void unknown_server_maps_nothing()
    {
        const ServerMetrics s = server_metrics(parse_metrics("process_cpu_seconds_total 12.5\nup 1\n"));
        QVERIFY(s.engine.empty());
        QVERIFY(!s.kv_usage && !s.requests_running && !s.generation_tokens_total);
    }

    void generation_rate_from_two_polls()
    {
        ServerMetrics a, b;
        a.generation_tokens_total = 1000;
        b.generation_tokens_total = 1300;
        QCOMPARE(*generation_rate(a, b, 2.0), 150.0);
        QVERIFY(!generation_rate(b, a, 2.0)); // went back: the server restarted
        QVERIFY(!generation_rate(a, b, 0.0));
        QVERIFY(!generation_rate(ServerMetrics{}, b, 1.0));
    }

    void exposition_details()
    {
        const MetricsText m = parse_metrics("# a comment\r\n\r\n"
                                            "a{path=\"C:\\\\x\",q=\"say \\\"hi\\\"\",nl=\"1\\n2\",} 1 1712345678000\r\n"
                                            "b NaN\nc -Inf\nd +Inf\ne 1e-3\n  f\t2\n");
        QCOMPARE(m.samples.size(), size_t(6));
        QCOMPARE(m.samples[0].labels.at("path"), std::string("C:\\x"));
        QCOMPARE(m.samples[0].labels.at("q"), std::string("say \"hi\""));
        QCOMPARE(m.samples[0].labels.at("nl"), std::string("1\n2"));
        QCOMPARE(m.samples[0].value, 1.0);
        QVERIFY(std::isnan(m.samples[1].value));
        QVERIFY(std::isinf(m.samples[2].value) && m.samples[2].value < 0);
        QVERIFY(std::isinf(m.samples[3].value) && m.samples[3].value > 0);
        QCOMPARE(m.samples[4].value, 0.001);
        QCOMPARE(m.samples[5].name, std::string("f"));
    }

    void exposition_errors_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<QByteArray>("says");
        QTest::newRow("no value") << QByteArray("ok 1\nlonely\n") << QByteArray("line 2: the sample lonely has no value");
        QTest::newRow("bad number") << QByteArray("x 12abc") << QByteArray("line 1: '12abc' is not a number");
        QTest::newRow("unclosed label") << QByteArray("x{a=\"b} 1") << QByteArray("not closed");
        QTest::newRow("unquoted label") << QByteArray("x{a=b} 1") << QByteArray("double quotes");
        QTest::newRow("repeated label") << QByteArray("x{a=\"1\",a=\"2\"} 1") << QByteArray("given twice");
        QTest::newRow("bad name") << QByteArray("9x 1") << QByteArray("expected a metric name");
        QTest::newRow("bad type") << QByteArray("# TYPE x flavour\nx 1") << QByteArray("unknown metric type 'flavour'");
        QTest::newRow("trailing text") << QByteArray("x 1 2 3") << QByteArray("unexpected text");
        QTest::newRow("bad escape") << QByteArray("x{a=\"\\t\"} 1") << QByteArray("unknown escape");
    }
    void exposition_errors()
    {
        QFETCH(QByteArray, text);
        QFETCH(QByteArray, says);
        try {
            parse_metrics(text.toStdString());
            QFAIL("no error");
        } catch (const MetricsParseError &e) {
            QVERIFY2(contains(e.what(), says.constData()), e.what());
        }
    }

    // The writer's output reads back as written, escapes included.
    void writer_reads_back()
    {
        MetricsWriter w;
        w.family("longscope:x", "gauge", "two\nlines");
        w.sample("longscope:x", 0.1, {{"category", "a\"b\\c\nd"}});
        w.sample("longscope:x", 1e300);
        const MetricsText m = parse_metrics(w.text());
        QCOMPARE(m.types.at("longscope:x"), std::string("gauge"));
        QCOMPARE(m.samples.size(), size_t(2));
        QCOMPARE(m.samples[0].labels.at("category"), std::string("a\"b\\c\nd"));
        QCOMPARE(m.samples[0].value, 0.1);
        QCOMPARE(m.samples[1].value, 1e300);
    }

    void base_urls_data()
    {
        QTest::addColumn<QString>("url");
        QTest::addColumn<QString>("origin");
        QTest::addColumn<QString>("models");
        QTest::addColumn<QString>("metrics");
        QTest::newRow("plain") << "http://127.0.0.1:8000" << "http://127.0.0.1:8000" << "/v1/models" << "/metrics";
        QTest::newRow("v1") << "http://127.0.0.1:8000/v1/" << "http://127.0.0.1:8000" << "/v1/models" << "/metrics";
        QTest::newRow("prefix") << "https://gpu.example/llm/v1" << "https://gpu.example:443" << "/llm/v1/models"
                                << "/llm/metrics";
        QTest::newRow("ipv6") << "http://[::1]:9000" << "http://[::1]:9000" << "/v1/models" << "/metrics";
        QTest::newRow("default port") << "HTTP://host" << "http://host:80" << "/v1/models" << "/metrics";
    }
    void base_urls()
    {
        QFETCH(QString, url);
        QFETCH(QString, origin);
        QFETCH(QString, models);
        QFETCH(QString, metrics);
        const BaseUrl u = parse_base_url(url.toStdString());
        QCOMPARE(QString::fromStdString(u.origin()), origin);
        QCOMPARE(QString::fromStdString(u.api("/models")), models);
        QCOMPARE(QString::fromStdString(u.root("/metrics")), metrics);
    }

    void bad_base_urls_data()
    {
        QTest::addColumn<QString>("url");
        QTest::addColumn<QString>("says");
        QTest::newRow("no scheme") << "127.0.0.1:8000" << "no scheme";
        QTest::newRow("ftp") << "ftp://h" << "http or https";
        QTest::newRow("no host") << "http://:80" << "no host";
        QTest::newRow("port") << "http://h:80x" << "port must be a number";
        QTest::newRow("port range") << "http://h:70000" << "between 1 and 65535";
        QTest::newRow("query") << "http://h/v1?x=1" << "query";
        QTest::newRow("credentials") << "http://u:p@h" << "credentials";
    }
    void bad_base_urls()
    {
        QFETCH(QString, url);
        QFETCH(QString, says);
        const auto [kind, msg] = failure_of([&] { parse_base_url(url.toStdString()); });
        QCOMPARE(kind, Failure::BadUrl);
        QVERIFY2(contains(msg, says.toUtf8().constData()), msg.c_str());
    }

    void request_bodies()
    {
        SamplingFields s;
        s.temperature = 0.7;
        s.top_k = 40;
        s.seed = 42;
        s.max_tokens = 64;
        s.stop = {"\n\n"};
        const json chat = chat_request("m", {{"system", "be brief"}, {"user", "hi"}}, s, true);
        QCOMPARE(chat["model"], json("m"));
        QCOMPARE(chat["messages"][1]["content"], json("hi"));
        QCOMPARE(chat["temperature"], json(0.7));
        QCOMPARE(chat["top_k"], json(40));
        QCOMPARE(chat["seed"], json(42));
        QCOMPARE(chat["max_tokens"], json(64));
        QCOMPARE(chat["stop"][0], json("\n\n"));
        QCOMPARE(chat["stream_options"]["include_usage"], json(true));
        QVERIFY(!chat.contains("top_p")); // unset: the server's default
        const json plain = completion_request("m", "Once", SamplingFields{}, false);
        QCOMPARE(plain["prompt"], json("Once"));
        QVERIFY(!plain.contains("stream_options"));
        const json lp = prompt_logprobs_request("m", "text");
        QCOMPARE(lp["echo"], json(true));
        QCOMPARE(lp["logprobs"], json(0));
        QVERIFY(request_headers("").size() == 2);
        QCOMPARE(request_headers("sk-1").back().second, std::string("Bearer sk-1"));
    }

    // The same stream cut at every byte gives the same events: CRLF line ends, comments,
    // a data field over two lines, a field without a space.
    void sse_split_anywhere()
    {
        const std::string stream = ": keep-alive\r\n\r\n"
                                   "data: {\"a\":1}\r\n\r\n"
                                   "event: message\ndata:{\"b\":2}\n\n"
                                   "data: line one\ndata: line two\n\n"
                                   "data: [DONE]\n\n";
        const std::vector<std::string> expected{"{\"a\":1}", "{\"b\":2}", "line one\nline two", "[DONE]"};
        for (size_t cut = 0; cut <= stream.size(); ++cut) {
            SseDecoder d;
            std::vector<std::string> got = d.feed(std::string_view(stream).substr(0, cut));
            for (std::string &e : d.feed(std::string_view(stream).substr(cut)))
                got.push_back(std::move(e));
            QVERIFY2(got == expected, qPrintable(QStringLiteral("cut at %1").arg(cut)));
            QVERIFY(!d.partial());
        }
        // Byte by byte.
        SseDecoder d;
        std::vector<std::string> got;
        for (char c : stream)
            for (std::string &e : d.feed(std::string_view(&c, 1)))
                got.push_back(std::move(e));
        QVERIFY(got == expected);
    }

    void stream_state()
    {
        StreamState s;
        QCOMPARE(s.feed(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"), std::string());
        QCOMPARE(s.feed(R"({"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]})"),
                 std::string("Hel"));
        QCOMPARE(s.feed(R"({"choices":[{"index":0,"delta":{"content":"lo"}}]})"), std::string("lo"));
        QVERIFY(!s.finished());
        const auto [kind, msg] = failure_of([&] { s.finish(); });
        QCOMPARE(kind, Failure::DroppedStream);
        s.feed(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})");
        s.feed(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}})");
        s.feed("[DONE]");
        s.finish();
        QCOMPARE(s.text(), std::string("Hello"));
        QCOMPARE(s.finish_reason(), std::string("stop"));
        QCOMPARE(s.usage()->prompt_tokens, 7);
        QCOMPARE(s.usage()->completion_tokens, 2);

        // Completions chunks carry "text".
        StreamState c;
        c.feed(R"({"choices":[{"index":0,"text":" upon","finish_reason":"length"}]})");
        QCOMPARE(c.text(), std::string(" upon"));
        QVERIFY(c.finished());

        // An error object in the stream (vLLM and Longscope send one when generation fails).
        StreamState e;
        const auto [ekind, emsg] =
            failure_of([&] { e.feed(R"({"error":{"message":"out of memory","type":"server_error"}})"); });
        QCOMPARE(ekind, Failure::Server);
        QVERIFY2(contains(emsg, "out of memory"), emsg.c_str());
        const auto [pkind, pmsg] = failure_of([&] { e.feed("{not json"); });
        QCOMPARE(pkind, Failure::Protocol);
    }

    void models_of_each_server()
    {
        // vLLM
        auto v = parse_models(R"({"object":"list","data":[{"id":"meta-llama/Llama-3.1-70B-Instruct","object":"model",
            "created":1,"owned_by":"vllm","root":"meta-llama/Llama-3.1-70B-Instruct","max_model_len":131072}]})");
        QCOMPARE(v.size(), size_t(1));
        QCOMPARE(*v[0].context_length, 131072);
        QCOMPARE(v[0].owned_by, std::string("vllm"));
        // llama.cpp
        auto l = parse_models(R"({"object":"list","data":[{"id":"model.gguf","object":"model","created":1,
            "owned_by":"llamacpp","meta":{"vocab_type":2,"n_vocab":151936,"n_ctx_train":32768,"n_embd":896}}]})");
        QCOMPARE(*l[0].context_length, 32768);
        // Longscope
        auto s = parse_models(R"({"object":"list","data":[{"id":"stories260K","context_length":512,
            "max_model_len":512,"architecture":"llama"}]})");
        QCOMPARE(s[0].architecture, std::string("llama"));
        // TGI-like: no context length
        auto t = parse_models(R"({"object":"list","data":[{"id":"tgi","object":"model"}]})");
        QVERIFY(!t[0].context_length);
        const auto [kind, msg] = failure_of([] { parse_models(R"({"models":[]})"); });
        QCOMPARE(kind, Failure::Protocol);
    }

    void prompt_logprobs_of_vllm()
    {
        const PromptLogprobs p = parse_prompt_logprobs(data_file("vllm_echo_logprobs.json"));
        QCOMPARE(p.tokens.size(), size_t(6)); // the prompt only: the generated " Paris" left out
        QCOMPARE(p.tokens[1], std::string("The"));
        QCOMPARE(p.logprobs.size(), size_t(5));
        double sum = 0;
        for (double v : p.logprobs)
            sum += v;
        QCOMPARE(sum, -11.125);
        // A server that ignores echo/logprobs.
        const auto [kind, msg] = failure_of([] {
            parse_prompt_logprobs(R"({"choices":[{"text":"x","logprobs":null}],"usage":{"prompt_tokens":3}})");
        });
        QCOMPARE(kind, Failure::Unsupported);
        QVERIFY(contains(msg, "echo"));
    }

    void http_errors_data()
    {
        QTest::addColumn<int>("status");
        QTest::addColumn<QByteArray>("body");
        QTest::addColumn<int>("kind");
        QTest::addColumn<QByteArray>("says");
        QTest::newRow("401") << 401 << QByteArray(R"({"error":{"message":"Incorrect API key provided."}})")
                             << int(Failure::Unauthorized) << QByteArray("refused the API key (401)");
        QTest::newRow("403") << 403 << QByteArray(R"({"detail":"Forbidden"})") << int(Failure::Forbidden)
                             << QByteArray("the server says: Forbidden");
        QTest::newRow("404 model") << 404
                                   << QByteArray(R"({"object":"error","message":"The model `x` does not exist.",
                                                 "type":"NotFoundError","code":404})")
                                   << int(Failure::ModelNotFound) << QByteArray("has no model 'x'");
        QTest::newRow("404 route") << 404 << QByteArray("Not Found") << int(Failure::NotFound)
                                   << QByteArray("OpenAI-compatible");
        QTest::newRow("429") << 429 << QByteArray(R"({"error":"Model is overloaded"})") << int(Failure::RateLimited)
                             << QByteArray("Model is overloaded");
        QTest::newRow("500") << 500 << QByteArray("") << int(Failure::Server) << QByteArray("HTTP 500");
        QTest::newRow("503") << 503 << QByteArray("{}") << int(Failure::Server) << QByteArray("busy or not ready");
        QTest::newRow("400") << 400 << QByteArray(R"({"error":{"message":"'temperature' must be between 0 and 2"}})")
                             << int(Failure::BadRequest) << QByteArray("'temperature' must be between 0 and 2");
    }
    void http_errors()
    {
        QFETCH(int, status);
        QFETCH(QByteArray, body);
        QFETCH(int, kind);
        QFETCH(QByteArray, says);
        const ClientError e = http_error(status, body.toStdString(), "x", "http://127.0.0.1:1");
        QCOMPARE(int(e.failure()), kind);
        QCOMPARE(e.status(), status);
        QVERIFY2(contains(e.what(), says.constData()), e.what());
        QVERIFY(contains(e.what(), "http://127.0.0.1:1"));
        QVERIFY(!contains(e.what(), "\n"));
    }

    void transport_errors()
    {
        QCOMPARE(connection_error("http://127.0.0.1:9", "Connection refused").failure(), Failure::Connection);
        QVERIFY(contains(connection_error("http://127.0.0.1:9", "Connection refused").what(), "Connection refused"));
        QVERIFY(contains(timeout_error("http://h:1", 2.5).what(), "2.5 s"));
        QVERIFY(contains(dropped_stream_error("http://h:1", 12).what(), "12 bytes"));
    }
};

QTEST_GUILESS_MAIN(TestRemoteProtocol)
#include "tst_remote_protocol.moc"
