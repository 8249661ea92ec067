// The chat view as the chat suites show it: 600x400 pixels over `model`, shown (off screen).
#pragma once

#include "core/chat_model.h"
#include "widgets/chat_view.h"

namespace longscope::test {

inline void showChatView(ui::ChatView &view, ui::ChatModel &model)
{
    view.resize(600, 400);
    view.setModel(&model);
    view.show();
}

} // namespace longscope::test
