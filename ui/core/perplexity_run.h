// One perplexity-by-position run as the app keeps it: what was scored (book, context length,
// bucket size, settings, model), the curve, and what it cost (time, tokens/s, peak memory).
// Plain Qt values, so it travels through queued signals and is saved as JSON.
#pragma once

#include "longscope/settings.h"

#include <QByteArray>
#include <QDateTime>
#include <QJsonObject>
#include <QMetaType>
#include <QString>
#include <QVector>

#include <optional>

namespace longscope::ui {

// Positions [begin, end): the scored tokens had `begin`..`end - 1` tokens before them.
struct PerplexityPoint {
    int begin = 0;
    int end = 0;
    qint64 count = 0;
    double mean_nll = 0; // nats
    double perplexity() const;
};

// How a run treats the end of its context, from the overflow policy: `error` and `shift`
// stream the text through one context of the run's length (error stops where it is full,
// shift drops the middle and goes on); the others restart the window from an empty context
// when it is full (plain truncation, what every run did before the policy counted).
bool perplexityStreams(const longscope::Settings &settings);

struct PerplexityRunResult {
    QString id;                  // its file in the ExploreStore; empty until saved
    QString label;               // what the legend shows: "α 2 · keys before RoPE"
    longscope::Settings settings;
    int ctx = 0;                 // window length scored to (BOS included)
    int bucket = 0;              // positions per curve point
    int n_ctx_train = 0;         // the model's trained context
    QString model_name;
    QString book_title;
    QDateTime created;           // UTC, when the run ended
    QVector<PerplexityPoint> curve;
    // The same NLL by the token's index in the text (empty in runs saved before it was kept).
    QVector<PerplexityPoint> text_curve;
    bool streamed = false;       // through one context (perplexityStreams), not windows
    QString stopped;             // the stream stopped at the full context: why (empty otherwise)
    // How the run differs from what was asked, in words (a server without a tokenizer
    // endpoint scored the text as one window); empty when it does not.
    QString note;
    double mean_nll = 0;         // over every scored token
    qint64 n_scored = 0;
    qint64 n_total = 0;          // tokens the run set out to score
    int windows = 0;
    bool cancelled = false;      // stopped early: the curve covers what was scored
    QString error;               // the run failed (errorOccurred said why); nothing was scored
    double seconds = 0;          // wall time of the scoring
    qint64 peak_memory_bytes = 0; // peak total of the memory ledger (weights + KV + scratch)
    double tokens_per_second = 0; // tokens evaluated per second of evaluation steps
    int steps = 0;               // evaluation steps

    double perplexity() const;
    bool failed() const { return !error.isEmpty(); }

    static QString format() { return QStringLiteral("longscope-perplexity-run"); }
    QJsonObject toJson() const;
    QByteArray toJsonBytes() const;
    // nullopt with `error` set for anything that is not a well-formed run.
    static std::optional<PerplexityRunResult> fromJson(const QJsonObject &json, QString *error = nullptr);
    static std::optional<PerplexityRunResult> fromJsonBytes(const QByteArray &bytes, QString *error = nullptr);
};

} // namespace longscope::ui

Q_DECLARE_METATYPE(longscope::ui::PerplexityRunResult)
