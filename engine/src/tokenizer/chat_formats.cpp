// Built-in chat formats. Each renders what llama.cpp's built-in formatter of the same name
// writes (tests/data/templates/fallbacks.json holds llama.cpp's outputs), except llama-2, which
// renders what Meta's Llama-2-chat template renders (</s><s> between turns). The texts are read
// by scripts/render-template-fixtures.py too, so jinja2 renders them as the engine does.
#include "tokenizer/chat_formats.h"

#include "longscope/tokenizer.h"

#include <utility>

namespace longscope {

namespace {

// text(content): a message's text, whether given as a string or as a list of parts.
constexpr std::string_view k_prelude = R"jinja({%- macro text(c) -%}
{%- if c is string -%}{{ c }}{%- elif c is iterable and c is not mapping -%}
{%- for p in c if p.type == 'text' -%}{{ p.text }}{%- endfor -%}{%- endif -%}
{%- endmacro -%}
)jinja";

const std::vector<std::pair<std::string_view, std::string_view>> k_formats = {
    {"chatml", R"jinja({%- for m in messages -%}
{{ '<|im_start|>' + m.role + '\n' + text(m.content) + '<|im_end|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif -%})jinja"},
    {"llama-2", R"jinja({%- set ns = namespace(system='', first=true) -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}{%- set ns.system = '<<SYS>>\n' + text(m.content) | trim + '\n<</SYS>>\n\n' -%}
{%- elif m.role == 'user' -%}{{ bos_token + '[INST] ' + ns.system + text(m.content) | trim + ' [/INST]' }}{%- set ns.system = '' -%}
{%- else -%}{{ ' ' + text(m.content) | trim + ' ' + eos_token }}{%- endif -%}
{%- endfor -%})jinja"},
    {"mistral-v1", R"jinja({%- set ns = namespace(open=false) -%}
{%- for m in messages -%}
{%- if not ns.open %}{{ ' [INST] ' }}{% set ns.open = true %}{% endif -%}
{%- if m.role == 'system' %}{{ text(m.content) + '\n\n' }}
{%- elif m.role == 'user' %}{{ text(m.content) + ' [/INST]' }}
{%- else %}{{ ' ' + text(m.content) + '</s>' }}{% set ns.open = false %}{% endif -%}
{%- endfor -%})jinja"},
    {"mistral-v3", R"jinja({%- set ns = namespace(open=false) -%}
{%- for m in messages -%}
{%- if not ns.open %}{{ '[INST] ' }}{% set ns.open = true %}{% endif -%}
{%- if m.role == 'system' %}{{ text(m.content) + '\n\n' }}
{%- elif m.role == 'user' %}{{ text(m.content) + '[/INST]' }}
{%- else %}{{ ' ' + text(m.content) | trim + '</s>' }}{% set ns.open = false %}{% endif -%}
{%- endfor -%})jinja"},
    {"mistral-v3-tekken", R"jinja({%- set ns = namespace(open=false) -%}
{%- for m in messages -%}
{%- if not ns.open %}{{ '[INST]' }}{% set ns.open = true %}{% endif -%}
{%- if m.role == 'system' %}{{ text(m.content) + '\n\n' }}
{%- elif m.role == 'user' %}{{ text(m.content) + '[/INST]' }}
{%- else %}{{ text(m.content) + '</s>' }}{% set ns.open = false %}{% endif -%}
{%- endfor -%})jinja"},
    {"mistral-v7", R"jinja({%- for m in messages -%}
{%- if m.role == 'system' %}{{ '[SYSTEM_PROMPT] ' + text(m.content) + '[/SYSTEM_PROMPT]' }}
{%- elif m.role == 'user' %}{{ '[INST] ' + text(m.content) + '[/INST]' }}
{%- else %}{{ ' ' + text(m.content) + '</s>' }}{% endif -%}
{%- endfor -%})jinja"},
    {"llama-3", R"jinja({%- for m in messages -%}
{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + text(m.content) | trim + '<|eot_id|>' }}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif -%})jinja"},
    {"phi-3", R"jinja({%- for m in messages -%}
{{ '<|' + m.role + '|>\n' + text(m.content) + '<|end|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif -%})jinja"},
    {"phi-4", R"jinja({%- for m in messages -%}
{{ '<|im_start|>' + m.role + '<|im_sep|>' + text(m.content) + '<|im_end|>' }}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif -%})jinja"},
    {"zephyr", R"jinja({%- for m in messages -%}
{{ '<|' + m.role + '|>\n' + text(m.content) + '<|endoftext|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif -%})jinja"},
    {"monarch", R"jinja({%- for m in messages -%}
{{ ('' if loop.first else '<s>') + m.role + '\n' + text(m.content) + '</s>\n' }}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<s>assistant\n' }}{% endif -%})jinja"},
    {"gemma", R"jinja({%- set ns = namespace(system='') -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}{%- set ns.system = ns.system + text(m.content) | trim -%}
{%- else -%}
{%- set role = 'model' if m.role == 'assistant' else m.role -%}
{{ '<start_of_turn>' + role + '\n' }}
{%- if ns.system and role != 'model' %}{{ ns.system + '\n\n' }}{% set ns.system = '' %}{% endif -%}
{{ text(m.content) | trim + '<end_of_turn>\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif -%})jinja"},
    {"vicuna", R"jinja({%- for m in messages -%}
{%- if m.role == 'system' %}{{ text(m.content) + '\n\n' }}
{%- elif m.role == 'user' %}{{ 'USER: ' + text(m.content) + '\n' }}
{%- else %}{{ 'ASSISTANT: ' + text(m.content) + '</s>\n' }}{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif -%})jinja"},
    {"vicuna-orca", R"jinja({%- for m in messages -%}
{%- if m.role == 'system' %}{{ 'SYSTEM: ' + text(m.content) + '\n' }}
{%- elif m.role == 'user' %}{{ 'USER: ' + text(m.content) + '\n' }}
{%- else %}{{ 'ASSISTANT: ' + text(m.content) + '</s>\n' }}{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif -%})jinja"},
    {"deepseek", R"jinja({%- for m in messages -%}
{%- if m.role == 'system' %}{{ text(m.content) }}
{%- elif m.role == 'user' %}{{ '### Instruction:\n' + text(m.content) + '\n' }}
{%- else %}{{ '### Response:\n' + text(m.content) + '\n<|EOT|>\n' }}{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '### Response:\n' }}{% endif -%})jinja"},
    {"command-r", R"jinja({%- for m in messages -%}
{%- set token = {'system': '<|SYSTEM_TOKEN|>', 'user': '<|USER_TOKEN|>'}.get(m.role, '<|CHATBOT_TOKEN|>') -%}
{{ '<|START_OF_TURN_TOKEN|>' + token + text(m.content) | trim + '<|END_OF_TURN_TOKEN|>' }}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif -%})jinja"},
    {"plain", R"jinja({%- for m in messages -%}
{%- if m.role == 'system' and loop.first %}{{ text(m.content) + '\n\n' }}
{%- elif m.role == 'user' %}{{ 'User: ' + text(m.content) + '\n' }}
{%- else %}{{ 'Assistant: ' + text(m.content) + '\n' }}{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}{{ 'Assistant:' }}{% endif -%})jinja"},
};

} // namespace

std::string builtin_format_source(std::string_view name)
{
    for (const auto &[n, body] : k_formats)
        if (n == name)
            return std::string(k_prelude) + std::string(body);
    return {};
}

std::vector<std::string> builtin_format_names()
{
    std::vector<std::string> out;
    for (const auto &f : k_formats)
        out.emplace_back(f.first);
    return out;
}

std::string detect_format(std::string_view t)
{
    auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
    if (has("<|im_start|>"))
        return has("<|im_sep|>") ? "phi-4" : "chatml";
    if (t.substr(0, 7) == "mistral" || has("[INST]")) {
        if (has("[SYSTEM_PROMPT]"))
            return "mistral-v7";
        if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
            if (has(" [INST]"))
                return "mistral-v1";
            if (has("\"[INST]\""))
                return "mistral-v3-tekken";
            return "mistral-v3";
        }
        return "llama-2";
    }
    if (has("<|assistant|>") && has("<|end|>"))
        return "phi-3";
    if (has("<|user|>") && has("<|endoftext|>"))
        return "zephyr";
    if (has("bos_token + message['role']"))
        return "monarch";
    if (has("<start_of_turn>"))
        return "gemma";
    if (has("USER: ") && has("ASSISTANT: "))
        return has("SYSTEM: ") ? "vicuna-orca" : "vicuna";
    if (has("### Instruction:") && has("<|EOT|>"))
        return "deepseek";
    if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>"))
        return "command-r";
    if (has("<|start_header_id|>") && has("<|end_header_id|>"))
        return "llama-3";
    return {};
}

std::string format_from_vocabulary(const Tokenizer &tok)
{
    static const std::pair<std::string_view, std::string_view> markers[] = {
        {"<|im_start|>", "chatml"},      {"<|start_header_id|>", "llama-3"},
        {"<start_of_turn>", "gemma"},     {"[SYSTEM_PROMPT]", "mistral-v7"},
        {"[INST]", "mistral-v3"},         {"<|START_OF_TURN_TOKEN|>", "command-r"},
        {"<|assistant|>", "phi-3"}};
    for (const auto &[marker, name] : markers)
        for (int32_t id = 0; id < tok.n_vocab(); ++id)
            if (tok.piece(id) == marker)
                return std::string(name);
    return {};
}

} // namespace longscope
