#include "cuda/profiler.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace longscope::cuda {

namespace {
constexpr size_t k_max_pending = 8192;
}

bool Profiler::wanted()
{
    const char *v = std::getenv("LONGSCOPE_CUDA_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
}

Profiler::~Profiler()
{
    for (const Pending &p : m_pending) {
        cudaEventDestroy(p.start);
        cudaEventDestroy(p.stop);
    }
    for (cudaEvent_t e : m_free)
        cudaEventDestroy(e);
}

cudaEvent_t Profiler::take()
{
    if (!m_free.empty()) {
        cudaEvent_t e = m_free.back();
        m_free.pop_back();
        return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) {
        cudaGetLastError();
        m_broken = true;
        return nullptr;
    }
    return e;
}

void Profiler::begin(const char *op)
{
    if (m_broken)
        return;
    if (m_pending.size() >= k_max_pending) {
        if (cudaStreamSynchronize(m_stream) != cudaSuccess) {
            cudaGetLastError();
            m_broken = true;
            return;
        }
        collect();
    }
    m_op = op;
    m_start = take();
    m_host_start = std::chrono::steady_clock::now();
    if (!m_any) {
        m_first = m_host_start;
        m_any = true;
    }
    if (m_start && cudaEventRecord(m_start, m_stream) != cudaSuccess) {
        cudaGetLastError();
        m_broken = true;
    }
}

void Profiler::end()
{
    if (m_broken || !m_op || !m_start)
        return;
    cudaEvent_t stop = take();
    if (!stop)
        return;
    if (cudaEventRecord(stop, m_stream) != cudaSuccess) {
        cudaGetLastError();
        m_broken = true;
        return;
    }
    m_last = std::chrono::steady_clock::now();
    const double host_us = std::chrono::duration<double, std::micro>(m_last - m_host_start).count();
    m_pending.push_back({m_op, m_start, stop, host_us});
    m_op = nullptr;
    m_start = nullptr;
}

void Profiler::collect()
{
    for (const Pending &p : m_pending) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p.start, p.stop) != cudaSuccess) {
            cudaGetLastError();
            ms = 0.0f;
        }
        Total &t = m_totals[p.op];
        ++t.calls;
        t.device_ms += double(ms);
        t.host_us += p.host_us;
        m_free.push_back(p.start);
        m_free.push_back(p.stop);
    }
    m_pending.clear();
}

void Profiler::report(std::FILE *out)
{
    collect();
    if (m_totals.empty())
        return;
    std::vector<std::pair<std::string, Total>> rows(m_totals.begin(), m_totals.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto &a, const auto &b) { return a.second.device_ms > b.second.device_ms; });
    double device = 0.0, host = 0.0;
    for (const auto &r : rows) {
        device += r.second.device_ms;
        host += r.second.host_us / 1000.0;
    }
    const double span = std::chrono::duration<double, std::milli>(m_last - m_first).count();
    std::fprintf(out, "CUDA profile: %.1f ms of device time in the ops, %.1f ms of host time in the op calls, "
                      "%.1f ms from the first op to the last%s\n",
                 device, host, span, m_broken ? " (incomplete: an event call failed)" : "");
    std::fprintf(out, "| op | calls | device ms | device us/call | host us/call | device share |\n");
    std::fprintf(out, "|---|---|---|---|---|---|\n");
    for (const auto &[op, t] : rows)
        std::fprintf(out, "| %s | %llu | %.2f | %.2f | %.2f | %.1f%% |\n", op.c_str(), (unsigned long long)t.calls,
                     t.device_ms, 1000.0 * t.device_ms / double(t.calls), t.host_us / double(t.calls),
                     device > 0 ? 100.0 * t.device_ms / device : 0.0);
    std::fflush(out);
}

} // namespace longscope::cuda
