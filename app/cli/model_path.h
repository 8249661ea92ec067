#pragma once

#include <string>

namespace longscope::cli {

// The model to use when -m is not given: $LONGSCOPE_MODEL, then the bundled stories260K next
// to the installed binary (../share/longscope/models), then the source tree's copy.
// Throws UsageError when none exists.
std::string default_model_path(const char *argv0);

} // namespace longscope::cli
