// The CUDA backend on a GPU: every op of the plugin (ABI 2: contexts, device buffers, one entry
// point per forward-pass op) against the CPU reference op, on random inputs with odd sizes.
// Without a usable GPU the device checks are skipped with the plugin's reason (scripts/gpu-check
// runs them on a GPU machine and fails on any skip); the checks of the plugin's exports and of
// its error path run wherever the plugin is built.
//
// Tolerances: normalised MSE, sum (gpu - cpu)^2 / sum cpu^2, as llama.cpp's test-backend-ops
// compares backends: <= 1e-7 for F32 ops and F32 matrix products; <= 1e-6 for F16 and <= 2e-5
// for BF16 weights (cuBLAS takes both inputs in the weight type, so the activations are rounded
// to it: a relative error of at most 2^-11 (F16) or 2^-8 (BF16) per product, whose square is the
// expected normalised MSE, with a margin of ten). Embedding rows and residual adds are exact.
// Variants of one op agree more tightly: split-KV and single-pass attention, and
// memory-efficient and plain attention, to 1e-10; skipping fully masked key tiles and computing
// them masked, bit for bit.
#include "support/attention_problem.h"
#include "support/cuda_status.h"
#include "support/random_floats.h"

#include "cpu/attention.h"
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "cpu/quant.h"
#include "cpu/thread_pool.h"
#include "cuda/plugin_abi.h"
#include "runtime/rope_base.h"

#include "longscope/backend.h"
#include "longscope/sampler.h"
#include "longscope/settings.h"

#include <QtTest>

#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace longscope;
using longscope::test::last_queries_problem;
using longscope::test::random_floats;

namespace {

// The plugin's entry points, resolved with dlsym as the engine does.
struct CudaApi {
#define LONGSCOPE_CUDA_FN(name) decltype(&longscope_cuda_##name) name = nullptr;
    LONGSCOPE_CUDA_FN(abi_version)
    LONGSCOPE_CUDA_FN(rmsnorm_selftest)
    LONGSCOPE_CUDA_FN(context_create)
    LONGSCOPE_CUDA_FN(context_destroy)
    LONGSCOPE_CUDA_FN(error)
    LONGSCOPE_CUDA_FN(synchronize)
    LONGSCOPE_CUDA_FN(mem_info)
    LONGSCOPE_CUDA_FN(alloc)
    LONGSCOPE_CUDA_FN(free)
    LONGSCOPE_CUDA_FN(upload)
    LONGSCOPE_CUDA_FN(download)
    LONGSCOPE_CUDA_FN(memset)
    LONGSCOPE_CUDA_FN(embedding)
    LONGSCOPE_CUDA_FN(rmsnorm)
    LONGSCOPE_CUDA_FN(add)
    LONGSCOPE_CUDA_FN(swiglu)
    LONGSCOPE_CUDA_FN(geglu)
    LONGSCOPE_CUDA_FN(scale)
    LONGSCOPE_CUDA_FN(softcap)
    LONGSCOPE_CUDA_FN(add_bias)
    LONGSCOPE_CUDA_FN(kv_convert)
    LONGSCOPE_CUDA_FN(matmul)
    LONGSCOPE_CUDA_FN(rope)
    LONGSCOPE_CUDA_FN(rope_keys)
    LONGSCOPE_CUDA_FN(attention)
    LONGSCOPE_CUDA_FN(argmax)
    LONGSCOPE_CUDA_FN(copy)
    LONGSCOPE_CUDA_FN(kv_create)
    LONGSCOPE_CUDA_FN(kv_reserve)
    LONGSCOPE_CUDA_FN(kv_layer)
    LONGSCOPE_CUDA_FN(kv_info)
    LONGSCOPE_CUDA_FN(kv_clear)
    LONGSCOPE_CUDA_FN(kv_release)
    LONGSCOPE_CUDA_FN(matvec_group)
    LONGSCOPE_CUDA_FN(add_rmsnorm)
    LONGSCOPE_CUDA_FN(rope_pair)
    LONGSCOPE_CUDA_FN(kv_store)
#undef LONGSCOPE_CUDA_FN

