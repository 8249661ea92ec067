// The main window, laid out after Chinese-LLaMA-Alpaca-2's gradio demo: a banner, then two
// tabs. Chat: left, wide: the conversation, the system prompt, the input and Send / Stop /
// Regenerate / Clear, with the live plots under them; right, narrow: the book, the generation
// controls and the long-context panel; far left, the saved conversations. Every part but the
// chat collapses (splitters and View menu, remembered). Explore: perplexity
// by position of a book under several settings on one plot (ExploreView). It owns the engine
// worker's thread and talks to the worker only through queued calls and signals (plus the
// thread-safe requestStop() / cancelLoad() / setSettings() and the queue*() calls).
//
// It assembles: the panels show and ask (ChatPanel, BookPanel, GenerationPanel,
// LongContextPanel, MetricsPlots, ConversationSidebar, ExploreView); the controllers run
// things (ChatController a chat turn, BookController a book streamed in, ModelController
// the model loaded, Exports every export). What stays here spans them all: which job is
// running (Activity), the load progress dialog and banner, the menus, the status bar and
// the dialogs.
#pragma once

#include "core/book.h"
#include "core/chat_controller.h"
#include "core/conversation.h"
#include "core/engine_worker.h"
#include "core/model_controller.h"
#include "core/remote_endpoint.h"
#include "core/remote_worker.h"
#include "core/session_stats.h"

#include <QMainWindow>
#include <QPointer>
#include <QThread>

#include <memory>
#include <optional>

class QAction;
class QDockWidget;
class QLabel;
class QMenu;
class QProgressDialog;
class QSettings;
class QSplitter;
class QTabWidget;
class QTimer;

namespace longscope::ui {

class AppSettings;
class BookController;
class BookPanel;
class ChatModel;
class ChatPanel;
class ConversationListModel;
class ConversationSidebar;
class ConversationStore;
class EngineBusyBar;
class ExploreStore;
class ExploreView;
class Exports;
class GenerationPanel;
class LongContextPanel;
class MetricsPlots;
class ModelInfoDialog;

// Registers the resources compiled into this static library (the icon); idempotent.
void initResources();

struct MainWindowOptions {
    QString modelPath;             // empty: the last model, else the bundled one
    bool loadModelOnStart = true;
    QString conversationDirectory; // empty: ConversationStore::defaultDirectory()
    QString runsDirectory;         // saved exploration runs; empty: ExploreStore::defaultDirectory()
    QSettings *settings = nullptr; // not owned; null: the application's QSettings
    int threads = 0;               // engine threads; 0: all
    // false (automation): errors go to stderr instead of message boxes, and questions are
    // answered yes.
    bool interactive = true;
    // Where remote servers' API keys are kept (not owned); null: the system keychain.
    SecretStore *secrets = nullptr;
};

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    enum class Activity { Idle, Loading, Chatting, Continuing, Streaming, Exploring };
    Q_ENUM(Activity)

    explicit MainWindow(const MainWindowOptions &options = {}, QWidget *parent = nullptr);
    ~MainWindow() override;

    bool isModelLoaded() const { return m_models->isLoaded(); }
    // A remote server answers the chat, the book and Explore instead of the local model.
    bool isRemote() const { return m_endpoint.has_value(); }
    const std::optional<RemoteEndpoint> &remoteEndpoint() const { return m_endpoint; }
    RemoteWorker *remoteWorker() const { return m_remote; }
    // The worker the chat drives now: the local engine's or the remote one.
    InferenceWorker *activeWorker() const { return m_active; }
    // A model answers: the local one is loaded, or a remote server is connected.
    bool engineReady() const { return isRemote() || m_models->isLoaded(); }
    // "stories260K @ 127.0.0.1:8080": what the header, the status bar and the plots name.
    QString remoteName() const;
    QAction *connectServerAction() const { return m_connectAction; }
    QMenu *serversMenu() const { return m_serversMenu; }
    QAction *useLocalModelAction() const { return m_useLocalAction; }
    const ModelSummary &modelSummary() const { return m_models->summary(); }
    Activity activity() const { return m_activity; }
    bool isBusy() const { return m_activity != Activity::Idle; }
    int contextUsed() const { return m_stats.contextUsed(); }
    const SessionStats &sessionStats() const { return m_stats; }
    int contextLimit() const;
    bool isWorkerThreadRunning() const { return m_thread.isRunning(); }

