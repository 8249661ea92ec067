// The saved conversations: a list (click to reopen) with New, Delete and Export actions,
// also on a context menu. It only asks; the main window does the work (and confirms
// deletions).
#pragma once

#include <QWidget>

class QAbstractItemModel;
class QListView;
class QModelIndex;
class QPushButton;
class QToolButton;

namespace longscope::ui {

class ConversationSidebar : public QWidget {
    Q_OBJECT

public:
    explicit ConversationSidebar(QWidget *parent = nullptr);

    // A ConversationListModel (its IdRole names each row).
    void setModel(QAbstractItemModel *model);
    QListView *listView() const { return m_list; }
    // Highlights the row of `id` (none when absent).
    void setCurrentId(const QString &id);
    QString selectedId() const;

signals:
    void openRequested(const QString &id);
    void newRequested();
    void deleteRequested(const QString &id);
    void exportMarkdownRequested(const QString &id);
    void exportJsonRequested(const QString &id);

private:
    void onActivated(const QModelIndex &index);
    void onContextMenu(const QPoint &pos);
    void updateButtons();

    QListView *m_list = nullptr;
    QPushButton *m_new = nullptr;
    QToolButton *m_delete = nullptr;
    QToolButton *m_export = nullptr;
};

} // namespace longscope::ui
