// The list models under QAbstractItemModelTester while rows are added, removed, moved and
// streamed into.
#include "core/chat_model.h"
#include "core/conversation_list_model.h"
#include "core/conversation_store.h"

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

using namespace longscope::ui;

namespace {

Conversation conversation(const QString &firstMessage, const QDateTime &updated)
{
    Conversation c;
    c.appendMessage(Message::Role::User, firstMessage);
    c.setUpdated(updated);
    return c;
}

} // namespace

class TestItemModels : public QObject {
    Q_OBJECT

private slots:
    void conversationList()
    {
        QTemporaryDir dir;
        ConversationStore store(dir.path());
        const QDateTime t0 = QDateTime(QDate(2024, 1, 1), QTime(12, 0), Qt::UTC);
        Conversation a = conversation(QStringLiteral("alpha"), t0);
        Conversation b = conversation(QStringLiteral("bravo"), t0.addSecs(10));
        QVERIFY(store.save(a));
        QVERIFY(store.save(b));

        ConversationListModel model(&store);
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(model.data(model.index(0)).toString(), QStringLiteral("bravo"));
        QCOMPARE(model.data(model.index(0), Qt::UserRole).toString(), b.id());
        QCOMPARE(model.data(model.index(0), Qt::UserRole + 1).toDateTime(), b.updated());
        QCOMPARE(model.data(model.index(1), ConversationListModel::MessageCountRole).toInt(), 1);
        QCOMPARE(model.idAt(1), a.id());
        QCOMPARE(model.rowOf(a.id()), 1);
        QCOMPARE(model.rowOf(QStringLiteral("nope")), -1);
        QVERIFY(!model.data(model.index(5)).isValid());

        // A new conversation is inserted at the top.
        QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
        Conversation c = conversation(QStringLiteral("charlie"), t0.addSecs(20));
        QVERIFY(store.save(c));
        QCOMPARE(inserted.size(), 1);
        QCOMPARE(model.rowCount(), 3);
        QCOMPARE(model.idAt(0), c.id());

        // An older one saved again moves to the top, with its new title.
        QSignalSpy moved(&model, &QAbstractItemModel::rowsMoved);
        a.setTitle(QStringLiteral("alpha renamed"));
        a.setUpdated(t0.addSecs(30));
        QVERIFY(store.save(a));
        QCOMPARE(moved.size(), 1);
        QCOMPARE(model.idAt(0), a.id());
        QCOMPARE(model.data(model.index(0)).toString(), QStringLiteral("alpha renamed"));
        QCOMPARE(model.idAt(1), c.id());
        QCOMPARE(model.idAt(2), b.id());

        // Saved again without moving: dataChanged only.
        QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
        a.appendMessage(Message::Role::Assistant, QStringLiteral("reply"));
        a.setUpdated(t0.addSecs(40));
        QVERIFY(store.save(a));
        QCOMPARE(moved.size(), 1);
        QCOMPARE(changed.size(), 1);
        QCOMPARE(model.data(model.index(0), ConversationListModel::MessageCountRole).toInt(), 2);

        // The oldest saved as the newest moves from the bottom to the top.
        b.setUpdated(t0.addSecs(50));
        QVERIFY(store.save(b));
        QCOMPARE(model.idAt(0), b.id());
        QCOMPARE(model.idAt(1), a.id());
        QCOMPARE(model.idAt(2), c.id());

        // The newest saved with an old date moves down.
        b.setUpdated(t0.addSecs(-50));
        QVERIFY(store.save(b));
        QCOMPARE(model.idAt(2), b.id());

        QVERIFY(store.remove(c.id()));
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(model.rowOf(c.id()), -1);

        model.refresh();
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(model.idAt(0), a.id());
        QVERIFY(model.roleNames().contains(ConversationListModel::IdRole));
    }

    void chatModel()
    {
        ChatModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.rowCount(), 0);
        model.appendMessage(Message::Role::User, QStringLiteral("Hello"));
        model.appendMessage(Message::Role::Assistant, QString());
        QCOMPARE(model.rowCount(), 2);

        QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
        for (const QString &piece : {QStringLiteral("Once"), QStringLiteral(" upon"), QStringLiteral(" a time")})
            model.appendToLast(piece);
        QCOMPARE(changed.size(), 3);
        QCOMPARE(changed.last().at(0).toModelIndex().row(), 1);
        QCOMPARE(model.data(model.index(1)).toString(), QStringLiteral("Once upon a time"));
        QCOMPARE(model.data(model.index(1), ChatModel::RoleRole).toInt(), int(Message::Role::Assistant));
        QCOMPARE(model.data(model.index(0), ChatModel::TextRole).toString(), QStringLiteral("Hello"));
        QVERIFY(model.data(model.index(0), ChatModel::TimestampRole).toDateTime().isValid());

        model.setLastText(QStringLiteral("Replaced"));
        QCOMPARE(model.at(1).text, QStringLiteral("Replaced"));

        model.removeLast(); // regenerate
        QCOMPARE(model.rowCount(), 1);
        model.appendMessage(Message::Role::Assistant, QStringLiteral("Again"));
        QCOMPARE(model.count(), 2);

        QVector<Message> messages{{Message::Role::SystemNote, QStringLiteral("note"), {}},
                                  {Message::Role::User, QStringLiteral("x"), {}}};
        model.setMessages(messages);
        QCOMPARE(model.rowCount(), 2);
        model.clear();
        QCOMPARE(model.rowCount(), 0);
        model.appendToLast(QStringLiteral("nothing to append to"));
        model.removeLast();
        QCOMPARE(model.rowCount(), 0);
    }
};

QTEST_GUILESS_MAIN(TestItemModels)
#include "tst_item_models.moc"
