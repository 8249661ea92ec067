#include "widgets/main_window.h"

#include "core/app_settings.h"
#include "core/book_controller.h"
#include "core/chat_model.h"
#include "core/context_limit.h"
#include "core/conversation_list_model.h"
#include "core/conversation_store.h"
#include "core/explore_store.h"
#include "core/model_paths.h"
#include "core/settings_json.h"
#include "core/store_files.h"
#include "widgets/book_panel.h"
#include "widgets/chat_panel.h"
#include "widgets/chat_template_dialog.h"
#include "widgets/chat_input.h"
#include "widgets/conversation_sidebar.h"
#include "widgets/explore_view.h"
#include "widgets/exports.h"
#include "widgets/generation_panel.h"
#include "widgets/long_context_panel.h"
#include "widgets/metrics_plots.h"
#include "widgets/remote_endpoint_dialog.h"
#include "widgets/model_info_dialog.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QProgressDialog>
#include <QScopedValueRollback>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QShortcut>
#include <QSplitter>
#include <QStatusBar>
#include <QTabBar>
#include <QTabWidget>
#include <QTextDocument>
#include <QTimer>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <cstdio>

#ifndef LONGSCOPE_VERSION
#define LONGSCOPE_VERSION "0.0.0"
#endif

// Q_INIT_RESOURCE must be used outside any namespace.
static void initLongscopeResource()
{
    Q_INIT_RESOURCE(longscope);
}

namespace longscope::ui {

void initResources()
{
    static const bool done = [] {
        initLongscopeResource();
        return true;
    }();
    Q_UNUSED(done);
}

namespace {

constexpr int kStatusRefreshMs = 250;
constexpr int kMetricsPollMs = 1000; // a remote server's /metrics, while one is in use

QString qs(std::string_view s)
{
    return QString::fromUtf8(s.data(), qsizetype(s.size()));
}

QString onOff(bool on)
{
    return on ? MainWindow::tr("on") : MainWindow::tr("off");
}

QString overflowText(OverflowPolicy p)
{
    switch (p) {
    case OverflowPolicy::Error: return MainWindow::tr("error");
    case OverflowPolicy::HeadTail: return MainWindow::tr("head+tail");
    case OverflowPolicy::DropOldestTurns: return MainWindow::tr("drop oldest");
    case OverflowPolicy::Shift: return MainWindow::tr("shift");
    }
    return {};
}

bool looksLikeModel(const QFileInfo &fi)
{
    if (fi.isDir())
        return QFileInfo::exists(fi.absoluteFilePath() + QStringLiteral("/config.json"));
    const QString suffix = fi.suffix().toLower();
    return suffix == QLatin1String("gguf") || suffix == QLatin1String("safetensors") ||
           fi.fileName() == QLatin1String("config.json");
}

// The chat's rows (chat, plots) and columns (conversations, chat, controls) as first laid out.
constexpr int kChatRowsHeights[] = {720, 200};
constexpr int kChatColumnWidths[] = {210, 700, 330};

} // namespace

// A strip over a tab saying that the other tab has the engine, with a Stop for it.
class EngineBusyBar : public QFrame {
public:
    explicit EngineBusyBar(QWidget *parent) : QFrame(parent)
    {
        setObjectName(QStringLiteral("engineBusy"));
        setStyleSheet(QStringLiteral("#engineBusy { background: palette(alternate-base); border: 1px solid "
                                     "palette(highlight); border-radius: 4px; }"));
        m_text = new QLabel(this);
        m_text->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
        m_stop = new QPushButton(MainWindow::tr("Stop"), this);
        m_stop->setAccessibleName(MainWindow::tr("Stop what holds the engine"));
        auto *h = new QHBoxLayout(this);
        h->setContentsMargins(8, 2, 4, 2);
        h->addWidget(m_text, 1);
        h->addWidget(m_stop);
        hide();
    }
    QLabel *label() const { return m_text; }
    QPushButton *stopButton() const { return m_stop; }
    // Empty `text`: hidden.
    void say(const QString &text)
    {
        m_text->setText(text);
        m_text->setToolTip(text);
        setVisible(!text.isEmpty());
    }

private:
    QLabel *m_text = nullptr;
    QPushButton *m_stop = nullptr;
};

MainWindow::MainWindow(const MainWindowOptions &options, QWidget *parent)
    : QMainWindow(parent), m_interactive(options.interactive)
{
    registerMetaTypes();
    initResources();
    m_appSettings = options.settings ? std::make_unique<AppSettings>(options.settings)
                                     : std::make_unique<AppSettings>();
    m_secrets = options.secrets;
    if (!m_secrets) {
        m_ownSecrets = std::make_unique<KeychainStore>();
        m_secrets = m_ownSecrets.get();
    }
    m_store = new ConversationStore(options.conversationDirectory, this);
    m_exploreStore = new ExploreStore(options.runsDirectory, this);
    m_conversationList = new ConversationListModel(m_store, this);
    m_chat = new ChatController(m_store, this);
    m_chat->setInputs([this] {
        ChatController::Inputs in;
        in.systemPrompt = m_chatPanel->systemPrompt();
        in.params = m_generation->params();
        in.settings = m_longContext->settings();
        if (m_endpoint)
            in.modelPath = tr("%1 (%2)").arg(m_endpoint->model, m_endpoint->base_url);
        else if (m_models->isLoaded())
            in.modelPath = m_models->summary().path;
        in.chatTemplate = loadChatTemplateChoice(*m_appSettings->settings(), in.modelPath);
        in.contextLimit = contextLimit();
        in.plots = m_plots->history();
        return in;
    });
    m_books = new BookController(this);
    m_models = new ModelController(m_appSettings.get(), this);
    connect(m_chat, &ChatController::replyStarted, this, &MainWindow::onReplyStarted);
    connect(m_chat, &ChatController::replyFinished, this, &MainWindow::onReplyFinished);
    connect(m_chat, &ChatController::statusMessage, this,
            [this](const QString &text, int timeoutMs) { showStatus(text, timeoutMs); });
    connect(m_chat, &ChatController::saved, this, [this](const QString &id, const QString &title) {
        m_sidebar->setCurrentId(id);
        setWindowTitle(tr("%1 — Longscope").arg(title));
    });
    connect(m_chat, &ChatController::saveFailed, this, [this](const QString &error) {
        showStatus(tr("Could not save the conversation: %1").arg(error), 8000);
    });

    setWindowTitle(tr("Longscope"));
    setWindowIcon(QIcon(QStringLiteral(":/longscope/icons/longscope.svg")));
    setAcceptDrops(true);
    setDockOptions(QMainWindow::AnimatedDocks);

    // The chat page, left to right: the saved conversations, the chat above the plots, the
    // controls. Each part but the chat collapses (its splitter handle, or the View menu), so
    // the window fits a 1280x720 screen.
    m_sidebar = new ConversationSidebar(this);
    m_sidebar->setModel(m_conversationList);
    m_sidebar->setObjectName(QStringLiteral("conversations"));

    m_chatRows = new QSplitter(Qt::Vertical, this);
    m_chatRows->setObjectName(QStringLiteral("chatRows"));
    m_chatRows->addWidget(createChatArea());
    m_plots = new MetricsPlots(m_chatRows);
    m_chatRows->addWidget(m_plots);
    m_chatRows->setCollapsible(0, false);
    m_chatRows->setStretchFactor(0, 3);
    m_chatRows->setStretchFactor(1, 1);
    m_chatRows->setSizes({kChatRowsHeights[0], kChatRowsHeights[1]}); // the chat gets most of the height

    m_chatColumns = new QSplitter(Qt::Horizontal, this);
    m_chatColumns->setObjectName(QStringLiteral("chatColumns"));
    m_chatColumns->addWidget(m_sidebar);
    m_chatColumns->addWidget(m_chatRows);
    m_controlColumn = createControlColumn();
    m_chatColumns->addWidget(m_controlColumn);
    m_chatColumns->setCollapsible(1, false);
    m_chatColumns->setStretchFactor(0, 0);
    m_chatColumns->setStretchFactor(1, 1);
    m_chatColumns->setStretchFactor(2, 0);
    m_chatColumns->setSizes({kChatColumnWidths[0], kChatColumnWidths[1], kChatColumnWidths[2]});

    auto *central = new QWidget(this);
    auto *v = new QVBoxLayout(central);
    v->setContentsMargins(0, 0, 0, 0);
    v->setSpacing(0);
    v->addWidget(createBanner());
    // Chat and Explore share the window (and the engine) as two tabs; each says when the
    // other one runs, with its own Stop.
    m_tabs = new QTabWidget(central);
    m_tabs->setObjectName(QStringLiteral("mainTabs"));
    m_tabs->setDocumentMode(true);
    auto *chatPage = new QWidget(m_tabs);
    auto *chatLayout = new QVBoxLayout(chatPage);
    chatLayout->setContentsMargins(8, 4, 8, 4);
    chatLayout->setSpacing(4);
    m_chatBusy = new EngineBusyBar(chatPage);
    connect(m_chatBusy->stopButton(), &QPushButton::clicked, this, &MainWindow::stop);
    chatLayout->addWidget(m_chatBusy);
    chatLayout->addWidget(m_chatColumns, 1);
    m_tabs->addTab(chatPage, tr("Chat"));
    m_explore = new ExploreView(m_exploreStore, m_tabs);
    auto *explorePage = new QWidget(m_tabs);
    auto *exploreLayout = new QVBoxLayout(explorePage);
    exploreLayout->setContentsMargins(8, 4, 8, 4);
    exploreLayout->setSpacing(4);
    m_exploreBusy = new EngineBusyBar(explorePage);
    connect(m_exploreBusy->stopButton(), &QPushButton::clicked, this, &MainWindow::stop);
    exploreLayout->addWidget(m_exploreBusy);
    exploreLayout->addWidget(m_explore, 1);
    m_tabs->addTab(explorePage, tr("Explore"));
    m_tabs->setTabToolTip(1, tr("Perplexity by position: where each long-context setting stops understanding a book"));
    m_tabs->tabBar()->setAccessibleName(tr("Chat or Explore"));
    v->addWidget(m_tabs, 1);
    setCentralWidget(central);

    m_exports = new Exports(m_chat, m_store, m_conversationList, m_plots, m_explore,
                            Exports::Hooks{
                                [this](const QString &caption, const QString &name, const QString &filter) {
                                    return chooseSaveFile(caption, name, filter);
                                },
                                [this](const QString &title, const QString &text) { showError(title, text); },
                                [this](const QString &text) { showStatus(text, 5000); },
                                [this] { return m_chatPanel->systemPrompt(); }},
                            this);
    createMenus();
    createStatusBar();

    connect(m_sidebar, &ConversationSidebar::openRequested, this, &MainWindow::openConversation);
    connect(m_sidebar, &ConversationSidebar::newRequested, this, &MainWindow::clearConversation);
    connect(m_sidebar, &ConversationSidebar::deleteRequested, this, &MainWindow::onDeleteRequested);
    connect(m_sidebar, &ConversationSidebar::exportMarkdownRequested, m_exports, &Exports::savedConversationMarkdown);
    connect(m_sidebar, &ConversationSidebar::exportJsonRequested, m_exports, &Exports::savedConversationJson);

    // Persistent state.
    m_generation->setParams(m_appSettings->loadGenerationParams());
    const longscope::Settings engineSettings = m_appSettings->loadEngineSettings();
    m_longContext->setSettings(engineSettings);
    m_explore->setCurrentSettings(engineSettings);
    m_appliedSettings = engineSettings;
    m_chatPanel->setSystemPrompt(m_appSettings->loadSystemPrompt());
    restoreGeometry(m_appSettings->loadWindowGeometry());
    restoreState(m_appSettings->loadWindowState());
    restoreLayout();
    showDataNotices();

    connect(m_generation, &GenerationPanel::paramsChanged, this, &MainWindow::onGenerationParamsChanged);
    connect(m_longContext, &LongContextPanel::settingsChanged, this, &MainWindow::onLongContextChanged);

    // The worker and its thread.
    auto *worker = new EngineWorker(options.threads);
    worker->moveToThread(&m_thread);
    m_worker = worker;
    connect(&m_thread, &QThread::finished, worker, &QObject::deleteLater);
    m_remote = new RemoteWorker(this);
    connectWorker();
    connectRemote();
    connectExplore();
    m_thread.setObjectName(QStringLiteral("longscope-engine"));
    m_thread.start();
    m_worker->setSettings(engineSettings);

    newConversation();
    updateActions();
    refreshStatus();

    if (options.loadModelOnStart) {
        QString path = options.modelPath;
        if (path.isEmpty()) {
            const QString last = m_appSettings->loadLastModel();
            path = !last.isEmpty() && QFileInfo::exists(last) ? last : bundledModelPath();
        }
        if (path.isEmpty())
            showStatus(tr("No model: open one with File > Open Model…, or connect to a server with File > Connect to "
                          "Server…"));
        else
            loadModel(path);
    }
    m_chatPanel->chatInput()->setFocus();
}

MainWindow::~MainWindow()
{
    shutDownWorker();
}

// ---------------------------------------------------------------------------------------
// Building the window

QWidget *MainWindow::createBanner()
{
    auto *banner = new QFrame(this);
    banner->setObjectName(QStringLiteral("banner"));
    const bool dark = palette().color(QPalette::Window).lightness() < 128;
    banner->setStyleSheet(dark ? QStringLiteral("#banner { background: qlineargradient(x1:0, y1:0, x2:1, y2:0, "
                                                "stop:0 #1d2b44, stop:1 #23262d); border-bottom: 1px solid #3a3f47; }")
                               : QStringLiteral("#banner { background: qlineargradient(x1:0, y1:0, x2:1, y2:0, "
                                                "stop:0 #e8f0fe, stop:1 #f7f8fa); border-bottom: 1px solid #d5dae1; }"));
    auto *icon = new QLabel(banner);
    icon->setPixmap(QIcon(QStringLiteral(":/longscope/icons/longscope.svg")).pixmap(36, 36));
    auto *title = new QLabel(tr("Longscope"), banner);
    QFont tf = title->font();
    tf.setPointSizeF(tf.pointSizeF() * 1.6);
    tf.setBold(true);
    title->setFont(tf);
    auto *subtitle = new QLabel(tr("Chat with a local LLM and watch what long context costs, live"), banner);
    QPalette sp = subtitle->palette();
    sp.setColor(QPalette::WindowText, sp.color(QPalette::PlaceholderText));
    subtitle->setPalette(sp);
    auto *titles = new QVBoxLayout;
    titles->setSpacing(0);
    titles->addWidget(title);
    titles->addWidget(subtitle);

    m_bannerModel = new QLabel(banner);
    m_bannerModel->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
    m_bannerModel->setTextFormat(Qt::RichText);
    m_bannerModel->setWordWrap(true);
    m_bannerModel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);

