// The main window end to end with the bundled model, off screen: load, chat through the
// input, stop, live settings mid-generation, plots and their exports, bad models and books,
// books streamed and continued, clear, regenerate, saved conversations, and closing while
// the worker is busy.
#include "focus_chain.h"
#include "offscreen.h"
#include "support/cuda_status.h"
#include "support/vocab_files.h"

#include "core/chat_model.h"
#include "core/conversation_store.h"
#include "core/settings_json.h"
#include "widgets/book_panel.h"
#include "widgets/chat_panel.h"
#include "widgets/chat_input.h"
#include "widgets/chat_view.h"
#include "widgets/conversation_sidebar.h"
#include "widgets/explore_view.h"
#include "widgets/exports.h"
#include "widgets/generation_panel.h"
#include "widgets/long_context_panel.h"
#include "widgets/main_window.h"
#include "widgets/explore_heatmaps.h"
#include "widgets/explore_needle_controls.h"
#include "widgets/explore_plot.h"
#include "widgets/explore_run_list.h"
#include "widgets/explore_run_table.h"
#include "widgets/explore_settings_list.h"
#include "widgets/metrics_plots.h"
#include "widgets/model_info_dialog.h"

#include "longscope/backend.h"
#include "longscope/chat.h"
#include "longscope/engine.h"
#include "longscope/generator.h"
#include "longscope/gguf.h"
#include "longscope/model.h"
#include "longscope/perplexity.h"
#include "longscope/quantize.h"
#include "longscope/tokenizer.h"

#include <QAbstractSpinBox>
#include <QAccessible>
#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDropEvent>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProcess>
#include <QProgressBar>
#include <QProgressDialog>
#include <QSplitter>
#include <QTabWidget>
#include <QPushButton>
#include <QStandardItemModel>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QTimer>
#include <QSpinBox>
#include <QStackedWidget>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTabBar>
#include <QTest>
#include <QTextBrowser>
#include <QUrl>

#include <memory>
#include <span>

using namespace longscope;
using namespace longscope::ui;

namespace {

constexpr int kTimeoutMs = 60000;

// Message boxes and file dialogs answered by the test instead of a person.
class TestWindow : public MainWindow {
public:
    using MainWindow::MainWindow;

    QStringList errors;
    QStringList questions;
    bool answer = true;
    QString saveAnswer; // what a save dialog answers (empty: cancelled)
    // With `modalErrors`, an error waits in an event loop of its own for a while, as a message
    // box does, and counts the progress dialogs shown meanwhile.
    bool modalErrors = false;
    int dialogsShownDuringErrors = 0;

protected:
    void showError(const QString &title, const QString &text) override
    {
        errors << title + QStringLiteral(": ") + text;
        if (!modalErrors)
            return;
        QEventLoop loop;
        QTimer::singleShot(800, &loop, &QEventLoop::quit);
        loop.exec();
        for (QProgressDialog *d : findChildren<QProgressDialog *>())
            dialogsShownDuringErrors += d->isVisible() ? 1 : 0;
    }
    bool askConfirmation(const QString &, const QString &text) override
    {
        questions << text;
        return answer;
    }
    QString chooseOpenFile(const QString &, const QString &) override { return {}; }
    QString chooseDirectory(const QString &) override { return {}; }
    QString chooseSaveFile(const QString &, const QString &, const QString &) override { return saveAnswer; }
};

// The conversation's notes that report an error.
QStringList errorNotes(const MainWindow &w)
{
    QStringList notes;
    const ChatModel *m = w.chatController()->model();
    for (int i = 0; i < m->count(); ++i)
        if (m->at(i).role == Message::Role::SystemNote && m->at(i).text.startsWith(QLatin1String("Error")))
            notes << m->at(i).text;
    return notes;
}

int countRole(const MainWindow &w, Message::Role role)
{
    int n = 0;
    const ChatModel *m = w.chatController()->model();
    for (int i = 0; i < m->count(); ++i)
        n += m->at(i).role == role ? 1 : 0;
    return n;
}

// The window as drawn, kept where LONGSCOPE_TEST_ARTIFACTS says (for a look by eye), else in
// `fallbackDir`.
void saveArtifact(MainWindow &w, const QString &fallbackDir, const QString &name)
{
    const QString dir = qEnvironmentVariable("LONGSCOPE_TEST_ARTIFACTS", fallbackDir);
    QCoreApplication::processEvents();
    QVERIFY(w.grab().save(QDir(dir).filePath(name)));
}

QString lastText(const MainWindow &w)
{
    const ChatModel *m = w.chatController()->model();
    return m->count() > 0 ? m->at(m->count() - 1).text : QString();
}

} // namespace

class TestMainWindow : public QObject {
    Q_OBJECT

private:
    // `modelPath` empty: the window picks the model itself (the last one, else the bundled).
    // `settingsFile` empty: a fresh settings file of its own.
    std::unique_ptr<TestWindow> makeWindow(const QString &modelPath = QStringLiteral(LONGSCOPE_BUNDLED_MODEL),
                                           const QString &settingsFile = QString());
    void sendAndWait(TestWindow &w, const QString &text);
    // Makes every step recompute the whole sequence, so a generation lasts long enough to
    // be interrupted.
    static void makeSlow(TestWindow &w);

    QTemporaryDir m_dir;
    int m_windows = 0;

private slots:
    void initTestCase();
    void loadsTheBundledModel();
    void enterSendsAndStreamsAReply();
    void shiftEnterAddsANewLine();
    void stopEndsAGenerationEarly();
    void liveSettingsReachARunningGeneration();
    void plotsReceivePointsAndExport();
    void corruptModelKeepsThePreviousOne();
    void binaryBookIsRejected();
    void bookStreamsAndContinues();
    void droppedBookOpens();
    void loadEndingInsideTheProgressDialogIsSafe();
    void clearEmptiesTheView();
    void regenerateReplacesTheReply();
    void conversationsAreSavedReopenedAndDeleted();
    void closingMidGenerationIsClean();
    void hugeSystemPromptShowsQuickly();
    void dataProblemsSaidAndSettingsBackedUp();
    void fitsALaptopScreen();
    void collapsiblePartsAreRemembered();
    void defaultsChatTwoTurnsThenAskAboutABook();
    void modelSwitchWithABookThenSend();
    void failedLoadsLeaveNoDialog();
    void shortcutsDoWhatTheySay();
    void streamingLeavesTheFocusInTheInput();
    void everyFocusableControlHasAName();
    void exploreKeepsTheFocusOffNumbers();
    void exploreLeftPanelUsableWhileRunning();
    void theOtherTabSaysWhoHoldsTheEngine();
    void longStatusMessagesKeepTheirText();
    void modelHeaderSaysFamilyTokenizerAndRope();
    void modelHeaderOfAByteLevelBpeModel();
    void ropeScalingSwitchesLive();
};

void TestMainWindow::initTestCase()
{
    QVERIFY(longscope::test::k_offscreen);
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(m_dir.isValid());
    QVERIFY2(QFile::exists(QStringLiteral(LONGSCOPE_BUNDLED_MODEL)), LONGSCOPE_BUNDLED_MODEL);
}

std::unique_ptr<TestWindow> TestMainWindow::makeWindow(const QString &modelPath, const QString &settingsFile)
{
    // A settings file of its own per window, so one test's choices do not leak into the next
    // (and the user's settings are never touched).
    auto *settings = new QSettings(settingsFile.isEmpty() ? m_dir.filePath(QStringLiteral("settings-%1.ini").arg(++m_windows))
                                                          : settingsFile,
                                  QSettings::IniFormat, this);
    MainWindowOptions options;
    options.modelPath = modelPath;
    options.conversationDirectory = m_dir.filePath(QStringLiteral("conversations"));
    options.runsDirectory = m_dir.filePath(QStringLiteral("runs"));
    options.settings = settings;
    auto w = std::make_unique<TestWindow>(options);
    w->resize(1400, 900);
    w->show();
    return w;
}

void TestMainWindow::sendAndWait(TestWindow &w, const QString &text)
{
    w.sendMessage(text);
    QTRY_VERIFY_WITH_TIMEOUT(!w.isBusy(), kTimeoutMs);
}

void TestMainWindow::makeSlow(TestWindow &w)
{
    QComboBox *kv = w.longContextPanel()->kvModeBox();
    kv->setCurrentIndex(kv->findData(int(KvMode::None)));
    w.generationPanel()->maxNewTokensBox()->setValue(4096);
}

