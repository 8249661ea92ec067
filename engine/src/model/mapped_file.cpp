#include "longscope/mapped_file.h"

#include "longscope/errors.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace longscope {

namespace {

// Opens a regular file for reading. O_NONBLOCK keeps open() from waiting for a writer when
// the path is a FIFO; the type is then checked on the descriptor itself.
int open_regular(const std::string &path, struct stat &st, const char *what)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        throw IoError(path + ": cannot open " + what + ": " + std::strerror(errno));
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        throw IoError(path + ": cannot stat " + what + ": " + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw IoError(path + ": " + what + " is not a regular file" +
                      (S_ISDIR(st.st_mode) ? " (it is a directory)" : ""));
    }
    return fd;
}

} // namespace

std::string read_regular_file(const std::string &path, uint64_t max_bytes, const char *what)
{
    struct stat st {};
    int fd = open_regular(path, st, what);
    if (uint64_t(st.st_size) > max_bytes) {
        ::close(fd);
        throw FormatError(path + ": " + what + " is " + std::to_string(st.st_size) +
                          " bytes, more than the " + std::to_string(max_bytes) + " allowed");
    }
    std::string out(size_t(st.st_size), '\0');
    size_t done = 0;
    while (done < out.size()) {
        ssize_t n = ::read(fd, out.data() + done, out.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = errno;
            ::close(fd);
            throw IoError(path + ": cannot read " + what + (n < 0 ? std::string(": ") + std::strerror(err) : ""));
        }
        done += size_t(n);
    }
    ::close(fd);
    return out;
}

MappedFile::MappedFile(const std::string &path) : m_path(path)
{
    struct stat st {};
    int fd = open_regular(path, st, "model file");
    m_size = static_cast<uint64_t>(st.st_size);
    if (m_size > 0) {
        void *p = ::mmap(nullptr, m_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            ::close(fd);
            throw IoError(path + ": cannot map into memory: " + std::strerror(err));
        }
        m_data = static_cast<const uint8_t *>(p);
    }
    ::close(fd); // the mapping keeps the file alive
}

bool MappedFile::contains(const void *p, uint64_t n) const
{
    const auto *b = static_cast<const uint8_t *>(p);
    return m_data && b >= m_data && n <= m_size && uint64_t(b - m_data) <= m_size - n;
}

void MappedFile::release(const void *p, uint64_t n) const
{
    if (!contains(p, n))
        return;
    const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (end > begin)
        ::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile()
{
    if (m_data)
        ::munmap(const_cast<uint8_t *>(m_data), m_size);
}

} // namespace longscope
