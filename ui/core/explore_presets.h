// The settings the Explore tab offers to compare: NTK alpha 1, 2, 4 and auto, each with keys
// cached after RoPE and before it, on memory-efficient causal attention (the configuration
// docs/long-context.md measures).
#pragma once

#include "longscope/settings.h"

#include <QString>
#include <QVector>

namespace longscope::ui {

struct ExplorePreset {
    QString label; // "α 2", "α 2 · keys before RoPE"
    longscope::Settings settings;
};

QVector<ExplorePreset> explorePresets();

// The label a setting gets in the legend: the alpha, the keys when cached before RoPE, and
// anything else that differs from the presets ("α 1.5 · naive attention").
QString exploreLabel(const longscope::Settings &settings);

} // namespace longscope::ui