    auto *h = new QHBoxLayout(banner);
    h->setContentsMargins(14, 8, 16, 8);
    h->setSpacing(10);
    h->addWidget(icon);
    h->addLayout(titles);
    // The model header takes all the width the titles leave (right-aligned), so its three
    // lines stay three lines at the window's minimum width.
    h->addWidget(m_bannerModel, 1);
    return banner;
}

QWidget *MainWindow::createChatArea()
{
    m_chatPanel = new ChatPanel(m_chat->model(), this);
    connect(m_chatPanel, &ChatPanel::sendRequested, this, &MainWindow::send);
    connect(m_chatPanel, &ChatPanel::filesDropped, this, &MainWindow::onFilesDropped);
    connect(m_chatPanel, &ChatPanel::stopRequested, this, &MainWindow::stop);
    connect(m_chatPanel, &ChatPanel::regenerateRequested, this, &MainWindow::regenerate);
    connect(m_chatPanel, &ChatPanel::clearRequested, this, &MainWindow::clearConversation);
    return m_chatPanel;
}

QWidget *MainWindow::createControlColumn()
{
    auto *scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setFrameShape(QFrame::NoFrame);
    auto *content = new QWidget(scroll);
    m_bookPanel = new BookPanel(content);
    m_bookPanel->hide();
    m_generation = new GenerationPanel(content);
    m_longContext = new LongContextPanel(content);
    content->setObjectName(QStringLiteral("controls"));
    // Framed, titled groups; the font and colour of the title stay on the group box itself.
    content->setStyleSheet(QStringLiteral(
        "#controls QGroupBox { border: 1px solid palette(mid); border-radius: 6px; margin-top: 12px;"
        " padding: 8px 6px 6px 6px; font-weight: 600; }"
        "#controls QGroupBox::title { subcontrol-origin: margin; subcontrol-position: top left;"
        " left: 10px; padding: 0 4px; color: palette(highlight); }"));
    auto *v = new QVBoxLayout(content);
    v->setContentsMargins(0, 0, 4, 0);
    v->setSpacing(10);
    v->addWidget(m_bookPanel);
    v->addWidget(m_generation);
    v->addWidget(m_longContext);
    v->addStretch(1);
    scroll->setWidget(content);
    scroll->setObjectName(QStringLiteral("sidePanel"));
    scroll->setAccessibleName(tr("Book, generation and long-context settings"));
    // As narrow as its controls allow (none cut off), and no narrower.
    scroll->setMinimumWidth(content->minimumSizeHint().width() + scroll->verticalScrollBar()->sizeHint().width());
    scroll->setMaximumWidth(460);

    connect(m_bookPanel, &BookPanel::streamRequested, this, &MainWindow::streamBook);
    connect(m_bookPanel, &BookPanel::continueRequested, this, &MainWindow::continueText);
    connect(m_bookPanel, &BookPanel::cancelRequested, this, &MainWindow::stop);
    connect(m_bookPanel, &BookPanel::closeRequested, m_bookPanel, &QWidget::hide);
    // Whatever button had the focus, the next field is a number box: after a click on the
    // book's buttons the focus goes back to the input, never into a value by itself.
    for (QPushButton *b : m_bookPanel->findChildren<QPushButton *>())
        b->setFocusPolicy(Qt::TabFocus);
    return scroll;
}

