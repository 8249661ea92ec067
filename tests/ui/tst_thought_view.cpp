// A thinking model's reply in the chat view, off screen: the reasoning streams in live while
// the model thinks, then collapses to a clickable "Thought for N tokens" that expands and
// collapses again; the answer is shown apart. And the split itself (ui/core/thought.h).
#include "chat_view_shown.h"
#include "offscreen.h"

#include "core/chat_model.h"
#include "core/thought.h"
#include "widgets/chat_view.h"
#include "widgets/thought_block.h"

#include <QSignalSpy>
#include <QTest>
#include <QTextBlock>
#include <QTextDocument>

using namespace longscope::ui;
using longscope::test::showChatView;

namespace {

// The href of the first anchor in the document, empty when there is none.
QString firstAnchor(const QTextDocument *doc)
{
    for (QTextBlock b = doc->begin(); b.isValid(); b = b.next())
        for (auto it = b.begin(); !it.atEnd(); ++it)
            if (it.fragment().charFormat().isAnchor())
                return it.fragment().charFormat().anchorHref();
    return {};
}

} // namespace

class TestThoughtView : public QObject {
    Q_OBJECT

private slots:
    void split()
    {
        ThoughtSplit t = splitThought(QStringLiteral("<think>\nLet me add. 2+2=4.\n</think>\n\nIt is **4**."));
        QVERIFY(t.hasReasoning);
        QVERIFY(!t.thinking);
        QCOMPARE(t.reasoning, QStringLiteral("Let me add. 2+2=4."));
        QCOMPARE(t.answer, QStringLiteral("It is **4**."));

        t = splitThought(QStringLiteral("<think>still wor"));
        QVERIFY(t.hasReasoning && t.thinking);
        QCOMPARE(t.reasoning, QStringLiteral("still wor"));
        QVERIFY(t.answer.isEmpty());

        // The prompt opened <think> (DeepSeek-R1): the reply only closes it.
        t = splitThought(QStringLiteral("Okay, 6.\n</think>\n\n6"));
        QVERIFY(t.hasReasoning && !t.thinking);
        QCOMPARE(t.reasoning, QStringLiteral("Okay, 6."));
        QCOMPARE(t.answer, QStringLiteral("6"));

        t = splitThought(QStringLiteral("A plain answer mentioning <think> tags."));
        QVERIFY(!t.hasReasoning);
        QCOMPARE(t.answer, QStringLiteral("A plain answer mentioning <think> tags."));
        // Unicode survives the trip through UTF-8.
        t = splitThought(QStringLiteral("<think>Grüße ✓</think>日本語"));
        QCOMPARE(t.reasoning, QStringLiteral("Grüße ✓"));
        QCOMPARE(t.answer, QStringLiteral("日本語"));
    }

    void streamed_live_then_collapsed_then_expanded()
    {
        ChatModel model;
        ChatView view;
        showChatView(view, model);
        model.appendMessage(Message::Role::User, QStringLiteral("What is 2+2?"));
        model.appendMessage(Message::Role::Assistant, QString());

        // Tokens as the worker streams them.
        const QStringList thinking = {QStringLiteral("<think>"), QStringLiteral("\nThe"), QStringLiteral(" user"),
                                      QStringLiteral(" adds"), QStringLiteral(" numbers.")};
        for (const QString &piece : thinking)
            model.appendToLast(piece);
        view.flush();
        QString shown = view.toPlainText();
        QVERIFY2(shown.contains(QStringLiteral("Thinking… (5 tokens)")), qPrintable(shown));
        QVERIFY2(shown.contains(QStringLiteral("The user adds numbers.")), qPrintable(shown)); // live
        QVERIFY(firstAnchor(view.document()).isEmpty()); // nothing to click while it thinks

        for (const QString &piece : {QStringLiteral("\n</think>"), QStringLiteral("\n\n"), QStringLiteral("It is 4.")})
            model.appendToLast(piece);
        view.flush();
        shown = view.toPlainText();
        QVERIFY2(shown.contains(QStringLiteral("▸ Thought for 5 tokens")), qPrintable(shown));
        QVERIFY2(!shown.contains(QStringLiteral("adds numbers")), qPrintable(shown)); // collapsed
        QVERIFY2(shown.contains(QStringLiteral("It is 4.")), qPrintable(shown));
        QVERIFY(!shown.contains(QStringLiteral("<think>")) && !shown.contains(QStringLiteral("</think>")));
        QCOMPARE(model.at(1).reasoningTokens, 5);

        // Clicking the label (the anchor the document holds) expands it; again collapses it.
        const QString href = firstAnchor(view.document());
        QCOMPARE(thoughtRow(QUrl(href)), std::optional<int>(1));
        QVERIFY(!view.isThoughtExpanded(1));
        emit view.anchorClicked(QUrl(href));
        QVERIFY(view.isThoughtExpanded(1));
        shown = view.toPlainText();
        QVERIFY2(shown.contains(QStringLiteral("▾ Thought for 5 tokens")), qPrintable(shown));
        QVERIFY2(shown.contains(QStringLiteral("The user adds numbers.")), qPrintable(shown));
        QVERIFY2(shown.contains(QStringLiteral("It is 4.")), qPrintable(shown));
        emit view.anchorClicked(QUrl(href));
        QVERIFY(!view.isThoughtExpanded(1));
        QVERIFY(!view.toPlainText().contains(QStringLiteral("adds numbers")));

        // A new conversation forgets what was expanded.
        view.setThoughtExpanded(1, true);
        model.setMessages({});
        QVERIFY(!view.isThoughtExpanded(1));
    }

    void loaded_reply_without_count()
    {
        ChatModel model;
        ChatView view;
        view.setModel(&model);
        model.setMessages({Message{Message::Role::Assistant, QStringLiteral("<think>x</think>Answer"), {}}});
        view.flush();
        const QString shown = view.toPlainText();
        QVERIFY2(shown.contains(QStringLiteral("▸ Thought")) && !shown.contains(QStringLiteral("tokens")),
                 qPrintable(shown));
        QVERIFY(shown.contains(QStringLiteral("Answer")));
        // Replies without reasoning are untouched.
        model.setMessages({Message{Message::Role::Assistant, QStringLiteral("Just this."), {}}});
        view.flush();
        QVERIFY(!view.toPlainText().contains(QStringLiteral("Thought")));
        QVERIFY(view.toPlainText().contains(QStringLiteral("Just this.")));
    }
};

QTEST_MAIN(TestThoughtView)
#include "tst_thought_view.moc"
