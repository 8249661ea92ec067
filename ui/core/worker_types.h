// The values the workers (EngineWorker, RemoteWorker) and the controllers exchange: a chat
// request and its sampling, a reply's summary, what the UI shows about a model.
#pragma once

#include "core/explore_needle.h"
#include "core/perplexity_run.h"

#include "longscope/hparams.h"
#include "longscope/metrics.h"
#include "longscope/settings.h"

#include <QMetaType>
#include <QString>
#include <QVector>

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

} // namespace longscope::ui

Q_DECLARE_METATYPE(longscope::ui::ModelSummary)
Q_DECLARE_METATYPE(longscope::ui::ChatRequest)
Q_DECLARE_METATYPE(longscope::ui::RenderedPrompt)
Q_DECLARE_METATYPE(longscope::ui::GenerationParams)
Q_DECLARE_METATYPE(longscope::ui::GenerationSummary)
Q_DECLARE_METATYPE(longscope::StepMetrics)
Q_DECLARE_METATYPE(longscope::Settings)