void MainWindow::createMenus()
{
    QMenu *file = menuBar()->addMenu(tr("&File"));
    m_openModelAction = file->addAction(tr("&Open Model…"), this, [this] {
        const QString path = chooseOpenFile(tr("Open Model"), tr("GGUF models (*.gguf);;Hugging Face config (config.json);;All files (*)"));
        if (!path.isEmpty())
            loadModel(QFileInfo(path).fileName() == QLatin1String("config.json") ? QFileInfo(path).absolutePath() : path);
    });
    m_openModelAction->setShortcut(QKeySequence::Open);
    m_openModelDirAction = file->addAction(tr("Open Model &Directory…"), this, [this] {
        const QString dir = chooseDirectory(tr("Open a Hugging Face model directory"));
        if (!dir.isEmpty())
            loadModel(dir);
    });
    m_recentMenu = file->addMenu(tr("&Recent Models"));
    connect(m_recentMenu, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
    rebuildRecentMenu();
    file->addSeparator();
    // Remote servers (vLLM, SGLang, llama-server, longscope-cli serve) in place of a model file.
    m_connectAction = file->addAction(tr("Connect to &Server…"), this, &MainWindow::showConnectDialog);
    m_connectAction->setObjectName(QStringLiteral("connectServer"));
    m_connectAction->setStatusTip(tr("Chat with a model on an OpenAI-compatible server (vLLM, SGLang, llama-server, "
                                     "longscope-cli serve)"));
    m_serversMenu = file->addMenu(tr("Remote Ser&vers"));
    m_serversMenu->menuAction()->setObjectName(QStringLiteral("remoteServers"));
    connect(m_serversMenu, &QMenu::aboutToShow, this, &MainWindow::rebuildServersMenu);
    rebuildServersMenu();
    m_useLocalAction = file->addAction(tr("Use the &Local Model"), this, &MainWindow::useLocalModel);
    m_useLocalAction->setObjectName(QStringLiteral("useLocalModel"));
    m_useLocalAction->setStatusTip(tr("Leave the server: the chat goes to the model file loaded here"));
    file->addSeparator();
    QAction *newChat = file->addAction(tr("&New Conversation"), this, &MainWindow::clearConversation);
    newChat->setShortcut(QKeySequence::New);
    m_openBookAction = file->addAction(tr("Open &Book…"), this, [this] {
        const QString path = chooseOpenFile(tr("Open Book"), tr("Text files (*.txt);;All files (*)"));
        if (!path.isEmpty())
            openBook(path);
    });
    m_openBookAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_B));
    file->addSeparator();
    const qsizetype before = file->actions().size();
    m_exports->addMenuActions(file);
    // Ctrl+E: the first export, the conversation as Markdown.
    const QList<QAction *> exports = file->actions().mid(before);
    m_exportAction = exports.isEmpty() ? nullptr : exports.first();
    for (QAction *a : exports)
        if (a->text().contains(QLatin1String("Markdown")))
            m_exportAction = a;
    if (m_exportAction)
        m_exportAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    file->addSeparator();
    QAction *quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);
    quit->setMenuRole(QAction::QuitRole);

    QMenu *view = menuBar()->addMenu(tr("&View"));
    view->menuAction()->setObjectName(QStringLiteral("viewMenu"));
    QAction *chatTab = view->addAction(tr("&Chat"), this, &MainWindow::showChat);
    chatTab->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_1));
    QAction *exploreTab = view->addAction(tr("&Explore"), this, &MainWindow::showExplore);
    exploreTab->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_2));
    view->addSeparator();
    m_showConversations = view->addAction(tr("C&onversations"), this,
                                          [this](bool on) { setPanelShown(QStringLiteral("conversations"), on); });
    m_showConversations->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    m_showSidePanel = view->addAction(tr("&Side Panel"), this,
                                      [this](bool on) { setPanelShown(QStringLiteral("sidePanel"), on); });
    m_showSidePanel->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));
    m_showPlots = view->addAction(tr("&Plots"), this, [this](bool on) { setPanelShown(QStringLiteral("plots"), on); });
    m_showPlots->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
    for (QAction *a : {m_showConversations, m_showSidePanel, m_showPlots}) {
        a->setCheckable(true);
        a->setChecked(true);
    }
    view->addSeparator();
    view->addAction(tr("Clear &Plots"), m_plots, &MetricsPlots::clear);
    m_chatTemplateAction = view->addAction(tr("Chat &Template…"), this, [this] {
        if (m_worker && m_models->isLoaded() && !isRemote())
            openChatTemplateDialog(this, m_worker, m_chat->conversation().chatTurns(), *m_appSettings->settings(),
                                   m_models->summary(), m_chatPanel->systemPrompt());
    });
    QAction *modelInfo = view->addAction(tr("Model &Info…"), this, &MainWindow::showModelInfo);
    modelInfo->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_I));

    createChatActions(menuBar()->addMenu(tr("C&hat")));

    QMenu *help = menuBar()->addMenu(tr("&Help"));
    QAction *about = help->addAction(tr("&About Longscope"), this, [this] {
        QString model = tr("none");
        if (m_models->isLoaded())
            model = tr("%1 (%2, %L3 layers, %L4-token trained context)<br><small>%5</small>")
                        .arg(m_models->summary().name.toHtmlEscaped(), m_models->summary().format)
                        .arg(m_models->summary().n_layer)
                        .arg(m_models->summary().n_ctx_train)
                        .arg(m_models->summary().path.toHtmlEscaped());
        QMessageBox::about(this, tr("About Longscope"),
                           tr("<h3>Longscope %1</h3><p>Local LLM chat and long-context explorer.</p>"
                              "<p><b>Model:</b> %2</p><p><b>Backend:</b> %3<br><small>%4</small></p>"
                              "<p><small>Qt %5</small></p>")
                               .arg(QStringLiteral(LONGSCOPE_VERSION), model,
                                    m_models->isLoaded() ? m_models->summary().backend.toHtmlEscaped() : tr("none"),
                                    m_models->summary().gpu_status.toHtmlEscaped(), QString::fromLatin1(qVersion())));
    });
    about->setMenuRole(QAction::AboutRole);
}

void MainWindow::createChatActions(QMenu *chat)
{
    QAction *send = chat->addAction(tr("&Send"), this, &MainWindow::send);
    send->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
    m_stopAction = chat->addAction(tr("S&top"), this, &MainWindow::stop);
    m_stopAction->setShortcut(QKeySequence(Qt::Key_Escape));
    m_regenerateAction = chat->addAction(tr("&Regenerate"), this, &MainWindow::regenerate);
    m_regenerateAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    m_focusInputAction = chat->addAction(tr("&Focus the Input"), this, [this] {
        showChat();
        m_chatPanel->chatInput()->setFocus(Qt::ShortcutFocusReason);
    });
    m_focusInputAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
    // Esc stops from anywhere in the window, a dialog's own Esc aside.
    for (QAction *a : {send, m_stopAction, m_regenerateAction, m_focusInputAction})
        a->setShortcutContext(Qt::WindowShortcut);
    m_chatPanel->stopButton()->setToolTip(tr("Stop the generation or the book at the next step (Esc)"));
    m_chatPanel->regenerateButton()->setToolTip(tr("Answer the last message again, with a new seed unless it is "
                                                    "fixed (Ctrl+R)"));
}

void MainWindow::setPanelShown(const QString &name, bool shown, bool remember)
{
    QWidget *panel = name == QLatin1String("conversations") ? static_cast<QWidget *>(m_sidebar)
                     : name == QLatin1String("sidePanel")   ? m_controlColumn
                                                            : static_cast<QWidget *>(m_plots);
    panel->setVisible(shown);
    // Shown again after being dragged shut on its handle: it gets its first size back.
    QSplitter *splitter = panel == m_plots ? m_chatRows : m_chatColumns;
    const int index = splitter->indexOf(panel);
    if (QList<int> sizes = splitter->sizes(); shown && sizes.value(index) == 0) {
        sizes[index] = panel == m_plots ? kChatRowsHeights[1] : kChatColumnWidths[index];
        splitter->setSizes(sizes);
    }
    QAction *action = name == QLatin1String("conversations") ? m_showConversations
                      : name == QLatin1String("sidePanel")   ? m_showSidePanel
                                                             : m_showPlots;
    if (action->isChecked() != shown)
        action->setChecked(shown);
    if (remember)
        m_appSettings->savePanelShown(name, shown);
}

void MainWindow::restoreLayout()
{
    if (const QByteArray columns = m_appSettings->loadSplitterState(QStringLiteral("chatColumns")); !columns.isEmpty())
        m_chatColumns->restoreState(columns);
    if (const QByteArray rows = m_appSettings->loadSplitterState(QStringLiteral("chatRows")); !rows.isEmpty())
        m_chatRows->restoreState(rows);
    for (const QString &name : {QStringLiteral("conversations"), QStringLiteral("sidePanel"), QStringLiteral("plots")})
        setPanelShown(name, m_appSettings->loadPanelShown(name), false);
    // A part dragged shut on its splitter handle counts as hidden.
    for (QSplitter *sp : {m_chatColumns, m_chatRows})
        connect(sp, &QSplitter::splitterMoved, this, [this] {
            const QList<int> c = m_chatColumns->sizes();
            m_showConversations->setChecked(m_sidebar->isVisible() && c.value(0) > 0);
            m_showSidePanel->setChecked(m_controlColumn->isVisible() && c.value(2) > 0);
            m_showPlots->setChecked(m_plots->isVisible() && m_chatRows->sizes().value(1) > 0);
        });
}

