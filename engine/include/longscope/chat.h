// Chat prompts: the conversation rendered with the model's own Jinja chat template (or a named
// built-in format when it has none or it fails), tokenized and fitted into the context.
#pragma once

#include "longscope/model.h"
#include "longscope/settings.h"

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace longscope {

struct ChatMessage {
    enum class Role { System, User, Assistant, Tool };
    Role role = Role::User;
    std::string content;
    std::string reasoning_content; // the assistant's reasoning, when it gave one apart
    // The message as a JSON object when it came as one (a messages file, a request): content
    // parts, tool_calls, tool_call_id, name, ... The template sees this object as it is; role
    // and content above then only serve to fit the conversation. Empty: role and content.
    std::string json;
};

std::string_view to_string(ChatMessage::Role role);

// Reads messages in the OpenAI / Hugging Face form: a JSON array of {"role", "content", ...}
// objects, or an object holding one under "messages". Roles: system, developer (as system),
// user, assistant, tool; content a string, a list of parts, or null. Throws InvalidArgument
// naming the message and what is wrong.
std::vector<ChatMessage> parse_chat_messages(std::string_view json_text);

// The built-in formats (chatml, llama-2, mistral-v1/v3/v3-tekken/v7, llama-3, phi-3, phi-4,
// zephyr, monarch, gemma, vicuna, vicuna-orca, deepseek, command-r, plain).
std::vector<std::string> builtin_chat_formats();

// The built-in format a template's markers point to, as llama.cpp's detection reads them; ""
// when none does.
std::string detect_chat_format(std::string_view template_text);

struct ChatRenderOptions {
    bool add_generation_prompt = true;
    std::string tools_json;        // a JSON array of tool definitions; empty: none
    std::string template_text;     // Jinja text used instead of the model's; an error in it throws
    std::string format;            // a built-in format used instead of the model's template
    std::optional<std::tm> now;    // what strftime_now formats; the current local time when unset
    // false: an error in the model's own template throws FormatError with the renderer's
    // message instead of falling back to a built-in format (the server answers it as a 400).
    bool fallback = true;
};

struct RenderedChat {
    std::string text;   // the prompt exactly as it is tokenized
    std::string format; // "model", "custom" (template_text) or the built-in format's name
    std::string note;   // why a built-in format is used (empty for the model's own template)
};

// Renders the conversation. The model's template (GGUF tokenizer.chat_template, HF
// tokenizer_config.json chat_template) when it has one and it renders; else a built-in format
// chosen as llama.cpp chooses it (the template's markers; without a template the markers in the
// vocabulary, else plain), with the reason in `note`. Throws InvalidArgument for bad options,
// FormatError when `template_text` fails.
RenderedChat render_chat(const Model &model, const std::vector<ChatMessage> &messages,
                         const ChatRenderOptions &options = {});

// A built-in format by name over the messages, with bos_token "<s>" and eos_token "</s>"
// (InvalidArgument for an unknown name).
std::string format_chat(std::string_view format, const std::vector<ChatMessage> &messages,
                        bool add_generation_prompt = true);

// The one place chat text becomes tokens. A leading BOS written by the template as text is
// replaced by the BOS token; `add_bos` false adds none (text continuing the context).
// Special and control tokens written in the text become their tokens.
std::vector<int32_t> tokenize_chat(const Model &model, std::string_view text, bool add_bos);

struct ChatPrompt {
    std::vector<int32_t> tokens;
    int dropped_turns = 0; // oldest user/assistant messages left out
    bool truncated = false; // head-tail cut applied
    std::string format;     // as RenderedChat
    std::string note;
    std::string text;       // the rendered prompt the tokens came from (before any head-tail cut)
};

// Renders and tokenizes the conversation so that it fits in `limit` tokens with `reserve` left
// for the reply. DropOldestTurns drops the oldest messages after the system prompt (never the
// last message) until it fits; HeadTail keeps the head and tail halves; Error throws
// ContextOverflow. Falls back to head-tail when even the last message alone does not fit under
// DropOldestTurns. `add_bos` false for a conversation that continues text already in the context.
ChatPrompt build_chat_prompt(const Model &model, const std::vector<ChatMessage> &messages, int limit,
                             int reserve, OverflowPolicy policy, bool add_bos = true,
                             const ChatRenderOptions &options = {});

// --- The assistant's reply, split as the template's format writes it ---

// A tool call as OpenAI's API carries it: `arguments` is JSON text.
struct ToolCall {
    std::string id; // as the model wrote it (Mistral); empty otherwise
    std::string name;
    std::string arguments;
};

// How a model writes reasoning and tool calls, read from its chat template.
struct ReplyFormat {
    enum class Tools {
        None,    // no tool-call format
        Hermes,  // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen 2.5/3, Hermes)
        Json,    // the whole reply one {"name": ..., "parameters": {...}} object (Llama 3.x)
        Mistral, // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
    };
    bool reasoning = false;           // <think>...</think> before the answer (Qwen3, DeepSeek-R1)
    bool starts_in_reasoning = false; // the prompt ends inside an open <think>
    Tools tools = Tools::None;
};

// The format of replies to `prompt`, rendered with `template_text` (the text of whatever
// template rendered it). `with_tools` false: tool calls are left as text.
ReplyFormat reply_format(std::string_view template_text, std::string_view prompt, bool with_tools);

// Splits a reply, fed as it is generated in pieces cut anywhere (inside a marker, inside a
// UTF-8 sequence), into reasoning, content and tool calls. Text that may be the start of a
// marker is held back until it is known; finish() releases what is left. A tool call whose
// JSON does not parse stays content.
class ReplySplitter {
public:
    struct Delta {
        std::string reasoning;
        std::string content;
        std::vector<ToolCall> tool_calls; // calls completed by this piece
        bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
    };

    explicit ReplySplitter(ReplyFormat format);
    Delta feed(std::string_view piece);
    Delta finish();

    // Everything split so far.
    const std::string &reasoning() const { return m_reasoning; }
    const std::string &content() const { return m_content; }
    const std::vector<ToolCall> &tool_calls() const { return m_calls; }
    // Whether the text fed so far ends inside the reasoning (no </think> yet).
    bool in_reasoning() const { return m_mode == Mode::Reasoning; }

private:
    enum class Mode { Start, Reasoning, Content, ToolCall, Rest };
    void step(Delta &out, bool final);
    void release(Delta &out, Mode mode, std::string text);
    void add_calls(Delta &out, std::vector<ToolCall> calls);
    bool skip_space();

    ReplyFormat m_format;
    Mode m_mode;
    bool m_skip_space;    // leading whitespace of the part that begins is dropped
    std::string m_marker; // the marker that opened the tool calls being read
    std::string m_buffer; // fed but not yet split
    std::string m_reasoning, m_content;
    std::vector<ToolCall> m_calls;
};

// A whole reply split at once (feed and finish).
ReplySplitter::Delta split_reply(const ReplyFormat &format, std::string_view reply);

} // namespace longscope
