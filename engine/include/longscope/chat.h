// Chat prompts: turns formatted with the model's chat template and fitted into the context.
#pragma once

#include "longscope/model.h"
#include "longscope/settings.h"

#include <cstdint>
#include <string>
#include <vector>

namespace longscope {

struct ChatMessage {
    enum class Role { System, User, Assistant };
    Role role = Role::User;
    std::string content;
};

enum class ChatTemplate {
    Plain,  // base models: "System prompt\n\nUser: ...\nAssistant: ..." turns
    Llama2, // [INST] <<SYS>> ... <</SYS>> ... [/INST] (Llama-2-chat, Chinese-Alpaca-2)
    ChatML, // <|im_start|>role ... <|im_end|>
};

std::string_view to_string(ChatTemplate t);

// The template the model carries (GGUF tokenizer.chat_template, HF tokenizer_config.json
// chat_template), recognised by its markers; Plain when it has none or an unknown one.
ChatTemplate chat_template_of(const Model &model);

// The prompt text of the conversation, ending where the assistant's reply begins.
std::string format_chat(ChatTemplate t, const std::vector<ChatMessage> &messages);

struct ChatPrompt {
    std::vector<int32_t> tokens;
    int dropped_turns = 0; // oldest user/assistant messages left out
    bool truncated = false; // head-tail cut applied
};

// Tokenizes the conversation (BOS per the model) so that it fits in `limit` tokens with
// `reserve` left for the reply. DropOldestTurns drops the oldest messages after the system
// prompt (never the last user message) until it fits; HeadTail keeps the head and tail
// halves; Error throws ContextOverflow. Falls back to head-tail when even the last message
// alone does not fit under DropOldestTurns.
// `add_bos` false for a conversation that continues text already in the context.
ChatPrompt build_chat_prompt(const Model &model, const std::vector<ChatMessage> &messages, int limit,
                             int reserve, OverflowPolicy policy, bool add_bos = true);

} // namespace longscope
