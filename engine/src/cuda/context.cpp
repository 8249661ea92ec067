// Host side of the CUDA plugin's ops: a context per device (stream, cuBLAS handle, scratch),
// device buffers, and one entry point per forward-pass op taking device pointers. Built only
// into liblongscope-cuda.so (see kernels/CMakeLists.txt), never into the engine. Every CUDA and
// cuBLAS status is checked; a failure returns a nonzero code and leaves its reason in the
// context (longscope_cuda_error).
#include "cuda/context_state.h"
#include "cuda/plugin_abi.h"

#include "attention.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "kv_format.cuh"
#include "matvec.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "sample.cuh"

#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace {

using namespace longscope::cuda;

// At least `bytes` of device scratch. Growing waits for the stream (the old buffer may still be
// in use by queued work), then replaces the buffer. It grows geometrically (at least doubling,
// in whole MiB), so as a context gets longer and the attention scratch with it those waits
// stay rare; when the doubled size cannot be had, exactly `bytes` is tried.
int ensure_scratch(LongscopeCudaContext *ctx, size_t bytes, void **out)
{
    if (bytes > ctx->scratch_bytes) {
        const size_t old_bytes = ctx->scratch_bytes;
        cudaError_t err = cudaStreamSynchronize(ctx->stream);
        if (err != cudaSuccess)
            return fail_cuda(ctx, "cudaStreamSynchronize", err);
        if (ctx->scratch) {
            err = cudaFree(ctx->scratch);
            ctx->scratch = nullptr;
            ctx->scratch_bytes = 0;
            if (err != cudaSuccess)
                return fail_cuda(ctx, "cudaFree (scratch)", err);
        }
        const size_t mib = size_t(1) << 20;
        size_t want = bytes > 2 * old_bytes ? bytes : 2 * old_bytes;
        want = (want + mib - 1) / mib * mib;
        err = cudaMalloc(&ctx->scratch, want);
        if (err != cudaSuccess && want > bytes) {
            cudaGetLastError(); // an allocation failure is not sticky; clear it
            want = bytes;
            err = cudaMalloc(&ctx->scratch, want);
        }
        if (err != cudaSuccess) {
            ctx->scratch = nullptr;
            cudaGetLastError();
            char what[96];
            std::snprintf(what, sizeof what, "cudaMalloc of %zu bytes of scratch", bytes);
            return fail_cuda(ctx, what, err);
        }
        ctx->scratch_bytes = want;
    }
    *out = ctx->scratch;
    return 0;
}

int check_launch(LongscopeCudaContext *ctx, const char *what, cudaError_t err)
{
    return err == cudaSuccess ? 0 : fail_cuda(ctx, what, err);
}

bool weight_type_ok(int type)
{
    return type == LONGSCOPE_CUDA_F32 || type == LONGSCOPE_CUDA_F16 || type == LONGSCOPE_CUDA_BF16;
}

// The checks every RoPE entry point makes; 0 or the failure.
int check_rope_args(LongscopeCudaContext *ctx, const char *who, int head_dim, int n_rot, int style,
                    const double *inv_freq)
{
    if (n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim)
        return fail_arg(ctx, "%s: n_rot %d must be even and at most head_dim %d", who, n_rot, head_dim);
    if (style != LONGSCOPE_CUDA_ROPE_INTERLEAVED && style != LONGSCOPE_CUDA_ROPE_ROTATE_HALF)
        return fail_arg(ctx, "%s: unknown style %d", who, style);
    if (n_rot > 0 && !inv_freq)
        return fail_arg(ctx, "%s: no frequency table", who);
    return 0;
}

const char *kv_type_name(int type)
{
    switch (type) {
    case k_kv_f32: return "f32";
    case k_kv_f16: return "f16";
    case k_kv_q8_0: return "q8_0";
    case k_kv_q4_0: return "q4_0";
    default: return "unknown";
    }
}

} // namespace

