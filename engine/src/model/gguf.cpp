// GGUF reader. Layout (little endian): magic "GGUF", uint32 version, uint64 tensor count,
// uint64 metadata count, metadata (key string, uint32 type, value), tensor infos (name,
// uint32 n_dims, uint64 ne[n_dims], uint32 type, uint64 offset), padding to the alignment,
// then the data section. Strings are uint64 length + bytes; arrays uint32 element type +
// uint64 count + elements.
#include "longscope/gguf.h"

#include "longscope/errors.h"
#include "longscope/mapped_file.h"

#include <bit>
#include <cstring>
#include <limits>

namespace longscope {

namespace {

constexpr uint32_t max_dims = 4;       // as ggml
constexpr int max_array_depth = 4;     // arrays of arrays are legal; bound the recursion
constexpr uint64_t max_string = 1ull << 30;

class Reader {
public:
    Reader(const std::string &path, const uint8_t *data, uint64_t size)
        : m_path(path), m_data(data), m_size(size) {}

    [[noreturn]] void fail(const std::string &what) const
    {
        throw FormatError(m_path + ": " + what + " (at byte offset " + std::to_string(m_pos) +
                          ", file size " + std::to_string(m_size) + ")");
    }

    void need(uint64_t n, const char *what) const
    {
        if (n > m_size - m_pos)
            fail(std::string("file ends inside ") + what);
    }

    template <typename T> T read(const char *what)
    {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, m_data + m_pos, sizeof(T));
        m_pos += sizeof(T);
        return v;
    }

    std::string read_string(const char *what)
    {
        uint64_t len = read<uint64_t>(what);
        if (len > max_string)
            fail(std::string("absurd string length ") + std::to_string(len) + " in " + what);
        need(len, what);
        std::string s(reinterpret_cast<const char *>(m_data + m_pos), len);
        m_pos += len;
        return s;
    }

    uint64_t pos() const { return m_pos; }
    uint64_t remaining() const { return m_size - m_pos; }
    uint64_t size() const { return m_size; }

private:
    const std::string &m_path;
    const uint8_t *m_data;
    uint64_t m_size;
    uint64_t m_pos = 0;
};

// Smallest encoded size of one value of a type: bounds element counts before allocating.
uint64_t min_encoded_size(GgufValueType t)
{
    switch (t) {
    case GgufValueType::Uint8: case GgufValueType::Int8: case GgufValueType::Bool: return 1;
    case GgufValueType::Uint16: case GgufValueType::Int16: return 2;
    case GgufValueType::Uint32: case GgufValueType::Int32: case GgufValueType::Float32: return 4;
    case GgufValueType::Uint64: case GgufValueType::Int64: case GgufValueType::Float64: return 8;
    case GgufValueType::String: return 8;
    case GgufValueType::Array: return 12;
    }
    return 1;
}

bool valid_value_type(uint32_t t) { return t <= 12; }

GgufValue read_value(Reader &r, GgufValueType type, const std::string &key, int depth)
{
    GgufValue v;
    v.type = type;
    switch (type) {
    case GgufValueType::Uint8: v.value = uint64_t(r.read<uint8_t>("a metadata value")); break;
    case GgufValueType::Int8: v.value = int64_t(r.read<int8_t>("a metadata value")); break;
    case GgufValueType::Uint16: v.value = uint64_t(r.read<uint16_t>("a metadata value")); break;
    case GgufValueType::Int16: v.value = int64_t(r.read<int16_t>("a metadata value")); break;
    case GgufValueType::Uint32: v.value = uint64_t(r.read<uint32_t>("a metadata value")); break;
    case GgufValueType::Int32: v.value = int64_t(r.read<int32_t>("a metadata value")); break;
    case GgufValueType::Uint64: v.value = r.read<uint64_t>("a metadata value"); break;
    case GgufValueType::Int64: v.value = r.read<int64_t>("a metadata value"); break;
    case GgufValueType::Float32: v.value = double(r.read<float>("a metadata value")); break;
    case GgufValueType::Float64: v.value = r.read<double>("a metadata value"); break;
    case GgufValueType::Bool: {
        uint8_t b = r.read<uint8_t>("a metadata value");
        if (b > 1)
            r.fail("metadata key '" + key + "': boolean value " + std::to_string(b) + " is not 0 or 1");
        v.value = b != 0;
        break;
    }
    case GgufValueType::String: v.value = r.read_string("a metadata string"); break;
    case GgufValueType::Array: {
        if (depth >= max_array_depth)
            r.fail("metadata key '" + key + "': arrays nested too deeply");
        uint32_t et = r.read<uint32_t>("an array type");
        if (!valid_value_type(et))
            r.fail("metadata key '" + key + "': unknown array element type " + std::to_string(et));
        uint64_t count = r.read<uint64_t>("an array length");
        auto elem = static_cast<GgufValueType>(et);
        // A real vocabulary has at most a few hundred thousand entries; far more is hostile.
        if (count > (1ull << 24) || count > r.remaining() / min_encoded_size(elem))
            r.fail("metadata key '" + key + "': array of " + std::to_string(count) +
                   " elements cannot fit in the file");
        auto arr = std::make_shared<GgufArray>();
        arr->elem_type = elem;
        arr->items.reserve(count);
        for (uint64_t i = 0; i < count; ++i)
            arr->items.push_back(read_value(r, elem, key, depth + 1));
        v.value = std::move(arr);
        break;
    }
    }
    return v;
}

uint64_t checked_mul(uint64_t a, uint64_t b, const Reader &r, const std::string &what)
{
    uint64_t out;
    if (__builtin_mul_overflow(a, b, &out))
        r.fail(what + ": size overflows");
    return out;
}

} // namespace

