#include "widgets/explore_view.h"

#include "core/engine_worker.h"
#include "core/explore_store.h"
#include "widgets/explore_heatmaps.h"
#include "widgets/explore_needle_controls.h"
#include "widgets/explore_plot.h"
#include "widgets/explore_run_list.h"
#include "widgets/explore_run_table.h"
#include "widgets/explore_settings_list.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedWidget>
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

    setTabOrderTopDown();
    reloadSavedRuns();
    updateBookLabel();
    updateTokensLabel();
    updateEnabled();
}

QWidget *ExploreView::createControls()
{
    auto *column = new QWidget(this);
    column->setObjectName(QStringLiteral("exploreLeftPanel"));
    auto *scroll = new QScrollArea(column);
    scroll->setAccessibleName(tr("Explore settings"));
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

    // What to run.
    m_kind = new QComboBox(content);
    m_kind->setObjectName(QStringLiteral("exploreRunKind"));
    m_kind->addItem(tr("Perplexity by position"), int(RunKind::Perplexity));
    m_kind->addItem(tr("Needle in a haystack"), int(RunKind::Needle));
    m_kind->setAccessibleName(tr("Run type"));
    m_kind->setToolTip(tr("Perplexity of the book by position, or a grid of prompt lengths × needle depths: does "
                          "the model find a fact hidden in a long prompt?"));
    m_needle = new ExploreNeedleControls(content);
    m_needle->hide();

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
    m_openBook->setAccessibleName(tr("Open a book to score"));
    auto *bookRow = new QHBoxLayout;
    bookRow->addWidget(m_bookTitle, 1);
    bookRow->addWidget(m_openBook, 0, Qt::AlignTop);
    auto *bookLayout = new QVBoxLayout(bookBox);
    bookLayout->setSpacing(2);
    bookLayout->addLayout(bookRow);
    bookLayout->addWidget(m_bookDetails);

    // What to score.
    auto *scoringBox = new QGroupBox(tr("Scoring"), content);
    m_scoringBox = scoringBox;
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
    m_bucket->setAccessibleName(tr("Bucket size"));
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
    m_settingsList->setAccessibleName(tr("Settings to compare"));
    m_settingsList->setAccessibleDescription(tr("Checked settings are run, one after another; Space checks or "
                                                "unchecks the current one"));
    // Tall enough for the eight presets (and a few more with the scroll bar).
    m_settingsList->setFixedHeight(m_settingsList->sizeHintForRow(0) * 8 + 2 * m_settingsList->frameWidth() + 4);
    m_addCurrent = new QPushButton(tr("Add current settings"), settingsBox);
    m_addCurrent->setToolTip(tr("Add the settings of the long-context panel (chat tab)"));
    m_removeSetting = new QPushButton(tr("Remove"), settingsBox);
    m_removeSetting->setToolTip(tr("Remove the selected setting from the list"));
    auto *presets = new QPushButton(tr("Presets"), settingsBox);
    m_presets = presets;
    presets->setToolTip(tr("Replace the list with a preset group"));
    presets->setAccessibleName(tr("Preset groups"));
    m_addCurrent->setAccessibleName(tr("Add the long-context panel's settings"));
    m_removeSetting->setAccessibleName(tr("Remove the selected setting"));
    auto *presetMenu = new QMenu(presets);
    for (const ExplorePresetGroup &group : explorePresetGroups()) {
        QAction *a = presetMenu->addAction(group.name);
        a->setToolTip(group.description);
        connect(a, &QAction::triggered, this, [this, name = group.name] { loadPresetGroup(name); });
    }
    presetMenu->setToolTipsVisible(true);
    presets->setMenu(presetMenu);
    auto *settingsButtons = new QHBoxLayout;
    settingsButtons->addWidget(m_addCurrent, 1);
    settingsButtons->addWidget(m_removeSetting);
    settingsButtons->addWidget(presets);
    auto *settingsLayout = new QVBoxLayout(settingsBox);
    settingsLayout->addWidget(m_settingsList);
    settingsLayout->addLayout(settingsButtons);

    // Run, Stop, the progress (with the time left) and the status stay under the scrolled
    // part, in view at any window height while a run goes.
    auto *footer = new QWidget(column);
    footer->setObjectName(QStringLiteral("exploreRunFooter"));
    m_footer = footer;
    m_run = new QPushButton(tr("Run"), footer);
    m_run->setDefault(true);
    m_run->setMinimumHeight(30);
    m_run->setToolTip(tr("Score the book with every checked setting, one after another"));
    m_cancel = new QPushButton(tr("Stop"), footer);
    m_cancel->setMinimumHeight(30);
    m_cancel->setToolTip(tr("Stop the run in progress and drop the queued ones (Esc)"));
    m_cancel->setAccessibleName(tr("Stop the runs"));
    m_run->setAccessibleName(tr("Run every checked setting"));
    m_runProgress = new QProgressBar(footer);
    m_runProgress->setAccessibleName(tr("Progress of this run"));
    m_runProgress->setObjectName(QStringLiteral("runProgress"));
    m_runProgress->setTextVisible(true);
    m_runProgress->setFormat(tr("this run"));
    m_runProgress->setValue(0);
    m_overallProgress = new QProgressBar(footer);
    m_overallProgress->setObjectName(QStringLiteral("overallProgress"));
    m_overallProgress->setRange(0, kOverallSteps);
    m_overallProgress->setTextVisible(true);
    m_overallProgress->setFormat(tr("all runs"));
    m_overallProgress->setValue(0);
    m_overallProgress->setAccessibleName(tr("Progress of all runs, with the time left"));
    m_status = hintLabel(QString(), footer);
    m_status->setTextFormat(Qt::PlainText);
    auto *runRow = new QHBoxLayout;
    runRow->addWidget(m_run, 1);
    runRow->addWidget(m_cancel);

    // The runs to overlay.
    auto *runsBox = new QGroupBox(tr("Saved runs"), content);
    m_runLists = new QStackedWidget(runsBox);
    m_runList = new ExploreRunList(m_runLists);
    m_runList->setAccessibleName(tr("Saved perplexity runs"));
    m_needleList = new ExploreRunList(m_runLists);
    m_needleList->setObjectName(QStringLiteral("exploreNeedleRunList"));
    m_needleList->setAccessibleName(tr("Saved needle grids"));
    for (ExploreRunList *list : {m_runList, m_needleList})
        list->setAccessibleDescription(tr("Checked runs are shown; Space checks or unchecks the current one"));
    m_runLists->addWidget(m_runList);
    m_runLists->addWidget(m_needleList);
    m_runLists->setMinimumHeight(90);
    m_deleteRun = new QPushButton(tr("Delete"), runsBox);
    m_deleteRun->setToolTip(tr("Delete the selected run"));
    m_uncheckRuns = new QPushButton(tr("Uncheck all"), runsBox);
    m_uncheckRuns->setToolTip(tr("Take every run off the plot"));
    m_deleteRun->setAccessibleName(tr("Delete the selected run"));
    m_uncheckRuns->setAccessibleName(tr("Uncheck all runs"));
    auto *runsButtons = new QHBoxLayout;
    runsButtons->addWidget(hintLabel(tr("Checked: plotted"), runsBox), 1);
    runsButtons->addWidget(m_uncheckRuns);
    runsButtons->addWidget(m_deleteRun);
    auto *runsLayout = new QVBoxLayout(runsBox);
    runsLayout->setSpacing(4);
    runsLayout->addWidget(m_runLists, 1);
    runsLayout->addLayout(runsButtons);

    auto *v = new QVBoxLayout(content);
    v->setContentsMargins(0, 0, 6, 0);
    v->setSpacing(6);
    v->addWidget(m_kind);
    v->addWidget(bookBox);
    v->addWidget(scoringBox);
    v->addWidget(m_needle);
    v->addWidget(settingsBox);
    v->addWidget(runsBox, 1);
    scroll->setWidget(content);

    auto *f = new QVBoxLayout(footer);
    f->setContentsMargins(0, 4, 6, 0);
    f->setSpacing(4);
    f->addLayout(runRow);
    f->addWidget(m_runProgress);
    f->addWidget(m_overallProgress);
    f->addWidget(m_status);

    auto *columnLayout = new QVBoxLayout(column);
    columnLayout->setContentsMargins(0, 0, 0, 0);
    columnLayout->setSpacing(0);
    columnLayout->addWidget(scroll, 1);
    columnLayout->addWidget(footer);
    column->setMinimumWidth(350);
    column->setMaximumWidth(440);

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
    connect(m_kind, &QComboBox::currentIndexChanged, this, [this] { setRunKind(RunKind(m_kind->currentData().toInt())); });
    connect(m_needle, &ExploreNeedleControls::changed, this, [this] { updateEnabled(); });
    connect(m_run, &QPushButton::clicked, this, &ExploreView::run);
    connect(m_cancel, &QPushButton::clicked, this, &ExploreView::cancel);
    connect(m_runList, &ExploreRunList::checkedChanged, this, [this] { refreshPlot(); });
    connect(m_runList, &QListWidget::currentRowChanged, this, [this] { updateEnabled(); });
    connect(m_needleList, &ExploreRunList::checkedChanged, this, [this] { refreshHeatmaps(); });
    connect(m_needleList, &QListWidget::currentRowChanged, this, [this] { updateEnabled(); });
    connect(m_deleteRun, &QPushButton::clicked, this, [this] {
        const QString id = currentRunList()->currentId();
        if (!id.isEmpty())
            emit deleteRunRequested(id);
    });
    connect(m_uncheckRuns, &QPushButton::clicked, this, [this] { currentRunList()->setAllChecked(false); });
    return column;
}

