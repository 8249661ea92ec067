#include "core/book.h"

#include "core/read_file.h"

#include <QFileInfo>
#include <QRegularExpression>
#include <QStringDecoder>

namespace longscope::ui {

namespace {

// More than this share of invalid UTF-8 or control bytes: not a text file.
constexpr double k_max_bad_ratio = 0.10;

std::nullopt_t fail(QString *error, const QString &message)
{
    if (error)
        *error = message;
    return std::nullopt;
}

// Bytes that are not part of a valid UTF-8 sequence (each counts once), plus control
// characters no text file has.
qsizetype countBadBytes(const QByteArray &bytes)
{
    const auto *p = reinterpret_cast<const unsigned char *>(bytes.constData());
    const qsizetype n = bytes.size();
    qsizetype bad = 0;
    qsizetype i = 0;
    while (i < n) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' && c != '\v' && c != 0x1b)
                ++bad;
            ++i;
            continue;
        }
        int len = 0;
        unsigned int cp = 0;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            cp = c & 0x07;
        } else {
            ++bad;
            ++i;
            continue;
        }
        bool ok = i + len <= n;
        for (int k = 1; ok && k < len; ++k) {
            if ((p[i + k] & 0xc0) != 0x80)
                ok = false;
            else
                cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        // Overlong forms, surrogates and values past U+10FFFF are invalid too.
        if (ok && ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))))
            ok = false;
        if (!ok) {
            ++bad;
            ++i;
            continue;
        }
        i += len;
    }
    return bad;
}

QString headerField(const QString &header, const QString &name)
{
    // "Title: Alice's Adventures in Wonderland". Indented continuation lines are left out:
    // they are usually a subtitle ("A Story of the French Revolution").
    const QRegularExpression re(QStringLiteral("^%1:[ \\t]*(.*)$").arg(name),
                                QRegularExpression::MultilineOption | QRegularExpression::CaseInsensitiveOption);
    const QRegularExpressionMatch m = re.match(header);
    return m.hasMatch() ? m.captured(1).trimmed() : QString();
}

QString trimBlankLines(const QString &text)
{
    qsizetype begin = 0;
    // Drop whole leading blank lines (keep the first line's indentation).
    while (true) {
        const qsizetype nl = text.indexOf(QLatin1Char('\n'), begin);
        if (nl < 0 || !QStringView(text).mid(begin, nl - begin).trimmed().isEmpty())
            break;
        begin = nl + 1;
    }
    qsizetype end = text.size();
    while (end > begin && text[end - 1].isSpace())
        --end;
    QString out = text.mid(begin, end - begin);
    if (!out.isEmpty())
        out += QLatin1Char('\n');
    return out;
}

} // namespace

std::optional<Book> parseBook(const QByteArray &raw, const QString &name, QString *error)
{
    Book book;
    book.original_bytes = raw.size();
    QString text;
    if (raw.startsWith("\xff\xfe") || raw.startsWith("\xfe\xff")) {
        // UTF-16 with a byte order mark (Notepad's "Unicode").
        QStringDecoder dec(raw.startsWith("\xff\xfe") ? QStringConverter::Utf16LE : QStringConverter::Utf16BE);
        text = dec.decode(raw.mid(2));
        if (text.contains(QChar(0)))
            return fail(error, QStringLiteral("%1 is not a text file").arg(name));
    } else {
        QByteArray bytes = raw;
        if (bytes.startsWith("\xef\xbb\xbf"))
            bytes.remove(0, 3);
        if (bytes.contains('\0'))
            return fail(error, QStringLiteral("%1 is not a text file (it holds NUL bytes)").arg(name));
        const qsizetype bad = countBadBytes(bytes);
        if (!bytes.isEmpty() && double(bad) / double(bytes.size()) > k_max_bad_ratio)
            return fail(error, QStringLiteral("%1 is not a text file (%2% of its bytes are not UTF-8 text)")
                                       .arg(name)
                                       .arg(100.0 * double(bad) / double(bytes.size()), 0, 'f', 0));
        text = QString::fromUtf8(bytes); // invalid sequences become U+FFFD
    }
    if (text.startsWith(QChar(0xfeff)))
        text.remove(0, 1);
    text.replace(QStringLiteral("\r\n"), QStringLiteral("\n"));
    text.replace(QLatin1Char('\r'), QLatin1Char('\n'));

    // Project Gutenberg: "*** START OF THE PROJECT GUTENBERG EBOOK TITLE ***" (or the older
    // "THIS PROJECT GUTENBERG EBOOK") ends the header, "*** END OF ..." starts the footer.
    static const QRegularExpression startRe(
        QStringLiteral("^[ \\t]*\\*{3}[ \\t]*START OF (THE|THIS) PROJECT GUTENBERG E-?BOOK[^\\n]*$"),
        QRegularExpression::MultilineOption | QRegularExpression::CaseInsensitiveOption);
    static const QRegularExpression endRe(
        QStringLiteral("^[ \\t]*\\*{3}[ \\t]*END OF (THE|THIS) PROJECT GUTENBERG E-?BOOK"),
        QRegularExpression::MultilineOption | QRegularExpression::CaseInsensitiveOption);
    static const QRegularExpression endNoteRe(
        QStringLiteral("^[ \\t]*End of (the )?Project Gutenberg"),
        QRegularExpression::MultilineOption | QRegularExpression::CaseInsensitiveOption);

    const QRegularExpressionMatch start = startRe.match(text);
    if (start.hasMatch()) {
        const QString header = text.left(start.capturedStart(0));
        book.title = headerField(header, QStringLiteral("Title"));
        book.author = headerField(header, QStringLiteral("Author"));
        text = text.mid(start.capturedEnd(0));
        book.stripped = true;
    }
    const QRegularExpressionMatch end = endRe.match(text);
    if (end.hasMatch()) {
        qsizetype cut = end.capturedStart(0);
        // "End of the Project Gutenberg EBook of ..." just before the marker is footer too.
        const qsizetype lookback = std::max<qsizetype>(0, cut - 400);
        QRegularExpressionMatchIterator it = endNoteRe.globalMatch(text.mid(lookback, cut - lookback));
        while (it.hasNext()) {
            const QRegularExpressionMatch m = it.next();
            cut = lookback + m.capturedStart(0);
            break;
        }
        text.truncate(cut);
        book.stripped = true;
    }
    book.text = trimBlankLines(text);
    if (book.title.isEmpty())
        book.title = name;
    return book;
}

std::optional<Book> loadBook(const QString &path, QString *error)
{
    const QFileInfo fi(path);
    if (!fi.exists())
        return fail(error, QStringLiteral("%1: no such file").arg(path));
    if (fi.isDir())
        return fail(error, QStringLiteral("%1 is a directory, not a text file").arg(path));
    if (fi.size() > kMaxBookBytes)
        return fail(error, QStringLiteral("%1 is too large: %2 MiB (the limit is %3 MiB)")
                                   .arg(path)
                                   .arg(double(fi.size()) / (1024.0 * 1024.0), 0, 'f', 1)
                                   .arg(kMaxBookBytes / (1024 * 1024)));
    const std::optional<QByteArray> bytes = readRegularFile(path, kMaxBookBytes, error);
    if (!bytes)
        return std::nullopt;
    std::optional<Book> book = parseBook(*bytes, fi.completeBaseName(), error);
    if (book)
        book->path = path;
    return book;
}

} // namespace longscope::ui
