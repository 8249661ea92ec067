// Hugging Face tokenizer_config.json, through the whole folder loader: the tiny model's
// config, weights and tokenizer stay valid, tokenizer_config.json is the input.
#include "support.h"

#include "longscope/model.h"
#include "longscope/tokenizer.h"

#include <cstdint>

using namespace longscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string &dir = fuzz::tiny_hf_dir();
    fuzz::write_scratch("hf/tokenizer_config.json", data, size);
    fuzz::refused_cleanly_or_ok([&] {
        const std::unique_ptr<Model> m = Model::load(dir, {}, false);
        (void)m->tokenizer().encode("Hello", m->tokenizer().add_bos_default());
        (void)m->info().chat_template.size();
    });
    return 0;
}
