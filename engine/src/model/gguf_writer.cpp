#include "model/gguf_writer.h"

#include "longscope/errors.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace longscope {

namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is written little endian");

std::string errno_text() { return std::strerror(errno); }

} // namespace

GgufStreamWriter::GgufStreamWriter(const std::string &path, uint64_t alignment)
    : m_path(path), m_tmp_path(path + ".partial"), m_alignment(alignment)
{
    if (alignment == 0 || !std::has_single_bit(alignment))
        throw InvalidArgument("GGUF alignment must be a power of two, got " + std::to_string(alignment));
    m_file = std::fopen(m_tmp_path.c_str(), "wb");
    if (!m_file)
        throw IoError(m_tmp_path + ": cannot create (" + errno_text() + ")");
    // Large writes go straight through; a bigger buffer keeps small header writes cheap.
    std::setvbuf(m_file, nullptr, _IOFBF, 1 << 20);
}

GgufStreamWriter::~GgufStreamWriter()
{
    if (m_file)
        std::fclose(m_file);
    if (!m_finished) {
        std::error_code ec;
        std::filesystem::remove(m_tmp_path, ec);
    }
}

void GgufStreamWriter::set(const std::string &key, const GgufValue &value)
{
    for (auto &kv : m_metadata)
        if (kv.first == key) {
            kv.second = value;
            return;
        }
    m_metadata.emplace_back(key, value);
}

void GgufStreamWriter::set_u32(const std::string &key, uint32_t v)
{
    set(key, GgufValue{GgufValueType::Uint32, uint64_t(v)});
}

void GgufStreamWriter::set_f32(const std::string &key, float v)
{
    set(key, GgufValue{GgufValueType::Float32, double(v)});
}

void GgufStreamWriter::set_bool(const std::string &key, bool v)
{
    set(key, GgufValue{GgufValueType::Bool, v});
}

void GgufStreamWriter::set_string(const std::string &key, const std::string &v)
{
    set(key, GgufValue{GgufValueType::String, v});
}

void GgufStreamWriter::add_tensor(const std::string &name, const std::vector<int64_t> &shape, DType type)
{
    if (m_header_written)
        throw InvalidArgument("GGUF writer: tensor " + name + " declared after the header was written");
    auto traits = dtype_traits(static_cast<uint32_t>(type));
    if (!traits || shape.empty() || shape.size() > 4)
        throw InvalidArgument("GGUF writer: tensor " + name + " has an invalid type or shape");
    uint64_t n = 1;
    for (int64_t d : shape) {
        if (d <= 0 || __builtin_mul_overflow(n, uint64_t(d), &n))
            throw InvalidArgument("GGUF writer: tensor " + name + " has an invalid shape");
    }
    if (uint64_t(shape[0]) % traits->block_elems != 0)
        throw InvalidArgument("GGUF writer: tensor " + name + " row of " + std::to_string(shape[0]) +
                              " elements is not a whole number of " + std::string(traits->name) +
                              " blocks");
    Tensor t{name, shape, type, n / traits->block_elems * traits->block_bytes, m_data_size};
    m_data_size += (t.nbytes + m_alignment - 1) / m_alignment * m_alignment;
    m_tensors.push_back(std::move(t));
}

void GgufStreamWriter::put(const void *p, size_t n)
{
    if (n && std::fwrite(p, 1, n, m_file) != n)
        throw IoError(m_tmp_path + ": write failed (" + errno_text() + ")");
}

void GgufStreamWriter::put_string(const std::string &s)
{
    const uint64_t len = s.size();
    put(&len, 8);
    put(s.data(), s.size());
}

