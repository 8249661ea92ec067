// What the live plots show: one run (one model, one context) of one conversation, as the
// steps the engine reported and the setting changes marked on them, numbered from 1. It is
// what the plots draw, what their CSV and PNG exports hold, and what a conversation saves so
// that reopening it shows its own plots again.
#pragma once

#include "longscope/metrics.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <optional>

namespace longscope::ui {

struct PlotMarker {
    int position = 0; // the token the change took effect at
    QString label;    // "causal flash on, KV vmm"
};

struct PlotHistory {
    static constexpr int kMaxSteps = 1 << 20;
    static constexpr int kMaxMarkers = 10000;

    int run = 0;   // numbers the runs of one app session; 0: none yet
    QString model; // the model's name
    QVector<longscope::StepMetrics> steps;
    QVector<PlotMarker> markers; // in the order they were applied; marker n is markers[n - 1]

    bool isEmpty() const { return steps.isEmpty() && markers.isEmpty(); }

    // The number of the last marker at or before `position`; 0: none.
    int markerAt(int position) const;
    // "stories260K · run 3 · α auto · keys after RoPE · … · tokens 0–912": the model and the
    // settings the run started with.
    QString caption() const;
    // "1 at token 512: causal flash on", one per marker.
    QStringList markerLines() const;

    // run, model, marker, settings, then metrics_csv_header()'s columns; one row per step.
    QByteArray toCsv() const;

    // Compact: one line of numbers per step, the distinct settings once.
    QJsonObject toJson() const;
    // nullopt with `error` set ("plots: step 12 has 9 fields, not 23") on bad input.
    static std::optional<PlotHistory> fromJson(const QJsonObject &json, QString *error = nullptr);
};

// One CSV field, quoted when it holds a comma, a quote or a line break.
QString csvField(const QString &text);

} // namespace longscope::ui
