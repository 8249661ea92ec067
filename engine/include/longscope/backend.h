// Compute backends and why each is or is not available. The CPU backend is always there; the
// CUDA backend is a separate shared library (liblongscope-cuda.so) loaded at run time, so the
// application starts on machines without an NVIDIA driver and can say why CUDA is not used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace longscope {

struct DeviceInfo {
    std::string name;
    uint64_t total_memory = 0;
    uint64_t free_memory = 0;
    int compute_major = 0;
    int compute_minor = 0;
};

struct BackendStatus {
    std::string name;      // "CPU", "CUDA"
    bool available = false;
    std::string detail;    // what it runs on, or why it cannot be used
    std::string library;   // the plugin file that was loaded or looked for
    std::vector<DeviceInfo> devices;
};

// Probes every backend. Never throws: failures are in each status's detail.
std::vector<BackendStatus> probe_backends();

struct BackendOptions {
    std::string cuda_plugin; // a plugin file tried first (the applications pass $LONGSCOPE_CUDA_PLUGIN)
};

// Set by the application once at start, before any probe or session; the library itself reads
// no environment variable.
void set_backend_options(const BackendOptions &options);

// Where the CUDA plugin is looked for, in order: BackendOptions::cuda_plugin, next to the running
// executable, ../lib/longscope/ from it, the installed plugin directory (LIBDIR/longscope),
// and the build tree.
std::vector<std::string> cuda_plugin_candidates();

} // namespace longscope
