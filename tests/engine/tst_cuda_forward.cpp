// The forward pass on the GPU (the CUDA backend through a Session with backend CUDA) against the CPU
// forward pass: the bundled model; the tiny model of every architecture family
// (tests/data/arch, also against the logits Hugging Face transformers computed); the RoPE
// methods chosen in the settings; KV caches of f16, q8_0 and q4_0 rows (a random model with a
// head size of 64), switched live. Without a usable GPU every check is skipped with the
// plugin's reason (scripts/gpu-check runs them on a GPU machine and fails on any skip). Every
// check also requires that the steps ran on the GPU: a session that fell back to the CPU fails.
//
// Tolerance: logits within k_gpu_logit_tol (absolute) of the CPU's at every step, and greedy
// tokens identical. The weights are F32 and cuBLAS multiplies in F32 (no TF32), so the two
// backends differ only in summation order (cuBLAS splits the inner dimension differently from
// the CPU's vector chains; attention sums keys in other tiles): float32 rounding of ~1e-6
// relative per op, carried through 5 layers and 100 steps. 1e-3 is ten times the tolerance
// the CPU's own variants are held to (tst_techniques) and far below the logit gaps that decide
// the greedy tokens here. vmm and static caches run the same kernels on the same rows, so they
// must agree exactly.
#include "support/arch_fixtures.h"
#include "support/comparisons.h"
#include "support/cuda_status.h"
#include "support/greedy_trace.h"
#include "support/kv_models.h"
#include "longscope/backend.h"
#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/quantize.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <functional>

using namespace longscope;

using longscope::test::expected_row_bytes;
using longscope::test::max_diff;
using longscope::test::random_kv_model;
using longscope::test::random_kv_tokens;
using longscope::test::Trace;

namespace {

constexpr double k_gpu_logit_tol = 1e-3;

// Greedy decoding as the shared runner does it, with the session's backend note (a fallback to
// the CPU) shown as a warning.
Trace run_greedy(const Model &m, const std::vector<int32_t> &prompt, int n_new, const Settings &s, int n_ctx = 512,
                 const std::function<void(Session &, int)> &between = {})
{
    Trace t = longscope::test::run_greedy(m, prompt, n_new, s, n_ctx, between);
    if (!t.note.empty())
        qWarning("%s", t.note.c_str());
    return t;
}

Settings cuda_settings()
{
    Settings s;
    s.backend = ComputeBackend::Cuda;
    return s;
}

// The tolerance of the architecture suite (tst_architectures) against transformers' logits:
// F32 weights, so the engine and transformers differ only in the order of float sums and in
// the transcendental functions (measured on the CPU: 4e-6 to 2.3e-5).
constexpr double k_transformers_tol = 2e-4;

// The logits after the prompt and after each further token (the same tokens for every
// session compared, so a near tie cannot make two runs diverge), with the metrics of every
// step and the backend note; `between` runs before token i.
Trace feed(const Model &m, const std::vector<int32_t> &prompt, const std::vector<int32_t> &tokens, const Settings &s,
           int n_ctx, const std::function<void(Session &, int)> &between = {})
{
    return longscope::test::run_greedy(m, prompt, int(tokens.size()), s, n_ctx, between, tokens);
}

double worst_diff(const Trace &a, const Trace &b)
{
    if (a.logits.size() != b.logits.size())
        return INFINITY;
    double d = 0;
    for (size_t i = 0; i < a.logits.size(); ++i)
        d = std::max(d, max_diff(a.logits[i], b.logits[i]));
    return d;
}

} // namespace

#define REQUIRE_GPU()                                                                                      \
    do {                                                                                                   \
        if (!m_cuda.available)                                                                             \
            QSKIP(("no usable CUDA device: " + m_cuda.detail).c_str());                                    \
    } while (0)

// Every step of a run was evaluated on the GPU (no fallback to the CPU).
#define RAN_ON_THE_GPU(fed)                                                                                \
    do {                                                                                                   \
        QVERIFY2((fed).note.empty(), (fed).note.c_str());                                                  \
        QVERIFY(!(fed).metrics.empty());                                                                   \
        for (const StepMetrics &m_ : (fed).metrics)                                                        \
            QCOMPARE(m_.settings.backend, ComputeBackend::Cuda);                                           \
    } while (0)

