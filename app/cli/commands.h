#pragma once

#include <string>
#include <vector>

#include "args.h"

#include "longscope/settings.h"

namespace longscope::cli {

// The long-context options (--alpha, --kv-before-rope, --attn, --causal-flash, --kv,
// --overflow) appended to a command's own, and the Settings they give.
std::vector<OptionSpec> with_settings(std::vector<OptionSpec> specs);
Settings settings_from_args(const Args &a);
// --kv-type-k / --kv-type-v: f32 (the default), f16, q8_0 or q4_0; UsageError otherwise.
KvType kv_type_from_args(const Args &a, const std::string &option);

// A whole file's bytes; IoError naming the file when it cannot be read.
std::string read_text_file(const std::string &path);


// Each returns the process exit status; they throw UsageError or longscope::Error.
int cmd_generate(const std::vector<std::string> &args, const char *argv0);
int cmd_tokenize(const std::vector<std::string> &args, const char *argv0);
int cmd_template(const std::vector<std::string> &args, const char *argv0);
int cmd_info(const std::vector<std::string> &args, const char *argv0);
int cmd_bench(const std::vector<std::string> &args, const char *argv0);
int cmd_perplexity(const std::vector<std::string> &args, const char *argv0);
int cmd_passkey(const std::vector<std::string> &args, const char *argv0);
int cmd_quantize(const std::vector<std::string> &args, const char *argv0);
int cmd_make_model(const std::vector<std::string> &args, const char *argv0);
int cmd_serve(const std::vector<std::string> &args, const char *argv0);

} // namespace longscope::cli
