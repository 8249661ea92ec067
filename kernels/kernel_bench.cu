// longscope-cuda-kernel-bench: device time of the plugin's decode and prefill kernels on the
// GPU present, without the host's launch overhead: each measurement is a CUDA graph of `reps`
// launches replayed once, timed with events (the host-launched loop is timed too, for the
// launch overhead). Prints one table: kernel, shape, microseconds per call, and GB/s or
// TFLOP/s. Built with the plugin (-DLONGSCOPE_CUDA=ON); not installed.
#include "attention.cuh"
#include "matvec.cuh"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

using namespace longscope::cuda;

namespace {

#define CHECK(x)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                       \
            std::exit(1);                                                                                          \
        }                                                                                                          \
    } while (0)

cudaStream_t g_stream;

__global__ void empty_kernel() {}

__global__ void fill_kernel(float *p, size_t n, float scale)
{
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = scale * float(int((i * 2654435761u) % 2001) - 1000) / 1000.0f;
}

__global__ void fill_half_kernel(__half *p, size_t n)
{
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = __float2half(0.02f * float(int((i * 2654435761u) % 2001) - 1000) / 1000.0f);
}

void *dev(size_t bytes)
{
    void *p = nullptr;
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

float *dev_floats(size_t n, float scale = 1.0f)
{
    auto *p = static_cast<float *>(dev(n * 4));
    fill_kernel<<<1024, 256, 0, g_stream>>>(p, n, scale);
    CHECK(cudaGetLastError());
    return p;
}

// Microseconds per call of `launch` (which queues one call), from a graph of reps calls.
double time_graph(const std::function<void()> &launch, int reps)
{
    launch(); // warm-up (and any lazy loading) outside the capture
    CHECK(cudaStreamSynchronize(g_stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; ++i)
        launch();
    CHECK(cudaStreamEndCapture(g_stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, g_stream)); // warm
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, g_stream));
    CHECK(cudaGraphLaunch(exec, g_stream));
    CHECK(cudaEventRecord(b, g_stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return 1000.0 * ms / reps;
}

// Microseconds per call launched one by one from the host.
double time_host(const std::function<void()> &launch, int reps)
{
    launch();
    CHECK(cudaStreamSynchronize(g_stream));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, g_stream));
    for (int i = 0; i < reps; ++i)
        launch();
    CHECK(cudaEventRecord(b, g_stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 1000.0 * ms / reps;
}

void row(const char *kernel, const std::string &shape, double us, double graph_us, const char *unit, double rate)
{
    std::printf("| %s | %s | %.2f | %.2f | %.1f %s |\n", kernel, shape.c_str(), us, graph_us, rate, unit);
    std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
    // A second argument runs only the kernels whose name contains it ("matvec", "attention").
    const std::string only = argc > 2 ? argv[2] : "";
    auto wanted = [&](const char *kernel) { return only.empty() || std::string(kernel).find(only) != std::string::npos; };
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    std::printf("device: %s, %d multiprocessors, %d MB L2\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20);
    std::printf("| kernel | shape | us/call launched from the host | us/call in a graph | rate (graph) |\n");
    std::printf("|---|---|---|---|---|\n");

    {
        auto launch = [] { empty_kernel<<<1, 32, 0, g_stream>>>(); };
        row("empty kernel", "1 x 32", time_host(launch, reps), time_graph(launch, reps), "", 0.0);
    }

    // Matrix-vector products, F16 weights, TinyLlama's and a 7B model's shapes.
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS)
        return 1;
    cublasSetStream(blas, g_stream);
    struct Mv {
        int n_out, n_in, tokens;
    };
    for (const Mv m : std::vector<Mv>{Mv{2048, 2048, 1}, Mv{256, 2048, 1}, Mv{5632, 2048, 1}, Mv{2048, 5632, 1},
                       Mv{32000, 2048, 1}, Mv{4096, 4096, 1}, Mv{14336, 4096, 1}, Mv{4096, 14336, 1},
                       Mv{5632, 2048, 2}, Mv{5632, 2048, 8}}) {
        if (!wanted("matvec"))
            break;
        const size_t nw = size_t(m.n_out) * m.n_in;
        auto *w = static_cast<__half *>(dev(nw * 2));
        fill_half_kernel<<<1024, 256, 0, g_stream>>>(w, nw);
        float *x = dev_floats(size_t(m.n_in) * m.tokens), *y = dev_floats(size_t(m.n_out) * m.tokens);
        auto *xh = static_cast<__half *>(dev(size_t(m.n_in) * m.tokens * 2));
        auto launch = [&] {
            if (m.tokens == 1)
                launch_matvec(w, ElemType::F16, m.n_in, m.n_out, x, y, g_stream);
        };
        const std::string shape = std::to_string(m.n_out) + " x " + std::to_string(m.n_in) + ", " +
                                  std::to_string(m.tokens) + " token" + (m.tokens > 1 ? "s" : "");
        if (m.tokens == 1) {
            const double g = time_graph(launch, reps);
            row("matvec f16", shape, time_host(launch, reps), g, "GB/s", double(nw) * 2 / (g * 1e3));
        }
        const float alpha = 1.0f, beta = 0.0f;
        auto gemm = [&] {
            cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, m.n_out, m.tokens, m.n_in, &alpha, w, CUDA_R_16F, m.n_in,
                         xh, CUDA_R_16F, m.n_in, &beta, y, CUDA_R_32F, m.n_out, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
        };
        const double gb = time_graph(gemm, reps);
        row("cublasGemmEx f16", shape, time_host(gemm, reps), gb, "GB/s", double(nw) * 2 / (gb * 1e3));
        CHECK(cudaFree(w));
        CHECK(cudaFree(x));
        CHECK(cudaFree(y));
        CHECK(cudaFree(xh));
    }

    // Attention: TinyLlama's heads (32 query heads, 4 KV heads of 64) and a 7B model's (32 x 8
    // KV heads of 128); a decode step (split-KV) at several depths, and a 1024-query prefill
    // chunk (tiled) at the end of the context.
    struct At {
        int n_head, n_head_kv, hd, kv_type;
        int64_t n_q, n_kv;
    };
    for (const At t : std::vector<At>{At{32, 4, 64, k_kv_f32, 1, 512}, At{32, 4, 64, k_kv_f32, 1, 8192},
                       At{32, 4, 64, k_kv_f32, 1, 32768}, At{32, 4, 64, k_kv_f16, 1, 32768},
                       At{32, 8, 128, k_kv_f16, 1, 32768}, At{32, 4, 64, k_kv_f32, 1024, 8192},
                       At{32, 8, 128, k_kv_f32, 1024, 8192}}) {
        if (!wanted(t.n_q == 1 ? "attention split-KV" : "attention tiled"))
            continue;
        const int64_t ekv = int64_t(t.n_head_kv) * t.hd;
        const int64_t rb = kv_row_bytes(t.kv_type, ekv);
        float *q = dev_floats(size_t(t.n_q) * t.n_head * t.hd), *out = dev_floats(size_t(t.n_q) * t.n_head * t.hd);
        void *k = dev(size_t(rb) * t.n_kv), *v = dev(size_t(rb) * t.n_kv);
        if (t.kv_type == k_kv_f32) {
            fill_kernel<<<1024, 256, 0, g_stream>>>(static_cast<float *>(k), size_t(ekv) * t.n_kv, 1.0f);
            fill_kernel<<<1024, 256, 0, g_stream>>>(static_cast<float *>(v), size_t(ekv) * t.n_kv, 1.0f);
        } else {
            fill_half_kernel<<<1024, 256, 0, g_stream>>>(static_cast<__half *>(k), size_t(ekv) * t.n_kv);
            fill_half_kernel<<<1024, 256, 0, g_stream>>>(static_cast<__half *>(v), size_t(ekv) * t.n_kv);
        }
        AttentionArgs a;
        a.n_head = t.n_head;
        a.n_head_kv = t.n_head_kv;
        a.head_dim = t.hd;
        a.q = q;
        a.n_q = t.n_q;
        a.q_pos0 = t.n_kv - t.n_q;
        a.k = KvRows{k, t.kv_type, rb};
        a.v = KvRows{v, t.kv_type, rb};
        a.n_kv = t.n_kv;
        a.out = out;
        a.scale = 0.125f;
        const std::string shape = std::to_string(t.n_head) + "/" + std::to_string(t.n_head_kv) + " heads of " +
                                  std::to_string(t.hd) + ", " + std::to_string(t.n_q) + " x " +
                                  std::to_string(t.n_kv) + (t.kv_type == k_kv_f32 ? " f32" : " f16");
        if (t.n_q == 1) {
            // As the backend chooses: about 512 blocks of (query, KV head), ranges of 32 keys or more.
            const int64_t rows = t.n_q * t.n_head_kv, most = (t.n_kv + 31) / 32;
            int n_splits = int(std::min<int64_t>(std::max<int64_t>(1, (512 + rows - 1) / rows), std::min<int64_t>(most, 1024)));
            void *scratch = dev(attention_split_scratch(a, n_splits));
            auto launch = [&] { launch_attention_split(a, n_splits, scratch, g_stream); };
            const double g = time_graph(launch, reps);
            row("attention split-KV", shape + ", " + std::to_string(n_splits) + " ranges", time_host(launch, reps), g,
                "GB/s of KV", double(rb) * 2 * t.n_kv / (g * 1e3));
            CHECK(cudaFree(scratch));
        } else {
            auto launch = [&] { launch_attention_tiled(a, true, nullptr, g_stream); };
            const double g = time_graph(launch, std::max(1, reps / 20));
            // Causal: query i of the chunk sees n_kv - n_q + i + 1 keys; 4 flops per key and dim.
            const double keys = double(t.n_q) * double(t.n_kv - t.n_q) + double(t.n_q) * double(t.n_q + 1) / 2;
            row("attention tiled", shape, time_host(launch, std::max(1, reps / 20)), g, "TFLOP/s",
                4.0 * keys * t.hd * t.n_head / (g * 1e6));
        }
        CHECK(cudaGetLastError());
        CHECK(cudaFree(q));
        CHECK(cudaFree(out));
        CHECK(cudaFree(k));
        CHECK(cudaFree(v));
    }
    CHECK(cudaStreamSynchronize(g_stream));
    cublasDestroy(blas);
    return 0;
}
