// The state behind a LongscopeCudaContext and the helpers every plugin entry point uses to
// enter it and to report a failure. Built only into liblongscope-cuda.so.
#pragma once

#include "cuda/plugin_abi.h"

#include <cstdarg>
#include <cstdio>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define LONGSCOPE_CUDA_EXPORT __attribute__((visibility("default")))

struct LongscopeCudaContext {
    int device = 0;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    void *scratch = nullptr; // grown on demand, freed with the context
    size_t scratch_bytes = 0;
    char error[512] = {0};
};

namespace longscope::cuda {

// Records a failed runtime call. The runtime also keeps the error as its "last error" until
// someone reads it, and the kernels' launch checks read that after every launch: a failure
// reported here (a refused allocation, a bad device number) must not come back as the next,
// unrelated launch's error, so it is taken off there. Sticky errors (a kernel that faulted)
// stay: the runtime reports them to every later call anyway.
inline int fail_cuda(LongscopeCudaContext *ctx, const char *what, cudaError_t err)
{
    cudaGetLastError();
    std::snprintf(ctx->error, sizeof ctx->error, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
    return int(err);
}

inline int fail_blas(LongscopeCudaContext *ctx, const char *what, cublasStatus_t st)
{
    std::snprintf(ctx->error, sizeof ctx->error, "%s: %s (%s)", what, cublasGetStatusString(st),
                  cublasGetStatusName(st));
    return LONGSCOPE_CUDA_ERR_CUBLAS;
}

__attribute__((format(printf, 2, 3))) inline int fail_arg(LongscopeCudaContext *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    va_end(ap);
    return LONGSCOPE_CUDA_ERR_ARGUMENT;
}

// Makes the context's device current for this thread and clears the last reason.
inline int enter(LongscopeCudaContext *ctx)
{
    ctx->error[0] = 0;
    const cudaError_t err = cudaSetDevice(ctx->device);
    return err == cudaSuccess ? 0 : fail_cuda(ctx, "cudaSetDevice", err);
}

} // namespace longscope::cuda
