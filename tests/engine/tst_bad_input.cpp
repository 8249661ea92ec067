// Hostile and broken input. Every malformed GGUF, safetensors file, config.json, HF directory,
// path, runtime argument or sampling parameter must give a longscope::Error subclass whose
// message says what is wrong (and for files, which file) - never a crash, a hang, a foreign
// exception or an absurd allocation.
//
// Each sub-case is its own data row, so a failure names the case. Rows are described by
// static tables of {name, builder, expected error kinds, expected words}; a row's builder
// produces the hostile bytes (or directory), the test loads it and checks the error.
//
// Words: a ';'-separated list of groups, each group a '|'-separated list of alternatives
// (case-insensitive); every group must match somewhere in the message.
//
// Set LONGSCOPE_SHOW_ERRORS=1 to print every error message the engine gave (for review).
#include "support/gguf_writer.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "longscope/model.h"
#include "longscope/sampler.h"
#include "longscope/tokenizer.h"

#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cxxabi.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
namespace gb = longscope::test::gguf_bytes;
using longscope::GgufArray;
using longscope::GgufValue;
using longscope::GgufValueType;
using longscope::test::GgufType;
using longscope::test::GgufWriter;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kDataDir = LONGSCOPE_TEST_DATA;
const std::string kBundledGguf = LONGSCOPE_BUNDLED_MODEL;
const std::string kHfDir = kDataDir + "/stories260K/hf";
const std::string kVocabOnlyGguf = kDataDir + "/llama2-tokenizer/llama2-vocab.gguf";
const std::string kLlama2SpModel = kDataDir + "/llama2-tokenizer/tokenizer.model";

// BOS + "Once upon a time" in the stories260K vocabulary.
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};

constexpr uint64_t kP63 = 1ull << 63;
constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
// The longest error message accepted, beside the path it names.
constexpr size_t kMaxMessageBytes = 1000;

// ---------------------------------------------------------------------------------------------
// Expected errors

enum Kind : int {
    kIo = 1,
    kFormat = 2,
    kConfig = 4,
    kInvalid = 8,
    kOverflow = 16,
    kOom = 32,
};

std::string demangle(const char *name)
{
    int status = 0;
    char *d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = (status == 0 && d) ? d : name;
    std::free(d);
    return out;
}

int kind_of(const longscope::Error &e)
{
    if (dynamic_cast<const longscope::IoError *>(&e)) return kIo;
    if (dynamic_cast<const longscope::FormatError *>(&e)) return kFormat;
    if (dynamic_cast<const longscope::ConfigError *>(&e)) return kConfig;
    if (dynamic_cast<const longscope::InvalidArgument *>(&e)) return kInvalid;
    if (dynamic_cast<const longscope::ContextOverflow *>(&e)) return kOverflow;
    if (dynamic_cast<const longscope::OutOfMemory *>(&e)) return kOom;
    return 0; // the bare base class
}

std::string kinds_str(int kinds)
{
    static const std::pair<int, const char *> names[] = {
        {kIo, "IoError"}, {kFormat, "FormatError"}, {kConfig, "ConfigError"},
        {kInvalid, "InvalidArgument"}, {kOverflow, "ContextOverflow"}, {kOom, "OutOfMemory"}};
    std::string out;
    for (auto &[k, n] : names)
        if (kinds & k)
            out += (out.empty() ? "" : " or ") + std::string(n);
    return out.empty() ? "longscope::Error" : out;
}

std::string lower(std::string s)
{
    for (char &c : s)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::vector<std::string> split(const std::string &s, char sep)
{
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        size_t at = s.find(sep, start);
        out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
        if (at == std::string::npos)
            break;
        start = at + 1;
    }
    return out;
}

// Empty when `msg` satisfies `words`, else the group that did not match.
std::string missing_words(const std::string &msg, const std::string &words)
{
    if (words.empty())
        return {};
    const std::string m = lower(msg);
    for (const std::string &group : split(words, ';')) {
        bool any = false;
        for (const std::string &alt : split(group, '|'))
            if (!alt.empty() && m.find(lower(alt)) != std::string::npos)
                any = true;
        if (!any)
            return group;
    }
    return {};
}

bool show_errors() { return qEnvironmentVariableIsSet("LONGSCOPE_SHOW_ERRORS"); }

// Runs fn and checks it throws a longscope::Error of one of `kinds` (0 = any subclass)
// whose message is non-empty, contains `must_name` (when given) and matches `words`.
// Returns an empty string on success, else what went wrong.
std::string expect_error(const std::function<void()> &fn, int kinds, const std::string &words,
                         const std::string &must_name = {})
{
    try {
        fn();
    } catch (const longscope::Error &e) {
        const std::string msg = e.what();
        if (show_errors())
            qInfo("  [%s] %s", demangle(typeid(e).name()).c_str(), msg.c_str());
        if (msg.empty())
            return "empty error message (" + demangle(typeid(e).name()) + ")";
        if (kinds != 0 && !(kind_of(e) & kinds))
            return "wrong error type " + demangle(typeid(e).name()) + ", expected " +
                   kinds_str(kinds) + ": " + msg;
        if (!must_name.empty() && msg.find(must_name) == std::string::npos)
            return "message does not name '" + must_name + "': " + msg;
        // Words must come from the engine's text, not from the path it names.
        std::string text = msg;
        if (!must_name.empty())
            for (size_t at; (at = text.find(must_name)) != std::string::npos;)
                text.erase(at, must_name.size());
        if (std::string g = missing_words(text, words); !g.empty())
            return "message lacks any of [" + g + "]: " + msg;
        // One line a user can read: a hostile value is described, never copied in whole.
        if (text.size() > kMaxMessageBytes)
            return "message of " + std::to_string(msg.size()) + " bytes: " + msg.substr(0, 300) + "...";
        return {};
    } catch (const std::exception &e) {
        return "a non-longscope exception escaped: " + demangle(typeid(e).name()) + ": " + e.what();
    } catch (...) {
        return "an unknown exception escaped";
    }
    return "no error was thrown (expected " + kinds_str(kinds) + ")";
}

#define CHECK_ERROR(fn, kinds, words, name)                                                        \
    do {                                                                                           \
        const std::string why_ = expect_error((fn), (kinds), (words), (name));                     \
        if (!why_.empty())                                                                         \
            QFAIL(why_.c_str());                                                                   \
    } while (0)

// ---------------------------------------------------------------------------------------------
// Files

std::string read_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("test setup: cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string &path, std::string_view bytes)
{
    std::error_code ec;
    fs::remove(path, ec);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out)
        throw std::runtime_error("test setup: cannot write " + path);
}

std::string random_bytes(size_t n, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::string s(n, '\0');
    for (char &c : s)
        c = char(rng() & 0xff);
    return s;
}

std::string le64(uint64_t v)
{
    std::string s;
    gb::append_u64(s, v);
    return s;
}

std::string le32(uint32_t v)
{
    std::string s;
    gb::append_u32(s, v);
    return s;
}

// ---------------------------------------------------------------------------------------------
// GGUF values and a re-emittable model description

GgufValue v_u32(uint32_t x) { GgufValue v; v.type = GgufValueType::Uint32; v.value = uint64_t(x); return v; }
GgufValue v_i32(int32_t x) { GgufValue v; v.type = GgufValueType::Int32; v.value = int64_t(x); return v; }
GgufValue v_u64(uint64_t x) { GgufValue v; v.type = GgufValueType::Uint64; v.value = x; return v; }
GgufValue v_f32(float x) { GgufValue v; v.type = GgufValueType::Float32; v.value = double(x); return v; }
GgufValue v_str(const std::string &s) { GgufValue v; v.type = GgufValueType::String; v.value = s; return v; }

uint64_t int_bits(const GgufValue &v)
{
    if (auto *u = std::get_if<uint64_t>(&v.value)) return *u;
    if (auto *i = std::get_if<int64_t>(&v.value)) return uint64_t(*i);
    if (auto *b = std::get_if<bool>(&v.value)) return *b ? 1 : 0;
    throw std::runtime_error("test bug: integer GGUF value without an integer payload");
}

double float_of(const GgufValue &v)
{
    if (auto *d = std::get_if<double>(&v.value)) return *d;
    throw std::runtime_error("test bug: float GGUF value without a float payload");
}

// The bytes of a value after its type id, exactly as GGUF stores them.
void encode_payload(std::string &out, const GgufValue &v)
{
    using T = GgufValueType;
    switch (v.type) {
    case T::Uint8: case T::Int8: gb::append_u8(out, uint8_t(int_bits(v))); break;
    case T::Uint16: case T::Int16: {
        const uint64_t b = int_bits(v);
        gb::append_u8(out, uint8_t(b & 0xff));
        gb::append_u8(out, uint8_t((b >> 8) & 0xff));
        break;
    }
    case T::Uint32: case T::Int32: gb::append_u32(out, uint32_t(int_bits(v))); break;
    case T::Uint64: case T::Int64: gb::append_u64(out, int_bits(v)); break;
    case T::Float32: gb::append_f32(out, float(float_of(v))); break;
    case T::Float64: gb::append_f64(out, float_of(v)); break;
    case T::Bool: gb::append_u8(out, uint8_t(int_bits(v))); break;
    case T::String: gb::append_string(out, *v.as_string()); break;
    case T::Array: {
        const GgufArray *a = v.as_array();
        gb::append_u32(out, uint32_t(a->elem_type));
        gb::append_u64(out, a->items.size());
        for (const GgufValue &item : a->items)
            encode_payload(out, item);
        break;
    }
    }
}

struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;
    uint32_t type = 0;
    std::string data;
};

// Everything a GGUF model file holds, re-emittable with GgufWriter after a change.
struct GgufSpec {
    std::vector<std::pair<std::string, GgufValue>> kvs;
    std::vector<TensorSpec> tensors;
    std::optional<uint32_t> alignment; // written as general.alignment after the other keys

    GgufValue *kv(const std::string &key)
    {
        for (auto &[k, v] : kvs)
            if (k == key)
                return &v;
        return nullptr;
    }
    void set(const std::string &key, GgufValue v)
    {
        if (GgufValue *old = kv(key))
            *old = std::move(v);
        else
            kvs.emplace_back(key, std::move(v));
    }
    void drop_kv(const std::string &key)
    {
        std::erase_if(kvs, [&](const auto &p) { return p.first == key; });
    }
    TensorSpec &tensor(const std::string &name)
    {
        for (TensorSpec &t : tensors)
            if (t.name == name)
                return t;
        throw std::runtime_error("test bug: no tensor " + name);
    }
    void drop_tensor(const std::string &name)
    {
        std::erase_if(tensors, [&](const TensorSpec &t) { return t.name == name; });
    }
    // A private copy of an array value, so changing it leaves the shared original intact.
    GgufArray &array(const std::string &key)
    {
        GgufValue *v = kv(key);
        auto &ptr = std::get<std::shared_ptr<GgufArray>>(v->value);
        ptr = std::make_shared<GgufArray>(*ptr);
        return *ptr;
    }
    std::string bytes() const
    {
        GgufWriter w;
        for (const auto &[k, v] : kvs) {
            std::string payload;
            encode_payload(payload, v);
            w.add_raw(k, uint32_t(v.type), payload);
        }
        if (alignment)
            w.set_alignment(*alignment);
        for (const TensorSpec &t : tensors)
            w.add_tensor(t.name, t.shape, t.type, t.data);
        return w.bytes();
    }
    uint64_t header_size() const
    {
        GgufWriter w;
        for (const auto &[k, v] : kvs) {
            std::string payload;
            encode_payload(payload, v);
            w.add_raw(k, uint32_t(v.type), payload);
        }
        if (alignment)
            w.set_alignment(*alignment);
        for (const TensorSpec &t : tensors)
            w.add_tensor(t.name, t.shape, t.type, t.data);
        return w.header_bytes().size();
    }
};

GgufSpec spec_of(const longscope::GgufFile &g)
{
    GgufSpec s;
    for (const std::string &k : g.metadata_order())
        s.kvs.emplace_back(k, g.metadata().at(k));
    for (const longscope::GgufTensorInfo &t : g.tensors())
        s.tensors.push_back({t.name, t.shape, uint32_t(t.type),
                             std::string(reinterpret_cast<const char *>(t.data), t.nbytes)});
    return s;
}

// A small, structurally valid GGUF: a few keys and two tensors.
GgufWriter small_writer(uint32_t version = 3)
{
    GgufWriter w(version);
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 1);
    w.add_f32("llama.rope.freq_base", 10000.0f);
    w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    return w;
}

void add_small_tensors(GgufWriter &w)
{
    w.add_tensor("a.weight", {8, 2}, 0, std::string(64, '\1'));
    w.add_tensor("b.weight", {4}, 0, std::string(16, '\2'));
}

std::string small_file(uint32_t version = 3)
{
    GgufWriter w = small_writer(version);
    add_small_tensors(w);
    return w.bytes();
}

// Raw header start: magic, version, counts.
std::string raw_header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3)
{
    std::string s = "GGUF";
    gb::append_u32(s, version);
    gb::append_u64(s, n_tensors);
    gb::append_u64(s, n_kv);
    return s;
}

// An array value nested `depth` levels deep (depth 1 = a plain array of one uint8).
std::string nested_array_payload(int depth)
{
    if (depth <= 1)
        return le32(uint32_t(GgufType::Uint8)) + le64(1) + std::string(1, '\7');
    return le32(uint32_t(GgufType::Array)) + le64(1) + nested_array_payload(depth - 1);
}

// A GGUF with one tensor whose info is exactly as given (the data is laid out as the writer
// lays it, whatever the info claims).
std::string one_tensor_file(const std::vector<int64_t> &shape, uint32_t type, size_t data_bytes,
                            std::optional<uint64_t> offset = std::nullopt)
{
    GgufWriter w = small_writer();
    w.add_tensor("first.weight", {4}, 0, std::string(16, '\0'));
    w.add_tensor("hostile.weight", shape, type, std::string(data_bytes, '\0'));
    if (offset)
        w.set_last_tensor_offset(*offset);
    return w.bytes();
}

// ---------------------------------------------------------------------------------------------
// Safetensors

struct Safetensors {
    ojson header;
    std::string data;

    // The header padded with spaces so the data section starts 8-byte aligned, as the
    // safetensors library writes it; `data_misalign` shifts it off that alignment.
    std::string bytes(size_t data_misalign = 0) const
    {
        std::string h = header.dump();
        while ((8 + h.size()) % 8 != data_misalign % 8)
            h.push_back(' ');
        return le64(h.size()) + h + data;
    }
};

Safetensors parse_safetensors(const std::string &file)
{
    uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    Safetensors st;
    st.header = ojson::parse(file.substr(8, n));
    st.data = file.substr(8 + n);
    return st;
}

