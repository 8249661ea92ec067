// Streaming GGUF v3 writer (little endian), for the quantizer and the random-model maker.
//
// File layout: "GGUF", uint32 version 3, uint64 tensor count, uint64 metadata count, the
// metadata (string key, uint32 value type, value), the tensor infos (string name, uint32
// n_dims, uint64 ne[n_dims] contiguous dimension first, uint32 ggml type, uint64 offset into
// the data section), zero padding to the alignment, then each tensor's bytes, each padded to
// the alignment. Strings are uint64 length + bytes; arrays are uint32 element type, uint64
// count, elements.
//
// Every tensor's size follows from its shape and type, so the whole header is written first
// and the data then streams tensor by tensor, in any number of pieces: nothing needs to hold
// more than the piece being written. The file is written under a temporary name next to the
// destination and renamed into place by finish(), so a failed or abandoned write never leaves
// a truncated model behind.
#pragma once

#include "longscope/gguf.h"
#include "longscope/types.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace longscope {

class GgufStreamWriter {
public:
    // Throws IoError when the temporary file cannot be created.
    explicit GgufStreamWriter(const std::string &path, uint64_t alignment = 32);
    ~GgufStreamWriter(); // removes the temporary file unless finish() succeeded
    GgufStreamWriter(const GgufStreamWriter &) = delete;
    GgufStreamWriter &operator=(const GgufStreamWriter &) = delete;

    // Metadata, in the order added; a key added twice replaces the earlier value in place.
    void set(const std::string &key, const GgufValue &value);
    void set_u32(const std::string &key, uint32_t v);
    void set_f32(const std::string &key, float v);
    void set_bool(const std::string &key, bool v);
    void set_string(const std::string &key, const std::string &v);

    // Declares the next tensor (ne[0] first). Throws InvalidArgument when the row is not a
    // whole number of blocks of `type`.
    void add_tensor(const std::string &name, const std::vector<int64_t> &shape, DType type);

    // Writes the header; then the tensors' bytes follow in the order they were declared.
    void write_header();
    // Appends bytes of the current tensor; moves to the next one when it is complete.
    // Throws InvalidArgument when more bytes come than the tensors declared.
    void write_data(const void *data, size_t n);
    // Checks that every tensor got all its bytes, flushes, and renames the file into place.
    void finish();

    uint64_t tensor_bytes(size_t i) const { return m_tensors[i].nbytes; }

private:
    struct Tensor {
        std::string name;
        std::vector<int64_t> shape;
        DType type;
        uint64_t nbytes;
        uint64_t offset;
    };

    void put(const void *p, size_t n);
    void put_string(const std::string &s);
    void put_value(const GgufValue &v);
    void pad_to_alignment(uint64_t written);

    std::string m_path, m_tmp_path;
    std::FILE *m_file = nullptr;
    uint64_t m_alignment;
    std::vector<std::pair<std::string, GgufValue>> m_metadata;
    std::vector<Tensor> m_tensors;
    uint64_t m_data_size = 0;
    bool m_header_written = false;
    bool m_finished = false;
    size_t m_current = 0;       // tensor being written
    uint64_t m_current_done = 0; // its bytes written so far
};

} // namespace longscope
