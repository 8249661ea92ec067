// Long-context settings as JSON and as one short line of text (legends, tables, CSV):
// "α auto · keys before RoPE · mem-efficient · causal flash · KV static". The JSON form is the
// only one: saved exploration runs, conversations and the app's settings all store it, and it
// holds every field of longscope::Settings. Settings compare with their operator==.
#pragma once

#include "longscope/settings.h"

#include <QJsonObject>
#include <QString>

#include <optional>

namespace longscope::ui {

// Every field, backend included.
QJsonObject settingsToJson(const longscope::Settings &settings);
// nullopt with `error` set for a missing or out-of-range field (alpha below 1, an unknown KV
// mode...). Fields that are absent take their defaults.
std::optional<longscope::Settings> settingsFromJson(const QJsonObject &json, QString *error = nullptr);

// Whether two settings measure the same perplexity: equal in what describeSettings() lists
// (alpha only when not auto); the context limit and backend do not count (a run sets its own
// context length), and of the overflow policy only how a run treats a full context: error
// stops the stream, shift (with its sinks and discard) goes on, the others restart the window.
bool sameMeasurement(const longscope::Settings &a, const longscope::Settings &b);

// "α 2", "α auto", "α 1.5".
QString alphaText(const longscope::Settings &settings);
// "RoPE linear ×4", "RoPE yarn ×8 from 512"; empty when the model file's own scaling is used.
QString ropeScalingText(const longscope::Settings &settings);
// "shift, 4 sinks", "shift, 0 sinks, drop 1": the shift policy's sinks and discard.
QString shiftText(const longscope::Settings &settings);
// Every setting that changes what perplexity measures, in one line.
QString describeSettings(const longscope::Settings &settings);

} // namespace longscope::ui
