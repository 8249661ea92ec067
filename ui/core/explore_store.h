// Saved exploration runs: one "<id>.json" per run in a directory (AppDataLocation/runs),
// written atomically with QSaveFile: perplexity runs and needle grids side by side, told
// apart by their "format". Listed newest first, reopened, deleted; corrupt or foreign files
// are skipped and named in lastErrors(), never fatal (a file of the other kind is skipped
// silently).
#pragma once

#include "core/explore_needle.h"
#include "core/perplexity_run.h"

#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <optional>

namespace longscope::ui {

class ExploreStore : public QObject {
    Q_OBJECT

public:
    // `dir` is created when missing. Empty: defaultDirectory().
    explicit ExploreStore(const QString &dir = QString(), QObject *parent = nullptr);

    // QStandardPaths::AppDataLocation + "/runs".
    static QString defaultDirectory();
    // Letters, digits, '-' and '_', at most 64 characters.
    static bool isValidId(const QString &id);
    // A new unique id: the time and a random suffix ("20250101-120000-3fa2c1").
    static QString newId();

    QString directory() const { return m_dir; }
    QString filePath(const QString &id) const;

    // Every readable perplexity run, newest first.
    QVector<PerplexityRunResult> list();
    std::optional<PerplexityRunResult> load(const QString &id, QString *error = nullptr);
    // Gives `run` an id when it has none, then writes it.
    bool save(PerplexityRunResult &run, QString *error = nullptr);
    // The same for needle grids.
    QVector<NeedleRunResult> listNeedleRuns();
    std::optional<NeedleRunResult> loadNeedleRun(const QString &id, QString *error = nullptr);
    bool save(NeedleRunResult &run, QString *error = nullptr);
    bool remove(const QString &id, QString *error = nullptr);

    // Errors of the last call, one line each.
    QStringList lastErrors() const { return m_errors; }

signals:
    void runSaved(const QString &id);
    void runRemoved(const QString &id);

private:
    template <class Run>
    std::optional<Run> readFile(const QString &path, QString *error, bool *otherKind = nullptr) const;
    template <class Run>
    QVector<Run> listRuns();
    template <class Run>
    std::optional<Run> loadRun(const QString &id, QString *error);
    template <class Run>
    bool saveRun(Run &run, QString *error);

    QString m_dir;
    QStringList m_errors;
};

} // namespace longscope::ui
