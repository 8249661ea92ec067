#include "cuda_host/cuda_api.h"

#include "longscope/backend.h"
#include "longscope/errors.h"

#include <dlfcn.h>
#include <filesystem>

namespace longscope {

namespace fs = std::filesystem;

namespace {
// Set once by the application before any probe (set_backend_options); read-only afterwards.
std::string &plugin_override()
{
    static std::string path;
    return path;
}
} // namespace

void set_cuda_plugin_override(const std::string &path) { plugin_override() = path; }

std::vector<std::string> cuda_plugin_candidates()
{
    std::vector<std::string> out;
    if (!plugin_override().empty())
        out.push_back(plugin_override());
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

BackendStatus probe_cuda_plugin()
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

CudaApi load_cuda_api()
{
    const BackendStatus cuda = probe_cuda_plugin();
    if (!cuda.available)
        throw BackendError("the CUDA backend cannot be used: " +
                           (cuda.detail.empty() ? std::string("it was not probed") : cuda.detail));
    // Already loaded by the probe: this only takes another reference (never closed, as CUDA
    // runtimes do not unload cleanly).
    void *h = dlopen(cuda.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        throw BackendError("the CUDA plugin " + cuda.library + " could not be loaded: " + (err ? err : "unknown error"));
    }
    CudaApi api;
    api.device_name = cuda.devices.empty() ? std::string("GPU 0") : cuda.devices.front().name;
#define LONGSCOPE_CUDA_API_LOAD(name)                                                                       \
    api.name = reinterpret_cast<decltype(api.name)>(dlsym(h, "longscope_cuda_" #name));                    \
    if (!api.name)                                                                                          \
        throw BackendError("the CUDA plugin " + cuda.library +                                              \
                           " lacks longscope_cuda_" #name " (it does not match this version of Longscope)");
    LONGSCOPE_CUDA_API_LOAD(context_create)
    LONGSCOPE_CUDA_API_LOAD(context_destroy)
    LONGSCOPE_CUDA_API_LOAD(error)
    LONGSCOPE_CUDA_API_LOAD(synchronize)
    LONGSCOPE_CUDA_API_LOAD(mem_info)
    LONGSCOPE_CUDA_API_LOAD(alloc)
    LONGSCOPE_CUDA_API_LOAD(free)
    LONGSCOPE_CUDA_API_LOAD(upload)
    LONGSCOPE_CUDA_API_LOAD(download)
    LONGSCOPE_CUDA_API_LOAD(memset)
    LONGSCOPE_CUDA_API_LOAD(copy)
    LONGSCOPE_CUDA_API_LOAD(embedding)
    LONGSCOPE_CUDA_API_LOAD(rmsnorm)
    LONGSCOPE_CUDA_API_LOAD(add)
    LONGSCOPE_CUDA_API_LOAD(swiglu)
    LONGSCOPE_CUDA_API_LOAD(geglu)
    LONGSCOPE_CUDA_API_LOAD(scale)
    LONGSCOPE_CUDA_API_LOAD(softcap)
    LONGSCOPE_CUDA_API_LOAD(add_bias)
    LONGSCOPE_CUDA_API_LOAD(matmul)
    LONGSCOPE_CUDA_API_LOAD(rope)
    LONGSCOPE_CUDA_API_LOAD(attention)
    LONGSCOPE_CUDA_API_LOAD(kv_convert)
    LONGSCOPE_CUDA_API_LOAD(kv_create)
    LONGSCOPE_CUDA_API_LOAD(kv_reserve)
    LONGSCOPE_CUDA_API_LOAD(kv_layer)
    LONGSCOPE_CUDA_API_LOAD(kv_info)
    LONGSCOPE_CUDA_API_LOAD(kv_clear)
    LONGSCOPE_CUDA_API_LOAD(kv_release)
    LONGSCOPE_CUDA_API_LOAD(matvec_group)
    LONGSCOPE_CUDA_API_LOAD(add_rmsnorm)
    LONGSCOPE_CUDA_API_LOAD(rope_pair)
    LONGSCOPE_CUDA_API_LOAD(kv_store)
#undef LONGSCOPE_CUDA_API_LOAD
    return api;
}

} // namespace longscope
