// One needle-in-a-haystack grid as the app keeps it: what was asked (passkey or a fact in a
// book, prompt lengths x needle depths, trials, settings, model), the cells, and what it
// cost. Plain Qt values, so it travels through queued signals and is saved as JSON in the
// ExploreStore beside the perplexity runs. runNeedleGrid() is the run itself, the same call
// for the worker and the tests (longscope::needle_grid underneath).
#pragma once

#include "longscope/needle.h"
#include "longscope/settings.h"

#include <QByteArray>
#include <QDateTime>
#include <QJsonObject>
#include <QMetaType>
#include <QString>
#include <QVector>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

namespace longscope {
class Model;
}

namespace longscope::ui {

// longscope::NeedleCell, copied: see there for what each number means.
struct NeedleGridCell {
    int length = 0;
    double depth = 0;
    double actual_depth = 0;
    int trials = 0;
    double answer_tokens = 0;
    double log_prob = 0;      // teacher-forced log p(answer), nats
    double probability = 0;   // exp(log_prob): the product of the answer tokens' probabilities
    double mean_token_log_prob = 0;
    int retrieved = 0;        // trials greedy decoding retrieved

    bool allRetrieved() const { return trials > 0 && retrieved == trials; }
};

// What to run (the Explore tab's needle controls).
struct NeedleRequest {
    longscope::NeedleTask task = longscope::NeedleTask::Passkey;
    QVector<int> lengths;
    QVector<double> depths;
    int trials = 1;
    quint64 seed = 1;
    longscope::Settings settings;
    QString label;
    QString bookTitle; // NeedleTask::Book: the haystack's title (its text is passed apart)
};

struct NeedleRunResult {
    QString id;                  // its file in the ExploreStore; empty until saved
    QString label;               // "α 2 · keys before RoPE"
    longscope::Settings settings;
    longscope::NeedleTask task = longscope::NeedleTask::Passkey;
    QVector<int> lengths;
    QVector<double> depths;
    int trials = 0;
    quint64 seed = 1;
    int n_ctx_train = 0;
    QString model_name;
    QString book_title;          // NeedleTask::Book
    QDateTime created;           // UTC, when the run ended
    QVector<NeedleGridCell> cells; // lengths-major, lengths.size() x depths.size()
    bool cancelled = false;      // stopped early: cells with trials 0 were not reached
    QString error;               // the run failed; nothing was scored
    double seconds = 0;
    qint64 peak_memory_bytes = 0;
    int steps = 0;

    bool failed() const { return !error.isEmpty(); }
    // The cell of lengths[row] x depths[column]; nullptr outside the grid.
    const NeedleGridCell *cell(int row, int column) const;
    // Mean probability over the cells reached; cells greedy decoding retrieved in every trial.
    double meanProbability() const;
    int retrievedCells() const;

    static QString format() { return QStringLiteral("longscope-needle-run"); }
    QJsonObject toJson() const;
    QByteArray toJsonBytes() const;
    // nullopt with `error` set for anything that is not a well-formed grid.
    static std::optional<NeedleRunResult> fromJson(const QJsonObject &json, QString *error = nullptr);
    static std::optional<NeedleRunResult> fromJsonBytes(const QByteArray &bytes, QString *error = nullptr);
};

// "label,settings,task,length,depth,actual_depth,trials,answer_tokens,log_prob,probability,
// mean_token_log_prob,retrieved,beyond_trained" and one row per cell of every run.
QByteArray needleCsv(const QVector<NeedleRunResult> &runs);

// Runs `request` on `model` (the calling thread): `book` holds the book's tokens for
// NeedleTask::Book. `progress` after every evaluation step (false cancels: the result is then
// marked cancelled); `metrics` after every step. Never throws: a failure is the result's error.
NeedleRunResult runNeedleGrid(const longscope::Model &model, const NeedleRequest &request,
                              std::span<const int32_t> book, int nThreads,
                              const std::function<bool(qint64 done, qint64 total)> &progress = {});

} // namespace longscope::ui

Q_DECLARE_METATYPE(longscope::ui::NeedleRequest)
Q_DECLARE_METATYPE(longscope::ui::NeedleRunResult)
