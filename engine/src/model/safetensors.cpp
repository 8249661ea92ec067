#include "model/safetensors.h"

#include "longscope/errors.h"
#include "longscope/mapped_file.h"
#include "core/json_input.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace longscope {

namespace {

// Element sizes of the dtypes safetensors defines.
uint64_t dtype_size(const std::string &d)
{
    static const std::map<std::string, uint64_t> sizes = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1}, {"U8", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8}, {"BOOL", 1},
        {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    auto it = sizes.find(d);
    return it == sizes.end() ? 0 : it->second;
}

} // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string &path)
{
    auto st = std::make_unique<SafetensorsFile>();
    st->m_file = std::make_shared<MappedFile>(path);
    const uint64_t size = st->m_file->size();
    auto fail = [&](const std::string &what) -> void { throw FormatError(path + ": " + what); };
    if (size < 8)
        fail("too small to be a safetensors file (" + std::to_string(size) + " bytes)");
    uint64_t header_len;
    std::memcpy(&header_len, st->m_file->data(), 8);
    if (header_len > size - 8 || header_len > (100ull << 20))
        fail("header length " + std::to_string(header_len) + " exceeds the file size " +
             std::to_string(size));
    const uint64_t data_start = 8 + header_len;
    const uint64_t data_size = size - data_start;

    nlohmann::json header;
    std::string why;
    const char *text = reinterpret_cast<const char *>(st->m_file->data());
    if (!parse_json_bounded(text + 8, text + data_start, header, why))
        fail("header: " + why);
    if (!header.is_object())
        fail("header is not a JSON object");

    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__")
            continue;
        const std::string &name = it.key();
        const nlohmann::json &e = it.value();
        auto bad = [&](const std::string &what) { fail("tensor " + name + ": " + what); };
        if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
            !e.contains("data_offsets"))
            bad("entry needs dtype, shape and data_offsets");
        if (!e["dtype"].is_string())
            bad("dtype is not a string");
        SafetensorsTensor t;
        t.name = name;
        t.dtype = e["dtype"].get<std::string>();
        uint64_t esize = dtype_size(t.dtype);
        if (esize == 0)
            bad("unknown dtype '" + t.dtype + "'");
        const nlohmann::json &shape = e["shape"];
        if (!shape.is_array() || shape.size() > 8)
            bad("shape is not an array of at most 8 dimensions");
        uint64_t n = 1;
        for (const auto &d : shape) {
            if (!d.is_number_unsigned())
                bad("shape has a dimension that is not a non-negative integer");
            uint64_t v = d.get<uint64_t>();
            if (v > uint64_t(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(n, v, &n))
                bad("shape overflows");
            t.shape.push_back(int64_t(v));
        }
        uint64_t expect;
        if (__builtin_mul_overflow(n, esize, &expect))
            bad("shape overflows");
        const nlohmann::json &off = e["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
            !off[1].is_number_unsigned())
            bad("data_offsets must be two non-negative integers");
        uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
        if (begin > end || end > data_size)
            bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                "] lie outside the data section of " + std::to_string(data_size) + " bytes");
        if (end - begin != expect)
            bad("data_offsets cover " + std::to_string(end - begin) + " bytes but dtype and shape need " +
                std::to_string(expect));
        t.data = st->m_file->data() + data_start + begin;
        t.nbytes = expect;
        if (expect > 0)
            ranges.emplace_back(begin, end);
        st->m_tensors.emplace(name, std::move(t));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].first < ranges[i - 1].second)
            fail("tensors overlap in the data section (offset " + std::to_string(ranges[i].first) + ")");
    return st;
}

const SafetensorsTensor *SafetensorsFile::find(const std::string &name) const
{
    auto it = m_tensors.find(name);
    return it == m_tensors.end() ? nullptr : &it->second;
}

} // namespace longscope
