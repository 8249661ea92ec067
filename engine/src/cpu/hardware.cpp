#include "longscope/hardware.h"

#include "core/system_memory.h"
#include "cpu/attention.h"
#include "cpu/attention_qk.h"
#include "cpu/compute_peak.h"
#include "cpu/kernel_table.h"
#include "cpu/packed.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"
#include "kv/kv_store.h"
#include "longscope/errors.h"
#include "model/weights.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace longscope {

std::string cpu_kernel_name()
{
    const CpuKernelTable &t = kernel_table();
    std::string s = vector_level_name(t.level);
    s += std::string(" (quantized weights: ") + qkernel_name(t.integer) + " integer dot products";
    const std::string from = std::to_string(bf16_min_tokens) + " tokens";
    if (t.bf16_dot && t.pack_weights)
        s += " (for packed Q2_K-Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS matrices at any token count), BF16 dot products for other matrices "
             "from " + from;
    else if (t.bf16_dot)
        s += ", BF16 dot products from " + from;
    s += ")";
    if (t.pack_half)
        s += "; F16 and BF16 matrices packed sixteen rows to a vector";
    if (t.amx)
        s += "; AMX BF16 tiles for every matrix but F32 from " + std::to_string(amx_min_tokens) + " tokens" +
             (t.amx_attention ? ", and for prefill attention" : "");
    return s;
}

std::string cpu_kernel_warning()
{
    if (kernel_table().level != VectorLevel::Portable)
        return {};
    if (!cpu_features().avx2)
        return "this CPU lacks AVX2, FMA or F16C: Longscope runs its portable kernels, several times slower";
    return "LONGSCOPE_SIMD=portable: the portable kernels run, several times slower than this CPU allows";
}

struct ReadBandwidthProbe::State {
    std::shared_ptr<uint8_t> block;
    float *buf = nullptr;
    size_t n = 0;
    ThreadPool pool;
    int64_t per_thread = 0;
    std::vector<float> partial;
    bool streams = false; // read() reads several streams side by side (read_pass)
    volatile float sink = 0;

    explicit State(int n_threads) : pool(std::max(1, n_threads)) {}
};

ReadBandwidthProbe::ReadBandwidthProbe(int n_threads, uint64_t bytes) : m_state(std::make_unique<State>(n_threads))
{
    State &s = *m_state;
    s.n = size_t(bytes / sizeof(float));
    // In 2 MiB pages, as the weights' copy a decode step streams (model/prepare_weights.cpp):
    // from 4 KiB pages one core read this loop at 22 GB/s here, from 2 MiB pages at 32-34.
    s.block = allocate_huge_pages(s.n * sizeof(float));
    if (!s.block)
        throw OutOfMemory("cannot allocate " + std::to_string(bytes >> 20) + " MiB to measure memory bandwidth");
    s.buf = reinterpret_cast<float *>(s.block.get());
    // Touch every page from the threads that will read it (first-touch placement).
    // One piece per thread (min_per_thread = n / threads), the same split in both loops.
    s.per_thread = (int64_t(s.n) + s.pool.size() - 1) / s.pool.size();
    s.partial.assign(size_t(s.pool.size()), 0.0f);
    s.pool.parallel_for(
        int64_t(s.n), [&](int64_t b, int64_t e) { std::memset(s.buf + b, 0, size_t(e - b) * sizeof(float)); },
        s.per_thread);
    // read() reads in whichever pattern is the faster here: the better of three tries each.
    int several = 0;
    for (int rep = 0; rep < 3; ++rep) {
        read_both();
        several += s.streams;
    }
    s.streams = several >= 2;
}