void MainWindow::saveLayout()
{
    m_appSettings->saveSplitterState(QStringLiteral("chatColumns"), m_chatColumns->saveState());
    m_appSettings->saveSplitterState(QStringLiteral("chatRows"), m_chatRows->saveState());
    m_appSettings->savePanelShown(QStringLiteral("conversations"), m_showConversations->isChecked());
    m_appSettings->savePanelShown(QStringLiteral("sidePanel"), m_showSidePanel->isChecked());
    m_appSettings->savePanelShown(QStringLiteral("plots"), m_showPlots->isChecked());
}

void MainWindow::showStatus(const QString &text, int timeoutMs)
{
    m_lastStatus = text;
    // The permanent labels on the right keep their room; the message gets the rest.
    int room = statusBar()->width() - 24;
    for (QLabel *l : {m_statusNotice, m_statusModel, m_statusContext, m_statusSpeed})
        if (l && l->isVisible())
            room -= l->sizeHint().width();
    const QString shown = statusBar()->fontMetrics().elidedText(text, Qt::ElideRight, std::max(120, room));
    statusBar()->setToolTip(shown == text ? QString() : text);
    statusBar()->showMessage(shown, timeoutMs);
}

QWidget *MainWindow::chatBusyBar() const { return m_chatBusy; }
QWidget *MainWindow::exploreBusyBar() const { return m_exploreBusy; }
QString MainWindow::chatBusyText() const { return m_chatBusy->isVisibleTo(m_chatBusy->parentWidget()) ? m_chatBusy->label()->text() : QString(); }
QString MainWindow::exploreBusyText() const { return m_exploreBusy->isVisibleTo(m_exploreBusy->parentWidget()) ? m_exploreBusy->label()->text() : QString(); }

void MainWindow::updateBusyBars()
{
    // Each tab says when the other one holds the engine: its jobs wait until it is done.
    QString chat;
    QString explore;
    switch (m_activity) {
    case Activity::Exploring:
        chat = tr("Explore is scoring a book (%1): the chat waits for the engine. Stop cancels the runs.")
                   .arg(m_explore->overallProgress()->text());
        break;
    case Activity::Chatting:
    case Activity::Continuing:
        explore = tr("The chat is writing a reply: runs wait for the engine. Stop ends the reply.");
        break;
    case Activity::Streaming:
        explore = tr("The chat is streaming a book into its context: runs wait for the engine. Stop ends it.");
        break;
    default:
        break;
    }
    m_chatBusy->say(chat);
    m_exploreBusy->say(explore);
}

// Once, at start, in the status bar: settings values that were not valid (and the defaults
// used), and settings, conversations or runs that cannot be saved. The whole list is the
// label's tooltip; stderr has each line too.
void MainWindow::showDataNotices()
{
    QStringList notes = m_appSettings->problems();
    const QString unwritable[] = {m_appSettings->unwritableReason(),
                                  unwritableDirectory(m_store->directory(), tr("Conversations")),
                                  unwritableDirectory(m_exploreStore->directory(), tr("Saved runs"))};
    for (const QString &why : unwritable) {
        if (!why.isEmpty()) {
            notes << why;
            qWarning("%s", qPrintable(why));
        }
    }
    if (notes.isEmpty())
        return;
    const QString text = notes.size() == 1 ? notes.first() : tr("%1 (and %2 more)").arg(notes.first()).arg(notes.size() - 1);
    m_statusNotice->setText(m_statusNotice->fontMetrics().elidedText(text, Qt::ElideMiddle, 320));
    m_statusNotice->setToolTip(notes.join(QLatin1Char('\n')));
    m_statusNotice->show();
}

void MainWindow::createStatusBar()
{
    m_statusModel = new QLabel(this);
    m_statusContext = new QLabel(this);
    m_statusSpeed = new QLabel(this);
    for (QLabel *l : {m_statusModel, m_statusContext, m_statusSpeed}) {
        l->setContentsMargins(8, 0, 8, 0);
        l->setSizePolicy(QSizePolicy::Minimum, QSizePolicy::Preferred); // never cut: messages give way
    }
    m_statusNotice = new QLabel(this);
    m_statusNotice->setObjectName(QStringLiteral("statusNotice"));
    m_statusNotice->setContentsMargins(8, 0, 8, 0);
    m_statusNotice->hide();
    statusBar()->addPermanentWidget(m_statusNotice);
    statusBar()->addPermanentWidget(m_statusModel);
    statusBar()->addPermanentWidget(m_statusContext);
    statusBar()->addPermanentWidget(m_statusSpeed);
    m_statusSpeed->setToolTip(tr("Decode picks how many of its threads to use from its own step times: fewer "
                                 "when they are faster, as beside another busy program."));
    m_statusTimer = new QTimer(this);
    m_statusTimer->setInterval(kStatusRefreshMs);
    connect(m_statusTimer, &QTimer::timeout, this, [this] {
        if (m_statusDirty)
            refreshStatus();
        if (m_activity == Activity::Exploring)
            updateBusyBars(); // the time left
    });
    m_statusTimer->start();
}

void MainWindow::connectWorker()
{
    EngineWorker *w = m_worker;
    m_models->setWorker(w);
    connect(m_models, &ModelController::loadStarted, this, &MainWindow::onLoadStarted);
    connect(m_models, &ModelController::loadProgress, this, &MainWindow::onLoadProgress);
    connect(m_models, &ModelController::loaded, this, &MainWindow::onModelLoaded);
    connect(m_models, &ModelController::loadFailed, this, &MainWindow::onLoadFailed);
    connect(m_books, &BookController::progress, m_bookPanel, &BookPanel::setProgress);
    connect(m_books, &BookController::finished, this, &MainWindow::onStreamFinished);
    connect(m_models, &ModelController::backendChanged, this, &MainWindow::showBackend);
    // Both workers report to the window; only the active one's reports count.
    for (InferenceWorker *worker : std::initializer_list<InferenceWorker *>{w, m_remote}) {
        connect(worker, &InferenceWorker::stepMetrics, this, [this, worker](const StepMetrics &m) {
            if (worker == m_active)
                onStepMetrics(m);
        });
        connect(worker, &InferenceWorker::settingsApplied, this,
                [this, worker](qint64 step, int position, const longscope::Settings &settings) {
                    if (worker == m_active)
                        onSettingsApplied(step, position, settings);
                });
    }
    connect(w, &InferenceWorker::errorOccurred, this, [this, w](const QString &message) {
        if (w == m_active)
            onWorkerError(message);
    });
    setActiveWorker(w);
}

void MainWindow::setActiveWorker(InferenceWorker *worker)
{
    m_active = worker;
    m_chat->setWorker(worker);
    m_books->setWorker(worker);
    m_explore->setWorker(worker);
}

void MainWindow::connectExplore()
{
    connect(m_explore, &ExploreView::runningChanged, this, &MainWindow::onExploreRunningChanged);
    connect(m_explore, &ExploreView::openBookRequested, this, &MainWindow::onExploreOpenBookRequested);
    connect(m_explore, &ExploreView::deleteRunRequested, this, &MainWindow::onExploreDeleteRequested);
    connect(m_explore, &ExploreView::statusMessage, this, [this](const QString &text) { showStatus(text, 6000); });
    connect(m_tabs, &QTabWidget::currentChanged, this, &MainWindow::onTabChanged);
}

void MainWindow::rebuildRecentMenu()
{
    m_recentMenu->clear();
    const QStringList recent = m_appSettings->loadRecentModels();
    for (const QString &path : recent) {
        QAction *a = m_recentMenu->addAction(QFileInfo(path).fileName(), this, [this, path] { loadModel(path); });
        a->setToolTip(path);
        a->setStatusTip(path);
    }
    const QString bundled = bundledModelPath();
    if (!bundled.isEmpty() && !recent.contains(bundled)) {
        if (!recent.isEmpty())
            m_recentMenu->addSeparator();
        m_recentMenu->addAction(tr("Bundled stories260K"), this, [this, bundled] { loadModel(bundled); });
    }
    m_recentMenu->setEnabled(!m_recentMenu->isEmpty());
}

// ---------------------------------------------------------------------------------------
// State

int MainWindow::contextLimit() const
{
    if (isRemote())
        return m_remoteModel.context_length; // the server's, fixed when it started (0: it does not say)
    const int requested = m_longContext->settings().context_limit;
    if (requested > 0)
        return requested;
    return m_models->isLoaded() ? defaultContextLimit(m_models->summary().n_ctx_train) : 0;
}

void MainWindow::setActivity(Activity activity)
{
    if (m_activity == activity)
        return;
    m_activity = activity;
    QWidget *focused = QApplication::focusWidget();
    updateActions();
    updateBusyBars();
    // A button that started the job and is disabled now would hand the focus to the next
    // field (a number box, its value selected): the input takes it instead.
    if (focused && !focused->isEnabled() && isAncestorOf(focused))
        m_chatPanel->chatInput()->setFocus(Qt::OtherFocusReason);
    emit activityChanged(activity);
}

