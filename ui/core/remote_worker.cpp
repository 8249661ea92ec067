#include "core/remote_worker.h"

#include "remote/prometheus.h"

#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QUrl>

namespace longscope::ui {

namespace {

QString text_of(const remote::ClientError &e) { return QString::fromStdString(e.what()); }

// The request fields of `longscope-cli serve` for the switches it takes per request.
void put_settings(remote::json &body, const longscope::Settings &s)
{
    body["ntk_alpha"] = s.rope.ntk_auto ? remote::json("auto") : remote::json(double(s.rope.ntk_alpha));
    body["kv_before_rope"] = s.rope.store_kv_before_rope;
    body["memory_efficient_attention"] = s.attention.memory_efficient;
    body["causal_flash"] = s.attention.causal_flash;
    body["kv_mode"] = std::string(to_string(s.kv_mode));
}

FinishReason reason_of(const std::string &finish)
{
    return finish == "length" ? FinishReason::MaxTokens : FinishReason::EndOfText;
}

} // namespace

RemoteWorker::RemoteWorker(QObject *parent) : QObject(parent), m_nam(new QNetworkAccessManager(this))
{
    registerMetaTypes();
    qRegisterMetaType<longscope::ui::RemoteModelInfo>();
    qRegisterMetaType<QVector<longscope::ui::RemoteModelInfo>>();
    qRegisterMetaType<longscope::ui::RemoteRequestMetrics>();
    qRegisterMetaType<longscope::ui::RemoteServerMetrics>();
    m_clock.start();
    connect(&m_poll, &QTimer::timeout, this, &RemoteWorker::pollMetrics);
}

RemoteWorker::~RemoteWorker()
{
    m_stopping = true;
    if (m_chat)
        m_chat->abort();
}

RemoteCapabilities RemoteWorker::capabilities() const
{
    if (m_owned_by == QLatin1String("longscope"))
        return {true, {}};
    return {false, QStringLiteral("a remote server fixes RoPE scaling, the KV cache and attention when it starts; "
                                  "only sampling is sent with each request")};
}

void RemoteWorker::setEndpoint(const QString &baseUrl, const QString &apiKey, const QString &model)
{
    m_url = baseUrl;
    m_key = apiKey;
    m_model = model;
    m_base.reset();
    m_last_poll.reset();
    try {
        m_base = remote::parse_base_url(baseUrl.toStdString());
    } catch (const remote::ClientError &e) {
        emit errorOccurred(text_of(e));
    }
}

QNetworkReply *RemoteWorker::send(const std::string &path, const remote::json *body)
{
    QNetworkRequest rq(QUrl(QString::fromStdString(m_base->origin() + path)));
    for (const auto &[name, value] : remote::request_headers(m_key.toStdString()))
        rq.setRawHeader(QByteArray::fromStdString(name), QByteArray::fromStdString(value));
    rq.setTransferTimeout(int(m_timeout_s * 1000));
    rq.setAttribute(QNetworkRequest::RedirectPolicyAttribute, QNetworkRequest::NoLessSafeRedirectPolicy);
    if (!body)
        return m_nam->get(rq);
    return m_nam->post(rq, QByteArray::fromStdString(body->dump()));
}

std::optional<remote::ClientError> RemoteWorker::failure_of(QNetworkReply *reply, bool stream_started,
                                                           size_t text_bytes)
{
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    const std::string url = m_url.toStdString();
    if (status != 0 && status != 200)
        return remote::http_error(status, reply->readAll().toStdString(), m_model.toStdString(), url);
    if (reply->error() == QNetworkReply::NoError)
        return std::nullopt;
    if (reply->error() == QNetworkReply::OperationCanceledError || reply->error() == QNetworkReply::TimeoutError)
        return remote::timeout_error(url, m_timeout_s);
    if (stream_started)
        return remote::dropped_stream_error(url, text_bytes);
    return remote::connection_error(url, reply->errorString().toStdString());
}

void RemoteWorker::listModels()
{
    if (!m_base) {
        emit errorOccurred(QStringLiteral("no remote server is set"));
        return;
    }
    QNetworkReply *reply = send(m_base->api("/models"), nullptr);
    connect(reply, &QNetworkReply::finished, this, [this, reply] {
        reply->deleteLater();
        if (auto f = failure_of(reply, false, 0)) {
            emit errorOccurred(text_of(*f));
            return;
        }
        try {
            QVector<RemoteModelInfo> out;
            for (const remote::RemoteModel &m : remote::parse_models(reply->readAll().toStdString())) {
                out.push_back({QString::fromStdString(m.id), m.context_length.value_or(0),
                               QString::fromStdString(m.architecture)});
                if (QString::fromStdString(m.id) == m_model || m_model.isEmpty())
                    m_owned_by = QString::fromStdString(m.owned_by);
            }
            emit modelsListed(out);
        } catch (const remote::ClientError &e) {
            emit errorOccurred(text_of(e));
        }
    });
}

void RemoteWorker::generateChat(const ChatRequest &request)
{
    emit generationStarted();
    m_summary = GenerationSummary{};
    if (!m_base || m_model.isEmpty()) {
        emit errorOccurred(QStringLiteral("no remote server and model are set"));
        m_summary.reason = FinishReason::Error;
        emit generationFinished(m_summary);
        return;
    }
    if (m_chat) {
        emit errorOccurred(QStringLiteral("a reply is still streaming from the server"));
        GenerationSummary busy;
        busy.reason = FinishReason::Error;
        emit generationFinished(busy);
        return;
    }
    std::vector<remote::ChatTurn> turns;
    if (!request.system_prompt.isEmpty())
        turns.push_back({"system", request.system_prompt.toStdString()});
    for (const ChatTurn &t : request.turns)
        turns.push_back({t.role == ChatTurn::Role::User ? "user" : "assistant", t.text.toStdString()});
    const GenerationParams &p = request.params;
    remote::SamplingFields s;
    s.max_tokens = p.max_new_tokens;
    s.temperature = p.do_sample ? double(p.temperature) : 0.0;
    if (p.do_sample) {
        s.top_p = p.top_p;
        s.top_k = p.top_k;
        if (p.seed != 0)
            s.seed = p.seed;
    }
    if (p.repetition_penalty != 1.0f)
        s.repeat_penalty = p.repetition_penalty;
    remote::json body = remote::chat_request(m_model.toStdString(), turns, s, true);
    if (m_settings && capabilities().per_request_settings)
        put_settings(body, *m_settings);

    m_sse = remote::SseDecoder{};
    m_stream = remote::StreamState{};
    m_stopping = false;
    m_first_token_ns = -1;
    m_started.start();
    m_chat = send(m_base->api("/chat/completions"), &body);
    QNetworkReply *reply = m_chat;
    connect(reply, &QNetworkReply::readyRead, this, [this, reply] {
        if (reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt() != 200)
            return; // an error body, read when the reply finishes
        try {
            for (const std::string &event : m_sse.feed(reply->readAll().toStdString())) {
                const std::string piece = m_stream.feed(event);
                if (piece.empty())
                    continue;
                if (m_first_token_ns < 0)
                    m_first_token_ns = m_started.nsecsElapsed();
                const QString text = QString::fromStdString(piece);
                m_summary.text += text;
                emit tokenStreamed(text);
            }
        } catch (const remote::ClientError &e) {
            emit errorOccurred(text_of(e));
            m_chat = nullptr; // finished below as an error, whatever the abort reports
            reply->abort();
            finish_chat(FinishReason::Error);
            reply->deleteLater();
        }
    });
    connect(reply, &QNetworkReply::finished, this, [this, reply] {
        reply->deleteLater();
        if (m_chat != reply)
            return; // already finished (a stream error)
        m_chat = nullptr;
        if (m_stopping) {
            finish_chat(FinishReason::Stopped);
            return;
        }
        const bool started = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt() == 200;
        auto failure = failure_of(reply, started, m_stream.text().size());
        if (!failure) {
            try {
                m_stream.finish();
            } catch (const remote::ClientError &) {
                failure = remote::dropped_stream_error(m_url.toStdString(), m_stream.text().size());
            }
        }
        if (failure) {
            emit errorOccurred(text_of(*failure));
            finish_chat(FinishReason::Error);
            return;
        }
        finish_chat(reason_of(m_stream.finish_reason()));
    });
}

void RemoteWorker::finish_chat(FinishReason reason)
{
    m_summary.reason = reason;
    const double total = double(m_started.nsecsElapsed()) / 1e9;
    RemoteRequestMetrics rm;
    rm.time_to_first_token_s = m_first_token_ns >= 0 ? double(m_first_token_ns) / 1e9 : total;
    if (const auto &u = m_stream.usage()) {
        rm.prompt_tokens = u->prompt_tokens;
        rm.completion_tokens = u->completion_tokens;
    }
    rm.context_tokens = rm.prompt_tokens + rm.completion_tokens;
    const double decode_s = total - rm.time_to_first_token_s;
    if (rm.completion_tokens > 1 && decode_s > 0)
        rm.decode_tokens_per_second = (rm.completion_tokens - 1) / decode_s;
    m_summary.prompt_tokens = rm.prompt_tokens;
    m_summary.generated_tokens = rm.completion_tokens;
    m_summary.decode_tokens_per_second = rm.decode_tokens_per_second;
    if (m_stream.usage()) {
        emit promptFitted(rm.prompt_tokens, 0, false);
        emit requestMetrics(rm);
        StepMetrics step;
        step.step = m_steps++;
        step.phase = StepPhase::Decode;
        step.n_tokens = rm.completion_tokens;
        step.position = rm.context_tokens;
        step.seconds = decode_s;
        step.tokens_per_second = rm.decode_tokens_per_second;
        if (m_last_poll) {
            const auto &mem = m_last_poll->metrics.memory_bytes;
            auto get = [&](const char *k) { auto it = mem.find(k); return it == mem.end() ? uint64_t(0) : uint64_t(it->second); };
            step.memory.weights = get("weights");
            step.memory.kv_reserved = get("kv_reserved");
            step.memory.kv_resident = get("kv_resident");
            step.memory.scratch = get("scratch");
            step.memory.total = get("total");
            step.memory.process_rss = get("process_rss");
        }
        emit stepMetrics(step);
    }
    emit generationFinished(m_summary);
}

void RemoteWorker::requestStop()
{
    if (!m_chat)
        return;
    m_stopping = true;
    m_chat->abort(); // closes the connection: the server cancels the generation
}

void RemoteWorker::setSettings(const longscope::Settings &settings) { m_settings = settings; }

void RemoteWorker::setPollInterval(int ms)
{
    if (ms > 0)
        m_poll.start(ms);
    else
        m_poll.stop();
}

void RemoteWorker::pollMetrics()
{
    if (!m_base || m_poll_busy)
        return;
    m_poll_busy = true;
    QNetworkReply *reply = send(m_base->root("/metrics"), nullptr);
    connect(reply, &QNetworkReply::finished, this, [this, reply] {
        reply->deleteLater();
        m_poll_busy = false;
        if (auto f = failure_of(reply, false, 0)) {
            const bool missing = f->failure() == remote::Failure::NotFound || f->failure() == remote::Failure::ModelNotFound;
            emit metricsUnavailable(missing ? QStringLiteral("the server publishes no /metrics (llama-server needs "
                                                             "--metrics, SGLang --enable-metrics)")
                                            : text_of(*f));
            return;
        }
        RemoteServerMetrics out;
        out.seconds_since_start = m_clock.elapsed() / 1000.0;
        try {
            out.metrics = remote::server_metrics(remote::parse_metrics(reply->readAll().toStdString()));
        } catch (const remote::MetricsParseError &e) {
            emit metricsUnavailable(QStringLiteral("the server's /metrics cannot be read: %1").arg(e.what()));
            return;
        }
        if (m_last_poll)
            out.generation_tokens_per_second = remote::generation_rate(
                m_last_poll->metrics, out.metrics, out.seconds_since_start - m_last_poll->seconds_since_start);
        if (!out.generation_tokens_per_second)
            out.generation_tokens_per_second = out.metrics.generation_tokens_per_second;
        m_last_poll = out;
        emit serverMetrics(out);
    });
}

} // namespace longscope::ui
