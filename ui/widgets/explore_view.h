// The Explore tab: "load a book and see, on one plot, where each setting stops understanding
// it", and whether it still finds a needle hidden in it. Left: the run type (perplexity by
// position, or a needle-in-a-haystack grid), the book, what to score (the context length,
// bucket size and windows; or the grid's lengths, depths and trials), the settings to compare
// (any long-context settings; preset groups from a menu), Run / Cancel with progress per run
// and overall, and the saved runs of that type to show. Right: the perplexity-by-position
// plot and a table of how each plotted run did and what it cost; or the needle heatmaps side
// by side. Runs go to the worker one after another (EngineWorker::runPerplexity / runNeedle,
// each on a session of its own, so the chat's context stays), and each finished run is saved
// in the ExploreStore.
#pragma once

#include "core/book.h"
#include "core/explore_needle.h"
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
class QStackedWidget;

namespace longscope::ui {

class InferenceWorker;
class ExplorePlot;
class ExploreHeatmaps;
class ExploreNeedleControls;
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

    enum class RunKind { Perplexity, Needle };

    // `store` is not owned; its saved runs are listed (none checked).
    explicit ExploreView(ExploreStore *store, QWidget *parent = nullptr);

    // The worker the runs go to (connected here; it lives on its own thread).
    void setWorker(InferenceWorker *worker);
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

    // What Run runs and what the results side shows.
    void setRunKind(RunKind kind);
    RunKind runKind() const;

    bool isRunning() const { return m_running; }
    // Runs that finished in this session (saved or not), oldest first.
    int finishedRunCount() const { return m_finishedRuns; }
    QVector<PerplexityRunResult> plottedRuns() const;
    // The checked needle grids, oldest first (as the heatmaps show them).
    QVector<NeedleRunResult> shownNeedleRuns() const;
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
    // The plot's x axis: the token's index in the text instead of its position in the context.
    QCheckBox *acrossTextBox() const { return m_acrossText; }
    QComboBox *runKindBox() const { return m_kind; }
    ExploreNeedleControls *needleControls() const { return m_needle; }
    ExploreHeatmaps *heatmaps() const { return m_heatmaps; }
    ExploreRunList *needleRunList() const { return m_needleList; }
    QCheckBox *needleLogScaleBox() const { return m_needleLog; }
    // Run, Stop, the progress bars and the status line, under the scrolled controls.
    QWidget *runFooter() const { return m_footer; }
    // The preset groups' menu entries load a group into the compare list.
    void loadPresetGroup(const QString &name);

    // " · about 3 min left", from the share of the queue done in `elapsedMs` (shown after the
    // overall progress while runs go).
    static QString timeLeftText(double fractionDone, qint64 elapsedMs);

    // The plot (perplexity) or the heatmaps (needle), whichever the run type shows.
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
    void onNeedleProgress(const QString &label, qint64 done, qint64 total);
    void onNeedleFinished(const QString &label, const longscope::ui::NeedleRunResult &result);

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
    QWidget *createPlotPage();
    QWidget *createNeedlePage();
    void startNext();
    // A run of the queue ended: false (and nothing more to do) when it is not the current one.
    bool acceptFinished(const QString &label, const QString &error);
    // Saves a finished run, then lists it (checked); says so when it cannot be saved.
    template <class Run>
    void keepRun(Run &run, QHash<QString, Run> &runs, ExploreRunList *list);
    void afterFinished(bool cancelled);
    void showProgress(const QString &label, qint64 done, qint64 total, const QString &unit);
    QString checkRunnable(const QVector<ExplorePreset> &checked) const;
    void refreshHeatmaps();
    bool bookNeeded() const;
    ExploreRunList *currentRunList() const;
    void finishQueue();
    // The enabled states, then the focus moved off a button that was disabled.
    void updateEnabled();
    void updateEnabledStates();
    void setTabOrderTopDown();
    void updateBookLabel();
    void updateTokensLabel();
    void refreshPlot();
    void setStatus(const QString &text, bool error = false);

    ExploreStore *m_store = nullptr;
    QPointer<InferenceWorker> m_worker;
    Book m_book;
    QString m_modelName;
    int m_nCtxTrain = 0;
    longscope::Settings m_currentSettings;
    bool m_engineAvailable = false;

    // Runs by id: the saved ones and this session's.
    QHash<QString, PerplexityRunResult> m_runs;
    QHash<QString, NeedleRunResult> m_needleRuns;

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
    RunKind m_runKind = RunKind::Perplexity; // of the queue
    NeedleRequest m_needleRequest;
    bool m_running = false;
    bool m_cancelling = false;
    bool m_focusRunWhenIdle = false; // Stop had the focus: Run takes it once the queue ends
    QElapsedTimer m_queueClock;           // since the queue started
    int m_defaultContext = kDefaultContext; // the length a new model may move
    int m_finishedRuns = 0;
    QString m_lastError;
    QStringList m_stops; // the queue's streams stopped at a full context: which and why

    // Widgets.
    QComboBox *m_kind = nullptr;
    QWidget *m_scoringBox = nullptr;
    ExploreNeedleControls *m_needle = nullptr;
    QStackedWidget *m_results = nullptr;
    QStackedWidget *m_runLists = nullptr;
    ExploreHeatmaps *m_heatmaps = nullptr;
    ExploreRunList *m_needleList = nullptr;
    QCheckBox *m_needleLog = nullptr;
    QPushButton *m_needlePng = nullptr;
    QPushButton *m_needleCsv = nullptr;
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
    QPushButton *m_presets = nullptr;
    QWidget *m_footer = nullptr;
    QPushButton *m_run = nullptr;
    QPushButton *m_cancel = nullptr;
    QProgressBar *m_runProgress = nullptr;
    QProgressBar *m_overallProgress = nullptr;
    QLabel *m_status = nullptr;
    ExploreRunList *m_runList = nullptr;
    QPushButton *m_deleteRun = nullptr;
    QPushButton *m_uncheckRuns = nullptr;
    QCheckBox *m_logScale = nullptr;
    QCheckBox *m_acrossText = nullptr;
    QPushButton *m_exportPng = nullptr;
    QPushButton *m_exportCsv = nullptr;
    ExplorePlot *m_plot = nullptr;
    ExploreRunTable *m_table = nullptr;
};

} // namespace longscope::ui
