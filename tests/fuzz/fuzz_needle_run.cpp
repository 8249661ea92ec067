// A saved needle grid (ui/core, the app's runs folder beside the perplexity runs): parsing,
// validation, and saving what was loaded.
#include "ui_round_trip.h"

#include "core/explore_needle.h"

using namespace longscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::check_json_round_trip<ui::NeedleRunResult>(data, size);
    if (auto r = ui::NeedleRunResult::fromJsonBytes(QByteArray(reinterpret_cast<const char *>(data), qsizetype(size)))) {
        (void)r->meanProbability();
        (void)r->retrievedCells();
        for (int row = 0; row < r->lengths.size(); ++row)
            for (int column = 0; column < r->depths.size(); ++column)
                fuzz::check(r->cell(row, column) != nullptr, "a cell of the grid is missing");
    }
    return 0;
}