std::string st_raw(const std::string &header, const std::string &data = {})
{
    return le64(header.size()) + header + data;
}

// ---------------------------------------------------------------------------------------------
// Shared state, filled by initTestCase.

struct Shared {
    std::string gguf_bytes;          // the bundled GGUF
    GgufSpec gguf;                   // ... as a re-emittable description
    std::string hf_config, hf_st, hf_tok;
    ojson hf_config_json;
    Safetensors hf_safetensors;
    std::string tmp;                 // temporary directory for hostile files
    int counter = 0;
};
Shared g;

std::string tmp_path(const std::string &name) { return g.tmp + "/" + name; }

std::string fresh_dir(const std::string &base)
{
    const std::string d = tmp_path(base + "-" + std::to_string(++g.counter));
    fs::create_directories(d);
    return d;
}

// A faithful copy of the HF test directory.
std::string fresh_hf_dir()
{
    const std::string d = fresh_dir("hf");
    write_file(d + "/config.json", g.hf_config);
    write_file(d + "/model.safetensors", g.hf_st);
    write_file(d + "/tokenizer.model", g.hf_tok);
    return d;
}

void write_config(const std::string &dir, const ojson &cfg) { write_file(dir + "/config.json", cfg.dump(2)); }

// `depth` nested arrays around a 1: 2 * depth + 1 bytes of JSON (100000 levels: 200 KB).
std::string nested_arrays(int depth) { return std::string(size_t(depth), '[') + "1" + std::string(size_t(depth), ']'); }

// The bundled config.json with `key` set to the raw JSON text `value`.
std::string config_with_raw(const std::string &key, const std::string &value)
{
    ojson cfg = g.hf_config_json;
    cfg[key] = "@value@";
    std::string text = cfg.dump(2);
    const std::string mark = "\"@value@\"";
    return text.replace(text.find(mark), mark.size(), value);
}

// ---------------------------------------------------------------------------------------------
// Case tables

// A file case: its bytes, the error expected from Model::load, and whether GgufFile::open
// must already reject it (structural) or accept it (model-level problem).
enum class OpenExpect { Rejects, Accepts };

struct FileCase {
    std::string name;
    std::function<std::string()> bytes;
    int kinds;
    std::string words;
    OpenExpect open = OpenExpect::Rejects;
};

// A directory case: builds a directory (usually from a faithful HF copy) and returns the path
// to load.
struct DirCase {
    std::string name;
    std::function<std::string()> build;
    int kinds;
    std::string words;
};

// One row per case, named by it (FileCase, DirCase, TokenizerCase).
template <typename Case>
void add_rows(const std::vector<Case> &cases)
{
    QTest::addColumn<int>("index");
    for (size_t i = 0; i < cases.size(); ++i)
        QTest::addRow("%s", cases[i].name.c_str()) << int(i);
}

// GGUF header and metadata structure.
std::vector<FileCase> gguf_header_cases()
{
    std::vector<FileCase> c;
    const int F = kFormat;
    auto with_magic = [](const char *magic) {
        return [magic] { std::string b = small_file(); std::memcpy(b.data(), magic, 4); return b; };
    };
    c.push_back({"empty file", [] { return std::string(); }, F, "magic|empty|small"});
    c.push_back({"3 bytes GGU", [] { return std::string("GGU"); }, F, "magic|small|ends"});
    c.push_back({"magic only", [] { return std::string("GGUF"); }, F, "version;ends|truncat"});
    c.push_back({"bad magic GGML", with_magic("GGML"), F, "magic"});
    c.push_back({"bad magic lowercase gguf", with_magic("gguf"), F, "magic"});
    c.push_back({"bad magic byte-swapped FUGG", with_magic("FUGG"), F, "magic"});
    for (uint32_t v : {0u, 1u, 4u, 0xFFFFFFFFu}) {
        c.push_back({"version " + std::to_string(v), [v] { return small_file(v); }, F,
                     "version;" + std::to_string(v)});
    }
    c.push_back({"version big-endian 3", [] {
                     std::string b = small_file();
                     const std::string be("\0\0\0\3", 4);
                     b.replace(4, 4, be);
                     return b;
                 }, F, "version"});
    c.push_back({"counts cut short", [] { return raw_header(0, 0).substr(0, 15); }, F, "tensor count;ends"});
    c.push_back({"tensor count 2^63", [] {
                     GgufWriter w = small_writer(); add_small_tensors(w); w.override_tensor_count(kP63); return w.bytes();
                 }, F, "tensor count"});
    c.push_back({"tensor count 2^64-1", [] {
                     GgufWriter w = small_writer(); add_small_tensors(w); w.override_tensor_count(kMax64); return w.bytes();
                 }, F, "tensor count"});
    c.push_back({"tensor count one more than present", [] {
                     GgufWriter w = small_writer(); add_small_tensors(w); w.override_tensor_count(3); return w.bytes();
                 }, F, "tensor|ends|past end"});
    c.push_back({"metadata count 2^62", [] {
                     GgufWriter w = small_writer(); add_small_tensors(w); w.override_kv_count(1ull << 62); return w.bytes();
                 }, F, "metadata count"});
    c.push_back({"metadata count 2^64-1", [] {
                     GgufWriter w = small_writer(); add_small_tensors(w); w.override_kv_count(kMax64); return w.bytes();
                 }, F, "metadata count"});
    c.push_back({"metadata count one more than present", [] {
                     GgufWriter w = small_writer(); w.override_kv_count(5); return w.bytes();
                 }, F, "ends|metadata"});
    // (Padded so that the metadata count itself is plausible for the file size.)
    c.push_back({"key length 2^63", [] { return raw_header(0, 1) + le64(kP63) + "key" + std::string(64, '\0'); }, F,
                 "string length;key"});
    c.push_back({"key length 2^64-1", [] { return raw_header(0, 1) + le64(kMax64) + "key" + std::string(64, '\0'); }, F,
                 "string length;key"});
    c.push_back({"key length past end of file", [] {
                     return raw_header(0, 1) + le64(1000) + std::string(100, 'k');
                 }, F, "ends;key"});
    c.push_back({"string value length 2^63", [] {
                     GgufWriter w = small_writer(); w.add_raw("general.name", uint32_t(GgufType::String), le64(kP63) + "abc");
                     return w.bytes();
                 }, F, "string length"});
    c.push_back({"string value length 2^32", [] {
                     GgufWriter w = small_writer(); w.add_raw("general.name", uint32_t(GgufType::String), le64(1ull << 32) + "abc");
                     return w.bytes();
                 }, F, "string length"});
    c.push_back({"string value length past end of file", [] {
                     GgufWriter w = small_writer(); w.add_raw("general.name", uint32_t(GgufType::String), le64(100000) + "abc");
                     return w.bytes();
                 }, F, "ends;string"});
    c.push_back({"u64 value cut by end of file", [] {
                     GgufWriter w = small_writer();
                     w.add_raw("general.size", uint32_t(GgufType::Uint64), "\1\2\3");
                     return w.header_bytes();
                 }, F, "ends"});
    c.push_back({"array of 2^40 uint8", [] {
                     GgufWriter w = small_writer();
                     w.add_raw("big", uint32_t(GgufType::Array), le32(uint32_t(GgufType::Uint8)) + le64(1ull << 40) + "abcd");
                     return w.bytes();
                 }, F, "array;big"});
    c.push_back({"array of 2^63 strings", [] {
                     GgufWriter w = small_writer();
                     w.add_raw("big", uint32_t(GgufType::Array), le32(uint32_t(GgufType::String)) + le64(kP63) + le64(1) + "a");
                     return w.bytes();
                 }, F, "array;big"});
    c.push_back({"array of 2^40 arrays", [] {
                     GgufWriter w = small_writer();
                     w.add_raw("big", uint32_t(GgufType::Array), le32(uint32_t(GgufType::Array)) + le64(1ull << 40) +
                               le32(uint32_t(GgufType::Uint8)) + le64(0));
                     return w.bytes();
                 }, F, "array;big"});
    c.push_back({"array of 2^20 uint64 in a small file", [] {
                     GgufWriter w = small_writer();
                     w.add_raw("big", uint32_t(GgufType::Array), le32(uint32_t(GgufType::Uint64)) + le64(1ull << 20) + le64(7));
                     return w.bytes();
                 }, F, "array;big"});
    for (uint32_t t : {13u, 99u, 0xFFFFFFFFu}) {
        c.push_back({"unknown value type " + std::to_string(t), [t] {
                         GgufWriter w = small_writer(); w.add_raw("weird", t, le32(0)); return w.bytes();
                     }, F, "type;weird"});
        c.push_back({"unknown array element type " + std::to_string(t), [t] {
                         GgufWriter w = small_writer();
                         w.add_raw("weird", uint32_t(GgufType::Array), le32(t) + le64(1) + le32(0));
                         return w.bytes();
                     }, F, "element type;weird"});
    }
    for (int depth : {5, 6, 64, 10000}) {
        c.push_back({"arrays nested " + std::to_string(depth) + " deep", [depth] {
                         GgufWriter w = small_writer();
                         if (depth <= 64) {
                             w.add_raw("deep", uint32_t(GgufType::Array), nested_array_payload(depth));
                         } else { // claims of deeper nesting than the file could ever hold
                             std::string p;
                             for (int i = 0; i < depth; ++i)
                                 p += le32(uint32_t(GgufType::Array)) + le64(1);
                             w.add_raw("deep", uint32_t(GgufType::Array), p);
                         }
                         return w.bytes();
                     }, F, "nested;deep"});
    }
    for (uint8_t b : {uint8_t(2), uint8_t(7), uint8_t(255)}) {
        c.push_back({"bool value " + std::to_string(b), [b] {
                         GgufWriter w = small_writer();
                         w.add_raw("tokenizer.ggml.add_bos_token", uint32_t(GgufType::Bool), std::string(1, char(b)));
                         return w.bytes();
                     }, F, "bool;add_bos_token"});
    }
    c.push_back({"bool 7 inside an array", [] {
                     GgufWriter w = small_writer();
                     w.add_raw("flags", uint32_t(GgufType::Array), le32(uint32_t(GgufType::Bool)) + le64(3) + std::string("\1\0\7", 3));
                     return w.bytes();
                 }, F, "bool;flags"});
    for (uint32_t a : {0u, 3u, 48u, 1u << 21, 1u << 31, 0xFFFFFFFFu}) {
        // The header and a little data: bytes() would pad the file to the alignment itself.
        c.push_back({"alignment " + std::to_string(a), [a] {
                         GgufWriter w = small_writer(); w.set_alignment(a); add_small_tensors(w);
                         return w.header_bytes() + std::string(256, '\0');
                     }, F, "alignment"});
    }
    c.push_back({"alignment -32 (int32)", [] {
                     GgufWriter w = small_writer(); w.add_i32("general.alignment", -32); add_small_tensors(w); return w.bytes();
                 }, F, "alignment"});
    c.push_back({"alignment a string", [] {
                     GgufWriter w = small_writer(); w.add_string("general.alignment", "32"); add_small_tensors(w); return w.bytes();
                 }, F, "alignment"});
    c.push_back({"alignment a float", [] {
                     GgufWriter w = small_writer(); w.add_f32("general.alignment", 32.0f); add_small_tensors(w); return w.bytes();
                 }, F, "alignment"});
    c.push_back({"duplicate metadata key", [] {
                     GgufWriter w = small_writer(); w.add_u32("llama.block_count", 2); add_small_tensors(w); return w.bytes();
                 }, F, "duplicate;llama.block_count"});
    c.push_back({"duplicate tensor name", [] {
                     GgufWriter w = small_writer(); add_small_tensors(w);
                     w.add_tensor("a.weight", {8, 2}, 0, std::string(64, '\3'));
                     return w.bytes();
                 }, F, "duplicate;a.weight"});
    return c;
}

// GGUF tensor infos.
std::vector<FileCase> gguf_tensor_cases()
{
    std::vector<FileCase> c;
    const int F = kFormat;
    auto one = [](std::vector<int64_t> shape, uint32_t type, size_t bytes, std::optional<uint64_t> off = {}) {
        return [=] { return one_tensor_file(shape, type, bytes, off); };
    };
    c.push_back({"n_dims 0", one({}, 0, 4), F, "dimensions;hostile.weight"});
    c.push_back({"n_dims 5", one({2, 2, 2, 2, 2}, 0, 128), F, "dimensions;hostile.weight"});
    c.push_back({"n_dims 2^32-1", [] {
                     std::string b = raw_header(1, 0) + le64(1) + "t" + le32(0xFFFFFFFFu) + le64(4) + le32(0) + le64(0);
                     return b + std::string(64, '\0');
                 }, F, "dimensions"});
    c.push_back({"dimension 0 (first)", one({0, 4}, 0, 0), F, "dimension;hostile.weight"});
    c.push_back({"dimension 0 (last)", one({4, 4, 0}, 0, 0), F, "dimension;hostile.weight"});
    c.push_back({"dimension -1", one({4, -1}, 0, 16), F, "dimension;hostile.weight"});
    c.push_back({"dimension 2^63 (negative as int64)", one({int64_t(kP63), 1}, 0, 16), F, "dimension;hostile.weight"});
    c.push_back({"dimensions [2^32, 2^32, 16] overflow", one({1ll << 32, 1ll << 32, 16}, 0, 64), F,
                 "overflow;hostile.weight"});
    c.push_back({"dimensions [2^62, 4] overflow", one({1ll << 62, 4}, 0, 64), F, "overflow;hostile.weight"});
    c.push_back({"F32 bytes of [2^62] overflow", one({1ll << 62}, 0, 64), F, "overflow;hostile.weight"});
    c.push_back({"F32 [2^61] far past end", one({1ll << 61}, 0, 64), F, "past end;hostile.weight"});
    for (uint32_t t : {4u, 5u, 16u, 29u, 31u, 99u, 0xFFFFFFFFu})
        c.push_back({"unknown tensor type " + std::to_string(t), one({32}, t, 128), F,
                     "unknown type;hostile.weight"});
    c.push_back({"offset 1 not aligned", one({4}, 0, 16, 1), F, "aligned;hostile.weight"});
    c.push_back({"offset 31 not aligned", one({4}, 0, 16, 31), F, "aligned;hostile.weight"});
    c.push_back({"offset 2^20 past end", one({4}, 0, 16, 1u << 20), F, "past end;hostile.weight"});
    c.push_back({"offset 2^64-32 wraps", one({4}, 0, 16, kMax64 - 31), F, "past end;hostile.weight"});
    c.push_back({"data larger than file", one({64, 64}, 0, 16), F, "past end;hostile.weight"});
    c.push_back({"Q8_0 with ne0 = 33", one({33, 2}, 8, 68), F, "block;hostile.weight"});
    c.push_back({"Q4_K with ne0 = 128", one({128}, 12, 144), F, "block;hostile.weight"});
    c.push_back({"tensor name length 2^63", [] {
                     return raw_header(1, 0) + le64(kP63) + "t" + std::string(64, '\0');
                 }, F, "string length|name"});
    c.push_back({"tensor info cut inside the shape", [] {
                     GgufWriter w = small_writer(); add_small_tensors(w);
                     const std::string h = w.header_bytes();
                     return h.substr(0, h.size() - 20); // drops offset, type and the last dimension
                 }, F, "ends;shape"});
    c.push_back({"file ends before the data section", [] {
                     GgufWriter w = small_writer(); add_small_tensors(w); return w.header_bytes();
                 }, F, "ends|past end"});
    return c;
}