    ChatController *chatController() const { return m_chat; }
    BookController *bookController() const { return m_books; }
    ModelController *modelController() const { return m_models; }
    Exports *exports() const { return m_exports; }
    ChatPanel *chatPanel() const { return m_chatPanel; }
    GenerationPanel *generationPanel() const { return m_generation; }
    LongContextPanel *longContextPanel() const { return m_longContext; }
    MetricsPlots *metricsPlots() const { return m_plots; }
    BookPanel *bookPanel() const { return m_bookPanel; }
    ConversationSidebar *conversationSidebar() const { return m_sidebar; }
    ConversationStore *conversationStore() const { return m_store; }
    QTabWidget *tabs() const { return m_tabs; }
    // The chat page's splitters: columns (conversations, chat, controls) and rows (chat, plots).
    QSplitter *chatColumns() const { return m_chatColumns; }
    QSplitter *chatRows() const { return m_chatRows; }
    QWidget *controlColumn() const { return m_controlColumn; }
    // The View menu's toggles for the collapsible parts.
    QAction *showConversationsAction() const { return m_showConversations; }
    QAction *showSidePanelAction() const { return m_showSidePanel; }
    QAction *showPlotsAction() const { return m_showPlots; }
    // Esc, Ctrl+R, Ctrl+E, Ctrl+L.
    QAction *stopAction() const { return m_stopAction; }
    QAction *regenerateAction() const { return m_regenerateAction; }
    QAction *exportAction() const { return m_exportAction; }
    QAction *focusInputAction() const { return m_focusInputAction; }
    // The strip over a tab that says the other tab holds the engine (hidden when it does not).
    QWidget *chatBusyBar() const;
    QWidget *exploreBusyBar() const;
    QString chatBusyText() const;
    QString exploreBusyText() const;
    // The whole text of the last status message (the bar may show it elided).
    QString lastStatusText() const { return m_lastStatus; }
    ExploreView *exploreView() const { return m_explore; }
    ExploreStore *exploreStore() const { return m_exploreStore; }
    // The engine worker (on its own thread; only its thread-safe calls from here).
    EngineWorker *worker() const { return m_worker; }
    // The banner's model header as plain text (empty without a model).
    QString modelHeaderText() const;
    // View > Model Info's dialog while it is open (else null).
    ModelInfoDialog *modelInfoDialog() const;

public slots:
    void loadModel(const QString &path);
    // Switches to a remote server: its key from the secret store, its models listed, then the
    // chat, the book and Explore go to it (remoteConnected), or the error is said and what
    // was in use stays (remoteFailed).
    void connectToServer(const longscope::ui::RemoteEndpoint &endpoint);
    // File > Connect to Server…: the endpoint dialog, then connectToServer().
    void showConnectDialog();
    // Back to the local model (loaded, or loaded next).
    void useLocalModel();
    // Sends what the input holds (Enter, the Send button).
    void send();
    // Puts `text` in the input and sends it.
    void sendMessage(const QString &text);
    void stop();
    void regenerate();
    // Empties the conversation and the context; the old conversation stays saved.
    void clearConversation();
    void openConversation(const QString &id);
    // Deletes a saved conversation after asking (unless `confirm` is false).
    bool deleteConversation(const QString &id, bool confirm = true);

