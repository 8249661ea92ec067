// Backends as the engine finds them: the CPU always, the CUDA plugin loaded at run time
// with a reason whenever it cannot be used.
#include "support/cuda_status.h"

#include "longscope/backend.h"
#include "longscope/engine.h"
#include "longscope/errors.h"

#include <QtTest>

using namespace longscope;

class TestBackends : public QObject {
    Q_OBJECT

    BackendStatus m_cuda;

private slots:
    void initTestCase()
    {
        m_cuda = longscope::test::cuda_status();
        qInfo("CUDA backend: %s", m_cuda.detail.c_str());
    }

    void cpu_is_always_available()
    {
        const auto all = probe_backends();
        QVERIFY(!all.empty());
        QCOMPARE(all.front().name, std::string("CPU"));
        QVERIFY(all.front().available);
    }

    void cuda_reports_a_reason()
    {
        QCOMPARE(m_cuda.name, std::string("CUDA"));
        QVERIFY(!m_cuda.detail.empty());
        if (!m_cuda.available)
            QVERIFY(m_cuda.devices.empty());
        // A plugin that does not exist is reported as missing, not as a crash.
        set_backend_options(BackendOptions{"/nonexistent/liblongscope-cuda.so"});
        const auto candidates = cuda_plugin_candidates();
        QVERIFY(!candidates.empty());
        QCOMPARE(candidates.front(), std::string("/nonexistent/liblongscope-cuda.so"));
        for (const BackendStatus &b : probe_backends())
            if (b.name == "CUDA" && b.library.empty())
                QVERIFY(b.detail.find("not found") != std::string::npos);
        set_backend_options({});
        QVERIFY(cuda_plugin_candidates().front() != "/nonexistent/liblongscope-cuda.so");
    }

    // Asking for the CUDA backend where it cannot be used is a BackendError carrying the
    // probe's reason, never a crash; a running CPU session that asks for it keeps its settings
    // and its context. Where a GPU is usable, the same requests run on it instead.
    void requesting_cuda_is_a_clear_error_without_a_gpu()
    {
        auto model = Model::load(LONGSCOPE_BUNDLED_MODEL);
        const auto prompt = model->tokenizer().encode("Once upon a time", true);
        SessionOptions o;
        o.n_ctx = 128;
        o.n_threads = 2;
        o.settings.backend = ComputeBackend::Cuda;
        if (m_cuda.available) {
            Session gpu(*model, o);
            QVERIFY(!gpu.eval(prompt).empty());
            QCOMPARE(gpu.last_metrics().settings.backend, ComputeBackend::Cuda);
            return;
        }
        try {
            Session s(*model, o);
            QFAIL("a CUDA session was made without a usable GPU");
        } catch (const BackendError &e) {
            const std::string what = e.what();
            qInfo("%s", e.what());
            QVERIFY2(what.find("CUDA") != std::string::npos, e.what());
            QVERIFY2(what.find(m_cuda.detail) != std::string::npos, e.what()); // the probe's reason
        }

        // A CPU session asking for CUDA between steps: refused, nothing lost.
        o.settings.backend = ComputeBackend::Cpu;
        Session cpu(*model, o);
        Session reference(*model, o);
        auto first = cpu.eval(prompt);
        const std::vector<float> after_prompt(first.begin(), first.end());
        Settings want = cpu.settings();
        want.backend = ComputeBackend::Cuda;
        QVERIFY_THROWS_EXCEPTION(BackendError, cpu.set_settings(want));
        QCOMPARE(cpu.settings().backend, ComputeBackend::Cpu);
        QCOMPARE(cpu.n_past(), int(prompt.size()));
        const int32_t next = 42;
        auto a = cpu.eval(std::span<const int32_t>(&next, 1));
        auto r0 = reference.eval(prompt);
        QCOMPARE(std::vector<float>(r0.begin(), r0.end()), after_prompt);
        auto b = reference.eval(std::span<const int32_t>(&next, 1));
        QCOMPARE(std::vector<float>(a.begin(), a.end()), std::vector<float>(b.begin(), b.end()));
        QVERIFY(cpu.backend_note().empty());
        QCOMPARE(cpu.last_metrics().memory.device_used, uint64_t(0));

        // Batches and settings parsing.
        GenerateRequest req;
        req.prompt = prompt;
        req.max_new_tokens = 2;
        SessionOptions bo = o;
        bo.settings.backend = ComputeBackend::Cuda;
        QVERIFY_THROWS_EXCEPTION(BackendError, generate_batch(*model, bo, {req}));
        QCOMPARE(parse_backend("cuda"), std::optional<ComputeBackend>(ComputeBackend::Cuda));
        QCOMPARE(parse_backend("cpu"), std::optional<ComputeBackend>(ComputeBackend::Cpu));
        QVERIFY(!parse_backend("gpu"));
    }

};

QTEST_APPLESS_MAIN(TestBackends)
#include "tst_backends.moc"
