// The chat view with hostile text, off screen: a message holding a long run without white
// space (1 MB of one letter took minutes to show: Qt lays such a run out at word boundaries
// in time quadratic in its length, 25 000 characters 0.3 s, 100 000 4.8 s) is laid out
// wrapping anywhere, in lines no wider than the view; ordinary text keeps wrapping at words.
#include "chat_view_shown.h"
#include "offscreen.h"

#include "core/chat_model.h"
#include "widgets/chat_view.h"
#include "widgets/plain_text_field.h"

#include <QAbstractTextDocumentLayout>
#include <QTest>
#include <QTextBlock>
#include <QTextDocument>
#include <QTextLayout>

using namespace longscope::ui;
using longscope::test::showChatView;

namespace {

QTextOption::WrapMode wrapMode(const ChatView &view)
{
    return view.document()->defaultTextOption().wrapMode();
}

// The block holding `needle`, laid out; invalid when there is none.
QTextBlock blockWith(const ChatView &view, const QString &needle)
{
    (void)view.document()->documentLayout()->documentSize(); // lays the document out
    for (QTextBlock b = view.document()->begin(); b.isValid(); b = b.next())
        if (b.text().contains(needle))
            return b;
    return {};
}

} // namespace

class TestChatView : public QObject {
    Q_OBJECT

private slots:
    void long_unbroken_run_wraps_anywhere()
    {
        ChatModel model;
        ChatView view;
        showChatView(view, model);
        model.appendMessage(Message::Role::User, QStringLiteral("Hello there, how are you?"));
        QCOMPARE(wrapMode(view), QTextOption::WrapAtWordBoundaryOrAnywhere);
        QVERIFY(!view.wrapsAnywhere());

        const QString run(20 * kLongestWrappedRun, QLatin1Char('x'));
        model.appendMessage(Message::Role::User, QStringLiteral("Look: ") + run);
        QCOMPARE(wrapMode(view), QTextOption::WrapAnywhere);
        QVERIFY(view.wrapsAnywhere());
        // Laid out in many lines, none wider than the text area.
        const QTextBlock b = blockWith(view, run);
        QVERIFY(b.isValid() && b.layout());
        const int lines = b.layout()->lineCount();
        QVERIFY2(lines > 20, qPrintable(QString::number(lines)));
        const qreal width = view.document()->textWidth();
        for (int i = 0; i < lines; ++i)
            QVERIFY2(b.layout()->lineAt(i).naturalTextWidth() <= width,
                     qPrintable(QString("line %1: %2 > %3").arg(i).arg(b.layout()->lineAt(i).naturalTextWidth()).arg(width)));

        // Another conversation without such a run wraps at word boundaries again.
        model.setMessages({Message{Message::Role::User, QStringLiteral("Short words only."), {}}});
        QCOMPARE(wrapMode(view), QTextOption::WrapAtWordBoundaryOrAnywhere);
    }

    void streamed_run_wraps_anywhere()
    {
        ChatModel model;
        ChatView view;
        showChatView(view, model);
        model.appendMessage(Message::Role::User, QStringLiteral("Repeat one letter."));
        model.appendMessage(Message::Role::Assistant, QString());
        const QString piece(kLongestWrappedRun / 10, QLatin1Char('a'));
        for (int i = 0; i < 10; ++i) // exactly the longest run still wrapped at words
            model.appendToLast(piece);
        view.flush();
        QCOMPARE(wrapMode(view), QTextOption::WrapAtWordBoundaryOrAnywhere);
        model.appendToLast(QStringLiteral("a"));
        view.flush();
        QCOMPARE(wrapMode(view), QTextOption::WrapAnywhere);
    }
};

QTEST_MAIN(TestChatView)
#include "tst_chat_view.moc"
