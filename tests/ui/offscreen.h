// Included by the widget suites: they run off screen unless QT_QPA_PLATFORM names a platform.
// QTEST_MAIN builds the QApplication in main(), so the platform is chosen here, while the
// suite's globals are initialised before main().
#pragma once

#include <QByteArray>
#include <QtGlobal>

namespace longscope::test {

inline const bool k_offscreen = [] {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    return true;
}();

} // namespace longscope::test
