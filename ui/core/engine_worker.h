// The engine on its own thread. An EngineWorker is moved to a QThread; the UI calls its slots
// through queued connections (or QMetaObject::invokeMethod) and listens to its signals.
// Stopping and changing settings must reach a generation that is running, so those two are
// thread-safe plain methods (atomics and a mutex-guarded pending value) that the decode loop
// checks at every step, not queued slots that would wait until the loop ends.
//
// Jobs (a chat reply, a continuation, a book streamed in, a perplexity run) are numbered in
// the order they are queued. requestStop() cancels every job queued so far, the one running
// and the ones still waiting behind it, and none queued after: a Stop pressed while a job
// waits in the queue is not lost when that job starts. The queue*() methods number a job as
// they queue it; a job started through its slot directly is numbered when it starts.
#pragma once

#include "core/inference_worker.h"

#include "longscope/engine.h"
#include "longscope/metrics.h"
#include "longscope/sampler.h"
#include "longscope/settings.h"

#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace longscope::ui {

class EngineWorker : public InferenceWorker {
    Q_OBJECT

public:
    explicit EngineWorker(int n_threads = 0, QObject *parent = nullptr);
    ~EngineWorker() override;

    // Thread-safe: called from the UI thread while the worker is busy.
    // Ends the generation, book or perplexity run at the next step, and cancels every job
    // queued before this call (each then finishes at once, as stopped).
    void requestStop() override;
    void cancelLoad();                                 // abandons a model load in progress
    void setSettings(const longscope::Settings &s) override; // applied at the next step
    longscope::Settings settings() const;

