#include "core/engine_worker.h"

#include "core/context_limit.h"
#include "core/thought.h"

#include "longscope/backend.h"
#include "longscope/hardware.h"

#include "longscope/chat.h"
#include "longscope/errors.h"
#include "longscope/model.h"
#include "longscope/model_description.h"
#include "longscope/perplexity.h"
#include "longscope/tokenizer.h"

#include <QFile>
#include <QFileInfo>
#include <QMetaType>

#include <algorithm>
#include <chrono>
#include <new>
#include <string>
#include <thread>

namespace longscope::ui {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

QString qs(const std::string &s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }
std::string utf8(const QString &s)
{
    const QByteArray b = s.toUtf8();
    return std::string(b.constData(), size_t(b.size()));
}

// Drops leading whitespace from a chat reply as it streams: the first token usually carries
// the dummy-prefix space ("▁Once"), which is not part of what the assistant said.
class LeadingTrim {
public:
    std::string operator()(std::string piece)
    {
        if (m_seen_text)
            return piece;
        size_t i = 0;
        while (i < piece.size() && (piece[i] == ' ' || piece[i] == '\n' || piece[i] == '\t' || piece[i] == '\r'))
            ++i;
        piece.erase(0, i);
        if (!piece.empty())
            m_seen_text = true;
        return piece;
    }

private:
    bool m_seen_text = false;
};

} // namespace

QString finishReasonText(FinishReason reason)
{
    switch (reason) {
    case FinishReason::MaxTokens: return QStringLiteral("max tokens");
    case FinishReason::EndOfText: return QStringLiteral("end of text");
    case FinishReason::ContextFull: return QStringLiteral("context full");
    case FinishReason::Stopped: return QStringLiteral("stopped");
    case FinishReason::Error: return QStringLiteral("error");
    }
    return QStringLiteral("?");
}

QString ropeScalingInUse(const ModelSummary &summary, const longscope::Settings &settings)
{
    if (summary.hparams.n_layer <= 0)
        return {};
    return qs(describe_rope_scaling(summary.hparams, settings.rope));
}

void registerMetaTypes()
{
    qRegisterMetaType<longscope::ui::ModelSummary>("longscope::ui::ModelSummary");
    qRegisterMetaType<longscope::ui::ChatRequest>("longscope::ui::ChatRequest");
    qRegisterMetaType<longscope::ui::RenderedPrompt>("longscope::ui::RenderedPrompt");
    qRegisterMetaType<longscope::ui::GenerationParams>("longscope::ui::GenerationParams");
    qRegisterMetaType<longscope::ui::GenerationSummary>("longscope::ui::GenerationSummary");
    qRegisterMetaType<longscope::StepMetrics>("longscope::StepMetrics");
    qRegisterMetaType<longscope::Settings>("longscope::Settings");
    qRegisterMetaType<longscope::ui::PerplexityRunResult>("longscope::ui::PerplexityRunResult");
    qRegisterMetaType<longscope::ui::NeedleRequest>("longscope::ui::NeedleRequest");
    qRegisterMetaType<longscope::ui::NeedleRunResult>("longscope::ui::NeedleRunResult");
}

EngineWorker::EngineWorker(int n_threads, QObject *parent)
    : InferenceWorker(parent), m_n_threads(std::max(0, n_threads))
{
    registerMetaTypes();
}

EngineWorker::~EngineWorker()
{
    // The session refers to the model: it goes first.
    m_session.reset();
    m_model.reset();
}

void EngineWorker::requestStop()
{
    // Raise the watermark to the last job queued (never lower it: two Stops may race).
    const quint64 last = m_last_job.load();
    quint64 seen = m_cancelled_through.load();
    while (seen < last && !m_cancelled_through.compare_exchange_weak(seen, last)) {
    }
}

quint64 EngineWorker::queueChat(const ChatRequest &request)
{
    const quint64 job = next_job();
    QMetaObject::invokeMethod(this, [this, job, request] { run_chat(job, request); }, Qt::QueuedConnection);
    return job;
}

