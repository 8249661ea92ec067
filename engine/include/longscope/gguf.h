// GGUF v2/v3 reader: metadata of every value type, tensor infos, memory-mapped tensor data.
// Every read is bounds-checked and every size computation overflow-checked: a truncated or
// hostile file gives a FormatError naming what is wrong, never a crash.
#pragma once

#include "longscope/types.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace longscope {

class MappedFile;

enum class GgufValueType : uint32_t {
    Uint8 = 0, Int8 = 1, Uint16 = 2, Int16 = 3, Uint32 = 4, Int32 = 5, Float32 = 6,
    Bool = 7, String = 8, Array = 9, Uint64 = 10, Int64 = 11, Float64 = 12,
};

struct GgufArray;

// One metadata value. Integers are widened to int64/uint64, floats to double; arrays keep
// the element type they were declared with.
struct GgufValue {
    GgufValueType type = GgufValueType::Uint8;
    std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> value;

    std::optional<int64_t> as_int() const;  // any integer type that fits
    std::optional<double> as_float() const; // any integer or float type
    std::optional<bool> as_bool() const;
    const std::string *as_string() const;
    const GgufArray *as_array() const;
};

struct GgufArray {
    GgufValueType elem_type = GgufValueType::Uint8;
    std::vector<GgufValue> items;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<int64_t> shape; // ne[0] first: ne[0] is the contiguous (row) dimension
    DType type = DType::F32;
    uint64_t offset = 0;        // relative to the data section
    uint64_t nbytes = 0;
    const uint8_t *data = nullptr;

    int64_t n_elements() const;
};

class GgufFile {
public:
    // Maps and parses the file. Throws IoError or FormatError.
    static std::unique_ptr<GgufFile> open(const std::string &path);
    ~GgufFile();

    uint32_t version() const { return m_version; }
    uint64_t alignment() const { return m_alignment; }
    uint64_t file_size() const;
    const std::string &path() const;

    const std::map<std::string, GgufValue> &metadata() const { return m_metadata; }
    const std::vector<std::string> &metadata_order() const { return m_metadata_order; }
    const GgufValue *find(const std::string &key) const;

    // Typed lookups; they throw FormatError when the key exists with the wrong type.
    std::optional<int64_t> get_int(const std::string &key) const;
    std::optional<double> get_float(const std::string &key) const;
    std::optional<bool> get_bool(const std::string &key) const;
    std::optional<std::string> get_string(const std::string &key) const;

    const std::vector<GgufTensorInfo> &tensors() const { return m_tensors; }
    const GgufTensorInfo *find_tensor(const std::string &name) const;
    // The mapping the tensor data lives in.
    const MappedFile &mapping() const { return *m_file; }

private:
    GgufFile() = default;
    std::shared_ptr<MappedFile> m_file;
    uint32_t m_version = 0;
    uint64_t m_alignment = 32;
    std::map<std::string, GgufValue> m_metadata;
    std::vector<std::string> m_metadata_order;
    std::vector<GgufTensorInfo> m_tensors;
    std::map<std::string, size_t> m_tensor_index;
};

} // namespace longscope
