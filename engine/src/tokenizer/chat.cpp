#include "longscope/chat.h"

#include "longscope/errors.h"
#include "longscope/prompt_fit.h"

namespace longscope {

std::string_view to_string(ChatTemplate t)
{
    switch (t) {
    case ChatTemplate::Plain: return "plain";
    case ChatTemplate::Llama2: return "llama-2";
    case ChatTemplate::ChatML: return "chatml";
    }
    return "?";
}

ChatTemplate chat_template_of(const Model &model)
{
    const std::string &t = model.info().chat_template;
    if (t.find("<|im_start|>") != std::string::npos)
        return ChatTemplate::ChatML;
    if (t.find("[INST]") != std::string::npos)
        return ChatTemplate::Llama2;
    return ChatTemplate::Plain;
}

std::string format_chat(ChatTemplate t, const std::vector<ChatMessage> &messages)
{
    std::string system;
    size_t first = 0;
    if (!messages.empty() && messages.front().role == ChatMessage::Role::System) {
        system = messages.front().content;
        first = 1;
    }
    std::string out;
    switch (t) {
    case ChatTemplate::Llama2: {
        // Each user turn opens [INST]; the system prompt sits inside the first one. BOS is
        // added by the tokenizer for the first turn only (later turns are separated by </s>
        // in the original format; plain text keeps this simple and model-agnostic).
        bool first_user = true;
        for (size_t i = first; i < messages.size(); ++i) {
            const ChatMessage &m = messages[i];
            if (m.role == ChatMessage::Role::User) {
                out += "[INST] ";
                if (first_user && !system.empty())
                    out += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
                out += m.content + " [/INST]";
                first_user = false;
            } else if (m.role == ChatMessage::Role::Assistant) {
                out += " " + m.content + " ";
            }
        }
        return out;
    }
    case ChatTemplate::ChatML: {
        if (!system.empty())
            out += "<|im_start|>system\n" + system + "<|im_end|>\n";
        for (size_t i = first; i < messages.size(); ++i) {
            const ChatMessage &m = messages[i];
            out += std::string("<|im_start|>") + (m.role == ChatMessage::Role::User ? "user" : "assistant") +
                   "\n" + m.content + "<|im_end|>\n";
        }
        return out + "<|im_start|>assistant\n";
    }
    case ChatTemplate::Plain:
        break;
    }
    if (!system.empty())
        out += system + "\n\n";
    for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage &m = messages[i];
        out += (m.role == ChatMessage::Role::User ? "User: " : "Assistant: ") + m.content + "\n";
    }
    return out + "Assistant:";
}

ChatPrompt build_chat_prompt(const Model &model, const std::vector<ChatMessage> &messages, int limit,
                             int reserve, OverflowPolicy policy, bool add_bos)
{
    if (messages.empty())
        throw InvalidArgument("the conversation is empty");
    const ChatTemplate t = chat_template_of(model);
    const Tokenizer &tok = model.tokenizer();
    const int budget = std::max(1, limit - std::max(0, reserve));
    std::vector<ChatMessage> kept = messages;
    const size_t system_count = kept.front().role == ChatMessage::Role::System ? 1 : 0;
    ChatPrompt out;
    auto encode = [&] { return tok.encode(format_chat(t, kept), add_bos && tok.add_bos_default()); };
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
