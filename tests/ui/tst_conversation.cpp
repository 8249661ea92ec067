// Conversations: JSON round trip and validation, the store in a temporary directory (atomic
// saves, corrupt and hostile files skipped with errors, removal, export), Markdown export.
#include "core/conversation.h"
#include "core/conversation_store.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

using namespace longscope::ui;

namespace {

Conversation sample()
{
    Conversation c;
    c.setSystemPrompt(QStringLiteral("You are a helpful assistant.\nBe brief."));
    c.setModelPath(QStringLiteral("/models/stories260K.gguf"));
    QJsonObject settings;
    settings[QStringLiteral("kv_mode")] = QStringLiteral("static");
    settings[QStringLiteral("ntk_alpha")] = 2.0;
    c.setSettingsSnapshot(settings);
    const QDateTime t0 = QDateTime(QDate(2024, 5, 1), QTime(10, 0, 0, 123), Qt::UTC);
    c.setCreated(t0);
    c.appendMessage(Message::Role::User, QStringLiteral("Tell me a story about a dragon — with ünïcödé 🐉"),
                    t0.addSecs(1));
    c.appendMessage(Message::Role::Assistant, QStringLiteral("Once upon a time, there was a dragon."), t0.addSecs(2));
    c.appendMessage(Message::Role::SystemNote, QStringLiteral("settings changed at step 12"), t0.addSecs(3));
    c.setUpdated(t0.addSecs(3));
    return c;
}

void writeFile(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(bytes);
}

QByteArray readFile(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

class TestConversation : public QObject {
    Q_OBJECT

private slots:
    void newConversation()
    {
        Conversation c;
        QVERIFY(Conversation::isValidId(c.id()));
        QVERIFY(!QUuid::fromString(c.id()).isNull());
        QVERIFY(c.created().isValid());
        QCOMPARE(c.created(), c.updated());
        QCOMPARE(c.title(), QStringLiteral("New conversation"));
        QVERIFY(c.isEmpty());
        QVERIFY(Conversation().id() != c.id());
    }

    void titleFromFirstUserMessage()
    {
        Conversation c;
        c.appendMessage(Message::Role::SystemNote, QStringLiteral("note"));
        c.appendMessage(Message::Role::User, QStringLiteral("  Hello\n  there   world  "));
        QCOMPARE(c.title(), QStringLiteral("Hello there world"));
        const QString longText = QStringLiteral("word ").repeated(40);
        const QString t = Conversation::titleFromText(longText);
        QVERIFY(t.size() <= Conversation::kTitleLength + 1);
        QVERIFY(t.endsWith(QChar(0x2026)));
        QVERIFY(!t.contains(QLatin1String("  ")));
        c.setTitle(QStringLiteral("Explicit"));
        QCOMPARE(c.title(), QStringLiteral("Explicit"));
    }

    void chatTurnsLeaveOutNotes()
    {
        const Conversation c = sample();
        const QVector<ChatTurn> turns = c.chatTurns();
        QCOMPARE(turns.size(), 2);
        QCOMPARE(turns[0].role, ChatTurn::Role::User);
        QCOMPARE(turns[1].role, ChatTurn::Role::Assistant);
        QCOMPARE(turns[1].text, c.messages()[1].text);
    }

    void jsonRoundTrip()
    {
        const Conversation c = sample();
        const QJsonObject json = c.toJson();
        QCOMPARE(json.value(QStringLiteral("version")).toInt(), Conversation::kFormatVersion);
        QString error;
        const std::optional<Conversation> back = Conversation::fromJsonBytes(c.toJsonBytes(), &error);
        QVERIFY2(back, qPrintable(error));
        QCOMPARE(back->id(), c.id());
        QCOMPARE(back->title(), c.title());
        QCOMPARE(back->created(), c.created());
        QCOMPARE(back->updated(), c.updated());
        QCOMPARE(back->systemPrompt(), c.systemPrompt());
        QCOMPARE(back->modelPath(), c.modelPath());
        QCOMPARE(back->settingsSnapshot(), c.settingsSnapshot());
        QCOMPARE(back->messages().size(), c.messages().size());
        for (int i = 0; i < c.messages().size(); ++i) {
            QCOMPARE(back->messages()[i].role, c.messages()[i].role);
            QCOMPARE(back->messages()[i].text, c.messages()[i].text);
            QCOMPARE(back->messages()[i].timestamp, c.messages()[i].timestamp);
        }
        QCOMPARE(back->toJson(), json);
    }

    void badJson_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        const QByteArray good = sample().toJsonBytes();
        auto mutate = [&](auto f) {
            QJsonObject o = QJsonDocument::fromJson(good).object();
            f(o);
            return QJsonDocument(o).toJson();
        };
        QTest::newRow("empty") << QByteArray();
        QTest::newRow("truncated") << good.left(good.size() / 2);
        QTest::newRow("array") << QByteArray("[1, 2, 3]");
        QTest::newRow("binary") << QByteArray("\x00\x01\x02\xff", 4);
        QTest::newRow("no version") << mutate([](QJsonObject &o) { o.remove(QStringLiteral("version")); });
        QTest::newRow("future version") << mutate([](QJsonObject &o) { o[QStringLiteral("version")] = 99; });
        QTest::newRow("version string") << mutate([](QJsonObject &o) { o[QStringLiteral("version")] = "1"; });
        QTest::newRow("no id") << mutate([](QJsonObject &o) { o.remove(QStringLiteral("id")); });
        QTest::newRow("path id") << mutate([](QJsonObject &o) { o[QStringLiteral("id")] = "../../etc/passwd"; });
        QTest::newRow("bad date") << mutate([](QJsonObject &o) { o[QStringLiteral("created")] = "yesterday"; });
        QTest::newRow("messages object") << mutate([](QJsonObject &o) { o[QStringLiteral("messages")] = QJsonObject(); });
        QTest::newRow("message not object") << mutate([](QJsonObject &o) {
            o[QStringLiteral("messages")] = QJsonArray{42};
        });
        QTest::newRow("unknown role") << mutate([](QJsonObject &o) {
            QJsonObject m{{"role", "root"}, {"text", "x"}};
            o[QStringLiteral("messages")] = QJsonArray{m};
        });
        QTest::newRow("text number") << mutate([](QJsonObject &o) {
            QJsonObject m{{"role", "user"}, {"text", 5}};
            o[QStringLiteral("messages")] = QJsonArray{m};
        });
        QTest::newRow("settings array") << mutate([](QJsonObject &o) { o[QStringLiteral("settings")] = QJsonArray(); });
        QTest::newRow("system prompt number") << mutate([](QJsonObject &o) { o[QStringLiteral("system_prompt")] = 3; });
    }

    void badJson()
    {
        QFETCH(QByteArray, bytes);
        QString error;
        const std::optional<Conversation> c = Conversation::fromJsonBytes(bytes, &error);
        QVERIFY(!c);
        QVERIFY(!error.isEmpty());
    }

    void markdownExport()
    {
        const Conversation c = sample();
        const QString md = c.toMarkdown();
        QVERIFY(md.startsWith(QStringLiteral("# Tell me a story about a dragon")));
        QVERIFY(md.contains(QStringLiteral("## System prompt")));
        QVERIFY(md.contains(QStringLiteral("> You are a helpful assistant.\n> Be brief.")));
        QVERIFY(md.contains(QStringLiteral("`/models/stories260K.gguf`")));
        const qsizetype user = md.indexOf(QStringLiteral("## User\n\nTell me a story about a dragon"));
        const qsizetype assistant = md.indexOf(QStringLiteral("## Assistant\n\nOnce upon a time, there was a dragon."));
        const qsizetype note = md.indexOf(QStringLiteral("## Note\n\nsettings changed at step 12"));
        QVERIFY(user > 0);
        QVERIFY(assistant > user);
        QVERIFY(note > assistant);
    }

    void storeSaveAndReload()
    {
        QTemporaryDir dir;
        ConversationStore store(dir.filePath(QStringLiteral("conversations")));
        QVERIFY(QDir(store.directory()).exists());
        QSignalSpy saved(&store, &ConversationStore::conversationSaved);

        Conversation a = sample();
        Conversation b;
        b.appendMessage(Message::Role::User, QStringLiteral("second"));
        b.setUpdated(a.updated().addSecs(60));
        QString error;
        QVERIFY2(store.save(a, &error), qPrintable(error));
        QVERIFY2(store.save(b, &error), qPrintable(error));
        QCOMPARE(saved.size(), 2);
        QCOMPARE(saved.at(0).at(0).toString(), a.id());
        QVERIFY(store.contains(a.id()));

        const QVector<ConversationInfo> list = store.list();
        QVERIFY(store.lastErrors().isEmpty());
        QCOMPARE(list.size(), 2);
        QCOMPARE(list[0].id, b.id()); // most recently updated first
        QCOMPARE(list[1].id, a.id());
        QCOMPARE(list[1].title, a.title());
        QCOMPARE(list[1].message_count, 3);

        const std::optional<Conversation> back = store.load(a.id(), &error);
        QVERIFY2(back, qPrintable(error));
        QCOMPARE(back->toJson(), a.toJson());

        // A later save replaces the file and moves it to the top.
        a.appendMessage(Message::Role::User, QStringLiteral("more"));
        a.setUpdated(b.updated().addSecs(60));
        QVERIFY(store.save(a));
        QCOMPARE(store.list().first().id, a.id());
        QCOMPARE(store.load(a.id())->messages().size(), 4);

        // Another store on the same directory sees the same conversations.
        ConversationStore again(store.directory());
        QCOMPARE(again.list().size(), 2);
    }

    void atomicSaveLeavesNoTempFiles()
    {
        QTemporaryDir dir;
        ConversationStore store(dir.path());
        Conversation c = sample();
        for (int i = 0; i < 5; ++i) {
            c.appendMessage(Message::Role::User, QStringLiteral("message %1").arg(i));
            QVERIFY(store.save(c));
        }
        const QStringList files = QDir(dir.path()).entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot);
        QCOMPARE(files, QStringList{c.id() + QStringLiteral(".json")});
        QCOMPARE(readFile(store.filePath(c.id())), c.toJsonBytes());
    }

