// The saved conversations as a list model: most recently updated first; rows follow the
// store's saves and removals.
#pragma once

#include "core/conversation_store.h"

#include <QAbstractListModel>
#include <QPointer>
#include <QVector>

namespace longscope::ui {

class ConversationListModel : public QAbstractListModel {
    Q_OBJECT

public:
    enum Roles {
        IdRole = Qt::UserRole,          // QString
        UpdatedRole = Qt::UserRole + 1, // QDateTime
        CreatedRole,                    // QDateTime
        MessageCountRole,               // int
    };

    explicit ConversationListModel(ConversationStore *store, QObject *parent = nullptr);

    int rowCount(const QModelIndex &parent = QModelIndex()) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QHash<int, QByteArray> roleNames() const override;

    // Re-reads the whole directory.
    void refresh();
    QString idAt(int row) const;
    int rowOf(const QString &id) const; // -1 when absent
    ConversationInfo infoAt(int row) const;

private slots:
    void onConversationSaved(const QString &id);
    void onConversationRemoved(const QString &id);

private:
    QPointer<ConversationStore> m_store;
    QVector<ConversationInfo> m_items;
};

} // namespace longscope::ui
