// Fuzzes the Jinja renderer: the input is a template, rendered over a fixed conversation with
// tools. Every input must render or end in a TemplateError: no crash, no hang, no other exception.
#include "template/jinja.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using json = nlohmann::ordered_json;
    static const json context = json::parse(R"({
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": [{"type": "text", "text": "Hi \u00e9"}]},
            {"role": "assistant", "content": "", "reasoning_content": "think",
             "tool_calls": [{"id": "call12345", "type": "function",
                             "function": {"name": "f", "arguments": {"x": 1}}}]},
            {"role": "tool", "tool_call_id": "call12345", "content": "42"},
            {"role": "user", "content": "Bye"}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "documents": null,
        "add_generation_prompt": true,
        "bos_token": "<s>",
        "eos_token": "</s>"
    })");
    longscope::jinja::RenderOptions options;
    options.now = std::tm{};
    options.limits.max_loop_iterations = 20000;
    options.limits.max_output = 1 << 20;
    options.limits.max_depth = 128;
    try {
        (void)longscope::jinja::render(std::string_view(reinterpret_cast<const char *>(data), size), context, options);
    } catch (const longscope::jinja::TemplateError &) {
    }
    return 0;
}