// Model-level problems: a structurally valid GGUF that is not a usable LLaMA model.
std::vector<FileCase> gguf_model_cases()
{
    std::vector<FileCase> c;
    using Mut = std::function<void(GgufSpec &)>;
    auto m = [&c](std::string name, Mut f, int kinds, std::string words) {
        c.push_back({std::move(name), [f] { GgufSpec s = g.gguf; f(s); return s.bytes(); }, kinds,
                     std::move(words), OpenExpect::Accepts});
    };
    const int F = kFormat, C = kConfig, FC = kFormat | kConfig;
    m("missing tensor blk.2.ffn_up.weight", [](GgufSpec &s) { s.drop_tensor("blk.2.ffn_up.weight"); }, F,
      "missing;blk.2.ffn_up.weight");
    m("missing tensor token_embd.weight", [](GgufSpec &s) { s.drop_tensor("token_embd.weight"); }, F,
      "missing;token_embd.weight");
    m("missing tensor output_norm.weight", [](GgufSpec &s) { s.drop_tensor("output_norm.weight"); }, F,
      "missing;output_norm.weight");
    m("no tensors at all", [](GgufSpec &s) { s.tensors.clear(); }, F, "missing;token_embd.weight");
    // A tensor the llama family does not use (a bias) is refused by name, never ignored.
    m("unused tensor blk.0.attn_q.bias", [](GgufSpec &s) {
        s.tensors.push_back({"blk.0.attn_q.bias", {64}, 0, std::string(64 * 4, '\0')});
    }, F, "blk.0.attn_q.bias;does not use");
    m("architecture mixtral", [](GgufSpec &s) { s.set("general.architecture", v_str("mixtral")); }, F,
      "mixtral;mixture-of-experts");
    m("attention.key_length differs from value_length", [](GgufSpec &s) {
        s.set("llama.attention.key_length", v_u32(8));
        s.set("llama.attention.value_length", v_u32(16));
    }, F, "key_length;value_length");
    m("wrong shape attn_q [32, 128]", [](GgufSpec &s) { s.tensor("blk.1.attn_q.weight").shape = {32, 128}; }, F,
      "shape;blk.1.attn_q.weight");
    m("wrong shape attn_k transposed", [](GgufSpec &s) { s.tensor("blk.0.attn_k.weight").shape = {32, 64}; }, F,
      "shape;blk.0.attn_k.weight");
    m("wrong shape ffn_down as ffn_up", [](GgufSpec &s) { s.tensor("blk.4.ffn_down.weight").shape = {64, 172}; }, F,
      "shape;blk.4.ffn_down.weight");
    m("wrong shape norm [32]", [](GgufSpec &s) {
        TensorSpec &t = s.tensor("blk.3.ffn_norm.weight"); t.shape = {32}; t.data.resize(128);
    }, F, "shape;blk.3.ffn_norm.weight");
    m("token_embd 1-D", [](GgufSpec &s) { s.tensor("token_embd.weight").shape = {64 * 512}; }, FC,
      "token_embd|vocab");
    // Q8_1 (type 9, 36-byte blocks of 32) is a known GGUF type the engine does not compute with.
    m("Q8_1 data for attn_q", [](GgufSpec &s) {
        TensorSpec &t = s.tensor("blk.0.attn_q.weight"); t.type = 9; t.data.assign(64 * 64 / 32 * 36, '\0');
    }, F, "cannot compute;blk.0.attn_q.weight;Q8_1");
    m("Q4_K data for output", [](GgufSpec &s) {
        TensorSpec &t = s.tensor("output.weight"); t.shape = {256, 128}; t.type = 12; t.data.assign(128 * 144, '\0');
    }, F, "output.weight");
    m("I32 data for a norm", [](GgufSpec &s) { s.tensor("blk.0.attn_norm.weight").type = 26; }, F,
      "cannot compute;blk.0.attn_norm.weight;I32");
    m("architecture gpt2", [](GgufSpec &s) { s.set("general.architecture", v_str("gpt2")); }, FC, "gpt2");
    m("architecture missing", [](GgufSpec &s) { s.drop_kv("general.architecture"); }, FC, "general.architecture");
    m("architecture a number", [](GgufSpec &s) { s.set("general.architecture", v_u32(1)); }, FC,
      "general.architecture");
    m("missing llama.block_count", [](GgufSpec &s) { s.drop_kv("llama.block_count"); }, FC, "llama.block_count");
    m("missing llama.embedding_length", [](GgufSpec &s) { s.drop_kv("llama.embedding_length"); }, FC,
      "llama.embedding_length");
    m("missing llama.attention.head_count", [](GgufSpec &s) { s.drop_kv("llama.attention.head_count"); }, FC,
      "head_count");
    m("embedding_length 0", [](GgufSpec &s) { s.set("llama.embedding_length", v_u32(0)); }, C, "width|embedding");
    m("embedding_length -64", [](GgufSpec &s) { s.set("llama.embedding_length", v_i32(-64)); }, C,
      "embedding_length|width");
    m("embedding_length 2^40", [](GgufSpec &s) { s.set("llama.embedding_length", v_u64(1ull << 40)); }, C,
      "embedding_length|width");
    m("embedding_length a string", [](GgufSpec &s) { s.set("llama.embedding_length", v_str("64")); }, FC,
      "embedding_length");
    m("block_count 0", [](GgufSpec &s) { s.set("llama.block_count", v_u32(0)); }, C, "layer");
    m("block_count -1", [](GgufSpec &s) { s.set("llama.block_count", v_i32(-1)); }, C, "block_count|layer");
    m("block_count 6 (one more than tensors)", [](GgufSpec &s) { s.set("llama.block_count", v_u32(6)); }, F,
      "missing;blk.5.");
    m("block_count 100000", [](GgufSpec &s) { s.set("llama.block_count", v_u32(100000)); }, C, "layer");
    m("head_count 0", [](GgufSpec &s) { s.set("llama.attention.head_count", v_u32(0)); }, C, "head");
    m("head_count -8", [](GgufSpec &s) { s.set("llama.attention.head_count", v_i32(-8)); }, C, "head_count|head");
    m("head_count_kv 16 > head_count 8", [](GgufSpec &s) { s.set("llama.attention.head_count_kv", v_u32(16)); }, C,
      "key/value");
    m("head_count_kv 0", [](GgufSpec &s) { s.set("llama.attention.head_count_kv", v_u32(0)); }, C, "key/value");
    m("head_count_kv 3 (8 not a multiple)", [](GgufSpec &s) { s.set("llama.attention.head_count_kv", v_u32(3)); }, C,
      "multiple|key/value");
    m("width 64 not divisible by 7 heads", [](GgufSpec &s) { s.set("llama.attention.head_count", v_u32(7)); }, C,
      "divisible");
    m("head_count 128 > width", [](GgufSpec &s) { s.set("llama.attention.head_count", v_u32(128)); }, C, "head");
    m("feed_forward_length 0", [](GgufSpec &s) { s.set("llama.feed_forward_length", v_u32(0)); }, C, "feed-forward");
    m("context_length 0", [](GgufSpec &s) { s.set("llama.context_length", v_u32(0)); }, C, "context");
    m("rope.dimension_count 7 (odd)", [](GgufSpec &s) { s.set("llama.rope.dimension_count", v_u32(7)); }, C, "rotary");
    m("rope.dimension_count 64 > head size", [](GgufSpec &s) { s.set("llama.rope.dimension_count", v_u32(64)); }, C,
      "rotary");
    m("rms epsilon -1", [](GgufSpec &s) { s.set("llama.attention.layer_norm_rms_epsilon", v_f32(-1)); }, C, "epsilon");
    m("rms epsilon NaN", [](GgufSpec &s) {
        s.set("llama.attention.layer_norm_rms_epsilon", v_f32(std::numeric_limits<float>::quiet_NaN()));
    }, C, "epsilon");
    m("rope freq_base 0", [](GgufSpec &s) { s.set("llama.rope.freq_base", v_f32(0)); }, C, "rope");
    m("rope freq_base inf", [](GgufSpec &s) {
        s.set("llama.rope.freq_base", v_f32(std::numeric_limits<float>::infinity()));
    }, C, "rope");
    m("rope scaling type foo", [](GgufSpec &s) { s.set("llama.rope.scaling.type", v_str("foo")); }, FC, "foo");
    m("rope scaling factor 0.5", [](GgufSpec &s) {
        s.set("llama.rope.scaling.type", v_str("linear")); s.set("llama.rope.scaling.factor", v_f32(0.5f));
    }, C, "factor|scaling");
    m("vocab_size 100 (tensors hold 512)", [](GgufSpec &s) { s.set("llama.vocab_size", v_u32(100)); }, FC,
      "token_embd|vocab|tokens");
    m("vocab_size 0", [](GgufSpec &s) { s.set("llama.vocab_size", v_u32(0)); }, C, "vocab");
    // The embedded tokenizer.
    m("tokenizer.ggml.model missing", [](GgufSpec &s) { s.drop_kv("tokenizer.ggml.model"); }, F, "tokenizer");
    // A BPE vocabulary needs its merges, which this sentencepiece one lacks.
    m("tokenizer.ggml.model gpt2", [](GgufSpec &s) { s.set("tokenizer.ggml.model", v_str("gpt2")); }, F,
      "tokenizer.ggml.merges");
    m("tokenizer.ggml.model bert", [](GgufSpec &s) { s.set("tokenizer.ggml.model", v_str("bert")); }, F,
      "tokenizer;bert");
    m("tokenizer.ggml.tokens missing", [](GgufSpec &s) { s.drop_kv("tokenizer.ggml.tokens"); }, F,
      "tokenizer.ggml.tokens");
    m("tokenizer.ggml.tokens not an array", [](GgufSpec &s) { s.set("tokenizer.ggml.tokens", v_str("a b c")); }, F,
      "tokenizer.ggml.tokens");
    m("tokenizer.ggml.tokens of integers", [](GgufSpec &s) {
        GgufArray &a = s.array("tokenizer.ggml.tokens");
        a.elem_type = GgufValueType::Uint32;
        for (size_t i = 0; i < a.items.size(); ++i)
            a.items[i] = v_u32(uint32_t(i));
    }, F, "tokenizer.ggml.tokens");
    m("tokenizer.ggml.tokens empty", [](GgufSpec &s) { s.array("tokenizer.ggml.tokens").items.clear(); }, F,
      "tokenizer.ggml.tokens");
    m("tokenizer scores shorter than tokens", [](GgufSpec &s) { s.array("tokenizer.ggml.scores").items.pop_back(); },
      F, "tokenizer.ggml.scores");
    m("tokenizer token_type 9", [](GgufSpec &s) { s.array("tokenizer.ggml.token_type").items[10] = v_i32(9); }, F,
      "token_type");
    m("tokenizer token_type -1", [](GgufSpec &s) { s.array("tokenizer.ggml.token_type").items[10] = v_i32(-1); }, F,
      "token_type");
    m("tokenizer more tokens than the model", [](GgufSpec &s) {
        for (const char *k : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
            GgufArray &a = s.array(k);
            for (int i = 0; i < 8; ++i) {
                GgufValue extra = a.items.back();
                if (a.elem_type == GgufValueType::String)
                    extra = v_str("extra" + std::to_string(i));
                a.items.push_back(extra);
            }
        }
    }, F, "tokens;512");
    m("tokenizer bos id 600", [](GgufSpec &s) { s.set("tokenizer.ggml.bos_token_id", v_u32(600)); }, F,
      "bos_token_id");
    m("tokenizer duplicate pieces", [](GgufSpec &s) {
        GgufArray &a = s.array("tokenizer.ggml.tokens"); a.items[300] = a.items[301];
    }, F, "tokenizer|sentencepiece");
    m("tokenizer empty piece", [](GgufSpec &s) { s.array("tokenizer.ggml.tokens").items[300] = v_str(""); }, F,
      "tokenizer|sentencepiece|piece");
    m("tokenizer byte token not <0xNN>", [](GgufSpec &s) { s.array("tokenizer.ggml.tokens").items[3] = v_str("abc"); },
      F, "byte|tokenizer|sentencepiece");
    // (This file does carry general.architecture "llama" and LLaMA-7B hyperparameters, just
    // no tensors.)
    c.push_back({"vocab-only GGUF loaded as a model", [] { return read_file(kVocabOnlyGguf); }, F,
                 "missing|vocab;token_embd|tensor|general.architecture", OpenExpect::Accepts});
    return c;
}

// Byte-level BPE vocabularies (GGUF metadata only) and tokenizer.json files, loaded with
// Tokenizer::load. The base of each table loads (bpeVocabulary checks it first).
struct BpeVocabSpec {
    std::string model = "gpt2";
    std::optional<std::string> pre = "gpt-2";
    std::vector<std::string> tokens;
    std::optional<std::vector<int32_t>> types;
    std::optional<std::vector<std::string>> merges = std::vector<std::string>{"h e", "l l", "he ll", "hell o"};
    bool merges_as_ints = false;
    std::optional<uint32_t> eos, eot;
    BpeVocabSpec()
    {
        // GPT-2's byte alphabet, written out here from its definition (bytes_to_unicode).
        int next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            const int cp = printable ? b : next++;
            std::string u;
            if (cp < 0x80) {
                u.push_back(char(cp));
            } else {
                u.push_back(char(0xC0 | (cp >> 6)));
                u.push_back(char(0x80 | (cp & 0x3F)));
            }
            tokens.push_back(u);
        }
        for (const char *t : {"he", "ll", "hell", "hello", "<|endoftext|>"})
            tokens.push_back(t);
        types = std::vector<int32_t>(tokens.size(), 1);
        types->back() = 3;
    }
    std::string bytes() const
    {
        GgufWriter w;
        w.add_string("general.architecture", "llama");
        w.add_string("tokenizer.ggml.model", model);
        if (pre)
            w.add_string("tokenizer.ggml.pre", *pre);
        w.add_string_array("tokenizer.ggml.tokens", tokens);
        if (types)
            w.add_i32_array("tokenizer.ggml.token_type", *types);
        if (merges && merges_as_ints)
            w.add_i32_array("tokenizer.ggml.merges", std::vector<int32_t>(merges->size(), 1));
        else if (merges)
            w.add_string_array("tokenizer.ggml.merges", *merges);
        if (eos)
            w.add_u32("tokenizer.ggml.eos_token_id", *eos);
        if (eot)
            w.add_u32("tokenizer.ggml.eot_token_id", *eot);
        return w.bytes();
    }
};

