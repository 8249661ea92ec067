#include "core/session_stats.h"

#include "core/engine_worker.h"

#include <algorithm>

namespace longscope::ui {

void SessionStats::addStep(const longscope::StepMetrics &m)
{
    m_contextUsed = m.position;
    m_ntkAlpha = m.ntk_alpha;
    if (m.phase == StepPhase::Decode) {
        m_decodeRate = m_decodeRate > 0 ? kDecodeKeep * m_decodeRate + kDecodeNew * m.tokens_per_second
                                        : m.tokens_per_second;
        m_threads[m_threadSteps % kDecodeWindow] = m.threads;
        ++m_threadSteps;
    } else
        m_prefillRate = m.tokens_per_second;
}

void SessionStats::addReply(const GenerationSummary &summary)
{
    if (summary.decode_tokens_per_second > 0)
        m_decodeRate = summary.decode_tokens_per_second;
    if (summary.prefill_tokens_per_second > 0)
        m_prefillRate = summary.prefill_tokens_per_second;
}

int SessionStats::decodeThreads() const
{
    const int n = std::min(m_threadSteps, kDecodeWindow);
    int best = 0, bestCount = 0;
    for (int i = 0; i < n; ++i) {
        int count = 0;
        for (int j = 0; j < n; ++j)
            count += m_threads[j] == m_threads[i];
        if (count > bestCount) {
            best = m_threads[i];
            bestCount = count;
        }
    }
    return best;
}

void SessionStats::reset()
{
    m_contextUsed = 0;
    m_decodeRate = 0;
    m_prefillRate = 0;
    m_threadSteps = 0;
}

} // namespace longscope::ui