extern "C" {

LONGSCOPE_CUDA_EXPORT int longscope_cuda_context_create(int device, LongscopeCudaContext **out, char *reason,
                                                        size_t reason_len)
{
    auto say = [&](const char *what, const char *why, const char *name) {
        cudaGetLastError(); // reported here; not the next launch's error (see fail_cuda)
        if (reason && reason_len)
            std::snprintf(reason, reason_len, "%s: %s (%s)", what, why, name);
    };
    if (!out) {
        if (reason && reason_len)
            std::snprintf(reason, reason_len, "longscope_cuda_context_create: no place for the context");
        return LONGSCOPE_CUDA_ERR_ARGUMENT;
    }
    *out = nullptr;
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) {
        say("cudaSetDevice", cudaGetErrorString(err), cudaGetErrorName(err));
        return int(err);
    }
    auto *ctx = new (std::nothrow) LongscopeCudaContext;
    if (!ctx) {
        if (reason && reason_len)
            std::snprintf(reason, reason_len, "out of host memory for the context");
        return LONGSCOPE_CUDA_ERR_ARGUMENT;
    }
    ctx->device = device;
    err = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        say("cudaStreamCreate", cudaGetErrorString(err), cudaGetErrorName(err));
        delete ctx;
        return int(err);
    }
    cublasStatus_t st = cublasCreate(&ctx->blas);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasSetStream(ctx->blas, ctx->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        say("cuBLAS initialisation", cublasGetStatusString(st), cublasGetStatusName(st));
        if (ctx->blas)
            cublasDestroy(ctx->blas);
        cudaStreamDestroy(ctx->stream);
        delete ctx;
        return LONGSCOPE_CUDA_ERR_CUBLAS;
    }
    if (Profiler::wanted())
        ctx->profiler = new (std::nothrow) Profiler(ctx->stream);
    *out = ctx;
    return 0;
}

LONGSCOPE_CUDA_EXPORT void longscope_cuda_context_destroy(LongscopeCudaContext *ctx)
{
    if (!ctx)
        return;
    cudaSetDevice(ctx->device);
    cudaStreamSynchronize(ctx->stream);
    if (ctx->profiler) {
        ctx->profiler->report(stderr);
        delete ctx->profiler;
    }
    if (ctx->scratch)
        cudaFree(ctx->scratch);
    cublasDestroy(ctx->blas);
    cudaStreamDestroy(ctx->stream);
    delete ctx;
}