quint64 EngineWorker::queueRenderChat(const ChatRequest &request)
{
    const quint64 job = next_job();
    QMetaObject::invokeMethod(this, [this, job, request] { run_render_chat(job, request); }, Qt::QueuedConnection);
    return job;
}

quint64 EngineWorker::queueContinue(const GenerationParams &params)
{
    const quint64 job = next_job();
    QMetaObject::invokeMethod(this, [this, job, params] { run_continue(job, params); }, Qt::QueuedConnection);
    return job;
}

quint64 EngineWorker::queueStream(const QString &text, int chunk_tokens)
{
    const quint64 job = next_job();
    QMetaObject::invokeMethod(
        this, [this, job, text, chunk_tokens] { run_stream(job, text, chunk_tokens); }, Qt::QueuedConnection);
    return job;
}

void EngineWorker::queueResetContext()
{
    QMetaObject::invokeMethod(this, &EngineWorker::resetContext, Qt::QueuedConnection);
}

quint64 EngineWorker::queuePerplexity(const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                                      const QString &label, qint64 maxTokens)
{
    const quint64 job = next_job();
    QMetaObject::invokeMethod(
        this,
        [this, job, text, settings, ctx, bucket, label, maxTokens] {
            run_perplexity(job, text, settings, ctx, bucket, label, maxTokens);
        },
        Qt::QueuedConnection);
    return job;
}

quint64 EngineWorker::queueNeedle(const NeedleRequest &request, const QString &bookText)
{
    const quint64 job = next_job();
    QMetaObject::invokeMethod(
        this, [this, job, request, bookText] { run_needle(job, request, bookText); }, Qt::QueuedConnection);
    return job;
}

void EngineWorker::cancelLoad() { m_cancel_load.store(true); }

void EngineWorker::setSettings(const longscope::Settings &s)
{
    try {
        s.validate();
    } catch (const std::exception &e) {
        emit errorOccurred(QStringLiteral("invalid settings: %1").arg(QString::fromUtf8(e.what())));
        return;
    }
    std::lock_guard lock(m_settings_mutex);
    m_settings = s;
    m_pending = s;
}

longscope::Settings EngineWorker::settings() const
{
    std::lock_guard lock(m_settings_mutex);
    return m_settings;
}

void EngineWorker::apply_pending_settings(bool may_reset)
{
    if (!m_session)
        return;
    std::optional<longscope::Settings> pending;
    {
        std::lock_guard lock(m_settings_mutex);
        pending.swap(m_pending);
    }
    if (!pending)
        return;
    // Session::set_settings reads a limit of 0 as "keep the current one"; here 0 means the
    // model's default, as when the session was made.
    longscope::Settings effective = *pending;
    if (effective.context_limit == 0)
        effective.context_limit = defaultContextLimit(m_model->hparams().n_ctx_train);
    try {
        if (may_reset && effective.context_limit < m_session->n_past()) {
            m_session->reset();
            m_document.clear();
            m_logits.clear();
            m_logits_pos = -1;
        }
        m_session->set_settings(effective);
        // Moved to the CPU: its copy of the weights is made now, between two steps (once).
        if (effective.backend == ComputeBackend::Cpu)
            m_model->prepare_for_cpu();
    } catch (const std::exception &e) {
        // The session keeps its settings; so does what the worker reports, unless the UI
        // has asked for something newer meanwhile.
        {
            std::lock_guard lock(m_settings_mutex);
            if (!m_pending)
                m_settings = m_session->settings();
        }
        emit errorOccurred(QStringLiteral("the settings were not applied: %1").arg(QString::fromUtf8(e.what())));
        return;
    }
    emit settingsApplied(m_next_step, m_session->n_past(), *pending);
    if (const QString text = backend_text(); text != m_summary.backend) {
        m_summary.backend = text;
        emit backendChanged(m_summary);
    }
}

bool EngineWorker::require_model()
{
    if (m_model && m_session)
        return true;
    emit errorOccurred(QStringLiteral("no model is loaded"));
    return false;
}

void EngineWorker::on_session_metrics(const longscope::StepMetrics &m)
{
    m_next_step = m.step + 1;
    emit stepMetrics(m);
    check_backend_fallback();
}

