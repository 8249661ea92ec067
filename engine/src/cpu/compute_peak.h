// The compute probe's kernels: a tight loop of one matrix-product instruction, the same one
// the GEMM kernels of a family use, on twelve independent accumulators (enough to cover the
// instruction's latency on every core in use, so the loop runs at the issue rate).
#pragma once

#include "longscope/hardware.h"

#include <cstdint>

namespace longscope {

struct ComputeLoop {
    float (*run)(int64_t iterations) = nullptr; // returns a value derived from every accumulator
    double ops_per_iteration = 0;                // multiply-adds counted twice
    const char *name = "";                       // the instruction, with the kernel level
};

// The loop for `family` at this CPU's kernel level.
ComputeLoop compute_loop(ComputeFamily family);

} // namespace longscope