void TestMainWindow::loadsTheBundledModel()
{
    auto w = makeWindow(QString());
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QCOMPARE(w->modelSummary().name, QStringLiteral("stories260K"));
    QCOMPARE(w->modelSummary().n_ctx_train, 512);
    QCOMPARE(w->longContextPanel()->trainedContext(), 512);
    QCOMPARE(w->contextLimit(), 512);
    QVERIFY(w->chatPanel()->sendButton()->isEnabled());
    QVERIFY(!w->chatPanel()->stopButton()->isEnabled());
    QVERIFY(w->errors.isEmpty());
    QVERIFY(w->isWorkerThreadRunning());
    QCOMPARE(QFileInfo(w->modelSummary().path), QFileInfo(QStringLiteral(LONGSCOPE_BUNDLED_MODEL)));

    // The backend box offers CUDA exactly when the probe found a usable GPU.
    const bool cuda = longscope::test::cuda_status().available;
    QComboBox *backend = w->longContextPanel()->backendBox();
    QCOMPARE(backend->count(), 2);
    QCOMPARE(backend->currentText(), QStringLiteral("CPU"));
    auto *items = qobject_cast<QStandardItemModel *>(backend->model());
    QVERIFY(items);
    QCOMPARE(items->item(1)->isEnabled(), cuda);
    QCOMPARE(w->modelSummary().cuda_available, cuda);
}

void TestMainWindow::enterSendsAndStreamsAReply()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QTest::keyClicks(w->chatPanel()->chatInput(), QStringLiteral("Once upon a time"));
    QTest::keyClick(w->chatPanel()->chatInput(), Qt::Key_Return);
    QVERIFY(w->chatPanel()->chatInput()->toPlainText().isEmpty());
    QCOMPARE(w->chatController()->model()->at(0).role, Message::Role::User);
    QCOMPARE(w->chatController()->model()->at(0).text, QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!lastText(*w).isEmpty(), kTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    QCOMPARE(w->chatController()->model()->count(), 2);
    QCOMPARE(w->chatController()->model()->at(1).role, Message::Role::Assistant);

    const QString reply = lastText(*w);
    w->chatPanel()->chatView()->flush();
    const QString shown = w->chatPanel()->chatView()->toPlainText();
    QVERIFY2(shown.contains(QStringLiteral("Once upon a time")), qPrintable(shown));
    QVERIFY2(shown.contains(reply.left(20)), qPrintable(shown));
    QVERIFY(w->chatController()->lastSummary().generated_tokens > 0);
    QVERIFY(w->contextUsed() > 0);
    QVERIFY(w->errors.isEmpty());
}

void TestMainWindow::shiftEnterAddsANewLine()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QTest::keyClicks(w->chatPanel()->chatInput(), QStringLiteral("first"));
    QTest::keyClick(w->chatPanel()->chatInput(), Qt::Key_Return, Qt::ShiftModifier);
    QTest::keyClicks(w->chatPanel()->chatInput(), QStringLiteral("second"));
    QCOMPARE(w->chatPanel()->chatInput()->toPlainText(), QStringLiteral("first\nsecond"));
    QCOMPARE(w->chatController()->model()->count(), 0);
    QVERIFY(!w->isBusy());
}

void TestMainWindow::stopEndsAGenerationEarly()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    makeSlow(*w);
    w->sendMessage(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!lastText(*w).isEmpty(), kTimeoutMs);
    QVERIFY(w->isBusy());
    QVERIFY(w->chatPanel()->stopButton()->isEnabled());
    QTest::mouseClick(w->chatPanel()->stopButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    QCOMPARE(int(w->chatController()->lastSummary().reason), int(FinishReason::Stopped));
    QVERIFY(w->chatController()->lastSummary().generated_tokens < 4096);
    QVERIFY(!lastText(*w).isEmpty()); // what came before the stop stays
    QVERIFY(w->chatPanel()->sendButton()->isEnabled());
}

void TestMainWindow::liveSettingsReachARunningGeneration()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    makeSlow(*w);
    w->sendMessage(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(lastText(*w).size() > 3, kTimeoutMs);
    QVERIFY(w->isBusy());
    const int markersBefore = w->metricsPlots()->markerCount();

    QComboBox *kv = w->longContextPanel()->kvModeBox();
    kv->setCurrentIndex(kv->findData(int(KvMode::Vmm)));
    w->longContextPanel()->memoryEfficientBox()->setChecked(true);
    // Cached values in f16 (the bundled model's 8-wide heads take no blocks of 32).
    QComboBox *values = w->longContextPanel()->kvTypeVBox();
    values->setCurrentIndex(values->findData(int(longscope::KvType::F16)));
    QCOMPARE(w->longContextPanel()->settings().kv_type_v, longscope::KvType::F16);

    QTRY_VERIFY_WITH_TIMEOUT(w->metricsPlots()->markerCount() > markersBefore, kTimeoutMs);
    const QString applied = w->longContextPanel()->appliedLabel()->text();
    const QRegularExpressionMatch m = QRegularExpression(QStringLiteral("Applied at token ([\\d,.\\s]+)")).match(applied);
    QVERIFY2(m.hasMatch(), qPrintable(applied));
    QVERIFY2(m.captured(1).remove(QRegularExpression(QStringLiteral("\\D"))).toInt() > 0, qPrintable(applied));
    w->stop();
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    QVERIFY(!lastText(*w).isEmpty());
    QVERIFY(w->errors.isEmpty());
    // The marked plots, kept where LONGSCOPE_TEST_ARTIFACTS says (for a look by eye).
    const QString artifacts = qEnvironmentVariable("LONGSCOPE_TEST_ARTIFACTS", m_dir.path());
    QVERIFY(w->exports()->plotsPng(QDir(artifacts).filePath(QStringLiteral("live-settings-plots.png"))));
    w->metricsPlots()->replotNow();
    QVERIFY(w->grab().save(QDir(artifacts).filePath(QStringLiteral("live-settings-window.png"))));

    // The next reply runs with them: a generation after the change still works.
    w->generationPanel()->maxNewTokensBox()->setValue(16);
    sendAndWait(*w, QStringLiteral("Tell me more"));
    QVERIFY(w->chatController()->lastSummary().reason != FinishReason::Error);
}

void TestMainWindow::plotsReceivePointsAndExport()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->generationPanel()->maxNewTokensBox()->setValue(40);
    sendAndWait(*w, QStringLiteral("Once upon a time"));
    MetricsPlots *plots = w->metricsPlots();
    QVERIFY(plots->stepCount() > 1);
    QTRY_VERIFY(plots->plottedPointCount() > 1); // drawn on the refresh timer

    const QString png = m_dir.filePath(QStringLiteral("plots.png"));
    const QString csv = m_dir.filePath(QStringLiteral("plots.csv"));
    QVERIFY(w->exports()->plotsPng(png));
    QVERIFY(w->exports()->plotsCsv(csv));
    const QImage image(png);
    QVERIFY(!image.isNull());
    QVERIFY(image.width() > 400);
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), plots->stepCount() + 1);
    QVERIFY(lines.first().contains("position"));

    QVERIFY(!w->exports()->plotsPng(m_dir.filePath(QStringLiteral("no/such/dir/plots.png"))));
    QCOMPARE(w->errors.size(), 1);
}

void TestMainWindow::corruptModelKeepsThePreviousOne()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    const QString bad = m_dir.filePath(QStringLiteral("corrupt.gguf"));
    {
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray("GGUF\x03\x00\x00\x00", 8) + QByteArray(" this is not a model at all"));
    }
    QSignalSpy failed(w.get(), &MainWindow::modelLoadFailed);
    w->loadModel(bad);
    QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 1, kTimeoutMs);
    QTRY_VERIFY(!w->isBusy());
    QCOMPARE(w->errors.size(), 1);
    QVERIFY2(w->errors.first().contains(QStringLiteral("corrupt.gguf")), qPrintable(w->errors.first()));
    QVERIFY2(w->errors.first().contains(QStringLiteral("stories260K is still loaded")), qPrintable(w->errors.first()));
    QVERIFY(w->isModelLoaded());
    QCOMPARE(w->modelSummary().name, QStringLiteral("stories260K"));

    // Still usable.
    w->generationPanel()->maxNewTokensBox()->setValue(16);
    sendAndWait(*w, QStringLiteral("Once upon a time"));
    QVERIFY(!lastText(*w).isEmpty());
}

