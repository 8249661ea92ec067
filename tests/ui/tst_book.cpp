// Books: Project Gutenberg header and footer stripped, title and author read, BOM and line
// endings normalised, binary, huge, empty and invalid UTF-8 files.
#include "core/book.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

using namespace longscope::ui;

namespace {

const QString k_books = QStringLiteral(LONGSCOPE_TEST_DATA "/books/");

QString writeFile(const QTemporaryDir &dir, const QString &name, const QByteArray &bytes)
{
    const QString path = dir.filePath(name);
    QFile f(path);
    if (f.open(QIODevice::WriteOnly))
        f.write(bytes);
    return path;
}

} // namespace

class TestBook : public QObject {
    Q_OBJECT

private slots:
    void gutenbergBooks_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("title");
        QTest::addColumn<QString>("author");
        QTest::addColumn<QString>("begins");
        QTest::addColumn<QString>("ends");
        QTest::newRow("alice") << "pg11-alice-in-wonderland.txt" << QStringLiteral("Alice’s Adventures in Wonderland")
                               << "Lewis Carroll" << QStringLiteral("ALICE’S ADVENTURES IN WONDERLAND")
                               << "THE END";
        QTest::newRow("two cities") << "pg98-a-tale-of-two-cities.txt" << "A Tale of Two Cities" << "Charles Dickens"
                                    << "Produced by Judith Boss" << "far better rest that I go to than I have ever known.”";
    }

    void gutenbergBooks()
    {
        QFETCH(QString, file);
        QFETCH(QString, title);
        QFETCH(QString, author);
        QFETCH(QString, begins);
        QFETCH(QString, ends);
        QString error;
        const std::optional<Book> book = loadBook(k_books + file, &error);
        QVERIFY2(book, qPrintable(error));
        QCOMPARE(book->title, title);
        QCOMPARE(book->author, author);
        QVERIFY(book->stripped);
        QCOMPARE(book->original_bytes, QFileInfo(k_books + file).size());
        QCOMPARE(book->path, k_books + file);
        QVERIFY2(book->text.startsWith(begins), qPrintable(book->text.left(80)));
        QVERIFY2(book->text.trimmed().endsWith(ends), qPrintable(book->text.right(80)));
        QVERIFY(!book->text.contains(QStringLiteral("Project Gutenberg")));
        QVERIFY(!book->text.contains(QStringLiteral("*** END")));
        QVERIFY(!book->text.contains(QLatin1Char('\r')));
        QVERIFY(!book->text.contains(QChar(0xfeff)));
        QVERIFY(!book->text.contains(QChar(QChar::ReplacementCharacter)));
        QVERIFY(book->text.size() > 100000);
    }

    void olderAndNewerMarkers()
    {
        QTemporaryDir dir;
        const QByteArray text = "The Project Gutenberg eBook of Test\n"
                                "Title: A Test\n"
                                "       With a Subtitle\n"
                                "Author: Some One\n\n"
                                "*** START OF THE PROJECT GUTENBERG EBOOK A TEST ***\n\n\n"
                                "Chapter 1\n\nIt began.\n\n"
                                "*** END OF THE PROJECT GUTENBERG EBOOK A TEST ***\n"
                                "License text\n";
        const std::optional<Book> book = loadBook(writeFile(dir, QStringLiteral("t.txt"), text));
        QVERIFY(book);
        QCOMPARE(book->title, QStringLiteral("A Test"));
        QCOMPARE(book->author, QStringLiteral("Some One"));
        QCOMPARE(book->text, QStringLiteral("Chapter 1\n\nIt began.\n"));
    }

    void plainTextKeptWhole()
    {
        QTemporaryDir dir;
        const std::optional<Book> book = loadBook(writeFile(dir, QStringLiteral("notes.txt"), "Just some\ntext.\n"));
        QVERIFY(book);
        QVERIFY(!book->stripped);
        QCOMPARE(book->title, QStringLiteral("notes"));
        QVERIFY(book->author.isEmpty());
        QCOMPARE(book->text, QStringLiteral("Just some\ntext.\n"));
    }

    void bomAndLineEndings()
    {
        QTemporaryDir dir;
        const QByteArray bytes = "\xef\xbb\xbfLine one\r\nLine two\rLine three\r\n";
        const std::optional<Book> book = loadBook(writeFile(dir, QStringLiteral("crlf.txt"), bytes));
        QVERIFY(book);
        QCOMPARE(book->text, QStringLiteral("Line one\nLine two\nLine three\n"));
        QCOMPARE(book->original_bytes, qint64(bytes.size()));
    }

    void utf16WithBom()
    {
        QTemporaryDir dir;
        QByteArray bytes("\xff\xfe", 2);
        const QString s = QStringLiteral("Héllo\r\nworld");
        bytes.append(reinterpret_cast<const char *>(s.utf16()), s.size() * 2);
        const std::optional<Book> book = loadBook(writeFile(dir, QStringLiteral("u16.txt"), bytes));
        QVERIFY(book);
        QCOMPARE(book->text, QStringLiteral("Héllo\nworld\n"));
    }

    void invalidUtf8Replaced()
    {
        QTemporaryDir dir;
        QByteArray bytes = "Caf\xe9 au lait, na\xefve. ";
        bytes += QByteArray("A perfectly ordinary sentence of text. ").repeated(5);
        const std::optional<Book> book = loadBook(writeFile(dir, QStringLiteral("latin1.txt"), bytes));
        QVERIFY(book);
        QVERIFY(book->text.startsWith(QStringLiteral("Caf\ufffd au lait, na\ufffdve.")));
    }

    void binaryRejected()
    {
        QTemporaryDir dir;
        QString error;
        QByteArray withNul("some text\0more", 14);
        QVERIFY(!loadBook(writeFile(dir, QStringLiteral("nul.txt"), withNul), &error));
        QVERIFY(error.contains(QStringLiteral("not a text file")));

        QByteArray noise;
        for (int i = 0; i < 4096; ++i)
            noise.append(char(0x80 + (i * 37) % 0x7f));
        error.clear();
        QVERIFY(!loadBook(writeFile(dir, QStringLiteral("noise.bin"), noise), &error));
        QVERIFY(error.contains(QStringLiteral("not a text file")));

        error.clear();
        QVERIFY(!loadBook(QStringLiteral(LONGSCOPE_BUNDLED_MODEL), &error));
        QVERIFY(error.contains(QStringLiteral("not a text file")));
    }

    void hugeRejected()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("huge.txt"));
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            QVERIFY(f.resize(65LL * 1024 * 1024)); // sparse
        }
        QString error;
        QVERIFY(!loadBook(path, &error));
        QVERIFY2(error.contains(QStringLiteral("too large")), qPrintable(error));
    }

    void emptyAndMissing()
    {
        QTemporaryDir dir;
        const std::optional<Book> empty = loadBook(writeFile(dir, QStringLiteral("empty.txt"), QByteArray()));
        QVERIFY(empty);
        QVERIFY(empty->text.isEmpty());
        QCOMPARE(empty->original_bytes, qint64(0));

        QString error;
        QVERIFY(!loadBook(dir.filePath(QStringLiteral("missing.txt")), &error));
        QVERIFY(!error.isEmpty());
        error.clear();
        QVERIFY(!loadBook(dir.path(), &error));
        QVERIFY(error.contains(QStringLiteral("directory")));
    }
};

QTEST_GUILESS_MAIN(TestBook)
#include "tst_book.moc"
