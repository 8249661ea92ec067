// The main window end to end with the bundled model, off screen: load, chat through the
// input, stop, live settings mid-generation, plots and their exports, bad models and books,
// books streamed and continued, clear, regenerate, saved conversations, and closing while
// the worker is busy.
#include "core/chat_model.h"
#include "core/conversation_store.h"
#include "core/settings_json.h"
#include "widgets/book_panel.h"
#include "widgets/chat_panel.h"
#include "widgets/chat_input.h"
#include "widgets/chat_view.h"
#include "widgets/exports.h"
#include "widgets/generation_panel.h"
#include "widgets/long_context_panel.h"
#include "widgets/main_window.h"
#include "widgets/metrics_plots.h"

#include "longscope/backend.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDropEvent>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QStandardItemModel>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QElapsedTimer>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QUrl>

#include <memory>

using namespace longscope;
using namespace longscope::ui;

namespace {

// QTEST_MAIN builds the QApplication in main(); the platform has to be chosen before that.
const bool kOffscreen = [] {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    return true;
}();

constexpr int kTimeoutMs = 60000;

// Message boxes and file dialogs answered by the test instead of a person.
class TestWindow : public MainWindow {
public:
    using MainWindow::MainWindow;

    QStringList errors;
    QStringList questions;
    bool answer = true;

protected:
    void showError(const QString &title, const QString &text) override { errors << title + QStringLiteral(": ") + text; }
    bool askConfirmation(const QString &, const QString &text) override
    {
        questions << text;
        return answer;
    }
    QString chooseOpenFile(const QString &, const QString &) override { return {}; }
    QString chooseDirectory(const QString &) override { return {}; }
    QString chooseSaveFile(const QString &, const QString &, const QString &) override { return {}; }
};

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
    void clearEmptiesTheView();
    void regenerateReplacesTheReply();
    void conversationsAreSavedReopenedAndDeleted();
    void closingMidGenerationIsClean();
    void hugeSystemPromptShowsQuickly();
    void dataProblemsSaidAndSettingsBackedUp();
};

void TestMainWindow::initTestCase()
{
    QVERIFY(kOffscreen);
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
    bool cuda = false;
    for (const longscope::BackendStatus &b : longscope::probe_backends())
        if (b.name == "CUDA")
            cuda = b.available;
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
    // quarter left free for the conversation.
    QCOMPARE(w->longContextPanel()->settings().overflow, OverflowPolicy::HeadTail);
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

QTEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
