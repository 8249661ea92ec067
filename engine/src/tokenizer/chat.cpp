#include "longscope/chat.h"

#include "core/json_input.h"
#include "longscope/errors.h"
#include "longscope/prompt_fit.h"
#include "longscope/tokenizer.h"
#include "template/jinja.h"
#include "tokenizer/chat_formats.h"

#include <nlohmann/json.hpp>

namespace longscope {

using json = nlohmann::ordered_json;

namespace {

std::string token_text(const Tokenizer &tok, int32_t id)
{
    return id >= 0 && id < tok.n_vocab() ? tok.piece(id) : std::string();
}

json message_json(const ChatMessage &m)
{
    if (!m.json.empty())
        return json::parse(m.json);
    json j = {{"role", std::string(to_string(m.role))}, {"content", m.content}};
    if (!m.reasoning_content.empty())
        j["reasoning_content"] = m.reasoning_content;
    return j;
}

json context_of(const Model &model, const std::vector<ChatMessage> &messages, const ChatRenderOptions &o)
{
    json ctx = json::object();
    ctx["messages"] = json::array();
    for (const ChatMessage &m : messages)
        ctx["messages"].push_back(message_json(m));
    json tools = nullptr;
    if (!o.tools_json.empty()) {
        std::string why;
        if (!parse_json_bounded(o.tools_json.data(), o.tools_json.data() + o.tools_json.size(), tools, why) ||
            !tools.is_array())
            throw InvalidArgument("the tools must be a JSON array of tool definitions");
    }
    ctx["tools"] = tools;
    ctx["documents"] = nullptr;
    ctx["add_generation_prompt"] = o.add_generation_prompt;
    const Tokenizer &tok = model.tokenizer();
    ctx["bos_token"] = token_text(tok, tok.bos_id());
    ctx["eos_token"] = token_text(tok, tok.eos_id());
    return ctx;
}

// Tool-call arguments arrive as JSON text (OpenAI's form); Hugging Face templates read them as a
// mapping (`tool_call.arguments | tojson`, `.items()`), so text holding an object becomes one.
void arguments_as_objects(json &message)
{
    auto calls = message.find("tool_calls");
    if (calls == message.end() || !calls->is_array())
        return;
    for (json &call : *calls) {
        json *fn = call.is_object() && call.contains("function") ? &call["function"] : &call;
        if (!fn->is_object() || !fn->contains("arguments") || !(*fn)["arguments"].is_string())
            continue;
        const std::string &text = (*fn)["arguments"].get_ref<const std::string &>();
        json args;
        std::string why;
        if (parse_json_bounded(text.data(), text.data() + text.size(), args, why) && args.is_object())
            (*fn)["arguments"] = std::move(args);
    }
}

jinja::RenderOptions render_options(const ChatRenderOptions &o)
{
    jinja::RenderOptions r;
    r.now = o.now;
    return r;
}

std::string render_builtin(const std::string &name, const json &ctx, const ChatRenderOptions &o)
{
    const std::string source = builtin_format_source(name);
    if (source.empty())
        throw InvalidArgument("unknown chat format '" + name + "'");
    return jinja::render(source, ctx, render_options(o));
}

// The built-in format used when the model's template cannot be, and why.
std::pair<std::string, std::string> fallback_of(const Model &model, const std::string &failure)
{
    const std::string &t = model.info().chat_template;
    if (!failure.empty()) {
        std::string name = detect_format(t);
        const bool detected = !name.empty();
        if (!detected)
            name = "chatml";
        return {name, "the model's chat template failed (" + failure + "); using the built-in " + name + " format" +
                          (detected ? ", chosen from the template's markers" : ", llama.cpp's default")};
    }
    std::string name = format_from_vocabulary(model.tokenizer());
    if (name.empty())
        return {"plain", "the model carries no chat template and its vocabulary has no chat markers; using the "
                         "built-in plain format"};
    return {name, "the model carries no chat template; using the built-in " + name +
                      " format, chosen from the markers in its vocabulary"};
}

} // namespace

std::string_view to_string(ChatMessage::Role role)
{
    switch (role) {
    case ChatMessage::Role::System: return "system";
    case ChatMessage::Role::User: return "user";
    case ChatMessage::Role::Assistant: return "assistant";
    case ChatMessage::Role::Tool: return "tool";
    }
    return "?";
}

std::vector<ChatMessage> parse_chat_messages(std::string_view json_text)
{
    json doc;
    std::string why;
    if (!parse_json_bounded(json_text.data(), json_text.data() + json_text.size(), doc, why))
        throw InvalidArgument("the messages: " + why);
    if (doc.is_object() && doc.contains("messages"))
        doc = doc["messages"];
    if (!doc.is_array() || doc.empty())
        throw InvalidArgument("the messages must be a non-empty JSON array (or an object with one under \"messages\")");
    std::vector<ChatMessage> out;
    for (size_t i = 0; i < doc.size(); ++i) {
        const std::string name = "messages[" + std::to_string(i) + "]";
        json &m = doc[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw InvalidArgument(name + " must be an object with a string \"role\"");
        const std::string role = m["role"].get<std::string>();
        ChatMessage msg;
        if (role == "system" || role == "developer")
            msg.role = ChatMessage::Role::System;
        else if (role == "user")
            msg.role = ChatMessage::Role::User;
        else if (role == "assistant")
            msg.role = ChatMessage::Role::Assistant;
        else if (role == "tool")
            msg.role = ChatMessage::Role::Tool;
        else
            throw InvalidArgument(name + ".role must be system, developer, user, assistant or tool, got '" + role + "'");
        const json content = m.contains("content") ? m["content"] : json();
        if (content.is_string()) {
            msg.content = content.get<std::string>();
        } else if (content.is_array()) {
            for (const json &part : content)
                if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
                    part["text"].is_string())
                    msg.content += part["text"].get<std::string>();
        } else if (!content.is_null()) {
            throw InvalidArgument(name + ".content must be a string, a list of parts or null");
        }
        arguments_as_objects(m);
        if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
            msg.reasoning_content = m["reasoning_content"].get<std::string>();
        msg.json = m.dump();
        out.push_back(std::move(msg));
    }
    return out;
}

std::vector<std::string> builtin_chat_formats() { return builtin_format_names(); }

std::string detect_chat_format(std::string_view template_text) { return detect_format(template_text); }

RenderedChat render_chat(const Model &model, const std::vector<ChatMessage> &messages, const ChatRenderOptions &o)
{
    const json ctx = context_of(model, messages, o);
    RenderedChat out;
    if (!o.format.empty()) {
        out.format = o.format;
        out.text = render_builtin(o.format, ctx, o);
        out.note = "the built-in " + o.format + " format was chosen instead of the model's template";
        return out;
    }
    if (!o.template_text.empty()) {
        out.format = "custom";
        out.text = jinja::render(o.template_text, ctx, render_options(o));
        return out;
    }
    std::string failure;
    if (const std::string &t = model.info().chat_template; !t.empty()) {
        try {
            out.text = jinja::render(t, ctx, render_options(o));
            out.format = "model";
            return out;
        } catch (const jinja::TemplateError &e) {
            if (!o.fallback)
                throw;
            failure = e.what();
        }
    }
    std::tie(out.format, out.note) = fallback_of(model, failure);
    out.text = render_builtin(out.format, ctx, o);
    return out;
}

std::string format_chat(std::string_view format, const std::vector<ChatMessage> &messages, bool add_generation_prompt)
{
    json ctx = json::object();
    ctx["messages"] = json::array();
    for (const ChatMessage &m : messages)
        ctx["messages"].push_back(message_json(m));
    ctx["tools"] = nullptr;
    ctx["documents"] = nullptr;
    ctx["add_generation_prompt"] = add_generation_prompt;
    ctx["bos_token"] = "<s>";
    ctx["eos_token"] = "</s>";
    ChatRenderOptions o;
    return render_builtin(std::string(format), ctx, o);
}

std::vector<int32_t> tokenize_chat(const Model &model, std::string_view text, bool add_bos)
{
    const Tokenizer &tok = model.tokenizer();
    const std::string bos = token_text(tok, tok.bos_id());
    const bool bos_written = !bos.empty() && text.substr(0, bos.size()) == bos;
    if (bos_written)
        text.remove_prefix(bos.size());
    // Special tokens written by the template (<|im_start|>, </s>, ...) become their tokens.
    return tok.encode(text, add_bos && (bos_written || tok.add_bos_default()), /*parse_special=*/true);
}

ChatPrompt build_chat_prompt(const Model &model, const std::vector<ChatMessage> &messages, int limit, int reserve,
                             OverflowPolicy policy, bool add_bos, const ChatRenderOptions &options)
{
    if (messages.empty())
        throw InvalidArgument("the conversation is empty");
    const int budget = std::max(1, limit - std::max(0, reserve));
    std::vector<ChatMessage> kept = messages;
    const size_t system_count = kept.front().role == ChatMessage::Role::System ? 1 : 0;
    ChatPrompt out;
    auto encode = [&] {
        RenderedChat r = render_chat(model, kept, options);
        out.format = std::move(r.format);
        out.note = std::move(r.note);
        out.text = std::move(r.text);
        return tokenize_chat(model, out.text, add_bos);
    };
    out.tokens = encode();
    if (policy == OverflowPolicy::DropOldestTurns) {
        // Drop whole messages from the oldest on, keeping the system prompt and the last one.
        while (int(out.tokens.size()) > budget && kept.size() > system_count + 1) {
            kept.erase(kept.begin() + std::ptrdiff_t(system_count));
            ++out.dropped_turns;
            out.tokens = encode();
        }
        if (int(out.tokens.size()) > budget)
            policy = OverflowPolicy::HeadTail;
    }
    if (int(out.tokens.size()) > budget) {
        const size_t before = out.tokens.size();
        out.tokens = fit_prompt(out.tokens, limit, reserve, policy);
        out.truncated = out.tokens.size() < before;
    }
    return out;
}

} // namespace longscope