struct TokenizerCase {
    std::string name;
    std::function<std::string()> build; // the path to load
    int kinds;
    std::string words;
};

std::vector<TokenizerCase> bpe_gguf_cases()
{
    std::vector<TokenizerCase> c;
    auto m = [&c](std::string name, std::function<void(BpeVocabSpec &)> f, std::string words) {
        c.push_back({std::move(name), [f] {
                         BpeVocabSpec s; f(s);
                         const std::string path = tmp_path("bpe-" + std::to_string(++g.counter) + ".gguf");
                         write_file(path, s.bytes());
                         return path;
                     }, kFormat, std::move(words)});
    };
    m("merges missing", [](BpeVocabSpec &s) { s.merges.reset(); }, "tokenizer.ggml.merges;missing");
    m("merges of integers", [](BpeVocabSpec &s) { s.merges_as_ints = true; }, "tokenizer.ggml.merges;strings");
    m("merge without a space", [](BpeVocabSpec &s) { (*s.merges)[1] = "ll"; }, "tokenizer.ggml.merges[1]");
    m("merge with nothing after the space", [](BpeVocabSpec &s) { (*s.merges)[2] = "hell "; },
      "tokenizer.ggml.merges[2]");
    m("merge empty", [](BpeVocabSpec &s) { (*s.merges)[0] = ""; }, "tokenizer.ggml.merges[0]");
    m("merge one space", [](BpeVocabSpec &s) { (*s.merges)[3] = " "; }, "tokenizer.ggml.merges[3]");
    m("unknown pre-tokenizer", [](BpeVocabSpec &s) { s.pre = "my-own-regex"; }, "tokenizer.ggml.pre;my-own-regex");
    m("tokens missing", [](BpeVocabSpec &s) { s.tokens.clear(); s.types.reset(); }, "tokenizer.ggml.tokens");
    m("token_type shorter", [](BpeVocabSpec &s) { s.types->pop_back(); }, "tokenizer.ggml.token_type");
    m("token_type 7", [](BpeVocabSpec &s) { (*s.types)[40] = 7; }, "tokenizer.ggml.token_type[40]");
    m("eos id past the vocabulary", [](BpeVocabSpec &s) { s.eos = 100000; }, "eos_token_id;100000");
    m("eot id past the vocabulary", [](BpeVocabSpec &s) { s.eot = 261; }, "eot_token_id;261");
    m("model bert", [](BpeVocabSpec &s) { s.model = "bert"; }, "tokenizer.ggml.model|tokenizer model;bert");
    return c;
}

using ojson_t = nlohmann::ordered_json;

// A directory with a small valid byte-level BPE tokenizer.json, edited by `f`.
std::string hf_tokenizer_dir(const std::function<void(ojson_t &)> &f)
{
    ojson_t vocab = ojson_t::object();
    const BpeVocabSpec base;
    for (size_t i = 0; i + 1 < base.tokens.size(); ++i)
        vocab[base.tokens[i]] = i;
    ojson_t j = {
        {"added_tokens", ojson_t::array({{{"id", 260}, {"content", "<|endoftext|>"}, {"special", true}}})},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", *base.merges}}},
    };
    f(j);
    const std::string d = tmp_path("hf-tok-" + std::to_string(++g.counter));
    fs::create_directories(d);
    write_file(d + "/tokenizer.json", j.is_string() ? j.get<std::string>() : j.dump());
    return d;
}

