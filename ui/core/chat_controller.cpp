#include "core/chat_controller.h"

#include "core/chat_model.h"
#include "core/conversation_store.h"
#include "core/settings_json.h"

#include <QDateTime>
#include <QJsonObject>
#include <QRandomGenerator>

#include <utility>

namespace longscope::ui {

namespace {

// The settings a conversation was held with, saved with it.
QJsonObject snapshot(const GenerationParams &p, const longscope::Settings &s)
{
    QJsonObject gen{{QStringLiteral("max_new_tokens"), p.max_new_tokens},
                    {QStringLiteral("temperature"), double(p.temperature)},
                    {QStringLiteral("top_p"), double(p.top_p)},
                    {QStringLiteral("top_k"), p.top_k},
                    {QStringLiteral("do_sample"), p.do_sample},
                    {QStringLiteral("repetition_penalty"), double(p.repetition_penalty)},
                    {QStringLiteral("seed"), QString::number(p.seed)},
                    {QStringLiteral("random_seed"), p.random_seed}};
    return {{QStringLiteral("generation"), gen}, {QStringLiteral("long_context"), settingsToJson(s)}};
}

Message stamped(Message::Role role, const QString &text = QString())
{
    Message m;
    m.role = role;
    m.text = text;
    m.timestamp = QDateTime::currentDateTimeUtc();
    return m;
}

} // namespace

ChatController::ChatController(ConversationStore *store, QObject *parent)
    : QObject(parent), m_store(store), m_model(new ChatModel(this))
{
    registerMetaTypes();
}

ChatController::~ChatController() = default;

void ChatController::setWorker(InferenceWorker *worker)
{
    if (m_worker)
        disconnect(m_worker, nullptr, this, nullptr);
    m_worker = worker;
    if (!worker)
        return;
    connect(worker, &InferenceWorker::promptFitted, this, &ChatController::onPromptFitted);
    connect(worker, &InferenceWorker::chatFormatUsed, this, &ChatController::onChatFormatUsed);
    connect(worker, &InferenceWorker::tokenStreamed, this, &ChatController::onTokenStreamed);
    connect(worker, &InferenceWorker::generationFinished, this, &ChatController::onGenerationFinished);
}

bool ChatController::hasUserMessage() const
{
    for (const Message &m : m_conversation.messages())
        if (m.role == Message::Role::User)
            return true;
    return false;
}

bool ChatController::send(const QString &text)
{
    const Message m = stamped(Message::Role::User, text);
    m_conversation.appendMessage(m);
    m_model->appendMessage(m);
    return startChat();
}

bool ChatController::startChat()
{
    const Inputs in = inputs();
    ChatRequest request;
    request.system_prompt = in.systemPrompt;
    request.turns = m_conversation.chatTurns();
    request.params = withSeed(in.params);
    request.chat_template = in.chatTemplate.templateText();
    request.chat_format = in.chatTemplate.formatName();
    if (request.turns.isEmpty() || request.turns.last().role != ChatTurn::Role::User) {
        emit statusMessage(tr("There is no message to answer"), 4000);
        return false;
    }
    const Message reply = stamped(Message::Role::Assistant);
    m_conversation.appendMessage(reply);
    m_model->appendMessage(reply);
    m_state = State::Chatting;
    emit replyStarted(m_state);
    if (m_worker)
        m_worker->queueChat(request);
    return true;
}

bool ChatController::regenerate()
{
    // Notes after the reply ("context full", errors) go with it.
    while (!m_conversation.isEmpty() && m_conversation.messages().last().role == Message::Role::SystemNote) {
        m_conversation.removeLastMessage();
        m_model->removeLast();
    }
    if (!m_conversation.isEmpty() && m_conversation.messages().last().role == Message::Role::Assistant) {
        m_conversation.removeLastMessage();
        m_model->removeLast();
    }
    return startChat();
}

void ChatController::continueText()
{
    const Message reply = stamped(Message::Role::Assistant);
    m_conversation.appendMessage(reply);
    m_model->appendMessage(reply);
    m_state = State::Continuing;
    emit replyStarted(m_state);
    if (m_worker)
        m_worker->queueContinue(withSeed(inputs().params));
}

GenerationParams ChatController::withSeed(GenerationParams params)
{
    // Regenerate and every new turn get a fresh seed unless the user pinned one. Kept within
    // 31 bits, so that it can be typed into the seed box to pin it.
    if (params.random_seed)
        params.seed = QRandomGenerator::global()->bounded(quint32(1) << 31);
    m_lastSeed = params.seed;
    return params;
}

void ChatController::newConversation()
{
    setConversation(Conversation());
}

void ChatController::setConversation(const Conversation &conversation)
{
    m_conversation = conversation;
    m_model->setMessages(conversation.messages());
    if (m_worker)
        m_worker->queueResetContext();
}

bool ChatController::open(const QString &id, QString *error)
{
    const std::optional<Conversation> c = m_store->load(id, error);
    if (!c)
        return false;
    save();
    setConversation(*c);
    return true;
}

void ChatController::save()
{
    if (m_conversation.isEmpty())
        return;
    const Inputs in = inputs();
    m_conversation.setSystemPrompt(in.systemPrompt);
    if (!in.modelPath.isEmpty())
        m_conversation.setModelPath(in.modelPath);
    m_conversation.setSettingsSnapshot(snapshot(in.params, in.settings));
    m_conversation.setPlotHistory(in.plots);
    m_conversation.touch();
    QString error;
    if (!m_store->save(m_conversation, &error)) {
        emit saveFailed(error);
        return;
    }
    emit saved(m_conversation.id(), m_conversation.title());
}

void ChatController::detachFrom(const QString &id)
{
    if (id == m_conversation.id())
        m_conversation.setId(Conversation().id());
}

void ChatController::addNote(const QString &text)
{
    const Message m = stamped(Message::Role::SystemNote, text);
    m_conversation.appendMessage(m);
    m_model->appendMessage(m);
}

void ChatController::addErrorNote(const QString &message)
{
    const QString text = tr("Error: %1").arg(message);
    if (m_state == State::Idle) {
        addNote(text);
        return;
    }
    QVector<Message> msgs = m_conversation.messages();
    const bool replyLast = !msgs.isEmpty() && msgs.last().role == Message::Role::Assistant;
    msgs.insert(replyLast ? msgs.size() - 1 : msgs.size(), stamped(Message::Role::SystemNote, text));
    m_conversation.setMessages(msgs);
    m_model->setMessages(msgs);
}

void ChatController::onChatFormatUsed(const QString &format, const QString &note)
{
    const QString text = format == QLatin1String("model")    ? tr("Chat template: the model's own")
                         : format == QLatin1String("custom") ? tr("Chat template: custom (View > Chat Template…)")
                                                             : tr("Chat template: built-in %1 (%2)").arg(format, note);
    if (text == m_chatFormat)
        return;
    m_chatFormat = text;
    emit chatFormatChanged(text);
    emit statusMessage(text, 0);
}

void ChatController::onPromptFitted(int promptTokens, int droppedTurns, bool truncated)
{
    if (droppedTurns > 0)
        addNote(tr("The prompt is %L1 tokens: the %L2 oldest turn(s) were left out to fit the context limit.")
                    .arg(promptTokens)
                    .arg(droppedTurns));
    else if (truncated)
        addNote(tr("The prompt did not fit: its head and tail were kept (%L1 tokens).").arg(promptTokens));
    if ((droppedTurns > 0 || truncated) && m_state == State::Chatting) {
        // Keep the reply the last message: the note goes before it.
        QVector<Message> msgs = m_conversation.messages();
        if (msgs.size() >= 2 && msgs[msgs.size() - 2].role == Message::Role::Assistant) {
            std::swap(msgs[msgs.size() - 1], msgs[msgs.size() - 2]);
            m_conversation.setMessages(msgs);
            m_model->setMessages(msgs);
        }
    }
}

void ChatController::onTokenStreamed(const QString &text)
{
    if (m_state == State::Idle)
        return;
    m_conversation.appendToLast(text);
    m_model->appendToLast(text);
}

void ChatController::emitSummary(const GenerationSummary &summary)
{
    // A reply capped to the free context says so (older turns make way with the next message).
    const QString capped = summary.reply_room >= 0
                               ? tr(" (capped at the %L1 tokens the context had free)").arg(summary.reply_room)
                               : QString();
    emit statusMessage(tr("%L1 tokens · prompt %L2 tokens · decode %L3 tok/s · %4%5 · seed %6")
                           .arg(summary.generated_tokens)
                           .arg(summary.prompt_tokens)
                           .arg(summary.decode_tokens_per_second, 0, 'f', 0)
                           .arg(finishReasonText(summary.reason), capped)
                           .arg(m_lastSeed),
                       8000);
}

void ChatController::onGenerationFinished(const GenerationSummary &summary)
{
    m_lastSummary = summary;
    const bool replying = m_state != State::Idle;
    if (replying && !m_conversation.isEmpty()) {
        const Message last = m_conversation.messages().last();
        if (last.role == Message::Role::Assistant && last.text.isEmpty()) {
            m_conversation.removeLastMessage();
            m_model->removeLast();
        }
    }
    switch (summary.reason) {
    case FinishReason::ContextFull:
        addNote(tr("The context is full (%L1 tokens): raise the context limit in the long-context panel, or Clear to "
                   "start over.")
                    .arg(inputs().contextLimit));
        break;
    case FinishReason::Stopped:
        emit statusMessage(tr("Stopped after %L1 tokens").arg(summary.generated_tokens), 5000);
        break;
    case FinishReason::Error:
        break; // errorOccurred said why
    default:
        emitSummary(summary);
    }
    if (replying)
        save();
    m_state = State::Idle;
    emit replyFinished(summary);
}

} // namespace longscope::ui
