// Backends as the engine finds them: the CPU always, the CUDA plugin loaded at run time
// with a reason whenever it cannot be used.
#include "longscope/backend.h"

#include <QtTest>

using namespace longscope;

class TestBackends : public QObject {
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
        qputenv("LONGSCOPE_CUDA_PLUGIN", "/nonexistent/liblongscope-cuda.so");
        for (const BackendStatus &b : probe_backends())
            if (b.name == "CUDA" && b.library.empty())
                QVERIFY(b.detail.find("not found") != std::string::npos);
        qunsetenv("LONGSCOPE_CUDA_PLUGIN");
    }

};

QTEST_APPLESS_MAIN(TestBackends)
#include "tst_backends.moc"