std::vector<TokenizerCase> hf_tokenizer_json_cases()
{
    using ojson = ojson_t;
    std::vector<TokenizerCase> c;
    auto edit = [&c](std::string name, std::function<void(ojson &)> f, std::string words, int kinds = kFormat) {
        c.push_back({std::move(name), [f] { return hf_tokenizer_dir(f); }, kinds, std::move(words)});
    };
    edit("not JSON", [](ojson &j) { j = "{\"model\": "; }, "tokenizer.json;JSON", kConfig);
    edit("model Unigram", [](ojson &j) { j["model"]["type"] = "Unigram"; }, "tokenizer.json;Unigram");
    edit("model missing", [](ojson &j) { j.erase("model"); }, "tokenizer.json;model");
    edit("vocab an array", [](ojson &j) { j["model"]["vocab"] = ojson::array(); }, "model.vocab");
    edit("vocab id negative", [](ojson &j) { j["model"]["vocab"]["he"] = -5; }, "model.vocab;he");
    edit("vocab id huge", [](ojson &j) { j["model"]["vocab"]["he"] = 1ll << 40; }, "model.vocab;he");
    edit("merges missing", [](ojson &j) { j["model"].erase("merges"); }, "model.merges");
    edit("merge not two tokens", [](ojson &j) { j["model"]["merges"][1] = "ll"; }, "model.merges[1]");
    edit("merge a number", [](ojson &j) { j["model"]["merges"][0] = 7; }, "model.merges[0]");
    edit("merge pair of three", [](ojson &j) { j["model"]["merges"][2] = {"a", "b", "c"}; }, "model.merges[2]");
    edit("pre_tokenizer Whitespace", [](ojson &j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; },
         "pre_tokenizer;Whitespace");
    edit("Split removed", [](ojson &j) {
        j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}};
    }, "Split;Isolated");
    edit("Split regex does not compile", [](ojson &j) {
        j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", ojson::array({
            {{"type", "Split"}, {"pattern", {{"Regex", "(\\p{L}+"}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    }, "expression;compile");
    edit("ByteLevel with a prefix space", [](ojson &j) { j["pre_tokenizer"]["add_prefix_space"] = true; },
         "add_prefix_space");
    edit("not byte-level", [](ojson &j) { j["pre_tokenizer"] = nullptr; j["decoder"] = nullptr; }, "byte-level");
    edit("normalizer Lowercase", [](ojson &j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer;Lowercase");
    edit("added token without id", [](ojson &j) { j["added_tokens"][0].erase("id"); }, "added_tokens[0]");
    edit("model type a number", [](ojson &j) { j["model"]["type"] = 3; }, "tokenizer;type");
    edit("pre_tokenizer a string", [](ojson &j) { j["pre_tokenizer"] = "ByteLevel"; }, "tokenizer;type");
    edit("add_prefix_space a string", [](ojson &j) { j["pre_tokenizer"]["add_prefix_space"] = "no"; },
         "tokenizer;type");
    edit("added_tokens special a string", [](ojson &j) { j["added_tokens"][0]["special"] = "yes"; }, "tokenizer;type");
    edit("added token content a number", [](ojson &j) { j["added_tokens"][0]["content"] = 5; }, "added_tokens[0]");
    return c;
}

// config.json problems: a faithful HF copy with config.json replaced or edited.
std::vector<DirCase> hf_config_cases()
{
    std::vector<DirCase> c;
    const int C = kConfig, FC = kFormat | kConfig;
    auto raw = [&c](std::string name, std::string text, int kinds, std::string words) {
        c.push_back({std::move(name), [text] {
                         const std::string d = fresh_hf_dir(); write_file(d + "/config.json", text); return d;
                     }, kinds, std::move(words)});
    };
    auto edit = [&c](std::string name, std::function<void(ojson &)> f, int kinds, std::string words) {
        c.push_back({std::move(name), [f] {
                         const std::string d = fresh_hf_dir(); ojson cfg = g.hf_config_json; f(cfg);
                         write_config(d, cfg); return d;
                     }, kinds, std::move(words)});
    };
    raw("not JSON", "{\"hidden_size\": 64, ", C, "JSON");
    raw("binary garbage", random_bytes(300, 11), C, "JSON");
    raw("empty file", "", C, "JSON|empty");
    raw("JSON array", "[64, 172, 5]", C, "object");
    raw("JSON string", "\"llama\"", C, "object");
    raw("JSON null", "null", C, "object");
    raw("nested 100000 [ unterminated", std::string(100000, '['), C, "JSON");
    raw("nested 100000 [] balanced", std::string(100000, '[') + std::string(100000, ']'), C, "JSON;nested;deep");
    raw("nested 100000 {\"a\": ...}", [] {
        std::string s;
        for (int i = 0; i < 100000; ++i) s += "{\"a\":";
        s += "1";
        s += std::string(100000, '}');
        return s;
    }(), C, "JSON;nested;deep");
    // Deep values where the loader reads a field (its error message once printed the value
    // whole, recursing once per level) and where it reads none: 200 KB files.
    for (const char *key : {"hidden_size", "model_type", "rms_norm_eps", "rope_scaling", "unused_field"})
        raw(std::string(key) + " nested 100000 deep", config_with_raw(key, nested_arrays(100000)), C,
            "JSON;nested;deep");
    raw("rope_scaling type nested 100000 deep",
        config_with_raw("rope_scaling", "{\"type\": " + nested_arrays(100000) + ", \"factor\": 2}"), C,
        "JSON;nested;deep");
    // Under the nesting limit, values are described, not copied: the message stays short.
    raw("hidden_size an array 40 deep", config_with_raw("hidden_size", nested_arrays(40)), C,
        "hidden_size;integer;array");
    raw("model_type an object of 100000 keys", config_with_raw("model_type", [] {
            std::string s = "{";
            for (int i = 0; i < 100000; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": [1, 2]";
            return s + "}";
        }()), C, "model_type;object;100000");
    raw("rms_norm_eps a 1 MB string", config_with_raw("rms_norm_eps", "\"" + std::string(1 << 20, 'e') + "\""), C,
        "rms_norm_eps;number;string");
    raw("rope_scaling type an array of 500000", config_with_raw("rope_scaling", [] {
            std::string a = "[0";
            for (int i = 1; i < 500000; ++i) a += ",1";
            return "{\"type\": " + a + "], \"factor\": 2}";
        }()), C, "rope_scaling;string;array of 500000");
    for (const char *key : {"hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                            "intermediate_size"})
        edit(std::string("missing ") + key, [key](ojson &j) { j.erase(key); }, C, key);
    edit("hidden_size null", [](ojson &j) { j["hidden_size"] = nullptr; }, C, "hidden_size");
    for (const char *key : {"hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                            "num_key_value_heads", "intermediate_size", "max_position_embeddings"}) {
        edit(std::string(key) + " 0", [key](ojson &j) { j[key] = 0; }, C, key);
        edit(std::string(key) + " -1", [key](ojson &j) { j[key] = -1; }, C, key);
    }
    edit("hidden_size a string", [](ojson &j) { j["hidden_size"] = "64"; }, C, "hidden_size");
    edit("hidden_size 64.5", [](ojson &j) { j["hidden_size"] = 64.5; }, C, "hidden_size");
    edit("hidden_size true", [](ojson &j) { j["hidden_size"] = true; }, C, "hidden_size");
    edit("hidden_size an object", [](ojson &j) { j["hidden_size"] = ojson{{"v", 64}}; }, C, "hidden_size");
    edit("hidden_size 2^40", [](ojson &j) { j["hidden_size"] = int64_t(1) << 40; }, C, "hidden_size");
    // The message must show the value the file holds, not its wrap-around to int64 (-1).
    edit("hidden_size 2^64-1", [](ojson &j) { j["hidden_size"] = kMax64; }, C, "hidden_size;18446744073709551615");
    edit("num_hidden_layers a string", [](ojson &j) { j["num_hidden_layers"] = "five"; }, C, "num_hidden_layers");
    edit("vocab_size 2^24+1", [](ojson &j) { j["vocab_size"] = (1 << 24) + 1; }, C, "vocab");
    edit("num_key_value_heads 3 does not divide 8", [](ojson &j) { j["num_key_value_heads"] = 3; }, C,
         "multiple|key/value");
    edit("num_key_value_heads 16 > 8 heads", [](ojson &j) { j["num_key_value_heads"] = 16; }, C, "key/value");
    edit("num_attention_heads 7 does not divide 64", [](ojson &j) { j["num_attention_heads"] = 7; j["num_key_value_heads"] = 7; },
         C, "divisible");
    edit("num_attention_heads 128 > width", [](ojson &j) { j["num_attention_heads"] = 128; j["num_key_value_heads"] = 128; },
         C, "head");
    // A head size other than width / heads is allowed (Mistral Nemo); the projections must fit it.
    edit("head_dim 16 inconsistent", [](ojson &j) { j["head_dim"] = 16; }, FC, "q_proj");
    edit("head_dim 0", [](ojson &j) { j["head_dim"] = 0; }, C, "head_dim");
    edit("rope_scaling type foo", [](ojson &j) { j["rope_scaling"] = {{"type", "foo"}, {"factor", 4.0}}; }, C,
         "rope_scaling;foo");
    edit("rope_scaling rope_type longrope", [](ojson &j) { j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}}; },
         C, "rope_scaling;longrope");
    edit("rope_scaling linear without factor", [](ojson &j) { j["rope_scaling"] = {{"type", "linear"}}; }, C, "factor");
    edit("rope_scaling dynamic factor a string", [](ojson &j) { j["rope_scaling"] = {{"type", "dynamic"}, {"factor", "2"}}; },
         C, "factor");
    edit("rope_scaling factor 0.5", [](ojson &j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}}; }, C,
         "factor|rope_scaling");
    edit("rope_scaling factor -2", [](ojson &j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", -2.0}}; }, C,
         "factor|rope_scaling");
    edit("rope_scaling factor 1e39", [](ojson &j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 1e39}}; }, C,
         "factor|rope_scaling");
    edit("rope_scaling without type", [](ojson &j) { j["rope_scaling"] = {{"factor", 2.0}}; }, C, "rope_scaling");
    edit("rope_scaling a string", [](ojson &j) { j["rope_scaling"] = "linear"; }, C, "rope_scaling");
    edit("rope_scaling type a number", [](ojson &j) { j["rope_scaling"] = {{"type", 1}, {"factor", 2.0}}; }, C,
         "rope_scaling");
    edit("model_type gpt2", [](ojson &j) { j["model_type"] = "gpt2"; }, C, "gpt2");
    edit("model_type a number", [](ojson &j) { j["model_type"] = 42; }, C, "model_type");
    edit("rms_norm_eps a string", [](ojson &j) { j["rms_norm_eps"] = "small"; }, C, "rms_norm_eps");
    edit("rms_norm_eps -1", [](ojson &j) { j["rms_norm_eps"] = -1.0; }, C, "epsilon|rms");
    edit("rms_norm_eps 0", [](ojson &j) { j["rms_norm_eps"] = 0.0; }, C, "epsilon|rms");
    edit("rope_theta 0.5", [](ojson &j) { j["rope_theta"] = 0.5; }, C, "rope");
    edit("rope_theta an array", [](ojson &j) { j["rope_theta"] = ojson::array({1, 2}); }, C, "rope_theta");
    edit("tie_word_embeddings a string", [](ojson &j) { j["tie_word_embeddings"] = "yes"; }, C,
         "tie_word_embeddings");
    edit("tie_word_embeddings false, no lm_head", [](ojson &j) { j["tie_word_embeddings"] = false; },
         kFormat | kConfig, "lm_head");
    edit("vocab_size 256 (tensors hold 512)", [](ojson &j) { j["vocab_size"] = 256; }, kFormat | kConfig,
         "embed_tokens|vocab|tokens");
    edit("num_hidden_layers 6 (one more than tensors)", [](ojson &j) { j["num_hidden_layers"] = 6; }, kFormat,
         "missing;model.layers.5.");
    c.push_back({"config.json is a directory", [] {
                     const std::string d = fresh_hf_dir();
                     fs::remove(d + "/config.json");
                     fs::create_directory(d + "/config.json");
                     return d;
                 }, kIo | kConfig | kFormat, "config.json;directory|not a regular file|cannot read"});
    c.push_back({"no config.json", [] {
                     const std::string d = fresh_hf_dir(); fs::remove(d + "/config.json"); return d;
                 }, kIo | kFormat | kConfig, "config.json"});
    return c;
}

// Weights and tokenizer problems in an HF directory.
std::vector<DirCase> hf_weight_cases()
{
    std::vector<DirCase> c;
    const int F = kFormat;
    // model.safetensors replaced by the given bytes.
    auto st = [&c](std::string name, std::function<std::string()> bytes, int kinds, std::string words) {
        c.push_back({std::move(name), [bytes] {
                         const std::string d = fresh_hf_dir(); write_file(d + "/model.safetensors", bytes()); return d;
                     }, kinds, std::move(words)});
    };
    // The real model.safetensors with its header edited.
    auto edit = [&c](std::string name, std::function<void(Safetensors &)> f, int kinds, std::string words) {
        c.push_back({std::move(name), [f] {
                         const std::string d = fresh_hf_dir(); Safetensors s = g.hf_safetensors; f(s);
                         write_file(d + "/model.safetensors", s.bytes()); return d;
                     }, kinds, std::move(words)});
    };
    const std::string one_f32 = R"("x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
    st("safetensors 0 bytes", [] { return std::string(); }, F, "safetensors|small|bytes");
    st("safetensors 7 bytes", [] { return std::string("\1\0\0\0\0\0\0", 7); }, F, "safetensors|small|bytes");
    st("safetensors 8 bytes, header length 0", [] { return le64(0); }, F, "JSON|header");
    st("header length = file size", [] { return le64(24) + "{}" + std::string(14, ' '); }, F, "header length");
    st("header length 2^63", [] { return le64(kP63) + "{}"; }, F, "header length");
    st("header length 2^64-1", [] { return le64(kMax64) + "{}"; }, F, "header length");
    st("header length one past end", [] { return st_raw("{}").substr(0, 9); }, F, "header length");
    st("header not JSON", [] { return st_raw("{\"x\": {\"dtype\": "); }, F, "JSON");
    st("header binary garbage", [] { return st_raw(random_bytes(64, 5)); }, F, "JSON");
    st("header a JSON array", [] { return st_raw("[1, 2, 3]"); }, F, "object");
    st("header nested 100000 deep", [] { return st_raw(std::string(100000, '[') + std::string(100000, ']')); }, F,
       "JSON;nested;deep");
    st("header __metadata__ nested 100000 deep", [] { return st_raw("{\"__metadata__\": " + nested_arrays(100000) + "}"); },
       F, "JSON;nested;deep");
    st("entry not an object", [] { return st_raw(R"({"x": 5})"); }, F, "x");
    st("entry without data_offsets", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [2]}})", std::string(8, '\0')); },
       F, "data_offsets");
    st("dtype not a string", [] { return st_raw(R"({"x": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}})", std::string(8, '\0')); },
       F, "dtype");
    st("unknown dtype F99", [] { return st_raw(R"({"x": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}})", std::string(8, '\0')); },
       F, "F99");
    st("shape with negative dimension", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 8]}})", std::string(8, '\0')); },
       F, "shape");
    st("shape with float dimension", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", std::string(8, '\0')); },
       F, "shape");
    st("shape not an array", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", std::string(8, '\0')); },
       F, "shape");
    st("shape of 9 dimensions", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,2], "data_offsets": [0, 8]}})", std::string(8, '\0')); },
       F, "shape");
    st("shape overflows [2^32, 2^32, 4]", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 8]}})", std::string(8, '\0')); },
       F, "overflow");
    st("shape overflows with dtype [2^62, 2] F32", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [4611686018427387904, 2], "data_offsets": [0, 8]}})", std::string(8, '\0')); },
       F, "overflow");
    st("data_offsets end past data", [one_f32] { return st_raw("{" + one_f32 + "}", std::string(4, '\0')); }, F,
       "data_offsets|outside");
    st("data_offsets begin > end", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", std::string(8, '\0')); },
       F, "data_offsets|outside");
    st("data_offsets size != dtype x shape", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}})", std::string(12, '\0')); },
       F, "bytes");
    st("data_offsets negative", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", std::string(8, '\0')); },
       F, "data_offsets");
    st("data_offsets three numbers", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 16]}})", std::string(16, '\0')); },
       F, "data_offsets");
    st("data_offsets end 2^64-1", [] { return st_raw(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 18446744073709551615]}})", std::string(8, '\0')); },
       F, "data_offsets|outside");
    st("overlapping tensors", [] {
        return st_raw(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "y": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                      std::string(24, '\0'));
    }, F, "overlap");
    edit("real file: embed_tokens end past data", [](Safetensors &s) {
        s.header["model.embed_tokens.weight"]["data_offsets"][1] = s.data.size() + 4;
    }, F, "model.embed_tokens.weight");
    edit("real file: data section cut short", [](Safetensors &s) { s.data.resize(s.data.size() - 100); }, F,
         "data_offsets|outside");
    edit("real file: two tensors overlap", [](Safetensors &s) {
        s.header["model.layers.0.input_layernorm.weight"]["data_offsets"] = ojson::array({0, 256});
    }, F, "overlap");
    edit("real file: k_proj wrong shape", [](Safetensors &s) {
        s.header["model.layers.0.self_attn.k_proj.weight"]["shape"] = ojson::array({64, 32});
    }, F, "shape;model.layers.0.self_attn.k_proj.weight");
    edit("real file: missing up_proj of layer 2", [](Safetensors &s) {
        s.header.erase("model.layers.2.mlp.up_proj.weight");
    }, F, "missing;model.layers.2.mlp.up_proj.weight");
    edit("real file: unknown dtype Q9", [](Safetensors &s) {
        s.header["model.norm.weight"]["dtype"] = "Q9";
    }, F, "Q9");
    edit("real file: I32 dtype for a norm", [](Safetensors &s) {
        s.header["model.norm.weight"]["dtype"] = "I32";
    }, F, "cannot compute;model.norm.weight;I32");
    edit("real file: F64 dtype for a norm", [](Safetensors &s) {
        s.header["model.norm.weight"]["dtype"] = "F64"; s.header["model.norm.weight"]["shape"] = ojson::array({32});
    }, F, "model.norm.weight;F64");
    c.push_back({"missing model.safetensors", [] {
                     const std::string d = fresh_hf_dir(); fs::remove(d + "/model.safetensors"); return d;
                 }, kFormat | kIo, "model.safetensors"});
    c.push_back({"model.safetensors is a directory", [] {
                     const std::string d = fresh_hf_dir(); fs::remove(d + "/model.safetensors");
                     fs::create_directory(d + "/model.safetensors"); return d;
                 }, kFormat | kIo, "model.safetensors"});
    // Sharded checkpoints.
    auto index = [&c](std::string name, std::string index_text, int kinds, std::string words) {
        c.push_back({std::move(name), [index_text] {
                         const std::string d = fresh_hf_dir();
                         fs::rename(d + "/model.safetensors", d + "/model-00001-of-00001.safetensors");
                         write_file(d + "/model.safetensors.index.json", index_text);
                         // A readable model.safetensors one level up: "../" must not reach it.
                         write_file(fs::path(d).parent_path().string() + "/model.safetensors", g.hf_st);
                         return d;
                     }, kinds, std::move(words)});
    };
    auto weight_map = [](const std::string &shard) {
        ojson j;
        j["metadata"] = {{"total_size", 1044984}};
        j["weight_map"] = ojson::object();
        for (auto it = g.hf_safetensors.header.begin(); it != g.hf_safetensors.header.end(); ++it)
            if (it.key() != "__metadata__")
                j["weight_map"][it.key()] = it.key() == "model.norm.weight" ? shard : "model-00001-of-00001.safetensors";
        return j.dump(1);
    };
    index("index names a missing shard", weight_map("model-00002-of-00002.safetensors"), kIo | kFormat,
          "model-00002-of-00002.safetensors");
    index("index shard ../model.safetensors", weight_map("../model.safetensors"), kConfig | kFormat,
          "../model.safetensors");
    index("index shard ..", weight_map(".."), kConfig | kFormat | kIo, "..");
    index("index shard absolute /etc/passwd", weight_map("/etc/passwd"), kConfig | kFormat, "/etc/passwd");
    index("index shard empty name", weight_map(""), kConfig | kFormat | kIo, "index|safetensors|shard|directory|regular");
    index("index shard .", weight_map("."), kConfig | kFormat | kIo, "index|safetensors|shard|directory|regular");
    index("index shard is tokenizer.model", weight_map("tokenizer.model"), kFormat, "tokenizer.model");
    index("index not JSON", "{\"weight_map\": ", kConfig, "JSON");
    index("index without weight_map", "{\"metadata\": {}}", kConfig, "weight_map");
    index("index weight_map an array", "{\"weight_map\": [\"a\"]}", kConfig, "weight_map");
    index("index weight_map value a number", "{\"weight_map\": {\"model.norm.weight\": 7}}", kConfig,
          "model.norm.weight");
    index("index weight_map empty", "{\"weight_map\": {}}", kFormat | kConfig, "missing|weight");
    index("index nested 100000 deep", "{\"metadata\": " + nested_arrays(100000) + ", \"weight_map\": {}}", kConfig,
          "index;JSON;nested;deep");
    c.push_back({"tensor in two shards", [] {
                     const std::string d = fresh_hf_dir();
                     write_file(d + "/model-a.safetensors", g.hf_st);
                     write_file(d + "/model-b.safetensors", g.hf_st);
                     ojson j;
                     j["weight_map"] = {{"model.norm.weight", "model-a.safetensors"},
                                        {"model.embed_tokens.weight", "model-b.safetensors"}};
                     write_file(d + "/model.safetensors.index.json", j.dump());
                     return d;
                 }, kFormat, "two shards|appears"});
    // Tokenizer.
    auto tok = [&c](std::string name, std::function<void(const std::string &)> f, int kinds, std::string words) {
        c.push_back({std::move(name), [f] { const std::string d = fresh_hf_dir(); f(d); return d; }, kinds,
                     std::move(words)});
    };
    tok("missing tokenizer.model", [](const std::string &d) { fs::remove(d + "/tokenizer.model"); }, kFormat | kIo,
        "tokenizer.model");
    tok("tokenizer.model empty", [](const std::string &d) { write_file(d + "/tokenizer.model", ""); }, kFormat,
        "tokenizer.model");
    tok("tokenizer.model random bytes", [](const std::string &d) {
        write_file(d + "/tokenizer.model", random_bytes(7480, 3));
    }, kFormat, "tokenizer.model");
    tok("tokenizer.model truncated", [](const std::string &d) {
        write_file(d + "/tokenizer.model", g.hf_tok.substr(0, g.hf_tok.size() / 2));
    }, kFormat, "tokenizer.model");
    tok("tokenizer.model is a directory", [](const std::string &d) {
        fs::remove(d + "/tokenizer.model"); fs::create_directory(d + "/tokenizer.model");
    }, kFormat | kIo, "tokenizer.model");
    tok("tokenizer.model of 32000 tokens for vocab 512", [](const std::string &d) {
        write_file(d + "/tokenizer.model", read_file(kLlama2SpModel));
    }, kFormat | kConfig, "tokenizer.model;32000|512");
    tok("tokenizer_config.json nested 100000 deep", [](const std::string &d) {
        write_file(d + "/tokenizer_config.json", "{\"added_tokens_decoder\": " + nested_arrays(100000) + "}");
    }, kConfig, "tokenizer_config.json;JSON;nested;deep");
    tok("tokenizer_config.json add_bos_token nested 100000 deep", [](const std::string &d) {
        write_file(d + "/tokenizer_config.json", "{\"add_bos_token\": " + nested_arrays(100000) + "}");
    }, kConfig, "tokenizer_config.json;JSON;nested;deep");
    tok("tokenizer_config.json is /dev/zero", [](const std::string &d) {
        fs::create_symlink("/dev/zero", d + "/tokenizer_config.json");
    }, kIo | kConfig, "tokenizer_config.json;regular");
    return c;
}

// Paths that are not model files at all.
std::vector<DirCase> path_cases()
{
    std::vector<DirCase> c;
    c.push_back({"empty path", [] { return std::string(); }, kIo, "path"});
    c.push_back({"nonexistent path", [] { return tmp_path("does/not/exist.gguf"); }, kIo, "no such|exist"});
    c.push_back({"directory without config.json", [] { return fresh_dir("emptydir"); }, kFormat | kIo, "config.json"});
    c.push_back({"/dev/null", [] { return std::string("/dev/null"); }, kIo | kFormat, "regular|empty|magic"});
    c.push_back({"/dev/zero", [] { return std::string("/dev/zero"); }, kIo | kFormat, "regular|magic"});
    c.push_back({"/proc/self/status", [] { return std::string("/proc/self/status"); }, kIo | kFormat, "magic|regular|size"});
    c.push_back({"empty file", [] { const std::string p = tmp_path("empty-" + std::to_string(++g.counter) + ".gguf");
                                   write_file(p, ""); return p; }, kFormat | kIo, "magic|empty"});
    c.push_back({"dangling symlink", [] {
                     const std::string p = tmp_path("dangling-" + std::to_string(++g.counter));
                     fs::create_symlink(tmp_path("nowhere.gguf"), p); return p;
                 }, kIo, "no such|exist"});
    c.push_back({"symlink loop", [] {
                     const std::string p = tmp_path("loop-" + std::to_string(++g.counter));
                     fs::create_symlink(p, p); return p;
                 }, kIo, "loop|too many levels"});
    c.push_back({"a safetensors file loaded as a model", [] { return kHfDir + "/model.safetensors"; }, kFormat,
                 "magic|gguf"});
    c.push_back({"a sentencepiece model loaded as a model", [] { return kHfDir + "/tokenizer.model"; }, kFormat,
                 "magic|gguf"});
    c.push_back({"config.json loaded as a model", [] { return kHfDir + "/config.json"; }, kFormat, "magic|gguf"});
    c.push_back({"path with trailing slash to a file", [] { return kBundledGguf + "/"; }, kIo | kFormat,
                 "directory|no such|not a|cannot"});
    return c;
}

