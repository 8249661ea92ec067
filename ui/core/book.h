// Loading a plain-text book: size and binary checks, BOM, line endings, invalid UTF-8, and
// the Project Gutenberg header and footer stripped, title and author read from the header.
#pragma once

#include <QByteArray>
#include <QString>

#include <optional>

namespace longscope::ui {

struct Book {
    QString path;
    QString title;   // the Gutenberg "Title:" line, else the file's base name
    QString author;  // the Gutenberg "Author:" line, else empty
    QString text;    // the book's text, normalised (LF line endings, no BOM)
    qint64 original_bytes = 0;
    bool stripped = false; // a Gutenberg header or footer was removed
};

inline constexpr qint64 kMaxBookBytes = 64LL * 1024 * 1024;

// nullopt with `error` set for a directory, a missing or unreadable file, anything not a
// regular file (a FIFO, a device: "... not a regular file ..."), a file over
// kMaxBookBytes ("... too large ..."), or a binary file ("... not a text file"). An empty
// file gives an empty book.
std::optional<Book> loadBook(const QString &path, QString *error = nullptr);

// The decoding and stripping part of loadBook(), on bytes already read. nullopt with `error`
// for binary content.
std::optional<Book> parseBook(const QByteArray &bytes, const QString &name, QString *error = nullptr);

} // namespace longscope::ui
