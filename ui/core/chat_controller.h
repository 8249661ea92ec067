// The flow of a chat turn, without widgets: the conversation and its message model, the
// request built from them, the reply streamed in from the worker, notes (a prompt cut to
// fit, a full context, errors), Regenerate, Clear and saving. The window owns the widgets the
// inputs come from (system prompt, sampling controls) and tells the controller how to read
// them; it keeps what spans the whole app (which job is running, the status bar).
#pragma once

#include "core/chat_template_choice.h"
#include "core/conversation.h"
#include "core/inference_worker.h"

#include "longscope/settings.h"

#include <QObject>
#include <QPointer>
#include <QString>

#include <functional>

namespace longscope::ui {

class ChatModel;
class ConversationStore;

class ChatController : public QObject {
    Q_OBJECT

public:
    enum class State { Idle, Chatting, Continuing };
    Q_ENUM(State)

    // What a turn is asked with, read when it starts and when the conversation is saved.
    struct Inputs {
        QString systemPrompt;
        GenerationParams params;
        longscope::Settings settings;
        QString modelPath;    // empty: no model loaded (the saved path is kept)
        int contextLimit = 0; // for the "context full" note
        PlotHistory plots;    // what the live plots show, saved with the conversation
        ChatTemplateChoice chatTemplate; // chosen for this model (the model's own by default)
    };
    using InputsSource = std::function<Inputs()>;

    // `store`: where conversations are saved (not owned).
    explicit ChatController(ConversationStore *store, QObject *parent = nullptr);
    ~ChatController() override;

    // Connects the worker's chat signals (the local engine on its own thread, or a remote
    // server); null: none.
    void setWorker(InferenceWorker *worker);
    void setInputs(InputsSource source) { m_inputs = std::move(source); }

    const Conversation &conversation() const { return m_conversation; }
    ChatModel *model() const { return m_model; }
    State state() const { return m_state; }
    bool isReplying() const { return m_state != State::Idle; }
    bool hasUserMessage() const;
    const GenerationSummary &lastSummary() const { return m_lastSummary; }
    // The seed the last reply was sampled with (drawn anew for each one unless pinned).
    quint64 lastSeed() const { return m_lastSeed; }

    // Appends the user's message and asks for a reply.
    bool send(const QString &text);
    // Drops the last reply (and the notes after it) and asks again.
    bool regenerate();
    // Lets the model write on from the context (a book streamed in) as a new reply.
    void continueText();
    // Empties the conversation and the worker's context (the old one stays saved if it was).
    void newConversation();
    // Saves the current conversation, then opens the saved one `id` and clears the context
    // (its turns are evaluated again with the next message).
    bool open(const QString &id, QString *error);
    // Saves the conversation with the current inputs (an empty one is not saved).
    void save();
    // The conversation (when `id` is it) was deleted while a reply still streams: the reply
    // saves under a new id.
    void detachFrom(const QString &id);

    void addNote(const QString &text);
    // "Error: ..."; during a reply it goes before the reply bubble, so streamed text still
    // lands in the reply.
    void addErrorNote(const QString &message);

signals:
    // Chatting or Continuing: a job was queued to the worker.
    void replyStarted(longscope::ui::ChatController::State state);
    // The worker finished a chat or continuation (for any reason); the conversation is saved
    // and the state is Idle again.
    void replyFinished(const longscope::ui::GenerationSummary &summary);
    void saved(const QString &id, const QString &title);
    void saveFailed(const QString &error);
    void statusMessage(const QString &text, int timeoutMs);
    // Which chat template the prompt is rendered with (the model's own, or which built-in
    // format and why), sent when it changes.
    void chatFormatChanged(const QString &text);

private:
    bool startChat();
    void setConversation(const Conversation &conversation);
    void onPromptFitted(int promptTokens, int droppedTurns, bool truncated);
    void onChatFormatUsed(const QString &format, const QString &note);
    void onTokenStreamed(const QString &text);
    void onGenerationFinished(const GenerationSummary &summary);
    Inputs inputs() const { return m_inputs ? m_inputs() : Inputs{}; }
    // `params` with the seed this request samples with (remembered as lastSeed()).
    GenerationParams withSeed(GenerationParams params);
    void emitSummary(const GenerationSummary &summary);

    ConversationStore *m_store = nullptr;
    ChatModel *m_model = nullptr;
    QPointer<InferenceWorker> m_worker;
    InputsSource m_inputs;
    Conversation m_conversation;
    State m_state = State::Idle;
    QString m_chatFormat; // the last chat-template text sent
    GenerationSummary m_lastSummary;
    quint64 m_lastSeed = 0;
};

} // namespace longscope::ui
