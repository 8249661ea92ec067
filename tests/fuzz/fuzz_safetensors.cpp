// safetensors files: the header JSON (names, dtypes, shapes, offsets) against the file size.
#include "support.h"

#include "longscope/mapped_file.h"
#include "model/safetensors.h"

#include <cstdint>

using namespace longscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string path = fuzz::write_scratch("model.safetensors", data, size);
    fuzz::refused_cleanly_or_ok([&] {
        const std::unique_ptr<SafetensorsFile> st = SafetensorsFile::open(path);
        for (const auto &[name, t] : st->tensors()) {
            fuzz::check(t.nbytes == 0 || st->file()->contains(t.data, t.nbytes),
                        "a tensor's data lies outside the file");
            fuzz::check(st->find(name) == &t, "a listed tensor is not found by name");
        }
    });
    return 0;
}
