// Attention alone, one thread: the CPU time of attention_tiled (causal flash; with `naive`,
// attention_naive) over a cache of n_kv keys, best of N rounds, each round one call per layer
// over `layers` caches of their own (22, as TinyLlama: each call reads its rows from memory, as
// in a forward pass; 1 with a small n_kv: the rows stay in cache and only the compute is
// measured), the caches in 4 KiB pages (`2m`: in 2 MiB pages, as the static cache holds them).
// Process CPU time, so a busy machine slows it less than it slows wall time. Not part of the
// build:
//
//   g++ -O2 -std=c++20 -Iengine/src -Iengine/include scripts/bench-attention.cpp
//       build/engine/liblongscope_engine.a -lsentencepiece -lpcre2-8 -ldl -lpthread -o /tmp/bench-attention
//   /tmp/bench-attention TYPE_K TYPE_V N_KV N_HEAD N_HEAD_KV HEAD_DIM ROUNDS N_Q LAYERS [naive|tiled] [4k|2m]
//   /tmp/bench-attention q8_0 q8_0 8192 32 4 64 5 1 22     # decode at depth 8192, TinyLlama's heads
//   /tmp/bench-attention q8_0 q8_0 1024 32 4 64 200 1 1    # the same with the cache in L2
//   /tmp/bench-attention f16 f16 4096 32 4 64 3 256 1      # 256 queries of a prefill at 4096
//   /tmp/bench-attention f32 f32 2048 32 4 64 5 1 22 naive # plain attention, decode at 2048
//   /tmp/bench-attention f32 f32 2048 32 32 128 3 1 4 tiled 2m # caches in 2 MiB pages
// (the documented switches apply: LONGSCOPE_AMX_ATTENTION=0 keeps prefill attention off the
// AMX tiles)
#include "cpu/attention.h"
#include "cpu/quant.h"
#include "cpu/thread_pool.h"
#include "core/system_memory.h"
#include "longscope/cpu_options.h"

#include <algorithm>
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

double cpu_seconds()
{
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

DType parse_type(const std::string &t)
{
    return t == "f32" ? DType::F32 : t == "f16" ? DType::F16 : t == "q8_0" ? DType::Q8_0 : DType::Q4_0;
}

std::vector<uint8_t> encode(DType t, const std::vector<float> &x)
{
    if (t == DType::F32) {
        std::vector<uint8_t> b(x.size() * 4);
        std::memcpy(b.data(), x.data(), b.size());
        return b;
    }
    std::vector<uint8_t> b(row_bytes(t, int64_t(x.size())));
    quantize_row(t, x.data(), b.data(), int64_t(x.size()));
    return b;
}

} // namespace

int main(int argc, char **argv)
{
    // The documented switches (LONGSCOPE_SIMD, LONGSCOPE_AMX_ATTENTION, ...), as longscope-cli
    // reads them.
    set_cpu_options(cpu_options_from_switches([](const char *name) { return std::getenv(name); }));
    const auto arg = [&](int i, const char *def) { return std::string(argc > i ? argv[i] : def); };
    const DType tk = parse_type(arg(1, "f16")), tv = parse_type(arg(2, arg(1, "f16").c_str()));
    const int64_t n_kv = std::stoll(arg(3, "8192"));
    const int n_head = std::stoi(arg(4, "32")), n_head_kv = std::stoi(arg(5, "4")), hd = std::stoi(arg(6, "64"));
    const int rounds = std::stoi(arg(7, "5"));
    const int64_t n_q = std::stoll(arg(8, "1"));
    const int layers = std::stoi(arg(9, "22"));
    const bool naive = arg(10, "tiled") == "naive"; // plain attention (attention_naive) instead
    const int64_t ekv = int64_t(n_head_kv) * hd;

    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(size_t(n_q * n_head * hd)), k(size_t(n_kv * ekv)), v(size_t(n_kv * ekv)), out(q.size());
    for (auto &x : q)
        x = 1.5f * nd(rng);
    for (auto &x : k)
        x = nd(rng);
    for (auto &x : v)
        x = nd(rng);
    // Every layer's cache a copy of its own, so that none is still in cache when it is read.
    const auto kq = encode(tk, k), vq = encode(tv, v);
    // In 4 KiB pages, or with `2m` in 2 MiB pages as the static cache holds them (kv_static.cpp).
    const bool small_pages = arg(11, "4k") != "2m";
    const auto copy_of = [&](const std::vector<uint8_t> &src) {
        std::shared_ptr<uint8_t> b = small_pages
                                         ? std::shared_ptr<uint8_t>(new uint8_t[src.size()], std::default_delete<uint8_t[]>())
                                         : allocate_huge_pages(src.size());
        std::memcpy(b.get(), src.data(), src.size());
        return b;
    };
    std::vector<std::shared_ptr<uint8_t>> kqs, vqs;
    for (int l = 0; l < layers; ++l) {
        kqs.push_back(copy_of(kq));
        vqs.push_back(copy_of(vq));
    }

    ThreadPool pool(1);
    AttentionProblem p;
    p.n_head = n_head;
    p.n_head_kv = n_head_kv;
    p.head_dim = hd;
    p.q = q.data();
    p.n_q = n_q;
    p.q_pos0 = n_kv - n_q;
    p.k_type = tk;
    p.v_type = tv;
    p.n_kv = n_kv;
    p.out = out.data();
    double best = 1e30;
    for (int r = 0; r < rounds; ++r) {
        const double t0 = cpu_seconds();
        for (int l = 0; l < layers; ++l) {
            p.k = kqs[size_t(l)].get();
            p.v = vqs[size_t(l)].get();
            if (naive)
                attention_naive(pool, p, true);
            else
                attention_tiled(pool, p, true);
        }
        best = std::min(best, (cpu_seconds() - t0) / layers);
    }
    // The outputs' sum, and a hash of their bits (FNV-1a) that says whether two builds agree.
    double checksum = 0.0;
    uint64_t bits = 1469598103934665603ull;
    for (float x : out) {
        checksum += x;
        uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        bits = (bits ^ u) * 1099511628211ull;
    }
    std::printf("k=%s v=%s n_kv=%lld heads %d/%d x %d n_q %lld: best %.3f ms per call (checksum %.6f, bits %016llx)\n",
                arg(1, "f16").c_str(), arg(2, arg(1, "f16").c_str()).c_str(), (long long)n_kv, n_head, n_head_kv, hd,
                (long long)n_q, best * 1e3, checksum, (unsigned long long)bits);
}