QString EngineWorker::backend_text() const
{
    if (m_session && m_session->settings().backend == ComputeBackend::Cuda)
        return QStringLiteral("CUDA (GPU)");
    const int threads = m_session ? m_session->n_threads() : m_n_threads;
    return QStringLiteral("CPU (%1 thread%2)").arg(threads).arg(threads == 1 ? "" : "s");
}

void EngineWorker::check_backend_fallback()
{
    if (!m_session || m_session->backend_note().empty() || m_session->backend_note() == m_backend_note)
        return;
    m_backend_note = m_session->backend_note();
    {
        std::lock_guard lock(m_settings_mutex);
        m_settings.backend = m_session->settings().backend;
    }
    m_summary.backend = backend_text();
    m_summary.gpu_status = QStringLiteral("CUDA failed, continuing on the CPU: %1").arg(qs(m_backend_note));
    emit errorOccurred(m_summary.gpu_status);
    emit backendChanged(m_summary);
}

void EngineWorker::loadModel(const QString &path)
{
    m_cancel_load.store(false);
    emit loadStarted(path);
    // The new session is made with the settings asked for so far; a change that arrives
    // while loading stays pending for the next step.
    longscope::Settings wanted;
    {
        std::lock_guard lock(m_settings_mutex);
        wanted = m_settings;
        m_pending.reset();
    }
    QString failure;
    try {
        auto progress = [this](double fraction) {
            emit loadProgress(fraction);
            return !m_cancel_load.load();
        };
        // Loaded for the backend asked for: for CUDA the matrices stay in the file mapping.
        std::unique_ptr<Model> model = Model::load(QFile::encodeName(path).toStdString(), progress,
                                                   wanted.backend != ComputeBackend::Cuda);
        SessionOptions options;
        options.n_threads = m_n_threads;
        options.settings = wanted;
        // Built before anything is replaced: if it throws, the old model and session stay.
        // CUDA asked for but unusable (no GPU, out of device memory): the CPU, and say why.
        QString cuda_failure;
        std::unique_ptr<Session> session;
        try {
            session = std::make_unique<Session>(*model, options);
        } catch (const BackendError &e) {
            if (options.settings.backend != ComputeBackend::Cuda)
                throw;
            cuda_failure = QString::fromUtf8(e.what());
            options.settings.backend = ComputeBackend::Cpu;
            model->prepare_for_cpu(progress);
            session = std::make_unique<Session>(*model, options);
            std::lock_guard lock(m_settings_mutex);
            m_settings.backend = ComputeBackend::Cpu;
        }

        m_session.reset();
        m_model = std::move(model);
        m_session = std::move(session);
        m_session->set_metrics_callback([this](const StepMetrics &m) { on_session_metrics(m); });
        m_next_step = 0;
        // The new session starts empty: nothing of the old model's context (a book's tokens
        // in the old vocabulary) may prefix the next chat.
        m_document.clear();
        m_logits.clear();
        m_logits_pos = -1;
        m_scored_text.clear();
        m_scored_tokens.clear();

        const ModelInfo &info = m_model->info();
        const HParams &hp = m_model->hparams();
        ModelSummary s;
        s.path = path;
        s.name = info.name.empty() ? QFileInfo(path).completeBaseName() : qs(info.name);
        s.format = info.format == ModelFormat::Gguf ? QStringLiteral("GGUF v%1").arg(info.gguf_version)
                                                    : QStringLiteral("Hugging Face");
        s.n_ctx_train = hp.n_ctx_train;
        s.n_vocab = hp.n_vocab;
        s.n_layer = hp.n_layer;
        s.weight_bytes = qint64(info.weight_bytes);
        s.backend = backend_text();
        s.cpu_warning = qs(cpu_kernel_warning());
        s.chat_template = qs(info.chat_template);
        const ModelDescription described = describe_model(*m_model);
        s.family = qs(described.family);
        s.tokenizer = qs(described.tokenizer);
        s.end_of_generation = qs(described.end_of_generation);
        s.hparams = hp;
        // Why the GPU is not used (or which one could be), as the backend probe says.
        for (const BackendStatus &b : probe_backends())
            if (b.name == "CUDA") {
                s.cuda_available = b.available;
                s.gpu_status = QStringLiteral("CUDA: %1").arg(qs(b.detail));
            }
        if (!cuda_failure.isEmpty())
            s.gpu_status = QStringLiteral("CUDA could not be used, running on the CPU: %1").arg(cuda_failure);
        m_backend_note.clear();
        m_summary = s;
        emit modelLoaded(s);
        return;
    } catch (const Cancelled &) {
        failure = QStringLiteral("loading was cancelled");
    } catch (const Error &e) {
        failure = QString::fromUtf8(e.what());
    } catch (const std::bad_alloc &) {
        failure = QStringLiteral("out of memory while loading the model");
    } catch (const std::exception &e) {
        failure = QString::fromUtf8(e.what());
    } catch (...) {
        failure = QStringLiteral("unknown error while loading the model");
    }
    {
        // The old session stays: what was pending for it still is.
        std::lock_guard lock(m_settings_mutex);
        if (m_session && !m_pending && m_session->settings() != wanted)
            m_pending = wanted;
    }
    emit loadFailed(path, failure);
}

