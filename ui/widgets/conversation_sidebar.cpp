#include "widgets/conversation_sidebar.h"

#include "core/conversation_list_model.h"

#include <QAbstractItemModel>
#include <QApplication>
#include <QDateTime>
#include <QLocale>
#include <QPainter>
#include <QStyledItemDelegate>
#include <QHBoxLayout>
#include <QItemSelectionModel>
#include <QListView>
#include <QMenu>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>

namespace longscope::ui {

namespace {

// Two lines per conversation: the title, then when it was updated and how long it is.
class ConversationDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;

    QSize sizeHint(const QStyleOptionViewItem &option, const QModelIndex &) const override
    {
        const QFontMetrics fm(option.font);
        return {option.rect.width(), fm.lineSpacing() * 2 + 12};
    }

    void paint(QPainter *p, const QStyleOptionViewItem &option, const QModelIndex &index) const override
    {
        QStyleOptionViewItem opt = option;
        initStyleOption(&opt, index);
        const QString title = opt.text;
        opt.text.clear();
        QStyle *style = opt.widget ? opt.widget->style() : QApplication::style();
        style->drawControl(QStyle::CE_ItemViewItem, &opt, p, opt.widget);

        const bool selected = opt.state & QStyle::State_Selected;
        const QPalette &pal = opt.palette;
        const QRect r = opt.rect.adjusted(8, 5, -8, -5);
        QFont bold = opt.font;
        bold.setWeight(QFont::DemiBold);
        const QFontMetrics fm(opt.font);
        p->save();
        p->setFont(bold);
        p->setPen(pal.color(selected ? QPalette::HighlightedText : QPalette::Text));
        p->drawText(QRect(r.left(), r.top(), r.width(), fm.lineSpacing()), Qt::AlignLeft | Qt::AlignVCenter,
                    QFontMetrics(bold).elidedText(title, Qt::ElideRight, r.width()));
        QFont small = opt.font;
        small.setPointSizeF(std::max(7.0, small.pointSizeF() * 0.88));
        p->setFont(small);
        QColor muted = pal.color(selected ? QPalette::HighlightedText : QPalette::PlaceholderText);
        p->setPen(muted);
        const QDateTime updated = index.data(ConversationListModel::UpdatedRole).toDateTime().toLocalTime();
        const int count = index.data(ConversationListModel::MessageCountRole).toInt();
        const QString when = updated.date() == QDate::currentDate()
                                 ? QLocale().toString(updated.time(), QLocale::ShortFormat)
                                 : QLocale().toString(updated.date(), QLocale::ShortFormat);
        p->drawText(QRect(r.left(), r.top() + fm.lineSpacing() + 2, r.width(), fm.lineSpacing()),
                    Qt::AlignLeft | Qt::AlignVCenter,
                    count == 1 ? ConversationSidebar::tr("%1 · 1 message").arg(when)
                               : ConversationSidebar::tr("%1 · %2 messages").arg(when).arg(count));
        p->restore();
    }
};

} // namespace