void ExploreView::setTabOrderTopDown()
{
    // Top to bottom, left to right, as laid out: the left panel (the run type, the book, what
    // to score, the settings, the saved runs, then Run and Stop under them), then the results.
    const QList<QWidget *> order{m_kind,
                                 m_openBook,
                                 m_context,
                                 m_bucket,
                                 m_windows,
                                 m_needle->taskBox(),
                                 m_needle->lengthsEdit(),
                                 m_needle->depthsEdit(),
                                 m_needle->trialsBox(),
                                 m_settingsList,
                                 m_addCurrent,
                                 m_removeSetting,
                                 m_presets,
                                 m_runList,
                                 m_needleList,
                                 m_uncheckRuns,
                                 m_deleteRun,
                                 m_run,
                                 m_cancel,
                                 m_logScale,
                                 m_acrossText,
                                 m_exportPng,
                                 m_exportCsv,
                                 m_plot,
                                 m_table,
                                 m_needleLog,
                                 m_needlePng,
                                 m_needleCsv,
                                 m_heatmaps};
    for (qsizetype i = 1; i < order.size(); ++i)
        QWidget::setTabOrder(order[i - 1], order[i]);
}

QWidget *ExploreView::createResults()
{
    m_results = new QStackedWidget(this);
    m_results->addWidget(createPlotPage());
    m_results->addWidget(createNeedlePage());
    return m_results;
}