void EngineWorker::remember_logits(std::span<const float> logits)
{
    m_logits.assign(logits.begin(), logits.end());
    m_logits_pos = m_session->n_past();
}

void EngineWorker::ensure_logits()
{
    if (m_logits_pos == m_session->n_past() && !m_logits.empty())
        return;
    // The logits of the last token are not at hand (should not happen): evaluate the context
    // again from the start.
    const std::vector<int32_t> history = m_session->history();
    m_session->reset();
    m_document.clear();
    remember_logits(m_session->eval(history));
}

void EngineWorker::decode_loop(const std::vector<int32_t> &tokens, const GenerationParams &params, bool trim_leading,
                               GenerationSummary &summary)
{
    // The engine's generator runs the loop (as for the CLI and the server); the worker adds
    // what the app needs around it: the reply kept in the context for the next turn, settings
    // applied between steps, the job's Stop, and the streamed text trimmed of leading spaces.
    GenerateRequest request;
    request.sampling.temperature = params.do_sample ? params.temperature : 0.0f;
    request.sampling.top_k = params.top_k;
    request.sampling.top_p = params.top_p;
    request.sampling.repeat_penalty = params.repetition_penalty;
    request.sampling.seed = params.seed;
    request.max_new_tokens = params.max_new_tokens;
    request.prompt = tokens;
    request.continue_context = true;
    request.keep_reply_in_context = true;
    if (tokens.empty()) {
        ensure_logits();
        request.context_logits = m_logits;
    }
    request.cancelled = [this](uint64_t) { return stop_requested(); };
    request.before_step = [this] { apply_pending_settings(); };

    LeadingTrim trim;
    std::string reply;
    auto on_token = [&](int32_t, std::string_view text) {
        std::string piece(text);
        if (trim_leading)
            piece = trim(std::move(piece));
        if (!piece.empty()) {
            reply += piece;
            emit tokenStreamed(qs(piece));
        }
        return true;
    };
    GenerateResult result = generate(*m_session, request, on_token);
    if (!result.context_logits.empty())
        remember_logits(result.context_logits);
    summary.generated_tokens = int(result.tokens.size());
    summary.prefill_tokens_per_second = result.prefill_tokens_per_second();
    summary.decode_tokens_per_second = result.decode_tokens_per_second();
    switch (result.stop) {
    case StopReason::MaxTokens: summary.reason = FinishReason::MaxTokens; break;
    case StopReason::EndOfSequence:
    case StopReason::StopString: summary.reason = FinishReason::EndOfText; break;
    case StopReason::ContextFull: summary.reason = FinishReason::ContextFull; break;
    case StopReason::Cancelled: summary.reason = FinishReason::Stopped; break;
    }
    summary.text = qs(reply);
}

