// The CUDA backend as the engine finds it (probe_backends): its status, with the reason it
// cannot be used when it cannot. A default status (not available) when the engine lists none.
#pragma once

#include "longscope/backend.h"

namespace longscope::test {

inline BackendStatus cuda_status()
{
    for (const BackendStatus &b : probe_backends())
        if (b.name == "CUDA")
            return b;
    return {};
}

} // namespace longscope::test
