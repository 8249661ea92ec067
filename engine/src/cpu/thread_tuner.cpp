#include "cpu/thread_tuner.h"

#include <algorithm>

namespace longscope {

namespace {
double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
} // namespace

ThreadTuner::ThreadTuner(int max_threads, ThreadTunerParams params) : m_p(params)
{
    m_p.first_trial = std::max(1, m_p.first_trial);
    m_p.max_interval = std::max(m_p.first_trial, m_p.max_interval);
    m_p.trial_pairs = std::max(1, m_p.trial_pairs);
    for (int n = std::max(1, max_threads);; n /= 2) {
        m_ladder.push_back(n);
        if (n == 1)
            break;
    }
    m_interval = m_p.first_trial;
}

int ThreadTuner::next()
{
    if (!m_in_trial && m_ladder.size() > 1 && m_since_trial >= m_interval)
        start_trial();
    // A trial interleaves the other count's steps with the current one's, the other first.
    return m_in_trial && m_trial_step % 2 == 0 ? m_ladder[size_t(m_alt)] : m_ladder[size_t(m_cur)];
}

void ThreadTuner::record(double seconds)
{
    if (!m_in_trial) {
        ++m_since_trial;
        m_recent.push_back(seconds);
        if (m_recent.size() > 5)
            m_recent.erase(m_recent.begin());
        return;
    }
    // The other count's first step far slower than the current count's recent ones: no need
    // for the rest of the trial.
    if (m_trial_step == 0 && m_recent.size() >= 3 && seconds > median(m_recent) * (1.0 + m_p.abort)) {
        finish_trial(true);
        return;
    }
    (m_trial_step % 2 == 0 ? m_alt_times : m_cur_times).push_back(seconds);
    if (++m_trial_step == 2 * m_p.trial_pairs)
        finish_trial(false);
}

void ThreadTuner::start_trial()
{
    const int last = int(m_ladder.size()) - 1;
    if (m_cur == 0)
        m_alt = 1; // all threads: try fewer
    else if (m_cur == last)
        m_alt = last - 1; // one thread: try more
    else {
        m_alt = m_try_up ? m_cur - 1 : m_cur + 1;
        m_try_up = !m_try_up;
    }
    m_in_trial = true;
    m_trial_step = 0;
    m_alt_times.clear();
    m_cur_times.clear();
}

void ThreadTuner::finish_trial(bool aborted)
{
    m_in_trial = false;
    ++m_trials;
    m_since_trial = 0;
    if (!aborted && median(m_alt_times) < median(m_cur_times) * (1.0 - m_p.margin)) {
        m_cur = m_alt;
        m_recent.clear();
        m_interval = m_p.first_trial; // check the new choice soon
    } else {
        m_interval = std::min<int64_t>(2 * m_interval, m_p.max_interval);
    }
}

} // namespace longscope