    void failedSaveReportsError()
    {
        QTemporaryDir dir;
        ConversationStore store(dir.path());
        QSignalSpy saved(&store, &ConversationStore::conversationSaved);
        const Conversation c = sample();
        // A directory where the file should go: the write cannot happen (even as root).
        QVERIFY(QDir(dir.path()).mkdir(c.id() + QStringLiteral(".json")));
        QString error;
        QVERIFY(!store.save(c, &error));
        QVERIFY(!error.isEmpty());
        QCOMPARE(store.lastErrors().size(), 1);
        QCOMPARE(saved.size(), 0);
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 0);
    }

    void interruptedWriteKeepsOldFile()
    {
        // What a crash between write and commit leaves: the old file, and no temporary file.
        QTemporaryDir dir;
        ConversationStore store(dir.path());
        const Conversation c = sample();
        QVERIFY(store.save(c));
        const QByteArray before = readFile(store.filePath(c.id()));
        {
            QSaveFile f(store.filePath(c.id()));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("{ half a conver");
            // destroyed without commit()
        }
        QCOMPARE(readFile(store.filePath(c.id())), before);
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 1);
        QCOMPARE(store.list().size(), 1);
    }

    void corruptAndHostileFilesSkipped()
    {
        QTemporaryDir dir;
        ConversationStore store(dir.path());
        const Conversation good = sample();
        QVERIFY(store.save(good));

        const Conversation other;
        QJsonObject mismatched = sample().toJson();
        mismatched[QStringLiteral("id")] = other.id(); // claims an id that is not its name
        writeFile(dir.filePath(QStringLiteral("aaaaaaaa-0000-0000-0000-000000000001.json")), "{ not json");
        writeFile(dir.filePath(QStringLiteral("aaaaaaaa-0000-0000-0000-000000000002.json")), QByteArray(1000, '\0'));
        writeFile(dir.filePath(QStringLiteral("aaaaaaaa-0000-0000-0000-000000000003.json")),
                  QJsonDocument(mismatched).toJson());
        writeFile(dir.filePath(QStringLiteral("aaaaaaaa-0000-0000-0000-000000000004.json")), "[]");
        writeFile(dir.filePath(QStringLiteral("aaaaaaaa-0000-0000-0000-000000000005.json")),
                  QByteArray(100000, '[')); // deep nesting
        writeFile(dir.filePath(QStringLiteral("bad name!.json")), good.toJsonBytes());
        writeFile(dir.filePath(QStringLiteral("notes.txt")), "not a conversation");
        QDir(dir.path()).mkdir(QStringLiteral("sub.json"));

        const QVector<ConversationInfo> list = store.list();
        QCOMPARE(list.size(), 1);
        QCOMPARE(list.first().id, good.id());
        QCOMPARE(store.lastErrors().size(), 6);

        QString error;
        QVERIFY(!store.load(QStringLiteral("aaaaaaaa-0000-0000-0000-000000000001"), &error));
        QVERIFY(!error.isEmpty());
        QVERIFY(!store.load(QStringLiteral("../escape"), &error));
        QVERIFY(!store.load(QStringLiteral("missing"), &error));
    }

    void removeConversation()
    {
        QTemporaryDir dir;
        ConversationStore store(dir.path());
        QSignalSpy removed(&store, &ConversationStore::conversationRemoved);
        const Conversation a = sample();
        const Conversation b;
        QVERIFY(store.save(a));
        QVERIFY(store.save(b));
        QVERIFY(store.remove(a.id()));
        QCOMPARE(removed.size(), 1);
        QCOMPARE(removed.at(0).at(0).toString(), a.id());
        QVERIFY(!QFile::exists(store.filePath(a.id())));
        QCOMPARE(store.list().size(), 1);
        QString error;
        QVERIFY(!store.remove(a.id(), &error));
        QVERIFY(!error.isEmpty());
        QVERIFY(!store.remove(QStringLiteral("../../x")));
        QCOMPARE(removed.size(), 1);
    }

    void exports()
    {
        QTemporaryDir dir;
        ConversationStore store(dir.filePath(QStringLiteral("store")));
        const Conversation c = sample();
        QVERIFY(store.save(c));
        const QString md = dir.filePath(QStringLiteral("out.md"));
        const QString json = dir.filePath(QStringLiteral("out.json"));
        QString error;
        QVERIFY2(store.exportMarkdown(c.id(), md, &error), qPrintable(error));
        QVERIFY2(store.exportJson(c.id(), json, &error), qPrintable(error));
        QCOMPARE(QString::fromUtf8(readFile(md)), c.toMarkdown());
        const std::optional<Conversation> back = Conversation::fromJsonBytes(readFile(json));
        QVERIFY(back);
        QCOMPARE(back->toJson(), c.toJson());
        QVERIFY(!store.exportMarkdown(QStringLiteral("missing"), md, &error));
        QVERIFY(!ConversationStore::exportJson(c, dir.filePath(QStringLiteral("no/such/dir/x.json")), &error));
    }
};

QTEST_GUILESS_MAIN(TestConversation)
#include "tst_conversation.moc"
