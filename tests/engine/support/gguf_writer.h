// A small GGUF (v3, little endian) writer for tests: builds well-formed files from metadata
// and tensors, and exposes the pieces (header bytes, raw values, count overrides) that tests
// of hostile input need to produce broken ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace longscope::test {

// GGUF metadata value types (gguf_type).
enum class GgufType : uint32_t {
    Uint8 = 0, Int8 = 1, Uint16 = 2, Int16 = 3, Uint32 = 4, Int32 = 5, Float32 = 6,
    Bool = 7, String = 8, Array = 9, Uint64 = 10, Int64 = 11, Float64 = 12,
};

// Little-endian encoders, public so tests can assemble custom values for add_raw().
namespace gguf_bytes {
void append_u8(std::string &out, uint8_t v);
void append_u32(std::string &out, uint32_t v);
void append_i32(std::string &out, int32_t v);
void append_u64(std::string &out, uint64_t v);
void append_i64(std::string &out, int64_t v);
void append_f32(std::string &out, float v);
void append_f64(std::string &out, double v);
// uint64 length followed by the bytes.
void append_string(std::string &out, std::string_view s);
} // namespace gguf_bytes

class GgufWriter {
public:
    explicit GgufWriter(uint32_t version = 3) : m_version(version) {}

    void add_string(const std::string &key, std::string_view value);
    void add_u8(const std::string &key, uint8_t value);
    void add_u32(const std::string &key, uint32_t value);
    void add_i32(const std::string &key, int32_t value);
    void add_u64(const std::string &key, uint64_t value);
    void add_f32(const std::string &key, float value);
    void add_bool(const std::string &key, bool value);
    void add_string_array(const std::string &key, const std::vector<std::string> &values);
    void add_f32_array(const std::string &key, const std::vector<float> &values);
    void add_i32_array(const std::string &key, const std::vector<int32_t> &values);
    // A key/value pair whose value is written verbatim after the type id: for value types
    // without a dedicated method and for deliberately malformed values.
    void add_raw(const std::string &key, uint32_t type, std::string value_bytes);

    // Sets general.alignment (written as a uint32 key) and lays tensor data out with it.
    void set_alignment(uint32_t alignment);

    // A tensor with shape ne[0] first (the contiguous dimension first, as GGUF stores it),
    // ggml type id, and its data. Offsets are assigned in order, each aligned.
    void add_tensor(const std::string &name, const std::vector<int64_t> &shape,
                    uint32_t ggml_type, std::string data);
    // Overrides the offset written for the most recently added tensor (hostile files).
    void set_last_tensor_offset(uint64_t offset);

    // Counts written into the header in place of the real ones (hostile files).
    void override_tensor_count(uint64_t count) { m_tensor_count_override = count; }
    void override_kv_count(uint64_t count) { m_kv_count_override = count; }

    // Magic, version, counts, key/values and tensor infos, without the alignment padding.
    std::string header_bytes() const;
    // The whole file: header, padding to the alignment, then the tensor data.
    std::string bytes() const;
    // Writes bytes() to path; false on failure.
    bool write(const std::string &path) const;

private:
    struct Tensor {
        std::string name;
        std::vector<int64_t> shape;
        uint32_t type = 0;
        uint64_t offset = 0;
        std::string data;
    };

    void add_kv(const std::string &key, GgufType type, const std::string &value_bytes);
    uint64_t aligned(uint64_t n) const;

    uint32_t m_version;
    uint32_t m_alignment = 32;
    std::string m_kvs;
    uint64_t m_kv_count = 0;
    std::vector<Tensor> m_tensors;
    uint64_t m_next_offset = 0;
    std::optional<uint64_t> m_tensor_count_override;
    std::optional<uint64_t> m_kv_count_override;
};

} // namespace longscope::test
