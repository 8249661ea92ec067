// The assistant's reply split as its template's format writes it: reasoning between <think> and
// </think>, tool calls in the Hermes, Llama 3.x JSON or Mistral form, the rest content.
#include "longscope/chat.h"

#include "core/json_input.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace longscope {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view k_think_open = "<think>";
constexpr std::string_view k_think_close = "</think>";
constexpr std::string_view k_hermes_open = "<tool_call>";
constexpr std::string_view k_hermes_close = "</tool_call>";
constexpr std::string_view k_mistral_calls = "[TOOL_CALLS]";
constexpr std::string_view k_python_tag = "<|python_tag|>";

bool contains(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view lstrip(std::string_view s)
{
    while (!s.empty() && is_space(s.front()))
        s.remove_prefix(1);
    return s;
}

// The length of the longest end of `text` that is a proper start of `marker`: text that may
// become the marker when more arrives.
size_t partial_marker(std::string_view text, std::string_view marker)
{
    for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
        if (text.substr(text.size() - n) == marker.substr(0, n))
            return n;
    return 0;
}

// Whether `text` (leading whitespace skipped) may still grow into `marker`.
bool may_become(std::string_view text, std::string_view marker)
{
    text = lstrip(text);
    return text.size() < marker.size() && marker.substr(0, text.size()) == text;
}

// {"name": ..., "arguments" | "parameters": {...} or "..."} as a call; nullopt otherwise.
std::optional<ToolCall> call_of(const json &j)
{
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string())
        return std::nullopt;
    ToolCall call;
    call.name = j["name"].get<std::string>();
    if (j.contains("id") && j["id"].is_string())
        call.id = j["id"].get<std::string>();
    const char *key = j.contains("arguments") ? "arguments" : "parameters";
    const json args = j.contains(key) ? j[key] : json::object();
    if (args.is_string())
        call.arguments = args.get<std::string>();
    else if (args.is_object())
        call.arguments = args.dump();
    else
        return std::nullopt;
    return call;
}

// One call, or an array of them; empty when the text is not that.
std::vector<ToolCall> calls_of(std::string_view text)
{
    json j;
    std::string why;
    std::vector<ToolCall> out;
    if (!parse_json_bounded(text.data(), text.data() + text.size(), j, why))
        return out;
    if (j.is_array()) {
        for (const json &e : j) {
            auto call = call_of(e);
            if (!call)
                return {};
            out.push_back(std::move(*call));
        }
    } else if (auto call = call_of(j)) {
        out.push_back(std::move(*call));
    }
    return out;
}

} // namespace

ReplyFormat reply_format(std::string_view template_text, std::string_view prompt, bool with_tools)
{
    ReplyFormat f;
    f.reasoning = contains(template_text, k_think_open) || contains(template_text, k_think_close);
    if (f.reasoning) {
        const size_t open = prompt.rfind(k_think_open);
        const size_t close = prompt.rfind(k_think_close);
        f.starts_in_reasoning = open != std::string_view::npos && (close == std::string_view::npos || close < open);
    }
    if (with_tools) {
        if (contains(template_text, k_hermes_open))
            f.tools = ReplyFormat::Tools::Hermes;
        else if (contains(template_text, k_mistral_calls))
            f.tools = ReplyFormat::Tools::Mistral;
        else if (contains(template_text, "<|start_header_id|>") && contains(template_text, "\"parameters\""))
            f.tools = ReplyFormat::Tools::Json;
    }
    return f;
}

ReplySplitter::ReplySplitter(ReplyFormat format)
    : m_format(format), m_mode(format.starts_in_reasoning ? Mode::Reasoning : Mode::Start), m_skip_space(true)
{
}

ReplySplitter::Delta ReplySplitter::feed(std::string_view piece)
{
    m_buffer += piece;
    Delta out;
    step(out, false);
    return out;
}

ReplySplitter::Delta ReplySplitter::finish()
{
    Delta out;
    step(out, true);
    return out;
}

void ReplySplitter::release(Delta &out, Mode mode, std::string text)
{
    if (text.empty())
        return;
    if (mode == Mode::Reasoning) {
        m_reasoning += text;
        out.reasoning += text;
    } else {
        m_content += text;
        out.content += text;
    }
}

void ReplySplitter::add_calls(Delta &out, std::vector<ToolCall> calls)
{
    for (ToolCall &c : calls) {
        m_calls.push_back(c);
        out.tool_calls.push_back(std::move(c));
    }
}

// Drops leading whitespace while m_skip_space is set; false when nothing else is buffered yet.
bool ReplySplitter::skip_space()
{
    if (!m_skip_space)
        return true;
    const size_t n = m_buffer.size() - lstrip(m_buffer).size();
    m_buffer.erase(0, n);
    if (m_buffer.empty())
        return false;
    m_skip_space = false;
    return true;
}