namespace {

// The request's conversation as the chat layer takes it.
std::vector<ChatMessage> chat_messages(const ChatRequest &request)
{
    std::vector<ChatMessage> messages;
    if (!request.system_prompt.trimmed().isEmpty())
        messages.push_back({ChatMessage::Role::System, utf8(request.system_prompt)});
    for (const ChatTurn &t : request.turns) {
        ChatMessage m;
        m.role = t.role == ChatTurn::Role::User ? ChatMessage::Role::User : ChatMessage::Role::Assistant;
        // Replies are stored as streamed (no leading space); trimming both ends keeps the
        // formatted text equal to what the context already holds, so the cache is reused.
        m.content = utf8(t.role == ChatTurn::Role::Assistant ? t.text.trimmed() : t.text);
        // A reply that reasoned goes back as the template expects it: reasoning_content
        // apart from the answer (the template decides what of it to keep).
        if (t.role == ChatTurn::Role::Assistant) {
            if (const ThoughtSplit thought = splitThought(t.text); thought.hasReasoning) {
                m.content = utf8(thought.answer.trimmed());
                m.reasoning_content = utf8(thought.reasoning);
            }
        }
        messages.push_back(std::move(m));
    }
    return messages;
}

// The request's template choice as the chat layer takes it.
ChatRenderOptions render_options_of(const ChatRequest &request)
{
    ChatRenderOptions o;
    o.template_text = utf8(request.chat_template);
    o.format = utf8(request.chat_format);
    return o;
}

} // namespace

void EngineWorker::generateChat(const longscope::ui::ChatRequest &request)
{
    run_chat(next_job(), request);
}

void EngineWorker::run_render_chat(quint64 job, const ChatRequest &request)
{
    RenderedPrompt out;
    try {
        if (!m_model)
            throw InvalidArgument("no model is loaded");
        const RenderedChat r = render_chat(*m_model, chat_messages(request), render_options_of(request));
        const std::vector<int32_t> ids = tokenize_chat(*m_model, r.text, true);
        const Tokenizer &tok = m_model->tokenizer();
        // A BOS the tokenizer adds (not written by the template) is shown as its text.
        const bool bos_added = !ids.empty() && ids.front() == tok.bos_id() &&
                               !std::string_view(r.text).starts_with(tok.piece(tok.bos_id()));
        out.text = qs((bos_added ? tok.piece(tok.bos_id()) : std::string()) + r.text);
        out.tokens = int(ids.size());
        out.format = qs(r.format);
        out.note = qs(r.note);
    } catch (const std::exception &e) {
        out = RenderedPrompt{};
        out.error = qs(e.what());
    }
    emit chatPromptRendered(job, out);
}