QWidget *ExploreView::createNeedlePage()
{
    auto *area = new QWidget(this);
    m_needleLog = new QCheckBox(tr("Log scale"), area);
    m_needleLog->setAccessibleName(tr("Log scale of the heatmaps"));
    m_needleLog->setToolTip(tr("Colour by log10 of the probability, from 1e-30 to 1 (a weak model's cells read apart)"));
    m_needlePng = new QPushButton(tr("Export PNG…"), area);
    m_needleCsv = new QPushButton(tr("Export CSV…"), area);
    m_needlePng->setAccessibleName(tr("Export the heatmaps as PNG"));
    m_needleCsv->setAccessibleName(tr("Export the needle grids as CSV"));
    auto *toolbar = new QHBoxLayout;
    toolbar->addWidget(m_needleLog);
    toolbar->addSpacing(12);
    toolbar->addWidget(hintLabel(tr("Colour: the probability of the answer · dot: greedy decoding retrieves it · "
                                    "dashed: the trained context"),
                                 area),
                       1);
    toolbar->addWidget(m_needlePng);
    toolbar->addWidget(m_needleCsv);
    m_heatmaps = new ExploreHeatmaps(area);
    auto *v = new QVBoxLayout(area);
    v->setContentsMargins(6, 0, 0, 0);
    v->setSpacing(6);
    v->addLayout(toolbar);
    v->addWidget(m_heatmaps, 1);
    connect(m_needleLog, &QCheckBox::toggled, m_heatmaps, &ExploreHeatmaps::setLogScale);
    connect(m_needlePng, &QPushButton::clicked, this, &ExploreView::exportPngRequested);
    connect(m_needleCsv, &QPushButton::clicked, this, &ExploreView::exportCsvRequested);
    return area;
}

