// A saved conversation file (ui/core, the app's conversations folder): parsing, validation,
// and saving what was loaded; the views the app builds from it.
#include "ui_round_trip.h"

#include "core/conversation.h"

using namespace longscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::check_json_round_trip<ui::Conversation>(data, size);
    if (auto c = ui::Conversation::fromJsonBytes(QByteArray(reinterpret_cast<const char *>(data), qsizetype(size)))) {
        (void)c->title();
        (void)c->toMarkdown();
        (void)c->chatTurns();
    }
    return 0;
}
