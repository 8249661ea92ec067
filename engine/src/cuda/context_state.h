// The state behind a LongscopeCudaContext and the helpers every plugin entry point uses to
// enter it and to report a failure. Built only into liblongscope-cuda.so.
#pragma once

#include "cuda/plugin_abi.h"
#include "cuda/profiler.h"

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
    longscope::cuda::Profiler *profiler = nullptr; // LONGSCOPE_CUDA_PROFILE: device time per op
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

// Brackets one op's queued work for the profiler, when there is one.
struct OpScope {
    Profiler *profiler;
    OpScope(LongscopeCudaContext *ctx, const char *op) : profiler(ctx->profiler)
    {
        if (profiler)
            profiler->begin(op);
    }
    ~OpScope()
    {
        if (profiler)
            profiler->end();
    }
    OpScope(const OpScope &) = delete;
    OpScope &operator=(const OpScope &) = delete;
};

// After the stream has been waited for: the profiler reads its finished events.
inline void waited(LongscopeCudaContext *ctx)
{
    if (ctx->profiler)
        ctx->profiler->collect();
}

} // namespace longscope::cuda
