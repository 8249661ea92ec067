#include "widgets/explore_settings_list.h"

#include "core/engine_worker.h"
#include "core/settings_json.h"

namespace longscope::ui {

namespace {

constexpr int k_settingsRole = Qt::UserRole + 1;

} // namespace

ExploreSettingsList::ExploreSettingsList(QWidget *parent) : QListWidget(parent)
{
    setObjectName(QStringLiteral("exploreSettingsList"));
    setSelectionMode(QAbstractItemView::SingleSelection);
    setUniformItemSizes(true);
    connect(this, &QListWidget::itemChanged, this, [this] { emit checkedChanged(); });
    resetToPresets();
}

int ExploreSettingsList::addSettings(const QString &label, const longscope::Settings &settings)
{
    for (int i = 0; i < count(); ++i) {
        if (sameExploreSettings(settingsAt(i).settings, settings)) {
            item(i)->setCheckState(Qt::Checked);
            return i;
        }
    }
    auto *it = new QListWidgetItem(label, this);
    it->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsUserCheckable);
    it->setCheckState(Qt::Checked);
    it->setData(k_settingsRole, QVariant::fromValue(settings));
    it->setToolTip(describeSettings(settings));
    emit checkedChanged();
    return count() - 1;
}

ExplorePreset ExploreSettingsList::settingsAt(int row) const
{
    const QListWidgetItem *it = item(row);
    if (!it)
        return {};
    return {it->text(), it->data(k_settingsRole).value<longscope::Settings>()};
}

QVector<ExplorePreset> ExploreSettingsList::checkedSettings() const
{
    QVector<ExplorePreset> out;
    for (int i = 0; i < count(); ++i)
        if (item(i)->checkState() == Qt::Checked)
            out.append(settingsAt(i));
    return out;
}

void ExploreSettingsList::checkOnly(const QStringList &labels)
{
    for (int i = 0; i < count(); ++i)
        item(i)->setCheckState(labels.contains(item(i)->text()) ? Qt::Checked : Qt::Unchecked);
}

void ExploreSettingsList::setAllChecked(bool checked)
{
    for (int i = 0; i < count(); ++i)
        item(i)->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
}

void ExploreSettingsList::removeCurrent()
{
    delete takeItem(currentRow());
    emit checkedChanged();
}

void ExploreSettingsList::resetToPresets() { setPresets(explorePresets()); }

void ExploreSettingsList::setPresets(const QVector<ExplorePreset> &presets)
{
    clear();
    for (const ExplorePreset &p : presets)
        addSettings(p.label, p.settings);
}

} // namespace longscope::ui
