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

#include <cmath>
#include <optional>

namespace longscope::ui {

struct PlotMarker {
    int position = 0; // the token the change took effect at
    QString label;    // "causal flash on, KV vmm"
};

// One poll of a remote server's /metrics, placed at the token position the conversation had
// reached then. A quantity the server does not publish is NaN.
struct ServerSample {
    int position = 0;
    double seconds = 0; // on the client's clock, since the connection
    double kv_usage = std::nan("");               // fraction of the server's KV cache in use, 0..1
    double requests_running = std::nan("");
    double requests_waiting = std::nan("");
    double generation_tokens_per_second = std::nan(""); // server-side, all requests together
};

struct PlotHistory {
    static constexpr int kMaxSteps = 1 << 20;
    static constexpr int kMaxMarkers = 10000;

    int run = 0;   // numbers the runs of one app session; 0: none yet
    QString model; // the model's name
    QVector<longscope::StepMetrics> steps;
    QVector<PlotMarker> markers; // in the order they were applied; marker n is markers[n - 1]
    QString serverEngine;        // "vllm", "sglang", "llama.cpp", "longscope": whose /metrics
    QVector<ServerSample> server; // a remote server's metrics, in the order polled

    bool isEmpty() const { return steps.isEmpty() && markers.isEmpty() && server.isEmpty(); }

    // The number of the last marker at or before `position`; 0: none.
    int markerAt(int position) const;
    // "stories260K · run 3 · α auto · keys after RoPE · … · tokens 0–912": the model and the
    // settings the run started with.
    QString caption() const;
    // "1 at token 512: causal flash on", one per marker.
    QStringList markerLines() const;

    // run, model, marker, settings, then metrics_csv_header()'s columns; one row per step.
    // With server samples, six columns more (server_engine, server_seconds, server_kv_usage,
    // server_requests_running, server_requests_waiting, server_generation_tokens_per_second,
    // empty on the step rows) and one row per sample after the steps, its phase "server" and
    // only its position among the step columns.
    QByteArray toCsv() const;

    // Compact: one line of numbers per step, the distinct settings once.
    QJsonObject toJson() const;
    // nullopt with `error` set ("plots: step 12 has 9 fields, not 23") on bad input.
    static std::optional<PlotHistory> fromJson(const QJsonObject &json, QString *error = nullptr);
};

// One CSV field, quoted when it holds a comma, a quote or a line break.
QString csvField(const QString &text);

} // namespace longscope::ui