QWidget *ExploreView::createPlotPage()
{
    auto *area = new QWidget(this);
    m_logScale = new QCheckBox(tr("Log scale"), area);
    m_logScale->setChecked(true);
    m_logScale->setAccessibleName(tr("Log scale of the perplexity axis"));
    m_logScale->setToolTip(tr("Perplexity on a logarithmic axis (a jump stays readable next to small differences)"));
    m_exportPng = new QPushButton(tr("Export PNG…"), area);
    m_exportCsv = new QPushButton(tr("Export CSV…"), area);
    m_acrossText = new QCheckBox(tr("Across the text"), area);
    m_acrossText->setObjectName(QStringLiteral("exploreAcrossText"));
    m_acrossText->setAccessibleName(tr("Plot across the text"));
    m_acrossText->setToolTip(tr("Plot by the token's index in the text instead of its position in the context: "
                                "shows where a stream stopped, and what restarting or shifting the context did"));
    m_exportPng->setAccessibleName(tr("Export the plot as PNG"));
    m_exportCsv->setAccessibleName(tr("Export the curves as CSV"));
    auto *legendHint = hintLabel(tr("Dashed: keys cached before RoPE · shaded: beyond the trained context"), area);
    auto *toolbar = new QHBoxLayout;
    toolbar->addWidget(m_logScale);
    toolbar->addWidget(m_acrossText);
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
    connect(m_acrossText, &QCheckBox::toggled, this, [this, legendHint](bool on) {
        m_plot->setAcrossText(on);
        legendHint->setText(on ? tr("Dashed: keys cached before RoPE · shaded: past the full context")
                               : tr("Dashed: keys cached before RoPE · shaded: beyond the trained context"));
    });
    connect(m_exportPng, &QPushButton::clicked, this, &ExploreView::exportPngRequested);
    connect(m_exportCsv, &QPushButton::clicked, this, &ExploreView::exportCsvRequested);
    return area;
}

// ---------------------------------------------------------------------------------------
// Inputs

