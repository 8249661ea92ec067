// Host side of the CUDA backend plugin: device discovery and the kernel self-test. Built
// only into liblongscope-cuda.so (see kernels/CMakeLists.txt), never into the engine.
#include "cuda/plugin_abi.h"

#include "rmsnorm.cuh"

#include <cstdio>
#include <cstring>
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace {

// As fail_cuda (cuda/context_state.h): the failure is reported here, so it is taken off the
// runtime's last error, where the next launch check would read it again.
void set_reason(char *reason, size_t len, const char *what, cudaError_t err)
{
    cudaGetLastError();
    if (reason && len)
        std::snprintf(reason, len, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) int longscope_cuda_abi_version() { return LONGSCOPE_CUDA_ABI_VERSION; }

__attribute__((visibility("default"))) int longscope_cuda_probe(LongscopeCudaDevice *devices, int max, char *reason,
                                                                size_t reason_len)
{
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        set_reason(reason, reason_len, "cudaGetDeviceCount", err);
        return 0;
    }
    if (count == 0) {
        std::snprintf(reason, reason_len, "the NVIDIA driver reports no CUDA device");
        return 0;
    }
    int filled = 0;
    for (int i = 0; i < count && filled < max; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
            continue;
        LongscopeCudaDevice &d = devices[filled++];
        std::snprintf(d.name, sizeof d.name, "%s", prop.name);
        d.total_memory = prop.totalGlobalMem;
        d.compute_major = prop.major;
        d.compute_minor = prop.minor;
        size_t free_b = 0, total_b = 0;
        if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            d.free_memory = free_b;
    }
    // cuBLAS must initialise too: the backend's matrix products depend on it.
    cublasHandle_t handle = nullptr;
    if (filled > 0 && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
        std::snprintf(reason, reason_len, "cuBLAS could not be initialised");
        return 0;
    }
    if (handle)
        cublasDestroy(handle);
    return filled;
}

__attribute__((visibility("default"))) int longscope_cuda_rmsnorm_selftest(int device, const float *x,
                                                                           const float *weight, float *out, int rows,
                                                                           int n, float eps, char *reason,
                                                                           size_t reason_len)
{
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) {
        set_reason(reason, reason_len, "cudaSetDevice", err);
        return int(err);
    }
    const size_t bytes = size_t(rows) * size_t(n) * sizeof(float);
    float *dx = nullptr, *dw = nullptr, *dy = nullptr;
    auto fail = [&](const char *what, cudaError_t e) {
        set_reason(reason, reason_len, what, e);
        cudaFree(dx);
        cudaFree(dw);
        cudaFree(dy);
        return int(e);
    };
    if ((err = cudaMalloc(&dx, bytes)) != cudaSuccess)
        return fail("cudaMalloc", err);
    if ((err = cudaMalloc(&dw, size_t(n) * sizeof(float))) != cudaSuccess)
        return fail("cudaMalloc", err);
    if ((err = cudaMalloc(&dy, bytes)) != cudaSuccess)
        return fail("cudaMalloc", err);
    cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, weight, size_t(n) * sizeof(float), cudaMemcpyHostToDevice);
    longscope::cuda::launch_rmsnorm(dx, dw, dy, rows, n, eps, 0.0f, nullptr);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return fail("rmsnorm launch", err);
    if ((err = cudaMemcpy(out, dy, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess)
        return fail("cudaMemcpy", err);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    return 0;
}
}
