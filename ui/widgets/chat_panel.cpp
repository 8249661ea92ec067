#include "widgets/chat_panel.h"

#include "widgets/chat_input.h"
#include "widgets/chat_view.h"
#include "widgets/plain_text_field.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

namespace longscope::ui {

ChatPanel::ChatPanel(ChatModel *model, QWidget *parent) : QWidget(parent)
{
    m_chatView = new ChatView(this);
    m_chatView->setModel(model);

    m_systemPrompt = new PlainTextField(this);
    m_systemPrompt->setPlaceholderText(tr("System prompt (optional): how the model should behave"));
    m_systemPrompt->setTabChangesFocus(true);
    m_systemPrompt->setAccessibleName(tr("System prompt"));
    m_systemPrompt->setFixedHeight(m_systemPrompt->fontMetrics().lineSpacing() * 2 + 14);

    m_input = new ChatInput(this);
    m_input->setFixedHeight(m_input->sizeHint().height());

    m_send = new QPushButton(tr("Send"), this);
    m_send->setDefault(true);
    m_send->setToolTip(tr("Send the message (Enter)"));
    m_stop = new QPushButton(tr("Stop"), this);
    m_stop->setToolTip(tr("Stop the generation or the book at the next step"));
    m_regenerate = new QPushButton(tr("Regenerate"), this);
    m_regenerate->setToolTip(tr("Answer the last message again"));
    m_clear = new QPushButton(tr("Clear"), this);
    m_clear->setToolTip(tr("Start over: empty the conversation and the context (it stays saved)"));
    for (QPushButton *b : {m_send, m_stop, m_regenerate, m_clear})
        b->setMinimumWidth(72);

    auto *hint = new QLabel(tr("Enter sends · Shift+Enter starts a new line · drop a .txt to open it as a book"), this);
    QPalette hp = hint->palette();
    hp.setColor(QPalette::WindowText, hp.color(QPalette::PlaceholderText));
    hint->setPalette(hp);
    // The hint gives way to the buttons in a narrow window (the whole line is its tooltip).
    hint->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    hint->setToolTip(hint->text());

    auto *buttons = new QHBoxLayout;
    buttons->addWidget(hint, 1);
    buttons->addWidget(m_clear);
    buttons->addWidget(m_regenerate);
    buttons->addWidget(m_stop);
    buttons->addWidget(m_send);

    auto *v = new QVBoxLayout(this);
    v->setContentsMargins(0, 0, 0, 4);
    v->setSpacing(6);
    v->addWidget(m_chatView, 1);
    v->addWidget(m_systemPrompt);
    v->addWidget(m_input);
    v->addLayout(buttons);

    connect(m_input, &ChatInput::sendRequested, this, &ChatPanel::sendRequested);
    connect(m_input, &ChatInput::filesDropped, this, &ChatPanel::filesDropped);
    connect(m_send, &QPushButton::clicked, this, &ChatPanel::sendRequested);
    connect(m_stop, &QPushButton::clicked, this, &ChatPanel::stopRequested);
    connect(m_regenerate, &QPushButton::clicked, this, &ChatPanel::regenerateRequested);
    connect(m_clear, &QPushButton::clicked, this, &ChatPanel::clearRequested);
}

QString ChatPanel::systemPrompt() const { return m_systemPrompt->toPlainText(); }

void ChatPanel::setSystemPrompt(const QString &prompt) { m_systemPrompt->setText(prompt); }

void ChatPanel::setActionsEnabled(bool send, bool stop, bool regenerate, bool clear)
{
    m_send->setEnabled(send);
    m_stop->setEnabled(stop);
    m_regenerate->setEnabled(regenerate);
    m_clear->setEnabled(clear);
}

} // namespace longscope::ui