void ExploreView::setWorker(InferenceWorker *worker)
{
    if (m_worker)
        disconnect(m_worker, nullptr, this, nullptr);
    m_worker = worker;
    if (worker) {
        connect(worker, &InferenceWorker::perplexityProgress, this, &ExploreView::onPerplexityProgress);
        connect(worker, &InferenceWorker::perplexityFinished, this, &ExploreView::onPerplexityFinished);
        connect(worker, &InferenceWorker::needleProgress, this, &ExploreView::onNeedleProgress);
        connect(worker, &InferenceWorker::needleFinished, this, &ExploreView::onNeedleFinished);
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
    m_needle->setTrainedContext(nCtxTrain);
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
    QWidget *focused = QApplication::focusWidget();
    const bool hadFocus = focused && isAncestorOf(focused);
    updateEnabledStates();
    // Run or Stop had the focus and is disabled now: Qt hands the focus to the next control in
    // the chain (a number box, its value selected, may come next); the button that does
    // something now takes it instead.
    if (hadFocus && !focused->isEnabled()) {
        QPushButton *next = m_running && m_cancel->isEnabled() ? m_cancel : m_run->isEnabled() ? m_run : nullptr;
        if (next) {
            next->setFocus(Qt::OtherFocusReason);
        } else { // Stop pressed: the saved runs until the queue ends, then Run
            currentRunList()->setFocus(Qt::OtherFocusReason);
            m_focusRunWhenIdle = true;
        }
    } else if (!m_running && m_focusRunWhenIdle) {
        m_focusRunWhenIdle = false;
        if (currentRunList()->hasFocus() && m_run->isEnabled())
            m_run->setFocus(Qt::OtherFocusReason);
    }
}

void ExploreView::updateEnabledStates()
{
    const bool idle = !m_running;
    for (QWidget *w : {static_cast<QWidget *>(m_kind), static_cast<QWidget *>(m_openBook),
                       static_cast<QWidget *>(m_context), static_cast<QWidget *>(m_bucket),
                       static_cast<QWidget *>(m_windows), static_cast<QWidget *>(m_needle),
                       static_cast<QWidget *>(m_settingsList), static_cast<QWidget *>(m_addCurrent),
                       static_cast<QWidget *>(m_removeSetting)})
        w->setEnabled(idle);
    const bool anyChecked = !m_settingsList->checkedSettings().isEmpty();
    const bool bookReady = hasBook() || !bookNeeded();
    m_run->setEnabled(idle && m_engineAvailable && m_worker && bookReady && anyChecked);
    if (!m_engineAvailable)
        m_run->setToolTip(tr("Waiting for the model (or the chat) to finish"));
    else if (!bookReady)
        m_run->setToolTip(tr("Open a book first"));
    else if (!anyChecked)
        m_run->setToolTip(tr("Check at least one setting to compare"));
    else
        m_run->setToolTip(runKind() == RunKind::Needle ? tr("Run the needle grid with every checked setting")
                                                       : tr("Score the book with every checked setting, one after another"));
    m_cancel->setEnabled(m_running && !m_cancelling);
    m_deleteRun->setEnabled(idle && !currentRunList()->currentId().isEmpty());
    const bool plotted = !m_plot->runs().isEmpty();
    m_exportPng->setEnabled(plotted);
    m_exportCsv->setEnabled(plotted);
    const bool shown = !m_heatmaps->runs().isEmpty();
    m_needlePng->setEnabled(shown);
    m_needleCsv->setEnabled(shown);
}

ExploreView::RunKind ExploreView::runKind() const { return RunKind(m_kind->currentData().toInt()); }

void ExploreView::setRunKind(RunKind kind)
{
    if (m_running)
        return;
    m_kind->setCurrentIndex(m_kind->findData(int(kind)));
    const bool needle = kind == RunKind::Needle;
    m_scoringBox->setVisible(!needle);
    m_needle->setVisible(needle);
    m_results->setCurrentIndex(needle ? 1 : 0);
    m_runLists->setCurrentIndex(needle ? 1 : 0);
    updateEnabled();
}

bool ExploreView::bookNeeded() const
{
    return runKind() == RunKind::Perplexity || m_needle->task() == longscope::NeedleTask::Book;
}

ExploreRunList *ExploreView::currentRunList() const
{
    return runKind() == RunKind::Needle ? m_needleList : m_runList;
}

void ExploreView::loadPresetGroup(const QString &name)
{
    for (const ExplorePresetGroup &group : explorePresetGroups())
        if (group.name == name) {
            m_settingsList->setPresets(group.presets);
            m_acrossText->setChecked(group.acrossText);
            setStatus(tr("Comparing %1: %2").arg(group.name, group.description));
            return;
        }
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

QString ExploreView::checkRunnable(const QVector<ExplorePreset> &checked) const
{
    if (!m_engineAvailable || !m_worker)
        return tr("No model is ready: load one, or wait for the chat to finish.");
    if (bookNeeded() && !hasBook())
        return tr("Open a book first.");
    if (bookNeeded() && m_book.text.trimmed().isEmpty())
        return tr("“%1” is empty.").arg(m_book.title);
    if (checked.isEmpty())
        return tr("Check at least one setting to compare.");
    return {};
}

bool ExploreView::run()
{
    if (m_running)
        return false;
    const QVector<ExplorePreset> checked = m_settingsList->checkedSettings();
    QString why = checkRunnable(checked);
    m_runKind = runKind();
    if (why.isEmpty() && m_runKind == RunKind::Needle) {
        const std::optional<NeedleRequest> request = m_needle->request(&why);
        if (request)
            m_needleRequest = *request;
    }
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
    m_runText = bookNeeded() ? m_book.text : QString();
    m_runBookTitle = bookNeeded() ? m_book.title : QString();
    m_needleRequest.bookTitle = m_runBookTitle;
    m_running = true;
    m_cancelling = false;
    m_lastError.clear();
    m_stops.clear();

    // Runs that do not compare with these (another book, model, length or bucket; another
    // grid) leave the plot.
    if (m_runKind == RunKind::Perplexity) {
        for (const QString &id : m_runList->checkedIds()) {
            const PerplexityRunResult r = m_runs.value(id);
            if (r.book_title != m_runBookTitle || r.model_name != m_modelName || r.ctx != m_runCtx ||
                r.bucket != m_runBucket)
                m_runList->setChecked(id, false);
        }
    } else {
        for (const QString &id : m_needleList->checkedIds()) {
            const NeedleRunResult r = m_needleRuns.value(id);
            if (r.task != m_needleRequest.task || r.model_name != m_modelName || r.lengths != m_needleRequest.lengths ||
                r.depths != m_needleRequest.depths || r.book_title != m_runBookTitle)
                m_needleList->setChecked(id, false);
        }
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
    m_runProgress->setFormat(tr("tokenizing…"));
    m_overallProgress->setFormat(tr("run %L1 of %L2").arg(m_queueDone + 1).arg(m_queueSize));
    if (m_runKind == RunKind::Needle) {
        setStatus(tr("Hiding needles with %1…").arg(m_current.label));
        NeedleRequest request = m_needleRequest;
        request.settings = m_current.settings;
        request.label = m_current.label;
        m_worker->queueNeedle(request, m_runText);
        return;
    }
    setStatus(tr("Scoring “%1” with %2…").arg(m_runBookTitle, m_current.label));
    m_worker->queuePerplexity(m_runText, m_current.settings, m_runCtx, m_runBucket, m_current.label, m_runTokens);
}

void ExploreView::showProgress(const QString &label, qint64 done, qint64 total, const QString &unit)
{
    if (!m_running || label != m_current.label || total <= 0)
        return;
    // Progress bars hold ints: scale to per-mille.
    m_runProgress->setRange(0, kOverallSteps);
    m_runProgress->setValue(int(kOverallSteps * done / total));
    m_runProgress->setFormat(tr("%L1 / %L2 %3").arg(done).arg(total).arg(unit));
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

void ExploreView::onPerplexityProgress(const QString &label, qint64 done, qint64 total)
{
    if (m_runKind == RunKind::Perplexity)
        showProgress(label, done, total, tr("tokens"));
}

void ExploreView::onNeedleProgress(const QString &label, qint64 done, qint64 total)
{
    if (m_runKind == RunKind::Needle)
        showProgress(label, done, total, tr("tokens evaluated"));
}

bool ExploreView::acceptFinished(const QString &label, const QString &error)
{
    if (!m_running || label != m_current.label)
        return false;
    ++m_queueDone;
    m_overallProgress->setValue(int(double(kOverallSteps) * m_queueDone / std::max(1, m_queueSize)));
    if (!error.isEmpty()) {
        m_lastError = error;
        setStatus(tr("%1 failed: %2").arg(label, error), true);
        m_cancelling = true;
    }
    return true;
}

template <class Run>
void ExploreView::keepRun(Run &run, QHash<QString, Run> &runs, ExploreRunList *list)
{
    ++m_finishedRuns;
    QString error;
    if (!m_store || !m_store->save(run, &error)) {
        if (run.id.isEmpty())
            run.id = ExploreStore::newId();
        setStatus(tr("The run could not be saved: %1").arg(error), true);
    }
    runs.insert(run.id, run);
    list->addRun(run, true);
    m_runProgress->setValue(m_runProgress->maximum());
}

void ExploreView::afterFinished(bool cancelled)
{
    if (cancelled)
        m_cancelling = true;
    startNext();
}

void ExploreView::onPerplexityFinished(const QString &label, const PerplexityRunResult &result)
{
    if (m_runKind != RunKind::Perplexity || !acceptFinished(label, result.error))
        return;
    PerplexityRunResult run = result;
    run.book_title = m_runBookTitle;
    if (!run.failed() && run.n_scored > 0) {
        keepRun(run, m_runs, m_runList);
        m_runProgress->setFormat(tr("perplexity %L1").arg(run.perplexity(), 0, 'f', 1));
        if (!run.stopped.isEmpty())
            m_stops << tr("%1 stopped after %L2 tokens: %3").arg(label).arg(run.n_scored).arg(run.stopped);
        if (!run.note.isEmpty())
            m_stops << tr("%1: %2").arg(label, run.note);
    }
    afterFinished(run.cancelled);
}

void ExploreView::onNeedleFinished(const QString &label, const NeedleRunResult &result)
{
    if (m_runKind != RunKind::Needle || !acceptFinished(label, result.error))
        return;
    NeedleRunResult run = result;
    const bool reached = std::any_of(run.cells.cbegin(), run.cells.cend(), [](const NeedleGridCell &c) { return c.trials > 0; });
    if (!run.failed() && reached) {
        keepRun(run, m_needleRuns, m_needleList);
        m_runProgress->setFormat(tr("%L1 of %L2 cells retrieved").arg(run.retrievedCells()).arg(run.cells.size()));
    }
    afterFinished(run.cancelled);
}

void ExploreView::finishQueue()
{
    const bool cancelled = m_cancelling;
    m_running = false;
    m_cancelling = false;
    m_queue.clear();
    if (m_lastError.isEmpty())
        setStatus(cancelled ? tr("Cancelled after %L1 of %L2 runs.").arg(m_queueDone).arg(m_queueSize)
                  : m_runKind == RunKind::Needle
                      ? tr("Done: %L1 needle grids of %L2 cells each.")
                            .arg(m_queueDone)
                            .arg(m_needleRequest.lengths.size() * m_needleRequest.depths.size())
                      : tr("Done: %L1 runs of %L2 tokens each.").arg(m_queueDone).arg(m_runTokens) +
                            (m_stops.isEmpty() ? QString() : QLatin1Char(' ') + m_stops.join(QStringLiteral(" · "))));
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

namespace {

// The checked runs of `list`, oldest first, so one batch keeps the order of its settings
// (and their colours).
template <class Run>
QVector<Run> checkedRuns(const ExploreRunList *list, const QHash<QString, Run> &runs)
{
    QVector<Run> out;
    for (const QString &id : list->checkedIds())
        if (runs.contains(id))
            out.append(runs.value(id));
    std::stable_sort(out.begin(), out.end(), [](const Run &a, const Run &b) {
        if (a.created != b.created)
            return a.created < b.created;
        return a.id < b.id;
    });
    return out;
}

// Every run, newest first (the lists' order).
template <class Run>
QVector<Run> newestFirst(const QHash<QString, Run> &runs)
{
    QVector<Run> out(runs.cbegin(), runs.cend());
    std::stable_sort(out.begin(), out.end(), [](const Run &a, const Run &b) {
        if (a.created != b.created)
            return a.created > b.created;
        return a.id > b.id;
    });
    return out;
}

// The saved runs with the ones of this session that could not be saved.
template <class Run>
QHash<QString, Run> mergeSaved(const QVector<Run> &saved, const QHash<QString, Run> &session)
{
    QHash<QString, Run> runs;
    for (const Run &r : saved)
        runs.insert(r.id, r);
    for (auto it = session.cbegin(); it != session.cend(); ++it)
        if (!runs.contains(it.key()))
            runs.insert(it.key(), it.value());
    return runs;
}

} // namespace

QVector<PerplexityRunResult> ExploreView::plottedRuns() const { return checkedRuns(m_runList, m_runs); }

QVector<NeedleRunResult> ExploreView::shownNeedleRuns() const { return checkedRuns(m_needleList, m_needleRuns); }

void ExploreView::refreshHeatmaps()
{
    m_heatmaps->setRuns(shownNeedleRuns());
    updateEnabled();
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
    m_runs = mergeSaved(m_store->list(), m_runs);
    QStringList errors = m_store->lastErrors();
    m_needleRuns = mergeSaved(m_store->listNeedleRuns(), m_needleRuns);
    errors += m_store->lastErrors();
    m_runList->setRuns(newestFirst(m_runs), m_runList->checkedIds());
    m_needleList->setRuns(newestFirst(m_needleRuns), m_needleList->checkedIds());
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
    m_needleRuns.remove(id);
    m_runList->removeRun(id);
    m_needleList->removeRun(id);
    return true;
}

bool ExploreView::exportPng(const QString &path, QString *error)
{
    const bool needle = runKind() == RunKind::Needle;
    if (needle ? m_heatmaps->runs().isEmpty() : m_plot->runs().isEmpty()) {
        if (error)
            *error = tr("There is nothing to export: run or check a run first.");
        return false;
    }
    return needle ? m_heatmaps->exportPng(path, error) : m_plot->exportPng(path, error);
}

bool ExploreView::exportCsv(const QString &path, QString *error)
{
    const bool needle = runKind() == RunKind::Needle;
    if (needle ? m_heatmaps->runs().isEmpty() : m_plot->runs().isEmpty()) {
        if (error)
            *error = tr("There is nothing to export: run or check a run first.");
        return false;
    }
    return needle ? m_heatmaps->exportCsv(path, error) : m_plot->exportCsv(path, error);
}

} // namespace longscope::ui
