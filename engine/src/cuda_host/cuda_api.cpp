#include "cuda_host/cuda_api.h"

#include "longscope/backend.h"
#include "longscope/errors.h"

#include <dlfcn.h>

namespace longscope {

CudaApi load_cuda_api()
{
    BackendStatus cuda;
    for (const BackendStatus &b : probe_backends())
        if (b.name == "CUDA")
            cuda = b;
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
    LONGSCOPE_CUDA_API_LOAD(matmul)
    LONGSCOPE_CUDA_API_LOAD(rope)
    LONGSCOPE_CUDA_API_LOAD(attention)
    LONGSCOPE_CUDA_API_LOAD(kv_create)
    LONGSCOPE_CUDA_API_LOAD(kv_reserve)
    LONGSCOPE_CUDA_API_LOAD(kv_layer)
    LONGSCOPE_CUDA_API_LOAD(kv_info)
    LONGSCOPE_CUDA_API_LOAD(kv_clear)
    LONGSCOPE_CUDA_API_LOAD(kv_release)
#undef LONGSCOPE_CUDA_API_LOAD
    return api;
}

} // namespace longscope