    bool openBook(const QString &path);
    // Opens `path` in the Explore tab (not in the chat's book panel) and shows the tab.
    bool openExploreBook(const QString &path);
    void showChat();
    void showExplore();
    // View > Model Info: the family, tokenizer, end-of-generation tokens, RoPE scaling in use
    // and the rest (non-modal; kept up to date while open).
    void showModelInfo();
    void streamBook();
    void continueText();

signals:
    void modelReady(const QString &name);
    void modelLoadFailed(const QString &message);
    void replyFinished(); // a chat reply or a continuation ended (for any reason)
    void bookStreamFinished(bool stopped, int tokensInContext);
    void activityChanged(longscope::ui::MainWindow::Activity activity);
    // The chat's context was emptied: another model was loaded, a conversation opened or a new
    // one started. What shows the old context (the plots) should start over.
    void contextReset();
    void remoteConnected(const QString &name);
    void remoteFailed(const QString &message);

protected:
    // Every message box goes through these, so tests can capture them instead of blocking.
    virtual void showError(const QString &title, const QString &text);
    virtual bool askConfirmation(const QString &title, const QString &text);
    virtual QString chooseOpenFile(const QString &caption, const QString &filter);
    virtual QString chooseDirectory(const QString &caption);
    virtual QString chooseSaveFile(const QString &caption, const QString &suggestedName, const QString &filter);
    // The endpoint dialog (modal); nullopt when cancelled.
    virtual std::optional<RemoteEndpoint> askEndpoint();

    void closeEvent(QCloseEvent *event) override;
    void dragEnterEvent(QDragEnterEvent *event) override;
    void dropEvent(QDropEvent *event) override;

private slots:
    void onLoadStarted(const QString &path);
    void onLoadProgress(double fraction);
    void onModelLoaded(const longscope::ui::ModelSummary &summary);
    void onLoadFailed(const QString &path, const QString &message);
    void onReplyStarted(longscope::ui::ChatController::State state);
    void onReplyFinished(const longscope::ui::GenerationSummary &summary);
    void onStreamFinished(bool stopped, int tokensInContext);
    void onStepMetrics(const longscope::StepMetrics &metrics);
    void onSettingsApplied(qint64 step, int position, const longscope::Settings &settings);
    void showBackend(const longscope::ui::ModelSummary &summary);
    void onWorkerError(const QString &message);
    void onLongContextChanged(const longscope::Settings &settings);
    void onGenerationParamsChanged(const longscope::ui::GenerationParams &params);
    void onFilesDropped(const QStringList &paths);
    void onDeleteRequested(const QString &id);
    void onExploreRunningChanged(bool running);
    void onExploreOpenBookRequested();
    void onExploreDeleteRequested(const QString &id);
    void onTabChanged(int index);
    void refreshStatus();

private:
    // Shows `text` in the status bar, elided to fit; the whole text is the bar's tooltip.
    void showStatus(const QString &text, int timeoutMs = 0);
    void closeLoadDialog();
    // The banner's header and an open Model Info, after a load or a change of settings.
    void updateModelHeader();
    // Empties what follows the context (stats, book panel) and emits contextReset.
    void resetContextState();
    void updateBusyBars();
    // "conversations", "sidePanel" or "plots"; `remember`: saved in the settings.
    void setPanelShown(const QString &name, bool shown, bool remember = true);
    void restoreLayout();
    void saveLayout();
    void createChatActions(QMenu *menu);
    QWidget *createBanner();
    QWidget *createChatArea();
    QWidget *createControlColumn();
    void connectExplore();
    void createMenus();
    void createStatusBar();
    void showDataNotices();
    void connectWorker();
    void connectRemote();
    // The chat, the book, Explore and the window's metrics and errors follow `worker`.
    void setActiveWorker(InferenceWorker *worker);
    // The probe listed the server's models: the endpoint's is used, or the error is said.
    void activateRemote(const RemoteEndpoint &endpoint, const QString &key,
                        const QVector<longscope::ui::RemoteModelInfo> &models);
    void onRemoteServerMetrics(const longscope::ui::RemoteServerMetrics &metrics);
    void failRemote(const QString &message);
    void rebuildServersMenu();
    // The header's model line for the local model.
    void rebuildRecentMenu();
    void setActivity(Activity activity);
    void updateActions();
    void newConversation();
    void saveConversation();
    void openPath(const QString &path);
    void updateBookFit();
    void shutDownWorker();
    void saveUiSettings();
    QString describeChange(const longscope::Settings &from, const longscope::Settings &to) const;

