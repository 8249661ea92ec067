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

#include "core/explore_needle.h"
#include "core/perplexity_run.h"

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

// What the UI shows about a loaded model.
struct ModelSummary {
    QString path;
    QString name;
    QString format;        // "GGUF v3", "Hugging Face"
    int n_ctx_train = 0;
    int n_vocab = 0;
    int n_layer = 0;
    qint64 weight_bytes = 0;
    QString backend;        // "CPU (2 threads)"
    QString gpu_status;     // why CUDA is not used, or which GPU is
    bool cuda_available = false; // the probe found a usable GPU and the plugin
    QString cpu_warning;    // empty, or why only the slow portable CPU kernels run
    QString chat_template;  // the Jinja chat template the model carries (empty: none)
    // The model in words (longscope/model_description.h): "llama", "byte-level BPE
    // (pre-tokenizer qwen2)", "2 </s>, 151645 <|im_end|>"; the RoPE scaling follows the settings
    // (ropeScalingInUse).
    QString family;
    QString tokenizer;
    QString end_of_generation;
    longscope::HParams hparams;
};

// The RoPE scaling `settings` run the summary's model with, as `info` says it ("linear x2";
// empty without a model).
QString ropeScalingInUse(const ModelSummary &summary, const longscope::Settings &settings);

struct ChatTurn {
    enum class Role { User, Assistant };
    Role role = Role::User;
    QString text;
};

struct GenerationParams {
    int max_new_tokens = 512;
    float temperature = 0.2f;
    float top_p = 0.9f;
    int top_k = 40;
    bool do_sample = true;       // false: greedy
    float repetition_penalty = 1.1f;
    quint64 seed = 0;
    // Every request draws a new seed (the one used is reported); false: `seed` is pinned, and
    // the same seed and settings give the same text.
    bool random_seed = true;
};

// A chat request: the system prompt and the turns so far, the last one the user's. The
// worker formats them with the model's chat template and fits them into the context,
// dropping the oldest turns or keeping head and tail as the overflow policy says.
struct ChatRequest {
    QString system_prompt;
    QVector<ChatTurn> turns;
    GenerationParams params;
    // The template chosen for this model (ChatTemplateChoice): a custom Jinja text or a
    // built-in format's name; both empty: the model's own.
    QString chat_template;
    QString chat_format;
};

// A conversation rendered with a chat template, as the model would receive it.
struct RenderedPrompt {
    QString text;   // the prompt text, a BOS the tokenizer adds written in front
    int tokens = 0; // how many tokens it makes
    QString format; // "model", "custom" or the built-in format's name
    QString note;   // why a built-in format is used
    QString error;  // the renderer's message when the template failed (the rest empty)
};

enum class FinishReason { MaxTokens, EndOfText, ContextFull, Stopped, Error };

// "max tokens", "end of text", "context full", "stopped", "error".
QString finishReasonText(FinishReason reason);

struct GenerationSummary {
    FinishReason reason = FinishReason::MaxTokens;
    QString text;             // the whole reply
    int prompt_tokens = 0;
    int generated_tokens = 0;
    int dropped_turns = 0;    // oldest turns left out to fit the context
    // Max new tokens was more than the context had free after the prompt: the tokens the
    // reply was capped to; -1 when it was not capped.
    int reply_room = -1;
    double prefill_tokens_per_second = 0;
    double decode_tokens_per_second = 0;
};

// Registers every type the worker's queued signals and slots carry (called by the
// EngineWorker constructor; harmless to call again).
void registerMetaTypes();

class EngineWorker : public QObject {
    Q_OBJECT

public:
    explicit EngineWorker(int n_threads = 0, QObject *parent = nullptr);
    ~EngineWorker() override;

    // Thread-safe: called from the UI thread while the worker is busy.
    // Ends the generation, book or perplexity run at the next step, and cancels every job
    // queued before this call (each then finishes at once, as stopped).
    void requestStop();
    void cancelLoad();                                 // abandons a model load in progress
    void setSettings(const longscope::Settings &s);    // applied at the next step
    longscope::Settings settings() const;

    // Thread-safe: queue a job on the worker's thread (the slot of the same name below) and
    // return its number, which grows with every job queued.
    quint64 queueChat(const longscope::ui::ChatRequest &request);
    // Renders the request's conversation with its template (without generating); answered by
    // chatPromptRendered with the returned number.
    quint64 queueRenderChat(const longscope::ui::ChatRequest &request);
    quint64 queueContinue(const longscope::ui::GenerationParams &params);
    quint64 queueStream(const QString &text, int chunk_tokens);
    quint64 queuePerplexity(const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                            const QString &label, qint64 maxTokens = 0);
    quint64 queueNeedle(const longscope::ui::NeedleRequest &request, const QString &bookText = QString());

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
    // first `maxTokens` tokens, 0: all) in windows of `ctx` tokens with `settings`, curve
    // points of `bucket` positions. The run has a session of its own, so the chat's context
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
    // The backend in use changed (a switch took effect, or CUDA failed and the CPU took over).
    void backendChanged(const longscope::ui::ModelSummary &summary);
    void loadStarted(const QString &path);
    void loadProgress(double fraction);
    void modelLoaded(const longscope::ui::ModelSummary &summary);
    void loadFailed(const QString &path, const QString &message); // the previous model stays

    // Every generateChat() / continueText() emits generationStarted, then exactly one
    // generationFinished (reason Error after an errorOccurred, "no model" included).
    void generationStarted();
    void promptFitted(int prompt_tokens, int dropped_turns, bool truncated);
    // The chat format the prompt was rendered with: "model" for the model's own template, else
    // a built-in format's name, with the reason in `note`.
    void chatFormatUsed(const QString &format, const QString &note);
    void chatPromptRendered(quint64 job, const longscope::ui::RenderedPrompt &prompt);
    // Whole UTF-8 characters only; a chat reply's leading whitespace is left out. The pieces
    // concatenated equal GenerationSummary::text.
    void tokenStreamed(const QString &text);
    void generationFinished(const longscope::ui::GenerationSummary &summary);

    // Before a text is streamed: its length in tokens, and how many of them go in (fewer when
    // only its head and tail fit).
    void streamFitted(int text_tokens, int kept_tokens);
    void streamProgress(int tokens_done, int tokens_total);
    // Every streamText() ends with one: `stopped` when the text did not go in whole
    // (requestStop, or an error reported just before through errorOccurred).
    void streamFinished(bool stopped, int tokens_in_context);

    void perplexityProgress(const QString &label, qint64 done, qint64 total);
    void perplexityFinished(const QString &label, const longscope::ui::PerplexityRunResult &result);
    void needleProgress(const QString &label, qint64 done, qint64 total);
    void needleFinished(const QString &label, const longscope::ui::NeedleRunResult &result);

    void stepMetrics(const longscope::StepMetrics &metrics);
    // New settings took effect at this step (the first step that ran with them).
    void settingsApplied(qint64 step, int position, const longscope::Settings &settings);

    void errorOccurred(const QString &message);

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

Q_DECLARE_METATYPE(longscope::ui::ModelSummary)
Q_DECLARE_METATYPE(longscope::ui::ChatRequest)
Q_DECLARE_METATYPE(longscope::ui::RenderedPrompt)
Q_DECLARE_METATYPE(longscope::ui::GenerationParams)
Q_DECLARE_METATYPE(longscope::ui::GenerationSummary)
Q_DECLARE_METATYPE(longscope::StepMetrics)
Q_DECLARE_METATYPE(longscope::Settings)
