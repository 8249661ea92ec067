#include "cpu/thread_pool.h"

#include <algorithm>
#include <immintrin.h>

namespace longscope {

namespace {
// About 20-50 microseconds of pause instructions: longer than the gap between the loops of
// a decode step, far shorter than anything a person would notice as a busy core.
constexpr int k_spin = 4000;
// Pieces per thread: threads that finish early take more, so no thread waits long for the
// slowest (weight rows stream at different speeds on different cores).
constexpr int64_t k_pieces_per_thread = 4;
inline void cpu_relax() { _mm_pause(); }
} // namespace

ThreadPool::ThreadPool(int n_threads) : m_n_threads(std::max(1, n_threads))
{
    for (int i = 1; i < m_n_threads; ++i)
        m_workers.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool()
{
    {
        std::lock_guard lock(m_mutex);
        m_stop.store(true, std::memory_order_release);
    }
    m_wake.notify_all();
    for (auto &t : m_workers)
        t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)> &fn,
                              int64_t min_per_thread)
{
    if (n <= 0)
        return;
    const int64_t max_pieces = n / std::max<int64_t>(1, min_per_thread);
    const int chunks = int(std::min<int64_t>(m_n_threads, std::max<int64_t>(1, max_pieces)));
    if (chunks <= 1) {
        fn(0, n);
        return;
    }
    m_job.store(&fn, std::memory_order_relaxed);
    m_n.store(n, std::memory_order_relaxed);
    m_pieces.store(std::min<int64_t>(max_pieces, int64_t(chunks) * k_pieces_per_thread), std::memory_order_relaxed);
    m_next.store(0, std::memory_order_relaxed);
    m_pending.store(chunks - 1, std::memory_order_relaxed);
    {
        // Under the mutex so a worker about to sleep cannot miss the new generation.
        std::lock_guard lock(m_mutex);
        const uint64_t gen = (m_state.load(std::memory_order_relaxed) >> 16) + 1;
        m_state.store(gen << 16 | uint64_t(chunks), std::memory_order_release);
    }
    m_wake.notify_all();
    run_pieces(fn);
    for (int i = 0; i < k_spin; ++i) {
        if (m_pending.load(std::memory_order_acquire) == 0)
            return;
        cpu_relax();
    }
    std::unique_lock lock(m_mutex);
    m_done.wait(lock, [this] { return m_pending.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::run_pieces(const std::function<void(int64_t, int64_t)> &fn)
{
    const int64_t n = m_n.load(std::memory_order_relaxed);
    const int64_t pieces = m_pieces.load(std::memory_order_relaxed);
    for (int64_t c = m_next.fetch_add(1, std::memory_order_relaxed); c < pieces;
         c = m_next.fetch_add(1, std::memory_order_relaxed))
        fn(n * c / pieces, n * (c + 1) / pieces);
}

void ThreadPool::worker(int index)
{
    uint64_t seen = 0;
    for (;;) {
        // Spin for the next job, then sleep.
        uint64_t state = m_state.load(std::memory_order_acquire);
        for (int i = 0; i < k_spin && state == seen && !m_stop.load(std::memory_order_acquire); ++i) {
            cpu_relax();
            state = m_state.load(std::memory_order_acquire);
        }
        if (state == seen && !m_stop.load(std::memory_order_acquire)) {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, [&] {
                return m_stop.load(std::memory_order_acquire) || m_state.load(std::memory_order_acquire) != seen;
            });
            state = m_state.load(std::memory_order_acquire);
        }
        if (m_stop.load(std::memory_order_acquire))
            return;
        seen = state;
        const int chunks = int(state & 0xffff);
        if (index >= chunks)
            continue;
        run_pieces(*m_job.load(std::memory_order_relaxed));
        if (m_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard lock(m_mutex);
            m_done.notify_one();
        }
    }
}

} // namespace longscope