void EngineWorker::run_chat(quint64 job, const ChatRequest &request)
{
    run_generation_job(job, [&](GenerationSummary &summary) {
        // The limit and policy below are the ones in effect. A limit below the context's length
        // clears it: the prompt is evaluated again anyway when it no longer fits.
        apply_pending_settings(true);
        const std::vector<ChatMessage> messages = chat_messages(request);
        if (request.turns.isEmpty())
            throw InvalidArgument("the conversation has no message to answer");
        const int limit = m_session->n_ctx();
        // After a book was streamed in, the conversation continues from it: the document is
        // the prompt's prefix and the chat fits into what it leaves free.
        const int doc = int(m_document.size());
        // Under the shift policy nothing overflows: the session shifts the book and the chat
        // through the context.
        const bool shifting = m_session->settings().overflow == OverflowPolicy::Shift;
        const int free = shifting ? limit : limit - doc;
        if (doc > 0 && free < k_min_chat_room)
            throw ContextOverflow("the streamed text fills " + std::to_string(doc) + " of the " + std::to_string(limit) +
                                  " tokens of the context, leaving " + std::to_string(std::max(0, free)) +
                                  ", too few for a question and its reply; raise the context limit in the "
                                  "long-context panel, or Clear and stream the book again");
        // Room kept for the reply while fitting: Max new tokens, but at most half of what is
        // free, so a large Max new tokens shortens the reply instead of refusing the prompt.
        const int reserve = std::min(std::max(0, request.params.max_new_tokens), free / 2);
        const OverflowPolicy policy = m_session->settings().overflow;
        ChatPrompt prompt;
        try {
            prompt = build_chat_prompt(*m_model, messages, free, reserve, policy, doc == 0,
                                       render_options_of(request));
        } catch (const ContextOverflow &e) {
            if (policy != OverflowPolicy::Error)
                throw;
            throw ContextOverflow(std::string(e.what()) + ", " + std::to_string(reserve) +
                                  " being kept for the reply (Max new tokens, at most half the free context); the "
                                  "overflow policy is \"error\": choose \"drop oldest turns\" in the long-context "
                                  "panel, raise the context limit, lower Max new tokens, or Clear");
        }
        if (doc > 0)
            prompt.tokens.insert(prompt.tokens.begin(), m_document.begin(), m_document.end());
        summary.prompt_tokens = int(prompt.tokens.size());
        summary.dropped_turns = prompt.dropped_turns;
        emit chatFormatUsed(qs(prompt.format), qs(prompt.note));
        emit promptFitted(summary.prompt_tokens, prompt.dropped_turns, prompt.truncated);

        // Reuse the cache when the context holds a prefix of this prompt (the previous turns
        // and the reply): only the new part is evaluated.
        const std::vector<int32_t> &history = m_session->history();
        std::vector<int32_t> todo;
        if (!history.empty() && history.size() <= prompt.tokens.size() &&
            std::equal(history.begin(), history.end(), prompt.tokens.begin())) {
            todo.assign(prompt.tokens.begin() + std::ptrdiff_t(history.size()), prompt.tokens.end());
        } else {
            m_session->reset();
            m_document.clear();
            m_logits.clear();
            m_logits_pos = -1;
            todo = prompt.tokens;
        }
        // The reply gets what the prompt leaves free, at most Max new tokens.
        GenerationParams params = request.params;
        const int room = limit - int(prompt.tokens.size());
        if (params.max_new_tokens > room) {
            params.max_new_tokens = std::max(0, room);
            summary.reply_room = params.max_new_tokens;
        }
        decode_loop(todo, params, true, summary);
    });
}

void EngineWorker::continueText(const longscope::ui::GenerationParams &params)
{
    run_continue(next_job(), params);
}

void EngineWorker::run_continue(quint64 job, const GenerationParams &params)
{
    run_generation_job(job, [&](GenerationSummary &summary) {
        apply_pending_settings();
        if (m_session->n_past() == 0)
            throw InvalidArgument("nothing to continue: the context is empty");
        summary.prompt_tokens = m_session->n_past();
        decode_loop({}, params, false, summary);
    });
}

void EngineWorker::run_generation_job(quint64 job, const std::function<void(GenerationSummary &)> &body)
{
    m_job = job;
    emit generationStarted();
    GenerationSummary summary;
    try {
        if (!require_model()) {
            summary.reason = FinishReason::Error;
            emit generationFinished(summary);
            return;
        }
        if (stop_requested()) { // stopped while it waited in the queue
            summary.reason = FinishReason::Stopped;
            emit generationFinished(summary);
            return;
        }
        body(summary);
        emit generationFinished(summary);
    } catch (const std::bad_alloc &) {
        finish_with_error(QStringLiteral("out of memory"), summary);
    } catch (const std::exception &e) {
        finish_with_error(QString::fromUtf8(e.what()), summary);
    } catch (...) {
        finish_with_error(QStringLiteral("unknown error"), summary);
    }
}

void EngineWorker::finish_with_error(const QString &message, GenerationSummary summary)
{
    summary.reason = FinishReason::Error;
    emit errorOccurred(message);
    emit generationFinished(summary);
}

void EngineWorker::streamText(const QString &text, int chunk_tokens)
{
    run_stream(next_job(), text, chunk_tokens);
}

