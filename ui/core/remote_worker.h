// A remote engine behind the same signals as EngineWorker: chat replies stream from an
// OpenAI-compatible server's /v1/chat/completions (server-sent events over
// QNetworkAccessManager, the protocol of remote/), Stop aborts the request, and what the plots
// need is measured here (time to first token, decode tokens/s, tokens in context) and polled
// from the server's Prometheus /metrics when it has one. Like EngineWorker it may live on a
// thread of its own; its slots are then called through queued connections.
#pragma once

#include "core/engine_worker.h"

#include "remote/openai_client.h"
#include "remote/server_metrics.h"

#include <QElapsedTimer>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <QVector>

#include <optional>

class QNetworkAccessManager;
class QNetworkReply;

namespace longscope::ui {

struct RemoteModelInfo {
    QString id;
    int context_length = 0; // 0: the server does not say
    QString architecture;
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

class RemoteWorker : public QObject {
    Q_OBJECT

public:
    explicit RemoteWorker(QObject *parent = nullptr);
    ~RemoteWorker() override;

    // Seconds without data before a request is given up (connecting, the first token, and
    // between chunks).
    void setTimeout(double seconds) { m_timeout_s = seconds; }
    // What the long-context panel may offer for the current endpoint (after listModels()).
    RemoteCapabilities capabilities() const;

public slots:
    // The server to talk to. An invalid URL is reported through errorOccurred.
    void setEndpoint(const QString &baseUrl, const QString &apiKey, const QString &model);
    // GET /v1/models: modelsListed, or errorOccurred.
    void listModels();
    // Streams a reply: generationStarted, tokenStreamed..., then exactly one
    // generationFinished (Stopped after requestStop(), Error after an errorOccurred with the
    // text that came kept in the summary).
    void generateChat(const longscope::ui::ChatRequest &request);
    // Aborts the reply being streamed.
    void requestStop();
    // The long-context switches, sent with each chat request to a server that takes them
    // (capabilities().per_request_settings: NTK alpha, keys before RoPE, the attention
    // switches, the KV mode); other servers fix them when they start.
    void setSettings(const longscope::Settings &settings);
    // GET /metrics once (serverMetrics, or metricsUnavailable), and every `ms` after when
    // positive.
    void pollMetrics();
    void setPollInterval(int ms);

signals:
    void modelsListed(const QVector<longscope::ui::RemoteModelInfo> &models);
    void generationStarted();
    void promptFitted(int prompt_tokens, int dropped_turns, bool truncated);
    void tokenStreamed(const QString &text);
    void generationFinished(const longscope::ui::GenerationSummary &summary);
    void requestMetrics(const longscope::ui::RemoteRequestMetrics &metrics);
    // The client's measurements in the shape the speed and memory plots take: one step per
    // reply (decode tokens/s, context length; the ledger from the server's when it gives one).
    void stepMetrics(const longscope::StepMetrics &metrics);
    void serverMetrics(const longscope::ui::RemoteServerMetrics &metrics);
    void metricsUnavailable(const QString &reason);
    void errorOccurred(const QString &message);

private:
    QNetworkReply *send(const std::string &path, const remote::json *body);
    // The failure of a finished reply as a ClientError (nullopt: it succeeded).
    std::optional<remote::ClientError> failure_of(QNetworkReply *reply, bool stream_started, size_t text_bytes);
    // Ends the reply: the client's measurements when usage came, then generationFinished.
    void finish_chat(FinishReason reason);

    QNetworkAccessManager *m_nam;
    QString m_url;
    std::optional<remote::BaseUrl> m_base;
    QString m_key;
    QString m_model;
    QString m_owned_by;
    std::optional<longscope::Settings> m_settings;
    double m_timeout_s = 120;

    // The reply being streamed.
    QPointer<QNetworkReply> m_chat;
    remote::SseDecoder m_sse;
    remote::StreamState m_stream;
    GenerationSummary m_summary;
    bool m_stopping = false;
    bool m_timed_out = false;
    QElapsedTimer m_started;
    qint64 m_first_token_ns = -1; // nanoseconds after the request, -1 before the first token
    qint64 m_steps = 0;

    QTimer m_poll;
    QElapsedTimer m_clock;
    std::optional<RemoteServerMetrics> m_last_poll;
    bool m_poll_busy = false;
};

} // namespace longscope::ui

Q_DECLARE_METATYPE(longscope::ui::RemoteModelInfo)
Q_DECLARE_METATYPE(longscope::ui::RemoteRequestMetrics)
Q_DECLARE_METATYPE(longscope::ui::RemoteServerMetrics)
