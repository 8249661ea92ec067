// The settings to compare, as a checkable list: a preset group (at first alpha 1, 2, 4, auto,
// each with keys after and before RoPE), all checked, plus whatever was added from the
// long-context panel: any longscope::Settings. Each item carries its label and its Settings.
#pragma once

#include "core/explore_presets.h"

#include <QListWidget>

namespace longscope::ui {

class ExploreSettingsList : public QListWidget {
    Q_OBJECT

public:
    explicit ExploreSettingsList(QWidget *parent = nullptr);

    // Adds settings (checked) unless the same settings are listed already, which are then
    // checked instead. Returns the row.
    int addSettings(const QString &label, const longscope::Settings &settings);
    QVector<ExplorePreset> checkedSettings() const;
    ExplorePreset settingsAt(int row) const;
    // Checks exactly the rows whose label is in `labels`.
    void checkOnly(const QStringList &labels);
    void setAllChecked(bool checked);
    // Removes the selected row (presets too: they come back with resetToPresets()).
    void removeCurrent();
    // The default preset group.
    void resetToPresets();
    // Replaces the list with `presets`, all checked.
    void setPresets(const QVector<ExplorePreset> &presets);

signals:
    void checkedChanged();
};

} // namespace longscope::ui
