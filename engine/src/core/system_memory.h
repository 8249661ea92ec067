// What the system can still give this process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace longscope {

// Memory the process can still make resident (RAM + swap available, capped by a cgroup
// limit); UINT64_MAX when it cannot be told. Lets a KV cache mode and the weights' copy at load
// refuse a commit that could only end with the OOM killer instead of an exception.
uint64_t available_memory_bytes();

// `bytes` (rounded up to 2 MiB) aligned to 2 MiB and asked for in 2 MiB pages (the kernel
// may still give 4 KiB ones); null when refused. Memory that is streamed (the weights' copy,
// the bandwidth probe) reads faster from huge pages: the hardware prefetchers stop at page
// edges.
std::shared_ptr<uint8_t> allocate_huge_pages(size_t bytes);

} // namespace longscope