void MainWindow::updateActions()
{
    const bool idle = m_activity == Activity::Idle;
    // Stop also cancels Explore's runs: the chat's Stop works on whatever holds the engine.
    const bool running = m_activity == Activity::Chatting || m_activity == Activity::Continuing ||
                         m_activity == Activity::Streaming || m_activity == Activity::Exploring;
    const bool hasUser = m_chat->hasUserMessage();
    const bool ready = engineReady();
    m_chatPanel->setActionsEnabled(ready && idle, running, ready && idle && hasUser, idle);
    m_bookPanel->setActionsEnabled(ready && idle);
    m_openModelAction->setEnabled(m_activity != Activity::Loading);
    m_openModelDirAction->setEnabled(m_activity != Activity::Loading);
    m_recentMenu->setEnabled(m_activity != Activity::Loading);
    m_openBookAction->setEnabled(m_activity != Activity::Streaming);
    m_sidebar->setEnabled(idle || m_activity == Activity::Loading);
    m_explore->setEngineAvailable(ready && (idle || m_activity == Activity::Exploring));
    if (m_stopAction) {
        m_stopAction->setEnabled(running);
        m_regenerateAction->setEnabled(ready && idle && hasUser);
    }
    if (!m_connectAction)
        return;
    m_connectAction->setEnabled(idle);
    m_serversMenu->setEnabled(idle && !m_serversMenu->isEmpty());
    m_useLocalAction->setEnabled(idle && isRemote());
    m_useLocalAction->setText(m_models->isLoaded() ? tr("Use the &Local Model (%1)").arg(m_models->summary().name)
                                                   : tr("Use the &Local Model"));
    if (m_chatTemplateAction)
        m_chatTemplateAction->setEnabled(!isRemote()); // the server renders with its own template
}

void MainWindow::refreshStatus()
{
    m_statusDirty = false;
    if (isRemote()) {
        m_statusModel->setText(tr("Server: <b>%1</b>").arg(remoteName().toHtmlEscaped()));
        m_statusModel->setToolTip(m_endpoint->base_url);
    } else if (m_models->isLoaded()) {
        m_statusModel->setText(tr("Model: <b>%1</b>").arg(m_models->summary().name.toHtmlEscaped()));
        m_statusModel->setToolTip(m_models->summary().path);
    } else {
        m_statusModel->setText(m_activity == Activity::Loading ? tr("Loading model…") : tr("No model"));
    }
    const int limit = contextLimit();
    m_generation->setFreeContext(limit > 0 ? std::max(0, limit - m_stats.contextUsed()) : -1);
    if (limit > 0) {
        const int used = m_stats.contextUsed();
        const double pct = 100.0 * used / limit;
        m_statusContext->setText(tr("Context %L1 / %L2 tokens (%3%)").arg(used).arg(limit).arg(pct, 0, 'f', 0));
    } else {
        m_statusContext->setText(tr("Context —"));
    }
    QStringList speed;
    const double decode = m_stats.decodeRate();
    const double prefill = m_stats.prefillRate();
    if (decode > 0) {
        const int threads = m_stats.decodeThreads();
        const QString rate = QLocale().toString(decode, 'f', decode < 100 ? 1 : 0);
        speed << (threads == 1  ? tr("decode %1 tok/s on 1 thread").arg(rate)
                  : threads > 1 ? tr("decode %1 tok/s on %2 threads").arg(rate).arg(threads)
                                : tr("decode %1 tok/s").arg(rate));
    }
    if (prefill > 0)
        speed << tr("prefill %L1 tok/s").arg(prefill, 0, 'f', prefill < 100 ? 1 : 0);
    m_statusSpeed->setText(speed.isEmpty() ? tr("— tok/s") : speed.join(QStringLiteral(" · ")));
    m_longContext->setEffectiveAlpha(m_stats.ntkAlpha());
}

void MainWindow::resetContextState()
{
    m_stats.clearContext();
    if (m_bookPanel)
        m_bookPanel->resetContext();
    updateBookFit();
    m_statusDirty = true;
    emit contextReset();
}

void MainWindow::newConversation()
{
    m_chat->newConversation();
    resetContextState();
    m_plots->resetForContext();
    m_sidebar->setCurrentId(QString());
    setWindowTitle(tr("Longscope"));
    updateActions();
    if (m_statusContext)
        refreshStatus();
}

void MainWindow::saveConversation()
{
    m_chat->save();
}

// ---------------------------------------------------------------------------------------
// Models

void MainWindow::loadModel(const QString &path)
{
    if (path.isEmpty() || m_shutDown)
        return;
    if (isRemote()) {
        if (m_activity != Activity::Idle) {
            showStatus(tr("The server is still answering: press Stop (Esc), then open the model"), 5000);
            return;
        }
        useLocalModel();
    }
    if (m_activity == Activity::Exploring)
        m_explore->cancel();
    else if (m_activity == Activity::Chatting || m_activity == Activity::Continuing || m_activity == Activity::Streaming)
        m_worker->requestStop(); // the load runs once the worker is free
    m_models->load(path);
}

void MainWindow::closeLoadDialog()
{
    // Deleted now, not later: a dialog left for deleteLater would still be there during the
    // error box's own event loop, where its show timer puts it back on top, modal.
    if (m_loadDialog) {
        QProgressDialog *dialog = m_loadDialog;
        m_loadDialog = nullptr;
        dialog->disconnect(this);
        dialog->disconnect(m_models);
        dialog->hide();
        // A window-modal dialog's setValue() runs the event loop, where the load can end: the
        // dialog is then still inside setValue() and reads itself on return, so it goes later.
        if (m_inLoadDialogSetValue)
            dialog->deleteLater();
        else
            delete dialog;
    }
}

void MainWindow::onLoadStarted(const QString &path)
{
    setActivity(Activity::Loading);
    showStatus(tr("Loading %1…").arg(QFileInfo(path).fileName()));
    closeLoadDialog();
    auto *dialog = new QProgressDialog(tr("Loading %1…").arg(QFileInfo(path).fileName()), tr("Cancel"), 0, 100, this);
    dialog->setWindowTitle(tr("Opening model"));
    dialog->setWindowModality(Qt::WindowModal);
    dialog->setMinimumDuration(400);
    dialog->setAutoClose(false);
    dialog->setAutoReset(false);
    dialog->setValue(0);
    connect(dialog, &QProgressDialog::canceled, m_models, &ModelController::cancel);
    m_loadDialog = dialog;
    m_statusDirty = true;
}

void MainWindow::onLoadProgress(double fraction)
{
    if (m_loadDialog) {
        const QScopedValueRollback<bool> inSetValue(m_inLoadDialogSetValue, true);
        m_loadDialog->setValue(std::clamp(int(fraction * 100.0), 0, 100));
    }
}

void MainWindow::onModelLoaded(const ModelSummary &summary)
{
    closeLoadDialog();
    m_stats.reset();
    resetContextState(); // the worker's new session starts empty
    m_plots->setModel(summary.name); // fresh curves for the new model
    m_appliedSettings = m_longContext->settings();
    m_longContext->setTrainedContext(summary.n_ctx_train);
    m_explore->setModel(summary.name, summary.n_ctx_train);
    showBackend(summary);
    m_longContext->setModelScaling(ropeScalingInUse(summary, longscope::Settings{}),
                                   !summary.hparams.rope.long_factors.empty());
    updateModelHeader();
    showStatus(tr("Loaded %1 (%2)").arg(summary.name, summary.format), 5000);
    setActivity(Activity::Idle);
    updateActions();
    updateBookFit();
    refreshStatus();
    emit modelReady(summary.name);
}

void MainWindow::updateModelHeader()
{
    if (isRemote())
        return; // the banner names the server and its model (connectToEndpoint)
    const ModelSummary none;
    const ModelSummary &summary = m_models->isLoaded() ? m_models->summary() : none;
    const longscope::Settings settings = m_longContext->settings();
    m_bannerModel->setText(modelHeaderHtml(summary, settings));
    m_bannerModel->setToolTip(summary.path);
    if (m_modelInfo)
        m_modelInfo->setModel(summary, settings);
}

ModelInfoDialog *MainWindow::modelInfoDialog() const { return m_modelInfo; }

QString MainWindow::modelHeaderText() const
{
    QTextDocument doc;
    doc.setHtml(m_bannerModel->text());
    return doc.toPlainText();
}

void MainWindow::showModelInfo()
{
    if (!m_modelInfo) {
        m_modelInfo = new ModelInfoDialog(this);
        m_modelInfo->setAttribute(Qt::WA_DeleteOnClose);
    }
    updateModelHeader();
    m_modelInfo->show();
    m_modelInfo->raise();
    m_modelInfo->activateWindow();
}

void MainWindow::onLoadFailed(const QString &path, const QString &message)
{
    closeLoadDialog();
    setActivity(Activity::Idle);
    refreshStatus(); // not "Loading…" any more
    if (m_models->wasCancelled()) {
        showStatus(tr("Loading %1 was cancelled").arg(QFileInfo(path).fileName()), 5000);
        emit modelLoadFailed(message);
        return;
    }
    const QString still = m_models->isLoaded() ? tr("%1 is still loaded.").arg(m_models->summary().name)
                                        : tr("No model is loaded: open one with File > Open Model….");
    showStatus(tr("Could not open %1: %2").arg(QFileInfo(path).fileName(), message), 10000);
    showError(tr("Cannot open the model"),
              tr("Longscope could not open\n%1\n\n%2\n\n%3").arg(QDir::toNativeSeparators(path), message, still));
    emit modelLoadFailed(message);
    // A last model that has gone bad: fall back to the bundled one rather than nothing.
    if (const QString fallback = m_models->fallbackFor(path); !fallback.isEmpty())
        loadModel(fallback);
}

