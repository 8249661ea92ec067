#include "core/chat_model.h"

#include "core/thought.h"

namespace longscope::ui {

ChatModel::ChatModel(QObject *parent) : QAbstractListModel(parent) {}

int ChatModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : int(m_messages.size());
}

QVariant ChatModel::data(const QModelIndex &index, int role) const
{
    if (!index.isValid() || index.parent().isValid() || index.row() < 0 || index.row() >= rowCount())
        return {};
    const Message &m = m_messages[index.row()];
    switch (role) {
    case Qt::DisplayRole:
    case TextRole: return m.text;
    case RoleRole: return int(m.role);
    case TimestampRole: return m.timestamp;
    case ReasoningTokensRole: return m.reasoningTokens;
    default: return {};
    }
}

QHash<int, QByteArray> ChatModel::roleNames() const
{
    QHash<int, QByteArray> names = QAbstractListModel::roleNames();
    names[RoleRole] = "role";
    names[TextRole] = "text";
    names[TimestampRole] = "timestamp";
    names[ReasoningTokensRole] = "reasoningTokens";
    return names;
}

void ChatModel::appendMessage(const Message &message)
{
    Message m = message;
    if (!m.timestamp.isValid())
        m.timestamp = QDateTime::currentDateTimeUtc();
    const int row = int(m_messages.size());
    beginInsertRows({}, row, row);
    m_messages.push_back(m);
    endInsertRows();
}

void ChatModel::appendMessage(Message::Role role, const QString &text)
{
    appendMessage(Message{role, text, {}});
}

void ChatModel::appendToLast(const QString &text)
{
    if (m_messages.isEmpty() || text.isEmpty())
        return;
    Message &last = m_messages.last();
    last.text += text;
    const bool thinking = last.role == Message::Role::Assistant && splitThought(last.text).thinking;
    if (thinking)
        ++last.reasoningTokens;
    const QModelIndex idx = index(int(m_messages.size()) - 1);
    emit dataChanged(idx, idx, {Qt::DisplayRole, TextRole, ReasoningTokensRole});
}

void ChatModel::setLastText(const QString &text)
{
    if (m_messages.isEmpty())
        return;
    m_messages.last().text = text;
    const QModelIndex idx = index(int(m_messages.size()) - 1);
    emit dataChanged(idx, idx, {Qt::DisplayRole, TextRole});
}

void ChatModel::removeLast()
{
    if (m_messages.isEmpty())
        return;
    const int row = int(m_messages.size()) - 1;
    beginRemoveRows({}, row, row);
    m_messages.removeLast();
    endRemoveRows();
}

void ChatModel::clear()
{
    if (m_messages.isEmpty())
        return;
    beginResetModel();
    m_messages.clear();
    endResetModel();
}

void ChatModel::setMessages(const QVector<Message> &messages)
{
    beginResetModel();
    m_messages = messages;
    endResetModel();
}

} // namespace longscope::ui
