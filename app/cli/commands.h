#pragma once

#include <string>
#include <vector>

#include "args.h"

#include "longscope/perplexity.h"
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

// A whole file as bytes; IoError naming the path when it cannot be read.
std::string read_text_file(const std::string &path);
// The text of -p TEXT or -f FILE (or, when allowed, one positional TEXT); UsageError when
// none or more than one is given.
std::string prompt_text(const Args &a, bool allow_positional);


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

// Prints a perplexity result as `perplexity` does (a table, or --json, and --csv FILE);
// `edge` marks the first bucket past it ("trained context" for a local model).
int report_perplexity(const Args &a, const PerplexityResult &r, int edge, const char *edge_name,
                      const char *edge_key);

// generate and perplexity against an OpenAI-compatible server (--remote URL): the commands
// above hand over when --remote is given.
bool wants_remote(const std::vector<std::string> &args);
int cmd_generate_remote(const std::vector<std::string> &args);
int cmd_perplexity_remote(const std::vector<std::string> &args);

} // namespace longscope::cli