void EngineWorker::run_stream(quint64 job, const QString &text, int chunk_tokens)
{
    m_job = job;
    if (!require_model()) {
        emit streamFinished(true, 0);
        return;
    }
    if (stop_requested()) { // stopped while it waited in the queue
        emit streamFinished(true, m_session->n_past());
        return;
    }
    try {
        apply_pending_settings();
        const Tokenizer &tok = m_model->tokenizer();
        const bool add_bos = m_session->n_past() == 0 && tok.add_bos_default();
        std::vector<int32_t> tokens = tok.encode(utf8(text), add_bos);
        const int text_tokens = int(tokens.size());
        const int limit = m_session->n_ctx();
        const int in_context = m_session->n_past();
        // Cutting a text to fit leaves a quarter of the context (at most 512 tokens) free,
        // so there is room to chat about it or continue it.
        const int keep_free = std::min(512, limit / 4);
        const int room = int64_t(tokens.size()) > limit - in_context ? limit - in_context - keep_free
                                                                   : limit - in_context;
        const OverflowPolicy policy = m_session->settings().overflow;
        // Under the shift policy the text streams through the context whatever its length.
        if (int64_t(tokens.size()) > room && policy != OverflowPolicy::Shift) {
            if (policy == OverflowPolicy::Error || room <= 0) {
                emit errorOccurred(QStringLiteral("the text is %1 tokens but only %2 of the context limit of %3 are "
                                                  "free (%4 already in the context); raise the limit, Clear, or "
                                                  "choose another overflow policy (head and tail kept, or shift)")
                                       .arg(tokens.size())
                                       .arg(std::max(0, room))
                                       .arg(limit)
                                       .arg(in_context));
                emit streamFinished(true, in_context);
                return;
            }
            tokens = fit_prompt(tokens, room, 0, OverflowPolicy::HeadTail);
        }
        const int total = int(tokens.size());
        const int chunk = chunk_tokens > 0 ? chunk_tokens : std::max(1, total);
        emit streamFitted(text_tokens, total);
        emit streamProgress(0, total);
        bool stopped = false;
        for (int done = 0; done < total;) {
            if (stop_requested()) {
                stopped = true;
                break;
            }
            apply_pending_settings();
            const int n = std::min(chunk, total - done);
            remember_logits(m_session->eval(std::span<const int32_t>(tokens.data() + done, size_t(n))));
            done += n;
            emit streamProgress(done, total);
        }
        // Everything in the context now is the document later chats continue from.
        m_document = m_session->history();
        emit streamFinished(stopped, m_session->n_past());
        return;
    } catch (const std::bad_alloc &) {
        emit errorOccurred(QStringLiteral("out of memory"));
    } catch (const std::exception &e) {
        emit errorOccurred(QString::fromUtf8(e.what()));
    } catch (...) {
        emit errorOccurred(QStringLiteral("unknown error"));
    }
    emit streamFinished(true, m_session ? m_session->n_past() : 0);
}

const std::vector<int32_t> &EngineWorker::perplexity_tokens(const QString &text)
{
    if (m_scored_tokens.empty() || text != m_scored_text) {
        m_scored_tokens = m_model->tokenizer().encode(utf8(text), false);
        m_scored_text = text;
    }
    return m_scored_tokens;
}

void EngineWorker::runPerplexity(const QString &text, const longscope::Settings &settings, int ctx, int bucket,
                                 const QString &label, qint64 maxTokens)
{
    run_perplexity(next_job(), text, settings, ctx, bucket, label, maxTokens);
}

