// What the system can still give this process.
#pragma once

#include <cstdint>

namespace longscope {

// Memory the process can still make resident (RAM + swap available, capped by a cgroup
// limit); UINT64_MAX when it cannot be told. Lets a KV cache mode and the weights' copy at load
// refuse a commit that could only end with the OOM killer instead of an exception.
uint64_t available_memory_bytes();

} // namespace longscope
