// A saved perplexity run (ui/core, the app's runs folder): parsing, validation, and saving
// what was loaded.
#include "ui_round_trip.h"

#include "core/perplexity_run.h"

using namespace longscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::check_json_round_trip<ui::PerplexityRunResult>(data, size);
    if (auto r = ui::PerplexityRunResult::fromJsonBytes(QByteArray(reinterpret_cast<const char *>(data), qsizetype(size))))
        (void)r->perplexity();
    return 0;
}