void TestMainWindow::binaryBookIsRejected()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    const QString binary = m_dir.filePath(QStringLiteral("binary.txt"));
    {
        QFile f(binary);
        QVERIFY(f.open(QIODevice::WriteOnly));
        QByteArray bytes(4096, '\0');
        for (int i = 0; i < bytes.size(); ++i)
            bytes[i] = char((i * 37) & 0xff);
        f.write(bytes);
    }
    QVERIFY(!w->openBook(binary));
    QCOMPARE(w->errors.size(), 1);
    QVERIFY(!w->bookPanel()->hasBook());
    QVERIFY(!w->openBook(m_dir.filePath(QStringLiteral("missing.txt"))));
    QCOMPARE(w->errors.size(), 2);
}

void TestMainWindow::bookStreamsAndContinues()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QVERIFY(w->openBook(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt")));
    QVERIFY(w->bookPanel()->hasBook());
    QVERIFY(w->bookPanel()->book().title.contains(QStringLiteral("Alice")));
    QVERIFY(w->bookPanel()->estimatedTokens() > 512);

    QSignalSpy streamed(w.get(), &MainWindow::bookStreamFinished);
    const int stepsBefore = w->metricsPlots()->stepCount();
    w->streamBook();
    QVERIFY(w->isBusy());
    QTRY_VERIFY_WITH_TIMEOUT(streamed.count() == 1, kTimeoutMs);
    QCOMPARE(streamed.first().at(0).toBool(), false); // not stopped
    // The book is far larger than 512 tokens: its head and tail fill the context but for a
    // quarter left free for the conversation. The policy (the default, drop the oldest turns)
    // is not changed behind the user's back; a note says what happens.
    QCOMPARE(w->longContextPanel()->settings().overflow, OverflowPolicy::DropOldestTurns);
    QVERIFY(w->chatController()->model()->at(0).text.contains(QStringLiteral("head and tail are streamed")));
    QCOMPARE(w->contextUsed(), 384);
    QVERIFY(w->metricsPlots()->stepCount() >= stepsBefore + 8); // chunk by chunk
    QVERIFY(w->bookPanel()->continueButton()->isEnabled());
    QVERIFY(w->errors.isEmpty());

    // Continuing writes into the room left, up to "context full" (or the story's end).
    w->generationPanel()->maxNewTokensBox()->setValue(400);
    w->continueText();
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    const FinishReason reason = w->chatController()->lastSummary().reason;
    QVERIFY(reason == FinishReason::ContextFull || reason == FinishReason::EndOfText);
    QVERIFY(w->chatController()->lastSummary().generated_tokens > 0);
    QVERIFY(w->contextUsed() <= 512);

    // With room, Continue writes on.
    w->clearConversation();
    QSpinBox *limit = w->longContextPanel()->contextLimitBox();
    limit->setValue(1024);
    w->streamBook();
    QTRY_VERIFY_WITH_TIMEOUT(streamed.count() == 2, kTimeoutMs);
    QCOMPARE(w->contextUsed(), 768);
    limit->setValue(1200);
    w->continueText();
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    QVERIFY(w->chatController()->lastSummary().generated_tokens > 0);
    QCOMPARE(w->chatController()->model()->at(w->chatController()->model()->count() - 1).role, Message::Role::Assistant);
    QVERIFY(!lastText(*w).isEmpty());
}

void TestMainWindow::droppedBookOpens()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg98-a-tale-of-two-cities.txt"))});
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(w.get(), &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(w.get(), &drop);
    QVERIFY(w->bookPanel()->hasBook());
    QVERIFY(w->bookPanel()->book().title.contains(QStringLiteral("Two Cities")));
    QVERIFY(w->errors.isEmpty());
}

void TestMainWindow::loadEndingInsideTheProgressDialogIsSafe()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    ModelController *models = w->modelController();
    const ModelSummary summary = w->modelSummary();
    emit models->loadStarted(summary.path);
    auto *dialog = w->findChild<QProgressDialog *>();
    QVERIFY(dialog);
    // Shown after its minimum duration; window-modal, so its setValue() runs the event loop.
    QTRY_VERIFY(dialog->isVisible());
    // The load ends in that event loop, and the window closes the dialog inside its setValue().
    QMetaObject::invokeMethod(models, [models, summary] { emit models->loaded(summary); }, Qt::QueuedConnection);
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    const QPointer<QProgressDialog> alive(dialog);
    emit models->loadProgress(0.5);
    QCOMPARE(ready.count(), 1); // the load ended inside setValue()
    // ... and the dialog outlived it, hidden (deleted there, setValue() read freed memory).
    QVERIFY(alive);
    QVERIFY(!alive->isVisible());
    QTRY_VERIFY(!w->findChild<QProgressDialog *>());
    QVERIFY(w->isModelLoaded());
    QVERIFY(w->errors.isEmpty());
}

void TestMainWindow::clearEmptiesTheView()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->generationPanel()->maxNewTokensBox()->setValue(24);
    sendAndWait(*w, QStringLiteral("Once upon a time"));
    QCOMPARE(w->chatController()->model()->count(), 2);
    QTest::mouseClick(w->chatPanel()->clearButton(), Qt::LeftButton);
    QCOMPARE(w->chatController()->model()->count(), 0);
    w->chatPanel()->chatView()->flush();
    QVERIFY(w->chatPanel()->chatView()->toPlainText().trimmed().isEmpty());
    QVERIFY(w->chatController()->conversation().isEmpty());
    QCOMPARE(w->contextUsed(), 0);
    // And the chat goes on from nothing.
    sendAndWait(*w, QStringLiteral("Hello"));
    QCOMPARE(w->chatController()->model()->count(), 2);
}

void TestMainWindow::regenerateReplacesTheReply()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->generationPanel()->maxNewTokensBox()->setValue(24);
    sendAndWait(*w, QStringLiteral("Once upon a time"));
    QVERIFY(w->chatPanel()->regenerateButton()->isEnabled());
    QTest::mouseClick(w->chatPanel()->regenerateButton(), Qt::LeftButton);
    QVERIFY(w->isBusy());
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    QCOMPARE(w->chatController()->model()->count(), 2);
    QCOMPARE(w->chatController()->model()->at(1).role, Message::Role::Assistant);
    QVERIFY(!lastText(*w).isEmpty());
}

void TestMainWindow::conversationsAreSavedReopenedAndDeleted()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->generationPanel()->maxNewTokensBox()->setValue(24);
    sendAndWait(*w, QStringLiteral("A saved conversation"));
    const QString id = w->chatController()->conversation().id();
    QVERIFY(w->conversationStore()->contains(id)); // saved after the reply
    const std::optional<Conversation> saved = w->conversationStore()->load(id);
    QVERIFY(saved.has_value());
    QCOMPARE(saved->messages().size(), 2);
    QCOMPARE(saved->messages().at(1).text, lastText(*w));
    // The settings are saved in the one JSON form, every field (backend included).
    const std::optional<longscope::Settings> settings =
        settingsFromJson(saved->settingsSnapshot().value(QStringLiteral("long_context")).toObject());
    QVERIFY(settings.has_value());
    QVERIFY(*settings == w->longContextPanel()->settings());
    QVERIFY(saved->settingsSnapshot().value(QStringLiteral("long_context")).toObject().contains(QStringLiteral("backend")));

    w->clearConversation();
    QCOMPARE(w->chatController()->model()->count(), 0);
    w->openConversation(id);
    QCOMPARE(w->chatController()->model()->count(), 2);
    QCOMPARE(w->chatController()->conversation().id(), id);

    w->answer = false;
    QVERIFY(!w->deleteConversation(id));
    QCOMPARE(w->questions.size(), 1);
    QVERIFY(w->conversationStore()->contains(id));
    w->answer = true;
    QVERIFY(w->deleteConversation(id));
    QVERIFY(!w->conversationStore()->contains(id));
    QCOMPARE(w->chatController()->model()->count(), 0); // the open one was deleted: a fresh conversation
}

void TestMainWindow::closingMidGenerationIsClean()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    makeSlow(*w);
    w->sendMessage(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!lastText(*w).isEmpty(), kTimeoutMs);
    QVERIFY(w->isBusy());
    const QString id = w->chatController()->conversation().id();
    QElapsedTimer timer;
    timer.start();
    QVERIFY(w->close());
    QVERIFY(timer.elapsed() < 10000);
    QVERIFY(!w->isWorkerThreadRunning());
    QVERIFY(w->conversationStore()->contains(id)); // the partial reply is kept
    QCoreApplication::processEvents(); // late queued signals must find nothing to do
    w.reset();
    QCoreApplication::sendPostedEvents(nullptr, QEvent::DeferredDelete);
}

