#include "support/gguf_writer.h"

#include <bit>
#include <fstream>

namespace longscope::test {

namespace gguf_bytes {

void append_u8(std::string &out, uint8_t v) { out.push_back(static_cast<char>(v)); }

void append_u32(std::string &out, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void append_i32(std::string &out, int32_t v) { append_u32(out, static_cast<uint32_t>(v)); }

void append_u64(std::string &out, uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void append_i64(std::string &out, int64_t v) { append_u64(out, static_cast<uint64_t>(v)); }

void append_f32(std::string &out, float v) { append_u32(out, std::bit_cast<uint32_t>(v)); }

void append_f64(std::string &out, double v) { append_u64(out, std::bit_cast<uint64_t>(v)); }

void append_string(std::string &out, std::string_view s)
{
    append_u64(out, s.size());
    out.append(s);
}

} // namespace gguf_bytes

using namespace gguf_bytes;

void GgufWriter::add_kv(const std::string &key, GgufType type, const std::string &value_bytes)
{
    append_string(m_kvs, key);
    append_u32(m_kvs, static_cast<uint32_t>(type));
    m_kvs += value_bytes;
    ++m_kv_count;
}

void GgufWriter::add_raw(const std::string &key, uint32_t type, std::string value_bytes)
{
    add_kv(key, static_cast<GgufType>(type), value_bytes);
}

void GgufWriter::add_string(const std::string &key, std::string_view value)
{
    std::string v;
    append_string(v, value);
    add_kv(key, GgufType::String, v);
}

void GgufWriter::add_u8(const std::string &key, uint8_t value)
{
    std::string v;
    append_u8(v, value);
    add_kv(key, GgufType::Uint8, v);
}

void GgufWriter::add_u32(const std::string &key, uint32_t value)
{
    std::string v;
    append_u32(v, value);
    add_kv(key, GgufType::Uint32, v);
}

void GgufWriter::add_i32(const std::string &key, int32_t value)
{
    std::string v;
    append_i32(v, value);
    add_kv(key, GgufType::Int32, v);
}

void GgufWriter::add_u64(const std::string &key, uint64_t value)
{
    std::string v;
    append_u64(v, value);
    add_kv(key, GgufType::Uint64, v);
}

void GgufWriter::add_f32(const std::string &key, float value)
{
    std::string v;
    append_f32(v, value);
    add_kv(key, GgufType::Float32, v);
}

void GgufWriter::add_bool(const std::string &key, bool value)
{
    std::string v;
    append_u8(v, value ? 1 : 0);
    add_kv(key, GgufType::Bool, v);
}

void GgufWriter::add_string_array(const std::string &key, const std::vector<std::string> &values)
{
    std::string v;
    append_u32(v, static_cast<uint32_t>(GgufType::String));
    append_u64(v, values.size());
    for (const std::string &s : values)
        append_string(v, s);
    add_kv(key, GgufType::Array, v);
}

void GgufWriter::add_f32_array(const std::string &key, const std::vector<float> &values)
{
    std::string v;
    append_u32(v, static_cast<uint32_t>(GgufType::Float32));
    append_u64(v, values.size());
    for (float f : values)
        append_f32(v, f);
    add_kv(key, GgufType::Array, v);
}

void GgufWriter::add_i32_array(const std::string &key, const std::vector<int32_t> &values)
{
    std::string v;
    append_u32(v, static_cast<uint32_t>(GgufType::Int32));
    append_u64(v, values.size());
    for (int32_t i : values)
        append_i32(v, i);
    add_kv(key, GgufType::Array, v);
}

void GgufWriter::set_alignment(uint32_t alignment)
{
    m_alignment = alignment;
    add_u32("general.alignment", alignment);
    // Re-lay the tensors already added so their offsets respect the new alignment.
    m_next_offset = 0;
    for (Tensor &t : m_tensors) {
        t.offset = aligned(m_next_offset);
        m_next_offset = t.offset + t.data.size();
    }
}

uint64_t GgufWriter::aligned(uint64_t n) const
{
    // An alignment of 0 is invalid GGUF, but tests may set it on purpose; lay data out densely.
    if (m_alignment == 0)
        return n;
    return (n + m_alignment - 1) / m_alignment * m_alignment;
}

void GgufWriter::add_tensor(const std::string &name, const std::vector<int64_t> &shape,
                            uint32_t ggml_type, std::string data)
{
    Tensor t;
    t.name = name;
    t.shape = shape;
    t.type = ggml_type;
    t.offset = aligned(m_next_offset);
    t.data = std::move(data);
    m_next_offset = t.offset + t.data.size();
    m_tensors.push_back(std::move(t));
}

void GgufWriter::set_last_tensor_offset(uint64_t offset)
{
    if (!m_tensors.empty())
        m_tensors.back().offset = offset;
}

std::string GgufWriter::header_bytes() const
{
    std::string out = "GGUF";
    append_u32(out, m_version);
    append_u64(out, m_tensor_count_override.value_or(m_tensors.size()));
    append_u64(out, m_kv_count_override.value_or(m_kv_count));
    out += m_kvs;
    for (const Tensor &t : m_tensors) {
        append_string(out, t.name);
        append_u32(out, static_cast<uint32_t>(t.shape.size()));
        for (int64_t d : t.shape)
            append_i64(out, d);
        append_u32(out, t.type);
        append_u64(out, t.offset);
    }
    return out;
}

std::string GgufWriter::bytes() const
{
    std::string out = header_bytes();
    out.resize(aligned(out.size()), '\0');
    const size_t data_start = out.size();
    for (const Tensor &t : m_tensors) {
        // Tensors are placed at their recorded offsets; an overridden offset that points
        // elsewhere leaves the data where the writer laid it, which is the point of a hostile
        // file.
        const size_t at = data_start + static_cast<size_t>(aligned(out.size() - data_start));
        out.resize(at, '\0');
        out += t.data;
    }
    return out;
}

bool GgufWriter::write(const std::string &path) const
{
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f)
        return false;
    const std::string b = bytes();
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
    return static_cast<bool>(f);
}

} // namespace longscope::test
