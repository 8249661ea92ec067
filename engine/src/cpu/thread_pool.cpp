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
// Where a loop is long enough (at least 16 minimum pieces per thread) it is cut in 6 pieces
// per thread that shrink towards its end: 3 per thread of 1/4 of a thread's share, 1 of 1/8,
// 2 of 1/16. The threads that finish their large pieces first take the small ones, so the
// last to finish waits for at most a 1/16 share, where equal quarters left up to a quarter
// share to wait for.
constexpr int64_t k_shrinking_pieces_per_thread = 6;
constexpr int64_t k_shrinking_min_per_thread = 16;

// The first index of piece c (of `pieces` over [0, n) for `chunks` threads); piece c is
// [piece_begin(c), piece_begin(c + 1)).
int64_t piece_begin(int64_t n, int64_t pieces, int64_t chunks, int64_t c)
{
    if (pieces != k_shrinking_pieces_per_thread * chunks)
        return n * c / pieces;
    // In sixteenths of a thread's share: 4 for each of the first 3 chunks pieces, then 2,
    // then 1 each (16 chunks sixteenths in all).
    const int64_t t = chunks;
    const int64_t units = c <= 3 * t ? 4 * c : c <= 4 * t ? 12 * t + 2 * (c - 3 * t) : 14 * t + (c - 4 * t);
    return n * units / (16 * t);
}
inline void cpu_relax() { _mm_pause(); }

// The claim word: generation << 32 | pieces << 16 | next piece.
constexpr uint64_t gen_of(uint64_t word) { return word >> 32; }
constexpr int64_t pieces_of(uint64_t word) { return int64_t((word >> 16) & 0xffff); }
constexpr int64_t next_of(uint64_t word) { return int64_t(word & 0xffff); }
} // namespace

ThreadPool::ThreadPool(int n_threads) : m_n_threads(std::max(1, n_threads)), m_active(m_n_threads)
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
    const int64_t max_pieces = n / std::max<int64_t>(1, min_per_thread);
    const int chunks = int(std::min<int64_t>(m_active, std::max<int64_t>(1, max_pieces)));
    if (chunks <= 1) {
        fn(0, n);
        return;
    }
    const int64_t pieces = max_pieces >= int64_t(chunks) * k_shrinking_min_per_thread
                               ? std::min<int64_t>(int64_t(chunks) * k_shrinking_pieces_per_thread, 0xffff)
                               : std::min<int64_t>({max_pieces, int64_t(chunks) * k_pieces_per_thread, 0xffff});
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
    run_pieces(word);
    // Only pieces other threads have claimed remain; wait for those.
    const auto done = [&] { return m_finished.load(std::memory_order_acquire) == pieces; };
    for (int i = 0; i < k_spin; ++i) {
        if (done())
            return;
        cpu_relax();
    }
    std::unique_lock lock(m_mutex);
    m_done.wait(lock, done);
}

void ThreadPool::run_pieces(uint64_t word)
{
    const Fn *fn = m_job.load(std::memory_order_acquire);
    const int64_t n = m_n.load(std::memory_order_acquire);
    const uint64_t gen = gen_of(word);
    const int64_t pieces = pieces_of(word);
    const int64_t chunks = m_chunks.load(std::memory_order_acquire);
    while (gen_of(word) == gen && next_of(word) < pieces) {
        if (!m_claim.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire))
            continue; // `word` now holds the current value
        // Claimed while the job was open: fn and n are this job's, and stay valid until this
        // piece is counted as finished.
        const int64_t c = next_of(word);
        (*fn)(piece_begin(n, pieces, chunks, c), piece_begin(n, pieces, chunks, c + 1));
        if (m_finished.fetch_add(1, std::memory_order_acq_rel) + 1 == pieces) {
            std::lock_guard lock(m_mutex);
            m_done.notify_one();
            return;
        }
        word = m_claim.load(std::memory_order_acquire);
    }
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
