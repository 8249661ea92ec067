// Hugging Face config.json, through the whole folder loader: the tiny model's weights and
// tokenizer stay valid, config.json is the input.
#include "support.h"

#include "longscope/model.h"

#include <cstdint>

using namespace longscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string &dir = fuzz::tiny_hf_dir();
    fuzz::write_scratch("hf/config.json", data, size);
    fuzz::refused_cleanly_or_ok([&] { (void)Model::load(dir, {}, false); });
    return 0;
}
