#include "core/conversation_list_model.h"

#include <QLocale>

namespace longscope::ui {

ConversationListModel::ConversationListModel(ConversationStore *store, QObject *parent)
    : QAbstractListModel(parent), m_store(store)
{
    if (m_store) {
        connect(m_store, &ConversationStore::conversationSaved, this, &ConversationListModel::onConversationSaved);
        connect(m_store, &ConversationStore::conversationRemoved, this,
                &ConversationListModel::onConversationRemoved);
    }
    refresh();
}

int ConversationListModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : int(m_items.size());
}

QVariant ConversationListModel::data(const QModelIndex &index, int role) const
{
    if (!index.isValid() || index.parent().isValid() || index.row() < 0 || index.row() >= rowCount())
        return {};
    const ConversationInfo &info = m_items[index.row()];
    switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole: return info.title;
    case Qt::ToolTipRole:
        return QStringLiteral("%1\n%2 messages, updated %3")
            .arg(info.title)
            .arg(info.message_count)
            .arg(QLocale().toString(info.updated.toLocalTime(), QLocale::ShortFormat));
    case IdRole: return info.id;
    case UpdatedRole: return info.updated;
    case CreatedRole: return info.created;
    case MessageCountRole: return info.message_count;
    default: return {};
    }
}

QHash<int, QByteArray> ConversationListModel::roleNames() const
{
    QHash<int, QByteArray> names = QAbstractListModel::roleNames();
    names[IdRole] = "conversationId";
    names[UpdatedRole] = "updated";
    names[CreatedRole] = "created";
    names[MessageCountRole] = "messageCount";
    return names;
}

void ConversationListModel::refresh()
{
    beginResetModel();
    m_items = m_store ? m_store->list() : QVector<ConversationInfo>{};
    endResetModel();
}

QString ConversationListModel::idAt(int row) const
{
    return row >= 0 && row < m_items.size() ? m_items[row].id : QString();
}

int ConversationListModel::rowOf(const QString &id) const
{
    for (int i = 0; i < m_items.size(); ++i)
        if (m_items[i].id == id)
            return i;
    return -1;
}

ConversationInfo ConversationListModel::infoAt(int row) const
{
    return row >= 0 && row < m_items.size() ? m_items[row] : ConversationInfo{};
}

void ConversationListModel::onConversationSaved(const QString &id)
{
    if (!m_store)
        return;
    // A conversation that cannot be read back is left out (the store's lastErrors() says why).
    const std::optional<Conversation> c = m_store->load(id);
    const int old = rowOf(id);
    if (!c) {
        if (old >= 0) {
            beginRemoveRows({}, old, old);
            m_items.removeAt(old);
            endRemoveRows();
        }
        return;
    }
    const ConversationInfo info{c->id(), c->title(), c->created(), c->updated(), int(c->messages().size())};
    // Where it belongs in "most recently updated first" order, ignoring its old row.
    auto before = [&](const ConversationInfo &a, const ConversationInfo &b) {
        if (a.updated != b.updated)
            return a.updated > b.updated;
        return a.id < b.id;
    };
    int target = 0;
    for (int i = 0; i < m_items.size(); ++i)
        if (i != old && before(m_items[i], info))
            ++target;
    if (old < 0) {
        beginInsertRows({}, target, target);
        m_items.insert(target, info);
        endInsertRows();
        return;
    }
    if (target != old) {
        // beginMoveRows takes the destination as the row before which it lands, in the
        // list as it is before the move.
        const int dest = target > old ? target + 1 : target;
        beginMoveRows({}, old, old, {}, dest);
        m_items.move(old, target);
        endMoveRows();
    }
    m_items[target] = info;
    const QModelIndex idx = index(target);
    emit dataChanged(idx, idx);
}

void ConversationListModel::onConversationRemoved(const QString &id)
{
    const int row = rowOf(id);
    if (row < 0)
        return;
    beginRemoveRows({}, row, row);
    m_items.removeAt(row);
    endRemoveRows();
}

} // namespace longscope::ui