std::optional<int64_t> GgufValue::as_int() const
{
    if (auto *u = std::get_if<uint64_t>(&value)) {
        if (*u > uint64_t(std::numeric_limits<int64_t>::max()))
            return std::nullopt;
        return int64_t(*u);
    }
    if (auto *i = std::get_if<int64_t>(&value))
        return *i;
    return std::nullopt;
}

std::optional<double> GgufValue::as_float() const
{
    if (auto *d = std::get_if<double>(&value))
        return *d;
    if (auto *u = std::get_if<uint64_t>(&value))
        return double(*u);
    if (auto *i = std::get_if<int64_t>(&value))
        return double(*i);
    return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const
{
    if (auto *b = std::get_if<bool>(&value))
        return *b;
    return std::nullopt;
}

const std::string *GgufValue::as_string() const { return std::get_if<std::string>(&value); }

const GgufArray *GgufValue::as_array() const
{
    auto *p = std::get_if<std::shared_ptr<GgufArray>>(&value);
    return p ? p->get() : nullptr;
}

int64_t GgufTensorInfo::n_elements() const
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d; // checked when the file was read
    return n;
}

GgufFile::~GgufFile() = default;

uint64_t GgufFile::file_size() const { return m_file->size(); }
const std::string &GgufFile::path() const { return m_file->path(); }

