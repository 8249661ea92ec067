#include "widgets/explore_run_list.h"

#include "core/settings_json.h"
#include "widgets/explore_heatmaps.h"
#include "widgets/explore_plot.h"

namespace longscope::ui {

namespace {

constexpr int k_idRole = Qt::UserRole + 1;
constexpr int k_dashedRole = Qt::UserRole + 2;

} // namespace

ExploreRunList::ExploreRunList(QWidget *parent) : QListWidget(parent)
{
    setObjectName(QStringLiteral("exploreRunList"));
    setSelectionMode(QAbstractItemView::SingleSelection);
    setIconSize(QSize(22, 12));
    setAlternatingRowColors(true);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setTextElideMode(Qt::ElideRight);
    connect(this, &QListWidget::itemChanged, this, [this] {
        if (!m_updating)
            emit checkedChanged();
    });
}

QListWidgetItem *ExploreRunList::makeItem(const PerplexityRunResult &run, bool checked)
{
    auto *it = new QListWidgetItem;
    QString title = run.label;
    if (run.cancelled)
        title += tr(" (cancelled)");
    const QString when = run.created.toLocalTime().toString(QStringLiteral("d MMM HH:mm"));
    QString book = run.book_title.isEmpty() ? tr("untitled") : run.book_title;
    if (book.size() > 24)
        book = book.left(22).trimmed() + QStringLiteral("…");
    it->setText(tr("%1  ·  ppl %L2\nctx %L3 · %4 · %5")
                    .arg(title)
                    .arg(run.perplexity(), 0, 'f', run.perplexity() < 100 ? 1 : 0)
                    .arg(run.ctx)
                    .arg(when, book));
    it->setToolTip(tr("%1\n%2\n“%3”, model %4\nwindows of %L5 · buckets of %L6 · %L7 tokens scored")
                       .arg(run.label, describeSettings(run.settings), run.book_title, run.model_name)
                       .arg(run.ctx)
                       .arg(run.bucket)
                       .arg(run.n_scored));
    return finishItem(it, run.id, checked, run.settings.rope.store_kv_before_rope);
}

QListWidgetItem *ExploreRunList::makeItem(const NeedleRunResult &run, bool checked)
{
    auto *it = new QListWidgetItem;
    QString title = run.label;
    if (run.cancelled)
        title += tr(" (cancelled)");
    const QString when = run.created.toLocalTime().toString(QStringLiteral("d MMM HH:mm"));
    const QString task = run.task == longscope::NeedleTask::Book ? tr("fact in a book") : tr("passkey");
    it->setText(tr("%1  ·  mean P %2\n%3 · %4 × %5 cells · %6")
                    .arg(title)
                    .arg(ExploreHeatmaps::probabilityText(run.meanProbability()))
                    .arg(task)
                    .arg(run.lengths.size())
                    .arg(run.depths.size())
                    .arg(when));
    QStringList lengths;
    for (int l : run.lengths)
        lengths << QString::number(l);
    it->setToolTip(tr("%1\n%2\n%3, model %4\nlengths %5 · %L6 trial(s) per cell · %L7 of %L8 cells retrieved")
                       .arg(run.label, describeSettings(run.settings),
                            run.task == longscope::NeedleTask::Book ? tr("fact in “%1”").arg(run.book_title) : task,
                            run.model_name, lengths.join(QStringLiteral(", ")))
                       .arg(run.trials)
                       .arg(run.retrievedCells())
                       .arg(run.cells.size()));
    return finishItem(it, run.id, checked, false);
}

QListWidgetItem *ExploreRunList::finishItem(QListWidgetItem *it, const QString &id, bool checked, bool dashed)
{
    it->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsUserCheckable);
    it->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
    it->setData(k_idRole, id);
    it->setData(k_dashedRole, dashed);
    it->setIcon(ExplorePlot::lineIcon(QColor(), false));
    return it;
}

void ExploreRunList::setItems(const QVector<QListWidgetItem *> &items)
{
    m_updating = true;
    clear();
    for (QListWidgetItem *it : items)
        addItem(it);
    m_updating = false;
    emit checkedChanged();
}

void ExploreRunList::insertTop(QListWidgetItem *it)
{
    m_updating = true;
    insertItem(0, it);
    m_updating = false;
    emit checkedChanged();
}

void ExploreRunList::setRuns(const QVector<PerplexityRunResult> &runs, const QStringList &checked)
{
    QVector<QListWidgetItem *> items;
    for (const PerplexityRunResult &run : runs)
        items.append(makeItem(run, checked.contains(run.id)));
    setItems(items);
}

void ExploreRunList::setRuns(const QVector<NeedleRunResult> &runs, const QStringList &checked)
{
    QVector<QListWidgetItem *> items;
    for (const NeedleRunResult &run : runs)
        items.append(makeItem(run, checked.contains(run.id)));
    setItems(items);
}

void ExploreRunList::addRun(const PerplexityRunResult &run, bool checked) { insertTop(makeItem(run, checked)); }

void ExploreRunList::addRun(const NeedleRunResult &run, bool checked) { insertTop(makeItem(run, checked)); }

bool ExploreRunList::removeRun(const QString &id)
{
    const int row = rowOf(id);
    if (row < 0)
        return false;
    delete takeItem(row);
    emit checkedChanged();
    return true;
}

QStringList ExploreRunList::ids() const
{
    QStringList out;
    for (int i = 0; i < count(); ++i)
        out << item(i)->data(k_idRole).toString();
    return out;
}

QStringList ExploreRunList::checkedIds() const
{
    QStringList out;
    for (int i = 0; i < count(); ++i)
        if (item(i)->checkState() == Qt::Checked)
            out << item(i)->data(k_idRole).toString();
    return out;
}

bool ExploreRunList::isChecked(const QString &id) const
{
    const int row = rowOf(id);
    return row >= 0 && item(row)->checkState() == Qt::Checked;
}

void ExploreRunList::setChecked(const QString &id, bool checked)
{
    if (const int row = rowOf(id); row >= 0)
        item(row)->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
}

void ExploreRunList::setAllChecked(bool checked)
{
    m_updating = true;
    for (int i = 0; i < count(); ++i)
        item(i)->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
    m_updating = false;
    emit checkedChanged();
}

QString ExploreRunList::currentId() const
{
    const QListWidgetItem *it = currentItem();
    return it ? it->data(k_idRole).toString() : QString();
}

int ExploreRunList::rowOf(const QString &id) const
{
    for (int i = 0; i < count(); ++i)
        if (item(i)->data(k_idRole).toString() == id)
            return i;
    return -1;
}

void ExploreRunList::setColors(const QHash<QString, QColor> &colors)
{
    m_updating = true;
    for (int i = 0; i < count(); ++i) {
        QListWidgetItem *it = item(i);
        it->setIcon(ExplorePlot::lineIcon(colors.value(it->data(k_idRole).toString()), it->data(k_dashedRole).toBool()));
    }
    m_updating = false;
}

} // namespace longscope::ui
