// sentencepiece model files (a serialized ModelProto): sentencepiece's own parser behind
// Tokenizer::from_sentencepiece_file, the vocabulary checks after it, and the engine's own
// wire-format reader of normalizer_spec.add_dummy_prefix.
#include "support.h"

#include "longscope/tokenizer.h"
#include "tokenizer/sp_model_proto.h"

#include <cstdint>
#include <string_view>
#include <vector>

using namespace longscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)detail::read_add_dummy_prefix(std::string_view(reinterpret_cast<const char *>(data), size));
    const std::string path = fuzz::write_scratch("tokenizer.model", data, size);
    fuzz::refused_cleanly_or_ok([&] {
        const std::unique_ptr<Tokenizer> tok = Tokenizer::from_sentencepiece_file(path);
        const std::vector<int32_t> ids = tok->encode("Once upon a time \xC3\xA9\xFF", true);
        for (int32_t id : ids)
            fuzz::check(id >= 0 && id < tok->n_vocab(), "encode gave an id outside the vocabulary");
        (void)tok->decode(ids);
    });
    return 0;
}
