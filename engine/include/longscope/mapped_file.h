// A read-only memory-mapped file. Tensor data is read in place from the mapping (Model copies
// the matrices out of it at load and lets their pages go).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace longscope {

class MappedFile {
public:
    // Throws IoError when the file cannot be opened or mapped.
    explicit MappedFile(const std::string &path);
    ~MappedFile();
    MappedFile(const MappedFile &) = delete;
    MappedFile &operator=(const MappedFile &) = delete;

    const uint8_t *data() const { return m_data; }
    uint64_t size() const { return m_size; }
    const std::string &path() const { return m_path; }

    // Whether [p, p + n) lies inside this mapping.
    bool contains(const void *p, uint64_t n) const;
    // Lets the system drop the pages wholly inside [p, p + n) from memory (they are read from
    // the file again if touched). Does nothing for a range outside this mapping.
    void release(const void *p, uint64_t n) const;

private:
    std::string m_path;
    const uint8_t *m_data = nullptr;
    uint64_t m_size = 0;
};

// Reads a whole regular file (never blocks on a FIFO or device). `what` names the file's role
// in messages ("tokenizer model"). Throws IoError, or FormatError past `max_bytes`.
std::string read_regular_file(const std::string &path, uint64_t max_bytes, const char *what);

} // namespace longscope