// ---------------------------------------------------------------------------------------
// Remote servers

QString MainWindow::remoteName() const
{
    if (!m_endpoint)
        return {};
    const QUrl url(m_endpoint->base_url);
    const QString where = url.port() > 0 ? QStringLiteral("%1:%2").arg(url.host()).arg(url.port()) : url.host();
    return tr("%1 @ %2").arg(m_endpoint->model, where);
}

void MainWindow::connectRemote()
{
    connect(m_remote, &InferenceWorker::errorOccurred, this, [this](const QString &message) {
        if (m_active == m_remote)
            onWorkerError(message);
    });
    connect(m_remote, &RemoteWorker::serverMetrics, this, &MainWindow::onRemoteServerMetrics);
    connect(m_remote, &InferenceWorker::tokenStreamed, this, [this] { ++m_remoteStreamed; });
    connect(m_remote, &RemoteWorker::metricsUnavailable, this, [this](const QString &reason) {
        if (m_metricsMissingSaid || !isRemote())
            return;
        m_metricsMissingSaid = true; // said once per server: the polls go on quietly
        m_remote->setPollInterval(0);
        showStatus(tr("No server metrics on the plots: %1. The client's own figures are plotted.").arg(reason), 10000);
    });
}

std::optional<RemoteEndpoint> MainWindow::askEndpoint()
{
    RemoteEndpointDialog dialog(*m_secrets, this);
    if (m_endpoint)
        dialog.setEndpoint(*m_endpoint);
    if (dialog.exec() != QDialog::Accepted)
        return std::nullopt;
    return dialog.endpoint();
}

void MainWindow::showConnectDialog()
{
    if (const std::optional<RemoteEndpoint> endpoint = askEndpoint())
        connectToServer(*endpoint);
}

void MainWindow::rebuildServersMenu()
{
    m_serversMenu->clear();
    for (const RemoteEndpoint &e : m_appSettings->loadRemoteEndpoints()) {
        QAction *a = m_serversMenu->addAction(tr("%1 at %2").arg(e.model, e.base_url), this,
                                              [this, e] { connectToServer(e); });
        a->setStatusTip(tr("Connect to %1 (its key, if any, is read from the keychain)").arg(e.base_url));
    }
    m_serversMenu->setEnabled(!m_serversMenu->isEmpty() && m_activity == Activity::Idle);
}

void MainWindow::connectToServer(const RemoteEndpoint &endpoint)
{
    if (m_shutDown)
        return;
    if (m_activity != Activity::Idle) {
        failRemote(tr("the engine is busy: press Stop (Esc) or wait, then connect"));
        return;
    }
    m_connecting = endpoint;
    showStatus(tr("Connecting to %1…").arg(endpoint.base_url));
    const QPointer<MainWindow> self(this);
    m_secrets->read(endpoint.base_url, [self, endpoint](const QString &key, const QString &error) {
        if (!self || !self->m_connecting || self->m_connecting->base_url != endpoint.base_url)
            return;
        if (!error.isEmpty())
            self->showStatus(tr("The API key could not be read (%1): connecting without one").arg(error), 6000);
        // A worker of its own lists the models, so that the server in use stays if this fails.
        auto *probe = new RemoteWorker(self);
        QObject::connect(probe, &RemoteWorker::modelsListed, self,
                         [self, probe, endpoint, key](const QVector<RemoteModelInfo> &models) {
                             probe->deleteLater();
                             self->activateRemote(endpoint, key, models);
                         });
        QObject::connect(probe, &InferenceWorker::errorOccurred, self, [self, probe](const QString &message) {
            probe->deleteLater();
            self->failRemote(message);
        });
        probe->setEndpoint(endpoint.base_url, key, endpoint.model);
        if (self->m_connecting) // a bad URL has failed already
            probe->listModels();
    });
}

void MainWindow::failRemote(const QString &message)
{
    const QString where = m_connecting ? m_connecting->base_url : QString();
    m_connecting.reset();
    const QString still = isRemote()              ? tr("%1 is still in use.").arg(remoteName())
                          : m_models->isLoaded() ? tr("%1 is still loaded.").arg(m_models->summary().name)
                                                 : tr("No model is loaded.");
    showStatus(tr("Could not connect: %1").arg(message), 10000);
    showError(tr("Cannot connect to the server"),
              where.isEmpty() ? tr("%1\n\n%2").arg(message, still) : tr("%1\n\n%2\n\n%3").arg(where, message, still));
    emit remoteFailed(message);
}

void MainWindow::activateRemote(const RemoteEndpoint &endpoint, const QString &key, const QVector<RemoteModelInfo> &models)
{
    if (!m_connecting)
        return;
    const auto it = std::find_if(models.begin(), models.end(), [&](const RemoteModelInfo &m) { return m.id == endpoint.model; });
    if (it == models.end()) {
        QStringList served;
        for (const RemoteModelInfo &m : models)
            served << m.id;
        failRemote(tr("the server has no model '%1' (it serves: %2)")
                       .arg(endpoint.model, served.isEmpty() ? tr("none") : served.join(QStringLiteral(", "))));
        return;
    }
    m_connecting.reset();
    m_endpoint = endpoint;
    m_remoteModel = *it;
    m_metricsMissingSaid = false;
    m_remote->setEndpoint(endpoint.base_url, key, endpoint.model);
    m_remote->setModelInfo(*it);
    m_remote->setSettings(m_longContext->settings());
    m_appSettings->addRemoteEndpoint(endpoint);
    rebuildServersMenu();
    m_worker->queueResetContext(); // the local context is not the conversation's any more
    setActiveWorker(m_remote);
    const RemoteCapabilities caps = m_remote->capabilities();
    m_longContext->setRemote(true, caps.per_request_settings, caps.reason);
    if (it->context_length > 0)
        m_longContext->setTrainedContext(it->context_length);
    m_stats.reset();
    resetContextState();
    m_plots->setModel(remoteName());
    m_explore->setModel(remoteName(), it->context_length);
    m_bannerModel->setText(tr("<b>%1</b><br><span style='color:gray'>remote · %2%3%4</span>")
                               .arg(endpoint.model.toHtmlEscaped(), endpoint.base_url.toHtmlEscaped(),
                                    it->context_length > 0 ? tr(" · %L1-token context").arg(it->context_length) : QString(),
                                    it->architecture.isEmpty() ? QString() : tr(" · %1").arg(it->architecture.toHtmlEscaped())));
    m_bannerModel->setToolTip(endpoint.base_url);
    m_remote->setPollInterval(kMetricsPollMs);
    m_remote->pollMetrics();
    showStatus(tr("Connected to %1: the chat, books and Explore's perplexity go to the server").arg(remoteName()), 6000);
    updateActions();
    updateBookFit();
    refreshStatus();
    emit remoteConnected(remoteName());
}

void MainWindow::useLocalModel()
{
    if (!isRemote())
        return;
    if (m_activity != Activity::Idle) {
        showStatus(tr("The server is still answering: press Stop (Esc) first"), 4000);
        return;
    }
    m_remote->setPollInterval(0);
    m_remote->queueResetContext();
    m_endpoint.reset();
    setActiveWorker(m_worker);
    m_worker->queueResetContext();
    m_longContext->setRemote(false);
    m_stats.reset();
    resetContextState();
    if (m_models->isLoaded()) {
        const ModelSummary &summary = m_models->summary();
        m_longContext->setTrainedContext(summary.n_ctx_train);
        m_plots->setModel(summary.name);
        m_explore->setModel(summary.name, summary.n_ctx_train);
        updateModelHeader();
        showStatus(tr("Back to %1 (local)").arg(summary.name), 4000);
    } else {
        m_bannerModel->setText(tr("No model: File > Open Model…"));
        m_bannerModel->setToolTip(QString());
    }
    updateActions();
    updateBookFit();
    refreshStatus();
}

void MainWindow::onRemoteServerMetrics(const RemoteServerMetrics &metrics)
{
    if (!isRemote())
        return;
    const remote::ServerMetrics &m = metrics.metrics;
    ServerSample sample;
    // Where the conversation is now: the context before this reply and what streamed since.
    sample.position = m_stats.contextUsed() + m_remoteStreamed;
    sample.seconds = metrics.seconds_since_start;
    sample.kv_usage = m.kv_usage.value_or(std::nan(""));
    sample.requests_running = m.requests_running.value_or(std::nan(""));
    sample.requests_waiting = m.requests_waiting.value_or(std::nan(""));
    sample.generation_tokens_per_second = metrics.generation_tokens_per_second.value_or(std::nan(""));
    m_plots->addServerSample(sample, QString::fromStdString(m.engine));
}

// ---------------------------------------------------------------------------------------
// Chat

void MainWindow::sendMessage(const QString &text)
{
    m_chatPanel->chatInput()->setPlainText(text);
    send();
}