// The region of the bundled GGUF header a byte offset lies in (for row names).
struct Region {
    uint64_t start;
    std::string name;
};

std::vector<Region> gguf_regions(const GgufSpec &s, uint64_t *header_end)
{
    std::vector<Region> r = {{0, "magic"}, {4, "version"}, {8, "tensor count"}, {16, "metadata count"}};
    uint64_t pos = 24;
    for (const auto &[k, v] : s.kvs) {
        r.push_back({pos, "kv " + k});
        std::string payload;
        encode_payload(payload, v);
        pos += 8 + k.size() + 4 + payload.size();
    }
    for (const TensorSpec &t : s.tensors) {
        r.push_back({pos, "info " + t.name});
        pos += 8 + t.name.size() + 4 + 8 * t.shape.size() + 4 + 8;
    }
    *header_end = pos;
    r.push_back({pos, "padding"});
    r.push_back({(pos + 31) / 32 * 32, "data"});
    return r;
}

std::string region_of(const std::vector<Region> &regions, uint64_t off)
{
    std::string name;
    for (const Region &r : regions)
        if (r.start <= off)
            name = r.name;
    return name;
}

int open_descriptors()
{
    std::error_code ec;
    int n = 0;
    for (auto it = fs::directory_iterator("/proc/self/fd", ec); !ec && it != fs::directory_iterator(); it.increment(ec))
        ++n;
    return ec ? -1 : n;
}

