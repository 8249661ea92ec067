// File handling shared by the stores that keep one JSON file per item in a directory
// (conversations, exploration runs): atomic writes and checked removal.
#pragma once

#include <QByteArray>
#include <QString>

namespace longscope::ui {

void setStoreError(QString *error, const QString &message);

// Writes `bytes` to `path` through QSaveFile: a crash mid-write keeps the old file.
bool writeFileAtomically(const QString &path, const QByteArray &bytes, QString *error = nullptr);

// Empty when `dir` is a folder items can be saved in; else one line saying that `what`
// ("Conversations") are not saved and why.
QString unwritableDirectory(const QString &dir, const QString &what);

// Removes the file of item `id` (`what` names the kind in messages, e.g. "conversation").
// Returns an empty string on success, else why it could not.
QString removeStoredFile(const QString &path, bool valid_id, const QString &what, const QString &id);

} // namespace longscope::ui
