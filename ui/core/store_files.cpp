#include "core/store_files.h"

#include <QFile>
#include <QFileInfo>
#include <QSaveFile>

namespace longscope::ui {

void setStoreError(QString *error, const QString &message)
{
    if (error)
        *error = message;
}

bool writeFileAtomically(const QString &path, const QByteArray &bytes, QString *error)
{
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly)) {
        setStoreError(error, QStringLiteral("%1: cannot write: %2").arg(path, f.errorString()));
        return false;
    }
    if (f.write(bytes) != bytes.size()) {
        setStoreError(error, QStringLiteral("%1: write failed: %2").arg(path, f.errorString()));
        f.cancelWriting();
        return false;
    }
    if (!f.commit()) {
        setStoreError(error, QStringLiteral("%1: could not be saved: %2").arg(path, f.errorString()));
        return false;
    }
    return true;
}

QString unwritableDirectory(const QString &dir, const QString &what)
{
    const QFileInfo fi(dir);
    if (fi.isDir() && fi.isWritable())
        return {};
    return QStringLiteral("%1 are not saved: %2 is not a writable folder").arg(what, dir);
}

QString removeStoredFile(const QString &path, bool valid_id, const QString &what, const QString &id)
{
    if (!valid_id)
        return QStringLiteral("invalid %1 id \"%2\"").arg(what, id);
    if (!QFileInfo(path).isFile())
        return QStringLiteral("no %1 \"%2\"").arg(what, id);
    if (!QFile::remove(path))
        return QStringLiteral("%1: could not be removed").arg(path);
    return {};
}

} // namespace longscope::ui