void EngineWorker::run_perplexity(quint64 job, const QString &text, const longscope::Settings &settings, int ctx,
                                  int bucket, const QString &label, qint64 maxTokens)
{
    m_job = job;
    PerplexityRunResult run;
    run.label = label;
    run.settings = settings;
    run.settings.context_limit = ctx;
    run.ctx = ctx;
    run.bucket = bucket;
    const auto t0 = Clock::now();
    double step_seconds = 0;
    qint64 step_tokens = 0;
    try {
        if (!m_model)
            throw InvalidArgument("no model is loaded");
        run.n_ctx_train = m_model->hparams().n_ctx_train;
        run.model_name = m_summary.name;
        if (ctx < 2)
            throw InvalidArgument("the context length to score to must be at least 2 tokens");
        if (bucket < 1)
            throw InvalidArgument("the bucket size must be at least 1 position");
        run.settings.validate();
        if (stop_requested())
            throw Cancelled("cancelled while it waited in the queue");
        std::span<const int32_t> tokens(perplexity_tokens(text));
        if (maxTokens > 0 && qint64(tokens.size()) > maxTokens)
            tokens = tokens.first(size_t(maxTokens));

        PerplexityOptions options;
        options.ctx = ctx;
        options.bucket = bucket;
        options.n_threads = m_n_threads;
        options.settings = run.settings;
        // Through one context of `ctx` with the run's overflow policy, as
        // `longscope-cli perplexity --stream` does; truncation restarts the window.
        options.stream = perplexityStreams(run.settings);
        run.streamed = options.stream;
        options.progress = [&](int64_t done, int64_t total) {
            run.n_total = total;
            emit perplexityProgress(label, done, total);
            return !stop_requested();
        };
        // The run's own speed and memory; not emitted as stepMetrics, which describe the chat's
        // context.
        options.metrics = [&](const StepMetrics &m) {
            ++run.steps;
            step_seconds += m.seconds;
            step_tokens += m.n_tokens;
            run.peak_memory_bytes = std::max(run.peak_memory_bytes, qint64(m.memory.peak_total));
        };
        const PerplexityResult r = perplexity(*m_model, tokens, options);
        run.mean_nll = r.mean_nll;
        run.n_scored = r.n_scored;
        run.windows = r.windows;
        run.cancelled = r.cancelled;
        run.stopped = QString::fromStdString(r.stopped);
        const auto points = [](const std::vector<PositionBucket> &buckets) {
            QVector<PerplexityPoint> out;
            out.reserve(qsizetype(buckets.size()));
            for (const PositionBucket &b : buckets)
                out.append(PerplexityPoint{b.begin, b.end, b.count, b.mean_nll});
            return out;
        };
        run.curve = points(r.curve);
        run.text_curve = points(r.text_curve);
    } catch (const Cancelled &) {
        run.cancelled = true; // nothing scored
    } catch (const std::bad_alloc &) {
        run.error = QStringLiteral("out of memory");
    } catch (const std::exception &e) {
        run.error = QString::fromUtf8(e.what());
    } catch (...) {
        run.error = QStringLiteral("unknown error");
    }
    run.seconds = seconds_since(t0);
    run.tokens_per_second = step_seconds > 0 ? double(step_tokens) / step_seconds : 0;
    run.created = QDateTime::currentDateTimeUtc();
    if (run.failed())
        emit errorOccurred(run.error);
    emit perplexityFinished(label, run);
}

void EngineWorker::runNeedle(const NeedleRequest &request, const QString &bookText)
{
    run_needle(next_job(), request, bookText);
}

void EngineWorker::run_needle(quint64 job, const NeedleRequest &request, const QString &bookText)
{
    m_job = job;
    NeedleRunResult run;
    if (!m_model) {
        run.label = request.label;
        run.settings = request.settings;
        run.error = QStringLiteral("no model is loaded");
    } else if (stop_requested()) {
        run.label = request.label;
        run.cancelled = true;
    } else {
        std::span<const int32_t> book;
        try {
            if (request.task == NeedleTask::Book)
                book = perplexity_tokens(bookText);
        } catch (const std::exception &e) {
            run.error = QString::fromUtf8(e.what());
        }
        if (!run.failed()) {
            run = runNeedleGrid(*m_model, request, book, m_n_threads, [&](qint64 done, qint64 total) {
                emit needleProgress(request.label, done, total);
                return !stop_requested();
            });
            run.model_name = m_summary.name;
        }
    }
    if (run.failed())
        emit errorOccurred(run.error);
    emit needleFinished(request.label, run);
}

void EngineWorker::resetContext()
{
    if (!m_session)
        return;
    try {
        m_session->reset();
        m_document.clear();
        m_logits.clear();
        m_logits_pos = -1;
        apply_pending_settings();
    } catch (const std::exception &e) {
        emit errorOccurred(QString::fromUtf8(e.what()));
    }
}

} // namespace longscope::ui