// A 1 MB system prompt without a space or a line break in the settings (one line for a text
// layout): the window shows and paints within seconds, and the prompt is kept.
void TestMainWindow::hugeSystemPromptShowsQuickly()
{
    const QString file = m_dir.filePath(QStringLiteral("settings-huge-prompt.ini"));
    const QString prompt = QString(1 << 20, QLatin1Char('x'));
    {
        QSettings qs(file, QSettings::IniFormat);
        qs.setValue(QStringLiteral("chat/systemPrompt"), prompt);
    }
    QElapsedTimer timer;
    timer.start();
    auto w = makeWindow(QStringLiteral(LONGSCOPE_BUNDLED_MODEL), file);
    QVERIFY(QTest::qWaitForWindowExposed(w.get()));
    (void)w->grab(); // paints every visible widget, the prompt's field among them
    const qint64 shown = timer.elapsed();
    qInfo("window with a 1 MB one-line system prompt shown and painted in %lld ms", shown);
    QVERIFY2(shown < 10000, qPrintable(QString::number(shown)));
    QCOMPARE(w->chatPanel()->systemPrompt(), prompt);
    // Set again while shown (as opening a conversation does), and typed into.
    timer.restart();
    w->chatPanel()->setSystemPrompt(prompt + QLatin1Char('y'));
    (void)w->grab();
    QVERIFY2(timer.elapsed() < 10000, qPrintable(QString::number(timer.elapsed())));
    QCOMPARE(w->chatPanel()->systemPrompt().size(), prompt.size() + 1);
}

// A settings value that is not valid and a conversations folder that cannot be created are
// said in the status bar at start; at close, the settings file is rewritten only after a copy
// of it as it was is kept beside it.
void TestMainWindow::dataProblemsSaidAndSettingsBackedUp()
{
    const QString file = m_dir.filePath(QStringLiteral("settings-problems.ini"));
    {
        QSettings qs(file, QSettings::IniFormat);
        qs.setValue(QStringLiteral("generation/temperature"), QStringLiteral("hot"));
    }
    QFile original(file);
    QVERIFY(original.open(QIODevice::ReadOnly));
    const QByteArray before = original.readAll();
    original.close();
    const QString blocker = m_dir.filePath(QStringLiteral("blocker"));
    {
        QFile f(blocker);
        QVERIFY(f.open(QIODevice::WriteOnly));
    }
    auto *settings = new QSettings(file, QSettings::IniFormat, this);
    MainWindowOptions options;
    options.loadModelOnStart = false;
    options.conversationDirectory = blocker + QStringLiteral("/conversations");
    options.runsDirectory = m_dir.filePath(QStringLiteral("runs"));
    options.settings = settings;
    auto w = std::make_unique<TestWindow>(options);
    w->show();
    auto *notice = w->statusBar()->findChild<QLabel *>(QStringLiteral("statusNotice"));
    QVERIFY(notice);
    QVERIFY(notice->isVisible());
    const QString said = notice->toolTip();
    QVERIFY2(said.contains(QLatin1String("generation/temperature: \"hot\" is not valid")), qPrintable(said));
    QVERIFY2(said.contains(options.conversationDirectory + QStringLiteral(" is not a writable folder")), qPrintable(said));
    QVERIFY(!said.contains(QLatin1String("Saved runs")));
    QVERIFY(w->close());
    QFile bak(file + QStringLiteral(".bak"));
    QVERIFY(bak.open(QIODevice::ReadOnly));
    QCOMPARE(bak.readAll(), before);
    QVERIFY(!settings->value(QStringLiteral("generation/temperature")).toString().contains(QLatin1String("hot")));
}

// At 1366x768 and 1280x720 with the conversations open: the window may be narrowed to 1000
// pixels, and the chat gets most of the height.
void TestMainWindow::fitsALaptopScreen()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QVERIFY(w->conversationSidebar()->isVisible());
    QVERIFY(w->metricsPlots()->isVisible());
    QVERIFY(w->controlColumn()->isVisible());
    // Word-wrapped labels ask for more height the narrower they are, so the minimum height is
    // measured at the narrowest the window goes (otherwise it follows the width of the moment).
    w->resize(w->minimumSizeHint().width(), 768);
    QCoreApplication::processEvents();
    const QSize minimum = w->minimumSizeHint().expandedTo(w->minimumSize());
    qInfo("minimum window size with every part shown: %dx%d", minimum.width(), minimum.height());
    const QList<QWidget *> parts{w->conversationSidebar(), w->chatPanel(),   w->controlColumn(),
                                 w->metricsPlots(),        w->chatColumns(), w->exploreView()};
    for (QWidget *part : parts)
        qInfo("%s %s: %dx%d", part->metaObject()->className(), qPrintable(part->objectName()),
              part->minimumSizeHint().width(), part->minimumSizeHint().height());
    // At most 996 wide (the issue asks for 1000) and 580 high, which leaves a 720-pixel screen
    // room for its panels; measured 996x573 with the RoPE controls and the Explore tab's run
    // footer.
    QVERIFY2(minimum.width() <= 996, qPrintable(QString::number(minimum.width())));
    QVERIFY2(minimum.height() <= 580, qPrintable(QString::number(minimum.height())));
    for (const QSize size : {QSize(1366, 768), QSize(1280, 720)}) {
        w->resize(size);
        QCoreApplication::processEvents();
        QCOMPARE(w->size(), size);
        const QList<int> rows = w->chatRows()->sizes();
        QVERIFY2(2 * rows[0] >= 3 * rows[1], qPrintable(QStringLiteral("%1 %2").arg(rows[0]).arg(rows[1])));
        // The input and the buttons stay inside the window.
        QPushButton *send = w->chatPanel()->sendButton();
        const QRect r(send->mapTo(w.get(), QPoint(0, 0)), send->size());
        QVERIFY2(w->rect().contains(r), qPrintable(QStringLiteral("%1x%2").arg(size.width()).arg(size.height())));
        saveArtifact(*w, m_dir.path(), QStringLiteral("laptop-%1x%2.png").arg(size.width()).arg(size.height()));
    }
    w->resize(minimum);
    saveArtifact(*w, m_dir.path(), QStringLiteral("laptop-minimum.png"));
}

void TestMainWindow::collapsiblePartsAreRemembered()
{
    const QString file = m_dir.filePath(QStringLiteral("settings-layout.ini"));
    {
        auto w = makeWindow(QStringLiteral(LONGSCOPE_BUNDLED_MODEL), file);
        QVERIFY(w->showPlotsAction()->isChecked());
        w->showPlotsAction()->trigger();
        w->showConversationsAction()->trigger();
        QVERIFY(!w->metricsPlots()->isVisible());
        QVERIFY(!w->conversationSidebar()->isVisible());
        QVERIFY(w->controlColumn()->isVisible());
        // Hidden, the parts leave the chat wider and taller.
        const QSize minimum = w->minimumSizeHint();
        QVERIFY(minimum.width() <= 1000);
        QVERIFY(w->close());
    }
    auto w = makeWindow(QStringLiteral(LONGSCOPE_BUNDLED_MODEL), file);
    QVERIFY(!w->showPlotsAction()->isChecked());
    QVERIFY(!w->showConversationsAction()->isChecked());
    QVERIFY(!w->metricsPlots()->isVisible());
    QVERIFY(!w->conversationSidebar()->isVisible());
    QVERIFY(w->controlColumn()->isVisible());
    w->showSidePanelAction()->trigger();
    QVERIFY(!w->controlColumn()->isVisible());
    w->showPlotsAction()->trigger();
    QVERIFY(w->metricsPlots()->isVisible());
}

