// Internal: safetensors reader. Layout: uint64 header length N (little endian), N bytes of
// JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the
// data; offsets are relative to the end of the header.
#pragma once

#include "longscope/types.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace longscope {

class MappedFile;

struct SafetensorsTensor {
    std::string name;
    std::string dtype;          // as written: "F32", "F16", "BF16", ...
    std::vector<int64_t> shape; // as written: outermost first (PyTorch order)
    const uint8_t *data = nullptr;
    uint64_t nbytes = 0;
};

class SafetensorsFile {
public:
    // Throws IoError / FormatError (a header whose offsets lie, overlap or run past the end).
    static std::unique_ptr<SafetensorsFile> open(const std::string &path);

    const std::map<std::string, SafetensorsTensor> &tensors() const { return m_tensors; }
    const SafetensorsTensor *find(const std::string &name) const;
    std::shared_ptr<MappedFile> file() const { return m_file; }

private:
    std::shared_ptr<MappedFile> m_file;
    std::map<std::string, SafetensorsTensor> m_tensors;
};

} // namespace longscope
