// Decode's matrix-vector products alone: one token against COUNT matrices of [N_IN, N_OUT]
// (together larger than the caches, as a forward pass reads them), laid out as a loaded model
// lays them out (one block in 2 MiB pages; the types cpu_wants_packed names packed), each multiplied once
// per round through `matmul` with THREADS threads; GB/s of weights read, best of ROUNDS (wall
// time; with one thread also the thread's CPU time; with more, the bytes over the threads'
// CPU time together, spinning included, times the threads). `layers` runs a decode step's
// products in llama_forward's order for COUNT layers of dim N_IN and FFN N_OUT (q, k, v
// grouped; o; gate, up grouped; down) without the work between them. `probe` reads a block
// of the matrices' size in 2 MiB pages the first of the two ways measure_read_bandwidth reads
// its buffer (a dot product of each thread's part with itself, one stream per thread; the
// other reads five streams side by side and is often faster); `bandwidth` runs
// measure_read_bandwidth itself, as `bench` does; `tile` times packed_tile alone on one group
// of sixteen rows that stays in the caches (multiply-adds per second: the kernel's own speed,
// apart from the memory). Not part of the build:
//
//   g++ -O2 -std=c++20 -Iengine/src -Iengine/include scripts/bench-decode-matvec.cpp
//       build/engine/liblongscope_engine.a -lsentencepiece -lpcre2-8 -ldl -lpthread -o /tmp/bench-decode-matvec
//   /tmp/bench-decode-matvec MODE TYPE N_IN N_OUT COUNT THREADS ROUNDS [TOKENS]
//   /tmp/bench-decode-matvec matmul f16 2048 5632 8 1 20    # TinyLlama's gate, 185 MB
//   /tmp/bench-decode-matvec probe f16 2048 5632 8 1 20     # the probe over as many bytes
//   /tmp/bench-decode-matvec layers q8_0 2048 5632 22 2 8   # TinyLlama's 22 layers
//   /tmp/bench-decode-matvec matmul q8_0 2048 5632 1 1 10 64 # prefill's products: 64 tokens, GOP/s
//   /tmp/bench-decode-matvec bandwidth f16 0 0 0 2 3        # measure_read_bandwidth, best of 3
//   /tmp/bench-decode-matvec tile q6_k 2048 16 1 1 2000 4   # the packed kernel alone, tiles of 4 tokens
//   BENCH_SETTINGS="0 512:4096 1024:4096" /tmp/bench-decode-matvec layers q4_k 2048 5632 22 2 8
//                                         # the prefetch settings in turn, each round
//   BENCH_SETTINGS="LONGSCOPE_ACT_SPAN=32 LONGSCOPE_ACT_SPAN=256" /tmp/bench-decode-matvec layers q4_k 2048 5632 22 2 8
//                                         # any other switch as NAME=VALUE
#include "cpu/ops.h"
#include "cpu/packed.h"
#include "cpu/quant.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"
#include "longscope/cpu_options.h"
#include "longscope/hardware.h"
#include "model/weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace longscope;

