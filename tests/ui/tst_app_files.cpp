// The files the app reads from its data folders and from the user (conversations, saved runs,
// books) when they are not what they claim: a symlink to /dev/zero (whose size() is 0 and whose
// reading never ends), a FIFO (whose opening waits for a writer), a directory, a file past the
// size bound. Each is refused with a message naming the file, quickly, and the good files
// beside them still load.
#include "core/book.h"
#include "core/conversation.h"
#include "core/conversation_store.h"
#include "core/explore_store.h"
#include "core/perplexity_run.h"
#include "core/read_file.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <sys/stat.h>
#include <sys/types.h>

using namespace longscope::ui;

namespace {

// Whatever a test does with special files must be over in well under this.
constexpr qint64 kQuickMs = 10000;

void writeFile(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    QCOMPARE(f.write(bytes), bytes.size());
}

bool makeFifo(const QString &path) { return ::mkfifo(QFile::encodeName(path).constData(), 0600) == 0; }

// A file of `bytes` bytes that takes no room (sparse).
bool makeSparse(const QString &path, qint64 bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.resize(bytes);
}

PerplexityRunResult sampleRun()
{
    PerplexityRunResult r;
    r.label = QStringLiteral("α 1");
    r.settings.context_limit = 1024;
    r.ctx = 1024;
    r.bucket = 256;
    r.n_ctx_train = 512;
    r.model_name = QStringLiteral("stories260K");
    r.book_title = QStringLiteral("Alice");
    r.created = QDateTime::currentDateTimeUtc();
    r.curve.append(PerplexityPoint{0, 256, 255, 4.0});
    r.mean_nll = 4.0;
    r.n_scored = 255;
    r.n_total = 255;
    r.windows = 1;
    return r;
}

} // namespace

class TestAppFiles : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    // In `dir`: NAME.json links to /dev/zero, to a FIFO, to a directory; a FIFO itself; a
    // sparse file of `tooLarge` bytes. Returns the base names.
    QStringList plantSpecialFiles(const QString &dir, const QStringList &names, qint64 tooLarge)
    {
        const QDir d(dir);
        const QString fifo = m_dir.filePath(QStringLiteral("fifo-%1").arg(QFileInfo(dir).fileName()));
        if (!makeFifo(fifo))
            return {};
        if (!QFile::link(QStringLiteral("/dev/zero"), d.filePath(names[0] + QStringLiteral(".json"))) ||
            !QFile::link(fifo, d.filePath(names[1] + QStringLiteral(".json"))) ||
            !QFile::link(m_dir.path(), d.filePath(names[2] + QStringLiteral(".json"))) ||
            !makeFifo(d.filePath(names[3] + QStringLiteral(".json"))) ||
            !makeSparse(d.filePath(names[4] + QStringLiteral(".json")), tooLarge))
            return {};
        return names;
    }

