// Device time per op of a CUDA context, for finding where a forward pass spends its time.
// Switched on by the environment variable LONGSCOPE_CUDA_PROFILE (any value but "" or "0")
// when a context is made; the table is written to standard error when the context is
// destroyed. Each op entry point brackets what it queues with two CUDA events; the events are
// read once the stream has been waited for (a download, an upload, a synchronise), so
// profiling adds two event records per op and no waits of its own (except when 8192 ops are
// pending with none read: then it waits for the stream once). Built only into
// liblongscope-cuda.so.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>
#include <cuda_runtime.h>

namespace longscope::cuda {

class Profiler {
public:
    explicit Profiler(cudaStream_t stream) : m_stream(stream) {}
    ~Profiler();
    Profiler(const Profiler &) = delete;
    Profiler &operator=(const Profiler &) = delete;

    // Nonzero LONGSCOPE_CUDA_PROFILE.
    static bool wanted();

    // Brackets the work one op queues on the stream (not nested).
    void begin(const char *op);
    void end();
    // Reads every pending pair of events; call after the stream has been waited for.
    void collect();
    // The table: op, calls, device ms, device us per call, host us per call, share.
    void report(std::FILE *out);

private:
    struct Pending {
        const char *op;
        cudaEvent_t start, stop;
        double host_us;
    };
    struct Total {
        uint64_t calls = 0;
        double device_ms = 0.0;
        double host_us = 0.0;
    };
    cudaEvent_t take();

    cudaStream_t m_stream;
    std::vector<cudaEvent_t> m_free;
    std::vector<Pending> m_pending;
    std::map<std::string, Total> m_totals;
    const char *m_op = nullptr;
    cudaEvent_t m_start = nullptr;
    std::chrono::steady_clock::time_point m_host_start;
    std::chrono::steady_clock::time_point m_first{}, m_last{};
    bool m_any = false;
    bool m_broken = false; // an event call failed: profiling stops, the ops go on
};

} // namespace longscope::cuda
