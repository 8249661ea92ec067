// The Explore tab: "load a book and see, on one plot, where each setting stops understanding
// it". Left: the book, the context length to score to (above the trained one is allowed),
// the bucket size and windows per run, the settings to compare, Run / Cancel with progress
// per run and overall, and the saved runs to overlay. Right: the perplexity-by-position plot
// and a table of how each plotted run did and what it cost. Runs go to the worker one after another
// (EngineWorker::runPerplexity, each on a session of its own, so the chat's context stays),
// and each finished run is saved in the ExploreStore.
#pragma once

#include "core/book.h"
#include "core/explore_presets.h"
#include "core/perplexity_run.h"

#include <QElapsedTimer>
#include <QHash>
#include <QPointer>
#include <QVector>
#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace longscope::ui {

class EngineWorker;
class ExplorePlot;
class ExploreRunList;
class ExploreRunTable;
class ExploreSettingsList;
class ExploreStore;

class ExploreView : public QWidget {
    Q_OBJECT

public:
    static constexpr int kDefaultContext = 2048;
    static constexpr int kDefaultBucket = 64;
    static constexpr int kDefaultWindows = 8;

    // `store` is not owned; its saved runs are listed (none checked).
    explicit ExploreView(ExploreStore *store, QWidget *parent = nullptr);

    // The worker the runs go to (connected here; it lives on its own thread).
    void setWorker(EngineWorker *worker);
    // Whether runs may start: a model is loaded and the worker is not busy with a chat.
    void setEngineAvailable(bool available);
    void setModel(const QString &name, int nCtxTrain);
    // What "Add current settings" adds (the long-context panel's settings).
    void setCurrentSettings(const longscope::Settings &settings);

    void setBook(const Book &book);
    const Book &book() const { return m_book; }
    bool hasBook() const { return !m_book.path.isEmpty(); }

    void setContextLength(int tokens);
    int contextLength() const;
    void setBucketSize(int positions);
    int bucketSize() const;
    void setWindowsPerRun(int windows);
    int windowsPerRun() const;
    // Text tokens each run scores: windows × (context length − 1 for BOS).
    qint64 tokensPerRun() const;

    bool isRunning() const { return m_running; }
    // Runs that finished in this session (saved or not), oldest first.
    int finishedRunCount() const { return m_finishedRuns; }
    QVector<PerplexityRunResult> plottedRuns() const;
    QString lastError() const { return m_lastError; }

    ExplorePlot *plot() const { return m_plot; }
    ExploreRunTable *runTable() const { return m_table; }
    ExploreSettingsList *settingsList() const { return m_settingsList; }
    ExploreRunList *runList() const { return m_runList; }
    QPushButton *runButton() const { return m_run; }
    QPushButton *cancelButton() const { return m_cancel; }
    QProgressBar *runProgress() const { return m_runProgress; }
    QProgressBar *overallProgress() const { return m_overallProgress; }
    QCheckBox *logScaleBox() const { return m_logScale; }

    // " · about 3 min left", from the share of the queue done in `elapsedMs` (shown after the
    // overall progress while runs go).
    static QString timeLeftText(double fractionDone, qint64 elapsedMs);

    bool exportPng(const QString &path, QString *error = nullptr);
    bool exportCsv(const QString &path, QString *error = nullptr);

public slots:
    // Runs every checked setting, one after another. False (and nothing starts) without a
    // model, a book or a checked setting, or while busy.
    bool run();
    // Stops the run in progress (the worker's next step) and drops the ones still queued.
    void cancel();
    // Reads the saved runs again (corrupt files are skipped).
    void reloadSavedRuns();
    // Deletes a saved run (no question asked: the window asks first).
    bool deleteRun(const QString &id, QString *error = nullptr);

    void onPerplexityProgress(const QString &label, qint64 done, qint64 total);
    void onPerplexityFinished(const QString &label, const longscope::ui::PerplexityRunResult &result);

signals:
    void runningChanged(bool running);
    // The queue ended: every run finished, or one failed, or Cancel.
    void explorationFinished();
    void openBookRequested();
    void deleteRunRequested(const QString &id);
    void exportPngRequested();
    void exportCsvRequested();
    void statusMessage(const QString &text);

private:
    QWidget *createControls();
    QWidget *createResults();
    void startNext();
    void finishQueue();
    void updateEnabled();
    void updateBookLabel();
    void updateTokensLabel();
    void refreshPlot();
    void setStatus(const QString &text, bool error = false);

    ExploreStore *m_store = nullptr;
    QPointer<EngineWorker> m_worker;
    Book m_book;
    QString m_modelName;
    int m_nCtxTrain = 0;
    longscope::Settings m_currentSettings;
    bool m_engineAvailable = false;

    // Runs by id: the saved ones and this session's.
    QHash<QString, PerplexityRunResult> m_runs;

    // The queue.
    QVector<ExplorePreset> m_queue;
    ExplorePreset m_current;
    int m_queueSize = 0;
    int m_queueDone = 0;
    int m_runCtx = 0;
    int m_runBucket = 0;
    qint64 m_runTokens = 0;
    QString m_runText;
    QString m_runBookTitle;
    bool m_running = false;
    bool m_cancelling = false;
    QElapsedTimer m_queueClock;           // since the queue started
    int m_defaultContext = kDefaultContext; // the length a new model may move
    int m_finishedRuns = 0;
    QString m_lastError;

    // Widgets.
    QLabel *m_bookTitle = nullptr;
    QLabel *m_bookDetails = nullptr;
    QPushButton *m_openBook = nullptr;
    QSpinBox *m_context = nullptr;
    QLabel *m_trained = nullptr;
    QComboBox *m_bucket = nullptr;
    QSpinBox *m_windows = nullptr;
    QLabel *m_tokens = nullptr;
    ExploreSettingsList *m_settingsList = nullptr;
    QPushButton *m_addCurrent = nullptr;
    QPushButton *m_removeSetting = nullptr;
    QPushButton *m_run = nullptr;
    QPushButton *m_cancel = nullptr;
    QProgressBar *m_runProgress = nullptr;
    QProgressBar *m_overallProgress = nullptr;
    QLabel *m_status = nullptr;
    ExploreRunList *m_runList = nullptr;
    QPushButton *m_deleteRun = nullptr;
    QPushButton *m_uncheckRuns = nullptr;
    QCheckBox *m_logScale = nullptr;
    QPushButton *m_exportPng = nullptr;
    QPushButton *m_exportCsv = nullptr;
    ExplorePlot *m_plot = nullptr;
    ExploreRunTable *m_table = nullptr;
};

} // namespace longscope::ui
