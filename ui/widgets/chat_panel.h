// The chat column: the conversation view, the system prompt, the input and Send / Stop /
// Regenerate / Clear. It only shows and asks; the window decides what the buttons may do
// and the ChatController runs the turn.
#pragma once

#include "widgets/plain_text_field.h"

#include <QWidget>

class QPlainTextEdit;
class QPushButton;

namespace longscope::ui {

class ChatInput;
class ChatModel;
class ChatView;

class ChatPanel : public QWidget {
    Q_OBJECT

public:
    explicit ChatPanel(ChatModel *model, QWidget *parent = nullptr);

    ChatView *chatView() const { return m_chatView; }
    ChatInput *chatInput() const { return m_input; }
    QPlainTextEdit *systemPromptEdit() const { return m_systemPrompt; }
    QPushButton *sendButton() const { return m_send; }
    QPushButton *stopButton() const { return m_stop; }
    QPushButton *regenerateButton() const { return m_regenerate; }
    QPushButton *clearButton() const { return m_clear; }

    QString systemPrompt() const;
    void setSystemPrompt(const QString &prompt);

    void setActionsEnabled(bool send, bool stop, bool regenerate, bool clear);

signals:
    void sendRequested(); // Enter in the input, or Send
    void stopRequested();
    void regenerateRequested();
    void clearRequested();
    void filesDropped(const QStringList &paths);

private:
    ChatView *m_chatView = nullptr;
    PlainTextField *m_systemPrompt = nullptr;
    ChatInput *m_input = nullptr;
    QPushButton *m_send = nullptr;
    QPushButton *m_stop = nullptr;
    QPushButton *m_regenerate = nullptr;
    QPushButton *m_clear = nullptr;
};

} // namespace longscope::ui