private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    // The helper itself: regular files and links to them are read; every other kind is
    // refused without blocking; the bound holds even where the size is not known beforehand
    // (/proc files say they are empty).
    void readRegularFileBounds()
    {
        const QString plain = m_dir.filePath(QStringLiteral("plain.json"));
        writeFile(plain, "{\"a\": 1}");
        const QString link = m_dir.filePath(QStringLiteral("plain-link.json"));
        QVERIFY(QFile::link(plain, link));
        QCOMPARE(readRegularFile(plain, 100), std::optional<QByteArray>("{\"a\": 1}"));
        QCOMPARE(readRegularFile(link, 100), std::optional<QByteArray>("{\"a\": 1}"));
        QCOMPARE(readRegularFile(plain, 8), std::optional<QByteArray>("{\"a\": 1}")); // exactly at the bound
        const QString empty = m_dir.filePath(QStringLiteral("empty.json"));
        writeFile(empty, QByteArray());
        QCOMPARE(readRegularFile(empty, 100), std::optional<QByteArray>(QByteArray()));

        const QString fifo = m_dir.filePath(QStringLiteral("helper.fifo"));
        QVERIFY(makeFifo(fifo));
        const QString zeroLink = m_dir.filePath(QStringLiteral("helper-zero.json"));
        QVERIFY(QFile::link(QStringLiteral("/dev/zero"), zeroLink));
        const struct {
            QString path;
            qint64 bound;
            const char *words;
        } refused[] = {
            {plain, 7, "too large (over the limit of 7 bytes)"},
            {fifo, 1 << 20, "not a regular file (a FIFO)"},
            {zeroLink, 1 << 20, "not a regular file (a character device)"},
            {QStringLiteral("/dev/null"), 1 << 20, "not a regular file (a character device)"},
            {m_dir.path(), 1 << 20, "not a regular file (a directory)"},
            {m_dir.filePath(QStringLiteral("missing.json")), 1 << 20, "cannot open: No such file"},
            // Size 0 on the file system, a few hundred bytes when read.
            {QStringLiteral("/proc/self/status"), 64, "too large"},
        };
        QElapsedTimer timer;
        timer.start();
        for (const auto &r : refused) {
            QString error;
            QVERIFY2(!readRegularFile(r.path, r.bound, &error), qPrintable(r.path));
            QVERIFY2(error.startsWith(r.path + QStringLiteral(": ")) && error.contains(QLatin1String(r.words)),
                     qPrintable(error));
        }
        QVERIFY2(timer.elapsed() < kQuickMs, qPrintable(QString::number(timer.elapsed())));
        QCOMPARE(QFileInfo(QStringLiteral("/proc/self/status")).size(), 0);
        const std::optional<QByteArray> status = readRegularFile(QStringLiteral("/proc/self/status"), 1 << 20);
        QVERIFY(status && status->contains("VmRSS"));
    }

    void conversationsSkipSpecialFiles()
    {
        const QString dir = m_dir.filePath(QStringLiteral("conversations"));
        ConversationStore store(dir);
        Conversation good;
        good.appendMessage(Message::Role::User, QStringLiteral("hello"));
        QVERIFY(store.save(good));
        const QStringList names = plantSpecialFiles(dir,
                                                    {QStringLiteral("aaaaaaaa-0000-0000-0000-000000000001"),
                                                     QStringLiteral("aaaaaaaa-0000-0000-0000-000000000002"),
                                                     QStringLiteral("aaaaaaaa-0000-0000-0000-000000000003"),
                                                     QStringLiteral("aaaaaaaa-0000-0000-0000-000000000004"),
                                                     QStringLiteral("aaaaaaaa-0000-0000-0000-000000000005")},
                                                    300LL * 1024 * 1024);
        QCOMPARE(names.size(), 5);
        QElapsedTimer timer;
        timer.start();
        const QVector<ConversationInfo> list = store.list();
        QCOMPARE(list.size(), 1);
        QCOMPARE(list.first().id, good.id());
        const QString errors = store.lastErrors().join(QLatin1Char('\n'));
        QVERIFY2(errors.contains(names[0]) && errors.contains(QLatin1String("not a regular file")), qPrintable(errors));
        QVERIFY2(errors.contains(names[4]) && errors.contains(QLatin1String("too large")), qPrintable(errors));
        // Loading each by its id, the FIFO too (which the listing leaves out): refused.
        for (const QString &id : names) {
            QString error;
            QVERIFY2(!store.load(id, &error), qPrintable(id));
            QVERIFY2(error.contains(id), qPrintable(error));
        }
        QVERIFY2(timer.elapsed() < kQuickMs, qPrintable(QString::number(timer.elapsed())));
        QVERIFY(store.load(good.id()));
    }

    void runsSkipSpecialFiles()
    {
        const QString dir = m_dir.filePath(QStringLiteral("runs"));
        ExploreStore store(dir);
        PerplexityRunResult good = sampleRun();
        QVERIFY(store.save(good));
        const QStringList names = plantSpecialFiles(dir,
                                                    {QStringLiteral("zero"), QStringLiteral("fifolink"),
                                                     QStringLiteral("dirlink"), QStringLiteral("fifo"),
                                                     QStringLiteral("huge")},
                                                    64LL * 1024 * 1024);
        QCOMPARE(names.size(), 5);
        QElapsedTimer timer;
        timer.start();
        const QVector<PerplexityRunResult> list = store.list();
        QCOMPARE(list.size(), 1);
        QCOMPARE(list.first().id, good.id);
        const QString errors = store.lastErrors().join(QLatin1Char('\n'));
        QVERIFY2(errors.contains(QLatin1String("zero.json")) && errors.contains(QLatin1String("not a regular file")),
                 qPrintable(errors));
        QVERIFY2(errors.contains(QLatin1String("huge.json: too large")), qPrintable(errors));
        for (const QString &id : names) {
            QString error;
            QVERIFY2(!store.load(id, &error), qPrintable(id));
            QVERIFY2(error.contains(id), qPrintable(error));
        }
        QVERIFY2(timer.elapsed() < kQuickMs, qPrintable(QString::number(timer.elapsed())));
    }

    void booksMustBeRegularFiles()
    {
        const QString fifo = m_dir.filePath(QStringLiteral("book.fifo"));
        QVERIFY(makeFifo(fifo));
        const QString zero = m_dir.filePath(QStringLiteral("zero.txt"));
        QVERIFY(QFile::link(QStringLiteral("/dev/zero"), zero));
        const QString fifoLink = m_dir.filePath(QStringLiteral("fifo.txt"));
        QVERIFY(QFile::link(fifo, fifoLink));
        QElapsedTimer timer;
        timer.start();
        for (const QString &path : {fifo, zero, fifoLink, QStringLiteral("/dev/zero")}) {
            QString error;
            QVERIFY2(!loadBook(path, &error), qPrintable(path));
            QVERIFY2(error.contains(path) && error.contains(QLatin1String("not a regular file")), qPrintable(error));
        }
        QVERIFY2(timer.elapsed() < kQuickMs, qPrintable(QString::number(timer.elapsed())));
        // A link to a real book is followed.
        const QString real = m_dir.filePath(QStringLiteral("real.txt"));
        writeFile(real, "Once upon a time there was a book.\n");
        const QString link = m_dir.filePath(QStringLiteral("link.txt"));
        QVERIFY(QFile::link(real, link));
        QString error;
        const std::optional<Book> book = loadBook(link, &error);
        QVERIFY2(book, qPrintable(error));
        QVERIFY(book->text.startsWith(QLatin1String("Once upon a time")));
    }
};

QTEST_GUILESS_MAIN(TestAppFiles)
#include "tst_app_files.moc"