bool under_asan()
{
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

// Runs `fn` on a thread; if it has not finished after `seconds`, calls `unblock` (repeatedly)
// until it does. Returns whether it finished on its own in time.
bool finishes_within(const std::function<void()> &fn, double seconds, const std::function<void()> &unblock)
{
    std::atomic<bool> done{false};
    std::thread t([&] { fn(); done = true; });
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const bool in_time = done;
    while (!done) {
        unblock();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    t.join();
    return in_time;
}

} // namespace

// =============================================================================================

class TestBadInput : public QObject {
    Q_OBJECT

private:
    std::unique_ptr<QTemporaryDir> m_tmp;
    std::unique_ptr<longscope::Model> m_model;
    std::vector<FileCase> m_header_cases, m_tensor_cases, m_model_cases;
    std::vector<TokenizerCase> m_tokenizer_cases;
    std::vector<DirCase> m_config_cases, m_weight_cases, m_path_cases;
    std::vector<Region> m_regions;
    int m_fuzz_loaded = 0, m_fuzz_rejected = 0;
    int m_fds_at_start = -1;

    std::vector<int32_t> greedy(const longscope::Model &model, int n)
    {
        longscope::Session s(model, {64, 1});
        longscope::GenerateRequest r;
        r.prompt = kPrompt;
        r.max_new_tokens = n;
        r.sampling.temperature = 0;
        r.stop_at_eos = false;
        return longscope::generate(s, r).tokens;
    }

    void check_file_case(const FileCase &fc);
    void check_tokenizer_case(const TokenizerCase &tc);
    void check_dir_case(const DirCase &dc);
    void load_mutated(const std::string &bytes, const std::string &what);

private slots:
    void initTestCase();
    void cleanupTestCase();

    // Proves the tools: the writer's re-emission of the bundled model is faithful, the
    // small hostile-file base is valid, the HF copy loads.
    void controls();

    void ggufTruncated_data();
    void ggufTruncated();
    void ggufHeader_data();
    void ggufHeader();
    void ggufTensorInfo_data();
    void ggufTensorInfo();
    void ggufModel_data();
    void ggufModel();

    void hfConfig_data();
    void hfConfig();
    void hfWeights_data();
    void hfWeights();
    // Separate functions: under -fsanitize=undefined (no recover) these abort the process
    // when the engine has the bug they look for, so a sanitizer run can skip them by name.
    void hfHeadDimOverflow();
    void unalignedWeights_data();
    void unalignedWeights();

    void bpeVocabulary_data();
    void bpeVocabulary();
    void hfTokenizerJson_data();
    void hfTokenizerJson();

    void bpeFuzzedVocabularies();

    void badPaths_data();
    void badPaths();
    void specialFiles_data();
    void specialFiles();

    void runtimeEmptyPrompt();
    void runtimePromptTooLong();
    void runtimeEvalOverflowKeepsContext();
    void runtimeEvalBadIds_data();
    void runtimeEvalBadIds();
    void runtimeSessionOptions_data();
    void runtimeSessionOptions();
    void runtimeSampling_data();
    void runtimeSampling();
    void runtimeKvCacheTooLarge_data();
    void runtimeKvCacheTooLarge();
    void runtimeDefaultContextIsCapped();

    void randomBytes_data();
    void randomBytes();
    void fuzzMutations_data();
    void fuzzMutations();
    void fuzzValues_data();
    void fuzzValues();

    // Last: every failed load above closed what it opened.
    void noLeakedDescriptors();
};

void TestBadInput::initTestCase()
{
    // Outside sanitizers, an absurd allocation should fail fast as std::bad_alloc (which the
    // checks then report as a foreign exception) rather than swap the machine to death.
    if (!under_asan()) {
        struct rlimit lim {};
        lim.rlim_cur = lim.rlim_max = rlim_t(16) << 30;
        struct rlimit old {};
        if (getrlimit(RLIMIT_AS, &old) == 0 && (old.rlim_cur == RLIM_INFINITY || old.rlim_cur > lim.rlim_cur)) {
            lim.rlim_max = old.rlim_max;
            setrlimit(RLIMIT_AS, &lim);
        }
    }
    m_tmp = std::make_unique<QTemporaryDir>();
    QVERIFY(m_tmp->isValid());
    g.tmp = m_tmp->path().toStdString();

    g.gguf_bytes = read_file(kBundledGguf);
    {
        auto gf = longscope::GgufFile::open(kBundledGguf);
        g.gguf = spec_of(*gf);
    }
    g.hf_config = read_file(kHfDir + "/config.json");
    g.hf_st = read_file(kHfDir + "/model.safetensors");
    g.hf_tok = read_file(kHfDir + "/tokenizer.model");
    g.hf_config_json = ojson::parse(g.hf_config);
    g.hf_safetensors = parse_safetensors(g.hf_st);

    uint64_t header_end = 0;
    m_regions = gguf_regions(g.gguf, &header_end);

    m_model = longscope::Model::load(kBundledGguf);
    QVERIFY(m_model);
    QCOMPARE(m_model->hparams().n_vocab, 512);
    m_fds_at_start = open_descriptors();
}

void TestBadInput::cleanupTestCase()
{
    if (m_fuzz_loaded + m_fuzz_rejected > 0)
        qInfo("fuzz: %d mutated files loaded and ran, %d rejected with a longscope::Error", m_fuzz_loaded,
              m_fuzz_rejected);
}

void TestBadInput::controls()
{
    // 1. The bundled GGUF re-emitted unchanged through GgufSpec + GgufWriter.
    const std::string again = g.gguf.bytes();
    if (again != g.gguf_bytes)
        qInfo("re-emitted GGUF differs from the original in bytes (%zu vs %zu); comparing behaviour",
              again.size(), g.gguf_bytes.size());
    else
        qInfo("re-emitted GGUF is byte-identical to the bundled file");
    const std::string path = tmp_path("faithful.gguf");
    write_file(path, again);
    std::unique_ptr<longscope::Model> copy = longscope::Model::load(path);
    const std::vector<int32_t> want = greedy(*m_model, 20);
    QCOMPARE(want.size(), size_t(20));
    QCOMPARE(greedy(*copy, 20), want);
    QCOMPARE(copy->tokenizer().encode("Once upon a time", true), m_model->tokenizer().encode("Once upon a time", true));

    // 2. The header layout computed from the spec (used to name truncation rows) matches the
    // header the writer emits.
    uint64_t header_end = 0;
    (void)gguf_regions(g.gguf, &header_end);
    QCOMPARE(header_end, g.gguf.header_size());

    // 3. The small base of the hostile GGUF files is valid, in v3 and v2, and nesting at the
    // limit is accepted.
    for (uint32_t v : {2u, 3u}) {
        const std::string p = tmp_path("small-v" + std::to_string(v) + ".gguf");
        write_file(p, small_file(v));
        auto gf = longscope::GgufFile::open(p);
        QCOMPARE(gf->tensors().size(), size_t(2));
        QCOMPARE(gf->get_int("llama.block_count").value_or(-1), int64_t(1));
    }
    {
        GgufWriter w = small_writer();
        w.add_raw("deep", uint32_t(GgufType::Array), nested_array_payload(4));
        add_small_tensors(w);
        const std::string p = tmp_path("nested4.gguf");
        write_file(p, w.bytes());
        QVERIFY(longscope::GgufFile::open(p)->find("deep") != nullptr);
    }
    {
        const std::string p = tmp_path("one-tensor.gguf");
        write_file(p, one_tensor_file({8, 2}, 0, 64));
        QCOMPARE(longscope::GgufFile::open(p)->find_tensor("hostile.weight")->nbytes, uint64_t(64));
        write_file(p, one_tensor_file({64, 2}, 8, 2 * 2 * 34));
        QCOMPARE(longscope::GgufFile::open(p)->find_tensor("hostile.weight")->nbytes, uint64_t(136));
    }

    // 4. The HF copy and its sharded variant load and agree with the original directory.
    std::unique_ptr<longscope::Model> hf = longscope::Model::load(kHfDir);
    const std::vector<int32_t> hf_want = greedy(*hf, 20);
    QCOMPARE(greedy(*longscope::Model::load(fresh_hf_dir()), 20), hf_want);
    {
        const std::string d = fresh_hf_dir();
        fs::rename(d + "/model.safetensors", d + "/model-00001-of-00001.safetensors");
        ojson j;
        j["weight_map"] = ojson::object();
        for (auto it = g.hf_safetensors.header.begin(); it != g.hf_safetensors.header.end(); ++it)
            if (it.key() != "__metadata__")
                j["weight_map"][it.key()] = "model-00001-of-00001.safetensors";
        write_file(d + "/model.safetensors.index.json", j.dump());
        QCOMPARE(greedy(*longscope::Model::load(d), 20), hf_want);
    }
    {
        const std::string d = fresh_hf_dir();
        Safetensors s = g.hf_safetensors;
        write_file(d + "/model.safetensors", s.bytes()); // re-serialised header
        QCOMPARE(greedy(*longscope::Model::load(d), 20), hf_want);
    }
}

void TestBadInput::check_file_case(const FileCase &fc)
{
    const std::string path = tmp_path("case-" + std::to_string(++g.counter) + ".gguf");
    write_file(path, fc.bytes());
    if (fc.open == OpenExpect::Rejects) {
        CHECK_ERROR([&] { longscope::GgufFile::open(path); }, fc.kinds, fc.words, path);
    } else {
        try {
            longscope::GgufFile::open(path);
        } catch (const std::exception &e) {
            QFAIL(qPrintable(QStringLiteral("GgufFile::open rejects a structurally valid file: ") + e.what()));
        }
    }
    CHECK_ERROR([&] { longscope::Model::load(path); }, fc.kinds, fc.words, path);
    std::error_code ec;
    fs::remove(path, ec);
}

void TestBadInput::check_dir_case(const DirCase &dc)
{
    const std::string path = dc.build();
    CHECK_ERROR([&] { longscope::Model::load(path); }, dc.kinds, dc.words, path);
}

// ---------------------------------------------------------------------------------------------
// GGUF

void TestBadInput::ggufTruncated_data()
{
    QTest::addColumn<qulonglong>("length");
    uint64_t header_end = 0;
    const std::vector<Region> regions = gguf_regions(g.gguf, &header_end);
    const uint64_t size = g.gguf_bytes.size();
    const uint64_t data_start = (header_end + 31) / 32 * 32;
    std::set<uint64_t> cuts;
    for (uint64_t i = 0; i < 2048; ++i)
        cuts.insert(i);
    for (int i = 0; i < 200; ++i)
        cuts.insert(2048 + (header_end - 2048) * uint64_t(i) / 200);
    for (const Region &r : regions)
        for (uint64_t d : {r.start - 1, r.start, r.start + 1})
            if (d < size)
                cuts.insert(d);
    cuts.insert(header_end);
    cuts.insert(data_start);
    for (int i = 0; i < 40; ++i)
        cuts.insert(data_start + (size - data_start) * uint64_t(i) / 40);
    cuts.insert(size - 1);
    for (uint64_t n : cuts)
        QTest::addRow("%07llu bytes (cut in %s)", static_cast<unsigned long long>(n), region_of(regions, n).c_str())
            << qulonglong(n);
}

void TestBadInput::ggufTruncated()
{
    QFETCH(qulonglong, length);
    const std::string path = tmp_path("truncated.gguf");
    write_file(path, std::string_view(g.gguf_bytes).substr(0, length));
    // Reader failures carry the file size; the data-section checks say "past end"/"ends".
    CHECK_ERROR([&] { longscope::Model::load(path); }, kFormat,
                length < 4 ? "magic" : "ends|past end|file size|truncat", path);
}

void TestBadInput::ggufHeader_data()
{
    m_header_cases = gguf_header_cases();
    add_rows(m_header_cases);
}

void TestBadInput::ggufHeader()
{
    QFETCH(int, index);
    check_file_case(m_header_cases[size_t(index)]);
}

void TestBadInput::ggufTensorInfo_data()
{
    m_tensor_cases = gguf_tensor_cases();
    add_rows(m_tensor_cases);
}

void TestBadInput::ggufTensorInfo()
{
    QFETCH(int, index);
    check_file_case(m_tensor_cases[size_t(index)]);
}

void TestBadInput::ggufModel_data()
{
    m_model_cases = gguf_model_cases();
    add_rows(m_model_cases);
}

void TestBadInput::ggufModel()
{
    QFETCH(int, index);
    check_file_case(m_model_cases[size_t(index)]);
}

// ---------------------------------------------------------------------------------------------
// HF directories and paths

void TestBadInput::hfConfig_data()
{
    m_config_cases = hf_config_cases();
    add_rows(m_config_cases);
}

void TestBadInput::hfConfig()
{
    QFETCH(int, index);
    check_dir_case(m_config_cases[size_t(index)]);
}

void TestBadInput::hfWeights_data()
{
    m_weight_cases = hf_weight_cases();
    add_rows(m_weight_cases);
}

void TestBadInput::hfWeights()
{
    QFETCH(int, index);
    check_dir_case(m_weight_cases[size_t(index)]);
}

// head_dim x num_attention_heads is computed in int: 8 * (2^29 + 8) = 2^32 + 64, which wraps
// to hidden_size (64). The bogus head_dim must be rejected, not accepted by overflow (signed
// overflow is undefined behaviour besides).
void TestBadInput::hfHeadDimOverflow()
{
    const std::string d = fresh_hf_dir();
    ojson cfg = g.hf_config_json;
    cfg["head_dim"] = (1 << 29) + 8;
    write_config(d, cfg);
    CHECK_ERROR([&] { longscope::Model::load(d); }, kConfig, "head_dim", d);
}

// Weights whose data is not 4-byte aligned in the file: legal in safetensors (the spec does
// not require alignment; the header may be padded but need not be) and in GGUF with
// general.alignment 1 or 2. The engine must either compute correctly (same greedy tokens as
// the aligned file) or reject the file with a FormatError; it must not read floats through
// misaligned pointers (undefined behaviour; UBSan aborts).
void TestBadInput::unalignedWeights_data()
{
    QTest::addColumn<QString>("format");
    QTest::addColumn<int>("misalign");
    QTest::newRow("safetensors data at offset 8k+1") << QStringLiteral("hf") << 1;
    QTest::newRow("safetensors data at offset 8k+2") << QStringLiteral("hf") << 2;
    QTest::newRow("safetensors data at offset 8k+4 (F32 aligned)") << QStringLiteral("hf") << 4;
    QTest::newRow("GGUF general.alignment 1, data at an odd offset") << QStringLiteral("gguf") << 1;
    QTest::newRow("GGUF general.alignment 2, data at 4k+2") << QStringLiteral("gguf") << 2;
}

void TestBadInput::unalignedWeights()
{
    QFETCH(QString, format);
    QFETCH(int, misalign);
    std::string path;
    std::vector<int32_t> want;
    if (format == QLatin1String("hf")) {
        path = fresh_hf_dir();
        write_file(path + "/model.safetensors", g.hf_safetensors.bytes(size_t(misalign)));
        want = greedy(*longscope::Model::load(kHfDir), 20);
    } else {
        GgufSpec spec = g.gguf;
        spec.alignment = uint32_t(misalign);
        // Lengthen general.name until the data section starts at the wanted misalignment.
        std::string name = "stories260K";
        for (int i = 0; i < 8; ++i) {
            spec.set("general.name", v_str(name));
            const uint64_t a = uint64_t(misalign);
            const uint64_t data_start = (spec.header_size() + a - 1) / a * a;
            if (data_start % 4 == a % 4)
                break;
            name.push_back('x');
        }
        path = tmp_path("unaligned-" + std::to_string(++g.counter) + ".gguf");
        write_file(path, spec.bytes());
        auto gf = longscope::GgufFile::open(path);
        const auto *t = gf->find_tensor("token_embd.weight");
        QVERIFY(t != nullptr);
        QCOMPARE(int(reinterpret_cast<uintptr_t>(t->data) % 4), misalign % 4);
        want = greedy(*m_model, 20);
    }
    std::unique_ptr<longscope::Model> m;
    try {
        m = longscope::Model::load(path);
    } catch (const longscope::FormatError &e) {
        const std::string msg = e.what();
        QVERIFY2(msg.find(path) != std::string::npos && !missing_words(msg, "align").size(), msg.c_str());
        return; // rejected cleanly
    }
    QCOMPARE(greedy(*m, 20), want);
}

// ---------------------------------------------------------------------------------------------
// Tokenizers: byte-level BPE metadata and tokenizer.json

void TestBadInput::check_tokenizer_case(const TokenizerCase &tc)
{
    const std::string path = tc.build();
    const std::string why = expect_error([&] { longscope::Tokenizer::load(path); }, tc.kinds, tc.words, path);
    if (!why.empty())
        QFAIL(why.c_str());
    try {
        longscope::Tokenizer::load(path);
    } catch (const longscope::Error &e) {
        QVERIFY2(std::string(e.what()).find('\n') == std::string::npos, e.what()); // one line
    }
}

void TestBadInput::bpeVocabulary_data()
{
    // The untouched bases load and tokenize: the rows below fail for their one change.
    BpeVocabSpec s;
    s.eos = 260;
    const std::string path = tmp_path("bpe-base.gguf");
    write_file(path, s.bytes());
    const auto tok = longscope::Tokenizer::load(path);
    QCOMPARE(tok->encode("hello", false), std::vector<int32_t>({259}));
    QCOMPARE(tok->encode("<|endoftext|>hello", false, true), std::vector<int32_t>({260, 259}));
    QCOMPARE(tok->end_of_generation_ids().size(), size_t(1));
    m_tokenizer_cases = bpe_gguf_cases();
    add_rows(m_tokenizer_cases);
}

void TestBadInput::bpeVocabulary()
{
    QFETCH(int, index);
    check_tokenizer_case(m_tokenizer_cases[size_t(index)]);
}

void TestBadInput::hfTokenizerJson_data()
{
    const auto tok = longscope::Tokenizer::load(hf_tokenizer_dir([](ojson_t &) {}));
    QCOMPARE(tok->encode("<|endoftext|>hello", false, true), std::vector<int32_t>({260, 259}));
    m_tokenizer_cases = hf_tokenizer_json_cases();
    add_rows(m_tokenizer_cases);
}

void TestBadInput::hfTokenizerJson()
{
    QFETCH(int, index);
    check_tokenizer_case(m_tokenizer_cases[size_t(index)]);
}

void TestBadInput::bpeFuzzedVocabularies()
{
    // Random vocabularies and merges (arbitrary bytes, invalid UTF-8, merges of unknown or
    // absent tokens, random types and pre-tokenizers): each load gives a usable tokenizer or
    // a one-line longscope::Error, never a crash; a loaded one encodes and decodes any text.
    std::mt19937 rng(2024);
    const char *pres[] = {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "mpt"};
    auto random_text = [&](size_t max_len) {
        std::string t(rng() % (max_len + 1), '\0');
        for (char &c : t)
            c = rng() % 4 == 0 ? char(rng()) : "ab <|>\n'1"[rng() % 10];
        return t;
    };
    int loaded = 0;
    for (int round = 0; round < 300; ++round) {
        BpeVocabSpec s;
        s.pre = pres[rng() % 8];
        if (rng() % 2)
            for (int k = 0; k < 20; ++k)
                s.tokens.push_back(random_text(6));
        s.types = std::vector<int32_t>(s.tokens.size());
        for (int32_t &t : *s.types)
            t = int32_t(rng() % 7);
        if (rng() % 3 == 0)
            s.types.reset();
        const bool garbage_merges = rng() % 4 == 0;
        for (int k = 0; k < 30; ++k) {
            if (garbage_merges && rng() % 5 == 0)
                s.merges->push_back(random_text(5));
            else
                s.merges->push_back(s.tokens[rng() % s.tokens.size()] + " " + s.tokens[rng() % s.tokens.size()]);
        }
        const std::string path = tmp_path("bpe-fuzz.gguf");
        write_file(path, s.bytes());
        std::unique_ptr<longscope::Tokenizer> tok;
        try {
            tok = longscope::Tokenizer::load(path);
        } catch (const longscope::Error &e) {
            QVERIFY2(std::string(e.what()).find('\n') == std::string::npos, e.what());
            continue;
        }
        ++loaded;
        for (int k = 0; k < 5; ++k) {
            const auto ids = tok->encode(random_text(64), k % 2 == 0, k % 3 == 0);
            for (int32_t id : ids)
                QVERIFY(id >= 0 && id < tok->n_vocab());
            (void)tok->decode(ids);
        }
    }
    QVERIFY(loaded > 100); // the variations mostly load: the encode paths were exercised
}

void TestBadInput::badPaths_data()
{
    m_path_cases = path_cases();
    add_rows(m_path_cases);
}

void TestBadInput::badPaths()
{
    QFETCH(int, index);
    const DirCase &dc = m_path_cases[size_t(index)];
    const std::string path = dc.build();
    // An empty path cannot be named in the message; every other one must be.
    CHECK_ERROR([&] { longscope::Model::load(path); }, dc.kinds, dc.words, path);
}

// A named pipe with no writer: open(2) for reading blocks until someone writes. Loading must
// not hang on it. If it does, the test opens the pipe for writing to release the loader and
// reports the hang.
void TestBadInput::specialFiles_data()
{
    QTest::addColumn<QString>("fifo");   // which file is the FIFO
    QTest::addColumn<bool>("directory"); // load the directory (HF) or the FIFO itself (GGUF)
    QTest::newRow("FIFO as the .gguf file") << QStringLiteral("model.gguf") << false;
    QTest::newRow("FIFO as config.json") << QStringLiteral("config.json") << true;
    QTest::newRow("FIFO as model.safetensors") << QStringLiteral("model.safetensors") << true;
    QTest::newRow("FIFO as tokenizer.model") << QStringLiteral("tokenizer.model") << true;
}

void TestBadInput::specialFiles()
{
    QFETCH(QString, fifo);
    QFETCH(bool, directory);
    const std::string d = directory ? fresh_hf_dir() : fresh_dir("fifo");
    const std::string fifo_path = d + "/" + fifo.toStdString();
    std::error_code ec;
    fs::remove(fifo_path, ec);
    QVERIFY(::mkfifo(fifo_path.c_str(), 0600) == 0);
    const std::string path = directory ? d : fifo_path;
    std::string why;
    const bool in_time = finishes_within(
        [&] { why = expect_error([&] { longscope::Model::load(path); }, 0, "", path); }, 1.5,
        [&] {
            const int fd = ::open(fifo_path.c_str(), O_WRONLY | O_NONBLOCK);
            if (fd >= 0)
                ::close(fd);
        });
    if (!in_time)
        QFAIL(qPrintable(QString::fromStdString("Model::load hangs (blocked > 1.5 s) on a FIFO at " + fifo_path +
                                                "; released by opening it for writing, then: " +
                                                (why.empty() ? std::string("it threw a proper error") : why))));
    if (!why.empty())
        QFAIL(why.c_str());
}

// ---------------------------------------------------------------------------------------------
// Runtime

void TestBadInput::runtimeEmptyPrompt()
{
    longscope::Session s(*m_model, {32, 1});
    longscope::GenerateRequest r;
    r.max_new_tokens = 4;
    CHECK_ERROR([&] { longscope::generate(s, r); }, kInvalid, "empty|prompt", "");
    CHECK_ERROR([&] { s.eval(std::span<const int32_t>()); }, kInvalid, "empty", "");
    // Still usable.
    r.prompt = kPrompt;
    r.sampling.temperature = 0;
    QCOMPARE(longscope::generate(s, r).tokens.size(), size_t(4));
}

void TestBadInput::runtimePromptTooLong()
{
    longscope::Session s(*m_model, {8, 1});
    longscope::GenerateRequest r;
    r.prompt.assign(9, 1);
    r.max_new_tokens = 4;
    r.sampling.temperature = 0;
    CHECK_ERROR([&] { longscope::generate(s, r); }, kOverflow, "context;8", "");
    r.prompt.assign(1000, 300);
    CHECK_ERROR([&] { longscope::generate(s, r); }, kOverflow, "context;1000", "");

    // The session still works afterwards, and agrees with a fresh one: 5 prompt tokens fill
    // 5 of 8 positions, 3 more generated tokens are evaluated, the 4th is sampled from the
    // last logits and then the context is full.
    r.prompt = kPrompt;
    r.max_new_tokens = 10;
    const longscope::GenerateResult after = longscope::generate(s, r);
    QCOMPARE(after.tokens.size(), size_t(4));
    QCOMPARE(after.stop, longscope::StopReason::ContextFull);
    const std::vector<int32_t> fresh = greedy(*m_model, 4);
    QCOMPARE(after.tokens, fresh);
}

void TestBadInput::runtimeEvalOverflowKeepsContext()
{
    longscope::Session s(*m_model, {8, 1});
    const std::vector<int32_t> six = {1, 403, 407, 261, 378, 432};
    s.eval(six);
    QCOMPARE(s.n_past(), 6);
    const std::vector<int32_t> three = {383, 286, 261};
    CHECK_ERROR([&] { s.eval(three); }, kOverflow, "context", "");
    QCOMPARE(s.n_past(), 6);
    QCOMPARE(s.history(), six);
    const std::vector<int32_t> two = {383, 286};
    auto logits = s.eval(two);
    QCOMPARE(logits.size(), size_t(512));
    for (float x : logits)
        QVERIFY(std::isfinite(x));
    QCOMPARE(s.n_past(), 8);
    const int32_t one = 1;
    CHECK_ERROR([&] { s.eval(std::span<const int32_t>(&one, 1)); }, kOverflow, "context", "");
    QCOMPARE(s.n_past(), 8);
}

void TestBadInput::runtimeEvalBadIds_data()
{
    QTest::addColumn<QList<int>>("ids");
    QTest::newRow("-1") << QList<int>{-1};
    QTest::newRow("n_vocab (512)") << QList<int>{512};
    QTest::newRow("n_vocab + 1000") << QList<int>{1512};
    QTest::newRow("INT32_MIN") << QList<int>{std::numeric_limits<int32_t>::min()};
    QTest::newRow("INT32_MAX") << QList<int>{std::numeric_limits<int32_t>::max()};
    QTest::newRow("valid ids then -1") << QList<int>{1, 403, -1};
    QTest::newRow("valid ids then 512") << QList<int>{1, 403, 407, 512};
}

void TestBadInput::runtimeEvalBadIds()
{
    QFETCH(QList<int>, ids);
    const std::vector<int32_t> v(ids.begin(), ids.end());
    longscope::Session s(*m_model, {32, 1});
    const std::vector<int32_t> start = {1, 403};
    s.eval(start);
    CHECK_ERROR([&] { s.eval(v); }, kInvalid, "token id;vocab", "");
    QCOMPARE(s.n_past(), 2); // the context is unchanged
    // generate() with the same ids in the prompt.
    longscope::GenerateRequest r;
    r.prompt = v;
    r.max_new_tokens = 2;
    CHECK_ERROR([&] { longscope::generate(s, r); }, kInvalid, "token id;vocab", "");
    // Still usable.
    const int32_t ok = 407;
    QCOMPARE(s.eval(std::span<const int32_t>(&ok, 1)).size(), size_t(512));
}

void TestBadInput::runtimeSessionOptions_data()
{
    QTest::addColumn<int>("n_ctx");
    QTest::addColumn<int>("n_threads");
    QTest::addColumn<QString>("words");
    QTest::newRow("n_ctx -1") << -1 << 1 << "context";
    QTest::newRow("n_ctx INT_MIN") << std::numeric_limits<int>::min() << 1 << "context";
    QTest::newRow("n_ctx 2^25 (too large)") << (1 << 25) << 1 << "context";
    QTest::newRow("n_ctx INT_MAX") << std::numeric_limits<int>::max() << 1 << "context";
    QTest::newRow("n_threads -1") << 16 << -1 << "thread";
    QTest::newRow("n_threads 100000") << 16 << 100000 << "thread";
}

void TestBadInput::runtimeSessionOptions()
{
    QFETCH(int, n_ctx);
    QFETCH(int, n_threads);
    QFETCH(QString, words);
    CHECK_ERROR([&] { longscope::Session s(*m_model, {n_ctx, n_threads}); }, kInvalid, words.toStdString(), "");
}

void TestBadInput::runtimeSampling_data()
{
    QTest::addColumn<float>("temperature");
    QTest::addColumn<int>("top_k");
    QTest::addColumn<float>("top_p");
    QTest::addColumn<float>("repeat_penalty");
    QTest::addColumn<int>("max_new");
    QTest::addColumn<QString>("words");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    QTest::newRow("temperature NaN") << nan << 40 << 0.95f << 1.0f << 4 << "temperature";
    QTest::newRow("temperature -1") << -1.0f << 40 << 0.95f << 1.0f << 4 << "temperature";
    QTest::newRow("temperature inf") << inf << 40 << 0.95f << 1.0f << 4 << "temperature";
    QTest::newRow("top_p 0") << 0.8f << 40 << 0.0f << 1.0f << 4 << "top-p|top_p";
    QTest::newRow("top_p 1.5") << 0.8f << 40 << 1.5f << 1.0f << 4 << "top-p|top_p";
    QTest::newRow("top_p -0.5") << 0.8f << 40 << -0.5f << 1.0f << 4 << "top-p|top_p";
    QTest::newRow("top_p NaN") << 0.8f << 40 << nan << 1.0f << 4 << "top-p|top_p";
    QTest::newRow("top_k -1") << 0.8f << -1 << 0.95f << 1.0f << 4 << "top-k|top_k";
    QTest::newRow("top_k INT_MIN") << 0.8f << std::numeric_limits<int>::min() << 0.95f << 1.0f << 4 << "top-k|top_k";
    QTest::newRow("repeat penalty 0") << 0.8f << 40 << 0.95f << 0.0f << 4 << "penalty";
    QTest::newRow("repeat penalty -1") << 0.8f << 40 << 0.95f << -1.0f << 4 << "penalty";
    QTest::newRow("repeat penalty NaN") << 0.8f << 40 << 0.95f << nan << 4 << "penalty";
    QTest::newRow("repeat penalty inf") << 0.8f << 40 << 0.95f << inf << 4 << "penalty";
    QTest::newRow("max_new_tokens -1") << 0.8f << 40 << 0.95f << 1.0f << -1 << "tokens";
}

void TestBadInput::runtimeSampling()
{
    QFETCH(float, temperature);
    QFETCH(int, top_k);
    QFETCH(float, top_p);
    QFETCH(float, repeat_penalty);
    QFETCH(int, max_new);
    QFETCH(QString, words);
    longscope::GenerateRequest r;
    r.prompt = kPrompt;
    r.max_new_tokens = max_new;
    r.sampling.temperature = temperature;
    r.sampling.top_k = top_k;
    r.sampling.top_p = top_p;
    r.sampling.repeat_penalty = repeat_penalty;
    longscope::Session s(*m_model, {32, 1});
    CHECK_ERROR([&] { longscope::generate(s, r); }, kInvalid, words.toStdString(), "");
    if (max_new >= 0) {
        CHECK_ERROR([&] { r.sampling.validate(); }, kInvalid, words.toStdString(), "");
        CHECK_ERROR([&] { longscope::Sampler sampler(r.sampling); }, kInvalid, words.toStdString(), "");
    }
    // The session is still usable with good parameters.
    r.sampling = longscope::SamplingParams{};
    r.max_new_tokens = 3;
    r.stop_at_eos = false;
    QCOMPARE(longscope::generate(s, r).tokens.size(), size_t(3));
}

// A context limit the engine accepts (up to 2^24) whose KV cache cannot be allocated: 2^24
// positions x 32 KV dims x 4 bytes x 2 x 5 layers = 20 GiB for this tiny model. With the
// address space capped just above what the process uses, the first 2 GiB buffer cannot be had
// (nothing is touched), and the engine must say so with OutOfMemory, not let std::bad_alloc
// escape. The second row gets there through a config.json whose trained context is 2^24 and a
// Session with default options.
void TestBadInput::runtimeKvCacheTooLarge_data()
{
    QTest::addColumn<bool>("from_config");
    QTest::newRow("Session n_ctx 2^24") << false;
}

void TestBadInput::runtimeDefaultContextIsCapped()
{
    // A model trained on 2^24 tokens must not make a default session reserve a cache for
    // all of them: the default context is capped, and an explicit limit is honoured.
    const std::string d = fresh_hf_dir();
    ojson cfg = g.hf_config_json;
    cfg["max_position_embeddings"] = 1 << 24;
    write_config(d, cfg);
    auto hf = longscope::Model::load(d);
    QCOMPARE(hf->hparams().n_ctx_train, 1 << 24);
    longscope::Session s(*hf, {0, 1});
    QCOMPARE(s.n_ctx(), longscope::k_default_ctx_cap);
    longscope::Session big(*hf, {8192, 1});
    QCOMPARE(big.n_ctx(), 8192);
}

void TestBadInput::runtimeKvCacheTooLarge()
{
    QFETCH(bool, from_config);
    if (under_asan())
        QSKIP("address-space limits do not mix with AddressSanitizer's shadow memory");
    std::unique_ptr<longscope::Model> hf;
    if (from_config) {
        const std::string d = fresh_hf_dir();
        ojson cfg = g.hf_config_json;
        cfg["max_position_embeddings"] = 1 << 24;
        write_config(d, cfg);
        hf = longscope::Model::load(d);
    }
    const longscope::Model &model = from_config ? *hf : *m_model;
    const longscope::SessionOptions opts{from_config ? 0 : (1 << 24), 1};

    uint64_t vm_bytes = 0;
    {
        std::ifstream st("/proc/self/status");
        std::string line;
        while (std::getline(st, line))
            if (line.rfind("VmSize:", 0) == 0)
                vm_bytes = std::stoull(line.substr(7)) * 1024;
    }
    QVERIFY(vm_bytes > 0);
    struct rlimit old {};
    QVERIFY(getrlimit(RLIMIT_AS, &old) == 0);
    struct rlimit tight = old;
    tight.rlim_cur = rlim_t(vm_bytes + (1ull << 30));
    if (old.rlim_cur != RLIM_INFINITY && tight.rlim_cur > old.rlim_cur)
        tight.rlim_cur = old.rlim_cur;
    QVERIFY(setrlimit(RLIMIT_AS, &tight) == 0);
    const std::string why = expect_error([&] { longscope::Session s(model, opts); }, kOom, "KV cache|memory", "");
    setrlimit(RLIMIT_AS, &old);
    if (!why.empty())
        QFAIL(why.c_str());
}

// ---------------------------------------------------------------------------------------------
// Random and mutated bytes

void TestBadInput::randomBytes_data()
{
    QTest::addColumn<qulonglong>("size");
    QTest::addColumn<qulonglong>("seed");
    QTest::addColumn<int>("prefix"); // 0: none, 1: magic + version 3, 2: ... + counts 2 and 3
    for (unsigned long long size : {1ull, 7ull, 100ull, 4096ull, 1ull << 20})
        for (unsigned long long seed : {1ull, 2ull})
            QTest::addRow("random %llu bytes seed %llu", size, seed) << qulonglong(size) << qulonglong(seed) << 0;
    for (unsigned long long size : {8ull, 16ull, 24ull, 100ull, 4096ull, 65536ull})
        for (unsigned long long seed : {1ull, 2ull, 3ull})
            QTest::addRow("GGUF v3 + random, %llu bytes seed %llu", size, seed)
                << qulonglong(size) << qulonglong(seed) << 1;
    // Small counts followed by random bytes, so the parser reads random keys and values.
    for (unsigned long long seed : {1ull, 2ull, 3ull, 4ull, 5ull, 6ull})
        QTest::addRow("GGUF v3 counts 2/3 + random 4096 bytes seed %llu", seed)
            << qulonglong(4096) << qulonglong(seed) << 2;
}

void TestBadInput::randomBytes()
{
    QFETCH(qulonglong, size);
    QFETCH(qulonglong, seed);
    QFETCH(int, prefix);
    std::string b = random_bytes(size, seed);
    if (prefix > 0) {
        std::string head = raw_header(2, 3);
        head.resize(std::min<size_t>(prefix == 1 ? 8 : head.size(), b.size()));
        b.replace(0, head.size(), head);
    }
    const std::string path = tmp_path("random.bin");
    write_file(path, b);
    CHECK_ERROR([&] { longscope::Model::load(path); }, kFormat, "", path);
}

// Loads `bytes`; a file that loads must also tokenize, decode and generate. Anything other
// than success or a longscope::Error fails the row.
void TestBadInput::load_mutated(const std::string &bytes, const std::string &what)
{
    const std::string path = tmp_path("fuzz.gguf");
    write_file(path, bytes);
    try {
        std::unique_ptr<longscope::Model> m = longscope::Model::load(path);
        const longscope::Tokenizer &tok = m->tokenizer();
        std::vector<int32_t> ids = tok.encode("Once upon a time, a bird", true);
        std::vector<int32_t> known;
        for (int32_t id : ids)
            if (id >= 0 && id < tok.n_vocab())
                known.push_back(id);
        (void)tok.decode(known);
        if (known.empty())
            known.push_back(0);
        longscope::Session s(*m, {16, 1});
        longscope::GenerateRequest r;
        r.prompt = known;
        r.max_new_tokens = 3;
        r.sampling.temperature = 0;
        longscope::generate(s, r);
        ++m_fuzz_loaded;
    } catch (const longscope::Error &e) {
        if (show_errors())
            qInfo("  %s -> %s", what.c_str(), e.what());
        if (std::string(e.what()).empty())
            QFAIL(qPrintable(QString::fromStdString("empty error message after edits" + what)));
        ++m_fuzz_rejected;
    } catch (const std::exception &e) {
        QFAIL(qPrintable(QString::fromStdString("edits" + what + ": a non-longscope exception escaped: " +
                                                demangle(typeid(e).name()) + ": " + e.what())));
    } catch (...) {
        QFAIL(qPrintable(QString::fromStdString("edits" + what + ": an unknown exception escaped")));
    }
}

void TestBadInput::fuzzMutations_data()
{
    QTest::addColumn<int>("seed");
    for (int i = 0; i < 300; ++i)
        QTest::addRow("mutation %03d", i) << i;
}

// Random edits anywhere in the first 4 KB (header, counts, lengths, keys, values).
void TestBadInput::fuzzMutations()
{
    QFETCH(int, seed);
    std::mt19937_64 rng(0x5eed0000u + uint64_t(seed));
    std::string b = g.gguf_bytes;
    const int n_edits = 1 + int(rng() % 6);
    std::string what;
    for (int e = 0; e < n_edits; ++e) {
        const size_t pos = size_t(rng() % 4096);
        switch (rng() % 4) {
        case 0: b[pos] = char(uint8_t(b[pos]) ^ uint8_t(1u << (rng() % 8))); what += " bit@" + std::to_string(pos); break;
        case 1: b[pos] = char(rng() & 0xff); what += " byte@" + std::to_string(pos); break;
        case 2: // a length or count field turned huge or zero
            for (size_t i = 0; i < 8 && pos + i < b.size(); ++i)
                b[pos + i] = (rng() & 1) ? char(0xff) : char(0);
            what += " word@" + std::to_string(pos);
            break;
        default: b[pos] = char(uint8_t(b[pos]) + 1); what += " inc@" + std::to_string(pos); break;
        }
    }
    load_mutated(b, what);
}

// Byte offsets of the bundled GGUF that hold content (key and string characters, numbers,
// tensor names and dimensions) rather than structure (lengths, counts, type ids): edits there
// keep the file parseable, so they reach the hyperparameter checks, the tokenizer and
// sentencepiece, and the weight checks.
static std::vector<uint64_t> content_positions(const GgufSpec &spec)
{
    std::vector<uint64_t> out;
    uint64_t pos = 24;
    auto span = [&](uint64_t n) { for (uint64_t i = 0; i < n; ++i) out.push_back(pos + i); pos += n; };
    std::function<void(const GgufValue &)> walk = [&](const GgufValue &v) {
        if (const std::string *str = v.as_string()) {
            pos += 8;
            span(str->size());
        } else if (const GgufArray *a = v.as_array()) {
            pos += 12;
            for (const GgufValue &item : a->items)
                walk(item);
        } else {
            std::string payload;
            encode_payload(payload, v);
            span(payload.size());
        }
    };
    for (const auto &[k, v] : spec.kvs) {
        pos += 8;
        span(k.size());
        pos += 4;
        walk(v);
    }
    for (const TensorSpec &t : spec.tensors) {
        pos += 8;
        span(t.name.size());
        pos += 4;
        span(8 * t.shape.size());
        pos += 4 + 8;
    }
    return out;
}

void TestBadInput::fuzzValues_data()
{
    QTest::addColumn<int>("seed");
    for (int i = 0; i < 150; ++i)
        QTest::addRow("value mutation %03d", i) << i;
}

void TestBadInput::fuzzValues()
{
    QFETCH(int, seed);
    static const std::vector<uint64_t> positions = content_positions(g.gguf);
    QVERIFY(!positions.empty());
    std::mt19937_64 rng(0xfa1e0000u + uint64_t(seed));
    std::string b = g.gguf_bytes;
    const int n_edits = 1 + int(rng() % 3);
    std::string what;
    for (int e = 0; e < n_edits; ++e) {
        const uint64_t pos = positions[size_t(rng() % positions.size())];
        const uint8_t old = uint8_t(b[size_t(pos)]);
        b[size_t(pos)] = (rng() & 1) ? char(old ^ uint8_t(1u << (rng() % 8))) : char(rng() & 0xff);
        what += " @" + std::to_string(pos) + " (" + region_of(m_regions, pos) + ")";
    }
    load_mutated(b, what);
}

void TestBadInput::noLeakedDescriptors()
{
    if (m_fds_at_start < 0)
        QSKIP("/proc/self/fd is not available");
    QCOMPARE(open_descriptors(), m_fds_at_start);
}

QTEST_APPLESS_MAIN(TestBadInput)
#include "tst_bad_input.moc"