void MainWindow::send()
{
    const QString text = m_chatPanel->chatInput()->toPlainText().trimmed();
    if (text.isEmpty())
        return;
    if (!engineReady()) {
        showStatus(tr("No model is loaded yet"), 4000);
        return;
    }
    if (m_activity == Activity::Exploring) {
        showStatus(tr("Explore is using the engine (%1): press Stop (Esc) to cancel its runs, or wait")
                       .arg(m_explore->overallProgress()->text()),
                   6000);
        return;
    }
    if (m_activity != Activity::Idle) {
        showStatus(tr("Wait for the model, or press Stop (Esc)"), 3000);
        return;
    }
    m_chatPanel->chatInput()->clear();
    m_appSettings->saveSystemPrompt(m_chatPanel->systemPrompt());
    m_chat->send(text);
}

void MainWindow::onReplyStarted(ChatController::State state)
{
    m_remoteStreamed = 0;
    m_stats.startReply();
    setActivity(state == ChatController::State::Continuing ? Activity::Continuing : Activity::Chatting);
    if (state == ChatController::State::Chatting)
        showStatus(tr("Generating…"));
}

void MainWindow::stop()
{
    if (m_activity == Activity::Exploring) {
        m_explore->cancel();
        return;
    }
    if (m_active && m_activity != Activity::Idle && m_activity != Activity::Loading) {
        m_active->requestStop();
        showStatus(tr("Stopping…"), 2000);
    }
}

void MainWindow::regenerate()
{
    if (!engineReady() || m_activity != Activity::Idle)
        return;
    m_chat->regenerate();
}

void MainWindow::clearConversation()
{
    if (m_activity != Activity::Idle && m_activity != Activity::Loading) {
        showStatus(tr("Stop the generation first"), 3000);
        return;
    }
    saveConversation();
    newConversation();
    showStatus(tr("New conversation"), 3000);
}

void MainWindow::openConversation(const QString &id)
{
    if (m_activity != Activity::Idle && m_activity != Activity::Loading) {
        showStatus(tr("Stop the generation first"), 3000);
        return;
    }
    if (id == m_chat->conversation().id())
        return;
    QString error;
    if (!m_chat->open(id, &error)) {
        showError(tr("Cannot open the conversation"), error);
        return;
    }
    m_chatPanel->setSystemPrompt(m_chat->conversation().systemPrompt());
    resetContextState();
    m_plots->restoreHistory(m_chat->conversation().plotHistory()); // its own plots, not the last ones
    m_sidebar->setCurrentId(id);
    setWindowTitle(tr("%1 — Longscope").arg(m_chat->conversation().title()));
    updateActions();
    m_statusDirty = true;
}

bool MainWindow::deleteConversation(const QString &id, bool confirm)
{
    QString title = id;
    const int row = m_conversationList->rowOf(id);
    if (row >= 0)
        title = m_conversationList->infoAt(row).title;
    if (confirm && !askConfirmation(tr("Delete conversation"),
                                    tr("Delete “%1”? This cannot be undone.").arg(title)))
        return false;
    QString error;
    if (!m_store->remove(id, &error)) {
        showError(tr("Cannot delete the conversation"), error);
        return false;
    }
    if (id == m_chat->conversation().id() && m_activity == Activity::Idle)
        newConversation();
    else
        m_chat->detachFrom(id); // a reply still streaming saves under a new id
    showStatus(tr("Deleted “%1”").arg(title), 4000);
    return true;
}

void MainWindow::onDeleteRequested(const QString &id)
{
    deleteConversation(id, true);
}

void MainWindow::onReplyFinished(const GenerationSummary &summary)
{
    m_remoteStreamed = 0; // counted in the context now
    m_stats.addReply(summary);
    setActivity(Activity::Idle);
    refreshStatus();
    emit replyFinished();
}

void MainWindow::onWorkerError(const QString &message)
{
    if (m_activity == Activity::Loading)
        return; // loadFailed reports it
    showStatus(tr("Error: %1").arg(message), 10000);
    if (m_activity == Activity::Exploring)
        return; // the Explore tab shows it with the run that failed
    m_chat->addErrorNote(message);
}

// ---------------------------------------------------------------------------------------
// Metrics and live settings

void MainWindow::onStepMetrics(const StepMetrics &metrics)
{
    m_plots->addMetrics(metrics);
    m_stats.addStep(metrics);
    m_statusDirty = true;
}

void MainWindow::onLongContextChanged(const longscope::Settings &settings)
{
    if (m_worker)
        m_worker->setSettings(settings); // thread-safe: reaches a running generation
    m_remote->setSettings(settings);     // sent with the next request where the server takes it
    m_explore->setCurrentSettings(settings);
    m_appSettings->saveEngineSettings(settings);
    // A server that fixes the switches when it starts takes none of them: nothing is pending.
    if (!isRemote() || m_remote->capabilities().per_request_settings)
        m_longContext->setPending();
    updateModelHeader();
    updateBookFit();
    m_statusDirty = true;
}

void MainWindow::onGenerationParamsChanged(const GenerationParams &params)
{
    m_appSettings->saveGenerationParams(params);
}

void MainWindow::showBackend(const longscope::ui::ModelSummary &summary)
{
    const QString backend =
        summary.cpu_warning.isEmpty() ? summary.backend : tr("%1 · %2").arg(summary.backend, summary.cpu_warning);
    m_longContext->setBackend(backend, summary.gpu_status, summary.cuda_available);
    // The panel shows the backend the session runs on (after a fallback: the CPU).
    if (summary.backend.startsWith(QLatin1String("CPU")) &&
        m_longContext->settings().backend == longscope::ComputeBackend::Cuda) {
        longscope::Settings s = m_longContext->settings();
        s.backend = longscope::ComputeBackend::Cpu;
        m_longContext->setSettings(s);
        m_appliedSettings.backend = longscope::ComputeBackend::Cpu;
    }
}

void MainWindow::onSettingsApplied(qint64 step, int position, const longscope::Settings &settings)
{
    const QString change = describeChange(m_appliedSettings, settings);
    m_appliedSettings = settings;
    m_plots->addMarker(position, change);
    m_longContext->setApplied(position);
    showStatus(tr("Settings applied at token %L1 (step %L2): %3").arg(position).arg(step).arg(change), 8000);
    m_statusDirty = true;
}

QString MainWindow::describeChange(const longscope::Settings &a, const longscope::Settings &b) const
{
    QStringList parts;
    if (a.rope.ntk_auto != b.rope.ntk_auto || (!b.rope.ntk_auto && a.rope.ntk_alpha != b.rope.ntk_alpha))
        parts << (b.rope.ntk_auto ? tr("α auto") : tr("α %1").arg(double(b.rope.ntk_alpha), 0, 'g', 3));
    if (a.rope.scaling != b.rope.scaling || a.rope.scaling_factor != b.rope.scaling_factor ||
        a.rope.scaling_orig_ctx != b.rope.scaling_orig_ctx)
        parts << (b.rope.scaling ? ropeScalingText(b) : tr("RoPE the model's own"));
    if (a.rope.store_kv_before_rope != b.rope.store_kv_before_rope)
        parts << tr("pre-RoPE keys %1").arg(onOff(b.rope.store_kv_before_rope));
    if (a.attention.memory_efficient != b.attention.memory_efficient)
        parts << tr("mem-eff %1").arg(onOff(b.attention.memory_efficient));
    if (a.attention.causal_flash != b.attention.causal_flash)
        parts << tr("causal flash %1").arg(onOff(b.attention.causal_flash));
    if (a.kv_mode != b.kv_mode)
        parts << tr("KV %1").arg(qs(to_string(b.kv_mode)));
    if (a.kv_type_k != b.kv_type_k)
        parts << tr("keys %1").arg(qs(to_string(b.kv_type_k)));
    if (a.kv_type_v != b.kv_type_v)
        parts << tr("values %1").arg(qs(to_string(b.kv_type_v)));
    if (a.backend != b.backend)
        parts << (b.backend == longscope::ComputeBackend::Cuda ? tr("on CUDA") : tr("on the CPU"));
    if (a.context_limit != b.context_limit)
        parts << (b.context_limit > 0 ? tr("limit %L1").arg(b.context_limit) : tr("limit default"));
    if (a.overflow != b.overflow)
        parts << tr("overflow %1").arg(overflowText(b.overflow));
    return parts.isEmpty() ? tr("settings") : parts.join(QStringLiteral(", "));
}

// ---------------------------------------------------------------------------------------
// Books

bool MainWindow::openBook(const QString &path)
{
    QString error;
    const std::optional<Book> book = loadBook(path, &error);
    if (!book) {
        showError(tr("Cannot open the book"),
                  error.isEmpty() ? tr("%1 could not be read.").arg(QDir::toNativeSeparators(path)) : error);
        return false;
    }
    m_bookPanel->setBook(*book);
    m_bookPanel->show();
    if (!m_explore->isRunning())
        m_explore->setBook(*book); // the Explore tab scores the open book too
    updateBookFit();
    updateActions();
    showStatus(tr("Opened “%1”: press Stream into context").arg(m_bookPanel->book().title), 6000);
    return true;
}

