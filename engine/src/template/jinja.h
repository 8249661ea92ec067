// A Jinja renderer for chat templates: the language Hugging Face renders `chat_template` with
// (jinja2 with trim_blocks and lstrip_blocks, the loopcontrols extension, tojson with indent and
// ensure_ascii, raise_exception, strftime_now, namespace, dict). No Qt, no external library.
//
// Hard bounds make a hostile template end with a TemplateError, never a crash or a hang: the
// nesting depth of the template, of expressions and of macro calls, the number of loop
// iterations, and the size of the output and of every string or list built while rendering.
#pragma once

#include "longscope/errors.h"

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace longscope::jinja {

// A template that cannot be parsed or that raises while rendering. The message names the line,
// column and construct ("line 3, column 12: filter 'foo': no such filter").
class TemplateError : public FormatError {
public:
    using FormatError::FormatError;
};

struct Limits {
    int max_depth = 256;                  // template blocks, expression nesting and macro calls together
    long max_loop_iterations = 1'000'000; // all loops of one render together
    size_t max_output = 16u << 20;        // bytes of output, and of any one string or list built
};

struct RenderOptions {
    // What strftime_now formats; the current local time when unset.
    std::optional<std::tm> now;
    Limits limits;
};

struct Program; // the parsed template

class Template {
public:
    // Throws TemplateError for a syntax error, an unknown tag, filter or test.
    explicit Template(std::string_view source, const Limits &limits = {});
    ~Template();
    Template(Template &&) noexcept;
    Template &operator=(Template &&) noexcept;

    // Renders with `context` (a JSON object: its members are the template's variables, in
    // addition to the globals range, namespace, dict, raise_exception and strftime_now).
    // Throws TemplateError.
    std::string render(const nlohmann::ordered_json &context, const RenderOptions &options = {}) const;

private:
    std::unique_ptr<Program> m_program;
};

// Parses and renders at once.
std::string render(std::string_view source, const nlohmann::ordered_json &context, const RenderOptions &options = {});

} // namespace longscope::jinja
