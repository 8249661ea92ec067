#pragma once

#include <string>
#include <vector>

namespace longscope::cli {

// Each returns the process exit status; they throw UsageError or longscope::Error.
int cmd_generate(const std::vector<std::string> &args, const char *argv0);
int cmd_tokenize(const std::vector<std::string> &args, const char *argv0);
int cmd_info(const std::vector<std::string> &args, const char *argv0);
int cmd_bench(const std::vector<std::string> &args, const char *argv0);

} // namespace longscope::cli
