// The CUDA backend on a GPU: its RMSNorm kernel matches the CPU reference. Without a usable GPU the device checks are skipped with the plugin's reason
// (scripts/gpu-check runs them on a GPU machine and fails on any skip).
#include "cpu/ops.h"
#include "cuda/plugin_abi.h"

#include "longscope/backend.h"

#include <QtTest>

#include <cmath>
#include <dlfcn.h>
#include <random>

using namespace longscope;

class TestCudaBackend : public QObject {
    Q_OBJECT

    BackendStatus m_cuda;

private slots:
    void initTestCase()
    {
        for (const BackendStatus &b : probe_backends())
            if (b.name == "CUDA")
                m_cuda = b;
        qInfo("CUDA backend: %s", m_cuda.detail.c_str());
    }

    void rmsnorm_on_the_device_matches_the_cpu()
    {
        if (!m_cuda.available)
            QSKIP(("no usable CUDA device: " + m_cuda.detail).c_str());
        void *h = dlopen(m_cuda.library.c_str(), RTLD_NOW | RTLD_LOCAL);
        QVERIFY(h);
        auto selftest = reinterpret_cast<decltype(&longscope_cuda_rmsnorm_selftest)>(
            dlsym(h, "longscope_cuda_rmsnorm_selftest"));
        QVERIFY(selftest);
        const int rows = 7, n = 1000;
        std::mt19937 rng(3);
        std::normal_distribution<float> dist(0.0f, 2.0f);
        std::vector<float> x(static_cast<size_t>(rows * n)), w(static_cast<size_t>(n)), gpu(x.size()), cpu(x.size());
        for (float &v : x)
            v = dist(rng);
        for (float &v : w)
            v = dist(rng);
        char reason[512] = {0};
        QCOMPARE(selftest(0, x.data(), w.data(), gpu.data(), rows, n, 1e-5f, reason, sizeof reason), 0);
        WeightView wv;
        wv.type = DType::F32;
        wv.shape = {n};
        wv.data = w.data();
        wv.nbytes = w.size() * 4;
        rmsnorm(x.data(), wv, cpu.data(), rows, n, 1e-5f);
        // Normalised MSE, as llama.cpp compares backends (<= 1e-7).
        double err = 0, ref = 0;
        for (size_t i = 0; i < cpu.size(); ++i) {
            err += (double(gpu[i]) - cpu[i]) * (double(gpu[i]) - cpu[i]);
            ref += double(cpu[i]) * cpu[i];
        }
        QVERIFY2(err / ref <= 1e-7, qPrintable(QString::number(err / ref)));
    }
};

QTEST_APPLESS_MAIN(TestCudaBackend)
#include "tst_cuda_backend.moc"
