#include "core/model_paths.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>

namespace longscope::ui {

QString bundledModelPath()
{
    static const QString file = QStringLiteral("stories260K.gguf");
    if (QCoreApplication::instance()) {
        // Installed: <prefix>/bin/longscope and <prefix>/<datadir>/longscope/models/.
        const QDir exeDir(QCoreApplication::applicationDirPath());
        const QString installDir = QStringLiteral(LONGSCOPE_INSTALL_MODEL_DIR);
        const QStringList candidates{
            QDir::isAbsolutePath(installDir) ? QDir(installDir).filePath(file)
                                             : exeDir.filePath(QStringLiteral("../") + installDir + QLatin1Char('/') + file),
            exeDir.filePath(QStringLiteral("../share/longscope/models/") + file),
        };
        for (const QString &c : candidates)
            if (QFileInfo(c).isFile())
                return QDir::cleanPath(QFileInfo(c).absoluteFilePath());
    }
    const QString source = QStringLiteral(LONGSCOPE_SOURCE_MODEL);
    if (!source.isEmpty() && QFileInfo(source).isFile())
        return source;
    return QString();
}

} // namespace longscope::ui