// The failures, at the defaults on the bundled model (a 512-token context, Max new
// tokens 512): a second question, and a question after a book.
void TestMainWindow::defaultsChatTwoTurnsThenAskAboutABook()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QCOMPARE(w->generationPanel()->params().max_new_tokens, GenerationParams{}.max_new_tokens);
    QCOMPARE(w->longContextPanel()->settings().overflow, OverflowPolicy::DropOldestTurns);
    sendAndWait(*w, QStringLiteral("Once upon a time"));
    sendAndWait(*w, QStringLiteral("What happened next?"));
    QVERIFY2(errorNotes(*w).isEmpty(), qPrintable(errorNotes(*w).join(QLatin1Char('\n'))));
    QCOMPARE(countRole(*w, Message::Role::Assistant), 2);
    QVERIFY(!lastText(*w).isEmpty());
    QVERIFY(w->contextUsed() <= 512);
    // Max new tokens shows its cap: the free part of the context, or, when the replies filled
    // it, that older turns make way (sampled replies vary in length from seed to seed).
    const QString room = w->generationPanel()->roomLabel()->text();
    QVERIFY2(room.contains(w->contextUsed() < 512 ? QStringLiteral("free") : QStringLiteral("make way")),
             qPrintable(QStringLiteral("%1 (context used %2)").arg(room).arg(w->contextUsed())));
    QVERIFY(w->generationPanel()->effectiveMaxNewTokens() <= 512 - w->contextUsed());

    w->clearConversation();
    QVERIFY(w->openBook(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt")));
    QSignalSpy streamed(w.get(), &MainWindow::bookStreamFinished);
    w->streamBook();
    QTRY_VERIFY_WITH_TIMEOUT(streamed.count() == 1, kTimeoutMs);
    QCOMPARE(w->contextUsed(), 384);
    // The panel counts the whole book (the tokenizer's count), not the 384 tokens that went in.
    QVERIFY(w->bookPanel()->estimatedTokens() > 10 * 384);
    w->resize(1366, 768);
    sendAndWait(*w, QStringLiteral("Who is Alice?"));
    saveArtifact(*w, m_dir.path(), QStringLiteral("laptop-after-book.png"));
    QVERIFY2(errorNotes(*w).isEmpty(), qPrintable(errorNotes(*w).join(QLatin1Char('\n'))));
    QCOMPARE(w->chatController()->lastSummary().reason == FinishReason::Error, false);
    QVERIFY(w->chatController()->lastSummary().generated_tokens > 0);
    QVERIFY(w->errors.isEmpty());
}

// Another model after a book: the context, the book panel and the statistics start over, and
// the chat works on the new model (the old model's tokens do not follow it).
void TestMainWindow::modelSwitchWithABookThenSend()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QVERIFY(w->openBook(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt")));
    QSignalSpy streamed(w.get(), &MainWindow::bookStreamFinished);
    w->streamBook();
    QTRY_VERIFY_WITH_TIMEOUT(streamed.count() == 1, kTimeoutMs);
    QVERIFY(w->contextUsed() > 0);
    QVERIFY(w->bookPanel()->continueButton()->isEnabled());

    QSignalSpy reset(w.get(), &MainWindow::contextReset);
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadModel(QStringLiteral(LONGSCOPE_TEST_DATA "/arch/llama/model.gguf"));
    QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1, kTimeoutMs);
    QCOMPARE(w->modelSummary().n_vocab, 128);
    QVERIFY(reset.count() >= 1);
    QCOMPARE(w->contextUsed(), 0);
    QVERIFY(!w->bookPanel()->continueButton()->isEnabled()); // nothing of the book in the context
    w->generationPanel()->maxNewTokensBox()->setValue(8);
    sendAndWait(*w, QStringLiteral("hi"));
    QVERIFY2(errorNotes(*w).isEmpty(), qPrintable(errorNotes(*w).join(QLatin1Char('\n'))));
    QVERIFY(w->chatController()->lastSummary().reason != FinishReason::Error);

    // And back, as in the report: the bundled model, a book, then "hi".
    w->loadModel(QStringLiteral(LONGSCOPE_BUNDLED_MODEL));
    QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 2, kTimeoutMs);
    sendAndWait(*w, QStringLiteral("hi"));
    QVERIFY2(errorNotes(*w).isEmpty(), qPrintable(errorNotes(*w).join(QLatin1Char('\n'))));
    QVERIFY(w->errors.isEmpty());
}

// A text file and a truncated GGUF: the error is said once, no progress dialog stays (not even
// the one its show timer would bring back), the status bar does not say "Loading", and the
// old model answers.
void TestMainWindow::failedLoadsLeaveNoDialog()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    const QString text = m_dir.filePath(QStringLiteral("notes.txt"));
    const QString truncated = m_dir.filePath(QStringLiteral("truncated.gguf"));
    {
        QFile f(text);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("Just some notes, not a model.\n");
        QFile model(QStringLiteral(LONGSCOPE_BUNDLED_MODEL));
        QVERIFY(model.open(QIODevice::ReadOnly));
        QFile t(truncated);
        QVERIFY(t.open(QIODevice::WriteOnly));
        t.write(model.read(model.size() / 2));
    }
    QSignalSpy failed(w.get(), &MainWindow::modelLoadFailed);
    w->modalErrors = true;
    int n = 0;
    for (const QString &bad : {text, truncated}) {
        w->loadModel(bad);
        ++n;
        QTRY_VERIFY_WITH_TIMEOUT(failed.count() == n, kTimeoutMs);
        QTest::qWait(700); // past the dialog's minimum duration
        for (QProgressDialog *d : w->findChildren<QProgressDialog *>())
            QVERIFY2(!d->isVisible(), qPrintable(bad));
        QVERIFY(!w->isBusy());
        QVERIFY2(!w->statusBar()->currentMessage().contains(QStringLiteral("Loading")),
                 qPrintable(w->statusBar()->currentMessage()));
        QCOMPARE(w->errors.size(), n);
        QCOMPARE(w->dialogsShownDuringErrors, 0);
        QVERIFY2(w->errors.last().contains(QFileInfo(bad).fileName()), qPrintable(w->errors.last()));
        QVERIFY(w->isModelLoaded());
        QCOMPARE(w->modelSummary().name, QStringLiteral("stories260K"));
    }
    w->generationPanel()->maxNewTokensBox()->setValue(16);
    sendAndWait(*w, QStringLiteral("Once upon a time"));
    QVERIFY(!lastText(*w).isEmpty());
    QVERIFY(errorNotes(*w).isEmpty());
}

void TestMainWindow::shortcutsDoWhatTheySay()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(w.get()));
    // Ctrl+L: the input.
    w->generationPanel()->maxNewTokensBox()->setFocus();
    QTRY_VERIFY(w->generationPanel()->maxNewTokensBox()->hasFocus());
    QTest::keyClick(w.get(), Qt::Key_L, Qt::ControlModifier);
    QTRY_VERIFY(w->chatPanel()->chatInput()->hasFocus());

    // Esc: stops a generation.
    makeSlow(*w);
    w->sendMessage(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!lastText(*w).isEmpty(), kTimeoutMs);
    QVERIFY(w->isBusy());
    QTest::keyClick(w->chatPanel()->chatInput(), Qt::Key_Escape);
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    QCOMPARE(int(w->chatController()->lastSummary().reason), int(FinishReason::Stopped));

    // Ctrl+R: answers again (a new seed), replacing the reply.
    QComboBox *kv = w->longContextPanel()->kvModeBox();
    kv->setCurrentIndex(kv->findData(int(KvMode::Static)));
    w->generationPanel()->maxNewTokensBox()->setValue(16);
    const quint64 seedBefore = w->chatController()->lastSeed();
    QSignalSpy finished(w.get(), &MainWindow::replyFinished);
    QTest::keyClick(w.get(), Qt::Key_R, Qt::ControlModifier);
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, kTimeoutMs);
    QCOMPARE(countRole(*w, Message::Role::Assistant), 1);
    QVERIFY(w->chatController()->lastSeed() != seedBefore);

    // Ctrl+E: exports the conversation.
    w->saveAnswer = m_dir.filePath(QStringLiteral("shortcut-export.md"));
    QTest::keyClick(w.get(), Qt::Key_E, Qt::ControlModifier);
    QFile exported(w->saveAnswer);
    QVERIFY(exported.open(QIODevice::ReadOnly));
    QVERIFY(exported.readAll().contains("Once upon a time"));
}

