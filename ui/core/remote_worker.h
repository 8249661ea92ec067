// A remote engine behind the same interface as EngineWorker (InferenceWorker): chat replies
// stream from an OpenAI-compatible server's /v1/chat/completions (server-sent events over
// QNetworkAccessManager, the protocol of remote/), Stop aborts the request, a book goes ahead
// of the chat as a long prompt, Explore's perplexity comes from the prompt's log-probabilities,
// and what the plots need is measured here (time to first token, decode tokens/s, tokens in
// context) and polled from the server's Prometheus /metrics when it has one. Its requests are
// asynchronous, so it lives on the thread that drives it (the window's).
#pragma once

#include "core/inference_worker.h"

#include "remote/openai_client.h"
#include "remote/server_metrics.h"

#include <QElapsedTimer>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <QVector>

#include <deque>
#include <functional>
#include <memory>
#include <optional>

class QNetworkAccessManager;
class QNetworkReply;

namespace longscope::ui {

struct RemoteModelInfo {
    QString id;
    int context_length = 0; // 0: the server does not say
    QString architecture;
    QString owned_by;       // "longscope" for `longscope-cli serve`
};

// One reply as the client saw it.
struct RemoteRequestMetrics {
    double time_to_first_token_s = 0;
    double decode_tokens_per_second = 0; // tokens after the first over the time after it
    int prompt_tokens = 0;
    int completion_tokens = 0;
    int context_tokens = 0; // prompt + completion: what the server's context held
};

// One poll of the server's /metrics.
struct RemoteServerMetrics {
    remote::ServerMetrics metrics;
    double seconds_since_start = 0;                  // on the client's clock
    std::optional<double> generation_tokens_per_second; // from the counters between two polls, or the server's gauge
};

// What a remote engine cannot switch per request, for the long-context panel: the toggle
// names (as Settings spells them) with the reason. Empty for a Longscope server, which takes
// them as request fields.
struct RemoteCapabilities {
    bool per_request_settings = false; // Longscope serve: ntk_alpha, kv_mode, ... per request
    QString reason;                    // why the long-context toggles are greyed otherwise
};

class RemoteWorker : public InferenceWorker {
    Q_OBJECT

public:
    explicit RemoteWorker(QObject *parent = nullptr);
    ~RemoteWorker() override;

    // Seconds without data before a request is given up (connecting, the first token, and
    // between chunks).
    void setTimeout(double seconds) { m_timeout_s = seconds; }
    // What the long-context panel may offer for the current endpoint (after listModels()).
    RemoteCapabilities capabilities() const;
    // What /v1/models said of the model in use (listed by another worker, say): its context
    // length and who serves it (capabilities()).
    void setModelInfo(const RemoteModelInfo &info);
    // The text streamed in ahead of the chat (books, and what Continue wrote after them): each
    // chat request carries it in front of the system prompt, as the local context holds it.
    const QString &document() const { return m_document; }
    int documentTokens() const { return m_document_tokens; }

    // InferenceWorker. The jobs run one after another on this object's thread.
    quint64 queueChat(const longscope::ui::ChatRequest &request) override;
    // Continues the document through /v1/completions (streamed); the text joins the document.
    quint64 queueContinue(const longscope::ui::GenerationParams &params) override;
    // Appends `text` to the document and has the server evaluate it (a one-token completion
    // over the whole document), which counts its tokens; `chunk_tokens` is not used: the
    // server takes the prompt whole.
    quint64 queueStream(const QString &text, int chunk_tokens) override;
    void queueResetContext() override;
    // Perplexity by position from the server's prompt log-probabilities (/v1/completions with
    // echo and logprobs), in the local run's windows of `ctx` tokens (or through one context
    // of `ctx` when the overflow policy streams) over the text's first `maxTokens` tokens: the
    // server's /tokenize gives the token boundaries and each window goes as token ids. `ctx`
    // is cut to the server's context less the token a request generates. A server without
    // /tokenize scores the whole text as one window (the run's note says so). The other
    // `settings` are the server's.
    quint64 queuePerplexity(const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                            const QString &label, qint64 maxTokens = 0) override;
    // Needle grids need a local model: answered at once with that error.
    quint64 queueNeedle(const longscope::ui::NeedleRequest &request, const QString &bookText = QString()) override;

    // Explore's messages for what a remote server cannot run.
    static QString explorePerplexityNeeds();
    static QString needleNeedsLocal();

public slots:
    // The server to talk to. An invalid URL is reported through errorOccurred.
    void setEndpoint(const QString &baseUrl, const QString &apiKey, const QString &model);
    // GET /v1/models: modelsListed, or errorOccurred.
    void listModels();
    // Streams a reply: generationStarted, tokenStreamed..., then exactly one
    // generationFinished (Stopped after requestStop(), Error after an errorOccurred with the
    // text that came kept in the summary).
    void generateChat(const longscope::ui::ChatRequest &request);
    // Aborts the request in flight and cancels the jobs queued so far.
    void requestStop() override;
    // The long-context switches, sent with each chat, book and Continue request to a server
    // that takes them (capabilities().per_request_settings: NTK alpha, keys before RoPE, the
    // attention switches, the KV mode); other servers fix them when they start. A change is
    // reported by settingsApplied when the first request that carries it is answered.
    void setSettings(const longscope::Settings &settings) override;
    // GET /metrics once (serverMetrics, or metricsUnavailable), and every `ms` after when
    // positive.
    void pollMetrics();
    void setPollInterval(int ms);

signals:
    void modelsListed(const QVector<longscope::ui::RemoteModelInfo> &models);
    // The client's measurements of one reply; stepMetrics carries them in the shape the speed
    // and memory plots take (one step per reply, the ledger from the server's when it gives one).
    void requestMetrics(const longscope::ui::RemoteRequestMetrics &metrics);
    void serverMetrics(const longscope::ui::RemoteServerMetrics &metrics);
    void metricsUnavailable(const QString &reason);

private:
    struct Job {
        quint64 number = 0;
        std::function<void()> start;     // runs it; it calls job_done() when it ends
        std::function<void()> cancelled; // answers it as stopped without running it
    };
    quint64 enqueue(std::function<void()> start, std::function<void()> cancelled);
    void pump();
    void job_done();
    bool ready_or_say(); // a base URL and a model are set; errorOccurred otherwise