void GgufStreamWriter::put_value(const GgufValue &v)
{
    // Integers are held widened (uint64 or int64) and floats as double; each is narrowed back
    // to its declared type, two's complement for the signed ones.
    auto as_u64 = [&]() -> uint64_t {
        if (auto *u = std::get_if<uint64_t>(&v.value))
            return *u;
        if (auto *i = std::get_if<int64_t>(&v.value))
            return uint64_t(*i);
        if (auto *b = std::get_if<bool>(&v.value))
            return *b ? 1 : 0;
        if (auto *d = std::get_if<double>(&v.value))
            return uint64_t(int64_t(*d));
        throw InvalidArgument("GGUF writer: metadata value does not match its type");
    };
    switch (v.type) {
    case GgufValueType::Uint8:
    case GgufValueType::Int8:
    case GgufValueType::Bool: {
        const auto x = uint8_t(as_u64());
        put(&x, 1);
        break;
    }
    case GgufValueType::Uint16:
    case GgufValueType::Int16: {
        const auto x = uint16_t(as_u64());
        put(&x, 2);
        break;
    }
    case GgufValueType::Uint32:
    case GgufValueType::Int32: {
        const auto x = uint32_t(as_u64());
        put(&x, 4);
        break;
    }
    case GgufValueType::Uint64:
    case GgufValueType::Int64: {
        const uint64_t x = as_u64();
        put(&x, 8);
        break;
    }
    case GgufValueType::Float32: {
        const auto x = float(v.as_float().value_or(0.0));
        put(&x, 4);
        break;
    }
    case GgufValueType::Float64: {
        const double x = v.as_float().value_or(0.0);
        put(&x, 8);
        break;
    }
    case GgufValueType::String: {
        const std::string *s = v.as_string();
        if (!s)
            throw InvalidArgument("GGUF writer: string metadata value holds no string");
        put_string(*s);
        break;
    }
    case GgufValueType::Array: {
        const GgufArray *a = v.as_array();
        if (!a)
            throw InvalidArgument("GGUF writer: array metadata value holds no array");
        const auto et = static_cast<uint32_t>(a->elem_type);
        const uint64_t count = a->items.size();
        put(&et, 4);
        put(&count, 8);
        for (const GgufValue &item : a->items) {
            if (item.type != a->elem_type)
                throw InvalidArgument("GGUF writer: array element type mismatch");
            put_value(item);
        }
        break;
    }
    }
}

void GgufStreamWriter::pad_to_alignment(uint64_t written)
{
    static const char zeros[64] = {};
    uint64_t pad = (m_alignment - written % m_alignment) % m_alignment;
    while (pad > 0) {
        const size_t n = size_t(std::min<uint64_t>(pad, sizeof zeros));
        put(zeros, n);
        pad -= n;
    }
}

void GgufStreamWriter::write_header()
{
    if (m_header_written)
        return;
    m_header_written = true;
    const uint32_t version = 3;
    const uint64_t n_tensors = m_tensors.size(), n_kv = m_metadata.size();
    put("GGUF", 4);
    put(&version, 4);
    put(&n_tensors, 8);
    put(&n_kv, 8);
    for (const auto &[key, value] : m_metadata) {
        put_string(key);
        const auto type = static_cast<uint32_t>(value.type);
        put(&type, 4);
        put_value(value);
    }
    for (const Tensor &t : m_tensors) {
        put_string(t.name);
        const auto n_dims = uint32_t(t.shape.size());
        put(&n_dims, 4);
        for (int64_t d : t.shape) {
            const auto ne = uint64_t(d);
            put(&ne, 8);
        }
        const auto type = static_cast<uint32_t>(t.type);
        put(&type, 4);
        put(&t.offset, 8);
    }
    const long pos = std::ftell(m_file);
    if (pos < 0)
        throw IoError(m_tmp_path + ": cannot tell the write position (" + errno_text() + ")");
    pad_to_alignment(uint64_t(pos));
    m_current = 0;
    m_current_done = 0;
}

void GgufStreamWriter::write_data(const void *data, size_t n)
{
    if (!m_header_written)
        write_header();
    const auto *p = static_cast<const uint8_t *>(data);
    while (n > 0) {
        if (m_current >= m_tensors.size())
            throw InvalidArgument("GGUF writer: more tensor data than the tensors declared");
        const Tensor &t = m_tensors[m_current];
        const size_t take = size_t(std::min<uint64_t>(n, t.nbytes - m_current_done));
        put(p, take);
        p += take;
        n -= take;
        m_current_done += take;
        if (m_current_done == t.nbytes) {
            pad_to_alignment(t.nbytes);
            ++m_current;
            m_current_done = 0;
        }
    }
}

void GgufStreamWriter::finish()
{
    if (!m_header_written)
        write_header();
    // Zero-byte tensors cannot exist (every dimension is positive), so a tensor not yet
    // started means data is missing.
    if (m_current != m_tensors.size())
        throw InvalidArgument("GGUF writer: tensor " + m_tensors[m_current].name + " got " +
                              std::to_string(m_current_done) + " of its " +
                              std::to_string(m_tensors[m_current].nbytes) + " bytes");
    std::FILE *f = m_file;
    m_file = nullptr;
    if (std::fflush(f) != 0) {
        const std::string err = errno_text();
        std::fclose(f);
        throw IoError(m_tmp_path + ": write failed (" + err + ")");
    }
    if (std::fclose(f) != 0)
        throw IoError(m_tmp_path + ": write failed (" + errno_text() + ")");
    std::error_code ec;
    std::filesystem::rename(m_tmp_path, m_path, ec);
    if (ec)
        throw IoError(m_path + ": cannot move the written file into place (" + ec.message() + ")");
    m_finished = true;
}

} // namespace longscope