// The stream button is disabled while the book streams; the focus must not fall to the next
// field (Max new tokens, its value selected) but stay where typing makes sense.
void TestMainWindow::streamingLeavesTheFocusInTheInput()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(w.get()));
    QVERIFY(w->openBook(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt")));
    const QList<QPushButton *> stream = w->bookPanel()->findChildren<QPushButton *>();
    QPushButton *button = nullptr;
    for (QPushButton *b : stream)
        if (b->text() == QStringLiteral("Stream into context"))
            button = b;
    QVERIFY(button);
    button->setFocus(Qt::TabFocusReason);
    QTRY_VERIFY(button->hasFocus());
    QSignalSpy streamed(w.get(), &MainWindow::bookStreamFinished);
    QTest::keyClick(button, Qt::Key_Space);
    QTRY_VERIFY_WITH_TIMEOUT(streamed.count() == 1, kTimeoutMs);
    QWidget *focus = QApplication::focusWidget();
    QVERIFY(focus);
    QVERIFY2(!qobject_cast<QAbstractSpinBox *>(focus), focus->metaObject()->className());
    QVERIFY(w->chatPanel()->chatInput()->hasFocus());
}

// Every control the Tab key reaches in the window has a name for a screen reader (its own,
// its text, or its form label's): on the chat tab, and on the Explore tab with either run
// type. Tab goes through the side panel and the Explore tab as they are laid out: top to
// bottom, left to right; on Explore the left panel (its Run / Stop footer last), then the
// results.
void TestMainWindow::everyFocusableControlHasAName()
{
    using namespace longscope::test;
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->showChat();
    const QList<QWidget *> chat = tabChain(w.get());
    qInfo("chat tab: %d focusable controls", int(chat.size()));
    QVERIFY(chat.size() > 29); // the chat page's 29 and the tab bar, the new RoPE controls
    QVERIFY(chat.contains(w->longContextPanel()->ropeScalingBox()));
    QVERIFY2(unnamedControls(chat).isEmpty(), qPrintable(unnamedControls(chat).join(QStringLiteral(", "))));
    QVERIFY2(tabOrderProblems(chat, w->longContextPanel()).isEmpty(),
             qPrintable(tabOrderProblems(chat, w->longContextPanel()).join(QStringLiteral("; "))));

    w->showExplore();
    ExploreView *view = w->exploreView();
    auto *left = view->findChild<QWidget *>(QStringLiteral("exploreLeftPanel"));
    QVERIFY(left);
    const auto footerLast = [view](QWidget *c) { return view->runFooter()->isAncestorOf(c) ? 1 : 0; };
    for (const ExploreView::RunKind kind : {ExploreView::RunKind::Perplexity, ExploreView::RunKind::Needle}) {
        view->setRunKind(kind);
        const bool needle = kind == ExploreView::RunKind::Needle;
        const QList<QWidget *> chain = tabChain(w.get());
        qInfo("explore tab (%s): %d focusable controls", needle ? "needle" : "perplexity", int(chain.size()));
        QVERIFY2(unnamedControls(chain).isEmpty(), qPrintable(unnamedControls(chain).join(QStringLiteral(", "))));
        // The controls the issue names are all reachable.
        QList<QWidget *> expected{view->runKindBox(), view->settingsList(), view->runButton(), view->cancelButton()};
        if (needle)
            expected << view->needleControls()->taskBox() << view->needleControls()->lengthsEdit()
                     << view->needleControls()->trialsBox() << view->needleRunList() << view->heatmaps()
                     << view->needleLogScaleBox();
        else
            expected << view->runList() << view->plot() << view->runTable() << view->logScaleBox();
        for (QWidget *c : expected)
            QVERIFY2(chain.contains(c), qPrintable(describeControl(c)));
        const QStringList leftProblems = tabOrderProblems(chain, left, footerLast);
        QVERIFY2(leftProblems.isEmpty(), qPrintable(leftProblems.join(QStringLiteral("; "))));
        QWidget *results = needle ? view->needleLogScaleBox()->parentWidget() : view->logScaleBox()->parentWidget();
        const QStringList rightProblems = tabOrderProblems(chain, results);
        QVERIFY2(rightProblems.isEmpty(), qPrintable(rightProblems.join(QStringLiteral("; "))));
        // The left panel first, then the results.
        qsizetype lastLeft = -1;
        qsizetype firstResult = chain.size();
        for (qsizetype i = 0; i < chain.size(); ++i) {
            if (left->isAncestorOf(chain[i]))
                lastLeft = i;
            else if (results->isAncestorOf(chain[i]))
                firstResult = std::min(firstResult, i);
        }
        QVERIFY2(lastLeft < firstResult, qPrintable(describeControl(chain[firstResult])));
    }
}

// The focus never lands in a number box by itself on the Explore tab: not on the way there
// (Ctrl+2 from the chat input), not when Run is pressed and disabled (Stop takes it), not when
// Stop is pressed and the run ends (Run takes it back).
void TestMainWindow::exploreKeepsTheFocusOffNumbers()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(w.get()));
    w->chatPanel()->chatInput()->setFocus();
    QTest::keyClick(w.get(), Qt::Key_2, Qt::ControlModifier);
    QCOMPARE(w->tabs()->currentIndex(), 1);
    const auto notANumber = [] {
        QWidget *f = QApplication::focusWidget();
        return f && !qobject_cast<QAbstractSpinBox *>(f) && !qobject_cast<QAbstractSpinBox *>(f->parentWidget());
    };
    QVERIFY2(notANumber(), QApplication::focusWidget() ? QApplication::focusWidget()->metaObject()->className() : "none");

    ExploreView *view = w->exploreView();
    QVERIFY(w->openExploreBook(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt")));
    view->setContextLength(2048);
    view->setWindowsPerRun(1000); // long enough to press Stop
    view->settingsList()->checkOnly({view->settingsList()->settingsAt(0).label});
    view->runButton()->setFocus(Qt::TabFocusReason);
    QTRY_VERIFY(view->runButton()->hasFocus());
    QTest::keyClick(view->runButton(), Qt::Key_Space);
    QTRY_VERIFY_WITH_TIMEOUT(view->isRunning(), kTimeoutMs);
    QTRY_VERIFY(view->cancelButton()->hasFocus());
    QTest::keyClick(view->cancelButton(), Qt::Key_Space);
    QTRY_VERIFY_WITH_TIMEOUT(!view->isRunning(), kTimeoutMs);
    QVERIFY2(notANumber(), QApplication::focusWidget() ? QApplication::focusWidget()->metaObject()->className() : "none");
    QTRY_VERIFY(view->runButton()->hasFocus());
}

// At 1366x768 and at the window's minimum size, while a run goes, the Explore tab's left panel
// shows Run, Stop (enabled), both progress bars with their whole text (the time left in the
// overall one) and the status line, none of them cut off or outside the window.
void TestMainWindow::exploreLeftPanelUsableWhileRunning()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    ExploreView *view = w->exploreView();
    QVERIFY(w->openExploreBook(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt")));
    view->setContextLength(2048);
    view->setWindowsPerRun(1000);
    QVERIFY(view->run());
    QTRY_VERIFY_WITH_TIMEOUT(view->overallProgress()->text().contains(QStringLiteral("min left")) ||
                                 view->overallProgress()->text().contains(QStringLiteral("s left")) ||
                                 view->overallProgress()->text().contains(QStringLiteral("h ")),
                             kTimeoutMs);
    QVERIFY(view->isRunning());
    w->resize(996, 568);
    QCoreApplication::processEvents();
    const QSize minimum = w->minimumSizeHint().expandedTo(w->minimumSize());
    qInfo("minimum window size while Explore runs: %dx%d", minimum.width(), minimum.height());
    for (const QSize size : {QSize(1366, 768), minimum}) {
        w->resize(size);
        QTRY_COMPARE(w->size(), size);
        QCoreApplication::processEvents();
        const QString where = QStringLiteral("%1x%2").arg(size.width()).arg(size.height());
        saveArtifact(*w, m_dir.path(), QStringLiteral("explore-running-%1.png").arg(where));
        const QRect window = w->rect();
        const QRect panel(view->runFooter()->parentWidget()->mapTo(w.get(), QPoint(0, 0)),
                          view->runFooter()->parentWidget()->size());
        QVERIFY2(window.contains(panel), qPrintable(where));
        QVERIFY(view->cancelButton()->isEnabled());
        QList<QWidget *> shown{view->runButton(), view->cancelButton(), view->runProgress(), view->overallProgress()};
        const QList<QLabel *> labels = view->runFooter()->findChildren<QLabel *>();
        for (QLabel *l : labels)
            if (!l->text().isEmpty())
                shown << l;
        for (QWidget *c : shown) {
            const QString what = where + QLatin1Char(' ') + QString::fromLatin1(c->metaObject()->className());
            QVERIFY2(c->isVisible(), qPrintable(what));
            const QRect r(c->mapTo(w.get(), QPoint(0, 0)), c->size());
            QVERIFY2(panel.contains(r) && window.contains(r), qPrintable(what));
            QVERIFY2(c->height() >= c->minimumSizeHint().height(), qPrintable(what));
            if (auto *bar = qobject_cast<QProgressBar *>(c))
                QVERIFY2(bar->fontMetrics().horizontalAdvance(bar->text()) + 8 <= bar->width(),
                         qPrintable(what + QLatin1Char(' ') + bar->text()));
            if (auto *label = qobject_cast<QLabel *>(c))
                QVERIFY2(label->heightForWidth(label->width()) <= label->height() ||
                             (!label->wordWrap() && label->fontMetrics().horizontalAdvance(label->text()) <= label->width()),
                         qPrintable(what + QLatin1Char(' ') + label->text()));
        }
        QVERIFY2(view->overallProgress()->text().contains(QStringLiteral("left")), qPrintable(view->overallProgress()->text()));
    }
    w->stop();
    QTRY_VERIFY_WITH_TIMEOUT(!view->isRunning(), kTimeoutMs);
}

// A reply in the chat: the Explore tab says so with a Stop of its own that ends it.
void TestMainWindow::theOtherTabSaysWhoHoldsTheEngine()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QVERIFY(w->exploreBusyText().isEmpty());
    QVERIFY(w->chatBusyText().isEmpty());
    makeSlow(*w);
    w->sendMessage(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!lastText(*w).isEmpty(), kTimeoutMs);
    w->resize(1366, 768);
    saveArtifact(*w, m_dir.path(), QStringLiteral("laptop-generating.png"));
    w->showExplore();
    QVERIFY2(w->exploreBusyText().contains(QStringLiteral("chat")), qPrintable(w->exploreBusyText()));
    saveArtifact(*w, m_dir.path(), QStringLiteral("laptop-explore-busy.png"));
    QVERIFY(w->exploreBusyBar()->isVisible());
    auto *stop = w->exploreBusyBar()->findChild<QPushButton *>();
    QVERIFY(stop && stop->isEnabled());
    QTest::mouseClick(stop, Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!w->isBusy(), kTimeoutMs);
    QCOMPARE(int(w->chatController()->lastSummary().reason), int(FinishReason::Stopped));
    QVERIFY(w->exploreBusyText().isEmpty());
}

// An error longer than the status bar: shown elided, the whole text kept (the tooltip, and
// the conversation's note).
void TestMainWindow::longStatusMessagesKeepTheirText()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    w->resize(1000, 700);
    QCoreApplication::processEvents();
    QSpinBox *limit = w->longContextPanel()->contextLimitBox();
    limit->setValue(24);
    QComboBox *overflow = w->longContextPanel()->overflowBox();
    overflow->setCurrentIndex(overflow->findData(int(OverflowPolicy::Error)));
    w->generationPanel()->maxNewTokensBox()->setValue(8);
    sendAndWait(*w, QStringLiteral("A long message about a little girl named Lily who loved to play outside."));
    QCOMPARE(errorNotes(*w).size(), 1);
    const QString full = w->lastStatusText();
    QVERIFY2(full.contains(QStringLiteral("Max new tokens")), qPrintable(full));
    QVERIFY2(errorNotes(*w).first().contains(QStringLiteral("drop oldest turns")), qPrintable(errorNotes(*w).first()));
    const QString shown = w->statusBar()->currentMessage();
    QVERIFY(shown.size() < full.size());
    QCOMPARE(w->statusBar()->toolTip(), full);
}

