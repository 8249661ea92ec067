// The runs there are to overlay: every saved run (and this session's), newest first, each
// with a checkbox; checked runs are plotted and show their plot colour. One list holds one
// kind: perplexity runs, or needle grids (checked: shown as heatmaps).
#pragma once

#include "core/explore_needle.h"
#include "core/perplexity_run.h"

#include <QHash>
#include <QListWidget>

namespace longscope::ui {

class ExploreRunList : public QListWidget {
    Q_OBJECT

public:
    explicit ExploreRunList(QWidget *parent = nullptr);

    // Replaces the list; `checked` ids stay checked.
    void setRuns(const QVector<PerplexityRunResult> &runs, const QStringList &checked = {});
    void setRuns(const QVector<NeedleRunResult> &runs, const QStringList &checked = {});
    // Puts a run at the top.
    void addRun(const PerplexityRunResult &run, bool checked);
    void addRun(const NeedleRunResult &run, bool checked);
    bool removeRun(const QString &id);

    QStringList ids() const;
    QStringList checkedIds() const;
    bool isChecked(const QString &id) const;
    void setChecked(const QString &id, bool checked);
    void setAllChecked(bool checked);
    QString currentId() const;
    int rowOf(const QString &id) const;
    // The plot's colour of each checked run (by id); the others get none.
    void setColors(const QHash<QString, QColor> &colors);

signals:
    void checkedChanged();

private:
    QListWidgetItem *makeItem(const PerplexityRunResult &run, bool checked);
    QListWidgetItem *makeItem(const NeedleRunResult &run, bool checked);
    QListWidgetItem *finishItem(QListWidgetItem *item, const QString &id, bool checked, bool dashed);
    void setItems(const QVector<QListWidgetItem *> &items);
    void insertTop(QListWidgetItem *item);
    bool m_updating = false;
};

} // namespace longscope::ui