std::unique_ptr<GgufFile> GgufFile::open(const std::string &path)
{
    std::unique_ptr<GgufFile> g(new GgufFile());
    g->m_file = std::make_shared<MappedFile>(path);
    Reader r(path, g->m_file->data(), g->m_file->size());

    if (r.size() < 4 || std::memcmp(g->m_file->data(), "GGUF", 4) != 0)
        throw FormatError(path + ": not a GGUF file (bad magic)");
    r.read<uint32_t>("the magic");
    g->m_version = r.read<uint32_t>("the version");
    if (g->m_version == 1)
        throw FormatError(path + ": GGUF version 1 is not supported (convert the file to v3)");
    if (g->m_version != 2 && g->m_version != 3)
        throw FormatError(path + ": unsupported GGUF version " + std::to_string(g->m_version) +
                          " (supported: 2 and 3)");
    uint64_t n_tensors = r.read<uint64_t>("the tensor count");
    uint64_t n_kv = r.read<uint64_t>("the metadata count");
    // Each metadata entry takes at least 13 bytes, each tensor info at least 24.
    if (n_kv > r.remaining() / 13)
        r.fail("absurd metadata count " + std::to_string(n_kv));
    if (n_tensors > r.remaining() / 24)
        r.fail("absurd tensor count " + std::to_string(n_tensors));

    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key = r.read_string("a metadata key");
        uint32_t type = r.read<uint32_t>("a metadata type");
        if (!valid_value_type(type))
            r.fail("metadata key '" + key + "': unknown value type " + std::to_string(type));
        GgufValue v = read_value(r, static_cast<GgufValueType>(type), key, 0);
        if (g->m_metadata.count(key))
            r.fail("duplicate metadata key '" + key + "'");
        g->m_metadata_order.push_back(key);
        g->m_metadata.emplace(std::move(key), std::move(v));
    }

    if (const GgufValue *a = g->find("general.alignment")) {
        auto al = a->as_int();
        if (!al || *al <= 0 || *al > (1 << 20) || !std::has_single_bit(uint64_t(*al)))
            throw FormatError(path + ": general.alignment must be a power of two up to 1 MiB");
        g->m_alignment = uint64_t(*al);
    }

    g->m_tensors.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t;
        t.name = r.read_string("a tensor name");
        uint32_t n_dims = r.read<uint32_t>("a tensor's dimension count");
        if (n_dims == 0 || n_dims > max_dims)
            r.fail("tensor '" + t.name + "' has " + std::to_string(n_dims) +
                   " dimensions (1 to 4 allowed)");
        uint64_t n_elems = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t ne = r.read<uint64_t>("a tensor's shape");
            if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()))
                r.fail("tensor '" + t.name + "' has invalid dimension " + std::to_string(ne));
            n_elems = checked_mul(n_elems, ne, r, "tensor '" + t.name + "' dimensions");
            t.shape.push_back(int64_t(ne));
        }
        if (n_elems > uint64_t(std::numeric_limits<int64_t>::max()))
            r.fail("tensor '" + t.name + "' has too many elements");
        uint32_t type = r.read<uint32_t>("a tensor type");
        auto traits = dtype_traits(type);
        if (!traits)
            r.fail("tensor '" + t.name + "' has unknown type " + std::to_string(type));
        t.type = static_cast<DType>(type);
        if (uint64_t(t.shape[0]) % traits->block_elems != 0)
            r.fail("tensor '" + t.name + "' row of " + std::to_string(t.shape[0]) +
                   " elements is not a whole number of " + std::string(traits->name) + " blocks");
        t.nbytes = checked_mul(n_elems / traits->block_elems, traits->block_bytes, r,
                               "tensor '" + t.name + "'");
        t.offset = r.read<uint64_t>("a tensor offset");
        if (t.offset % g->m_alignment != 0)
            r.fail("tensor '" + t.name + "' offset " + std::to_string(t.offset) +
                   " is not aligned to " + std::to_string(g->m_alignment));
        if (g->m_tensor_index.count(t.name))
            r.fail("duplicate tensor name '" + t.name + "'");
        g->m_tensor_index.emplace(t.name, g->m_tensors.size());
        g->m_tensors.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment.
    uint64_t data_start = r.pos();
    if (uint64_t rem = data_start % g->m_alignment)
        data_start += g->m_alignment - rem;
    const uint64_t fsize = g->m_file->size();
    if (!g->m_tensors.empty() && data_start > fsize)
        throw FormatError(path + ": file ends before the tensor data section (file size " +
                          std::to_string(fsize) + ")");
    for (GgufTensorInfo &t : g->m_tensors) {
        uint64_t begin, end;
        if (__builtin_add_overflow(data_start, t.offset, &begin) ||
            __builtin_add_overflow(begin, t.nbytes, &end) || end > fsize)
            throw FormatError(path + ": tensor " + t.name + " extends past end of file (offset " +
                              std::to_string(t.offset) + ", size " + std::to_string(t.nbytes) +
                              ", file " + std::to_string(fsize) + ")");
        t.data = g->m_file->data() + begin;
    }
    return g;
}

const GgufValue *GgufFile::find(const std::string &key) const
{
    auto it = m_metadata.find(key);
    return it == m_metadata.end() ? nullptr : &it->second;
}

std::optional<int64_t> GgufFile::get_int(const std::string &key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return std::nullopt;
    auto i = v->as_int();
    if (!i)
        throw FormatError(path() + ": metadata key '" + key + "' is not an integer");
    return i;
}

std::optional<double> GgufFile::get_float(const std::string &key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return std::nullopt;
    auto f = v->as_float();
    if (!f)
        throw FormatError(path() + ": metadata key '" + key + "' is not a number");
    return f;
}

std::optional<bool> GgufFile::get_bool(const std::string &key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return std::nullopt;
    auto b = v->as_bool();
    if (!b)
        throw FormatError(path() + ": metadata key '" + key + "' is not a boolean");
    return b;
}

std::optional<std::string> GgufFile::get_string(const std::string &key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return std::nullopt;
    const std::string *s = v->as_string();
    if (!s)
        throw FormatError(path() + ": metadata key '" + key + "' is not a string");
    return *s;
}

const GgufTensorInfo *GgufFile::find_tensor(const std::string &name) const
{
    auto it = m_tensor_index.find(name);
    return it == m_tensor_index.end() ? nullptr : &m_tensors[it->second];
}

} // namespace longscope