namespace {

// The stretch of a thread's chunk each of the probe's side-by-side streams reads: 64 KiB.
constexpr int64_t k_probe_stretch = int64_t(64) << 10 >> 2;

// One pass over the buffer, each thread over its chunk: bytes per second. A dot product of
// the chunk with itself streams it once (both operands hit the same cache lines) with the
// widest loads the CPU has; with `streams`, the chunk is read in blocks of five 64 KiB
// stretches side by side (dot4: one row against four, all five advancing together), the rest
// as one stream. A core can read several nearby streams faster than one: on the AMD EPYC
// without AVX-512 (family 25 model 1), one core over 1 GiB in 2 MiB pages, GB/s, one stream
// 21.0, four 16-64 KiB apart 27.7-29.6, eight 16 KiB apart 29.3; two cores 34.2 against
// 37.5-38.7. Decode's kernels read several streams where that is faster (packed.cpp), so a
// probe of one stream would understate the bandwidth they can reach.
double read_pass(ReadBandwidthProbe::State &s, bool streams)
{
    const CpuKernels &k = cpu_kernels();
    const auto t0 = std::chrono::steady_clock::now();
    s.pool.parallel_for(int64_t(s.n), [&](int64_t b, int64_t e) {
        float sum = 0;
        int64_t i = b;
        if (streams)
            for (; i + 5 * k_probe_stretch <= e; i += 5 * k_probe_stretch) {
                float o[4];
                k.dot4(s.buf + i, s.buf + i + k_probe_stretch, k_probe_stretch, k_probe_stretch, o);
                sum += o[0] + o[1] + o[2] + o[3];
            }
        s.partial[size_t(b / s.per_thread)] = sum + k.dot(s.buf + i, s.buf + i, e - i);
    }, s.per_thread);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float p : s.partial)
        s.sink = s.sink + p;
    return double(s.n * sizeof(float)) / seconds;
}

} // namespace

ReadBandwidthProbe::~ReadBandwidthProbe() = default;

double ReadBandwidthProbe::read() { return read_pass(*m_state, m_state->streams); }

double ReadBandwidthProbe::read_both()
{
    const double one = read_pass(*m_state, false), several = read_pass(*m_state, true);
    m_state->streams = several > one;
    return std::max(one, several);
}

double measure_read_bandwidth(int n_threads, uint64_t bytes)
{
    ReadBandwidthProbe probe(n_threads, bytes);
    double best = 0;
    for (int rep = 0; rep < 5; ++rep)
        best = std::max(best, probe.read_both());
    return best;
}

ComputeFamily prefill_compute_family(std::string_view weight_type)
{
    for (uint32_t id = 0; id < 64; ++id) {
        const auto traits = dtype_traits(id);
        if (!traits || traits->name != weight_type)
            continue;
        WeightView w;
        w.type = DType(id);
        w.shape = {256, packed_group_rows};
        // A model's matrices of this type are packed at load where the kernel table packs it;
        // the path looks only at whether they are.
        static const uint8_t packed_marker = 0;
        if (cpu_wants_packed(w))
            w.cpu_packed = &packed_marker;
        switch (matmul_path(w, bf16_min_tokens)) {
        case QuantMatmul::Bf16: return ComputeFamily::Bf16Dot;
        case QuantMatmul::Integer: return ComputeFamily::Int8Dot;
        case QuantMatmul::Amx: return ComputeFamily::AmxBf16;
        default: return ComputeFamily::F32Fma;
        }
    }
    return ComputeFamily::F32Fma;
}

AttentionFamilies prefill_attention_families(KvType k_type, bool keys_before_rope, bool memory_efficient,
                                             int head_dim)
{
    // attention_naive and attention_tiled score keys in integers under the same rule; only the
    // tiled path (memory-efficient attention) takes the AMX tiles.
    const DType kt = kv_dtype(k_type);
    if (keys_scored_in_integers(kt, keys_before_rope))
        return {ComputeFamily::Int8Dot, ComputeFamily::F32Fma};
    if (memory_efficient && attention_tiles_take(kt, keys_before_rope, head_dim))
        return {ComputeFamily::AmxBf16, ComputeFamily::AmxBf16};
    return {};
}

std::string compute_family_name(ComputeFamily family) { return compute_loop(family).name; }

double measure_compute_peak(int n_threads, ComputeFamily family)
{
    const ComputeLoop loop = compute_loop(family);
    // About 1e8 operations per thread and repetition: milliseconds at any vector width.
    const int64_t iterations = std::max<int64_t>(1, int64_t(1e8 / loop.ops_per_iteration));
    ThreadPool pool(std::max(1, n_threads));
    double best = 0;
    std::atomic<float> sink{0};
    for (int rep = 0; rep < 5; ++rep) {
        // One piece per thread, each timing itself: the peak is the sum of the pieces' rates,
        // what the threads reach when each has a core (a thread that is late to start leaves
        // its piece to another, which runs it after its own at the same rate).
        std::vector<double> rates(size_t(pool.size()), 0.0);
        pool.parallel_for(pool.size(), [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                sink.store(sink.load(std::memory_order_relaxed) + loop.run(iterations), std::memory_order_relaxed);
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                rates[size_t(i)] = s > 0 ? double(iterations) * loop.ops_per_iteration / s : 0.0;
            }
        });
        double total = 0;
        for (double r : rates)
            total += r;
        best = std::max(best, total);
    }
    return best;
}

} // namespace longscope