    std::unique_ptr<AppSettings> m_appSettings;
    QThread m_thread;
    QPointer<EngineWorker> m_worker;
    std::unique_ptr<SecretStore> m_ownSecrets; // the keychain, when the options give no store
    SecretStore *m_secrets = nullptr;
    RemoteWorker *m_remote = nullptr;            // lives on the window's thread
    QPointer<InferenceWorker> m_active;          // m_worker or m_remote
    std::optional<RemoteEndpoint> m_endpoint;    // the server in use
    std::optional<RemoteEndpoint> m_connecting;  // the server being connected to
    RemoteModelInfo m_remoteModel;
    bool m_metricsMissingSaid = false;
    int m_remoteStreamed = 0; // pieces of the reply streaming from the server, for the plots' position
    ConversationStore *m_store = nullptr;
    ConversationListModel *m_conversationList = nullptr;
    ChatController *m_chat = nullptr;
    BookController *m_books = nullptr;
    ModelController *m_models = nullptr;
    Exports *m_exports = nullptr;

    // Widgets.
    QLabel *m_bannerModel = nullptr;
    ChatPanel *m_chatPanel = nullptr;
    GenerationPanel *m_generation = nullptr;
    LongContextPanel *m_longContext = nullptr;
    MetricsPlots *m_plots = nullptr;
    BookPanel *m_bookPanel = nullptr;
    ConversationSidebar *m_sidebar = nullptr;
    QSplitter *m_chatColumns = nullptr;
    QSplitter *m_chatRows = nullptr;
    QWidget *m_controlColumn = nullptr;
    EngineBusyBar *m_chatBusy = nullptr;
    EngineBusyBar *m_exploreBusy = nullptr;
    QTabWidget *m_tabs = nullptr;
    ExploreView *m_explore = nullptr;
    ExploreStore *m_exploreStore = nullptr;
    QPointer<QProgressDialog> m_loadDialog;
    bool m_inLoadDialogSetValue = false; // its setValue runs a nested event loop (modal dialog)
    QPointer<ModelInfoDialog> m_modelInfo;
    QLabel *m_statusNotice = nullptr; // problems with the app's data, shown once at start
    QLabel *m_statusModel = nullptr;
    QLabel *m_statusContext = nullptr;
    QLabel *m_statusSpeed = nullptr;
    QTimer *m_statusTimer = nullptr;

    // Menu actions.
    QAction *m_openModelAction = nullptr;
    QAction *m_openModelDirAction = nullptr;
    QAction *m_openBookAction = nullptr;
    QMenu *m_recentMenu = nullptr;
    QAction *m_connectAction = nullptr;
    QMenu *m_serversMenu = nullptr;
    QAction *m_useLocalAction = nullptr;
    QAction *m_chatTemplateAction = nullptr;
    QAction *m_showConversations = nullptr;
    QAction *m_showSidePanel = nullptr;
    QAction *m_showPlots = nullptr;
    QAction *m_stopAction = nullptr;
    QAction *m_regenerateAction = nullptr;
    QAction *m_exportAction = nullptr;
    QAction *m_focusInputAction = nullptr;
    QString m_lastStatus;

    // State.
    Activity m_activity = Activity::Idle;
    longscope::Settings m_appliedSettings; // what the worker last reported as in effect
    SessionStats m_stats;
    bool m_statusDirty = false;
    bool m_interactive = true;
    bool m_shutDown = false;
};

} // namespace longscope::ui