    // Thread-safe: queue a job on the worker's thread (the slot of the same name below) and
    // return its number, which grows with every job queued.
    quint64 queueChat(const longscope::ui::ChatRequest &request) override;
    // Renders the request's conversation with its template (without generating); answered by
    // chatPromptRendered with the returned number.
    quint64 queueRenderChat(const longscope::ui::ChatRequest &request);
    quint64 queueContinue(const longscope::ui::GenerationParams &params) override;
    quint64 queueStream(const QString &text, int chunk_tokens) override;
    void queueResetContext() override;
    quint64 queuePerplexity(const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                            const QString &label, qint64 maxTokens = 0) override;
    quint64 queueNeedle(const longscope::ui::NeedleRequest &request, const QString &bookText = QString()) override;

public slots:
    void loadModel(const QString &path);
    // Continues the conversation: formats the chat, evaluates what the context does not hold
    // yet, then streams the reply.
    void generateChat(const longscope::ui::ChatRequest &request);
    // Continues the text in the context (a book streamed in, for example) without a chat
    // template.
    void continueText(const longscope::ui::GenerationParams &params);
    // Appends `text` to the context chunk by chunk (`chunk_tokens` each), reporting progress
    // and metrics; stoppable with requestStop().
    void streamText(const QString &text, int chunk_tokens);
    // Forgets the context (the cache is kept, its contents cleared).
    void resetContext();
    // Perplexity by position: scores `text` (tokenized without BOS, nothing stripped; its
    // first `maxTokens` tokens, 0: all) with `settings` in a context of `ctx` tokens: streamed
    // through it when the overflow policy is error or shift (error stops where it is full,
    // the result says why), else in windows restarted when full (perplexityStreams); curve
    // points of `bucket` positions, by position in the context and in the text. The run has a session of its own, so the chat's context
    // and settings are untouched. Progress after every step; requestStop() cancels (the
    // result is then marked cancelled and covers what was scored). Ends with exactly one
    // perplexityFinished, after an errorOccurred when it failed (the result's error set).
    void runPerplexity(const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                       const QString &label, qint64 maxTokens = 0);
    // A needle-in-a-haystack grid (runNeedleGrid) on a session of its own, the book's text
    // (NeedleTask::Book) tokenized as for perplexity. Progress after every step;
    // requestStop() cancels. Ends with exactly one needleFinished, after an errorOccurred
    // when it failed (the result's error set).
    void runNeedle(const longscope::ui::NeedleRequest &request, const QString &bookText = QString());

signals:
    // The chat, stream, perplexity, needle, metrics and error signals are InferenceWorker's.
    // The backend in use changed (a switch took effect, or CUDA failed and the CPU took over).
    void backendChanged(const longscope::ui::ModelSummary &summary);
    void loadStarted(const QString &path);
    void loadProgress(double fraction);
    void modelLoaded(const longscope::ui::ModelSummary &summary);
    void loadFailed(const QString &path, const QString &message); // the previous model stays
    void chatPromptRendered(quint64 job, const longscope::ui::RenderedPrompt &prompt);

private:
    // With `may_reset` (no context worth keeping), a context limit below the current length
    // clears the context instead of being refused.
    void apply_pending_settings(bool may_reset = false);
    bool require_model();
    // Fewer free tokens than this after a book: no room for a question and its reply.
    static constexpr int k_min_chat_room = 32;
    void on_session_metrics(const longscope::StepMetrics &m);
    std::string m_backend_note; // the last fallback reported
    // The backend line for the summary ("CPU (2 threads)", "CUDA").
    QString backend_text() const;
    // After a step: when the session left CUDA (a failed step ran again on the CPU), say so
    // and report the settings it now runs with.
    void check_backend_fallback();
    void remember_logits(std::span<const float> logits);
    void ensure_logits();
    // Evaluates `tokens` (none: continues from the last logits), then samples up to
    // max_new_tokens; fills `summary`. Throws engine errors.
    void decode_loop(const std::vector<int32_t> &tokens, const GenerationParams &params,
                     bool trim_leading, GenerationSummary &summary);
    void finish_with_error(const QString &message, GenerationSummary summary);
    // The jobs behind the slots, `job` their number.
    void run_chat(quint64 job, const ChatRequest &request);
    void run_render_chat(quint64 job, const ChatRequest &request);
    void run_continue(quint64 job, const GenerationParams &params);
    // A chat or continue job: marks it running, answers at once when no model is loaded or it
    // was stopped while queued, runs `body`, and turns any exception into an error message.
    // `body` fills the summary (returning finishes the job) or throws (an error message).
    void run_generation_job(quint64 job, const std::function<void(GenerationSummary &)> &body);
    void run_stream(quint64 job, const QString &text, int chunk_tokens);
    void run_perplexity(quint64 job, const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                        const QString &label, qint64 maxTokens);
    void run_needle(quint64 job, const NeedleRequest &request, const QString &bookText);
    quint64 next_job() { return ++m_last_job; }
    // Whether the job running now was cancelled (worker thread).
    bool stop_requested() const { return m_job <= m_cancelled_through.load(); }
    // The tokens of a text to score, kept for the next run on the same text.
    const std::vector<int32_t> &perplexity_tokens(const QString &text);

    ModelSummary m_summary;
    qint64 m_next_step = 0;       // the step index the next StepMetrics will carry
    std::vector<float> m_logits;  // [n_vocab] logits of the last token in the context
    int m_logits_pos = -1;        // the context length m_logits belong to

    int m_n_threads;
    std::unique_ptr<longscope::Model> m_model;
    std::unique_ptr<longscope::Session> m_session;
    std::atomic<quint64> m_last_job{0};          // the number of the last job queued
    std::atomic<quint64> m_cancelled_through{0}; // jobs numbered up to this one are cancelled
    quint64 m_job = 0;                           // the job running now (worker thread only)
    std::atomic<bool> m_cancel_load{false};
    mutable std::mutex m_settings_mutex;
    longscope::Settings m_settings;          // what the UI asked for
    std::optional<longscope::Settings> m_pending;
    // Text streamed into the context (a book): the prefix chats continue from. The session's
    // history always starts with it; cleared with the context.
    std::vector<int32_t> m_document;
    QString m_scored_text;                // the text m_scored_tokens belong to
    std::vector<int32_t> m_scored_tokens;
};

} // namespace longscope::ui

