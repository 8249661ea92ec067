// ChatController without a widget: a worker on its own thread with the bundled stories260K,
// one turn sent, streamed into the conversation and its model, saved with the settings;
// Regenerate answers again; a queued Stop ends a long reply; Clear starts over.
#include "core/chat_controller.h"
#include "core/chat_model.h"
#include "core/conversation_store.h"
#include "core/engine_worker.h"
#include "core/settings_json.h"

#include <QSet>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

using namespace longscope::ui;

namespace {

const QString k_model = QStringLiteral(LONGSCOPE_BUNDLED_MODEL);

} // namespace

class TestChatController : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QThread m_thread;
    EngineWorker *m_worker = nullptr;
    ConversationStore *m_store = nullptr;
    ChatController *m_chat = nullptr;
    ChatController::Inputs m_inputs;

    bool waitForReply(QSignalSpy &finished, int count = 1)
    {
        return QTest::qWaitFor([&] { return finished.size() >= count; }, 120000);
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_worker = new EngineWorker(2);
        m_worker->moveToThread(&m_thread);
        m_thread.start();
        QSignalSpy loaded(m_worker, &EngineWorker::modelLoaded);
        QMetaObject::invokeMethod(m_worker, [w = m_worker] { w->loadModel(k_model); }, Qt::QueuedConnection);
        QVERIFY(loaded.wait(120000));

        m_store = new ConversationStore(m_dir.path(), this);
        m_chat = new ChatController(m_store, this);
        m_chat->setWorker(m_worker);
        m_inputs.systemPrompt = QStringLiteral("Tell a story.");
        m_inputs.params.max_new_tokens = 12;
        m_inputs.params.do_sample = false;
        m_inputs.params.repetition_penalty = 1.0f;
        m_inputs.settings.rope.ntk_alpha = 2.0f;
        m_inputs.modelPath = k_model;
        m_inputs.contextLimit = 512;
        m_chat->setInputs([this] { return m_inputs; });
    }

    void cleanupTestCase()
    {
        m_worker->requestStop();
        m_thread.quit();
        m_thread.wait();
        delete m_worker;
    }

    void oneTurn()
    {
        QSignalSpy started(m_chat, &ChatController::replyStarted);
        QSignalSpy finished(m_chat, &ChatController::replyFinished);
        QSignalSpy saved(m_chat, &ChatController::saved);
        QVERIFY(m_chat->send(QStringLiteral("Once upon a time")));
        QCOMPARE(started.size(), 1);
        QVERIFY(m_chat->isReplying());
        QVERIFY(waitForReply(finished));
        QVERIFY(!m_chat->isReplying());
        const GenerationSummary summary = m_chat->lastSummary();
        QCOMPARE(summary.reason, FinishReason::MaxTokens);
        QCOMPARE(summary.generated_tokens, 12);

        const QVector<Message> &msgs = m_chat->conversation().messages();
        QCOMPARE(msgs.size(), 2);
        QCOMPARE(msgs[0].role, Message::Role::User);
        QCOMPARE(msgs[1].role, Message::Role::Assistant);
        QCOMPARE(msgs[1].text, summary.text);
        QCOMPARE(m_chat->model()->count(), 2);
        QCOMPARE(m_chat->model()->at(1).text, summary.text);

        // Saved after the reply, with the inputs it was asked with.
        QCOMPARE(saved.size(), 1);
        const std::optional<Conversation> back = m_store->load(m_chat->conversation().id());
        QVERIFY(back);
        QCOMPARE(back->systemPrompt(), m_inputs.systemPrompt);
        QCOMPARE(back->modelPath(), k_model);
        const std::optional<longscope::Settings> s =
            settingsFromJson(back->settingsSnapshot().value(QStringLiteral("long_context")).toObject());
        QVERIFY(s);
        QVERIFY(*s == m_inputs.settings);
    }

    void regenerateAnswersAgain()
    {
        const QString before = m_chat->conversation().messages().last().text;
        QSignalSpy finished(m_chat, &ChatController::replyFinished);
        QVERIFY(m_chat->regenerate());
        QVERIFY(waitForReply(finished));
        const QVector<Message> &msgs = m_chat->conversation().messages();
        QCOMPARE(msgs.size(), 2);
        QCOMPARE(msgs[1].text, before); // greedy: the same reply
    }

    // Regenerate samples with a new seed each time unless one is pinned: the seeds differ and
    // so (at temperature 1) do the replies; a pinned seed gives the same reply again.
    void regenerateDrawsANewSeed()
    {
        const GenerationParams saved = m_inputs.params;
        m_inputs.params.do_sample = true;
        m_inputs.params.temperature = 1.0f;
        m_inputs.params.top_k = 40;
        m_inputs.params.top_p = 1.0f;
        m_inputs.params.max_new_tokens = 24;
        m_inputs.params.random_seed = true;
        QSet<quint64> seeds;
        QSet<QString> replies;
        for (int i = 0; i < 3; ++i) {
            QSignalSpy finished(m_chat, &ChatController::replyFinished);
            QVERIFY(m_chat->regenerate());
            QVERIFY(waitForReply(finished));
            seeds.insert(m_chat->lastSeed());
            replies.insert(m_chat->conversation().messages().last().text);
        }
        QCOMPARE(seeds.size(), 3);
        QVERIFY2(replies.size() > 1, qPrintable(QStringList(replies.values()).join(QStringLiteral(" | "))));

        m_inputs.params.random_seed = false;
        m_inputs.params.seed = 1234;
        QStringList pinned;
        for (int i = 0; i < 2; ++i) {
            QSignalSpy finished(m_chat, &ChatController::replyFinished);
            QVERIFY(m_chat->regenerate());
            QVERIFY(waitForReply(finished));
            QCOMPARE(m_chat->lastSeed(), quint64(1234));
            pinned << m_chat->conversation().messages().last().text;
        }
        QCOMPARE(pinned[0], pinned[1]);
        m_inputs.params = saved;
    }

    void stopEndsALongReply()
    {
        m_inputs.params.max_new_tokens = 100000;
        m_inputs.settings.context_limit = 8192;
        m_worker->setSettings(m_inputs.settings);
        QSignalSpy finished(m_chat, &ChatController::replyFinished);
        // Stop as the UI does, from this thread, once text streams.
        auto conn = connect(m_chat->model(), &ChatModel::dataChanged, this, [this] { m_worker->requestStop(); });
        QVERIFY(m_chat->send(QStringLiteral("Lily went")));
        QVERIFY(waitForReply(finished));
        disconnect(conn);
        const GenerationSummary summary = m_chat->lastSummary();
        QVERIFY(summary.reason == FinishReason::Stopped || summary.reason == FinishReason::ContextFull);
        if (summary.reason == FinishReason::Stopped)
            QVERIFY(summary.generated_tokens < 8000);
        m_inputs.params.max_new_tokens = 12;
    }

    void clearStartsOver()
    {
        const QString old = m_chat->conversation().id();
        m_chat->newConversation();
        QVERIFY(m_chat->conversation().isEmpty());
        QCOMPARE(m_chat->model()->count(), 0);
        QVERIFY(m_chat->conversation().id() != old);
        QVERIFY(m_store->contains(old)); // the old one stays saved
        QVERIFY(!m_chat->regenerate()); // nothing to answer
    }
};

QTEST_GUILESS_MAIN(TestChatController)
#include "tst_chat_controller.moc"
