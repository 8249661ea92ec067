#include "core/remote_worker.h"

#include "remote/prometheus.h"

#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QDateTime>
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

RemoteWorker::RemoteWorker(QObject *parent) : InferenceWorker(parent), m_nam(new QNetworkAccessManager(this))
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

void RemoteWorker::setModelInfo(const RemoteModelInfo &info)
{
    m_owned_by = info.owned_by;
    m_context_length = info.context_length;
}

void RemoteWorker::setEndpoint(const QString &baseUrl, const QString &apiKey, const QString &model)
{
    m_url = baseUrl;
    m_key = apiKey;
    m_model = model;
    m_base.reset();
    m_last_poll.reset();
    m_context_length = 0;
    m_document.clear();
    m_document_tokens = 0;
    m_settings.reset();
    m_settings_unsent = false;
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
                               QString::fromStdString(m.architecture), QString::fromStdString(m.owned_by)});
                if (QString::fromStdString(m.id) == m_model || m_model.isEmpty()) {
                    m_owned_by = QString::fromStdString(m.owned_by);
                    m_context_length = m.context_length.value_or(0);
                }
            }
            emit modelsListed(out);
        } catch (const remote::ClientError &e) {
            emit errorOccurred(text_of(e));
        }
    });
}

// ---------------------------------------------------------------------------------------
// Jobs

quint64 RemoteWorker::enqueue(std::function<void()> start, std::function<void()> cancelled)
{
    const quint64 number = ++m_last_job;
    m_jobs.push_back({number, std::move(start), std::move(cancelled)});
    QMetaObject::invokeMethod(this, [this] { pump(); }, Qt::QueuedConnection);
    return number;
}

void RemoteWorker::pump()
{
    while (!m_busy && !m_jobs.empty()) {
        Job job = std::move(m_jobs.front());
        m_jobs.pop_front();
        if (job.number <= m_cancelled_through) {
            job.cancelled();
            continue;
        }
        m_busy = true;
        job.start();
    }
}

void RemoteWorker::job_done()
{
    m_busy = false;
    QMetaObject::invokeMethod(this, [this] { pump(); }, Qt::QueuedConnection);
}

bool RemoteWorker::ready_or_say()
{
    if (m_base && !m_model.isEmpty())
        return true;
    emit errorOccurred(QStringLiteral("no remote server and model are set"));
    return false;
}

void RemoteWorker::requestStop()
{
    m_cancelled_through = m_last_job;
    if (!m_chat)
        return;
    m_stopping = true;
    m_chat->abort(); // closes the connection: the server cancels the generation
}

QString RemoteWorker::explorePerplexityNeeds()
{
    return QStringLiteral("Explore needs a local model or a server that returns prompt log-probabilities (echo with "
                          "logprobs)");
}

// ---------------------------------------------------------------------------------------
// Chat and continue

remote::SamplingFields RemoteWorker::sampling(const GenerationParams &p) const
{
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
    return s;
}

quint64 RemoteWorker::queueChat(const ChatRequest &request)
{
    return enqueue([this, request] { run_chat(request); },
                   [this] {
                       emit generationStarted();
                       GenerationSummary stopped;
                       stopped.reason = FinishReason::Stopped;
                       emit generationFinished(stopped);
                   });
}

void RemoteWorker::generateChat(const ChatRequest &request)
{
    if (m_busy) {
        emit generationStarted();
        emit errorOccurred(QStringLiteral("a reply is still streaming from the server"));
        GenerationSummary busy;
        busy.reason = FinishReason::Error;
        emit generationFinished(busy);
        return;
    }
    ++m_last_job; // numbered as it starts
    m_busy = true;
    run_chat(request);
}

void RemoteWorker::run_chat(const ChatRequest &request)
{
    std::vector<remote::ChatTurn> turns;
    // The document (a book streamed in) goes ahead of the system prompt, as the local context
    // holds it ahead of the chat.
    QString system = m_document;
    if (!request.system_prompt.isEmpty())
        system = system.isEmpty() ? request.system_prompt : system + QStringLiteral("\n\n") + request.system_prompt;
    if (!system.isEmpty())
        turns.push_back({"system", system.toStdString()});
    for (const ChatTurn &t : request.turns)
        turns.push_back({t.role == ChatTurn::Role::User ? "user" : "assistant", t.text.toStdString()});
    remote::json body = remote::chat_request(m_model.toStdString(), turns, sampling(request.params), true);
    attach_settings(body);
    stream_reply("/chat/completions", body, [this] { job_done(); });
}

