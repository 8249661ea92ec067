// What the chat, the book panel and the Explore tab drive, whichever engine answers: the
// local EngineWorker (a model file on a thread of its own) or a RemoteWorker (an
// OpenAI-compatible server). The controllers queue jobs through the queue*() calls and listen
// to the signals; requestStop() and setSettings() are thread-safe on the local worker, so
// they reach a job that is running. Jobs are numbered in the order they are queued;
// requestStop() cancels every job queued so far (the one running and the ones waiting), and
// none queued after.
#pragma once

#include "core/worker_types.h"

#include <QObject>
#include <QString>

namespace longscope::ui {

class InferenceWorker : public QObject {
    Q_OBJECT

public:
    using QObject::QObject;
    ~InferenceWorker() override = default;

    // Ends the job running at its next step and cancels the jobs queued before this call.
    virtual void requestStop() = 0;
    // The long-context settings, applied at the next step where the engine can switch them.
    virtual void setSettings(const longscope::Settings &settings) = 0;

    // A chat reply: generationStarted, tokenStreamed..., exactly one generationFinished.
    virtual quint64 queueChat(const longscope::ui::ChatRequest &request) = 0;
    // The model writes on from the context (a book streamed in) as a reply.
    virtual quint64 queueContinue(const longscope::ui::GenerationParams &params) = 0;
    // A text (a book) put into the context ahead of the chat: streamFitted, streamProgress...,
    // exactly one streamFinished.
    virtual quint64 queueStream(const QString &text, int chunk_tokens) = 0;
    // Forgets the context (the book and the turns held).
    virtual void queueResetContext() = 0;
    // Perplexity by position of `text` (EngineWorker::runPerplexity): perplexityProgress...,
    // exactly one perplexityFinished.
    virtual quint64 queuePerplexity(const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                                    const QString &label, qint64 maxTokens = 0) = 0;
    // A needle-in-a-haystack grid: needleProgress..., exactly one needleFinished.
    virtual quint64 queueNeedle(const longscope::ui::NeedleRequest &request, const QString &bookText = QString()) = 0;

signals:
    // Every chat or continue job emits generationStarted, then exactly one generationFinished
    // (reason Error after an errorOccurred).
    void generationStarted();
    void promptFitted(int prompt_tokens, int dropped_turns, bool truncated);
    // The chat format the prompt was rendered with: "model" for the model's own template, else
    // a built-in format's name, with the reason in `note`.
    void chatFormatUsed(const QString &format, const QString &note);
    // Whole UTF-8 characters only. The pieces concatenated equal GenerationSummary::text.
    void tokenStreamed(const QString &text);
    void generationFinished(const longscope::ui::GenerationSummary &summary);

    // Before a text is streamed: its length in tokens, and how many of them go in.
    void streamFitted(int text_tokens, int kept_tokens);
    void streamProgress(int tokens_done, int tokens_total);
    // Every stream job ends with one: `stopped` when the text did not go in whole.
    void streamFinished(bool stopped, int tokens_in_context);

    void perplexityProgress(const QString &label, qint64 done, qint64 total);
    void perplexityFinished(const QString &label, const longscope::ui::PerplexityRunResult &result);
    void needleProgress(const QString &label, qint64 done, qint64 total);
    void needleFinished(const QString &label, const longscope::ui::NeedleRunResult &result);

    void stepMetrics(const longscope::StepMetrics &metrics);
    // New settings took effect at this step (the first step that ran with them).
    void settingsApplied(qint64 step, int position, const longscope::Settings &settings);

    void errorOccurred(const QString &message);
};

} // namespace longscope::ui
