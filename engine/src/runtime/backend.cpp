#include "longscope/backend.h"

#include "cpu/simd.h"
#include "cuda/plugin_abi.h"

#include <dlfcn.h>
#include <filesystem>
#include <thread>

namespace longscope {

namespace fs = std::filesystem;

std::vector<std::string> cuda_plugin_candidates()
{
    std::vector<std::string> out;
    if (const char *env = std::getenv("LONGSCOPE_CUDA_PLUGIN"); env && *env)
        out.emplace_back(env);
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        out.push_back((exe.parent_path() / "liblongscope-cuda.so").string());
        out.push_back((exe.parent_path() / ".." / "lib" / "longscope" / "liblongscope-cuda.so").lexically_normal().string());
    }
#ifdef LONGSCOPE_INSTALL_PLUGIN_DIR
    out.push_back(std::string(LONGSCOPE_INSTALL_PLUGIN_DIR) + "/liblongscope-cuda.so");
#endif
#ifdef LONGSCOPE_BUILD_CUDA_PLUGIN
    out.emplace_back(LONGSCOPE_BUILD_CUDA_PLUGIN);
#endif
    return out;
}

namespace {

BackendStatus probe_cuda()
{
    BackendStatus s;
    s.name = "CUDA";
    std::string looked;
    for (const std::string &path : cuda_plugin_candidates()) {
        std::error_code ec;
        if (!fs::exists(path, ec)) {
            looked += (looked.empty() ? "" : ", ") + path;
            continue;
        }
        s.library = path;
        // RTLD_LOCAL: the plugin's CUDA runtime stays private to it.
        void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *err = dlerror();
            s.detail = std::string("the CUDA plugin could not be loaded: ") + (err ? err : "unknown error") +
                       " (the CUDA 13 runtime and cuBLAS must be installed)";
            return s;
        }
        auto abi = reinterpret_cast<int (*)()>(dlsym(h, "longscope_cuda_abi_version"));
        auto probe = reinterpret_cast<decltype(&longscope_cuda_probe)>(dlsym(h, "longscope_cuda_probe"));
        if (!abi || !probe || abi() != LONGSCOPE_CUDA_ABI_VERSION) {
            s.detail = "the CUDA plugin " + path + " does not match this version of Longscope";
            dlclose(h);
            return s;
        }
        LongscopeCudaDevice devices[16];
        char reason[512] = {0};
        const int n = probe(devices, 16, reason, sizeof reason);
        for (int i = 0; i < n && i < 16; ++i) {
            DeviceInfo d;
            d.name = devices[i].name;
            d.total_memory = devices[i].total_memory;
            d.free_memory = devices[i].free_memory;
            d.compute_major = devices[i].compute_major;
            d.compute_minor = devices[i].compute_minor;
            s.devices.push_back(d);
        }
        // The plugin stays loaded for the life of the process (CUDA runtimes do not unload
        // cleanly).
        if (n > 0) {
            s.available = true;
            s.detail = std::to_string(n) + " GPU" + (n == 1 ? "" : "s") + ": " + s.devices.front().name;
        } else {
            s.detail = std::string("no usable NVIDIA GPU: ") + reason;
        }
        return s;
    }
    s.detail = "the CUDA backend is not built into this installation (liblongscope-cuda.so not found";
    s.detail += looked.empty() ? ")" : " in " + looked + ")";
    return s;
}

} // namespace

std::vector<BackendStatus> probe_backends()
{
    BackendStatus cpu;
    cpu.name = "CPU";
    cpu.available = true;
    cpu.detail = std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " hardware threads, " +
                 cpu_kernels().name + " kernels";
    std::vector<BackendStatus> out{cpu};
    try {
        out.push_back(probe_cuda());
    } catch (const std::exception &e) {
        BackendStatus s;
        s.name = "CUDA";
        s.detail = e.what();
        out.push_back(s);
    }
    return out;
}

} // namespace longscope