quint64 RemoteWorker::queueContinue(const GenerationParams &params)
{
    return enqueue([this, params] { run_continue(params); },
                   [this] {
                       emit generationStarted();
                       GenerationSummary stopped;
                       stopped.reason = FinishReason::Stopped;
                       emit generationFinished(stopped);
                   });
}

void RemoteWorker::run_continue(const GenerationParams &params)
{
    remote::json body =
        remote::completion_request(m_model.toStdString(), m_document.toStdString(), sampling(params), true);
    attach_settings(body);
    stream_reply("/completions", body, [this] {
        // What was written joins the document: the next Continue goes on from it.
        m_document += m_summary.text;
        if (m_summary.prompt_tokens > 0)
            m_document_tokens = m_summary.prompt_tokens + m_summary.generated_tokens;
        job_done();
    });
}

void RemoteWorker::stream_reply(const std::string &path, const remote::json &body, std::function<void()> done)
{
    emit generationStarted();
    m_summary = GenerationSummary{};
    if (!ready_or_say()) {
        m_summary.reason = FinishReason::Error;
        emit generationFinished(m_summary);
        done();
        return;
    }
    m_sse = remote::SseDecoder{};
    m_stream = remote::StreamState{};
    m_stopping = false;
    m_first_token_ns = -1;
    m_text_reads = 0;
    m_started.start();
    m_chat = send(m_base->api(path), &body);
    QNetworkReply *reply = m_chat;
    connect(reply, &QNetworkReply::readyRead, this, [this, reply, done] {
        if (reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt() != 200)
            return; // an error body, read when the reply finishes
        try {
            bool text_read = false;
            for (const std::string &event : m_sse.feed(reply->readAll().toStdString())) {
                const std::string piece = m_stream.feed(event);
                if (!piece.empty() && !text_read) {
                    text_read = true;
                    ++m_text_reads;
                }
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
            done();
        }
    });
    connect(reply, &QNetworkReply::finished, this, [this, reply, done] {
        reply->deleteLater();
        if (m_chat != reply)
            return; // already finished (a stream error)
        m_chat = nullptr;
        if (m_stopping) {
            finish_chat(FinishReason::Stopped);
            done();
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
        } else {
            finish_chat(reason_of(m_stream.finish_reason()));
        }
        done();
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
    double decode_s = total - rm.time_to_first_token_s;
    if (m_text_reads < 2) {
        // The reply came in one read (a fast server, or one that buffers): the time after
        // the first token says nothing, so the whole request is the decode time, a lower bound.
        decode_s = total;
        if (rm.completion_tokens > 0 && decode_s > 0)
            rm.decode_tokens_per_second = rm.completion_tokens / decode_s;
    } else if (rm.completion_tokens > 1 && decode_s > 0) {
        rm.decode_tokens_per_second = (rm.completion_tokens - 1) / decode_s;
    }
    settings_answered(reason != FinishReason::Error && reason != FinishReason::Stopped && m_stream.usage(),
                      rm.prompt_tokens);
    m_summary.prompt_tokens = rm.prompt_tokens;
    m_summary.generated_tokens = rm.completion_tokens;
    m_summary.decode_tokens_per_second = rm.decode_tokens_per_second;
    if (m_stream.usage()) {
        emit promptFitted(rm.prompt_tokens, 0, false);
        emit requestMetrics(rm);
        // The prompt as a prefill step (its tokens over the time to the first token, what a
        // local run plots as prefill), then the reply as one decode step.
        StepMetrics prefill;
        prefill.step = m_steps++;
        prefill.phase = StepPhase::Prefill;
        prefill.n_tokens = rm.prompt_tokens;
        prefill.position = rm.prompt_tokens;
        prefill.seconds = rm.time_to_first_token_s;
        prefill.tokens_per_second = rm.time_to_first_token_s > 0 ? rm.prompt_tokens / rm.time_to_first_token_s : 0;
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
        prefill.memory = step.memory;
        emit stepMetrics(prefill);
        emit stepMetrics(step);
    }
    emit generationFinished(m_summary);
}

// ---------------------------------------------------------------------------------------
// Books, perplexity, needles

std::optional<remote::ClientError> RemoteWorker::finished_failure(QNetworkReply *reply, bool *stopped)
{
    reply->deleteLater();
    if (m_chat == reply)
        m_chat = nullptr;
    *stopped = m_stopping;
    if (m_stopping)
        return std::nullopt;
    return failure_of(reply, false, 0);
}

quint64 RemoteWorker::queueStream(const QString &text, int chunk_tokens)
{
    Q_UNUSED(chunk_tokens);
    return enqueue([this, text] { run_stream(text); }, [this] { emit streamFinished(true, m_document_tokens); });
}

void RemoteWorker::run_stream(const QString &text)
{
    if (!ready_or_say()) {
        emit streamFinished(true, m_document_tokens);
        job_done();
        return;
    }
    // One token generated over the whole document: the server evaluates the prompt (and keeps
    // it in its prefix cache where it has one), and its usage counts the tokens.
    const QString document = m_document + text;
    remote::SamplingFields one;
    one.max_tokens = 1;
    one.temperature = 0.0;
    remote::json body = remote::completion_request(m_model.toStdString(), document.toStdString(), one, false);
    attach_settings(body);
    m_stopping = false;
    m_started.start();
    emit streamProgress(0, 1);
    m_chat = send(m_base->api("/completions"), &body);
    QNetworkReply *reply = m_chat;
    connect(reply, &QNetworkReply::finished, this, [this, reply, document] {
        bool stopped = false;
        std::optional<remote::ClientError> failure = finished_failure(reply, &stopped);
        std::optional<remote::Usage> usage;
        if (!stopped && !failure) {
            try {
                usage = remote::parse_completion(reply->readAll().toStdString(), false).usage;
                if (!usage)
                    failure = remote::ClientError(remote::Failure::Protocol, "the server's answer has no 'usage'");
            } catch (const remote::ClientError &e) {
                failure = e;
            }
        }
        if (failure)
            emit errorOccurred(text_of(*failure));
        if (stopped || failure) {
            settings_answered(false, 0);
            emit streamFinished(true, m_document_tokens);
            job_done();
            return;
        }
        const double seconds = double(m_started.nsecsElapsed()) / 1e9;
        const int total = usage->prompt_tokens;
        const int added = std::max(0, total - m_document_tokens);
        m_document = document;
        m_document_tokens = total;
        settings_answered(true, total);
        emit streamFitted(added, added);
        emit streamProgress(added, added);
        StepMetrics step;
        step.step = m_steps++;
        step.phase = StepPhase::Prefill;
        step.n_tokens = added;
        step.position = total;
        step.seconds = seconds;
        step.tokens_per_second = seconds > 0 ? added / seconds : 0;
        emit stepMetrics(step);
        emit streamFinished(false, total);
        job_done();
    });
}

void RemoteWorker::queueResetContext()
{
    m_document.clear();
    m_document_tokens = 0;
}

quint64 RemoteWorker::queuePerplexity(const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                                      const QString &label, qint64 maxTokens)
{
    auto result = [=, this] {
        PerplexityRunResult r;
        r.label = label;
        r.settings = settings;
        r.ctx = ctx;
        r.bucket = bucket;
        r.n_ctx_train = m_context_length;
        r.model_name = m_model;
        r.created = QDateTime::currentDateTimeUtc();
        return r;
    };
    return enqueue([this, text, label, result, maxTokens] { run_perplexity(text, label, result(), maxTokens); },
                   [this, label, result] {
                       PerplexityRunResult r = result();
                       r.cancelled = true;
                       emit perplexityFinished(label, r);
                   });
}

void RemoteWorker::post_then(const std::string &path, const remote::json &body, Answer answer)
{
    m_chat = send(path, &body);
    QNetworkReply *reply = m_chat;
    connect(reply, &QNetworkReply::finished, this, [this, reply, answer] {
        bool stopped = false;
        const std::optional<remote::ClientError> failure = finished_failure(reply, &stopped);
        answer(stopped, failure, stopped || failure ? std::string() : reply->readAll().toStdString());
    });
}

void RemoteWorker::end_perplexity(const QString &label, PerplexityRunResult r, const QString &error)
{
    if (!error.isEmpty()) {
        r.error = error;
        emit errorOccurred(error);
    }
    r.seconds = double(m_started.nsecsElapsed()) / 1e9;
    r.created = QDateTime::currentDateTimeUtc();
    emit perplexityFinished(label, r);
    job_done();
}

QString RemoteWorker::perplexity_failure(const remote::ClientError &error) const
{
    const remote::ClientError e = remote::prompt_logprobs_failure(error);
    // A server that sends no prompt log-probabilities; one that refuses the request (the
    // fields, or a window longer than its context).
    if (e.failure() == remote::Failure::Unsupported)
        return QStringLiteral("%1: %2").arg(explorePerplexityNeeds(), text_of(e));
    if (e.failure() == remote::Failure::BadRequest)
        return QStringLiteral("%1. Each window must fit the server's context (%2 tokens), and the server must return "
                              "prompt log-probabilities (echo with logprobs)")
            .arg(text_of(e))
            .arg(m_context_length > 0 ? QString::number(m_context_length) : QStringLiteral("?"));
    return text_of(e);
}

void RemoteWorker::run_perplexity(const QString &text, const QString &label, PerplexityRunResult r, qint64 maxTokens)
{
    if (!m_base || m_model.isEmpty())
        return end_perplexity(label, r, QStringLiteral("no remote server and model are set"));
    m_stopping = false;
    m_started.start();
    m_evaluated = 0;
    emit perplexityProgress(label, 0, 1);
    // The token boundaries from the server's tokenizer: the text's tokens, then what it puts
    // ahead of a text (BOS).
    const std::string model = m_model.toStdString();
    const std::string route = m_base->root("/tokenize");
    post_then(route, remote::tokenize_request(model, text.toStdString(), false),
              [=, this](bool stopped, const std::optional<remote::ClientError> &failure, const std::string &body) mutable {
        if (stopped) {
            r.cancelled = true;
            return end_perplexity(label, r);
        }
        std::vector<int32_t> tokens;
        try {
            if (failure)
                throw *failure;
            tokens = remote::parse_tokens(body);
        } catch (const remote::ClientError &e) {
            if (!remote::no_tokenizer_endpoint(e))
                return end_perplexity(label, r, text_of(e));
            r.note = QString::fromStdString(remote::one_window_note());
            return run_one_window(text, label, r);
        }
        if (maxTokens > 0 && qint64(tokens.size()) > maxTokens)
            tokens.resize(size_t(maxTokens));
        post_then(route, remote::tokenize_request(model, std::string(), true),
                  [=, this, tokens = std::move(tokens)](bool stopped2, const std::optional<remote::ClientError> &failure2,
                                                        const std::string &body2) mutable {
            if (stopped2) {
                r.cancelled = true;
                return end_perplexity(label, r);
            }
            std::shared_ptr<remote::WindowedScoring> scoring;
            try {
                if (failure2)
                    throw *failure2;
                scoring = make_scoring(std::move(tokens), remote::parse_tokens(body2), r);
            } catch (const remote::ClientError &e) {
                return end_perplexity(label, r, text_of(e));
            } catch (const std::invalid_argument &e) {
                return end_perplexity(label, r, QString::fromStdString(e.what()));
            }
            score_windows(scoring, label, r);
        });
    });
}

std::shared_ptr<remote::WindowedScoring> RemoteWorker::make_scoring(std::vector<int32_t> tokens,
                                                                    std::vector<int32_t> prefix, PerplexityRunResult &r)
{
    // As the local run: through one context of the run's length when the overflow policy
    // streams (the server cannot shift its context, so under shift it stops there too),
    // windows otherwise; each request leaves one token of the server's context for the token
    // it generates.
    r.streamed = perplexityStreams(r.settings);
    const int room = m_context_length > 0 ? m_context_length - 1 - (r.streamed ? 1 : 0) : 0;
    QStringList notes;
    if (room > 1 && r.ctx > room) {
        notes << QStringLiteral("scored to %1 tokens, the server's context (%2) less the token each request generates")
                     .arg(room)
                     .arg(m_context_length);
        r.ctx = room;
    }
    if (r.settings.overflow == longscope::OverflowPolicy::Shift)
        notes << QStringLiteral("a remote server cannot shift its context: the run stops where it is full");
    r.note = notes.join(QStringLiteral("; "));
    auto scoring = std::make_shared<remote::WindowedScoring>(std::move(tokens), std::move(prefix), r.ctx, 0, r.streamed);
    r.n_total = scoring->total();
    r.stopped = QString::fromStdString(scoring->stopped());
    return scoring;
}

void RemoteWorker::score_windows(const std::shared_ptr<remote::WindowedScoring> &scoring, const QString &label,
                                 PerplexityRunResult r)
{
    if (scoring->done()) {
        r.windows = scoring->windows();
        r.steps = r.windows;
        finish_curves(r, scoring->curve(r.bucket), scoring->text_curve(r.bucket));
        return end_perplexity(label, r);
    }
    const remote::json body = scoring->request(m_model.toStdString());
    m_evaluated += qint64(body["prompt"].size());
    post_then(m_base->api("/completions"), body,
              [=, this](bool stopped, const std::optional<remote::ClientError> &failure, const std::string &answer) mutable {
        if (stopped) {
            // What was scored stays, as a cancelled local run keeps it.
            r.cancelled = true;
            r.windows = scoring->windows_done();
            if (scoring->scored() > 0)
                finish_curves(r, scoring->curve(r.bucket), scoring->text_curve(r.bucket));
            return end_perplexity(label, r);
        }
        try {
            if (failure)
                throw *failure;
            scoring->add(remote::parse_prompt_logprobs(answer));
        } catch (const remote::ClientError &e) {
            return end_perplexity(label, r, perplexity_failure(e));
        }
        emit perplexityProgress(label, scoring->scored(), scoring->total());
        score_windows(scoring, label, r);
    });
}

void RemoteWorker::run_one_window(const QString &text, const QString &label, PerplexityRunResult r)
{
    const remote::json body = remote::prompt_logprobs_request(m_model.toStdString(), text.toStdString());
    post_then(m_base->api("/completions"), body,
              [=, this](bool stopped, const std::optional<remote::ClientError> &failure, const std::string &answer) mutable {
        if (stopped) {
            r.cancelled = true;
            return end_perplexity(label, r);
        }
        remote::PromptLogprobs lp;
        try {
            if (failure)
                throw *failure;
            lp = remote::parse_prompt_logprobs(answer);
        } catch (const remote::ClientError &e) {
            return end_perplexity(label, r, perplexity_failure(e));
        }
        if (lp.logprobs.empty())
            return end_perplexity(label, r, QStringLiteral("the text is too short to score (fewer than 2 tokens)"));
        // One window from the text's start: the position in the window is the index in the text.
        r.ctx = m_context_length > 0 ? m_context_length : r.ctx;
        const remote::NllCurve curve = remote::nll_by_position(lp, r.bucket, m_context_length);
        r.windows = 1;
        r.steps = 1;
        r.n_total = curve.n_scored;
        m_evaluated = qint64(lp.tokens.size());
        finish_curves(r, curve, curve);
        end_perplexity(label, r);
    });
}

void RemoteWorker::finish_curves(PerplexityRunResult &r, const remote::NllCurve &curve,
                                 const remote::NllCurve &text_curve)
{
    const auto points = [](const remote::NllCurve &c) {
        QVector<PerplexityPoint> out;
        for (const remote::NllBucket &b : c.buckets)
            out.append(PerplexityPoint{b.begin, b.end, qint64(b.count), b.mean_nll});
        return out;
    };
    r.curve = points(curve);
    r.text_curve = points(text_curve);
    r.mean_nll = curve.mean_nll;
    r.n_scored = curve.n_scored;
    const double seconds = double(m_started.nsecsElapsed()) / 1e9;
    r.tokens_per_second = seconds > 0 ? double(m_evaluated) / seconds : 0;
    if (m_last_poll)
        if (auto it = m_last_poll->metrics.memory_bytes.find("total"); it != m_last_poll->metrics.memory_bytes.end())
            r.peak_memory_bytes = qint64(it->second);
    emit perplexityProgress(r.label, r.n_scored, r.n_scored);
}

QString RemoteWorker::needleNeedsLocal()
{
    return QStringLiteral("Needle grids run on a local model only: they need the engine's own sessions, which a "
                          "remote server does not offer. Open a model file (File > Open Model…) to run them.");
}

quint64 RemoteWorker::queueNeedle(const NeedleRequest &request, const QString &bookText)
{
    Q_UNUSED(bookText);
    const QString label = request.label;
    auto refuse = [this, label] {
        NeedleRunResult r;
        r.label = label;
        r.error = needleNeedsLocal();
        emit errorOccurred(r.error);
        emit needleFinished(label, r);
    };
    return enqueue([this, refuse] {
        refuse();
        job_done();
    }, refuse);
}

void RemoteWorker::setSettings(const longscope::Settings &settings)
{
    // The first settings of an endpoint are where it starts, not a change.
    m_settings_unsent = m_settings_unsent || (m_settings && *m_settings != settings);
    m_settings = settings;
}

void RemoteWorker::attach_settings(remote::json &body)
{
    m_settings_in_flight = false;
    if (!m_settings || !capabilities().per_request_settings)
        return;
    put_settings(body, *m_settings);
    m_settings_in_flight = m_settings_unsent;
    m_settings_unsent = false;
}

void RemoteWorker::settings_answered(bool answered, int position)
{
    if (!m_settings_in_flight)
        return;
    m_settings_in_flight = false;
    if (!answered) {
        m_settings_unsent = true; // the next request carries them again
        return;
    }
    emit settingsApplied(m_steps, position, *m_settings);
}

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
