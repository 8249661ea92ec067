// Writing an export (a plot's PNG, a table's CSV) all at once: through QSaveFile, so a failed
// write leaves whatever was at the path before. On failure, false and, when `error` is given,
// "Cannot write PATH: REASON".
#pragma once

#include <QByteArray>
#include <QImage>
#include <QString>

namespace longscope::ui {

bool saveBytes(const QString &path, const QByteArray &bytes, QString *error);
bool savePng(const QString &path, const QImage &image, QString *error);

} // namespace longscope::ui