void ReplySplitter::step(Delta &out, bool final)
{
    for (;;) {
        switch (m_mode) {
        case Mode::Start: {
            // Before the first word: a <think>, a Llama-style JSON call or a [TOOL_CALLS] opens here.
            const std::string_view head = lstrip(m_buffer);
            const bool json_tools = m_format.tools == ReplyFormat::Tools::Json;
            if (!final && (head.empty() || (m_format.reasoning && may_become(head, k_think_open)) ||
                           (json_tools && may_become(head, k_python_tag))))
                return;
            if (m_format.reasoning && head.starts_with(k_think_open)) {
                m_buffer = std::string(head.substr(k_think_open.size()));
                m_mode = Mode::Reasoning;
                m_skip_space = true;
            } else if (json_tools && (head.starts_with("{") || head.starts_with(k_python_tag))) {
                m_mode = Mode::Rest;
                m_marker = "";
            } else {
                m_mode = Mode::Content;
                m_skip_space = false;
            }
            continue;
        }
        case Mode::Reasoning: {
            if (!skip_space() && !final)
                return;
            const size_t close = m_buffer.find(k_think_close);
            if (close != std::string::npos) {
                std::string text = m_buffer.substr(0, close);
                while (!text.empty() && is_space(text.back()))
                    text.pop_back();
                release(out, Mode::Reasoning, std::move(text));
                m_buffer.erase(0, close + k_think_close.size());
                m_mode = Mode::Content;
                m_skip_space = true;
                continue;
            }
            // Hold back a possible start of </think> and trailing whitespace (dropped before it).
            size_t keep = final ? 0 : partial_marker(m_buffer, k_think_close);
            size_t end = m_buffer.size() - keep;
            while (!final && end > 0 && is_space(m_buffer[end - 1]))
                --end;
            release(out, Mode::Reasoning, m_buffer.substr(0, end));
            m_buffer.erase(0, end);
            if (final)
                m_buffer.clear();
            return;
        }
        case Mode::Content: {
            if (!skip_space() && !final)
                return;
            std::string_view marker;
            if (m_format.tools == ReplyFormat::Tools::Hermes)
                marker = k_hermes_open;
            else if (m_format.tools == ReplyFormat::Tools::Mistral)
                marker = k_mistral_calls;
            const size_t at = marker.empty() ? std::string::npos : m_buffer.find(marker);
            if (at != std::string::npos) {
                release(out, Mode::Content, m_buffer.substr(0, at));
                m_buffer.erase(0, at + marker.size());
                m_marker = std::string(marker);
                m_mode = m_format.tools == ReplyFormat::Tools::Hermes ? Mode::ToolCall : Mode::Rest;
                continue;
            }
            const size_t keep = final || marker.empty() ? 0 : partial_marker(m_buffer, marker);
            release(out, Mode::Content, m_buffer.substr(0, m_buffer.size() - keep));
            m_buffer.erase(0, m_buffer.size() - keep);
            return;
        }
        case Mode::ToolCall: {
            const size_t close = m_buffer.find(k_hermes_close);
            if (close == std::string::npos && !final)
                return;
            const std::string body = m_buffer.substr(0, close);
            std::vector<ToolCall> calls = calls_of(body);
            const bool called = calls.size() == 1;
            if (called)
                add_calls(out, std::move(calls));
            else // not a call after all: the text as written
                release(out, Mode::Content,
                     m_marker + body + (close == std::string::npos ? "" : std::string(k_hermes_close)));
            m_buffer.erase(0, close == std::string::npos ? m_buffer.size() : close + k_hermes_close.size());
            m_mode = Mode::Content;
            m_skip_space = called; // the line break between calls
            if (final && m_buffer.empty())
                return;
            continue;
        }
        case Mode::Rest: {
            // The calls run to the end of the reply: parsed when it is complete.
            if (!final)
                return;
            std::string_view body = lstrip(m_buffer);
            if (body.starts_with(k_python_tag))
                body.remove_prefix(k_python_tag.size());
            std::vector<ToolCall> calls = calls_of(body);
            if (!calls.empty())
                add_calls(out, std::move(calls));
            else
                release(out, Mode::Content, m_marker + m_buffer);
            m_buffer.clear();
            return;
        }
        }
    }
}

ReplySplitter::Delta split_reply(const ReplyFormat &format, std::string_view reply)
{
    ReplySplitter s(format);
    ReplySplitter::Delta d = s.feed(reply);
    ReplySplitter::Delta rest = s.finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
    for (ToolCall &c : rest.tool_calls)
        d.tool_calls.push_back(std::move(c));
    return d;
}

} // namespace longscope
