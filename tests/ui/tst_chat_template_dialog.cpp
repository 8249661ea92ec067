// "Chat template…" off screen with the engine worker and the bundled stories260K on a real
// thread: the prompt shown is jinja2's rendering of the conversation (tests/data/templates)
// with the BOS the tokenizer adds in front; a built-in or a custom template can be picked; an
// invalid template shows the renderer's error inline and is not taken; the choice is kept per
// model path in the settings.
#include "support/read_file.h"

#include "focus_chain.h"
#include "offscreen.h"

#include "core/chat_template_choice.h"
#include "core/engine_worker.h"
#include "widgets/chat_template_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <nlohmann/json.hpp>

using namespace longscope::ui;
using longscope::test::read_file;

namespace {

constexpr int kTimeoutMs = 60000;
const std::string dir = LONGSCOPE_TEST_DATA "/templates/";

// jinja2's output for the "no_system" conversation (user, assistant, user).
QString jinja2Output(const std::string &tmpl)
{
    for (const nlohmann::json &e : nlohmann::json::parse(read_file(dir + "expected.json")))
        if (e["template"] == tmpl && e["conversation"] == "no_system")
            return QString::fromStdString(e["output"].get<std::string>());
    return QStringLiteral("<missing>");
}

QVector<ChatTurn> noSystemTurns()
{
    return {{ChatTurn::Role::User, QStringLiteral("Hello")},
            {ChatTurn::Role::Assistant, QStringLiteral("Hi there")},
            {ChatTurn::Role::User, QStringLiteral("How are you?")}};
}

} // namespace

class TestChatTemplateDialog : public QObject {
    Q_OBJECT
    QThread m_thread;
    EngineWorker *m_worker = nullptr;
    ModelSummary m_summary;
    QTemporaryDir m_tmp;

    bool okEnabled(ChatTemplateDialog *d)
    {
        return d->findChild<QDialogButtonBox *>()->button(QDialogButtonBox::Ok)->isEnabled();
    }

    void select(ChatTemplateDialog *d, const QString &data)
    {
        const int index = d->sourceBox()->findData(data);
        QVERIFY(index >= 0);
        d->sourceBox()->setCurrentIndex(index);
    }

private slots:
    void initTestCase()
    {
        m_worker = new EngineWorker(2);
        m_worker->moveToThread(&m_thread);
        connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
        m_thread.start();
        QSignalSpy loaded(m_worker, &EngineWorker::modelLoaded);
        QMetaObject::invokeMethod(m_worker, "loadModel", Qt::QueuedConnection,
                                  Q_ARG(QString, QStringLiteral(LONGSCOPE_BUNDLED_MODEL)));
        QVERIFY(loaded.wait(kTimeoutMs));
        m_summary = loaded.first().first().value<ModelSummary>();
        QVERIFY(m_summary.chat_template.isEmpty()); // stories260K carries none
    }

    void cleanupTestCase()
    {
        m_thread.quit();
        m_thread.wait();
    }

    void builtin_and_custom_prompts_are_what_jinja2_renders()
    {
        QSettings settings(m_tmp.filePath(QStringLiteral("a.ini")), QSettings::IniFormat);
        ChatTemplateDialog *d =
            openChatTemplateDialog(nullptr, m_worker, noSystemTurns(), settings, m_summary, QString());
        // The model has no template: a named built-in renders, and the dialog says which and why.
        QTRY_VERIFY_WITH_TIMEOUT(d->inUseLabel()->text().contains(QStringLiteral("built-in")), kTimeoutMs);
        QVERIFY(okEnabled(d));

        select(d, QStringLiteral("chatml"));
        // stories260K's tokenizer adds the BOS <s> itself: it is shown in front of the text.
        const QString chatml = QStringLiteral("<s>") + jinja2Output("builtin/chatml.jinja");
        QTRY_COMPARE_WITH_TIMEOUT(d->promptView()->toPlainText(), chatml, kTimeoutMs);
        QVERIFY(d->inUseLabel()->text().contains(QStringLiteral("chatml")));

        // A custom template: Qwen 2.5's, pasted in.
        select(d, QStringLiteral("custom"));
        d->templateEdit()->setPlainText(QString::fromStdString(
            read_file(dir + "corpus/llama.cpp-templates__Qwen-Qwen2.5-7B-Instruct.jinja")));
        d->renderNow();
        const QString qwen =
            QStringLiteral("<s>") + jinja2Output("corpus/llama.cpp-templates__Qwen-Qwen2.5-7B-Instruct.jinja");
        QTRY_COMPARE_WITH_TIMEOUT(d->promptView()->toPlainText(), qwen, kTimeoutMs);
        QVERIFY(d->errorLabel()->isHidden());

        // OK keeps it for this model's path.
        QSignalSpy accepted(d, &ChatTemplateDialog::choiceAccepted);
        d->accept();
        QCOMPARE(accepted.size(), 1);
        const ChatTemplateChoice kept = loadChatTemplateChoice(settings, m_summary.path);
        QCOMPARE(kept.kind, ChatTemplateChoice::Kind::Custom);
        QVERIFY(kept.custom.contains(QStringLiteral("You are Qwen")));
        QCOMPARE(loadChatTemplateChoice(settings, m_summary.path + QStringLiteral(".other")).kind,
                 ChatTemplateChoice::Kind::Model);
    }