    QNetworkReply *send(const std::string &path, const remote::json *body);
    // The failure of a finished reply as a ClientError (nullopt: it succeeded).
    std::optional<remote::ClientError> failure_of(QNetworkReply *reply, bool stream_started, size_t text_bytes);
    // Streams `body` to `path` (a chat or a completion) into m_summary; `done` after
    // generationFinished.
    void stream_reply(const std::string &path, const remote::json &body, std::function<void()> done);
    // Ends the reply: the client's measurements when usage came, then generationFinished.
    void finish_chat(FinishReason reason);
    remote::SamplingFields sampling(const GenerationParams &p) const;
    // The long-context switches into a request's body where the server takes them; the
    // first request after a change carries it (m_settings_in_flight).
    void attach_settings(remote::json &body);
    // That request's end: settingsApplied at `position` (its prompt's tokens) when the server
    // answered it, else the change waits for the next request.
    void settings_answered(bool answered, int position);
    void run_chat(const ChatRequest &request);
    void run_stream(const QString &text);
    void run_continue(const GenerationParams &params);
    // The answer to a request that is not streamed: stopped (requestStop()), or its failure,
    // or its body.
    using Answer = std::function<void(bool stopped, const std::optional<remote::ClientError> &failure,
                                      const std::string &body)>;
    void post_then(const std::string &path, const remote::json &body, Answer answer);
    // `r`: the result with what was asked filled in.
    void run_perplexity(const QString &text, const QString &label, PerplexityRunResult r, qint64 maxTokens);
    // The windows of a run from the server's tokens (r's ctx, note, streamed, stopped and
    // n_total set); throws std::invalid_argument for a text or window too short.
    std::shared_ptr<remote::WindowedScoring> make_scoring(std::vector<int32_t> tokens, std::vector<int32_t> prefix,
                                                          PerplexityRunResult &r);
    void score_windows(const std::shared_ptr<remote::WindowedScoring> &scoring, const QString &label,
                       PerplexityRunResult r);
    // The text as one window (a server without /tokenize).
    void run_one_window(const QString &text, const QString &label, PerplexityRunResult r);
    void finish_curves(PerplexityRunResult &r, const remote::NllCurve &curve, const remote::NllCurve &text_curve);
    // perplexityFinished (after errorOccurred when `error` is set), and the next job.
    void end_perplexity(const QString &label, PerplexityRunResult r, const QString &error = {});
    QString perplexity_failure(const remote::ClientError &e) const;
    // The finished `reply` of a job that is not streamed (deleted later): its failure, none
    // when it succeeded or requestStop() aborted it (`stopped`).
    std::optional<remote::ClientError> finished_failure(QNetworkReply *reply, bool *stopped);

    QNetworkAccessManager *m_nam;
    QString m_url;
    std::optional<remote::BaseUrl> m_base;
    QString m_key;
    QString m_model;
    QString m_owned_by;
    int m_context_length = 0;
    std::optional<longscope::Settings> m_settings;
    bool m_settings_unsent = false;   // changed since the last request that carried them
    bool m_settings_in_flight = false; // the request in flight carries a change
    double m_timeout_s = 120;

    // Jobs: numbered as queued; requestStop() cancels those numbered up to m_last_job.
    std::deque<Job> m_jobs;
    bool m_busy = false;
    quint64 m_last_job = 0;
    quint64 m_cancelled_through = 0;

    QString m_document;
    int m_document_tokens = 0;

    // The request in flight (a streamed reply, a book, a perplexity run).
    QPointer<QNetworkReply> m_chat;
    remote::SseDecoder m_sse;
    remote::StreamState m_stream;
    GenerationSummary m_summary;
    bool m_stopping = false;
    QElapsedTimer m_started;
    qint64 m_first_token_ns = -1; // nanoseconds after the request, -1 before the first token
    int m_text_reads = 0;         // reads of the reply that brought text
    qint64 m_steps = 0;
    qint64 m_evaluated = 0; // prompt tokens a perplexity run's requests carried

    QTimer m_poll;
    QElapsedTimer m_clock;
    std::optional<RemoteServerMetrics> m_last_poll;
    bool m_poll_busy = false;
};

} // namespace longscope::ui

Q_DECLARE_METATYPE(longscope::ui::RemoteModelInfo)
Q_DECLARE_METATYPE(longscope::ui::RemoteRequestMetrics)
Q_DECLARE_METATYPE(longscope::ui::RemoteServerMetrics)