namespace {

// The window's plain text for its model header, and Model Info's, after View > Model Info.
QString modelInfoText(TestWindow &w)
{
    QAction *info = nullptr;
    for (QAction *a : w.findChildren<QAction *>())
        if (a->text() == QStringLiteral("Model &Info…"))
            info = a;
    if (!info)
        return QStringLiteral("no Model Info action");
    info->trigger();
    return w.modelInfoDialog() ? w.modelInfoDialog()->text() : QStringLiteral("no dialog");
}

// The tokenizer.* keys of a vocabulary GGUF, for a model written with it.
std::vector<std::pair<std::string, GgufValue>> tokenizerKeys(const GgufFile &g)
{
    std::vector<std::pair<std::string, GgufValue>> kv;
    for (const std::string &key : g.metadata_order())
        if (key.rfind("tokenizer.", 0) == 0)
            kv.emplace_back(key, *g.find(key));
    return kv;
}

// The text of token `id` as the GGUF's own list holds it.
QString ggufToken(const GgufFile &g, int64_t id)
{
    const GgufValue *tokens = g.find("tokenizer.ggml.tokens");
    const GgufArray *list = tokens ? tokens->as_array() : nullptr;
    const std::string *text = list && id >= 0 && size_t(id) < list->items.size() ? list->items[size_t(id)].as_string() : nullptr;
    return text ? QString::fromStdString(*text) : QString();
}

} // namespace

// The bundled model's header and Model Info say what its GGUF file says: the llama family, a
// sentencepiece vocabulary (tokenizer.ggml.model "llama") of 512 tokens, generation ending at
// its EOS token, no RoPE scaling (no rope.scaling key); the same texts as `longscope-cli
// info`. A method chosen in the long-context panel is then the one said, with the model's own.
void TestMainWindow::modelHeaderSaysFamilyTokenizerAndRope()
{
    const auto g = GgufFile::open(LONGSCOPE_BUNDLED_MODEL);
    QCOMPARE(QString::fromStdString(g->get_string("general.architecture").value_or("")), QStringLiteral("llama"));
    QCOMPARE(QString::fromStdString(g->get_string("tokenizer.ggml.model").value_or("")), QStringLiteral("llama"));
    QVERIFY(!g->find("llama.rope.scaling.type"));
    const int64_t eos = g->get_int("tokenizer.ggml.eos_token_id").value_or(-1);
    QVERIFY(eos >= 0);
    const QString eosText = QStringLiteral("%1 %2").arg(eos).arg(ggufToken(*g, eos));

    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    const QString header = w->modelHeaderText();
    for (const QString &part : {QStringLiteral("stories260K"), QStringLiteral(" llama "), QStringLiteral("sentencepiece"),
                                QStringLiteral("ends at ") + eosText, QStringLiteral("RoPE none")})
        QVERIFY2(header.contains(part), qPrintable(part + QStringLiteral(" in: ") + header));
    const QString info = modelInfoText(*w);
    for (const QString &line : {QStringLiteral("Family: llama"), QStringLiteral("Tokenizer: sentencepiece, 512 tokens"),
                                QStringLiteral("End of generation: ") + eosText, QStringLiteral("RoPE scaling: none")})
        QVERIFY2(info.split(QLatin1Char('\n')).contains(line), qPrintable(line + QStringLiteral(" in:\n") + info));
    QVERIFY(w->modelInfoDialog()->isVisible());
    QVERIFY2(longscope::test::unnamedControls(longscope::test::tabChain(w->modelInfoDialog())).isEmpty(), "Model Info");

    // The CLI's info says the same (one description, in the engine).
    QProcess cli;
    cli.start(QStringLiteral(LONGSCOPE_CLI_PATH), {QStringLiteral("info"), QStringLiteral("-m"),
                                                   QStringLiteral(LONGSCOPE_BUNDLED_MODEL)});
    QVERIFY(cli.waitForFinished(kTimeoutMs));
    const QString printed = QString::fromUtf8(cli.readAllStandardOutput());
    for (const QString &line : {QStringLiteral("family:           llama"), QStringLiteral("end of generation: ") + eosText,
                                QStringLiteral("tokenizer:        sentencepiece"), QStringLiteral("scaling none")})
        QVERIFY2(printed.contains(line), qPrintable(line + QStringLiteral(" in:\n") + printed));

    // Linear by 2 chosen in the panel: said in the header and in the open Model Info.
    QComboBox *method = w->longContextPanel()->ropeScalingBox();
    method->setCurrentIndex(method->findData(int(RopeScalingType::Linear)));
    w->longContextPanel()->ropeFactorBox()->setValue(2.0);
    const QString chosen = QStringLiteral("linear x2; the model's own: none");
    QVERIFY2(w->modelHeaderText().contains(QStringLiteral("RoPE ") + chosen), qPrintable(w->modelHeaderText()));
    QVERIFY2(w->modelInfoDialog()->text().contains(QStringLiteral("RoPE scaling: ") + chosen),
             qPrintable(w->modelInfoDialog()->text()));
    w->modelInfoDialog()->close();
}