void MainWindow::updateBookFit()
{
    if (!m_bookPanel || !m_bookPanel->hasBook())
        return;
    // Tiny vocabularies (stories260K has 512 tokens) spend far fewer characters per token.
    const double charsPerToken =
        !isRemote() && m_models->summary().n_vocab > 0 && m_models->summary().n_vocab < 4096 ? 1.8 : 4.0;
    m_bookPanel->setContext(engineReady() ? contextLimit() : 0, m_stats.contextUsed(), charsPerToken);
}

void MainWindow::streamBook()
{
    if (!engineReady() || m_activity != Activity::Idle || !m_bookPanel->hasBook())
        return;
    const Book &book = m_bookPanel->book();
    const int room = std::max(0, contextLimit() - m_stats.contextUsed());
    // The overflow policy decides, and the conversation says so; the policy is not changed.
    if (BookController::mayNotFit(book.text, room) && room > 0) {
        if (m_longContext->settings().overflow == OverflowPolicy::Error)
            m_chat->addNote(tr("“%1” (about %L2 tokens) may not fit in the %L3 free tokens of the context, and the "
                               "overflow policy is “error”: it is refused if it does not fit. Raise the context limit, "
                               "or choose another policy to keep its head and tail.")
                                .arg(book.title)
                                .arg(m_bookPanel->estimatedTokens())
                                .arg(room));
        else
            m_chat->addNote(tr("“%1” (about %L2 tokens) does not fit in the %L3 free tokens of the context: its head "
                               "and tail are streamed and the middle is left out (overflow policy “%4”). Raise the "
                               "context limit to stream more.")
                                .arg(book.title)
                                .arg(m_bookPanel->estimatedTokens())
                                .arg(room)
                                .arg(overflowText(m_longContext->settings().overflow)));
    }
    setActivity(Activity::Streaming);
    m_bookPanel->setStreaming(true);
    showStatus(tr("Streaming “%1” into the context…").arg(book.title));
    m_books->stream(book.text, room);
}

void MainWindow::onStreamFinished(bool stopped, int tokensInContext)
{
    m_stats.setContextUsed(tokensInContext);
    const int streamed = m_books->tokensDone();
    const bool truncated = m_books->wasTruncated();
    if (m_books->textTokens() >= 0)
        m_bookPanel->setTextTokens(m_books->textTokens()); // counted by the tokenizer now
    m_bookPanel->setStreaming(false);
    m_bookPanel->setStreamed(streamed, tokensInContext, stopped, truncated);
    if (streamed > 0)
        m_chat->addNote(tr("%1 %L2 tokens of “%3”%4; the context holds %L5 tokens. Ask about it, or press Continue to let "
                   "the model write on.")
                    .arg(stopped ? tr("Stopped after") : tr("Streamed"))
                    .arg(streamed)
                    .arg(m_bookPanel->book().title)
                    .arg(truncated ? tr(" (head and tail)") : QString())
                    .arg(tokensInContext));
    showStatus(stopped ? tr("Book streaming stopped") : tr("Book streamed"), 5000);
    setActivity(Activity::Idle);
    m_chatPanel->chatInput()->setFocus(Qt::OtherFocusReason); // ask about it
    updateBookFit();
    refreshStatus();
    emit bookStreamFinished(stopped, tokensInContext);
}

void MainWindow::continueText()
{
    if (!engineReady() || m_activity != Activity::Idle)
        return;
    if (m_stats.contextUsed() <= 0) {
        showStatus(tr("The context is empty: stream a book first"), 4000);
        return;
    }
    m_chat->continueText();
}

// ---------------------------------------------------------------------------------------
// Explore

bool MainWindow::openExploreBook(const QString &path)
{
    if (m_explore->isRunning()) {
        showStatus(tr("Cancel the runs first"), 3000);
        return false;
    }
    QString error;
    const std::optional<Book> book = loadBook(path, &error);
    if (!book) {
        showError(tr("Cannot open the book"),
                  error.isEmpty() ? tr("%1 could not be read.").arg(QDir::toNativeSeparators(path)) : error);
        return false;
    }
    m_explore->setBook(*book);
    showExplore();
    return true;
}

void MainWindow::showChat() { m_tabs->setCurrentIndex(0); }

void MainWindow::showExplore() { m_tabs->setCurrentIndex(1); }

void MainWindow::onTabChanged(int index)
{
    // Nothing hides or shows with the tab (the tab bar stays where it is); the chat page keeps
    // its conversations column.
    if (index == 0 && m_activity == Activity::Idle)
        m_chatPanel->chatInput()->setFocus(Qt::OtherFocusReason);
}

void MainWindow::onExploreRunningChanged(bool running)
{
    if (running)
        setActivity(Activity::Exploring);
    else if (m_activity == Activity::Exploring)
        setActivity(Activity::Idle);
    m_statusDirty = true;
}

void MainWindow::onExploreOpenBookRequested()
{
    const QString path = chooseOpenFile(tr("Open a Book to Explore"), tr("Text files (*.txt);;All files (*)"));
    if (!path.isEmpty())
        openExploreBook(path);
}

void MainWindow::onExploreDeleteRequested(const QString &id)
{
    if (!askConfirmation(tr("Delete run"), tr("Delete this saved run? This cannot be undone.")))
        return;
    QString error;
    if (!m_explore->deleteRun(id, &error) && !error.isEmpty())
        showError(tr("Cannot delete the run"), error);
}

// ---------------------------------------------------------------------------------------
// Dialogs (virtual, so tests can answer them)

void MainWindow::showError(const QString &title, const QString &text)
{
    if (!m_interactive) {
        std::fprintf(stderr, "longscope: %s: %s\n", qPrintable(title), qPrintable(QString(text).replace(QLatin1Char('\n'), QLatin1Char(' '))));
        return;
    }
    QMessageBox::warning(this, title, text);
}

bool MainWindow::askConfirmation(const QString &title, const QString &text)
{
    if (!m_interactive)
        return true;
    return QMessageBox::question(this, title, text, QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel) ==
           QMessageBox::Yes;
}

QString MainWindow::chooseOpenFile(const QString &caption, const QString &filter)
{
    return QFileDialog::getOpenFileName(this, caption, QString(), filter);
}

QString MainWindow::chooseDirectory(const QString &caption)
{
    return QFileDialog::getExistingDirectory(this, caption);
}

QString MainWindow::chooseSaveFile(const QString &caption, const QString &suggestedName, const QString &filter)
{
    return QFileDialog::getSaveFileName(this, caption, suggestedName, filter);
}

// ---------------------------------------------------------------------------------------
// Drops, closing

void MainWindow::dragEnterEvent(QDragEnterEvent *event)
{
    if (event->mimeData()->hasUrls()) {
        for (const QUrl &url : event->mimeData()->urls()) {
            if (url.isLocalFile()) {
                event->acceptProposedAction();
                return;
            }
        }
    }
    QMainWindow::dragEnterEvent(event);
}

void MainWindow::dropEvent(QDropEvent *event)
{
    QStringList paths;
    for (const QUrl &url : event->mimeData()->urls())
        if (url.isLocalFile())
            paths << url.toLocalFile();
    if (paths.isEmpty()) {
        QMainWindow::dropEvent(event);
        return;
    }
    event->acceptProposedAction();
    onFilesDropped(paths);
}

void MainWindow::onFilesDropped(const QStringList &paths)
{
    if (!paths.isEmpty())
        openPath(paths.first());
}

void MainWindow::openPath(const QString &path)
{
    const QFileInfo fi(path);
    if (looksLikeModel(fi))
        loadModel(fi.fileName() == QLatin1String("config.json") || fi.suffix() == QLatin1String("safetensors")
                      ? fi.absolutePath()
                      : fi.absoluteFilePath());
    else
        openBook(fi.absoluteFilePath());
}

void MainWindow::saveUiSettings()
{
    m_appSettings->saveSystemPrompt(m_chatPanel->systemPrompt());
    m_appSettings->saveGenerationParams(m_generation->params());
    m_appSettings->saveEngineSettings(m_longContext->settings());
    m_appSettings->saveWindowGeometry(saveGeometry());
    m_appSettings->saveWindowState(saveState());
    saveLayout();
    m_appSettings->sync();
}

void MainWindow::closeEvent(QCloseEvent *event)
{
    saveUiSettings();
    // A reply cut short by closing is kept as far as it got.
    if (m_activity == Activity::Chatting || m_activity == Activity::Continuing)
        saveConversation();
    shutDownWorker();
    event->accept();
}

void MainWindow::shutDownWorker()
{
    if (m_shutDown)
        return;
    m_shutDown = true;
    if (m_worker) {
        // Nothing the worker still sends may reach a window that is going away.
        disconnect(m_worker, nullptr, this, nullptr);
        disconnect(m_worker, nullptr, m_explore, nullptr);
        for (QObject *controller : std::initializer_list<QObject *>{m_chat, m_books, m_models})
            disconnect(m_worker, nullptr, controller, nullptr);
        m_worker->requestStop();
        m_worker->cancelLoad();
    }
    if (m_remote) {
        m_remote->setPollInterval(0);
        for (QObject *receiver : std::initializer_list<QObject *>{this, m_explore, m_chat, m_books})
            disconnect(m_remote, nullptr, receiver, nullptr);
        m_remote->requestStop();
    }
    m_thread.quit();
    m_thread.wait();
    setActivity(Activity::Idle);
}

} // namespace longscope::ui
