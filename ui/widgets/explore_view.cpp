#include "widgets/explore_view.h"

#include "core/engine_worker.h"
#include "core/explore_store.h"
#include "widgets/explore_plot.h"
#include "widgets/explore_run_list.h"
#include "widgets/explore_run_table.h"
#include "widgets/explore_settings_list.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QVBoxLayout>

#include <algorithm>

namespace longscope::ui {

namespace {

constexpr int kMaxContext = 1 << 18;
constexpr int kOverallSteps = 1000;

QLabel *hintLabel(const QString &text, QWidget *parent)
{
    auto *l = new QLabel(text, parent);
    l->setWordWrap(true);
    QPalette p = l->palette();
    p.setColor(QPalette::WindowText, p.color(QPalette::PlaceholderText));
    l->setPalette(p);
    return l;
}

} // namespace

ExploreView::ExploreView(ExploreStore *store, QWidget *parent) : QWidget(parent), m_store(store)
{
    setObjectName(QStringLiteral("exploreView"));
    auto *split = new QSplitter(Qt::Horizontal, this);
    split->setChildrenCollapsible(false);
    split->addWidget(createControls());
    split->addWidget(createResults());
    split->setStretchFactor(0, 0);
    split->setStretchFactor(1, 1);
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(split);

    reloadSavedRuns();
    updateBookLabel();
    updateTokensLabel();
    updateEnabled();
}

QWidget *ExploreView::createControls()
{
    auto *scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setFrameShape(QFrame::NoFrame);
    auto *content = new QWidget(scroll);
    content->setObjectName(QStringLiteral("exploreControls"));
    content->setStyleSheet(QStringLiteral(
        "#exploreControls QGroupBox { border: 1px solid palette(mid); border-radius: 6px; margin-top: 12px;"
        " padding: 8px 6px 6px 6px; font-weight: 600; }"
        "#exploreControls QGroupBox::title { subcontrol-origin: margin; subcontrol-position: top left;"
        " left: 10px; padding: 0 4px; color: palette(highlight); }"));

    // The book.
    auto *bookBox = new QGroupBox(tr("Book"), content);
    m_bookTitle = new QLabel(bookBox);
    m_bookTitle->setWordWrap(true);
    QFont tf = m_bookTitle->font();
    tf.setBold(true);
    m_bookTitle->setFont(tf);
    m_bookDetails = hintLabel(QString(), bookBox);
    m_openBook = new QPushButton(tr("Open…"), bookBox);
    m_openBook->setToolTip(tr("Score another text file (the book opened in the chat's book panel is used otherwise)"));
    auto *bookRow = new QHBoxLayout;
    bookRow->addWidget(m_bookTitle, 1);
    bookRow->addWidget(m_openBook, 0, Qt::AlignTop);
    auto *bookLayout = new QVBoxLayout(bookBox);
    bookLayout->setSpacing(2);
    bookLayout->addLayout(bookRow);
    bookLayout->addWidget(m_bookDetails);

    // What to score.
    auto *scoringBox = new QGroupBox(tr("Scoring"), content);
    m_context = new QSpinBox(scoringBox);
    m_context->setRange(16, kMaxContext);
    m_context->setSingleStep(256);
    m_context->setValue(kDefaultContext);
    m_context->setSuffix(tr(" tokens"));
    m_context->setAccessibleName(tr("Context length"));
    m_context->setToolTip(tr("Window length: every token is scored with up to this many tokens before it. It may "
                             "exceed the model's trained context."));
    m_trained = hintLabel(QString(), scoringBox);
    m_bucket = new QComboBox(scoringBox);
    for (int b : {16, 32, 64, 128, 256, 512})
        m_bucket->addItem(tr("%L1 positions").arg(b), b);
    m_bucket->setCurrentIndex(m_bucket->findData(kDefaultBucket));
    m_bucket->setToolTip(tr("Positions averaged into one point of the curve"));
    m_windows = new QSpinBox(scoringBox);
    m_windows->setRange(1, 1000);
    m_windows->setValue(kDefaultWindows);
    m_windows->setAccessibleName(tr("Windows per setting"));
    m_windows->setToolTip(tr("Windows scored per setting, one after another through the book: more windows, "
                             "smoother curves, longer runs"));
    m_tokens = hintLabel(QString(), scoringBox);
    auto *form = new QFormLayout(scoringBox);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    form->addRow(tr("Context length"), m_context);
    form->addRow(QString(), m_trained);
    form->addRow(tr("Bucket"), m_bucket);
    form->addRow(tr("Windows"), m_windows);
    form->addRow(QString(), m_tokens);

    // The settings to compare.
    auto *settingsBox = new QGroupBox(tr("Settings to compare"), content);
    m_settingsList = new ExploreSettingsList(settingsBox);
    // Tall enough for the eight presets (and a few more with the scroll bar).
    m_settingsList->setFixedHeight(m_settingsList->sizeHintForRow(0) * 8 + 2 * m_settingsList->frameWidth() + 4);
    m_addCurrent = new QPushButton(tr("Add current settings"), settingsBox);
    m_addCurrent->setToolTip(tr("Add the settings of the long-context panel (chat tab)"));
    m_removeSetting = new QPushButton(tr("Remove"), settingsBox);
    m_removeSetting->setToolTip(tr("Remove the selected setting from the list"));
    auto *presets = new QPushButton(tr("Presets"), settingsBox);
    presets->setToolTip(tr("Back to the presets: alpha 1, 2, 4 and auto, keys after and before RoPE"));
    auto *settingsButtons = new QHBoxLayout;
    settingsButtons->addWidget(m_addCurrent, 1);
    settingsButtons->addWidget(m_removeSetting);
    settingsButtons->addWidget(presets);
    auto *settingsLayout = new QVBoxLayout(settingsBox);
    settingsLayout->addWidget(m_settingsList);
    settingsLayout->addLayout(settingsButtons);

    // Run, progress, cancel.
    m_run = new QPushButton(tr("Run"), content);
    m_run->setDefault(true);
    m_run->setMinimumHeight(30);
    m_run->setToolTip(tr("Score the book with every checked setting, one after another"));
    m_cancel = new QPushButton(tr("Cancel"), content);
    m_cancel->setMinimumHeight(30);
    m_runProgress = new QProgressBar(content);
    m_runProgress->setObjectName(QStringLiteral("runProgress"));
    m_runProgress->setTextVisible(true);
    m_runProgress->setFormat(tr("this run"));
    m_runProgress->setValue(0);
    m_overallProgress = new QProgressBar(content);
    m_overallProgress->setObjectName(QStringLiteral("overallProgress"));
    m_overallProgress->setRange(0, kOverallSteps);
    m_overallProgress->setTextVisible(true);
    m_overallProgress->setFormat(tr("all runs"));
    m_overallProgress->setValue(0);
    m_status = hintLabel(QString(), content);
    m_status->setTextFormat(Qt::PlainText);
    auto *runRow = new QHBoxLayout;
    runRow->addWidget(m_run, 1);
    runRow->addWidget(m_cancel);

    // The runs to overlay.
    auto *runsBox = new QGroupBox(tr("Saved runs"), content);
    m_runList = new ExploreRunList(runsBox);
    m_runList->setMinimumHeight(90);
    m_deleteRun = new QPushButton(tr("Delete"), runsBox);
    m_deleteRun->setToolTip(tr("Delete the selected run"));
    m_uncheckRuns = new QPushButton(tr("Uncheck all"), runsBox);
    m_uncheckRuns->setToolTip(tr("Take every run off the plot"));
    auto *runsButtons = new QHBoxLayout;
    runsButtons->addWidget(hintLabel(tr("Checked: plotted"), runsBox), 1);
    runsButtons->addWidget(m_uncheckRuns);
    runsButtons->addWidget(m_deleteRun);
    auto *runsLayout = new QVBoxLayout(runsBox);
    runsLayout->setSpacing(4);
    runsLayout->addWidget(m_runList, 1);
    runsLayout->addLayout(runsButtons);

    auto *v = new QVBoxLayout(content);
    v->setContentsMargins(0, 0, 6, 0);
    v->setSpacing(6);
    v->addWidget(bookBox);
    v->addWidget(scoringBox);
    v->addWidget(settingsBox);
    v->addLayout(runRow);
    v->addWidget(m_runProgress);
    v->addWidget(m_overallProgress);
    v->addWidget(m_status);
    v->addWidget(runsBox, 1);
    scroll->setWidget(content);
    scroll->setMinimumWidth(350);
    scroll->setMaximumWidth(440);

    connect(m_openBook, &QPushButton::clicked, this, &ExploreView::openBookRequested);
    connect(m_context, &QSpinBox::valueChanged, this, [this] { updateTokensLabel(); });
    connect(m_windows, &QSpinBox::valueChanged, this, [this] { updateTokensLabel(); });
    connect(m_settingsList, &ExploreSettingsList::checkedChanged, this, [this] { updateEnabled(); });
    connect(m_addCurrent, &QPushButton::clicked, this, [this] {
        const int row = m_settingsList->addSettings(exploreLabel(m_currentSettings), m_currentSettings);
        m_settingsList->setCurrentRow(row);
        m_settingsList->scrollToItem(m_settingsList->item(row));
    });
    connect(m_removeSetting, &QPushButton::clicked, m_settingsList, &ExploreSettingsList::removeCurrent);
    connect(presets, &QPushButton::clicked, m_settingsList, &ExploreSettingsList::resetToPresets);
    connect(m_run, &QPushButton::clicked, this, &ExploreView::run);
    connect(m_cancel, &QPushButton::clicked, this, &ExploreView::cancel);
    connect(m_runList, &ExploreRunList::checkedChanged, this, [this] { refreshPlot(); });
    connect(m_runList, &QListWidget::currentRowChanged, this, [this] { updateEnabled(); });
    connect(m_deleteRun, &QPushButton::clicked, this, [this] {
        const QString id = m_runList->currentId();
        if (!id.isEmpty())
            emit deleteRunRequested(id);
    });
    connect(m_uncheckRuns, &QPushButton::clicked, this, [this] { m_runList->setAllChecked(false); });
    return scroll;
}

QWidget *ExploreView::createResults()
{
    auto *area = new QWidget(this);
    m_logScale = new QCheckBox(tr("Log scale"), area);
    m_logScale->setChecked(true);
    m_logScale->setToolTip(tr("Perplexity on a logarithmic axis (a jump stays readable next to small differences)"));
    m_exportPng = new QPushButton(tr("Export PNG…"), area);
    m_exportCsv = new QPushButton(tr("Export CSV…"), area);
    auto *legendHint = hintLabel(tr("Dashed: keys cached before RoPE · shaded: beyond the trained context"), area);
    auto *toolbar = new QHBoxLayout;
    toolbar->addWidget(m_logScale);
    toolbar->addSpacing(12);
    toolbar->addWidget(legendHint, 1);
    toolbar->addWidget(m_exportPng);
    toolbar->addWidget(m_exportCsv);

    m_plot = new ExplorePlot(area);
    m_table = new ExploreRunTable(area);

    auto *vertical = new QSplitter(Qt::Vertical, area);
    vertical->setChildrenCollapsible(false);
    vertical->addWidget(m_plot);
    vertical->addWidget(m_table);
    vertical->setStretchFactor(0, 3);
    vertical->setStretchFactor(1, 1);
    vertical->setSizes({620, 230});

    auto *v = new QVBoxLayout(area);
    v->setContentsMargins(6, 0, 0, 0);
    v->setSpacing(6);
    v->addLayout(toolbar);
    v->addWidget(vertical, 1);

    connect(m_logScale, &QCheckBox::toggled, m_plot, &ExplorePlot::setLogScale);
    connect(m_exportPng, &QPushButton::clicked, this, &ExploreView::exportPngRequested);
    connect(m_exportCsv, &QPushButton::clicked, this, &ExploreView::exportCsvRequested);
    return area;
}

// ---------------------------------------------------------------------------------------
// Inputs

void ExploreView::setWorker(EngineWorker *worker)
{
    if (m_worker)
        disconnect(m_worker, nullptr, this, nullptr);
    m_worker = worker;
    if (worker) {
        connect(worker, &EngineWorker::perplexityProgress, this, &ExploreView::onPerplexityProgress);
        connect(worker, &EngineWorker::perplexityFinished, this, &ExploreView::onPerplexityFinished);
    }
    updateEnabled();
}

void ExploreView::setEngineAvailable(bool available)
{
    m_engineAvailable = available;
    updateEnabled();
}

void ExploreView::setModel(const QString &name, int nCtxTrain)
{
    m_modelName = name;
    m_nCtxTrain = nCtxTrain;
    // Left at its default, the length reaches twice the trained context, so every run shows
    // the region beyond it.
    if (contextLength() == m_defaultContext && !m_running) {
        m_defaultContext = std::max(kDefaultContext, 2 * nCtxTrain);
        setContextLength(m_defaultContext);
    }
    updateTokensLabel();
}

void ExploreView::setCurrentSettings(const longscope::Settings &settings)
{
    m_currentSettings = settings;
    m_addCurrent->setToolTip(tr("Add the long-context panel's settings: %1").arg(exploreLabel(settings)));
}

void ExploreView::setBook(const Book &book)
{
    m_book = book;
    updateBookLabel();
    updateEnabled();
}

void ExploreView::setContextLength(int tokens) { m_context->setValue(tokens); }
int ExploreView::contextLength() const { return m_context->value(); }

void ExploreView::setBucketSize(int positions)
{
    int index = m_bucket->findData(positions);
    if (index < 0) {
        m_bucket->addItem(tr("%L1 positions").arg(positions), positions);
        index = m_bucket->count() - 1;
    }
    m_bucket->setCurrentIndex(index);
}

int ExploreView::bucketSize() const { return m_bucket->currentData().toInt(); }
void ExploreView::setWindowsPerRun(int windows) { m_windows->setValue(windows); }
int ExploreView::windowsPerRun() const { return m_windows->value(); }
qint64 ExploreView::tokensPerRun() const { return qint64(windowsPerRun()) * (contextLength() - 1); }

void ExploreView::updateBookLabel()
{
    if (!hasBook()) {
        m_bookTitle->setText(tr("No book"));
        m_bookDetails->setText(tr("Open one here or in the chat (File > Open Book…)."));
        return;
    }
    m_bookTitle->setText(m_book.title);
    QStringList details;
    if (!m_book.author.isEmpty())
        details << m_book.author;
    details << tr("%L1 characters").arg(m_book.text.size());
    m_bookDetails->setText(details.join(QStringLiteral(" · ")));
    const QString tip = m_book.stripped ? tr("%1\n(Project Gutenberg header and footer removed)").arg(m_book.path)
                                        : m_book.path;
    m_bookTitle->setToolTip(tip);
    m_bookDetails->setToolTip(tip);
}

void ExploreView::updateTokensLabel()
{
    m_tokens->setText(tr("%L1 tokens per setting").arg(tokensPerRun()));
    m_tokens->setToolTip(tr("%L1 windows × %L2 text tokens (the window's first token is BOS)")
                             .arg(windowsPerRun())
                             .arg(contextLength() - 1));
    if (m_nCtxTrain > 0) {
        const int ctx = contextLength();
        m_trained->setText(ctx > m_nCtxTrain ? tr("%1× the trained context of %L2")
                                                   .arg(double(ctx) / m_nCtxTrain, 0, 'g', 3)
                                                   .arg(m_nCtxTrain)
                                             : tr("within the trained context of %L1").arg(m_nCtxTrain));
    } else {
        m_trained->setText(tr("no model loaded"));
    }
}

void ExploreView::updateEnabled()
{
    const bool idle = !m_running;
    for (QWidget *w : {static_cast<QWidget *>(m_openBook), static_cast<QWidget *>(m_context),
                       static_cast<QWidget *>(m_bucket), static_cast<QWidget *>(m_windows),
                       static_cast<QWidget *>(m_settingsList), static_cast<QWidget *>(m_addCurrent),
                       static_cast<QWidget *>(m_removeSetting)})
        w->setEnabled(idle);
    const bool anyChecked = !m_settingsList->checkedSettings().isEmpty();
    m_run->setEnabled(idle && m_engineAvailable && m_worker && hasBook() && anyChecked);
    if (!m_engineAvailable)
        m_run->setToolTip(tr("Waiting for the model (or the chat) to finish"));
    else if (!hasBook())
        m_run->setToolTip(tr("Open a book first"));
    else if (!anyChecked)
        m_run->setToolTip(tr("Check at least one setting to compare"));
    else
        m_run->setToolTip(tr("Score the book with every checked setting, one after another"));
    m_cancel->setEnabled(m_running && !m_cancelling);
    m_deleteRun->setEnabled(idle && !m_runList->currentId().isEmpty());
    const bool plotted = !m_plot->runs().isEmpty();
    m_exportPng->setEnabled(plotted);
    m_exportCsv->setEnabled(plotted);
}

void ExploreView::setStatus(const QString &text, bool error)
{
    QPalette p = m_status->palette();
    p.setColor(QPalette::WindowText, error ? QColor(0xc0, 0x39, 0x2b) : p.color(QPalette::PlaceholderText));
    m_status->setPalette(p);
    m_status->setText(text);
    if (!text.isEmpty())
        emit statusMessage(text);
}

// ---------------------------------------------------------------------------------------
// Runs

bool ExploreView::run()
{
    if (m_running)
        return false;
    const QVector<ExplorePreset> checked = m_settingsList->checkedSettings();
    QString why;
    if (!m_engineAvailable || !m_worker)
        why = tr("No model is ready: load one, or wait for the chat to finish.");
    else if (!hasBook())
        why = tr("Open a book first.");
    else if (m_book.text.trimmed().isEmpty())
        why = tr("“%1” is empty.").arg(m_book.title);
    else if (checked.isEmpty())
        why = tr("Check at least one setting to compare.");
    if (!why.isEmpty()) {
        setStatus(why, true);
        return false;
    }
    m_queue = checked;
    m_queueSize = int(checked.size());
    m_queueDone = 0;
    m_runCtx = contextLength();
    m_runBucket = bucketSize();
    m_runTokens = tokensPerRun();
    m_runText = m_book.text;
    m_runBookTitle = m_book.title;
    m_running = true;
    m_cancelling = false;
    m_lastError.clear();

    // Runs that do not compare with these (another book, model, length or bucket) leave the plot.
    for (const QString &id : m_runList->checkedIds()) {
        const PerplexityRunResult r = m_runs.value(id);
        if (r.book_title != m_runBookTitle || r.model_name != m_modelName || r.ctx != m_runCtx ||
            r.bucket != m_runBucket)
            m_runList->setChecked(id, false);
    }

    m_overallProgress->setValue(0);
    m_overallProgress->setFormat(tr("run 1 of %L1").arg(m_queueSize));
    m_queueClock.start();
    updateEnabled();
    emit runningChanged(true);
    startNext();
    return true;
}

void ExploreView::startNext()
{
    if (m_cancelling || m_queue.isEmpty() || !m_worker) {
        finishQueue();
        return;
    }
    m_current = m_queue.takeFirst();
    m_runProgress->setRange(0, 1);
    m_runProgress->setValue(0);
    m_runProgress->setFormat(tr("%1: tokenizing…").arg(m_current.label));
    m_overallProgress->setFormat(tr("run %L1 of %L2").arg(m_queueDone + 1).arg(m_queueSize));
    setStatus(tr("Scoring “%1” with %2…").arg(m_runBookTitle, m_current.label));
    const QString text = m_runText;
    const ExplorePreset preset = m_current;
    const int ctx = m_runCtx;
    const int bucket = m_runBucket;
    const qint64 tokens = m_runTokens;
    m_worker->queuePerplexity(text, preset.settings, ctx, bucket, preset.label, tokens);
}

void ExploreView::onPerplexityProgress(const QString &label, qint64 done, qint64 total)
{
    if (!m_running || label != m_current.label || total <= 0)
        return;
    // Progress bars hold ints: scale to per-mille.
    m_runProgress->setRange(0, kOverallSteps);
    m_runProgress->setValue(int(kOverallSteps * done / total));
    m_runProgress->setFormat(tr("%1: %L2 / %L3 tokens").arg(label).arg(done).arg(total));
    const double overall = (m_queueDone + double(done) / double(total)) / std::max(1, m_queueSize);
    m_overallProgress->setValue(int(kOverallSteps * overall));
    m_overallProgress->setFormat(tr("run %L1 of %L2%3")
                                     .arg(m_queueDone + 1)
                                     .arg(m_queueSize)
                                     .arg(timeLeftText(overall, m_queueClock.elapsed())));
}

QString ExploreView::timeLeftText(double fractionDone, qint64 elapsedMs)
{
    // Said once a little is done (the first steps include tokenizing and warming up).
    if (fractionDone < 0.02 || elapsedMs < 2000)
        return tr(" · estimating time left…");
    const double left = double(elapsedMs) / 1000.0 * (1.0 - fractionDone) / fractionDone;
    if (left < 60)
        return tr(" · about %L1 s left").arg(std::max(1, int(left + 0.5)));
    if (left < 3600)
        return tr(" · about %L1 min left").arg(int(left / 60.0 + 0.5));
    return tr(" · about %L1 h %2 min left").arg(int(left / 3600)).arg(int(left / 60) % 60);
}

void ExploreView::onPerplexityFinished(const QString &label, const PerplexityRunResult &result)
{
    if (!m_running || label != m_current.label)
        return;
    PerplexityRunResult run = result;
    run.book_title = m_runBookTitle;
    ++m_queueDone;
    m_overallProgress->setValue(int(double(kOverallSteps) * m_queueDone / std::max(1, m_queueSize)));
    if (run.failed()) {
        m_lastError = run.error;
        setStatus(tr("%1 failed: %2").arg(label, run.error), true);
        m_cancelling = true;
    } else if (run.n_scored > 0) {
        ++m_finishedRuns;
        QString error;
        if (!m_store || !m_store->save(run, &error)) {
            if (run.id.isEmpty())
                run.id = ExploreStore::newId();
            setStatus(tr("The run could not be saved: %1").arg(error), true);
        }
        m_runs.insert(run.id, run);
        m_runList->addRun(run, true);
        m_runProgress->setValue(m_runProgress->maximum());
        m_runProgress->setFormat(tr("%1: perplexity %L2").arg(label).arg(run.perplexity(), 0, 'f', 1));
    }
    if (run.cancelled)
        m_cancelling = true;
    startNext();
}

void ExploreView::finishQueue()
{
    const bool cancelled = m_cancelling;
    m_running = false;
    m_cancelling = false;
    m_queue.clear();
    if (m_lastError.isEmpty())
        setStatus(cancelled ? tr("Cancelled after %L1 of %L2 runs.").arg(m_queueDone).arg(m_queueSize)
                            : tr("Done: %L1 runs of %L2 tokens each.").arg(m_queueDone).arg(m_runTokens));
    m_overallProgress->setFormat(cancelled ? tr("cancelled") : tr("%L1 runs done").arg(m_queueDone));
    updateEnabled();
    emit runningChanged(false);
    emit explorationFinished();
}

void ExploreView::cancel()
{
    if (!m_running || m_cancelling)
        return;
    m_cancelling = true;
    m_queue.clear();
    if (m_worker)
        m_worker->requestStop(); // thread-safe: the engine's progress callback answers false
    setStatus(tr("Cancelling…"));
    updateEnabled();
}

// ---------------------------------------------------------------------------------------
// Saved runs and the plot

QVector<PerplexityRunResult> ExploreView::plottedRuns() const
{
    QVector<PerplexityRunResult> out;
    for (const QString &id : m_runList->checkedIds())
        if (m_runs.contains(id))
            out.append(m_runs.value(id));
    // Oldest first, so one batch keeps the order of its settings (and their colours).
    std::stable_sort(out.begin(), out.end(), [](const PerplexityRunResult &a, const PerplexityRunResult &b) {
        if (a.created != b.created)
            return a.created < b.created;
        return a.id < b.id;
    });
    return out;
}

void ExploreView::refreshPlot()
{
    const QVector<PerplexityRunResult> runs = plottedRuns();
    m_plot->setRuns(runs);
    m_table->setRuns(runs);
    QHash<QString, QColor> colors;
    for (int i = 0; i < runs.size(); ++i)
        colors.insert(runs[i].id, ExplorePlot::colorFor(i));
    m_runList->setColors(colors);
    updateEnabled();
}

void ExploreView::reloadSavedRuns()
{
    if (!m_store)
        return;
    const QStringList checked = m_runList->checkedIds();
    QHash<QString, PerplexityRunResult> runs;
    QVector<PerplexityRunResult> saved = m_store->list();
    for (const PerplexityRunResult &r : saved)
        runs.insert(r.id, r);
    // Runs that could not be saved stay for this session.
    for (auto it = m_runs.cbegin(); it != m_runs.cend(); ++it) {
        if (!runs.contains(it.key())) {
            runs.insert(it.key(), it.value());
            saved.append(it.value());
        }
    }
    std::stable_sort(saved.begin(), saved.end(), [](const PerplexityRunResult &a, const PerplexityRunResult &b) {
        if (a.created != b.created)
            return a.created > b.created;
        return a.id > b.id;
    });
    m_runs = runs;
    const QStringList errors = m_store->lastErrors();
    m_runList->setRuns(saved, checked);
    if (!errors.isEmpty()) {
        setStatus(tr("%Ln saved run file(s) could not be read and were skipped.", nullptr, int(errors.size())), true);
        m_status->setToolTip(errors.join(QLatin1Char('\n')));
    }
}

bool ExploreView::deleteRun(const QString &id, QString *error)
{
    if (m_running)
        return false;
    if (m_store && QFile::exists(m_store->filePath(id)) && !m_store->remove(id, error))
        return false;
    m_runs.remove(id);
    m_runList->removeRun(id);
    return true;
}

bool ExploreView::exportPng(const QString &path, QString *error)
{
    if (m_plot->runs().isEmpty()) {
        if (error)
            *error = tr("There is nothing to export: run or check a run first.");
        return false;
    }
    return m_plot->exportPng(path, error);
}

bool ExploreView::exportCsv(const QString &path, QString *error)
{
    if (m_plot->runs().isEmpty()) {
        if (error)
            *error = tr("There is nothing to export: run or check a run first.");
        return false;
    }
    return m_plot->exportCsv(path, error);
}

} // namespace longscope::ui
