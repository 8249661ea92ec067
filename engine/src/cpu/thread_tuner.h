// How many of the pool's threads a decode step uses, chosen from the steps' own times.
//
// A decode step streams the weights once; on a quiet machine every core adds bandwidth, but
// when another process keeps a core busy the scheduler shares the cores out and a step on all
// threads can be slower than on fewer (TinyLlama Q8_0 on two cores beside one busy loop:
// about 21 tokens/s on two threads, 24 on one). No rule from the outside (load average, core
// count) tells which; the steps' times do. Every so often the tuner runs a short trial: a few
// steps on another count interleaved with steps on the current one, and it moves to the other
// count when that one's median step is clearly shorter. Trials come soon after a change of
// count and then ever more rarely while the choice holds, down to one every `max_interval`
// steps, and a trial whose first step is far slower than the current count's recent steps ends
// there. On a machine where all threads are best they cost a fraction of a percent of a long
// generation, and a program that starts or stops beside it is noticed within that many steps.
//
// The counts tried are the pool's size and its halves (16, 8, 4, 2, 1), one step up or down
// the ladder from the current count. Results never depend on the count (rows, heads and key
// splits are computed alike whichever thread holds them), so the choice changes only speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace longscope {

struct ThreadTunerParams {
    int first_trial = 32;    // steps before the first trial, and between trials after a change
    int max_interval = 256;  // the longest wait between trials while the choice holds
    int trial_pairs = 3;     // steps on the other count in a trial (each beside one on the current)
    double margin = 0.05;    // the other count's median must be this much shorter to be taken
    double abort = 0.25;     // a trial ends after its first step if that is this much longer
                             // than the current count's recent median
};

class ThreadTuner {
public:
    explicit ThreadTuner(int max_threads, ThreadTunerParams params = {});

    // The thread count for the next step; report its time with record().
    int next();
    // The time of the step next() was asked for, in any unit (only ratios are used).
    void record(double seconds);

    // The count steps run on outside trials.
    int current() const { return m_ladder[std::size_t(m_cur)]; }
    // Trials run so far (for tests and reports).
    int64_t trials() const { return m_trials; }

private:
    void start_trial();
    void finish_trial(bool aborted);

    ThreadTunerParams m_p;
    std::vector<int> m_ladder; // max_threads, max_threads / 2, ..., 1
    int m_cur = 0;             // index into m_ladder
    int m_alt = 0;             // the other count's index during a trial
    bool m_in_trial = false;
    bool m_try_up = false;     // in the middle of the ladder trials alternate up and down
    int m_trial_step = 0;      // steps of the current trial so far
    int64_t m_since_trial = 0; // steps since the last trial ended
    int64_t m_interval = 0;    // steps between trials now
    int64_t m_trials = 0;
    std::vector<double> m_alt_times, m_cur_times; // a trial's steps
    std::vector<double> m_recent;                 // the last steps on the current count
};

} // namespace longscope
