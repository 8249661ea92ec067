// GGUF files: the reader (metadata of every type, tensor infos), the tokenizer built from the
// metadata (encode and decode a fixed text), and the model loader's checks on top.
#include "support.h"

#include "longscope/gguf.h"
#include "longscope/mapped_file.h"
#include "longscope/model.h"
#include "longscope/tokenizer.h"

#include <cstdint>
#include <vector>

using namespace longscope;

namespace {

void read_values(const GgufFile &g)
{
    for (const auto &[key, v] : g.metadata()) {
        (void)v.as_int();
        (void)v.as_float();
        (void)v.as_bool();
        (void)v.as_string();
        if (const GgufArray *a = v.as_array())
            for (const GgufValue &item : a->items)
                (void)item.as_int();
    }
    for (const GgufTensorInfo &t : g.tensors()) {
        fuzz::check(t.nbytes == 0 || g.mapping().contains(t.data, t.nbytes),
                    "a tensor's data lies outside the file");
        fuzz::check(g.find_tensor(t.name) != nullptr, "a listed tensor is not found by name");
    }
}

void use_tokenizer(const GgufFile &g)
{
    const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(g);
    const std::vector<int32_t> ids = tok->encode("Once upon a time, \xE2\x96\x81 <s> \xF0\x9F\x98\x80 \xFF!", true);
    for (int32_t id : ids)
        fuzz::check(id >= 0 && id < tok->n_vocab(), "encode gave an id outside the vocabulary");
    (void)tok->decode(ids);
    TokenTextStream stream(*tok);
    for (int32_t id = 0; id < tok->n_vocab() && id < 64; ++id) {
        (void)tok->piece(id);
        (void)stream.push(id);
    }
    (void)stream.flush();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string path = fuzz::write_scratch("input.gguf", data, size);
    fuzz::refused_cleanly_or_ok([&] {
        const std::unique_ptr<GgufFile> g = GgufFile::open(path);
        read_values(*g);
        fuzz::refused_cleanly_or_ok([&] { use_tokenizer(*g); });
    });
    // The whole loader (hyperparameters, weight checks, tokenizer), without preparing the
    // matrices for the CPU.
    fuzz::refused_cleanly_or_ok([&] { (void)Model::load(path, {}, false); });
    return 0;
}