LONGSCOPE_CUDA_EXPORT const char *longscope_cuda_error(const LongscopeCudaContext *ctx)
{
    return ctx ? ctx->error : "no CUDA context";
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_synchronize(LongscopeCudaContext *ctx)
{
    if (int rc = enter(ctx))
        return rc;
    const cudaError_t err = cudaStreamSynchronize(ctx->stream);
    if (err != cudaSuccess)
        return fail_cuda(ctx, "cudaStreamSynchronize", err);
    waited(ctx);
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_mem_info(LongscopeCudaContext *ctx, uint64_t *free_bytes,
                                                  uint64_t *total_bytes, uint64_t *scratch_bytes)
{
    if (int rc = enter(ctx))
        return rc;
    size_t f = 0, t = 0;
    if (free_bytes || total_bytes) { // a driver call: skipped when only the scratch is asked
        const cudaError_t err = cudaMemGetInfo(&f, &t);
        if (err != cudaSuccess)
            return fail_cuda(ctx, "cudaMemGetInfo", err);
    }
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    if (scratch_bytes)
        *scratch_bytes = ctx->scratch_bytes;
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_alloc(LongscopeCudaContext *ctx, size_t bytes, void **device_ptr)
{
    if (int rc = enter(ctx))
        return rc;
    if (!device_ptr)
        return fail_arg(ctx, "longscope_cuda_alloc: no place for the pointer");
    *device_ptr = nullptr;
    const cudaError_t err = cudaMalloc(device_ptr, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        *device_ptr = nullptr;
        cudaGetLastError(); // not sticky; clear it so later calls do not see it
        char what[96];
        std::snprintf(what, sizeof what, "cudaMalloc of %zu bytes", bytes);
        return fail_cuda(ctx, what, err);
    }
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_free(LongscopeCudaContext *ctx, void *device_ptr)
{
    if (int rc = enter(ctx))
        return rc;
    if (!device_ptr)
        return 0;
    const cudaError_t err = cudaFree(device_ptr);
    return err == cudaSuccess ? 0 : fail_cuda(ctx, "cudaFree", err);
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_upload(LongscopeCudaContext *ctx, void *device_dst, const void *host_src,
                                                size_t bytes)
{
    if (int rc = enter(ctx))
        return rc;
    if (bytes == 0)
        return 0;
    cudaError_t err = cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, ctx->stream);
    if (err != cudaSuccess)
        return fail_cuda(ctx, "cudaMemcpyAsync (upload)", err);
    // The host buffer may be reused as soon as this returns.
    err = cudaStreamSynchronize(ctx->stream);
    if (err != cudaSuccess)
        return fail_cuda(ctx, "upload", err);
    waited(ctx);
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_download(LongscopeCudaContext *ctx, void *host_dst, const void *device_src,
                                                  size_t bytes)
{
    if (int rc = enter(ctx))
        return rc;
    if (bytes == 0)
        return 0;
    cudaError_t err = cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, ctx->stream);
    if (err != cudaSuccess)
        return fail_cuda(ctx, "cudaMemcpyAsync (download)", err);
    err = cudaStreamSynchronize(ctx->stream);
    if (err != cudaSuccess)
        return fail_cuda(ctx, "download", err);
    waited(ctx);
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_memset(LongscopeCudaContext *ctx, void *device_dst, int value, size_t bytes)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "memset");
    const cudaError_t err = cudaMemsetAsync(device_dst, value, bytes, ctx->stream);
    return err == cudaSuccess ? 0 : fail_cuda(ctx, "cudaMemsetAsync", err);
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_embedding(LongscopeCudaContext *ctx, const void *table, int type,
                                                   int64_t n_rows, int64_t n_embd, const int32_t *tokens,
                                                   int64_t n_tokens, float *out)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "embedding");
    if (!weight_type_ok(type))
        return fail_arg(ctx, "embedding: unsupported table type %d (F32, F16 or BF16)", type);
    if (n_rows < 0 || n_embd < 0 || n_tokens < 0)
        return fail_arg(ctx, "embedding: negative size");
    // The grid has one row per token (at most 65535): larger batches go in slices.
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 65535) {
        const int64_t nt = n_tokens - t0 < 65535 ? n_tokens - t0 : 65535;
        if (int rc = check_launch(ctx, "embedding kernel",
                                  launch_embedding(table, ElemType(type), n_rows, n_embd, tokens + t0, nt,
                                                   out + t0 * n_embd, ctx->stream)))
            return rc;
    }
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_rmsnorm(LongscopeCudaContext *ctx, const float *x, const float *weight,
                                                 float *y, int64_t rows, int64_t n, float eps, float weight_offset)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "rmsnorm");
    if (rows < 0 || n < 0 || rows > INT_MAX || n > INT_MAX)
        return fail_arg(ctx, "rmsnorm: sizes out of range (%lld rows of %lld)", (long long)rows, (long long)n);
    launch_rmsnorm(x, weight, y, int(rows), int(n), eps, weight_offset, ctx->stream);
    return check_launch(ctx, "rmsnorm kernel", cudaGetLastError());
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_add(LongscopeCudaContext *ctx, const float *a, const float *b, float *out,
                                             int64_t n)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "add");
    return check_launch(ctx, "add kernel", launch_add(a, b, out, n, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_swiglu(LongscopeCudaContext *ctx, const float *gate, const float *up,
                                                float *out, int64_t n)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "swiglu");
    return check_launch(ctx, "swiglu kernel", launch_swiglu(gate, up, out, n, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_geglu(LongscopeCudaContext *ctx, const float *gate, const float *up,
                                               float *out, int64_t n)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "geglu");
    return check_launch(ctx, "geglu kernel", launch_geglu(gate, up, out, n, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_scale(LongscopeCudaContext *ctx, float *x, float s, int64_t n)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "scale");
    return check_launch(ctx, "scale kernel", launch_scale(x, s, n, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_softcap(LongscopeCudaContext *ctx, float *x, float cap, int64_t n)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "softcap");
    if (!(cap > 0.0f) || !std::isfinite(cap))
        return fail_arg(ctx, "softcap: the cap must be positive (got %g)", double(cap));
    return check_launch(ctx, "softcap kernel", launch_softcap(x, cap, n, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_add_bias(LongscopeCudaContext *ctx, float *x, const float *bias,
                                                  int64_t n_rows, int64_t width)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "add_bias");
    if (n_rows < 0 || width < 0)
        return fail_arg(ctx, "add_bias: negative size (%lld rows of %lld)", (long long)n_rows, (long long)width);
    return check_launch(ctx, "add_bias kernel", launch_add_bias(x, bias, n_rows, width, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_matmul(LongscopeCudaContext *ctx, const void *w, int type, int64_t n_in,
                                                int64_t n_out, const float *x, float *y, int64_t n_tokens)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "matmul");
    if (!weight_type_ok(type))
        return fail_arg(ctx, "matmul: unsupported weight type %d (F32, F16 or BF16)", type);
    if (n_in <= 0 || n_out <= 0 || n_tokens < 0 || n_in > INT_MAX || n_out > INT_MAX || n_tokens > INT_MAX)
        return fail_arg(ctx, "matmul: sizes out of range (n_in %lld, n_out %lld, %lld tokens)", (long long)n_in,
                        (long long)n_out, (long long)n_tokens);
    if (n_tokens == 0)
        return 0;
    if (n_tokens == 1) // float activations, exact products, no rounding
        return check_launch(ctx, "matrix-vector kernel", launch_matvec(w, ElemType(type), n_in, n_out, x, y, ctx->stream));
    // Row-major W [n_out][n_in] is the column-major n_in x n_out matrix W^T, x row-major
    // [n_tokens][n_in] the column-major n_in x n_tokens X, y row-major [n_tokens][n_out] the
    // column-major n_out x n_tokens Y: Y = (W^T)^T X, so A = W with op T, B = X with op N.
    const void *b = x;
    cudaDataType_t ab_type = CUDA_R_32F;
    if (type != LONGSCOPE_CUDA_F32) {
        // cublasGemmEx takes A and B of one type: round the activations to the weight type.
        void *xs = nullptr;
        if (int rc = ensure_scratch(ctx, size_t(n_tokens) * size_t(n_in) * 2, &xs))
            return rc;
        const int64_t count = n_tokens * n_in;
        const cudaError_t err = type == LONGSCOPE_CUDA_F16 ? launch_f32_to_f16(x, xs, count, ctx->stream)
                                                           : launch_f32_to_bf16(x, xs, count, ctx->stream);
        if (int rc = check_launch(ctx, "activation conversion kernel", err))
            return rc;
        b = xs;
        ab_type = type == LONGSCOPE_CUDA_F16 ? CUDA_R_16F : CUDA_R_16BF;
    }
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n_out), int(n_tokens), int(n_in),
                                           &alpha, w, ab_type, int(n_in), b, ab_type, int(n_in), &beta, y, CUDA_R_32F,
                                           int(n_out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : fail_blas(ctx, "cublasGemmEx", st);
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_rope(LongscopeCudaContext *ctx, float *x, int64_t n_tokens, int n_heads,
                                              int head_dim, int n_rot, int style, const double *positions, double pos0,
                                              double pos_step, double pos_scale, const double *inv_freq)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "rope");
    if (n_heads < 0 || head_dim < 0 || n_tokens < 0 || n_tokens > INT_MAX)
        return fail_arg(ctx, "rope: sizes out of range (%lld tokens of %d heads of %d)", (long long)n_tokens, n_heads,
                        head_dim);
    if (int rc = check_rope_args(ctx, "rope", head_dim, n_rot, style, inv_freq))
        return rc;
    return check_launch(ctx, "rope kernel",
                        launch_rope(x, n_tokens, n_heads, head_dim, n_rot, style, positions, pos0, pos_step, pos_scale,
                                    inv_freq, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_rope_keys(LongscopeCudaContext *ctx, const void *src, int src_type,
                                                   int64_t src_row_bytes, float *dst, int64_t j0, int64_t n_keys,
                                                   int n_heads, int head_dim, int n_rot, int style, double pos_scale,
                                                   const double *inv_freq)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "rope_keys");
    if (n_heads < 0 || head_dim < 0 || n_keys < 0 || j0 < 0)
        return fail_arg(ctx, "rope_keys: sizes out of range (%lld keys from %lld)", (long long)n_keys, (long long)j0);
    if (!kv_type_valid(src_type) || (kv_type_blocked(src_type) && head_dim % k_kv_block != 0))
        return fail_arg(ctx, "rope_keys: key type %d needs whole blocks of 32 per head (head_dim %d)", src_type,
                        head_dim);
    if (src_row_bytes < kv_row_bytes(src_type, int64_t(n_heads) * head_dim))
        return fail_arg(ctx, "rope_keys: rows of %lld bytes cannot hold %d heads of %d %s values",
                        (long long)src_row_bytes, n_heads, head_dim, kv_type_name(src_type));
    if (int rc = check_rope_args(ctx, "rope_keys", head_dim, n_rot, style, inv_freq))
        return rc;
    return check_launch(ctx, "rope_keys kernel",
                        launch_rope_keys(KvRows{src, src_type, src_row_bytes}, dst, j0, n_keys, n_heads, head_dim,
                                         n_rot, style, pos_scale, inv_freq, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_kv_convert(LongscopeCudaContext *ctx, const void *src, int src_type,
                                                    void *dst, int dst_type, int64_t n_rows, int64_t n)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "kv_convert");
    if (!kv_type_valid(src_type) || !kv_type_valid(dst_type))
        return fail_arg(ctx, "kv_convert: unknown KV type (%d to %d)", src_type, dst_type);
    if (n_rows < 0 || n < 0)
        return fail_arg(ctx, "kv_convert: negative size (%lld rows of %lld)", (long long)n_rows, (long long)n);
    if ((kv_type_blocked(src_type) || kv_type_blocked(dst_type)) && n % k_kv_block != 0)
        return fail_arg(ctx, "kv_convert: rows of %lld values are not whole blocks of 32 (%s to %s)", (long long)n,
                        kv_type_name(src_type), kv_type_name(dst_type));
    return check_launch(ctx, "KV row conversion",
                        launch_kv_convert(KvRows{src, src_type, kv_row_bytes(src_type, n)}, dst, dst_type, n_rows, n,
                                          ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_attention(LongscopeCudaContext *ctx, const LongscopeCudaAttention *p,
                                                   LongscopeCudaAttentionInfo *info)
{
    if (int rc = enter(ctx))
        return rc;
    if (!p)
        return fail_arg(ctx, "attention: no problem given");
    OpScope scope(ctx, p->algorithm == LONGSCOPE_CUDA_ATTN_SPLIT_KV ? "attention split-KV"
                       : p->algorithm == LONGSCOPE_CUDA_ATTN_TILED  ? "attention tiled"
                                                                     : "attention plain");
    if (p->n_head <= 0 || p->n_head_kv <= 0 || p->head_dim <= 0)
        return fail_arg(ctx, "attention: n_head, n_head_kv and head_dim must be positive (got %d, %d, %d)", p->n_head,
                        p->n_head_kv, p->head_dim);
    if (p->n_head % p->n_head_kv != 0)
        return fail_arg(ctx, "attention: n_head %d is not a multiple of n_head_kv %d", p->n_head, p->n_head_kv);
    if (p->n_q < 0 || p->n_kv < 0 || p->q_pos0 < 0)
        return fail_arg(ctx, "attention: n_q, n_kv and q_pos0 must not be negative");
    if (p->n_q > 0 && (!p->q || !p->out))
        return fail_arg(ctx, "attention: q and out must be set");
    if (p->n_q > 0 && p->n_kv > 0 && (!p->k || !p->v))
        return fail_arg(ctx, "attention: k and v must be set");
    for (int t : {p->k_type, p->v_type})
        if (!kv_type_valid(t))
            return fail_arg(ctx, "attention: unknown KV type %d", t);
        else if (kv_type_blocked(t) && p->head_dim % k_kv_block != 0)
            return fail_arg(ctx, "attention: a %s KV cache needs a head size that is a multiple of 32; got head_dim %d",
                            kv_type_name(t), p->head_dim);
    if (p->scale < 0.0f || !std::isfinite(p->scale) || p->softcap < 0.0f || !std::isfinite(p->softcap) ||
        p->window < 0)
        return fail_arg(ctx, "attention: scale %g, softcap %g and window %lld must not be negative", double(p->scale),
                        double(p->softcap), (long long)p->window);
    if (p->rotate_keys)
        if (int rc = check_rope_args(ctx, "attention", p->head_dim, p->n_rot, p->rope_style, p->inv_freq))
            return rc;

    AttentionArgs a;
    a.n_head = p->n_head;
    a.n_head_kv = p->n_head_kv;
    a.head_dim = p->head_dim;
    a.q = p->q;
    a.n_q = p->n_q;
    a.q_pos0 = p->q_pos0;
    const int64_t ekv = int64_t(p->n_head_kv) * p->head_dim;
    a.k = KvRows{p->k, p->k_type, kv_row_bytes(p->k_type, ekv)};
    a.v = KvRows{p->v, p->v_type, kv_row_bytes(p->v_type, ekv)};
    a.n_kv = p->n_kv;
    a.out = p->out;
    a.scale = p->scale > 0.0f ? p->scale : 1.0f / std::sqrt(float(p->head_dim));
    a.softcap = p->softcap;
    a.window = p->window;
    a.rotate_keys = p->rotate_keys != 0;
    a.n_rot = p->n_rot;
    a.rope_style = p->rope_style;
    a.inv_freq = p->inv_freq;
    a.pos_scale = p->pos_scale;

    LongscopeCudaAttentionInfo local{};
    LongscopeCudaAttentionInfo &out_info = info ? *info : local;
    out_info = LongscopeCudaAttentionInfo{};
    switch (p->algorithm) {
    case LONGSCOPE_CUDA_ATTN_NAIVE: {
        const bool flash = p->causal_flash != 0;
        const size_t need = attention_naive_scratch(a, flash);
        void *scratch = nullptr;
        if (need > 0)
            if (int rc = ensure_scratch(ctx, need, &scratch))
                return rc;
        out_info.scratch_bytes = need;
        return check_launch(ctx, "plain attention kernels", launch_attention_naive(a, flash, scratch, ctx->stream));
    }
    case LONGSCOPE_CUDA_ATTN_TILED:
        if (p->head_dim > k_attn_max_head_dim)
            return fail_arg(ctx, "attention: memory-efficient attention supports head_dim up to %d (got %d)",
                            k_attn_max_head_dim, p->head_dim);
        attention_tiled_shape(p->head_dim, &out_info.q_tile, &out_info.k_tile);
        return check_launch(ctx, "memory-efficient attention kernel",
                            launch_attention_tiled(a, p->causal_flash != 0, p->tile_counter, ctx->stream));
    case LONGSCOPE_CUDA_ATTN_SPLIT_KV: {
        if (p->n_splits < 0 || p->n_splits > 65535)
            return fail_arg(ctx, "attention: n_splits %d out of range", p->n_splits);
        int n_splits = p->n_splits > 0 ? p->n_splits : attention_split_default(p->n_kv);
        // Each range fits the kernel's shared memory.
        const int64_t min_splits = (p->n_kv + k_attn_split_max_chunk - 1) / k_attn_split_max_chunk;
        if (n_splits < min_splits) {
            if (min_splits > 65535)
                return fail_arg(ctx, "attention: %lld keys are too many for split-KV decoding",
                                (long long)p->n_kv);
            n_splits = int(min_splits);
        }
        const size_t need = attention_split_scratch(a, n_splits);
        void *scratch = nullptr;
        if (int rc = ensure_scratch(ctx, need, &scratch))
            return rc;
        out_info.scratch_bytes = need;
        out_info.n_splits = n_splits;
        return check_launch(ctx, "split-KV attention kernels", launch_attention_split(a, n_splits, scratch, ctx->stream));
    }
    default:
        return fail_arg(ctx, "attention: unknown algorithm %d", p->algorithm);
    }
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_matvec_group(LongscopeCudaContext *ctx, int type, int64_t n_in,
                                                      const float *x, int count, const void *const *w,
                                                      const int64_t *n_out, float *const *y)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "matvec_group");
    if (!weight_type_ok(type))
        return fail_arg(ctx, "matvec_group: unsupported weight type %d (F32, F16 or BF16)", type);
    if (count < 1 || count > k_matvec_group_max || !w || !n_out || !y || !x)
        return fail_arg(ctx, "matvec_group: %d matrices (1 to %d, with weights, sizes and outputs)", count,
                        k_matvec_group_max);
    if (n_in <= 0 || n_in > INT_MAX)
        return fail_arg(ctx, "matvec_group: n_in %lld out of range", (long long)n_in);
    for (int m = 0; m < count; ++m)
        if (!w[m] || !y[m] || n_out[m] <= 0 || n_out[m] > INT_MAX)
            return fail_arg(ctx, "matvec_group: matrix %d has no data or %lld rows", m, (long long)n_out[m]);
    return check_launch(ctx, "matrix-vector kernel",
                        launch_matvec_group(w, n_out, y, count, ElemType(type), n_in, x, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_add_rmsnorm(LongscopeCudaContext *ctx, float *x, const float *residual,
                                                     const float *weight, float *y, int64_t rows, int64_t n,
                                                     float eps, float weight_offset)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "add_rmsnorm");
    if (rows < 0 || n < 0 || rows > INT_MAX || n > INT_MAX)
        return fail_arg(ctx, "add_rmsnorm: sizes out of range (%lld rows of %lld)", (long long)rows, (long long)n);
    if (y == residual && rows > 0 && n > 0)
        return fail_arg(ctx, "add_rmsnorm: the output may not be the residual");
    launch_add_rmsnorm(x, residual, weight, y, int(rows), int(n), eps, weight_offset, ctx->stream);
    return check_launch(ctx, "add_rmsnorm kernel", cudaGetLastError());
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_rope_pair(LongscopeCudaContext *ctx, float *x0, int n_heads0, float *x1,
                                                   int n_heads1, int64_t n_tokens, int head_dim, int n_rot,
                                                   int style, double pos0, double pos_scale, const double *inv_freq)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "rope_pair");
    if (n_heads0 < 0 || n_heads1 < 0 || head_dim < 0 || n_tokens < 0 || n_tokens > INT_MAX)
        return fail_arg(ctx, "rope_pair: sizes out of range (%lld tokens of %d and %d heads of %d)",
                        (long long)n_tokens, n_heads0, n_heads1, head_dim);
    if (int rc = check_rope_args(ctx, "rope_pair", head_dim, n_rot, style, inv_freq))
        return rc;
    return check_launch(ctx, "rope kernel",
                        launch_rope_pair(x0, n_heads0, x1, n_heads1, n_tokens, head_dim, n_rot, style, pos0, 1.0,
                                         pos_scale, inv_freq, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_kv_store(LongscopeCudaContext *ctx, const float *k, void *k_dst, int k_type,
                                                  const float *v, void *v_dst, int v_type, int64_t n_rows, int64_t n)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "kv_store");
    if (!kv_type_valid(k_type) || !kv_type_valid(v_type))
        return fail_arg(ctx, "kv_store: unknown KV type (%d, %d)", k_type, v_type);
    if (n_rows < 0 || n < 0)
        return fail_arg(ctx, "kv_store: negative size (%lld rows of %lld)", (long long)n_rows, (long long)n);
    if ((kv_type_blocked(k_type) || kv_type_blocked(v_type)) && n % k_kv_block != 0)
        return fail_arg(ctx, "kv_store: rows of %lld values are not whole blocks of 32 (%s, %s)", (long long)n,
                        kv_type_name(k_type), kv_type_name(v_type));
    return check_launch(ctx, "KV store",
                        launch_kv_store_pair(k, k_dst, k_type, v, v_dst, v_type, n_rows, n, ctx->stream));
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_argmax(LongscopeCudaContext *ctx, const float *logits, int64_t n_rows,
                                                int64_t n, int32_t *out)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "argmax");
    if (n_rows < 0 || n_rows > INT_MAX || (n_rows > 0 && (n <= 0 || n > INT_MAX)))
        return fail_arg(ctx, "argmax: sizes out of range (%lld rows of %lld)", (long long)n_rows, (long long)n);
    return check_launch(ctx, "argmax kernel", launch_argmax(logits, n_rows, n, out, ctx->stream));
}
}
