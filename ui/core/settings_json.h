// Long-context settings as JSON (saved exploration runs) and as one short line of text
// (legends, tables, CSV): "α auto · keys before RoPE · mem-efficient · causal flash · KV static".
#pragma once

#include "longscope/settings.h"

#include <QJsonObject>
#include <QString>

#include <optional>

namespace longscope::ui {

QJsonObject settingsToJson(const longscope::Settings &settings);
// nullopt with `error` set for a missing or out-of-range field (alpha below 1, an unknown KV
// mode...). Fields that are absent take their defaults.
std::optional<longscope::Settings> settingsFromJson(const QJsonObject &json, QString *error = nullptr);

// "α 2", "α auto", "α 1.5".
QString alphaText(const longscope::Settings &settings);
// Every setting that changes what perplexity measures, in one line.
QString describeSettings(const longscope::Settings &settings);

} // namespace longscope::ui