// Compares a trace with the CPU's: same tokens, logits within the tolerance at every step, and
// every step ran on the GPU.
#define COMPARE_WITH_CPU(t, cpu)                                                                           \
    do {                                                                                                   \
        QCOMPARE((t).tokens, (cpu).tokens);                                                                \
        QCOMPARE((t).logits.size(), (cpu).logits.size());                                                  \
        for (size_t i_ = 0; i_ < (t).logits.size(); ++i_) {                                                \
            const double d_ = max_diff((t).logits[i_], (cpu).logits[i_]);                                  \
            QVERIFY2(d_ <= k_gpu_logit_tol, qPrintable(QString("step %1: logits differ by %2").arg(i_).arg(d_))); \
        }                                                                                                  \
    } while (0)

class TestCudaForward : public QObject {
    Q_OBJECT

    BackendStatus m_cuda;
    std::unique_ptr<Model> m_model;
    std::vector<int32_t> m_prompt;
    Trace m_cpu_plain;

private slots:
    void initTestCase()
    {
        m_cuda = longscope::test::cuda_status();
        qInfo("CUDA backend: %s", m_cuda.detail.c_str());
        m_model = Model::load(LONGSCOPE_BUNDLED_MODEL);
        m_prompt = m_model->tokenizer().encode("Once upon a time", true);
        if (m_cuda.available)
            m_cpu_plain = run_greedy(*m_model, m_prompt, 100, Settings{});
    }

