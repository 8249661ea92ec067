// The CUDA plugin's entry points as the engine calls them: resolved with dlsym from
// liblongscope-cuda.so, so the engine itself never links the CUDA runtime or the driver.
#pragma once

#include "cuda/plugin_abi.h"
#include "longscope/backend.h"

#include <string>
#include <vector>

namespace longscope {

struct CudaApi {
#define LONGSCOPE_CUDA_API_FN(name) decltype(&longscope_cuda_##name) name = nullptr;
    LONGSCOPE_CUDA_API_FN(context_create)
    LONGSCOPE_CUDA_API_FN(context_destroy)
    LONGSCOPE_CUDA_API_FN(error)
    LONGSCOPE_CUDA_API_FN(synchronize)
    LONGSCOPE_CUDA_API_FN(mem_info)
    LONGSCOPE_CUDA_API_FN(alloc)
    LONGSCOPE_CUDA_API_FN(free)
    LONGSCOPE_CUDA_API_FN(upload)
    LONGSCOPE_CUDA_API_FN(download)
    LONGSCOPE_CUDA_API_FN(memset)
    LONGSCOPE_CUDA_API_FN(copy)
    LONGSCOPE_CUDA_API_FN(embedding)
    LONGSCOPE_CUDA_API_FN(rmsnorm)
    LONGSCOPE_CUDA_API_FN(add)
    LONGSCOPE_CUDA_API_FN(swiglu)
    LONGSCOPE_CUDA_API_FN(geglu)
    LONGSCOPE_CUDA_API_FN(scale)
    LONGSCOPE_CUDA_API_FN(softcap)
    LONGSCOPE_CUDA_API_FN(add_bias)
    LONGSCOPE_CUDA_API_FN(matmul)
    LONGSCOPE_CUDA_API_FN(rope)
    LONGSCOPE_CUDA_API_FN(attention)
    LONGSCOPE_CUDA_API_FN(kv_convert)
    LONGSCOPE_CUDA_API_FN(kv_create)
    LONGSCOPE_CUDA_API_FN(kv_reserve)
    LONGSCOPE_CUDA_API_FN(kv_layer)
    LONGSCOPE_CUDA_API_FN(kv_info)
    LONGSCOPE_CUDA_API_FN(kv_clear)
    LONGSCOPE_CUDA_API_FN(kv_release)
    LONGSCOPE_CUDA_API_FN(matvec_group)
    LONGSCOPE_CUDA_API_FN(add_rmsnorm)
    LONGSCOPE_CUDA_API_FN(rope_pair)
    LONGSCOPE_CUDA_API_FN(kv_store)
#undef LONGSCOPE_CUDA_API_FN
    std::string device_name; // the GPU the probe found first
};

// An explicit plugin file tried before the usual places (set_backend_options).
void set_cuda_plugin_override(const std::string &path);

// Where the plugin is looked for, in order (longscope/backend.h cuda_plugin_candidates).
std::vector<std::string> cuda_plugin_candidates();

// Looks for the plugin, loads it and asks it for devices. Never throws: the status says why
// CUDA cannot be used.
BackendStatus probe_cuda_plugin();

// Probes the CUDA backend once and resolves every entry point of the plugin it found.
// Throws BackendError with the probe's reason when CUDA cannot be used (no plugin, no driver,
// no GPU, a plugin of another version). The plugin stays loaded for the life of the process.
CudaApi load_cuda_api();

} // namespace longscope
