// What the status bar and the panels show about the chat's context as it runs: how many
// tokens it holds, the NTK alpha the last step ran with, and the prefill and (smoothed)
// decode speeds. Fed from the worker's step metrics and reply summaries.
#pragma once

#include "longscope/metrics.h"

namespace longscope::ui {

struct GenerationSummary;

class SessionStats {
public:
    // The smoothed decode rate keeps 0.85 of itself and takes 0.15 of each new step.
    static constexpr double kDecodeKeep = 0.85;
    static constexpr double kDecodeNew = 0.15;

    int contextUsed() const { return m_contextUsed; }
    double ntkAlpha() const { return m_ntkAlpha; }
    double decodeRate() const { return m_decodeRate; } // tokens/s, smoothed; 0: none yet
    double prefillRate() const { return m_prefillRate; } // tokens/s of the last prefill step
    // The CPU threads most of the last kDecodeWindow decode steps ran on (the engine picks
    // the count from the steps' times: a short trial on another count now and then does not
    // change it); 0: no decode step yet, or steps that did not say (a remote engine's).
    int decodeThreads() const;
    static constexpr int kDecodeWindow = 8;

    void addStep(const longscope::StepMetrics &metrics);
    // A reply ended: its own averages replace the running ones (when it has them).
    void addReply(const GenerationSummary &summary);
    // A new reply starts: its decode speed is measured afresh.
    void startReply() { m_decodeRate = 0; }
    // The context was cleared (a new or reopened conversation).
    void clearContext() { m_contextUsed = 0; }
    void setContextUsed(int tokens) { m_contextUsed = tokens; }
    // A new model: nothing measured yet.
    void reset();

private:
    int m_contextUsed = 0;
    double m_ntkAlpha = 1.0;
    double m_decodeRate = 0;
    double m_prefillRate = 0;
    int m_threads[kDecodeWindow] = {};
    int m_threadSteps = 0; // decode steps recorded in m_threads, the newest at (count - 1) % window
};

} // namespace longscope::ui
