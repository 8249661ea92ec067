// The current conversation's messages as a list model (the chat view's rows). The reply
// streams into the last row through appendToLast().
#pragma once

#include "core/conversation.h"

#include <QAbstractListModel>
#include <QVector>

namespace longscope::ui {

class ChatModel : public QAbstractListModel {
    Q_OBJECT

public:
    enum Roles {
        RoleRole = Qt::UserRole, // int(Message::Role)
        TextRole,                // QString
        TimestampRole,           // QDateTime
        ReasoningTokensRole,     // int: tokens streamed while the reply was thinking
    };

    explicit ChatModel(QObject *parent = nullptr);

    int rowCount(const QModelIndex &parent = QModelIndex()) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QHash<int, QByteArray> roleNames() const override;

    void appendMessage(const Message &message);
    void appendMessage(Message::Role role, const QString &text);
    // Streaming: appends to the last message's text and emits dataChanged for its row. Each
    // call is one streamed token; those that leave the reply inside <think> are counted.
    void appendToLast(const QString &text);
    void setLastText(const QString &text);
    void removeLast(); // for Regenerate
    void clear();
    void setMessages(const QVector<Message> &messages); // a reset

    const QVector<Message> &messages() const { return m_messages; }
    int count() const { return static_cast<int>(m_messages.size()); }
    Message at(int row) const { return m_messages.value(row); }

private:
    QVector<Message> m_messages;
};

} // namespace longscope::ui