ConversationSidebar::ConversationSidebar(QWidget *parent) : QWidget(parent)
{
    m_list = new QListView(this);
    m_list->setSelectionMode(QAbstractItemView::SingleSelection);
    m_list->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_list->setUniformItemSizes(true);
    m_list->setItemDelegate(new ConversationDelegate(m_list));
    m_list->setContextMenuPolicy(Qt::CustomContextMenu);
    m_list->setSpacing(1);
    m_list->setAccessibleName(tr("Saved conversations"));

    m_new = new QPushButton(tr("New chat"), this);
    m_new->setToolTip(tr("Start a new conversation (the current one is saved)"));
    m_delete = new QToolButton(this);
    m_delete->setText(tr("Delete"));
    m_delete->setToolTip(tr("Delete the selected conversation"));
    m_export = new QToolButton(this);
    m_export->setText(tr("Export"));
    m_export->setPopupMode(QToolButton::InstantPopup);
    auto *exportMenu = new QMenu(m_export);
    exportMenu->addAction(tr("As Markdown…"), this, [this] {
        if (!selectedId().isEmpty())
            emit exportMarkdownRequested(selectedId());
    });
    exportMenu->addAction(tr("As JSON…"), this, [this] {
        if (!selectedId().isEmpty())
            emit exportJsonRequested(selectedId());
    });
    m_export->setMenu(exportMenu);

    // New chat on a row of its own, the buttons for the selected one under the list: the
    // column stays narrow enough for a laptop screen.
    auto *buttons = new QHBoxLayout;
    buttons->setContentsMargins(0, 0, 0, 0);
    buttons->addWidget(m_delete, 1);
    buttons->addWidget(m_export, 1);
    m_delete->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    m_export->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);

    auto *v = new QVBoxLayout(this);
    v->setContentsMargins(4, 6, 4, 6);
    v->addWidget(m_new);
    v->addWidget(m_list, 1);
    v->addLayout(buttons);

    connect(m_list, &QListView::clicked, this, &ConversationSidebar::onActivated);
    connect(m_list, &QListView::activated, this, &ConversationSidebar::onActivated);
    connect(m_list, &QWidget::customContextMenuRequested, this, &ConversationSidebar::onContextMenu);
    connect(m_new, &QPushButton::clicked, this, &ConversationSidebar::newRequested);
    connect(m_delete, &QToolButton::clicked, this, [this] {
        if (!selectedId().isEmpty())
            emit deleteRequested(selectedId());
    });
    updateButtons();
}

void ConversationSidebar::setModel(QAbstractItemModel *model)
{
    m_list->setModel(model);
    connect(m_list->selectionModel(), &QItemSelectionModel::selectionChanged, this,
            &ConversationSidebar::updateButtons);
    connect(model, &QAbstractItemModel::modelReset, this, &ConversationSidebar::updateButtons);
    connect(model, &QAbstractItemModel::rowsRemoved, this, &ConversationSidebar::updateButtons);
    updateButtons();
}

void ConversationSidebar::setCurrentId(const QString &id)
{
    QAbstractItemModel *model = m_list->model();
    if (!model)
        return;
    for (int row = 0; row < model->rowCount(); ++row) {
        const QModelIndex index = model->index(row, 0);
        if (index.data(ConversationListModel::IdRole).toString() == id) {
            m_list->setCurrentIndex(index);
            return;
        }
    }
    m_list->clearSelection();
    updateButtons();
}

QString ConversationSidebar::selectedId() const
{
    if (!m_list->selectionModel())
        return {};
    const QModelIndexList rows = m_list->selectionModel()->selectedRows();
    return rows.isEmpty() ? QString() : rows.first().data(ConversationListModel::IdRole).toString();
}

void ConversationSidebar::onActivated(const QModelIndex &index)
{
    const QString id = index.data(ConversationListModel::IdRole).toString();
    if (!id.isEmpty())
        emit openRequested(id);
}

void ConversationSidebar::onContextMenu(const QPoint &pos)
{
    const QModelIndex index = m_list->indexAt(pos);
    if (!index.isValid())
        return;
    const QString id = index.data(ConversationListModel::IdRole).toString();
    QMenu menu(this);
    menu.addAction(tr("Open"), this, [this, id] { emit openRequested(id); });
    menu.addAction(tr("Export as Markdown…"), this, [this, id] { emit exportMarkdownRequested(id); });
    menu.addAction(tr("Export as JSON…"), this, [this, id] { emit exportJsonRequested(id); });
    menu.addSeparator();
    menu.addAction(tr("Delete…"), this, [this, id] { emit deleteRequested(id); });
    menu.exec(m_list->viewport()->mapToGlobal(pos));
}

void ConversationSidebar::updateButtons()
{
    const bool selected = !selectedId().isEmpty();
    m_delete->setEnabled(selected);
    m_export->setEnabled(selected);
}

} // namespace longscope::ui