// A byte-level BPE model (llama.cpp's GPT-2 vocabulary fixture in a small random qwen2 model
// with YaRN scaling by 4 from 256 tokens, written here): the header and Model Info say the
// family, the BPE with its pre-tokenizer, the end-of-generation token and the YaRN scaling, as
// the file's keys say them.
void TestMainWindow::modelHeaderOfAByteLevelBpeModel()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string vocabPath = longscope::test::unpack_vocab("gpt-2", dir.path().toStdString());
    const auto vocab = GgufFile::open(vocabPath);
    const QString pre = QString::fromStdString(vocab->get_string("tokenizer.ggml.pre").value_or(""));
    QCOMPARE(QString::fromStdString(vocab->get_string("tokenizer.ggml.model").value_or("")), QStringLiteral("gpt2"));
    const int64_t eos = vocab->get_int("tokenizer.ggml.eos_token_id").value_or(-1);
    QVERIFY(eos >= 0);
    const QString eosText = QStringLiteral("%1 %2").arg(eos).arg(ggufToken(*vocab, eos));

    RandomModelSpec spec;
    spec.name = "bpe-qwen2";
    spec.family = ArchFamily::Qwen2;
    spec.tied_embeddings = true;
    spec.n_embd = 16;
    spec.n_layer = 1;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.n_ff = 32;
    spec.n_vocab = int(vocab->find("tokenizer.ggml.tokens")->as_array()->items.size());
    spec.n_ctx = 1024;
    spec.rope.type = RopeScalingType::Yarn;
    spec.rope.factor = 4.0f;
    spec.rope.orig_ctx = 256;
    spec.tokenizer = tokenizerKeys(*vocab);
    const QString path = dir.filePath(QStringLiteral("bpe-qwen2.gguf"));
    write_random_model_file(path.toStdString(), spec);

    auto w = makeWindow(path);
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    QCOMPARE(w->modelSummary().name, QStringLiteral("bpe-qwen2"));
    const QString bpe = QStringLiteral("byte-level BPE (pre-tokenizer %1)").arg(pre);
    const QString yarn = QStringLiteral("yarn x4 (original context 256)");
    const QString header = w->modelHeaderText();
    for (const QString &part : {QStringLiteral(" qwen2 "), bpe, QStringLiteral("ends at ") + eosText,
                                QStringLiteral("RoPE ") + yarn})
        QVERIFY2(header.contains(part), qPrintable(part + QStringLiteral(" in: ") + header));
    const QString info = modelInfoText(*w);
    for (const QString &line : {QStringLiteral("Family: qwen2"), QStringLiteral("Tokenizer: %1, %L2 tokens").arg(bpe).arg(spec.n_vocab),
                                QStringLiteral("End of generation: ") + eosText, QStringLiteral("RoPE scaling: ") + yarn})
        QVERIFY2(info.split(QLatin1Char('\n')).contains(line), qPrintable(line + QStringLiteral(" in:\n") + info));
    // The panel's first choice names the model's own scaling.
    QVERIFY2(w->longContextPanel()->ropeScalingBox()->itemText(0).contains(yarn),
             qPrintable(w->longContextPanel()->ropeScalingBox()->itemText(0)));
    w->modelInfoDialog()->close();
}

// The RoPE method chosen in the long-context panel reaches the worker's settings at once and
// the next step runs with it (its metrics say so); what it computes is what the engine computes
// with the same settings directly: the greedy reply to the same chat, and the perplexity of a
// book scored from the Explore tab with "Add current settings". Linear by 2 and none differ.
void TestMainWindow::ropeScalingSwitchesLive()
{
    auto w = makeWindow();
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kTimeoutMs);
    GenerationParams params = w->generationPanel()->params();
    params.do_sample = false;
    params.random_seed = false;
    params.seed = 7;
    params.max_new_tokens = 24;
    w->generationPanel()->setParams(params);
    QVector<StepMetrics> steps;
    connect(w->worker(), &EngineWorker::stepMetrics, w.get(), [&steps](const StepMetrics &m) { steps << m; });

    const QString question = QStringLiteral("Once upon a time");
    QHash<int, QString> replies; // by method (-1: the model's own)
    QHash<int, longscope::Settings> used;
    LongContextPanel *panel = w->longContextPanel();
    for (const int method : {-1, int(RopeScalingType::Linear)}) {
        w->clearConversation();
        panel->ropeScalingBox()->setCurrentIndex(panel->ropeScalingBox()->findData(method));
        if (method >= 0)
            panel->ropeFactorBox()->setValue(2.0);
        const longscope::Settings asked = panel->settings();
        // At once in the worker's settings.
        QCOMPARE(w->worker()->settings(), asked);
        QCOMPARE(asked.rope.scaling.has_value(), method >= 0);
        if (method >= 0) {
            QCOMPARE(*asked.rope.scaling, RopeScalingType::Linear);
            QCOMPARE(asked.rope.scaling_factor, 2.0f);
        }
        steps.clear();
        sendAndWait(*w, question);
        QVERIFY(w->chatController()->lastSummary().reason != FinishReason::Error);
        // Every step of the reply ran with them.
        QTRY_VERIFY(!steps.isEmpty());
        for (const StepMetrics &m : steps) {
            QCOMPARE(m.settings.rope.scaling, asked.rope.scaling);
            QCOMPARE(m.settings.rope.scaling_factor, asked.rope.scaling_factor);
        }
        replies.insert(method, lastText(*w));
        used.insert(method, asked);
    }
    QVERIFY2(replies.value(-1) != replies.value(int(RopeScalingType::Linear)), qPrintable(replies.value(-1)));

    // The engine with the same settings, directly: the same greedy replies.
    const auto model = Model::load(LONGSCOPE_BUNDLED_MODEL);
    std::vector<ChatMessage> messages;
    if (!w->chatPanel()->systemPrompt().trimmed().isEmpty())
        messages.push_back({ChatMessage::Role::System, w->chatPanel()->systemPrompt().toStdString()});
    messages.push_back({ChatMessage::Role::User, question.toStdString()});
    for (auto it = used.cbegin(); it != used.cend(); ++it) {
        SessionOptions options;
        options.settings = it.value();
        options.settings.context_limit = w->contextLimit();
        Session session(*model, options);
        const ChatPrompt prompt = build_chat_prompt(*model, messages, session.n_ctx(),
                                                    std::min(params.max_new_tokens, session.n_ctx() / 2),
                                                    options.settings.overflow);
        GenerateRequest request;
        request.prompt = prompt.tokens;
        request.max_new_tokens = params.max_new_tokens;
        request.sampling.temperature = 0.0f;
        request.sampling.top_k = params.top_k;
        request.sampling.top_p = params.top_p;
        request.sampling.repeat_penalty = params.repetition_penalty;
        request.sampling.seed = params.seed;
        const GenerateResult direct = generate(session, request);
        QCOMPARE(replies.value(it.key()).trimmed(), QString::fromStdString(direct.text).trimmed());
    }

    // The Explore tab's run with the panel's settings ("Add current settings") and with the
    // model's own: perplexities that differ, each the engine's for the same settings.
    ExploreView *view = w->exploreView();
    QVERIFY(w->openExploreBook(QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt")));
    view->setContextLength(256);
    view->setWindowsPerRun(2);
    view->settingsList()->setPresets({{QStringLiteral("none"), used.value(-1)}});
    QPushButton *add = nullptr;
    for (QPushButton *b : view->findChildren<QPushButton *>())
        if (b->text() == QStringLiteral("Add current settings"))
            add = b;
    QVERIFY(add && add->text() == QStringLiteral("Add current settings"));
    add->click();
    QCOMPARE(view->settingsList()->checkedSettings().size(), 2);
    QSignalSpy finished(view, &ExploreView::explorationFinished);
    QVERIFY(view->run());
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, kTimeoutMs);
    QVERIFY2(view->lastError().isEmpty(), qPrintable(view->lastError()));
    const QVector<PerplexityRunResult> runs = view->plottedRuns();
    QCOMPARE(runs.size(), 2);
    const std::vector<int32_t> tokens = model->tokenizer().encode(view->book().text.toStdString(), false);
    for (const PerplexityRunResult &run : runs) {
        PerplexityOptions options;
        options.ctx = 256;
        options.bucket = view->bucketSize();
        options.settings = run.settings;
        const std::span<const int32_t> scored =
            std::span<const int32_t>(tokens).first(size_t(std::min<qint64>(qint64(tokens.size()), view->tokensPerRun())));
        const PerplexityResult direct = perplexity(*model, scored, options);
        QCOMPARE(run.n_scored, qint64(direct.n_scored));
        QVERIFY2(std::abs(run.mean_nll - direct.mean_nll) <= 1e-9 * std::abs(direct.mean_nll),
                 qPrintable(QStringLiteral("%1: %2 vs %3").arg(run.label).arg(run.mean_nll, 0, 'g', 17).arg(direct.mean_nll, 0, 'g', 17)));
    }
    QCOMPARE(runs[1].settings.rope.scaling, std::optional<RopeScalingType>(RopeScalingType::Linear));
    QVERIFY2(std::abs(runs[0].mean_nll - runs[1].mean_nll) > 1e-3,
             qPrintable(QStringLiteral("%1 %2").arg(runs[0].mean_nll).arg(runs[1].mean_nll)));
}

QTEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
