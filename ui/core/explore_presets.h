// The settings the Explore tab offers to compare. Any longscope::Settings can be in the
// compare list; the presets are groups of them, written as data: each entry is a settings
// JSON fragment (settings_json.h) over one base, memory-efficient causal attention with a
// static KV cache (the configuration docs/long-context.md measures). An entry naming a field
// or value the settings do not hold yet is left out, so a group can list what arrives later.
#pragma once

#include "longscope/settings.h"

#include <QString>
#include <QVector>

namespace longscope::ui {

struct ExplorePreset {
    QString label; // "α 2", "α 2 · keys before RoPE"
    longscope::Settings settings;
};

struct ExplorePresetGroup {
    QString name;        // "RoPE scaling methods"
    QString description; // one line for the tooltip
    QVector<ExplorePreset> presets;
    // The group is about what happens past the context: its runs are best plotted by the
    // token's index in the text rather than by position in the context.
    bool acrossText = false;
};

// Memory-efficient causal attention, static KV, alpha 1, keys after RoPE, the window restarted
// when the context is full (overflow drop-oldest, which a perplexity run treats as truncation:
// perplexityStreams).
longscope::Settings explorePresetBase();
// Every group, the default one (NTK alpha 1, 2, 4 and auto, keys after and before RoPE) first.
QVector<ExplorePresetGroup> explorePresetGroups();
// The default group's presets.
QVector<ExplorePreset> explorePresets();

// The label a setting gets in the legend: the alpha, then every field that differs from the
// presets' base ("α 1.5 · keys before RoPE · naive attention · overflow head-tail"); the shift
// policy with its sinks and discard ("shift, 4 sinks", "shift, 0 sinks, drop 1").
QString exploreLabel(const longscope::Settings &settings);

// Whether two settings are the same entry of the compare list: equal in every field but the
// context limit (each run sets its own) and the alpha when it is automatic.
bool sameExploreSettings(const longscope::Settings &a, const longscope::Settings &b);

} // namespace longscope::ui
