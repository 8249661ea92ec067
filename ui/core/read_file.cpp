#include "core/read_file.h"

#include <QFile>
#include <QLocale>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace longscope::ui {

namespace {

std::nullopt_t fail(QString *error, const QString &message)
{
    if (error)
        *error = message;
    return std::nullopt;
}

QString kindOf(mode_t mode)
{
    if (S_ISDIR(mode))
        return QStringLiteral("a directory");
    if (S_ISFIFO(mode))
        return QStringLiteral("a FIFO");
    if (S_ISCHR(mode))
        return QStringLiteral("a character device");
    if (S_ISBLK(mode))
        return QStringLiteral("a block device");
    if (S_ISSOCK(mode))
        return QStringLiteral("a socket");
    return QStringLiteral("not a file");
}

QString tooLarge(const QString &path, qint64 maxBytes)
{
    return QStringLiteral("%1: too large (over the limit of %2)").arg(path, QLocale::c().formattedDataSize(maxBytes));
}

} // namespace

std::optional<QByteArray> readRegularFile(const QString &path, qint64 maxBytes, QString *error)
{
    // O_NONBLOCK: opening a FIFO does not wait for a writer; the type is then checked on the
    // descriptor itself, so a file swapped after a check cannot slip through.
    const int fd = ::open(QFile::encodeName(path).constData(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return fail(error, QStringLiteral("%1: cannot open: %2").arg(path, QString::fromLocal8Bit(std::strerror(errno))));
    QFile f;
    if (!f.open(fd, QIODevice::ReadOnly, QFileDevice::AutoCloseHandle)) {
        ::close(fd);
        return fail(error, QStringLiteral("%1: cannot open: %2").arg(path, f.errorString()));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        return fail(error, QStringLiteral("%1: cannot read: %2").arg(path, QString::fromLocal8Bit(std::strerror(errno))));
    if (!S_ISREG(st.st_mode))
        return fail(error, QStringLiteral("%1: not a regular file (%2)").arg(path, kindOf(st.st_mode)));
    if (st.st_size > maxBytes)
        return fail(error, tooLarge(path, maxBytes));
    // Read to the end in chunks, one byte past the limit at most: the file may have grown
    // since, and some (those under /proc) say they are empty.
    QByteArray bytes;
    constexpr qint64 kChunk = 1 << 16;
    while (true) {
        const qint64 want = std::min(kChunk, maxBytes + 1 - bytes.size());
        const qsizetype at = bytes.size();
        bytes.resize(at + qsizetype(want));
        const qint64 got = f.read(bytes.data() + at, want);
        if (got < 0)
            return fail(error, QStringLiteral("%1: read failed: %2").arg(path, f.errorString()));
        bytes.resize(at + qsizetype(got));
        if (bytes.size() > maxBytes)
            return fail(error, tooLarge(path, maxBytes));
        if (got == 0)
            return bytes;
    }
}

} // namespace longscope::ui