    void invalid_template_shows_the_error_and_keeps_the_previous()
    {
        QSettings settings(m_tmp.filePath(QStringLiteral("b.ini")), QSettings::IniFormat);
        ChatTemplateChoice llama3;
        llama3.kind = ChatTemplateChoice::Kind::Builtin;
        llama3.builtin = QStringLiteral("llama-3");
        saveChatTemplateChoice(settings, m_summary.path, llama3);

        ChatTemplateDialog *d =
            openChatTemplateDialog(nullptr, m_worker, noSystemTurns(), settings, m_summary, QString());
        QCOMPARE(d->candidate(), llama3); // what the settings hold for this model
        QTRY_VERIFY_WITH_TIMEOUT(
            d->promptView()->toPlainText().contains(QStringLiteral("<|start_header_id|>user<|end_header_id|>")),
            kTimeoutMs);
        const QString before = d->promptView()->toPlainText();

        select(d, QStringLiteral("custom"));
        d->templateEdit()->setPlainText(QStringLiteral("{% for m in messages %}{{ m.content | no_such_filter }}"));
        d->renderNow();
        QTRY_VERIFY_WITH_TIMEOUT(d->errorLabel()->text().contains(QStringLiteral("no_such_filter")), kTimeoutMs);
        QVERIFY(!d->errorLabel()->isHidden());
        QVERIFY2(d->errorLabel()->text().contains(QStringLiteral("line 1")), qPrintable(d->errorLabel()->text()));
        QCOMPARE(d->promptView()->toPlainText(), before); // the last good rendering stays
        QVERIFY(!okEnabled(d));
        d->accept(); // refused: the dialog stays open, nothing is stored
        QVERIFY(d->isVisible());
        QCOMPARE(loadChatTemplateChoice(settings, m_summary.path), llama3);
        QCOMPARE(d->accepted(), llama3);

        // A raise_exception in the template: its words are shown.
        d->templateEdit()->setPlainText(QStringLiteral("{{ raise_exception('Only user turns, please') }}"));
        d->renderNow();
        QTRY_VERIFY_WITH_TIMEOUT(d->errorLabel()->text().contains(QStringLiteral("Only user turns, please")),
                                 kTimeoutMs);
        d->reject();
        QCOMPARE(loadChatTemplateChoice(settings, m_summary.path), llama3);
    }

    // Every control of the dialog is reached by Tab, top to bottom, and has a name for a
    // screen reader; Tab in the template texts moves on instead of typing a tab.
    void keyboard_reaches_every_named_control()
    {
        using namespace longscope::test;
        QSettings settings(m_tmp.filePath(QStringLiteral("d.ini")), QSettings::IniFormat);
        ChatTemplateDialog *d =
            openChatTemplateDialog(nullptr, m_worker, noSystemTurns(), settings, m_summary, QString());
        select(d, QStringLiteral("custom"));
        const QList<QWidget *> chain = tabChain(d);
        QVERIFY(chain.contains(d->sourceBox()) && chain.contains(d->templateEdit()) && chain.contains(d->promptView()));
        QVERIFY(chain.size() >= 5); // the source, both texts, OK and Cancel
        QVERIFY2(unnamedControls(chain).isEmpty(), qPrintable(unnamedControls(chain).join(QStringLiteral(", "))));
        QVERIFY2(tabOrderProblems(chain, d).isEmpty(), qPrintable(tabOrderProblems(chain, d).join(QStringLiteral("; "))));
        QVERIFY(d->templateEdit()->tabChangesFocus());
        QVERIFY(d->promptView()->tabChangesFocus());
        d->reject();
    }

    void choice_round_trip()
    {
        QSettings settings(m_tmp.filePath(QStringLiteral("c.ini")), QSettings::IniFormat);
        const QString path = QStringLiteral("/models/with spaces/ünïcode=model.gguf");
        QCOMPARE(loadChatTemplateChoice(settings, path).kind, ChatTemplateChoice::Kind::Model);
        ChatTemplateChoice custom;
        custom.kind = ChatTemplateChoice::Kind::Custom;
        custom.custom = QStringLiteral("{{ messages[0].content }}");
        saveChatTemplateChoice(settings, path, custom);
        settings.sync();
        QSettings reread(m_tmp.filePath(QStringLiteral("c.ini")), QSettings::IniFormat);
        QCOMPARE(loadChatTemplateChoice(reread, path), custom);
        saveChatTemplateChoice(settings, path, ChatTemplateChoice{});
        QCOMPARE(loadChatTemplateChoice(settings, path).kind, ChatTemplateChoice::Kind::Model);
    }
};

QTEST_MAIN(TestChatTemplateDialog)
#include "tst_chat_template_dialog.moc"
