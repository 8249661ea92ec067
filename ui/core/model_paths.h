// Where the bundled stories260K model is.
#pragma once

#include <QString>

namespace longscope::ui {

// The installed copy (<exe dir>/../share/longscope/models/stories260K.gguf), else the one in
// the source tree, else an empty string.
QString bundledModelPath();

} // namespace longscope::ui
