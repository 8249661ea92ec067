#include "core/system_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace longscope {

namespace {

// The value of one "Key:   123 kB" line of /proc/meminfo, in bytes; false if absent.
bool meminfo_field(const char *text, const char *key, uint64_t &out)
{
    const char *p = std::strstr(text, key);
    if (!p)
        return false;
    unsigned long long kb = 0;
    if (std::sscanf(p + std::strlen(key), " %llu", &kb) != 1)
        return false;
    out = uint64_t(kb) * 1024;
    return true;
}

// A small file read whole; empty when it cannot be read.
std::string read_small_file(const char *path)
{
    std::string text;
    if (FILE *f = std::fopen(path, "re")) {
        char buf[4096];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 16))
            text.append(buf, n);
        std::fclose(f);
    }
    return text;
}

bool read_u64(const char *path, uint64_t &out)
{
    const std::string text = read_small_file(path);
    unsigned long long v = 0;
    if (text.empty() || std::sscanf(text.c_str(), "%llu", &v) != 1)
        return false; // also "max" (no limit)
    out = v;
    return true;
}

} // namespace

uint64_t available_memory_bytes()
{
    uint64_t avail = std::numeric_limits<uint64_t>::max();
    const std::string meminfo = read_small_file("/proc/meminfo");
    uint64_t mem = 0, swap = 0;
    if (meminfo_field(meminfo.c_str(), "MemAvailable:", mem)) {
        meminfo_field(meminfo.c_str(), "SwapFree:", swap);
        avail = mem + swap;
    }
    // In a container /proc/meminfo shows the host; the cgroup limit is what the OOM killer
    // enforces. v2 first, then v1.
    uint64_t limit = 0, used = 0;
    if ((read_u64("/sys/fs/cgroup/memory.max", limit) && read_u64("/sys/fs/cgroup/memory.current", used)) ||
        (read_u64("/sys/fs/cgroup/memory/memory.limit_in_bytes", limit) &&
         read_u64("/sys/fs/cgroup/memory/memory.usage_in_bytes", used)))
        avail = std::min(avail, limit > used ? limit - used : 0);
    return avail;
}

std::shared_ptr<uint8_t> allocate_huge_pages(size_t bytes)
{
    constexpr size_t huge = size_t(2) << 20;
    const size_t rounded = (std::max<size_t>(bytes, 1) + huge - 1) / huge * huge;
    std::shared_ptr<uint8_t> buf(static_cast<uint8_t *>(std::aligned_alloc(huge, rounded)), std::free);
#ifdef MADV_HUGEPAGE
    if (buf)
        ::madvise(buf.get(), rounded, MADV_HUGEPAGE);
#endif
    return buf;
}

} // namespace longscope
