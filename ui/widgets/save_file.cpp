#include "widgets/save_file.h"

#include <QCoreApplication>
#include <QSaveFile>

#include <functional>

namespace longscope::ui {

namespace {

bool save(const QString &path, const std::function<bool(QSaveFile &)> &write, QString *error)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || !write(file) || !file.commit()) {
        if (error)
            *error = QCoreApplication::translate("longscope::ui::SaveFile", "Cannot write %1: %2")
                         .arg(path, file.errorString());
        return false;
    }
    return true;
}

} // namespace

bool saveBytes(const QString &path, const QByteArray &bytes, QString *error)
{
    return save(path, [&](QSaveFile &file) { return file.write(bytes) == bytes.size(); }, error);
}

bool savePng(const QString &path, const QImage &image, QString *error)
{
    return save(path, [&](QSaveFile &file) { return image.save(&file, "PNG"); }, error);
}

} // namespace longscope::ui