namespace {

double thread_cpu_seconds()
{
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double process_cpu_seconds()
{
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double wall_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

DType parse_type(const std::string &t)
{
    if (t == "f16")
        return DType::F16;
    if (t == "bf16")
        return DType::BF16;
    if (t == "q8_0")
        return DType::Q8_0;
    if (t == "q3_k")
        return DType::Q3_K;
    if (t == "q4_k")
        return DType::Q4_K;
    if (t == "q5_k")
        return DType::Q5_K;
    if (t == "q6_k")
        return DType::Q6_K;
    if (t == "q2_k")
        return DType::Q2_K;
    if (t == "q4_0")
        return DType::Q4_0;
    if (t == "q5_0")
        return DType::Q5_0;
    if (t == "q4_1")
        return DType::Q4_1;
    if (t == "q5_1")
        return DType::Q5_1;
    if (t == "iq4_nl")
        return DType::IQ4_NL;
    std::fprintf(stderr, "type: f16, bf16, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, q4_0, q4_1, q5_0, q5_1 or iq4_nl\n");
    std::exit(2);
}

// A block of `bytes` in 2 MiB pages, as prepare_weights asks for the weights' copy.
std::shared_ptr<uint8_t> huge_block(size_t bytes)
{
    constexpr size_t huge = size_t(2) << 20;
    const size_t rounded = (bytes + huge - 1) / huge * huge;
    std::shared_ptr<uint8_t> buf(static_cast<uint8_t *>(std::aligned_alloc(huge, rounded)), std::free);
    if (!buf) {
        std::fprintf(stderr, "cannot allocate %zu bytes\n", rounded);
        std::exit(1);
    }
    ::madvise(buf.get(), rounded, MADV_HUGEPAGE);
    return buf;
}

// One row of n values in `type`: F16 halves, or quantized blocks.
void quantize_or_store(DType type, const float *src, uint8_t *dst, int64_t n)
{
    if (type != DType::F16 && type != DType::BF16) {
        quantize_row(type, src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == DType::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
    }
}

struct Matrices {
    std::shared_ptr<uint8_t> block;
    std::vector<WeightView> w;
    size_t bytes = 0; // what one round reads
};

WeightView matrix_view(DType type, int64_t n_in, int64_t n_out)
{
    WeightView w;
    w.type = type;
    w.shape = {n_in, n_out};
    return w;
}

// Whether matrices of this type and shape are packed at load here.
bool packed_here(DType type, int64_t n_in, int64_t n_out)
{
    return cpu_wants_packed(matrix_view(type, n_in, n_out));
}

// Bytes of one matrix as a loaded model holds it.
size_t matrix_bytes(DType type, int64_t n_in, int64_t n_out)
{
    return packed_here(type, n_in, n_out) ? packed_size(type, n_in, n_out) : row_bytes(type, n_in) * size_t(n_out);
}

Matrices make_matrices(DType type, int64_t n_in, int64_t n_out, int count)
{
    Matrices m;
    const WeightView proto = matrix_view(type, n_in, n_out);
    const bool packed = packed_here(type, n_in, n_out);
    const size_t one = matrix_bytes(type, n_in, n_out);
    const size_t stride = (one + 63) / 64 * 64;
    m.block = huge_block(stride * size_t(count));
    m.bytes = one * size_t(count);
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    std::vector<float> row(static_cast<size_t>(n_in));
    std::vector<uint8_t> rows(packed ? row_bytes(type, n_in) * size_t(n_out) : 0);
    for (int c = 0; c < count; ++c) {
        uint8_t *dst = m.block.get() + stride * size_t(c);
        uint8_t *out = packed ? rows.data() : dst;
        for (int64_t r = 0; r < n_out; ++r) {
            for (float &v : row)
                v = dist(rng);
            quantize_or_store(type, row.data(), out + row_bytes(type, n_in) * size_t(r), n_in);
        }
        WeightView w = proto;
        if (packed) {
            pack_rows(type, rows.data(), n_in, dst, 0, n_out / packed_group_rows);
            w.cpu_packed = dst;
        } else {
            w.data = dst;
        }
        w.nbytes = one;
        m.w.push_back(w);
    }
    return m;
}

} // namespace

int main(int argc, char **argv)
{
    // The documented switches (LONGSCOPE_SIMD, LONGSCOPE_AMX, ...), as longscope-cli reads them.
    set_cpu_options(cpu_options_from_switches([](const char *name) { return std::getenv(name); }));
    const auto arg = [&](int i, const char *def) { return std::string(argc > i ? argv[i] : def); };
    const std::string mode = arg(1, "matmul");
    const DType type = parse_type(arg(2, "f16"));
    const int64_t n_in = std::stoll(arg(3, "2048")), n_out = std::stoll(arg(4, "5632"));
    const int count = std::stoi(arg(5, "8")), n_threads = std::stoi(arg(6, "1")), rounds = std::stoi(arg(7, "20"));
    const int n_tokens = std::stoi(arg(8, "1")); // matmul: tokens per product (prefill's tiles from 3)

    if (mode == "bandwidth") {
        double best = 0;
        for (int r = 0; r < rounds; ++r)
            best = std::max(best, measure_read_bandwidth(n_threads));
        std::printf("bandwidth threads %d: %.1f GB/s (best of %d x 5)\n", n_threads, best / 1e9, rounds);
        return 0;
    }

    if (mode == "tile") {
        // The packed kernel alone: one group of sixteen rows of N_IN values (in L1 or L2) against
        // 64 tokens, TOKENS (1 to 4) per packed_tile call, one thread; the best of ROUNDS passes.
        if (!packed_here(type, n_in, packed_group_rows)) {
            std::fprintf(stderr, "tile: %s is not packed here\n", arg(2, "f16").c_str());
            return 1;
        }
        const Matrices m = make_matrices(type, n_in, packed_group_rows, 1);
        constexpr int64_t tokens = 64;
        std::mt19937 rng(7);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(size_t(tokens * n_in)), y(size_t(tokens * packed_group_rows));
        for (float &v : x)
            v = dist(rng);
        QuantizedActs acts;
        quantize_acts(nullptr, x.data(), tokens, n_in, acts);
        const int per_call = std::clamp(n_tokens, 1, 4);
        double best = 1e30, check = 0;
        for (int r = 0; r < rounds; ++r) {
            const double w0 = wall_seconds();
            for (int64_t t = 0; t < tokens; t += per_call)
                packed_tile(type, m.w[0].cpu_packed, n_in, 0, acts, t, int(std::min<int64_t>(per_call, tokens - t)),
                            y.data() + t * packed_group_rows, packed_group_rows);
            best = std::min(best, wall_seconds() - w0);
            check += y[size_t(r) % y.size()];
        }
        std::printf("tile %s n_in %lld, %d tokens a call: best %.1f us, %.1f GMAC/s (check %.6g)\n",
                    arg(2, "f16").c_str(), (long long)n_in, per_call, best * 1e6,
                    double(packed_group_rows) * double(n_in) * tokens / best / 1e9, check);
        return 0;
    }

    ThreadPool pool(n_threads);
    std::vector<double> wall, cpu, pcpu;
    size_t bytes = 0;
    if (mode == "probe") {
        // measure_read_bandwidth's one-stream loop over a block of the matrices' size in 2 MiB pages.
        bytes = matrix_bytes(type, n_in, n_out) * size_t(count);
        const size_t n = bytes / sizeof(float);
        std::shared_ptr<uint8_t> block = huge_block(n * sizeof(float));
        float *buf = reinterpret_cast<float *>(block.get());
        const int64_t per_thread = (int64_t(n) + pool.size() - 1) / pool.size();
        pool.parallel_for(
            int64_t(n), [&](int64_t b, int64_t e) { std::memset(buf + b, 0, size_t(e - b) * sizeof(float)); },
            per_thread);
        const CpuKernels &k = cpu_kernels();
        volatile float sink = 0;
        for (int r = 0; r < rounds; ++r) {
            std::vector<float> partial(size_t(pool.size()), 0.0f);
            const double w0 = wall_seconds(), c0 = thread_cpu_seconds(), p0 = process_cpu_seconds();
            pool.parallel_for(
                int64_t(n), [&](int64_t b, int64_t e) { partial[size_t(b / per_thread)] = k.dot(buf + b, buf + b, e - b); },
                per_thread);
            cpu.push_back(thread_cpu_seconds() - c0);
            pcpu.push_back(process_cpu_seconds() - p0);
            wall.push_back(wall_seconds() - w0);
            for (float p : partial)
                sink = sink + p;
        }
    } else if (mode == "layers") {
        // A decode step's products as llama_forward runs them, for COUNT layers of dim N_IN and
        // FFN N_OUT (32/4 heads: k and v N_IN / 8 rows): q, k, v in one group; o; gate, up in one
        // group; down. The elementwise work and attention between them left out.
        const int64_t d = n_in, f = n_out, kv = n_in / 8;
        const Matrices q = make_matrices(type, d, d, count), k = make_matrices(type, d, kv, count),
                       v = make_matrices(type, d, kv, count), o = make_matrices(type, d, d, count),
                       g = make_matrices(type, d, f, count), u = make_matrices(type, d, f, count),
                       dn = make_matrices(type, f, d, count);
        bytes = q.bytes + k.bytes + v.bytes + o.bytes + g.bytes + u.bytes + dn.bytes;
        std::vector<float> x(static_cast<size_t>(f)), y(static_cast<size_t>(4 * f));
        std::mt19937 rng(7);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        for (float &e : x)
            e = dist(rng);
        // BENCH_SETTINGS="0 512:4096 1024:8192": LONGSCOPE_PREFETCH values taken in turn each
        // round, so that every setting meets the machine's memory in the same state; the best
        // and median of each are printed. Entries NAME=VALUE set another switch instead
        // (BENCH_SETTINGS="LONGSCOPE_ACT_SPAN=32 LONGSCOPE_ACT_SPAN=256").
        const char *settings_env = std::getenv("BENCH_SETTINGS");
        std::vector<std::string> settings;
        for (std::string rest = settings_env ? settings_env : ""; !rest.empty();) {
            const size_t sp = rest.find(' ');
            if (sp != 0)
                settings.push_back(rest.substr(0, sp));
            rest = sp == std::string::npos ? "" : rest.substr(sp + 1);
        }
        std::vector<std::vector<double>> per_setting(settings.size());
        for (int r = 0; r < rounds * int(std::max<size_t>(1, settings.size())); ++r) {
            if (!settings.empty()) {
                const std::string &v = settings[size_t(r) % settings.size()];
                // NAME=VALUE sets that switch; a bare value is LONGSCOPE_PREFETCH's.
                const size_t eq = v.find('=');
                const std::string sw = eq == std::string::npos ? "LONGSCOPE_PREFETCH" : v.substr(0, eq);
                const std::string val = eq == std::string::npos ? v : v.substr(eq + 1);
                set_cpu_options(cpu_options_from_switches([&](const char *name) -> const char * {
                    return std::string_view(name) == sw ? val.c_str() : std::getenv(name);
                }));
            }
            const double w0 = wall_seconds(), c0 = thread_cpu_seconds(), p0 = process_cpu_seconds();
            for (int l = 0; l < count; ++l) {
                const MatmulOut qkv[] = {{&q.w[size_t(l)], y.data()}, {&k.w[size_t(l)], y.data() + d},
                                         {&v.w[size_t(l)], y.data() + d + kv}};
                matmul_group(pool, qkv, x.data(), 1);
                matmul(pool, o.w[size_t(l)], x.data(), y.data(), 1);
                const MatmulOut gu[] = {{&g.w[size_t(l)], y.data()}, {&u.w[size_t(l)], y.data() + f}};
                matmul_group(pool, gu, x.data(), 1);
                matmul(pool, dn.w[size_t(l)], x.data(), y.data(), 1);
            }
            cpu.push_back(thread_cpu_seconds() - c0);
            pcpu.push_back(process_cpu_seconds() - p0);
            wall.push_back(wall_seconds() - w0);
            if (!settings.empty())
                per_setting[size_t(r) % settings.size()].push_back(wall.back());
        }
        for (size_t i = 0; i < settings.size(); ++i) {
            std::vector<double> &t = per_setting[i];
            std::sort(t.begin(), t.end());
            const bool named = settings[i].find('=') != std::string::npos;
            std::printf("%s%s: best %.1f GB/s, median %.1f GB/s\n", named ? "" : "LONGSCOPE_PREFETCH=", settings[i].c_str(),
                        double(bytes) / 1e9 / t.front(), double(bytes) / 1e9 / t[t.size() / 2]);
        }
    } else {
        const Matrices m = make_matrices(type, n_in, n_out, count);
        bytes = m.bytes;
        std::vector<float> x(static_cast<size_t>(n_in * n_tokens)), y(static_cast<size_t>(n_out * n_tokens));
        std::mt19937 rng(7);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        for (float &v : x)
            v = dist(rng);
        double check = 0;
        for (int r = 0; r < rounds; ++r) {
            const double w0 = wall_seconds(), c0 = thread_cpu_seconds(), p0 = process_cpu_seconds();
            for (const WeightView &w : m.w)
                matmul(pool, w, x.data(), y.data(), n_tokens);
            cpu.push_back(thread_cpu_seconds() - c0);
            pcpu.push_back(process_cpu_seconds() - p0);
            wall.push_back(wall_seconds() - w0);
            check += double(y[0]) + double(y[size_t(n_out - 1)]);
        }
        std::printf("check %.9g\n", check);
    }
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    std::sort(pcpu.begin(), pcpu.end());
    const double gb = double(bytes) / 1e9;
    std::printf("%s %s %lldx%lld x%d (%.0f MB) threads %d: best %.1f GB/s, median %.1f GB/s (wall)", mode.c_str(),
                arg(2, "f16").c_str(), (long long)n_out, (long long)n_in, count, gb * 1e3, n_threads, gb / wall.front(),
                gb / wall[wall.size() / 2]);
    if (n_threads == 1)
        std::printf("; best %.1f GB/s of CPU time", gb / cpu.front());
    else // every thread's CPU time, spinning included: GB per CPU-second of the threads together, times threads
        std::printf("; best %.1f GB/s per thread of CPU time", gb * n_threads / pcpu.front());
    if (mode == "matmul" && n_tokens > 1) // operations (a multiply and an add each) per second, best wall time
        std::printf("; %d tokens: %.1f GOP/s", n_tokens,
                    2.0 * double(n_in) * double(n_out) * count * n_tokens / wall.front() / 1e9);
    std::printf("\n");
    return 0;
}
