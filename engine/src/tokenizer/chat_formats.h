// The built-in chat formats the chat layer falls back to, written as Jinja templates, and the
// choice among them as llama.cpp makes it (markers in the model's template, else its vocabulary).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace longscope {

class Tokenizer;

// The Jinja text of a built-in format ("" for an unknown name), with the shared prelude.
std::string builtin_format_source(std::string_view name);
std::vector<std::string> builtin_format_names();

// The built-in format a template's markers point to, as llama.cpp's detection reads them; ""
// when none does.
std::string detect_format(std::string_view template_text);

// For a model without a template: the format whose turn markers its vocabulary has; "" when none.
std::string format_from_vocabulary(const Tokenizer &tok);

} // namespace longscope
