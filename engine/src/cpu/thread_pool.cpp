#include "cpu/thread_pool.h"

#include <algorithm>
#include <immintrin.h>

namespace longscope {

namespace {
// About 20-50 microseconds of pause instructions: longer than the gap between the loops of
// a decode step, far shorter than anything a person would notice as a busy core.
constexpr int k_spin = 4000;
// Pieces per thread: threads that finish early take more, so no thread waits long for the
// slowest (weight rows stream at different speeds on different cores), and a thread that is
// descheduled before it claims anything leaves its share to the others.
constexpr int64_t k_pieces_per_thread = 4;
inline void cpu_relax() { _mm_pause(); }

// Backing off (see thread_pool.h): a verdict after every k_window of parallel loops.
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr Clock::duration k_window = 10ms;
constexpr Clock::duration k_backoff_min = 20ms;
constexpr Clock::duration k_backoff_max = 1s;

// The claim word: generation << 32 | pieces << 16 | next piece.
constexpr uint64_t gen_of(uint64_t word) { return word >> 32; }
constexpr int64_t pieces_of(uint64_t word) { return int64_t((word >> 16) & 0xffff); }
constexpr int64_t next_of(uint64_t word) { return int64_t(word & 0xffff); }
} // namespace

ThreadPool::ThreadPool(int n_threads, bool adaptive)
    : m_n_threads(std::max(1, n_threads)), m_adaptive(adaptive), m_limit(m_n_threads), m_restored(Clock::now()),
      m_backoff(k_backoff_min)
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

void ThreadPool::parallel_for(int64_t n, const Fn &fn, int64_t min_per_thread)
{
    if (n <= 0)
        return;
    if (m_limit < m_n_threads && Clock::now() >= m_limit_until) {
        m_limit = m_n_threads;
        m_restored = Clock::now();
    }
    const int64_t max_pieces = n / std::max<int64_t>(1, min_per_thread);
    const int chunks = int(std::min<int64_t>(m_limit, std::max<int64_t>(1, max_pieces)));
    if (chunks <= 1) {
        fn(0, n);
        return;
    }
    const int64_t pieces = std::min<int64_t>({max_pieces, int64_t(chunks) * k_pieces_per_thread, 0xffff});
    m_job.store(&fn, std::memory_order_release);
    m_n.store(n, std::memory_order_release);
    m_chunks.store(chunks, std::memory_order_release);
    m_finished.store(0, std::memory_order_relaxed);
    const uint64_t word = (gen_of(m_claim.load(std::memory_order_relaxed)) + 1) << 32 | uint64_t(pieces) << 16;
    {
        // Under the mutex so a worker about to sleep cannot miss the new generation.
        std::lock_guard lock(m_mutex);
        m_claim.store(word, std::memory_order_release);
    }
    m_wake.notify_all();
    const Clock::time_point start = m_adaptive ? Clock::now() : Clock::time_point{};
    const int64_t own_pieces = run_pieces(word);
    const auto done = [&] { return m_finished.load(std::memory_order_acquire) == pieces; };
    bool finished = done();
    const Clock::time_point own_done = m_adaptive ? Clock::now() : Clock::time_point{};
    const bool waited = !finished;
    if (waited) {
        // Only pieces other threads have claimed remain; wait for those.
        for (int i = 0; i < k_spin && !(finished = done()); ++i)
            cpu_relax();
        if (!finished) {
            std::unique_lock lock(m_mutex);
            m_done.wait(lock, done);
        }
    }
    if (m_adaptive)
        adapt(chunks, pieces, own_pieces, own_done - start, (waited ? Clock::now() : own_done) - start);
}

void ThreadPool::adapt(int chunks, int64_t pieces, int64_t own_pieces, Clock::duration own, Clock::duration total)
{
    m_parallel += total;
    // Alone, every piece would have taken what the caller's took on average; a caller that ran
    // none gives no estimate (the others were quicker to claim: no sign of trouble).
    m_alone += own_pieces > 0 ? own * pieces / own_pieces : total;
    if (m_parallel < k_window)
        return;
    const bool lost = m_parallel > m_alone;
    m_parallel = m_alone = Clock::duration{};
    if (!lost)
        return;
    const Clock::time_point now = Clock::now();
    // Again soon after the last try with all threads: back off for longer.
    m_backoff = now - m_restored < m_backoff ? std::min(2 * m_backoff, k_backoff_max) : k_backoff_min;
    m_limit = std::max(1, chunks / 2);
    m_limit_until = now + m_backoff;
}

int64_t ThreadPool::run_pieces(uint64_t word)
{
    int64_t ran = 0;
    const Fn *fn = m_job.load(std::memory_order_acquire);
    const int64_t n = m_n.load(std::memory_order_acquire);
    const uint64_t gen = gen_of(word);
    const int64_t pieces = pieces_of(word);
    while (gen_of(word) == gen && next_of(word) < pieces) {
        if (!m_claim.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire))
            continue; // `word` now holds the current value
        // Claimed while the job was open: fn and n are this job's, and stay valid until this
        // piece is counted as finished.
        const int64_t c = next_of(word);
        (*fn)(n * c / pieces, n * (c + 1) / pieces);
        ++ran;
        if (m_finished.fetch_add(1, std::memory_order_acq_rel) + 1 == pieces) {
            std::lock_guard lock(m_mutex);
            m_done.notify_one();
            return ran;
        }
        word = m_claim.load(std::memory_order_acquire);
    }
    return ran;
}

void ThreadPool::worker(int index)
{
    uint64_t seen = 0;
    const auto fresh = [&] {
        return m_stop.load(std::memory_order_acquire) || gen_of(m_claim.load(std::memory_order_acquire)) != seen;
    };
    for (;;) {
        // Spin for the next job, then sleep.
        for (int i = 0; i < k_spin && !fresh(); ++i)
            cpu_relax();
        if (!fresh()) {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, fresh);
        }
        if (m_stop.load(std::memory_order_acquire))
            return;
        const uint64_t word = m_claim.load(std::memory_order_acquire);
        seen = gen_of(word);
        // A later job's count at worst: it only decides whether this worker tries to claim.
        if (index >= m_chunks.load(std::memory_order_acquire))
            continue;
        if (const int64_t delay = m_test_delay_us.load(std::memory_order_relaxed); delay > 0)
            std::this_thread::sleep_for(std::chrono::microseconds(delay));
        run_pieces(word);
    }
}

} // namespace longscope