    void greedy_tokens_match_the_cpu_data()
    {
        QTest::addColumn<QString>("prompt");
        QTest::addRow("once") << "Once upon a time";
        QTest::addRow("lily") << "Lily and Ben went to the park. They saw a big dog";
        QTest::addRow("tom") << "Tom had a red ball.";
        QTest::addRow("one word") << "The";
    }
    void greedy_tokens_match_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(QString, prompt);
        const auto ids = m_model->tokenizer().encode(prompt.toStdString(), true);
        const Trace cpu = run_greedy(*m_model, ids, 100, Settings{});
        const Trace gpu = run_greedy(*m_model, ids, 100, cuda_settings());
        COMPARE_WITH_CPU(gpu, cpu);
        for (const StepMetrics &m : gpu.metrics) {
            QCOMPARE(m.settings.backend, ComputeBackend::Cuda);
            QVERIFY(m.memory.device_used > 0);
            QVERIFY(m.memory.device_free > 0);
        }
    }

    void every_prompt_position_has_the_cpu_logits()
    {
        REQUIRE_GPU();
        // logits for every prompt token (logits_from = 0), not only the last.
        SessionOptions o;
        o.n_ctx = 512;
        Session cpu(*m_model, o);
        o.settings = cuda_settings();
        Session gpu(*m_model, o);
        const auto a = cpu.eval(m_prompt, true), b = gpu.eval(m_prompt, true);
        QCOMPARE(b.size(), a.size());
        QVERIFY(max_diff({a.begin(), a.end()}, {b.begin(), b.end()}) <= k_gpu_logit_tol);
    }

    void every_combination_matches_the_cpu_data()
    {
        longscope::test::add_technique_matrix_rows();
    }
    void every_combination_matches_the_cpu()
    {
        REQUIRE_GPU();
        const Settings s = longscope::test::technique_matrix_settings(cuda_settings());
        const Trace t = run_greedy(*m_model, m_prompt, 100, s);
        COMPARE_WITH_CPU(t, m_cpu_plain);
    }

    void switching_every_setting_between_steps_loses_nothing()
    {
        REQUIRE_GPU();
        // As tst_techniques on the CPU: modes, attention kinds and key storage cycle while
        // generating; the cache migrates and converts on the device each time.
        const KvMode modes[] = {KvMode::Vmm, KvMode::Concat, KvMode::None, KvMode::Static};
        const Trace t = run_greedy(*m_model, m_prompt, 100, cuda_settings(), 512, [&](Session &s, int i) {
            Settings st = s.settings();
            st.kv_mode = modes[i % 4];
            st.rope.store_kv_before_rope = (i / 3) % 2 == 1;
            st.attention.memory_efficient = (i / 2) % 2 == 1;
            st.attention.causal_flash = (i / 5) % 2 == 1;
            s.set_settings(st);
        });
        COMPARE_WITH_CPU(t, m_cpu_plain);
        for (const StepMetrics &m : t.metrics)
            QCOMPARE(m.settings.backend, ComputeBackend::Cuda);
    }

    void auto_alpha_with_keys_before_rope_matches_the_cpu()
    {
        REQUIRE_GPU();
        // The base changes every step past half the trained context: keys cached before RoPE are
        // rotated with it on the device, and converting them back and forth follows each key's base.
        Settings s;
        s.rope.ntk_auto = true;
        s.rope.store_kv_before_rope = true;
        auto flip = [](Session &session, int i) {
            if (i % 7 == 6) {
                Settings st = session.settings();
                st.rope.store_kv_before_rope = !st.rope.store_kv_before_rope;
                session.set_settings(st);
            }
        };
        // Auto alpha passes 1 at 489 tokens for this model (trained on 512): a 500-token prompt
        // and 60 steps put every step on a base of its own.
        std::vector<int32_t> long_prompt;
        while (long_prompt.size() < 500)
            long_prompt.insert(long_prompt.end(), m_prompt.begin(), m_prompt.end());
        long_prompt.resize(500);
        const Trace cpu = run_greedy(*m_model, long_prompt, 60, s, 1024, flip);
        s.backend = ComputeBackend::Cuda;
        const Trace gpu = run_greedy(*m_model, long_prompt, 60, s, 1024, flip);
        COMPARE_WITH_CPU(gpu, cpu);
        QVERIFY(gpu.metrics.back().ntk_alpha > 1.0);
        QVERIFY(gpu.metrics.back().rope_base != gpu.metrics[gpu.metrics.size() - 2].rope_base);
    }

    void context_shift_matches_the_cpu_data()
    {
        QTest::addColumn<KvMode>("mode");
        QTest::addColumn<bool>("before_rope");
        for (KvMode mode : {KvMode::Concat, KvMode::Static, KvMode::Vmm})
            for (bool br : {false, true})
                QTest::addRow("kv=%s%s", std::string(to_string(mode)).c_str(), br ? " before-rope" : "") << mode << br;
    }
    void context_shift_matches_the_cpu()
    {
        REQUIRE_GPU();
        // 150 steps through a 64-token context under the shift policy: rows moved by device
        // copies, keys cached after RoPE turned on the device, as the CPU does.
        QFETCH(KvMode, mode);
        QFETCH(bool, before_rope);
        Settings s;
        s.kv_mode = mode;
        s.rope.store_kv_before_rope = before_rope;
        s.overflow = OverflowPolicy::Shift;
        const Trace cpu = run_greedy(*m_model, m_prompt, 150, s, 64);
        s.backend = ComputeBackend::Cuda;
        const Trace gpu = run_greedy(*m_model, m_prompt, 150, s, 64);
        COMPARE_WITH_CPU(gpu, cpu);
        QCOMPARE(gpu.metrics.back().settings.backend, ComputeBackend::Cuda);
        QVERIFY(gpu.metrics.back().position <= 64);
    }

    void switching_the_backend_between_steps_loses_nothing()
    {
        REQUIRE_GPU();
        // Every tenth step the context moves to the other backend (its cache rebuilt there):
        // before tokens 9, 19, ..., 99, so tokens 9-18, 29-38, ... run on the GPU and the last
        // one, after ten moves, on the CPU. A step that fell back to the CPU would leave a note.
        const Trace t = run_greedy(*m_model, m_prompt, 100, Settings{}, 512, [](Session &s, int i) {
            if (i % 10 == 9) {
                Settings st = s.settings();
                st.backend = st.backend == ComputeBackend::Cpu ? ComputeBackend::Cuda : ComputeBackend::Cpu;
                s.set_settings(st);
            }
        });
        COMPARE_WITH_CPU(t, m_cpu_plain);
        QVERIFY2(t.note.empty(), t.note.c_str());
        // metrics[0] is the prompt's step, metrics[1 + i] token i's.
        QCOMPARE(t.metrics.size(), size_t(101));
        for (int i = 0; i < 100; ++i) {
            const bool gpu = i >= 9 && ((i - 9) / 10) % 2 == 0;
            QCOMPARE(t.metrics[size_t(1 + i)].settings.backend, gpu ? ComputeBackend::Cuda : ComputeBackend::Cpu);
        }
    }

    void vmm_grows_by_granules_and_equals_static()
    {
        REQUIRE_GPU();
        // A prompt just short of one mapping granule per region (16384 rows of 128 bytes fill
        // the 2 MiB granule of current GPUs), then decoding past it: resident memory grows by
        // whole granules while the reservation stays, and every logit equals the static cache's.
        const int n_prompt = 16300, limit = 17000;
        std::vector<int32_t> prompt;
        while (int(prompt.size()) < n_prompt)
            prompt.insert(prompt.end(), m_prompt.begin(), m_prompt.end());
        prompt.resize(size_t(n_prompt));
        Settings s = cuda_settings();
        s.attention.memory_efficient = true;
        s.attention.causal_flash = true;
        s.kv_mode = KvMode::Static;
        const Trace st = run_greedy(*m_model, prompt, 120, s, limit);
        s.kv_mode = KvMode::Vmm;
        const Trace vm = run_greedy(*m_model, prompt, 120, s, limit);
        QCOMPARE(vm.tokens, st.tokens);
        for (size_t i = 0; i < vm.logits.size(); ++i)
            QVERIFY2(vm.logits[i] == st.logits[i], qPrintable(QString("step %1").arg(i)));

        const HParams &hp = m_model->hparams();
        const uint64_t regions = 2 * uint64_t(hp.n_layer);
        const uint64_t row = uint64_t(hp.n_embd_kv()) * 4;
        QCOMPARE(st.metrics.back().memory.kv_resident, regions * row * uint64_t(limit));
        uint64_t prev = 0;
        for (const StepMetrics &m : vm.metrics) {
            const uint64_t r = m.memory.kv_resident;
            QVERIFY(r >= prev);
            QVERIFY(r % (regions * 65536) == 0); // whole granules (a multiple of 64 KiB on every GPU)
            QVERIFY(r >= regions * row * uint64_t(m.position));
            QVERIFY(r <= m.memory.kv_reserved);
            QCOMPARE(m.memory.kv_reserved, vm.metrics.front().memory.kv_reserved);
            prev = r;
        }
        qInfo("vmm: resident %llu after the prompt, %llu at the end; reserved %llu; static %llu",
              (unsigned long long)vm.metrics.front().memory.kv_resident,
              (unsigned long long)vm.metrics.back().memory.kv_resident,
              (unsigned long long)vm.metrics.back().memory.kv_reserved,
              (unsigned long long)st.metrics.back().memory.kv_resident);
        QVERIFY(vm.metrics.front().memory.kv_resident < st.metrics.front().memory.kv_resident);
        QVERIFY2(vm.metrics.back().memory.kv_resident > vm.metrics.front().memory.kv_resident,
                 "the vmm cache did not map another granule while decoding past 16384 positions");
    }

    // The tiny model of every family (qwen2's biases, qwen3's q/k norms, gemma2/3's GeGLU,
    // (1+w) norms, post-norms, soft-capping, sliding windows and scaled embeddings, phi3's fused
    // matrices and LongRoPE past its original context, llama3's frequency factors), from its
    // Hugging Face directory and its GGUF, with each attention kind: the logits of every
    // position on the GPU within the transformers tolerance of transformers' own (same
    // argmax) and within k_gpu_logit_tol of the CPU's.
    void every_family_matches_transformers_and_the_cpu_data()
    {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("format");
        QTest::addColumn<int>("attention");
        const char *kinds[] = {"plain", "causal-flash", "mem-efficient"};
        for (const char *f : test::k_arch_families)
            for (const char *fmt : {"hf", "gguf"})
                for (int at = 0; at < 3; ++at)
                    QTest::addRow("%s/%s %s", f, fmt, kinds[at]) << QString(f) << QString(fmt) << at;
    }
    void every_family_matches_transformers_and_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(QString, family);
        QFETCH(QString, format);
        QFETCH(int, attention);
        const std::string fam = family.toStdString();
        const auto m = Model::load(test::arch_fixture_path(fam, format.toStdString()));
        const test::ArchReference ref = test::load_arch_reference(fam);
        QVERIFY2(ref.n_vocab > 0 && !ref.seqs.empty(), "tests/data/arch reference.json cannot be read");
        QCOMPARE(m->hparams().n_vocab, ref.n_vocab);
        Settings st;
        st.attention.causal_flash = attention >= 1;
        st.attention.memory_efficient = attention == 2;
        for (const test::ArchRefSequence &seq : ref.seqs) {
            SessionOptions o;
            o.n_ctx = 128;
            o.n_threads = 2;
            o.settings = st;
            Session cpu(*m, o);
            o.settings.backend = ComputeBackend::Cuda;
            Session gpu(*m, o);
            std::vector<StepMetrics> metrics;
            gpu.set_metrics_callback([&](const StepMetrics &sm) { metrics.push_back(sm); });
            const auto a = cpu.eval(seq.tokens, true);
            const std::vector<float> c(a.begin(), a.end());
            const auto b = gpu.eval(seq.tokens, true);
            const std::vector<float> g(b.begin(), b.end());
            QVERIFY2(gpu.backend_note().empty(), gpu.backend_note().c_str());
            QVERIFY(!metrics.empty());
            QCOMPARE(metrics.back().settings.backend, ComputeBackend::Cuda);
            QCOMPARE(g.size(), seq.logits.size());
            const double vs_cpu = max_diff(g, c);
            double vs_ref = 0;
            const size_t nv = size_t(ref.n_vocab);
            for (size_t t = 0; t < seq.tokens.size(); ++t) {
                const auto gb = g.begin() + std::ptrdiff_t(t * nv), rb = seq.logits.begin() + std::ptrdiff_t(t * nv);
                for (size_t v = 0; v < nv; ++v)
                    vs_ref = std::max(vs_ref, double(std::fabs(gb[std::ptrdiff_t(v)] - rb[std::ptrdiff_t(v)])));
                QCOMPARE(std::max_element(gb, gb + std::ptrdiff_t(nv)) - gb,
                         std::max_element(rb, rb + std::ptrdiff_t(nv)) - rb);
            }
            qInfo("%s %s, %zu tokens on the GPU: max |logit - transformers| %.3g, - CPU %.3g", fam.c_str(),
                  qPrintable(format), seq.tokens.size(), vs_ref, vs_cpu);
            QVERIFY2(vs_ref <= k_transformers_tol, qPrintable(QString("vs transformers %1").arg(vs_ref)));
            QVERIFY2(vs_cpu <= k_gpu_logit_tol, qPrintable(QString("vs the CPU %1").arg(vs_cpu)));
        }
    }

    // transformers' greedy continuation of 32 tokens, generated on the GPU one token a step.
    void every_family_continues_as_transformers_data()
    {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("format");
        for (const char *f : test::k_arch_families)
            for (const char *fmt : {"hf", "gguf"})
                QTest::addRow("%s/%s", f, fmt) << QString(f) << QString(fmt);
    }
    void every_family_continues_as_transformers()
    {
        REQUIRE_GPU();
        QFETCH(QString, family);
        QFETCH(QString, format);
        const std::string fam = family.toStdString();
        const auto m = Model::load(test::arch_fixture_path(fam, format.toStdString()));
        const test::ArchReference ref = test::load_arch_reference(fam);
        QVERIFY2(ref.n_vocab > 0, "tests/data/arch reference.json cannot be read");
        const Trace t = run_greedy(*m, ref.prompt, int(ref.continuation.size()), cuda_settings(), 128);
        QCOMPARE(t.tokens, ref.continuation);
        for (const StepMetrics &sm : t.metrics)
            QCOMPARE(sm.settings.backend, ComputeBackend::Cuda);
    }

    // Every RoPE method chosen in the settings (the frequency tables the engine computes,
    // uploaded as the step needs them): a 30-token prompt of a fixture's sequence and its next
    // 10 tokens one at a time, on the GPU against the CPU. Dynamic scaling past its original
    // context changes the base at every step; LongRoPE with an original context of 16 crosses
    // its switch in the prompt.
    void rope_methods_from_the_settings_match_the_cpu_data()
    {
        QTest::addColumn<QString>("family");
        QTest::addColumn<int>("method");
        QTest::addColumn<float>("factor");
        QTest::addColumn<int>("orig_ctx");
        QTest::newRow("llama none") << "llama" << int(RopeScalingType::None) << 0.0f << 0;
        QTest::newRow("llama linear") << "llama" << int(RopeScalingType::Linear) << 2.0f << 0;
        QTest::newRow("llama dynamic") << "llama" << int(RopeScalingType::Dynamic) << 4.0f << 16;
        QTest::newRow("llama ntk") << "llama" << int(RopeScalingType::Ntk) << 4.0f << 0;
        QTest::newRow("llama yarn") << "llama" << int(RopeScalingType::Yarn) << 4.0f << 32;
        QTest::newRow("llama llama3") << "llama" << int(RopeScalingType::Llama3) << 8.0f << 32;
        QTest::newRow("qwen2 yarn") << "qwen2" << int(RopeScalingType::Yarn) << 4.0f << 16;
        QTest::newRow("gemma3 linear") << "gemma3" << int(RopeScalingType::Linear) << 2.0f << 0;
        QTest::newRow("phi3 longrope") << "phi3" << int(RopeScalingType::LongRope) << 0.0f << 16;
    }
    void rope_methods_from_the_settings_match_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(QString, family);
        QFETCH(int, method);
        QFETCH(float, factor);
        QFETCH(int, orig_ctx);
        const std::string fam = family.toStdString();
        const auto m = Model::load(test::arch_fixture_path(fam, "gguf"));
        const test::ArchReference ref = test::load_arch_reference(fam);
        QVERIFY2(ref.n_vocab > 0 && ref.seqs.front().tokens.size() >= 40, "tests/data/arch reference.json");
        const std::vector<int32_t> &seq = ref.seqs.front().tokens;
        const std::vector<int32_t> prompt(seq.begin(), seq.begin() + 30), next(seq.begin() + 30, seq.begin() + 40);
        Settings s;
        s.rope.scaling = RopeScalingType(method);
        s.rope.scaling_factor = factor;
        s.rope.scaling_orig_ctx = orig_ctx;
        const Trace cpu = feed(*m, prompt, next, s, 128);
        s.backend = ComputeBackend::Cuda;
        const Trace gpu = feed(*m, prompt, next, s, 128);
        RAN_ON_THE_GPU(gpu);
        const double d = worst_diff(gpu, cpu);
        qInfo("%s: max logit difference GPU - CPU %.3g", qPrintable(QString::fromUtf8(QTest::currentDataTag())), d);
        QVERIFY2(d <= k_gpu_logit_tol, qPrintable(QString::number(d)));
    }

    // KV caches of encoded rows on the GPU against the CPU's caches of the same types: a
    // one-layer random model (the cached rows depend only on the tokens), a 60-token prompt and
    // 12 more tokens. Encoding happens on each side from its own keys and values, which differ
    // in the last float bits, so a value lying on a rounding boundary may take the neighbouring
    // code: the tolerance is a quarter of what the type itself moves the logits (measured by
    // tst_kv_quant on this model: q8_0 0.039, q4_0 0.90 from f32) and f16 is held to the f32
    // tolerance. The device really stores the type: its logits are closer to the CPU's with
    // that type than to the CPU's f32 ones. The ledger's KV bytes are what the blocks say.
    void quantized_kv_matches_the_cpu_data()
    {
        QTest::addColumn<int>("type_k");
        QTest::addColumn<int>("type_v");
        QTest::addColumn<KvMode>("mode");
        QTest::addColumn<bool>("mem_efficient");
        QTest::addColumn<bool>("before_rope");
        const struct {
            KvType k, v;
            KvMode mode;
            bool me, br;
        } rows[] = {
            {KvType::F16, KvType::F16, KvMode::Static, false, false},
            {KvType::F16, KvType::F32, KvMode::Vmm, true, true},
            {KvType::Q8_0, KvType::Q8_0, KvMode::Static, false, false},
            {KvType::Q8_0, KvType::Q8_0, KvMode::Static, true, false},
            {KvType::Q8_0, KvType::Q8_0, KvMode::Vmm, true, true},
            {KvType::Q8_0, KvType::F32, KvMode::Concat, false, true},
            {KvType::Q4_0, KvType::Q4_0, KvMode::Static, false, false},
            {KvType::Q4_0, KvType::Q4_0, KvMode::Concat, true, false},
            {KvType::F32, KvType::Q4_0, KvMode::Vmm, false, false},
            {KvType::Q8_0, KvType::Q4_0, KvMode::None, true, false},
        };
        for (const auto &r : rows)
            QTest::addRow("k=%s v=%s kv=%s%s%s", to_string(r.k).data(), to_string(r.v).data(),
                          to_string(r.mode).data(), r.me ? " mem-efficient" : "", r.br ? " keys-before-rope" : "")
                << int(r.k) << int(r.v) << r.mode << r.me << r.br;
    }
    void quantized_kv_matches_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(int, type_k);
        QFETCH(int, type_v);
        QFETCH(KvMode, mode);
        QFETCH(bool, mem_efficient);
        QFETCH(bool, before_rope);
        const KvType tk = KvType(type_k), tv = KvType(type_v);
        QTemporaryDir dir;
        const auto model = random_kv_model(dir.path().toStdString(), 1);
        const int n_ctx = 200;
        const auto prompt = random_kv_tokens(60, 9), next = random_kv_tokens(12, 10);
        Settings s;
        s.kv_mode = mode;
        s.attention.memory_efficient = mem_efficient;
        s.rope.store_kv_before_rope = before_rope;
        const Trace cpu_f32 = feed(*model, prompt, next, s, n_ctx);
        s.kv_type_k = tk;
        s.kv_type_v = tv;
        const Trace cpu = feed(*model, prompt, next, s, n_ctx);
        s.backend = ComputeBackend::Cuda;
        const Trace gpu = feed(*model, prompt, next, s, n_ctx);
        RAN_ON_THE_GPU(gpu);
        const auto quantized = [](KvType t) { return t == KvType::Q8_0 || t == KvType::Q4_0; };
        const double tol = tk == KvType::Q4_0 || tv == KvType::Q4_0 ? 0.9 / 4
                           : quantized(tk) || quantized(tv)           ? 0.039 / 4
                                                                      : k_gpu_logit_tol;
        const double d = worst_diff(gpu, cpu), d_f32 = worst_diff(gpu, cpu_f32);
        qInfo("max logit difference GPU - CPU %.3g (tolerance %.3g); GPU - CPU with f32 rows %.3g", d, tol, d_f32);
        QVERIFY2(d <= tol, qPrintable(QString::number(d)));
        if (quantized(tk) || quantized(tv))
            QVERIFY2(d < d_f32, qPrintable(QString("%1 against %2 from f32").arg(d).arg(d_f32)));

        const HParams &hp = model->hparams();
        const uint64_t per_token =
            uint64_t(hp.n_layer) * (expected_row_bytes(tk, hp.n_embd_kv()) + expected_row_bytes(tv, hp.n_embd_kv()));
        for (const StepMetrics &m : gpu.metrics) {
            QCOMPARE(m.settings.kv_type_k, tk);
            QCOMPARE(m.settings.kv_type_v, tv);
            if (mode == KvMode::Static)
                QCOMPARE(m.memory.kv_resident, uint64_t(n_ctx) * per_token);
            if (mode == KvMode::Concat || mode == KvMode::Vmm) {
                QVERIFY(m.memory.kv_resident >= uint64_t(m.position) * per_token);
                QVERIFY(m.memory.kv_resident <= m.memory.kv_reserved);
            }
        }
        if (mode == KvMode::Static)
            QCOMPARE(gpu.metrics.back().memory.kv_resident, cpu.metrics.back().memory.kv_resident);
    }

    // The KV types switched live mid-generation on the GPU (the cached rows converted on the
    // device), then back to f32, against the CPU doing the same; the ledger shows each type's
    // size from the step after the switch.
    void live_kv_type_switch_matches_the_cpu_data()
    {
        QTest::addColumn<int>("to");
        QTest::addColumn<bool>("mem_efficient");
        for (KvType t : {KvType::F16, KvType::Q8_0, KvType::Q4_0})
            for (bool me : {false, true})
                QTest::addRow("-> %s%s", to_string(t).data(), me ? " mem-efficient" : "") << int(t) << me;
    }
    void live_kv_type_switch_matches_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(int, to);
        QFETCH(bool, mem_efficient);
        const KvType tt = KvType(to);
        QTemporaryDir dir;
        const auto model = random_kv_model(dir.path().toStdString(), 1);
        const int n_ctx = 200;
        const auto prompt = random_kv_tokens(60, 9), next = random_kv_tokens(14, 10);
        const auto switcher = [&](Session &session, int i) {
            if (i == 4 || i == 9) {
                Settings st = session.settings();
                st.kv_type_k = st.kv_type_v = i == 4 ? tt : KvType::F32;
                session.set_settings(st);
            }
        };
        Settings s;
        s.kv_mode = KvMode::Static;
        s.attention.memory_efficient = mem_efficient;
        const Trace cpu = feed(*model, prompt, next, s, n_ctx, switcher);
        s.backend = ComputeBackend::Cuda;
        const Trace gpu = feed(*model, prompt, next, s, n_ctx, switcher);
        const Trace gpu_plain = feed(*model, prompt, next, s, n_ctx);
        RAN_ON_THE_GPU(gpu);
        const double tol = tt == KvType::Q4_0 ? 0.9 / 4 : tt == KvType::Q8_0 ? 0.039 / 4 : k_gpu_logit_tol;
        const double d = worst_diff(gpu, cpu), moved = worst_diff(gpu, gpu_plain);
        qInfo("after the switch: GPU - CPU %.3g (tolerance %.3g), GPU switched - GPU f32 %.3g", d, tol, moved);
        QVERIFY2(d <= tol, qPrintable(QString::number(d)));
        if (tt != KvType::F16)
            QVERIFY2(d < moved, qPrintable(QString("%1 against %2").arg(d).arg(moved)));
        const int64_t ekv = model->hparams().n_embd_kv();
        const int n_layer = model->hparams().n_layer;
        // metrics[0]: the prompt; metrics[i + 1]: token i. Switched before tokens 4 and 9.
        QCOMPARE(gpu.metrics.size(), next.size() + 1);
        for (size_t i = 0; i < gpu.metrics.size(); ++i) {
            const KvType held = i >= 5 && i < 10 ? tt : KvType::F32;
            QCOMPARE(gpu.metrics[i].settings.kv_type_k, held);
            QCOMPARE(gpu.metrics[i].memory.kv_resident,
                     uint64_t(n_ctx) * uint64_t(n_layer) * 2 * expected_row_bytes(held, ekv));
        }
    }

    // The context shift with keys cached after RoPE, where the device turns the kept keys:
    // keys stored as q8_0 or q4_0 blocks (decoded, rotated, encoded again) and keys rotated with
    // llama3's per-dimension factors (the table of the rotation), against the CPU.
    void context_shift_of_encoded_and_scaled_keys_matches_the_cpu_data()
    {
        QTest::addColumn<int>("type_k");
        QTest::addColumn<bool>("llama3");
        QTest::addRow("q8_0 keys") << int(KvType::Q8_0) << false;
        QTest::addRow("q4_0 keys") << int(KvType::Q4_0) << false;
        QTest::addRow("llama3 factors") << int(KvType::F32) << true;
    }
    void context_shift_of_encoded_and_scaled_keys_matches_the_cpu()
    {
        REQUIRE_GPU();
        QFETCH(int, type_k);
        QFETCH(bool, llama3);
        const KvType tk = KvType(type_k);
        QTemporaryDir dir;
        const auto model = llama3 ? Model::load(test::arch_fixture_path("llama", "gguf"))
                                  : random_kv_model(dir.path().toStdString(), 1);
        if (llama3)
            QCOMPARE(model->hparams().rope.type, RopeScalingType::Llama3);
        const int vocab = model->hparams().n_vocab;
        auto prompt = random_kv_tokens(20, 11), next = random_kv_tokens(100, 12);
        for (auto *v : {&prompt, &next})
            for (int32_t &id : *v)
                id %= vocab;
        Settings s;
        s.kv_mode = KvMode::Static;
        s.overflow = OverflowPolicy::Shift;
        s.kv_type_k = tk;
        const Trace cpu = feed(*model, prompt, next, s, 48);
        s.backend = ComputeBackend::Cuda;
        const Trace gpu = feed(*model, prompt, next, s, 48);
        RAN_ON_THE_GPU(gpu);
        QVERIFY(gpu.metrics.back().position <= 48);
        const double tol = tk == KvType::Q4_0 ? 0.9 / 4 : tk == KvType::Q8_0 ? 0.039 / 4 : k_gpu_logit_tol;
        const double d = worst_diff(gpu, cpu);
        qInfo("120 tokens through a 48-token context: GPU - CPU %.3g (tolerance %.3g)", d, tol);
        QVERIFY2(d <= tol, qPrintable(QString::number(d)));
    }

    void batched_generation_on_cuda_is_a_clear_error()
    {
        REQUIRE_GPU();
        SessionOptions o;
        o.settings = cuda_settings();
        GenerateRequest r;
        r.prompt = m_prompt;
        r.max_new_tokens = 4;
        QVERIFY_THROWS_EXCEPTION(BackendError, generate_batch(*m_model, o, {r, r}));
    }
};

QTEST_APPLESS_MAIN(TestCudaForward)
#include "tst_cuda_forward.moc"