    // Empty when every entry point was found, else the first one missing.
    std::string load(void *h)
    {
#define LONGSCOPE_CUDA_LOAD(name)                                                                          \
    name = reinterpret_cast<decltype(name)>(dlsym(h, "longscope_cuda_" #name));                           \
    if (!name)                                                                                             \
        return "longscope_cuda_" #name;
        LONGSCOPE_CUDA_LOAD(abi_version)
        LONGSCOPE_CUDA_LOAD(rmsnorm_selftest)
        LONGSCOPE_CUDA_LOAD(context_create)
        LONGSCOPE_CUDA_LOAD(context_destroy)
        LONGSCOPE_CUDA_LOAD(error)
        LONGSCOPE_CUDA_LOAD(synchronize)
        LONGSCOPE_CUDA_LOAD(mem_info)
        LONGSCOPE_CUDA_LOAD(alloc)
        LONGSCOPE_CUDA_LOAD(free)
        LONGSCOPE_CUDA_LOAD(upload)
        LONGSCOPE_CUDA_LOAD(download)
        LONGSCOPE_CUDA_LOAD(memset)
        LONGSCOPE_CUDA_LOAD(embedding)
        LONGSCOPE_CUDA_LOAD(rmsnorm)
        LONGSCOPE_CUDA_LOAD(add)
        LONGSCOPE_CUDA_LOAD(swiglu)
        LONGSCOPE_CUDA_LOAD(geglu)
        LONGSCOPE_CUDA_LOAD(scale)
        LONGSCOPE_CUDA_LOAD(softcap)
        LONGSCOPE_CUDA_LOAD(add_bias)
        LONGSCOPE_CUDA_LOAD(kv_convert)
        LONGSCOPE_CUDA_LOAD(matmul)
        LONGSCOPE_CUDA_LOAD(rope)
        LONGSCOPE_CUDA_LOAD(rope_keys)
        LONGSCOPE_CUDA_LOAD(attention)
        LONGSCOPE_CUDA_LOAD(argmax)
        LONGSCOPE_CUDA_LOAD(copy)
        LONGSCOPE_CUDA_LOAD(kv_create)
        LONGSCOPE_CUDA_LOAD(kv_reserve)
        LONGSCOPE_CUDA_LOAD(kv_layer)
        LONGSCOPE_CUDA_LOAD(kv_info)
        LONGSCOPE_CUDA_LOAD(kv_clear)
        LONGSCOPE_CUDA_LOAD(kv_release)
        LONGSCOPE_CUDA_LOAD(matvec_group)
        LONGSCOPE_CUDA_LOAD(add_rmsnorm)
        LONGSCOPE_CUDA_LOAD(rope_pair)
        LONGSCOPE_CUDA_LOAD(kv_store)
#undef LONGSCOPE_CUDA_LOAD
        return {};
    }
};

double nmse(const std::vector<float> &gpu, const std::vector<float> &cpu)
{
    double err = 0, ref = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
        const double d = double(gpu[i]) - double(cpu[i]);
        err += d * d;
        ref += double(cpu[i]) * double(cpu[i]);
    }
    if (!std::isfinite(err))
        return std::numeric_limits<double>::infinity();
    return ref > 0 ? err / ref : err;
}

WeightView f32_view(const std::vector<float> &v, std::vector<int64_t> shape)
{
    WeightView w;
    w.type = DType::F32;
    w.shape = std::move(shape);
    w.data = v.data();
    w.nbytes = v.size() * sizeof(float);
    return w;
}

// A weight matrix in one of the three types: the bits both backends read, and its view.
struct TypedWeight {
    int cuda_type = LONGSCOPE_CUDA_F32;
    std::vector<float> f32;
    std::vector<uint16_t> half;
    WeightView view;
    const void *data() const { return cuda_type == LONGSCOPE_CUDA_F32 ? static_cast<const void *>(f32.data()) : half.data(); }
    size_t bytes() const { return cuda_type == LONGSCOPE_CUDA_F32 ? f32.size() * 4 : half.size() * 2; }
};

TypedWeight typed_weight(int cuda_type, int64_t n_in, int64_t n_out, uint32_t seed)
{
    TypedWeight w;
    w.cuda_type = cuda_type;
    w.f32 = random_floats(size_t(n_in * n_out), seed, 0.5f);
    w.view.shape = {n_in, n_out};
    if (cuda_type == LONGSCOPE_CUDA_F32) {
        w.view.type = DType::F32;
        w.view.data = w.f32.data();
        w.view.nbytes = w.f32.size() * 4;
    } else {
        w.half.resize(w.f32.size());
        for (size_t i = 0; i < w.f32.size(); ++i)
            w.half[i] = cuda_type == LONGSCOPE_CUDA_F16 ? f32_to_f16(w.f32[i]) : f32_to_bf16(w.f32[i]);
        w.view.type = cuda_type == LONGSCOPE_CUDA_F16 ? DType::F16 : DType::BF16;
        w.view.data = w.half.data();
        w.view.nbytes = w.half.size() * 2;
    }
    return w;
}

const char *type_name(int t) { return t == LONGSCOPE_CUDA_F32 ? "F32" : t == LONGSCOPE_CUDA_F16 ? "F16" : "BF16"; }

// The RoPE frequency table as the engine computes it for both backends (the CPU backend's
// rope_inv_freq, divided by the per-dimension factors).
std::vector<double> inv_freq(double base, int n_rot, std::span<const float> factors = {})
{
    std::vector<double> f = rope_inv_freq(base, n_rot);
    for (size_t i = 0; i < f.size() && i < factors.size(); ++i)
        f[i] /= double(factors[i]);
    return f;
}

// The plugin's number of a KV row encoding (numbered as KvType).
int cuda_kv(DType t)
{
    switch (t) {
    case DType::F16: return LONGSCOPE_CUDA_KV_F16;
    case DType::Q8_0: return LONGSCOPE_CUDA_KV_Q8_0;
    case DType::Q4_0: return LONGSCOPE_CUDA_KV_Q4_0;
    default: return LONGSCOPE_CUDA_KV_F32;
    }
}

// Rows encoded by the CPU's encoder (what its caches store).
std::vector<uint8_t> encode_rows(DType t, const std::vector<float> &x)
{
    std::vector<uint8_t> b(row_bytes(t, int64_t(x.size())));
    quantize_row(t, x.data(), b.data(), int64_t(x.size()));
    return b;
}

} // namespace

// Skips the calling test without a usable GPU; fails it when the GPU is there but no context
// could be made.
#define REQUIRE_GPU()                                                                                      \
    do {                                                                                                   \
        if (!m_cuda.available)                                                                             \
            QSKIP(("no usable CUDA device: " + m_cuda.detail).c_str());                                    \
        QVERIFY2(m_ctx, ("no CUDA context: " + m_context_error).c_str());                                  \
    } while (0)

// Runs one plugin call and fails the test with the plugin's reason when it returns nonzero.
#define CUDA_OK(call)                                                                                      \
    do {                                                                                                   \
        const int rc_ = (call);                                                                            \
        QVERIFY2(rc_ == 0, qPrintable(QStringLiteral("%1 returned %2: %3")                                 \
                                          .arg(QStringLiteral(#call).left(60))                            \
                                          .arg(rc_)                                                        \
                                          .arg(QString::fromUtf8(m_api.error(m_ctx)))));                   \
    } while (0)

class TestCudaBackend : public QObject {
    Q_OBJECT

    BackendStatus m_cuda;
    void *m_lib = nullptr;
    CudaApi m_api;
    std::string m_missing;
    LongscopeCudaContext *m_ctx = nullptr;
    std::string m_context_error;
    std::vector<void *> m_allocs; // freed after each test
    ThreadPool m_pool{2};

    void *dev_alloc(size_t bytes)
    {
        void *p = nullptr;
        if (m_api.alloc(m_ctx, bytes, &p) != 0)
            return nullptr;
        m_allocs.push_back(p);
        return p;
    }

    template <typename T> T *dev_upload(const std::vector<T> &v)
    {
        void *p = dev_alloc(std::max<size_t>(1, v.size() * sizeof(T)));
        if (!p || m_api.upload(m_ctx, p, v.data(), v.size() * sizeof(T)) != 0)
            return nullptr;
        return static_cast<T *>(p);
    }

    template <typename T> bool dev_download(std::vector<T> &v, const T *p)
    {
        return m_api.download(m_ctx, v.data(), p, v.size() * sizeof(T)) == 0;
    }

    // One attention call on the device over the problem's shape, types, scale, soft-capping and
    // window; the keys (rotated with the device table dfreq when rot is set) and values are the
    // device rows dk, dv. The output comes back in `out` (n_q * n_head * head_dim).
    bool gpu_attention(const AttentionProblem &p, const float *dq, const void *dk, const void *dv,
                       const KeyRotation *rot, const double *dfreq, int algorithm, int causal_flash, int n_splits,
                       std::vector<float> &out, LongscopeCudaAttentionInfo *info = nullptr,
                       unsigned long long *tile_counter = nullptr)
    {
        out.assign(size_t(p.n_q * p.n_head * p.head_dim), std::numeric_limits<float>::quiet_NaN());
        auto *dout = static_cast<float *>(dev_alloc(std::max<size_t>(4, out.size() * 4)));
        if (!dout || m_api.upload(m_ctx, dout, out.data(), out.size() * 4) != 0)
            return false;
        LongscopeCudaAttention a{};
        a.n_head = p.n_head;
        a.n_head_kv = p.n_head_kv;
        a.head_dim = p.head_dim;
        a.q = dq;
        a.n_q = p.n_q;
        a.q_pos0 = p.q_pos0;
        a.k = dk;
        a.v = dv;
        a.k_type = cuda_kv(p.k_type);
        a.v_type = cuda_kv(p.v_type);
        a.n_kv = p.n_kv;
        a.out = dout;
        a.scale = p.scale;
        a.softcap = p.softcap;
        a.window = p.window;
        a.rotate_keys = rot ? 1 : 0;
        a.n_rot = rot ? rot->n_rot : 0;
        a.rope_style = rot ? int(rot->style) : 0;
        a.inv_freq = rot ? dfreq : nullptr;
        a.pos_scale = rot ? rot->pos_scale : 1.0;
        a.algorithm = algorithm;
        a.causal_flash = causal_flash;
        a.n_splits = n_splits;
        a.tile_counter = tile_counter;
        return m_api.attention(m_ctx, &a, info) == 0 && dev_download(out, static_cast<const float *>(dout));
    }

    // Every algorithm and causal variant of the device's attention over problem p (its shape,
    // key and value encodings, scale, soft-capping, window and key rotation; p.k and p.v the
    // rows as the CPU reads them, k_rows and v_rows the same bytes for the device) against the
    // CPU's plain attention, and against each other: split-KV == single pass, memory-efficient
    // == plain, skipped tiles == masked tiles, and the key tiles computed counted.
    void attention_variants_match_the_cpu(AttentionProblem p, const void *k_rows, size_t k_bytes, const void *v_rows,
                                          size_t v_bytes)
    {
        const int n_head = p.n_head, head_dim = p.head_dim;
        const int64_t n_q = p.n_q, n_kv = p.n_kv, q_pos0 = p.q_pos0;
        std::vector<float> cpu(size_t(n_q) * n_head * head_dim);
        p.out = cpu.data();
        attention_naive(m_pool, p, true);

        const std::vector<float> q(p.q, p.q + n_q * n_head * head_dim);
        const float *dq = dev_upload(q);
        void *dk = dev_alloc(std::max<size_t>(1, k_bytes)), *dv = dev_alloc(std::max<size_t>(1, v_bytes));
        const KeyRotation *r = p.rotate_keys;
        const double *dfreq =
            r ? dev_upload(std::vector<double>(r->inv_freq.begin(), r->inv_freq.begin() + r->n_rot / 2)) : nullptr;
        auto *counter = static_cast<unsigned long long *>(dev_alloc(sizeof(unsigned long long)));
        QVERIFY2(dq && dk && dv && counter && (!r || dfreq), m_api.error(m_ctx));
        CUDA_OK(m_api.upload(m_ctx, dk, k_rows, k_bytes));
        CUDA_OK(m_api.upload(m_ctx, dv, v_rows, v_bytes));
        const auto check = [&](const std::vector<float> &gpu, const char *what) {
            const double e = nmse(gpu, cpu);
            if (!(e <= 1e-7))
                qWarning("%s: nmse %g > 1e-7", what, e);
            return e <= 1e-7;
        };

        std::vector<float> naive_mask, naive_flash, tiled_masked, tiled_skip, split_auto, split_one, split_seven;
        QVERIFY2(gpu_attention(p, dq, dk, dv, r, dfreq, LONGSCOPE_CUDA_ATTN_NAIVE, 0, 0, naive_mask),
                 m_api.error(m_ctx));
        QVERIFY(check(naive_mask, "plain, explicit mask"));
        QVERIFY2(gpu_attention(p, dq, dk, dv, r, dfreq, LONGSCOPE_CUDA_ATTN_NAIVE, 1, 0, naive_flash),
                 m_api.error(m_ctx));
        QVERIFY(check(naive_flash, "plain, causal from positions"));

        // Memory-efficient, computing every key tile (masked) and then skipping those above
        // the diagonal and before the window, with the tiles counted on the device.
        LongscopeCudaAttentionInfo info{};
        const unsigned long long zero = 0;
        CUDA_OK(m_api.upload(m_ctx, counter, &zero, sizeof zero));
        QVERIFY2(gpu_attention(p, dq, dk, dv, r, dfreq, LONGSCOPE_CUDA_ATTN_TILED, 0, 0, tiled_masked, &info, counter),
                 m_api.error(m_ctx));
        QVERIFY(check(tiled_masked, "memory-efficient, masked tiles"));
        unsigned long long computed_all = 0, computed_skip = 0;
        CUDA_OK(m_api.download(m_ctx, &computed_all, counter, sizeof computed_all));
        CUDA_OK(m_api.upload(m_ctx, counter, &zero, sizeof zero));
        QVERIFY2(gpu_attention(p, dq, dk, dv, r, dfreq, LONGSCOPE_CUDA_ATTN_TILED, 1, 0, tiled_skip, &info, counter),
                 m_api.error(m_ctx));
        QVERIFY(check(tiled_skip, "memory-efficient, masked tiles skipped"));
        CUDA_OK(m_api.download(m_ctx, &computed_skip, counter, sizeof computed_skip));
        QVERIFY(std::memcmp(tiled_skip.data(), tiled_masked.data(), tiled_skip.size() * 4) == 0);
        QVERIFY(info.q_tile > 0 && info.k_tile > 0);
        // Expected counts, written from the tiling: a key tile is skipped when its first key
        // lies beyond the query tile's last position, or its last key before the window of the
        // tile's first query.
        const int64_t q_tiles = (n_q + info.q_tile - 1) / info.q_tile;
        const int64_t k_tiles = (n_kv + info.k_tile - 1) / info.k_tile;
        unsigned long long expect_all = 0, expect_skip = 0;
        if (n_kv > 0)
            for (int64_t qt = 0; qt < q_tiles; ++qt) {
                const int64_t first_pos = q_pos0 + qt * info.q_tile;
                const int64_t last_pos = q_pos0 + std::min<int64_t>(n_q, (qt + 1) * info.q_tile) - 1;
                expect_all += uint64_t(n_head * k_tiles);
                for (int64_t kt = 0; kt < k_tiles; ++kt) {
                    const int64_t j0 = kt * info.k_tile, j1 = std::min<int64_t>(n_kv, j0 + info.k_tile) - 1;
                    if (j0 <= last_pos && !(p.window > 0 && j1 <= first_pos - p.window))
                        expect_skip += uint64_t(n_head);
                }
            }
        QCOMPARE(computed_all, expect_all);
        QCOMPARE(computed_skip, expect_skip);

        // Split-KV: the ranges chosen by the plugin, one range, seven ranges.
        QVERIFY2(gpu_attention(p, dq, dk, dv, r, dfreq, LONGSCOPE_CUDA_ATTN_SPLIT_KV, 0, 0, split_auto, &info),
                 m_api.error(m_ctx));
        QVERIFY(check(split_auto, "split-KV, chosen ranges"));
        QVERIFY2(gpu_attention(p, dq, dk, dv, r, dfreq, LONGSCOPE_CUDA_ATTN_SPLIT_KV, 0, 1, split_one),
                 m_api.error(m_ctx));
        QVERIFY(check(split_one, "split-KV, one range"));
        QVERIFY2(gpu_attention(p, dq, dk, dv, r, dfreq, LONGSCOPE_CUDA_ATTN_SPLIT_KV, 0, 7, split_seven),
                 m_api.error(m_ctx));
        QVERIFY(check(split_seven, "split-KV, seven ranges"));

        // The variants against each other.
        QVERIFY2(nmse(split_seven, split_one) <= 1e-10, qPrintable(QString::number(nmse(split_seven, split_one))));
        QVERIFY2(nmse(split_auto, tiled_skip) <= 1e-10, qPrintable(QString::number(nmse(split_auto, tiled_skip))));
        QVERIFY2(nmse(tiled_skip, naive_flash) <= 1e-10, qPrintable(QString::number(nmse(tiled_skip, naive_flash))));
        QVERIFY2(nmse(naive_mask, naive_flash) <= 1e-10, qPrintable(QString::number(nmse(naive_mask, naive_flash))));
    }

private slots:
    void initTestCase()
    {
        m_cuda = longscope::test::cuda_status();
        qInfo("CUDA backend: %s", m_cuda.detail.c_str());
        if (m_cuda.library.empty())
            return;
        m_lib = dlopen(m_cuda.library.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!m_lib) {
            m_missing = "dlopen failed";
            return;
        }
        m_missing = m_api.load(m_lib);
        if (m_cuda.available && m_missing.empty()) {
            char reason[512] = {0};
            if (m_api.context_create(0, &m_ctx, reason, sizeof reason) != 0)
                m_context_error = reason;
        }
    }

    void cleanup()
    {
        if (m_ctx)
            for (void *p : m_allocs)
                m_api.free(m_ctx, p);
        m_allocs.clear();
    }

    void cleanupTestCase()
    {
        if (m_ctx)
            m_api.context_destroy(m_ctx);
        m_ctx = nullptr;
    }

    // Runs wherever the plugin is built: it exports every entry point of this ABI.
    void plugin_exports_the_op_interface()
    {
        if (m_cuda.library.empty())
            QSKIP(("the CUDA plugin is not built: " + m_cuda.detail).c_str());
        if (!m_lib) // built, but its CUDA runtime is not installed here
            QSKIP(("the CUDA plugin cannot be loaded: " + m_cuda.detail).c_str());
        QVERIFY2(m_missing.empty(), ("missing entry point " + m_missing).c_str());
        QCOMPARE(m_api.abi_version(), LONGSCOPE_CUDA_ABI_VERSION);
    }

    // Runs wherever the plugin is built: a context on a device that does not exist is refused
    // with a readable reason, never an abort.
    void context_on_a_missing_device_fails_with_a_reason()
    {
        if (m_cuda.library.empty() || !m_lib)
            QSKIP(("the CUDA plugin is not built or cannot be loaded: " + m_cuda.detail).c_str());
        QVERIFY2(m_missing.empty(), ("missing entry point " + m_missing).c_str());
        LongscopeCudaContext *ctx = reinterpret_cast<LongscopeCudaContext *>(this);
        char reason[512] = {0};
        const int rc = m_api.context_create(4096, &ctx, reason, sizeof reason);
        QVERIFY(rc != 0);
        QVERIFY(ctx == nullptr);
        QVERIFY2(std::strlen(reason) > 10, reason);
        qInfo("context on device 4096: %s", reason);
    }

    // KV caches on the device (ABI 3, 4): rows survive growth in every mode; static holds the
    // limit from the start; concat reallocates and counts its copies; vmm maps whole granules
    // per region as rows arrive (the reservation never changes), never copies, and gives the
    // granules back on clear. 2 layers (4 regions), keys in rows of 4 KiB (1024 f32 values) and
    // values in rows of 1088 bytes (1024 values as q8_0 blocks: 32 x 34), so every size below is
    // per side.
    void kv_caches_on_the_device_data()
    {
        QTest::addColumn<int>("mode");
        QTest::addRow("concat") << LONGSCOPE_CUDA_KV_CONCAT;
        QTest::addRow("static") << LONGSCOPE_CUDA_KV_STATIC;
        QTest::addRow("vmm") << LONGSCOPE_CUDA_KV_VMM;
    }
    void kv_caches_on_the_device()
    {
        REQUIRE_GPU();
        QFETCH(int, mode);
        const int n_layer = 2;
        const int64_t limit = 3000, row_k = 4096, row_v = 1024 / 32 * 34;
        const int64_t row_both = row_k + row_v;
        LongscopeCudaKv *kv = nullptr;
        CUDA_OK(m_api.kv_create(m_ctx, mode, n_layer, limit, row_k, row_v, &kv));
        QVERIFY(kv);
        struct Release {
            CudaApi &api;
            LongscopeCudaContext *ctx;
            LongscopeCudaKv *kv;
            ~Release() { api.kv_release(ctx, kv); }
        } release{m_api, m_ctx, kv};
        LongscopeCudaKvInfo info{};
        CUDA_OK(m_api.kv_info(m_ctx, kv, &info));
        if (mode == LONGSCOPE_CUDA_KV_STATIC)
            QCOMPARE(info.resident_bytes, uint64_t(n_layer * limit * row_both));
        else
            QCOMPARE(info.resident_bytes, uint64_t(0));

        // 5 rows in every region, each region's rows a pattern of its own (the value rows as
        // 1088 / 4 floats: the cache only moves bytes).
        CUDA_OK(m_api.kv_reserve(m_ctx, kv, 5));
        std::vector<std::vector<float>> written(static_cast<size_t>(2 * n_layer));
        for (int l = 0; l < n_layer; ++l) {
            void *k = nullptr, *v = nullptr;
            CUDA_OK(m_api.kv_layer(m_ctx, kv, l, &k, &v));
            for (int half = 0; half < 2; ++half) {
                auto &w = written[size_t(2 * l + half)];
                w = random_floats(size_t(5 * (half ? row_v : row_k) / 4), uint32_t(100 + 2 * l + half));
                CUDA_OK(m_api.upload(m_ctx, half ? v : k, w.data(), w.size() * 4));
            }
        }
        CUDA_OK(m_api.kv_info(m_ctx, kv, &info));
        uint64_t granule = info.granule_bytes;
        // Granules a region of `rows` rows of `rb` bytes maps.
        const auto granules = [&](int64_t rows, int64_t rb) { return (uint64_t(rows * rb) + granule - 1) / granule; };
        if (mode == LONGSCOPE_CUDA_KV_VMM) {
            QVERIFY(granule > 0);
            QCOMPARE(info.resident_bytes, uint64_t(2 * n_layer) * granule);
            QVERIFY(info.reserved_bytes >= uint64_t(n_layer * limit * row_both));
            QVERIFY(info.capacity_rows >= 5);
        }
        const uint64_t reserved_before = info.reserved_bytes;

        // Grow past the first granule (vmm) or simply to 600 rows, then to the limit.
        for (int64_t rows : {int64_t(600), int64_t(granule ? granule / row_k + 1 : 1200), limit}) {
            rows = std::min(rows, limit);
            CUDA_OK(m_api.kv_reserve(m_ctx, kv, rows));
            CUDA_OK(m_api.kv_info(m_ctx, kv, &info));
            QVERIFY(info.capacity_rows >= rows);
            if (mode == LONGSCOPE_CUDA_KV_VMM) {
                QCOMPARE(info.resident_bytes,
                         uint64_t(n_layer) * (granules(rows, row_k) + granules(rows, row_v)) * granule);
                QCOMPARE(info.reserved_bytes, reserved_before);
                QCOMPARE(info.copied_bytes, uint64_t(0));
            }
            if (mode == LONGSCOPE_CUDA_KV_CONCAT) {
                QCOMPARE(info.resident_bytes, uint64_t(n_layer * rows * row_both));
                QVERIFY(info.copied_bytes > 0);
            }
            for (int l = 0; l < n_layer; ++l) {
                void *k = nullptr, *v = nullptr;
                CUDA_OK(m_api.kv_layer(m_ctx, kv, l, &k, &v));
                for (int half = 0; half < 2; ++half) {
                    const auto &w = written[size_t(2 * l + half)];
                    std::vector<float> back(w.size());
                    CUDA_OK(m_api.download(m_ctx, back.data(), half ? v : k, back.size() * 4));
                    QVERIFY2(back == w, qPrintable(QString("rows lost growing to %1").arg(rows)));
                }
            }
        }
        QVERIFY(m_api.kv_reserve(m_ctx, kv, limit + 1) != 0);
        qInfo("%s: granule %llu, reserved %llu, copied %llu", mode == LONGSCOPE_CUDA_KV_VMM ? "vmm" : "",
              (unsigned long long)granule, (unsigned long long)info.reserved_bytes,
              (unsigned long long)info.copied_bytes);

        CUDA_OK(m_api.kv_clear(m_ctx, kv));
        CUDA_OK(m_api.kv_info(m_ctx, kv, &info));
        if (mode == LONGSCOPE_CUDA_KV_VMM) {
            QCOMPARE(info.resident_bytes, uint64_t(0));
            QCOMPARE(info.reserved_bytes, reserved_before);
            // And it maps again after a clear.
            CUDA_OK(m_api.kv_reserve(m_ctx, kv, 1));
            CUDA_OK(m_api.kv_info(m_ctx, kv, &info));
            QCOMPARE(info.resident_bytes, uint64_t(2 * n_layer) * granule);
        }
        if (mode == LONGSCOPE_CUDA_KV_CONCAT)
            QCOMPARE(info.resident_bytes, uint64_t(0));
    }

    void rmsnorm_selftest_matches_the_cpu()
    {
        REQUIRE_GPU();
        const int rows = 7, n = 1000;
        const std::vector<float> x = random_floats(size_t(rows * n), 3, 2.0f), w = random_floats(size_t(n), 4, 2.0f);
        std::vector<float> gpu(x.size()), cpu(x.size());
        char reason[512] = {0};
        QVERIFY2(m_api.rmsnorm_selftest(0, x.data(), w.data(), gpu.data(), rows, n, 1e-5f, reason, sizeof reason) == 0,
                 reason);
        rmsnorm(x.data(), f32_view(w, {n}), cpu.data(), rows, n, 1e-5f);
        QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QString::number(nmse(gpu, cpu))));
    }

    void buffers_round_trip_and_report_memory()
    {
        REQUIRE_GPU();
        std::vector<uint8_t> bytes(100003);
        for (size_t i = 0; i < bytes.size(); ++i)
            bytes[i] = uint8_t(i * 131 + 7);
        const uint8_t *d = dev_upload(bytes);
        QVERIFY2(d, m_api.error(m_ctx));
        std::vector<uint8_t> back(bytes.size());
        QVERIFY2(dev_download(back, d), m_api.error(m_ctx));
        QVERIFY(back == bytes);
        CUDA_OK(m_api.memset(m_ctx, const_cast<uint8_t *>(d), 0, bytes.size()));
        QVERIFY2(dev_download(back, d), m_api.error(m_ctx));
        QVERIFY(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; }));
        uint64_t free_b = 0, total_b = 0, scratch_b = 0;
        CUDA_OK(m_api.mem_info(m_ctx, &free_b, &total_b, &scratch_b));
        QVERIFY(total_b > 0 && free_b <= total_b);
        CUDA_OK(m_api.synchronize(m_ctx));
    }

    void errors_come_back_with_a_reason()
    {
        REQUIRE_GPU();
        // An allocation no device can satisfy.
        void *p = nullptr;
        QVERIFY(m_api.alloc(m_ctx, size_t(1) << 60, &p) != 0);
        QVERIFY(p == nullptr);
        QVERIFY2(QString::fromUtf8(m_api.error(m_ctx)).contains("cudaMalloc"), m_api.error(m_ctx));
        // Invalid arguments.
        QCOMPARE(m_api.matmul(m_ctx, nullptr, 7, 4, 4, nullptr, nullptr, 1), LONGSCOPE_CUDA_ERR_ARGUMENT);
        QVERIFY2(QString::fromUtf8(m_api.error(m_ctx)).contains("type"), m_api.error(m_ctx));
        LongscopeCudaAttention a{};
        a.n_head = 6;
        a.n_head_kv = 4;
        a.head_dim = 64;
        QCOMPARE(m_api.attention(m_ctx, &a, nullptr), LONGSCOPE_CUDA_ERR_ARGUMENT);
        QVERIFY2(QString::fromUtf8(m_api.error(m_ctx)).contains("multiple"), m_api.error(m_ctx));
        a.n_head_kv = 2;
        a.algorithm = 9;
        QCOMPARE(m_api.attention(m_ctx, &a, nullptr), LONGSCOPE_CUDA_ERR_ARGUMENT);
        // The context still works afterwards.
        const std::vector<float> x = {1, 2, 3};
        float *dx = dev_upload(x);
        QVERIFY2(dx, m_api.error(m_ctx));
        CUDA_OK(m_api.add(m_ctx, dx, dx, dx, 3));
        std::vector<float> y(3);
        QVERIFY2(dev_download(y, static_cast<const float *>(dx)), m_api.error(m_ctx));
        QCOMPARE(y, (std::vector<float>{2, 4, 6}));
    }

    void embedding_matches_the_cpu_exactly()
    {
        REQUIRE_GPU();
        const int64_t n_vocab = 1001, n_embd = 333;
        std::vector<int32_t> tokens(37);
        std::mt19937 rng(11);
        for (int32_t &t : tokens)
            t = int32_t(rng() % uint32_t(n_vocab));
        tokens[0] = 0;
        tokens[1] = int32_t(n_vocab - 1);
        tokens[2] = tokens[3];
        const int32_t *dtok = dev_upload(tokens);
        QVERIFY2(dtok, m_api.error(m_ctx));
        for (int type : {LONGSCOPE_CUDA_F32, LONGSCOPE_CUDA_F16, LONGSCOPE_CUDA_BF16}) {
            const TypedWeight table = typed_weight(type, n_embd, n_vocab, 12);
            void *dtable = dev_alloc(table.bytes());
            QVERIFY2(dtable, m_api.error(m_ctx));
            CUDA_OK(m_api.upload(m_ctx, dtable, table.data(), table.bytes()));
            auto *dout = static_cast<float *>(dev_alloc(tokens.size() * size_t(n_embd) * 4));
            QVERIFY2(dout, m_api.error(m_ctx));
            CUDA_OK(m_api.embedding(m_ctx, dtable, type, n_vocab, n_embd, dtok, int64_t(tokens.size()), dout));
            std::vector<float> gpu(tokens.size() * size_t(n_embd)), cpu(gpu.size());
            QVERIFY2(dev_download(gpu, static_cast<const float *>(dout)), m_api.error(m_ctx));
            for (size_t t = 0; t < tokens.size(); ++t)
                weight_row_f32(table.view, tokens[t], cpu.data() + t * size_t(n_embd));
            QVERIFY2(std::memcmp(gpu.data(), cpu.data(), gpu.size() * 4) == 0, type_name(type));
        }
        // Ids outside the table give zeros.
        const std::vector<int32_t> bad = {-1, int32_t(n_vocab)};
        const int32_t *dbad = dev_upload(bad);
        const TypedWeight table = typed_weight(LONGSCOPE_CUDA_F32, n_embd, n_vocab, 12);
        const float *dtable = dev_upload(table.f32);
        auto *dout = static_cast<float *>(dev_alloc(2 * size_t(n_embd) * 4));
        QVERIFY2(dbad && dtable && dout, m_api.error(m_ctx));
        CUDA_OK(m_api.embedding(m_ctx, dtable, LONGSCOPE_CUDA_F32, n_vocab, n_embd, dbad, 2, dout));
        std::vector<float> gpu(2 * size_t(n_embd), 1.0f);
        QVERIFY2(dev_download(gpu, static_cast<const float *>(dout)), m_api.error(m_ctx));
        QVERIFY(std::all_of(gpu.begin(), gpu.end(), [](float v) { return v == 0.0f; }));
    }

    void rmsnorm_matches_the_cpu()
    {
        REQUIRE_GPU();
        for (auto [rows, n] : {std::pair<int64_t, int64_t>{7, 1000}, {1, 4097}, {37, 33}}) {
            const std::vector<float> x = random_floats(size_t(rows * n), 21, 3.0f), w = random_floats(size_t(n), 22);
            const float *dx = dev_upload(x), *dw = dev_upload(w);
            auto *dy = static_cast<float *>(dev_alloc(x.size() * 4));
            QVERIFY2(dx && dw && dy, m_api.error(m_ctx));
            CUDA_OK(m_api.rmsnorm(m_ctx, dx, dw, dy, rows, n, 1e-6f, 0.0f));
            std::vector<float> gpu(x.size()), cpu(x.size());
            QVERIFY2(dev_download(gpu, static_cast<const float *>(dy)), m_api.error(m_ctx));
            rmsnorm(x.data(), f32_view(w, {n}), cpu.data(), rows, n, 1e-6f);
            QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QStringLiteral("%1x%2: %3").arg(rows).arg(n).arg(nmse(gpu, cpu))));
        }
    }

    void add_and_swiglu_match_the_cpu()
    {
        REQUIRE_GPU();
        const int64_t n = 100003;
        const std::vector<float> a = random_floats(size_t(n), 31, 4.0f), b = random_floats(size_t(n), 32, 2.0f);
        float *da = dev_upload(a), *db = dev_upload(b);
        auto *dout = static_cast<float *>(dev_alloc(size_t(n) * 4));
        QVERIFY2(da && db && dout, m_api.error(m_ctx));
        std::vector<float> gpu(static_cast<size_t>(n)), cpu(static_cast<size_t>(n));

        CUDA_OK(m_api.add(m_ctx, da, db, dout, n));
        QVERIFY2(dev_download(gpu, static_cast<const float *>(dout)), m_api.error(m_ctx));
        for (size_t i = 0; i < cpu.size(); ++i)
            cpu[i] = a[i] + b[i];
        QVERIFY(std::memcmp(gpu.data(), cpu.data(), cpu.size() * 4) == 0);

        swiglu(a.data(), b.data(), cpu.data(), n);
        CUDA_OK(m_api.swiglu(m_ctx, da, db, dout, n));
        QVERIFY2(dev_download(gpu, static_cast<const float *>(dout)), m_api.error(m_ctx));
        QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QString::number(nmse(gpu, cpu))));
        // In place over the gate, as the forward pass runs it.
        CUDA_OK(m_api.swiglu(m_ctx, da, db, da, n));
        QVERIFY2(dev_download(gpu, static_cast<const float *>(da)), m_api.error(m_ctx));
        QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QString::number(nmse(gpu, cpu))));
    }

    void matmul_matches_the_cpu()
    {
        REQUIRE_GPU();
        struct Shape {
            int64_t n_in, n_out, n_tokens;
        };
        // One token takes the plugin's matrix-vector kernel (16-byte loads for rows of 1024,
        // 256 and 64 values, single values for 333 and 250), more take cuBLAS.
        for (const Shape s : {Shape{333, 77, 1}, Shape{333, 77, 37}, Shape{1024, 515, 1}, Shape{1024, 515, 37},
                              Shape{64, 1000, 5}, Shape{256, 300, 1}, Shape{250, 300, 1}, Shape{256, 300, 2}}) {
            for (int type : {LONGSCOPE_CUDA_F32, LONGSCOPE_CUDA_F16, LONGSCOPE_CUDA_BF16}) {
                const TypedWeight w = typed_weight(type, s.n_in, s.n_out, uint32_t(41 + s.n_in + type));
                const std::vector<float> x = random_floats(size_t(s.n_tokens * s.n_in), 42);
                void *dw = dev_alloc(w.bytes());
                const float *dx = dev_upload(x);
                auto *dy = static_cast<float *>(dev_alloc(size_t(s.n_tokens * s.n_out) * 4));
                QVERIFY2(dw && dx && dy, m_api.error(m_ctx));
                CUDA_OK(m_api.upload(m_ctx, dw, w.data(), w.bytes()));
                CUDA_OK(m_api.matmul(m_ctx, dw, type, s.n_in, s.n_out, dx, dy, s.n_tokens));
                std::vector<float> gpu(size_t(s.n_tokens * s.n_out)), cpu(gpu.size());
                QVERIFY2(dev_download(gpu, static_cast<const float *>(dy)), m_api.error(m_ctx));
                matmul(m_pool, w.view, x.data(), cpu.data(), s.n_tokens);
                const double tol = type == LONGSCOPE_CUDA_F32 ? 1e-7 : type == LONGSCOPE_CUDA_F16 ? 1e-6 : 2e-5;
                const double e = nmse(gpu, cpu);
                QVERIFY2(e <= tol, qPrintable(QStringLiteral("%1 %2x%3, %4 tokens: nmse %5 > %6")
                                                  .arg(type_name(type))
                                                  .arg(s.n_out)
                                                  .arg(s.n_in)
                                                  .arg(s.n_tokens)
                                                  .arg(e)
                                                  .arg(tol)));
            }
        }
    }

    // ABI 5's fused ops give, byte for byte, what the ops they replace give: products with up to
    // four matrices in one launch == one matmul each (one token; rows of 16-byte groups and
    // rows of single values, every weight type); a residual add and RMSNorm == add, then
    // rmsnorm (the sum written back too); RoPE of queries and keys together == two rope calls;
    // a step's keys and values stored together == two conversions from F32 (every pair of
    // KV types). Bad arguments are refused.
    void fused_ops_equal_the_ops_they_replace()
    {
        REQUIRE_GPU();
        for (int type : {LONGSCOPE_CUDA_F32, LONGSCOPE_CUDA_F16, LONGSCOPE_CUDA_BF16})
            for (int64_t n_in : {int64_t(256), int64_t(333)}) {
                const int64_t rows[] = {77, 300, 5};
                const std::vector<float> x = random_floats(size_t(n_in), 61);
                const float *dx = dev_upload(x);
                const void *w[3];
                float *y[3];
                int64_t n_out[3];
                std::vector<std::vector<float>> one(3);
                for (int m = 0; m < 3; ++m) {
                    const TypedWeight tw = typed_weight(type, n_in, rows[m], uint32_t(70 + m + type));
                    void *dw = dev_alloc(tw.bytes());
                    y[m] = static_cast<float *>(dev_alloc(size_t(rows[m]) * 4));
                    QVERIFY2(dx && dw && y[m], m_api.error(m_ctx));
                    CUDA_OK(m_api.upload(m_ctx, dw, tw.data(), tw.bytes()));
                    w[m] = dw;
                    n_out[m] = rows[m];
                    CUDA_OK(m_api.matmul(m_ctx, dw, type, n_in, rows[m], dx, y[m], 1));
                    one[m].resize(size_t(rows[m]));
                    QVERIFY2(dev_download(one[m], static_cast<const float *>(y[m])), m_api.error(m_ctx));
                    CUDA_OK(m_api.memset(m_ctx, y[m], 0, size_t(rows[m]) * 4));
                }
                CUDA_OK(m_api.matvec_group(m_ctx, type, n_in, dx, 3, w, n_out, y));
                for (int m = 0; m < 3; ++m) {
                    std::vector<float> grouped(size_t(rows[m]));
                    QVERIFY2(dev_download(grouped, static_cast<const float *>(y[m])), m_api.error(m_ctx));
                    QVERIFY2(std::memcmp(grouped.data(), one[m].data(), grouped.size() * 4) == 0,
                             qPrintable(QStringLiteral("%1, n_in %2, matrix %3").arg(type_name(type)).arg(n_in).arg(m)));
                }
            }

        {
            const int64_t rows = 3, n = 1000;
            const std::vector<float> x = random_floats(size_t(rows * n), 62, 2.0f), r = random_floats(size_t(rows * n), 63),
                                     w = random_floats(size_t(n), 64);
            float *dx1 = dev_upload(x), *dx2 = dev_upload(x);
            const float *dr = dev_upload(r), *dw = dev_upload(w);
            auto *dy1 = static_cast<float *>(dev_alloc(size_t(rows * n) * 4)),
                 *dy2 = static_cast<float *>(dev_alloc(size_t(rows * n) * 4));
            QVERIFY2(dx1 && dx2 && dr && dw && dy1 && dy2, m_api.error(m_ctx));
            CUDA_OK(m_api.add(m_ctx, dx1, dr, dx1, rows * n));
            CUDA_OK(m_api.rmsnorm(m_ctx, dx1, dw, dy1, rows, n, 1e-5f, 1.0f));
            CUDA_OK(m_api.add_rmsnorm(m_ctx, dx2, dr, dw, dy2, rows, n, 1e-5f, 1.0f));
            std::vector<float> x1(size_t(rows * n)), x2(x1.size()), y1(x1.size()), y2(x1.size());
            QVERIFY(dev_download(x1, static_cast<const float *>(dx1)) && dev_download(x2, static_cast<const float *>(dx2)));
            QVERIFY(dev_download(y1, static_cast<const float *>(dy1)) && dev_download(y2, static_cast<const float *>(dy2)));
            QVERIFY(std::memcmp(x1.data(), x2.data(), x1.size() * 4) == 0);
            QVERIFY(std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0);
            QCOMPARE(m_api.add_rmsnorm(m_ctx, dx2, dr, dw, const_cast<float *>(dr), rows, n, 1e-5f, 0.0f),
                     LONGSCOPE_CUDA_ERR_ARGUMENT);
        }

        for (const auto style : {RopeStyle::Interleaved, RopeStyle::RotateHalf}) {
            const int64_t n_tokens = 5;
            const int n_head = 6, n_head_kv = 2, head_dim = 64, n_rot = 48;
            const std::vector<float> q = random_floats(size_t(n_tokens * n_head * head_dim), 65),
                                     k = random_floats(size_t(n_tokens * n_head_kv * head_dim), 66);
            float *dq1 = dev_upload(q), *dq2 = dev_upload(q), *dk1 = dev_upload(k), *dk2 = dev_upload(k);
            const double *dfreq = dev_upload(inv_freq(10000.0, n_rot));
            QVERIFY2(dq1 && dq2 && dk1 && dk2 && dfreq, m_api.error(m_ctx));
            CUDA_OK(m_api.rope(m_ctx, dq1, n_tokens, n_head, head_dim, n_rot, int(style), nullptr, 37.0, 1.0, 0.5, dfreq));
            CUDA_OK(m_api.rope(m_ctx, dk1, n_tokens, n_head_kv, head_dim, n_rot, int(style), nullptr, 37.0, 1.0, 0.5, dfreq));
            CUDA_OK(m_api.rope_pair(m_ctx, dq2, n_head, dk2, n_head_kv, n_tokens, head_dim, n_rot, int(style), 37.0, 0.5,
                                    dfreq));
            std::vector<float> q1(q.size()), q2(q.size()), k1(k.size()), k2(k.size());
            QVERIFY(dev_download(q1, static_cast<const float *>(dq1)) && dev_download(q2, static_cast<const float *>(dq2)));
            QVERIFY(dev_download(k1, static_cast<const float *>(dk1)) && dev_download(k2, static_cast<const float *>(dk2)));
            QVERIFY(std::memcmp(q1.data(), q2.data(), q1.size() * 4) == 0);
            QVERIFY(std::memcmp(k1.data(), k2.data(), k1.size() * 4) == 0);
            QVERIFY(q1 != q); // something was rotated
        }

        const int kv_types[] = {LONGSCOPE_CUDA_KV_F32, LONGSCOPE_CUDA_KV_F16, LONGSCOPE_CUDA_KV_Q8_0, LONGSCOPE_CUDA_KV_Q4_0};
        for (int kt : kv_types)
            for (int vt : kv_types) {
                const int64_t n_rows = 3, n = 256;
                const std::vector<float> k = random_floats(size_t(n_rows * n), 67), v = random_floats(size_t(n_rows * n), 68);
                const float *dk = dev_upload(k), *dv = dev_upload(v);
                const size_t kb = size_t(n_rows) * kv_type_row_bytes(KvType(kt), n),
                             vb = size_t(n_rows) * kv_type_row_bytes(KvType(vt), n);
                void *k1 = dev_alloc(kb), *k2 = dev_alloc(kb), *v1 = dev_alloc(vb), *v2 = dev_alloc(vb);
                QVERIFY2(dk && dv && k1 && k2 && v1 && v2, m_api.error(m_ctx));
                CUDA_OK(m_api.kv_convert(m_ctx, dk, LONGSCOPE_CUDA_KV_F32, k1, kt, n_rows, n));
                CUDA_OK(m_api.kv_convert(m_ctx, dv, LONGSCOPE_CUDA_KV_F32, v1, vt, n_rows, n));
                CUDA_OK(m_api.kv_store(m_ctx, dk, k2, kt, dv, v2, vt, n_rows, n));
                std::vector<uint8_t> a(kb), b(kb), c(vb), d(vb);
                QVERIFY(dev_download(a, static_cast<const uint8_t *>(k1)) && dev_download(b, static_cast<const uint8_t *>(k2)));
                QVERIFY(dev_download(c, static_cast<const uint8_t *>(v1)) && dev_download(d, static_cast<const uint8_t *>(v2)));
                QVERIFY2(a == b && c == d, qPrintable(QStringLiteral("keys %1, values %2").arg(kt).arg(vt)));
            }

        const void *none[1] = {nullptr};
        int64_t zero[1] = {0};
        float *no_y[1] = {nullptr};
        QCOMPARE(m_api.matvec_group(m_ctx, LONGSCOPE_CUDA_F16, 64, nullptr, 0, none, zero, no_y), LONGSCOPE_CUDA_ERR_ARGUMENT);
        QCOMPARE(m_api.matvec_group(m_ctx, LONGSCOPE_CUDA_F16, 64, nullptr, 5, none, zero, no_y), LONGSCOPE_CUDA_ERR_ARGUMENT);
        QCOMPARE(m_api.kv_store(m_ctx, nullptr, nullptr, 9, nullptr, nullptr, 0, 1, 32), LONGSCOPE_CUDA_ERR_ARGUMENT);
    }

    void rope_matches_the_cpu()
    {
        REQUIRE_GPU();
        const int64_t n_tokens = 37;
        const int n_heads = 6, head_dim = 64;
        std::vector<double> positions(static_cast<size_t>(n_tokens));
        std::mt19937 rng(51);
        for (double &p : positions)
            p = double(rng() % 20000) * 0.25; // linear scaling: fractional positions
        const double *dpos = dev_upload(positions);
        QVERIFY2(dpos, m_api.error(m_ctx));
        // The model's base, and the base NTK alpha 4 gives: base * alpha^(d / (d - 2)).
        for (double base : {10000.0, 10000.0 * std::pow(4.0, 64.0 / 62.0)})
            for (int n_rot : {64, 32})
                for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::RotateHalf})
                    for (bool explicit_positions : {true, false}) {
                        const std::vector<float> x = random_floats(size_t(n_tokens * n_heads * head_dim), 52);
                        std::vector<double> pos = positions;
                        if (!explicit_positions)
                            for (int64_t t = 0; t < n_tokens; ++t)
                                pos[size_t(t)] = (100.0 + double(t)) * 0.5;
                        float *dx = dev_upload(x);
                        const double *dfreq = dev_upload(inv_freq(base, n_rot));
                        QVERIFY2(dx && dfreq, m_api.error(m_ctx));
                        CUDA_OK(m_api.rope(m_ctx, dx, n_tokens, n_heads, head_dim, n_rot, int(style),
                                           explicit_positions ? dpos : nullptr, 100.0, 1.0, 0.5, dfreq));
                        std::vector<float> gpu(x.size()), cpu = x;
                        QVERIFY2(dev_download(gpu, static_cast<const float *>(dx)), m_api.error(m_ctx));
                        rope(cpu.data(), n_tokens, n_heads, head_dim, n_rot, style, pos, inv_freq(base, n_rot));
                        QVERIFY2(nmse(gpu, cpu) <= 1e-7,
                                 qPrintable(QStringLiteral("base %1 n_rot %2 style %3: %4")
                                                .arg(base)
                                                .arg(n_rot)
                                                .arg(int(style))
                                                .arg(nmse(gpu, cpu))));
                    }
    }

    void rope_keys_rotates_a_pre_rope_cache_like_the_cpu()
    {
        REQUIRE_GPU();
        const int n_heads = 2, head_dim = 80, n_rot = 64;
        const int64_t width = n_heads * head_dim, stride = width + 16, j0 = 50, n_keys = 300;
        const double base = 500000.0, pos_scale = 0.25;
        const std::vector<float> src = random_floats(size_t(n_keys * stride), 61);
        const float *dsrc = dev_upload(src);
        const double *dfreq = dev_upload(inv_freq(base, n_rot));
        auto *ddst = static_cast<float *>(dev_alloc(size_t(n_keys * width) * 4));
        QVERIFY2(dsrc && dfreq && ddst, m_api.error(m_ctx));
        for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::RotateHalf}) {
            CUDA_OK(m_api.rope_keys(m_ctx, dsrc, LONGSCOPE_CUDA_KV_F32, stride * 4, ddst, j0, n_keys, n_heads, head_dim,
                                    n_rot, int(style), pos_scale, dfreq));
            std::vector<float> gpu(size_t(n_keys * width)), cpu(gpu.size());
            QVERIFY2(dev_download(gpu, static_cast<const float *>(ddst)), m_api.error(m_ctx));
            std::vector<double> pos(static_cast<size_t>(n_keys));
            for (int64_t k = 0; k < n_keys; ++k) {
                std::memcpy(cpu.data() + k * width, src.data() + k * stride, size_t(width) * 4);
                pos[size_t(k)] = double(j0 + k) * pos_scale;
            }
            rope(cpu.data(), n_keys, n_heads, head_dim, n_rot, style, pos, inv_freq(base, n_rot));
            QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QString::number(nmse(gpu, cpu))));
        }
    }

    void attention_matches_the_cpu_data()
    {
        QTest::addColumn<int>("n_head");
        QTest::addColumn<int>("n_head_kv");
        QTest::addColumn<int>("head_dim");
        QTest::addColumn<int>("n_q");
        QTest::addColumn<int>("n_kv");
        QTest::addColumn<int>("q_pos0");
        QTest::addColumn<bool>("rotate");
        struct Heads {
            int n_head, n_head_kv, head_dim;
        };
        struct Len {
            int n_q, n_kv, q_pos0;
        };
        // q_pos0 = n_kv - n_q: queries appended to the cache (bottom-right aligned); 200 with
        // 300 keys: the last 63 keys lie beyond every query and must not count.
        const Len lens[] = {{1, 1, 0},       {1, 300, 299},   {1, 1000, 999},  {1, 1000, 500},  {37, 37, 0},
                            {37, 300, 263},  {37, 1000, 963}, {37, 300, 200},  {3, 0, 0}};
        for (const Heads h : {Heads{8, 2, 64}, Heads{6, 3, 40}, Heads{4, 4, 128}, Heads{2, 1, 256}})
            for (const Len l : lens)
                for (bool rotate : {false, true}) {
                    if (rotate && h.head_dim == 40 && l.n_q == 37)
                        continue; // enough rotated cases elsewhere
                    QTest::addRow("h%d/%d d%d q%d kv%d pos%d%s", h.n_head, h.n_head_kv, h.head_dim, l.n_q, l.n_kv,
                                  l.q_pos0, rotate ? " pre-rope" : "")
                        << h.n_head << h.n_head_kv << h.head_dim << l.n_q << l.n_kv << l.q_pos0 << rotate;
                }
    }

    // Every algorithm and causal variant against the CPU's plain attention, and against each
    // other: split-KV == single pass, memory-efficient == plain, skipped tiles == masked tiles.
    void attention_matches_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(int, n_head);
        QFETCH(int, n_head_kv);
        QFETCH(int, head_dim);
        QFETCH(int, n_q);
        QFETCH(int, n_kv);
        QFETCH(int, q_pos0);
        QFETCH(bool, rotate);
        const int64_t ekv = int64_t(n_head_kv) * head_dim;
        const std::vector<float> q = random_floats(size_t(n_q) * n_head * head_dim, 71, 1.5f);
        const std::vector<float> k = random_floats(size_t(std::max(1, n_kv)) * ekv, 72, 1.5f);
        const std::vector<float> v = random_floats(size_t(std::max(1, n_kv)) * ekv, 73);
        const double base = 10000.0 * std::pow(2.0, double(head_dim) / (head_dim - 2)); // NTK alpha 2
        const std::vector<double> freqs = inv_freq(base, head_dim);
        KeyRotation rot{freqs, 0.5, head_dim, RopeStyle::RotateHalf};
        if (head_dim == 64) { // partial rotary dims, interleaved
            rot.n_rot = 48;
            rot.style = RopeStyle::Interleaved;
        }
        const std::vector<double> rot_freqs = inv_freq(base, rot.n_rot);
        rot.inv_freq = rot_freqs;

        AttentionProblem p = last_queries_problem(n_head, n_head_kv, head_dim, q.data(), n_q, k.data(), v.data(), n_kv);
        p.q_pos0 = q_pos0;
        p.rotate_keys = rotate ? &rot : nullptr;
        attention_variants_match_the_cpu(p, k.data(), k.size() * 4, v.data(), v.size() * 4);
    }

    // The operations of the qwen2, qwen3, gemma2/3 and phi3 families against the CPU's:
    // GeGLU and soft-capping (ops.h, to 1e-7), scaling and bias rows (exact: one float
    // operation per value, as the CPU backend does them), each also in place as the forward
    // pass runs them.
    void family_elementwise_ops_match_the_cpu()
    {
        REQUIRE_GPU();
        const int64_t rows = 7, width = 4099, n = rows * width; // odd sizes, several grid blocks
        const std::vector<float> a = random_floats(size_t(n), 131, 3.0f), b = random_floats(size_t(n), 132, 2.0f);
        const std::vector<float> bias = random_floats(size_t(width), 133);
        float *da = dev_upload(a), *db = dev_upload(b), *dbias = dev_upload(bias);
        auto *dout = static_cast<float *>(dev_alloc(size_t(n) * 4));
        QVERIFY2(da && db && dbias && dout, m_api.error(m_ctx));
        std::vector<float> gpu(static_cast<size_t>(n)), cpu(static_cast<size_t>(n));

        geglu(a.data(), b.data(), cpu.data(), n);
        CUDA_OK(m_api.geglu(m_ctx, da, db, dout, n));
        QVERIFY2(dev_download(gpu, static_cast<const float *>(dout)), m_api.error(m_ctx));
        QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QStringLiteral("geglu: %1").arg(nmse(gpu, cpu))));

        // Soft-capping that bites: values of a few units against a cap of 2.
        cpu = a;
        softcap(cpu.data(), 2.0f, n);
        CUDA_OK(m_api.upload(m_ctx, dout, a.data(), size_t(n) * 4));
        CUDA_OK(m_api.softcap(m_ctx, dout, 2.0f, n));
        QVERIFY2(dev_download(gpu, static_cast<const float *>(dout)), m_api.error(m_ctx));
        QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QStringLiteral("softcap: %1").arg(nmse(gpu, cpu))));
        QVERIFY(*std::max_element(gpu.begin(), gpu.end()) < 2.0f);
        QCOMPARE(m_api.softcap(m_ctx, dout, 0.0f, n), LONGSCOPE_CUDA_ERR_ARGUMENT);

        const float sq = std::sqrt(float(width)); // Gemma's embedding scale
        for (size_t i = 0; i < cpu.size(); ++i)
            cpu[i] = a[i] * sq;
        CUDA_OK(m_api.upload(m_ctx, dout, a.data(), size_t(n) * 4));
        CUDA_OK(m_api.scale(m_ctx, dout, sq, n));
        QVERIFY2(dev_download(gpu, static_cast<const float *>(dout)), m_api.error(m_ctx));
        QVERIFY(std::memcmp(gpu.data(), cpu.data(), cpu.size() * 4) == 0);

        for (int64_t t = 0; t < rows; ++t)
            for (int64_t i = 0; i < width; ++i)
                cpu[size_t(t * width + i)] = a[size_t(t * width + i)] + bias[size_t(i)];
        CUDA_OK(m_api.upload(m_ctx, dout, a.data(), size_t(n) * 4));
        CUDA_OK(m_api.add_bias(m_ctx, dout, dbias, rows, width));
        QVERIFY2(dev_download(gpu, static_cast<const float *>(dout)), m_api.error(m_ctx));
        QVERIFY(std::memcmp(gpu.data(), cpu.data(), cpu.size() * 4) == 0);

        // GeGLU in place over the gate.
        geglu(a.data(), b.data(), cpu.data(), n);
        CUDA_OK(m_api.geglu(m_ctx, da, db, da, n));
        QVERIFY2(dev_download(gpu, static_cast<const float *>(da)), m_api.error(m_ctx));
        QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QStringLiteral("geglu in place: %1").arg(nmse(gpu, cpu))));
    }

    // Gemma's (1 + w) norms and the per-head q/k norms of qwen3 and gemma3: rows of head_dim,
    // normalised in place, against the CPU's rmsnorm with the same offset.
    void rmsnorm_with_an_offset_in_place_matches_the_cpu()
    {
        REQUIRE_GPU();
        for (auto [rows, n, offset] : {std::tuple<int64_t, int64_t, float>{37 * 4, 64, 1.0f}, {5 * 3, 40, 1.0f},
                                       {3, 1001, 0.0f}, {3, 1001, 1.0f}}) {
            const std::vector<float> x = random_floats(size_t(rows * n), 141, 3.0f), w = random_floats(size_t(n), 142, 0.3f);
            float *dx = dev_upload(x);
            const float *dw = dev_upload(w);
            QVERIFY2(dx && dw, m_api.error(m_ctx));
            CUDA_OK(m_api.rmsnorm(m_ctx, dx, dw, dx, rows, n, 1e-6f, offset));
            std::vector<float> gpu(x.size()), cpu(x.size());
            QVERIFY2(dev_download(gpu, static_cast<const float *>(dx)), m_api.error(m_ctx));
            rmsnorm(x.data(), f32_view(w, {n}), cpu.data(), rows, n, 1e-6f, offset);
            QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QStringLiteral("%1x%2 offset %3: %4")
                                                          .arg(rows)
                                                          .arg(n)
                                                          .arg(offset)
                                                          .arg(nmse(gpu, cpu))));
        }
    }

    // Every RoPE scaling method as the runtime turns it into a base, a position scale and
    // per-dimension factors (runtime/rope_base.h), at a length inside and one past the original
    // context; the table is the engine's (rope_inv_freq over the factors), uploaded. Also the
    // context shift's rotation: every row by the same angle (position step 0).
    void rope_of_every_scaling_method_matches_the_cpu_data()
    {
        QTest::addColumn<int>("method");
        QTest::addColumn<int>("style");
        for (RopeScalingType m : {RopeScalingType::None, RopeScalingType::Linear, RopeScalingType::Dynamic,
                                  RopeScalingType::Ntk, RopeScalingType::Yarn, RopeScalingType::Llama3,
                                  RopeScalingType::LongRope})
            for (RopeStyle st : {RopeStyle::Interleaved, RopeStyle::RotateHalf})
                QTest::addRow("%s %s", to_string(m).data(), st == RopeStyle::Interleaved ? "interleaved" : "neox")
                    << int(m) << int(st);
    }
    void rope_of_every_scaling_method_matches_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(int, method);
        QFETCH(int, style);
        HParams hp;
        hp.n_embd = 6 * 64;
        hp.n_head = 6;
        hp.n_head_kv = 6;
        hp.n_rot = 48; // partial rotary dims
        hp.n_ctx_train = 4096;
        hp.rope_base = 500000.0f;
        hp.rope.type = RopeScalingType(method);
        hp.rope.factor = 8.0f;
        hp.rope.orig_ctx = 1024;
        for (int i = 0; i < hp.n_rot / 2; ++i) {
            hp.rope.short_factors.push_back(1.0f + 0.05f * float(i));
            hp.rope.long_factors.push_back(1.0f + 0.6f * float(i));
        }
        const int64_t n_tokens = 37;
        const int n_heads = 6, head_dim = 64;
        for (int seq_len : {600, 3000}) {
            const RopeInEffect r = rope_in_effect(hp, RopeSettings{}, seq_len);
            const std::vector<double> table = inv_freq(r.base, hp.n_rot, r.factors);
            const double *dfreq = dev_upload(table);
            const std::vector<float> x = random_floats(size_t(n_tokens * n_heads * head_dim), uint32_t(150 + seq_len));
            for (double step : {1.0, 0.0}) {
                const int64_t pos0 = seq_len - n_tokens;
                std::vector<double> pos(static_cast<size_t>(n_tokens));
                for (int64_t t = 0; t < n_tokens; ++t)
                    pos[size_t(t)] = (double(pos0) + double(t) * step) * r.pos_scale;
                float *dx = dev_upload(x);
                QVERIFY2(dx && dfreq, m_api.error(m_ctx));
                CUDA_OK(m_api.rope(m_ctx, dx, n_tokens, n_heads, head_dim, hp.n_rot, style, nullptr, double(pos0),
                                   step, r.pos_scale, dfreq));
                std::vector<float> gpu(x.size()), cpu = x;
                QVERIFY2(dev_download(gpu, static_cast<const float *>(dx)), m_api.error(m_ctx));
                rope(cpu.data(), n_tokens, n_heads, head_dim, hp.n_rot, RopeStyle(style), pos, table);
                QVERIFY2(nmse(gpu, cpu) <= 1e-7, qPrintable(QStringLiteral("length %1, step %2: %3")
                                                              .arg(seq_len)
                                                              .arg(step)
                                                              .arg(nmse(gpu, cpu))));
                // The dims past n_rot are untouched.
                for (int64_t i = 0; i < n_tokens * n_heads; ++i)
                    QVERIFY(std::memcmp(gpu.data() + i * head_dim + hp.n_rot, x.data() + i * head_dim + hp.n_rot,
                                        size_t(head_dim - hp.n_rot) * 4) == 0);
            }
        }
        // A table is required.
        float *dx = static_cast<float *>(dev_alloc(64 * 4));
        QCOMPARE(m_api.rope(m_ctx, dx, 1, 1, 64, 64, style, nullptr, 0.0, 1.0, 1.0, nullptr),
                 LONGSCOPE_CUDA_ERR_ARGUMENT);
    }

    // Gemma's attention: a score scale other than 1/sqrt(head_dim), soft-capping that bites,
    // sliding windows shorter than the sequence (also of one key), with and without keys
    // rotated while they load; every algorithm against the CPU's plain attention.
    void attention_with_scale_softcap_and_window_matches_the_cpu_data()
    {
        QTest::addColumn<int>("n_q");
        QTest::addColumn<int>("n_kv");
        QTest::addColumn<float>("softcap");
        QTest::addColumn<int>("window");
        QTest::addColumn<bool>("rotate");
        for (bool rotate : {false, true}) {
            QTest::addRow("softcap 1 q37 kv300%s", rotate ? " pre-rope" : "") << 37 << 300 << 1.0f << 0 << rotate;
            QTest::addRow("window 40 q37 kv300%s", rotate ? " pre-rope" : "") << 37 << 300 << 0.0f << 40 << rotate;
            QTest::addRow("window 40 softcap 5 q1 kv1000%s", rotate ? " pre-rope" : "") << 1 << 1000 << 5.0f << 40
                                                                                       << rotate;
            QTest::addRow("window 1 q37 kv37%s", rotate ? " pre-rope" : "") << 37 << 37 << 0.0f << 1 << rotate;
            QTest::addRow("window 200 softcap 2 q37 kv1000%s", rotate ? " pre-rope" : "") << 37 << 1000 << 2.0f << 200
                                                                                         << rotate;
        }
    }
    void attention_with_scale_softcap_and_window_matches_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(int, n_q);
        QFETCH(int, n_kv);
        QFETCH(float, softcap);
        QFETCH(int, window);
        QFETCH(bool, rotate);
        const int n_head = 8, n_head_kv = 4, head_dim = 64;
        const int64_t ekv = int64_t(n_head_kv) * head_dim;
        const std::vector<float> q = random_floats(size_t(n_q) * n_head * head_dim, 161, 1.5f);
        const std::vector<float> k = random_floats(size_t(n_kv) * ekv, 162, 1.5f);
        const std::vector<float> v = random_floats(size_t(n_kv) * ekv, 163);
        const std::vector<double> freqs = inv_freq(10000.0, head_dim);
        KeyRotation rot{freqs, 1.0, head_dim, RopeStyle::RotateHalf};
        AttentionProblem p = last_queries_problem(n_head, n_head_kv, head_dim, q.data(), n_q, k.data(), v.data(), n_kv);
        p.scale = 1.0f / std::sqrt(256.0f); // query_pre_attn_scalar 256 on a head of 64
        p.softcap = softcap;
        p.window = window;
        p.rotate_keys = rotate ? &rot : nullptr;
        attention_variants_match_the_cpu(p, k.data(), k.size() * 4, v.data(), v.size() * 4);
    }

    // Rows written on the device are the `gguf` package's numpy quantizers' bytes
    // (tests/data/kv/rows.bin), bit for bit, and the CPU encoder's on blocks made to hit the
    // corners of the rules: all zeros, ties for the largest magnitude, a negative extreme,
    // values that land on .5 after scaling, tiny values (a subnormal f16 scale).
    void kv_rows_are_the_gguf_quantizers_bytes()
    {
        REQUIRE_GPU();
        std::ifstream in(LONGSCOPE_TEST_DATA "/kv/rows.bin", std::ios::binary);
        int32_t hdr[2] = {0, 0};
        in.read(reinterpret_cast<char *>(hdr), sizeof hdr);
        const int64_t n_rows = hdr[0], n = hdr[1];
        std::vector<float> rows(size_t(n_rows * n));
        in.read(reinterpret_cast<char *>(rows.data()), std::streamsize(rows.size() * 4));
        std::vector<uint8_t> f16(rows.size() * 2), q8(rows.size() / 32 * 34), q4(rows.size() / 32 * 18);
        for (auto *b : {&f16, &q8, &q4})
            in.read(reinterpret_cast<char *>(b->data()), std::streamsize(b->size()));
        QVERIFY2(in && n_rows > 0 && n % 32 == 0, "tests/data/kv/rows.bin is missing or short");
        const float *dsrc = dev_upload(rows);
        QVERIFY2(dsrc, m_api.error(m_ctx));
        const std::pair<int, const std::vector<uint8_t> *> expected[] = {
            {LONGSCOPE_CUDA_KV_F16, &f16}, {LONGSCOPE_CUDA_KV_Q8_0, &q8}, {LONGSCOPE_CUDA_KV_Q4_0, &q4}};
        for (const auto &[type, bytes] : expected) {
            void *ddst = dev_alloc(bytes->size());
            QVERIFY2(ddst, m_api.error(m_ctx));
            CUDA_OK(m_api.kv_convert(m_ctx, dsrc, LONGSCOPE_CUDA_KV_F32, ddst, type, n_rows, n));
            std::vector<uint8_t> got(bytes->size());
            QVERIFY2(dev_download(got, static_cast<const uint8_t *>(ddst)), m_api.error(m_ctx));
            QVERIFY2(got == *bytes, qPrintable(QStringLiteral("type %1 differs from the gguf bytes").arg(type)));
        }

        // Corner blocks against the CPU's encoder (the same rules as ggml's reference).
        std::vector<float> corners(8 * 32, 0.0f);                          // block 0: all zeros
        for (int j = 0; j < 32; ++j) {
            corners[size_t(32 + j)] = j % 2 ? 3.0f : -3.0f;                // block 1: a tie, -3 first
            corners[size_t(64 + j)] = float(j - 20) * 0.25f;               // block 2: negative extreme
            corners[size_t(96 + j)] = float(j) * (127.0f / 31.0f) / 2.0f;  // block 3: .5 after scaling
            corners[size_t(128 + j)] = float(j + 1) * 1e-7f;               // block 4: a subnormal f16 scale
            corners[size_t(160 + j)] = j == 7 ? -8.0f : float(j % 5);      // block 5: a single negative max
            corners[size_t(192 + j)] = j == 0 ? -0.0f : 0.0f;              // block 6: a negative zero
            corners[size_t(224 + j)] = std::ldexp(1.0f, j - 16) * (j % 3 == 0 ? -1.0f : 1.0f); // block 7
        }
        const float *dcorners = dev_upload(corners);
        QVERIFY2(dcorners, m_api.error(m_ctx));
        for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0}) {
            const std::vector<uint8_t> want = encode_rows(t, corners);
            void *ddst = dev_alloc(want.size());
            QVERIFY2(ddst, m_api.error(m_ctx));
            CUDA_OK(m_api.kv_convert(m_ctx, dcorners, LONGSCOPE_CUDA_KV_F32, ddst, cuda_kv(t), 2, 128));
            std::vector<uint8_t> got(want.size());
            QVERIFY2(dev_download(got, static_cast<const uint8_t *>(ddst)), m_api.error(m_ctx));
            QVERIFY2(got == want, dtype_name(t).data());
        }
        // Rows that are not whole blocks are refused.
        QCOMPARE(m_api.kv_convert(m_ctx, dcorners, LONGSCOPE_CUDA_KV_F32, const_cast<float *>(dcorners),
                                  LONGSCOPE_CUDA_KV_Q8_0, 1, 48),
                 LONGSCOPE_CUDA_ERR_ARGUMENT);
    }

    // Rows converted between every pair of types (the live switch of KV types) equal the CPU's
    // conversion (decode, then encode: kv/kv_store.h copy_kv_rows), bit for bit. Rows of 96
    // values (3 blocks), 37 of them; f32 and f16 rows also of 40 values (no blocks).
    void kv_conversions_match_the_cpu()
    {
        REQUIRE_GPU();
        const DType types[] = {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0};
        for (int64_t n : {int64_t(96), int64_t(40)})
            for (DType from : types)
                for (DType to : types) {
                    if (n % 32 != 0 && (block_elems(from) > 1 || block_elems(to) > 1))
                        continue;
                    const int64_t n_rows = 37;
                    const std::vector<float> x = random_floats(size_t(n_rows * n), uint32_t(171 + n), 2.0f);
                    const std::vector<uint8_t> src = encode_rows(from, x);
                    std::vector<float> decoded(x.size());
                    dequantize_row(from, src.data(), decoded.data(), int64_t(x.size()));
                    const std::vector<uint8_t> want = encode_rows(to, decoded);
                    const uint8_t *dsrc = dev_upload(src);
                    void *ddst = dev_alloc(want.size());
                    QVERIFY2(dsrc && ddst, m_api.error(m_ctx));
                    CUDA_OK(m_api.kv_convert(m_ctx, dsrc, cuda_kv(from), ddst, cuda_kv(to), n_rows, n));
                    std::vector<uint8_t> got(want.size());
                    QVERIFY2(dev_download(got, static_cast<const uint8_t *>(ddst)), m_api.error(m_ctx));
                    QVERIFY2(got == want, qPrintable(QStringLiteral("%1 -> %2, rows of %3")
                                                         .arg(dtype_name(from).data())
                                                         .arg(dtype_name(to).data())
                                                         .arg(n)));
                }
    }

    // Attention read straight from encoded rows (f16, q8_0, q4_0 keys and values chosen
    // separately, keys cached before RoPE too) against the CPU's attention over the same bytes;
    // and the same result as over the decoded rows given as floats (nothing lost in reading).
    void attention_over_encoded_rows_matches_the_cpu_data()
    {
        QTest::addColumn<int>("k_type");
        QTest::addColumn<int>("v_type");
        QTest::addColumn<int>("n_q");
        QTest::addColumn<int>("n_kv");
        QTest::addColumn<bool>("rotate");
        const DType types[] = {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0};
        for (DType k : types)
            for (DType v : types) {
                if (k == DType::F32 && v == DType::F32)
                    continue; // attention_matches_the_cpu
                for (bool rotate : {false, true})
                    QTest::addRow("k=%s v=%s q37 kv300%s", dtype_name(k).data(), dtype_name(v).data(),
                                  rotate ? " pre-rope" : "")
                        << int(k) << int(v) << 37 << 300 << rotate;
                QTest::addRow("k=%s v=%s q1 kv1000", dtype_name(k).data(), dtype_name(v).data())
                    << int(k) << int(v) << 1 << 1000 << false;
            }
    }
    void attention_over_encoded_rows_matches_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(int, k_type);
        QFETCH(int, v_type);
        QFETCH(int, n_q);
        QFETCH(int, n_kv);
        QFETCH(bool, rotate);
        const DType kt = DType(k_type), vt = DType(v_type);
        const int n_head = 8, n_head_kv = 2, head_dim = 128;
        const int64_t ekv = int64_t(n_head_kv) * head_dim;
        const std::vector<float> q = random_floats(size_t(n_q) * n_head * head_dim, 181, 1.5f);
        const std::vector<float> k = random_floats(size_t(n_kv) * ekv, 182, 1.5f);
        const std::vector<float> v = random_floats(size_t(n_kv) * ekv, 183);
        const std::vector<uint8_t> kb = encode_rows(kt, k), vb = encode_rows(vt, v);
        const std::vector<double> freqs = inv_freq(10000.0, 64);
        KeyRotation rot{freqs, 1.0, 64, RopeStyle::Interleaved};
        AttentionProblem p =
            last_queries_problem(n_head, n_head_kv, head_dim, q.data(), n_q, kb.data(), vb.data(), n_kv);
        p.k_type = kt;
        p.v_type = vt;
        p.rotate_keys = rotate ? &rot : nullptr;
        attention_variants_match_the_cpu(p, kb.data(), kb.size(), vb.data(), vb.size());
        if (QTest::currentTestFailed())
            return;

        // The decoded rows as floats give the same output on the device to 1e-10 (one decode
        // per value, so the sums are the same ones). Q8_0 and Q4_0 keys stored rotated are
        // scored against the query rounded to blocks of 32 (as on the CPU: d = max|x| / 127,
        // x -> d * round(x / d)), so the float run is given that query.
        std::vector<float> kd(k.size()), vd(v.size());
        dequantize_row(kt, kb.data(), kd.data(), int64_t(kd.size()));
        dequantize_row(vt, vb.data(), vd.data(), int64_t(vd.size()));
        std::vector<float> q_seen = q;
        if (!rotate && (kt == DType::Q8_0 || kt == DType::Q4_0))
            for (size_t b = 0; b < q_seen.size(); b += 32) {
                float amax = 0.0f;
                for (size_t e = b; e < b + 32; ++e)
                    amax = std::max(amax, std::fabs(q_seen[e]));
                const float d = amax / 127.0f;
                const float id = d != 0.0f ? 1.0f / d : 0.0f;
                for (size_t e = b; e < b + 32; ++e)
                    q_seen[e] = d * std::round(q_seen[e] * id);
            }
        const float *dq = dev_upload(q), *dq_seen = dev_upload(q_seen), *dkd = dev_upload(kd), *dvd = dev_upload(vd);
        const uint8_t *dkb = dev_upload(kb), *dvb = dev_upload(vb);
        const double *dfreq = dev_upload(freqs);
        QVERIFY2(dq && dq_seen && dkd && dvd && dkb && dvb && dfreq, m_api.error(m_ctx));
        std::vector<float> encoded, floats;
        QVERIFY2(gpu_attention(p, dq, dkb, dvb, p.rotate_keys, dfreq, LONGSCOPE_CUDA_ATTN_TILED, 1, 0, encoded),
                 m_api.error(m_ctx));
        AttentionProblem pf = p;
        pf.k_type = pf.v_type = DType::F32;
        QVERIFY2(gpu_attention(pf, dq_seen, dkd, dvd, p.rotate_keys, dfreq, LONGSCOPE_CUDA_ATTN_TILED, 1, 0, floats),
                 m_api.error(m_ctx));
        QVERIFY2(nmse(encoded, floats) <= 1e-10, qPrintable(QString::number(nmse(encoded, floats))));
        // A head that is not whole blocks is refused for block types.
        if (kt == DType::Q8_0 || kt == DType::Q4_0) {
            AttentionProblem bad = p;
            bad.head_dim = 48;
            bad.n_head_kv = 2;
            std::vector<float> out;
            QVERIFY(!gpu_attention(bad, dq, dkb, dvb, nullptr, nullptr, LONGSCOPE_CUDA_ATTN_NAIVE, 1, 0, out));
            QVERIFY2(QString::fromUtf8(m_api.error(m_ctx)).contains("multiple of 32"), m_api.error(m_ctx));
        }
    }

    // One query over a long cache, as in decoding: split-KV with many ranges equals the single
    // pass and the CPU.
    void split_kv_decode_over_a_long_cache()
    {
        REQUIRE_GPU();
        const int n_head = 8, n_head_kv = 2, head_dim = 128, n_kv = 20000;
        const int64_t ekv = int64_t(n_head_kv) * head_dim;
        const std::vector<float> q = random_floats(size_t(n_head * head_dim), 81);
        const std::vector<float> k = random_floats(size_t(n_kv) * ekv, 82), v = random_floats(size_t(n_kv) * ekv, 83);
        AttentionProblem p = last_queries_problem(n_head, n_head_kv, head_dim, q.data(), 1, k.data(), v.data(), n_kv);
        std::vector<float> cpu(size_t(n_head * head_dim));
        p.out = cpu.data();
        attention_tiled(m_pool, p, true);
        const float *dq = dev_upload(q), *dk = dev_upload(k), *dv = dev_upload(v);
        QVERIFY2(dq && dk && dv, m_api.error(m_ctx));
        std::vector<float> single, split, split_few;
        LongscopeCudaAttentionInfo info{};
        QVERIFY2(gpu_attention(p, dq, dk, dv, nullptr, nullptr, LONGSCOPE_CUDA_ATTN_TILED, 1, 0, single),
                 m_api.error(m_ctx));
        QVERIFY2(gpu_attention(p, dq, dk, dv, nullptr, nullptr, LONGSCOPE_CUDA_ATTN_SPLIT_KV, 0, 0, split, &info),
                 m_api.error(m_ctx));
        QVERIFY2(info.n_splits > 1, qPrintable(QString::number(info.n_splits)));
        // Ranges above the kernel's limit are raised to fit: 2 requested, 20000 keys.
        QVERIFY2(gpu_attention(p, dq, dk, dv, nullptr, nullptr, LONGSCOPE_CUDA_ATTN_SPLIT_KV, 0, 2, split_few, &info),
                 m_api.error(m_ctx));
        QVERIFY(info.n_splits >= 5);
        QVERIFY2(nmse(single, cpu) <= 1e-7, qPrintable(QString::number(nmse(single, cpu))));
        QVERIFY2(nmse(split, cpu) <= 1e-7, qPrintable(QString::number(nmse(split, cpu))));
        QVERIFY2(nmse(split, single) <= 1e-10, qPrintable(QString::number(nmse(split, single))));
        QVERIFY2(nmse(split_few, single) <= 1e-10, qPrintable(QString::number(nmse(split_few, single))));
    }

    void argmax_matches_the_cpu_sampler()
    {
        REQUIRE_GPU();
        for (int64_t n : {int64_t(1), int64_t(31), int64_t(32003)}) {
            const int64_t rows = 4;
            std::vector<float> logits = random_floats(size_t(rows * n), uint32_t(91 + n), 3.0f);
            if (n > 100) {
                float *r0 = logits.data();
                r0[5] = r0[20000] = 100.0f; // a tie: the lower index wins
                float *r1 = logits.data() + n;
                r1[n - 1] = 100.0f; // the last entry
                float *r2 = logits.data() + 2 * n;
                std::fill(r2, r2 + n, 0.25f); // all equal: 0
                float *r3 = logits.data() + 3 * n;
                r3[7] = std::numeric_limits<float>::quiet_NaN(); // never wins
                r3[8] = -std::numeric_limits<float>::infinity();
            }
            const float *dl = dev_upload(logits);
            auto *dout = static_cast<int32_t *>(dev_alloc(size_t(rows) * 4));
            QVERIFY2(dl && dout, m_api.error(m_ctx));
            CUDA_OK(m_api.argmax(m_ctx, dl, rows, n, dout));
            std::vector<int32_t> gpu(static_cast<size_t>(rows));
            QVERIFY2(dev_download(gpu, static_cast<const int32_t *>(dout)), m_api.error(m_ctx));
            for (int64_t r = 0; r < rows; ++r)
                QCOMPARE(gpu[size_t(r)], argmax(std::span<const float>(logits.data() + r * n, size_t(n))));
        }
    }
};

QTEST_APPLESS_MAIN(TestCudaBackend)
#include "tst_cuda_backend.moc"
