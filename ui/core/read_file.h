// Reading a file whole when it may not be what its name says: a symlink to /dev/zero (size()
// is 0 and the reading never ends), a FIFO (opening it waits for a writer), a device, a
// directory, or a file far larger than any the app writes. Every file the app reads whole
// (conversations, saved runs, books, the settings file) goes through here.
#pragma once

#include <QByteArray>
#include <QString>

#include <optional>

namespace longscope::ui {

// The bytes of `path` if it is a regular file (symlinks followed) of at most `maxBytes`; else
// nullopt with `error` set to one line naming the file: "PATH: not a regular file (a FIFO)",
// "PATH: too large (over the limit of 16 MiB)", "PATH: cannot open: ...". The size is not
// taken from the file system's word: at most `maxBytes` + 1 bytes are ever read, and opening
// never blocks.
std::optional<QByteArray> readRegularFile(const QString &path, qint64 maxBytes, QString *error = nullptr);

} // namespace longscope::ui
