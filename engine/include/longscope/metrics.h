// What every evaluation step reports: tokens, speed, and a memory ledger by category with
// peaks. The app plots exactly this and the benchmarks print exactly this.
#pragma once

#include "longscope/settings.h"

#include <cstdint>
#include <string>

namespace longscope {

struct MemoryLedger {
    uint64_t weights = 0;       // bytes of weights the forward pass reads
    uint64_t kv_reserved = 0;   // KV cache: allocated or reserved address space
    uint64_t kv_resident = 0;   // KV cache: physically backed
    uint64_t scratch = 0;       // activations and attention scratch held during the step
    uint64_t total = 0;         // weights + kv_resident + scratch
    // Peaks since the session started (or since reset_peaks()).
    uint64_t peak_kv_reserved = 0;
    uint64_t peak_kv_resident = 0;
    uint64_t peak_scratch = 0;
    uint64_t peak_total = 0;
    uint64_t process_rss = 0;   // the whole process, from /proc/self/statm
    uint64_t kv_bytes_copied = 0; // cumulative: growth copies and mode migrations
    // CUDA backend: device memory in use and free (cudaMemGetInfo, the whole device) after the
    // step; 0 on the CPU.
    uint64_t device_used = 0;
    uint64_t device_free = 0;
};

enum class StepPhase { Prefill, Decode };

struct StepMetrics {
    int64_t step = 0;          // evaluation steps since the session started
    StepPhase phase = StepPhase::Prefill;
    int n_tokens = 0;          // tokens evaluated in this step
    int position = 0;          // context length after the step
    double seconds = 0;
    double tokens_per_second = 0;
    double ntk_alpha = 1;      // alpha in effect for this step
    double rope_base = 0;      // RoPE base in effect (model base, dynamic scaling and NTK)
    Settings settings;         // the settings the step ran with
    int64_t attention_tiles_skipped = 0;
    int threads = 0;           // CPU threads the step ran on (decode: as tuned, CpuOptions)
    MemoryLedger memory;
};

std::string_view to_string(StepPhase p);

// One CSV header line and one row per step, the same columns everywhere (CLI --metrics,
// benchmarks, the app's export).
std::string metrics_csv_header();
std::string metrics_csv_row(const StepMetrics &m);

// Resident set size of this process in bytes (0 where it cannot be read).
uint64_t process_rss_bytes();

} // namespace longscope
