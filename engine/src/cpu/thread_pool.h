// A persistent pool of worker threads for data-parallel loops. The calling thread takes part,
// so a pool of n threads starts n-1 workers. Between jobs the workers spin briefly before they
// sleep: a decode step runs ~150 short loops back to back, and waking a sleeping thread costs
// more than many of them take.
//
// Work is claimed, never assigned: a job is cut into pieces and every thread, the caller
// included, takes the next unclaimed piece until none is left. The caller then waits only for
// pieces another thread has actually begun, never for a worker that has not woken up or been
// scheduled yet (on a busy machine that can be milliseconds, hundreds of decode loops): the
// threads that are running take its share. A worker descheduled in the middle of a piece
// still costs a wait; loops too small to be worth a second thread (min_items_per_thread) stay
// on the caller, so small models never risk it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace longscope {

// Multiply-adds (or comparable element operations) a thread should get at the least before a
// loop is split: below it, handing work to another thread costs more than it saves.
constexpr int64_t k_min_work_per_thread = 32768;

// Items per thread for a loop whose items cost `work_per_item` multiply-adds each, so that
// every thread gets at least k_min_work_per_thread of work (at least one item).
constexpr int64_t min_items_per_thread(int64_t work_per_item)
{
    return work_per_item >= k_min_work_per_thread ? 1 : k_min_work_per_thread / (work_per_item > 0 ? work_per_item : 1);
}

class ThreadPool {
public:
    using Fn = std::function<void(int64_t, int64_t)>;

    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int size() const { return m_n_threads; }

    // Loops from now on use at most n threads (clamped to 1..size()), the caller included;
    // the other workers stay idle. Pieces then depend on n as they would on a pool of n.
    // Only the thread that calls parallel_for may change it.
    void set_active(int n) { m_active = n < 1 ? 1 : n > m_n_threads ? m_n_threads : n; }
    int active() const { return m_active; }

    // Calls fn(begin, end) over [0, n) split in contiguous pieces, each at least
    // `min_per_thread` long, which the threads claim in turn; returns when all are done. A
    // loop of at least 16 minimum pieces per thread gets 6 pieces per thread that shrink
    // towards its end (3 of a quarter of a thread's share, 1 of an eighth, 2 of a sixteenth:
    // the last pieces balance the threads); a shorter one up to 4 equal pieces per thread. Runs inline when n is small or the pool has one thread. The pieces depend only
    // on n, min_per_thread and the pool's size; which thread runs a piece varies from call to
    // call: fn must not depend on it.
    void parallel_for(int64_t n, const Fn &fn, int64_t min_per_thread = 1);

    // For tests: every worker waits this long after it wakes for a job before it claims any of
    // it, as a descheduled thread would. Zero (the default) turns it off.
    void delay_workers_for_testing(std::chrono::microseconds delay) { m_test_delay_us.store(delay.count()); }

private:
    void worker(int index);
    // Claims and runs pieces of the job whose claim word was `word` until none is left or a
    // later job has replaced it.
    void run_pieces(uint64_t word);

    int m_n_threads;
    int m_active; // read and written by the calling thread only
    std::vector<std::thread> m_workers;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::condition_variable m_done;
    // The job: m_job, m_n and m_chunks are written by the caller before it publishes the job's
    // claim word (release). A thread reads them after it loads that word (acquire) and runs a
    // piece only after its compare-exchange on the same word succeeds: the job was still open
    // then, so its fields were still those of that word's job (the caller writes the next
    // job's only after every piece of this one is done).
    std::atomic<const Fn *> m_job{nullptr};
    std::atomic<int64_t> m_n{0};
    std::atomic<int> m_chunks{0};       // threads the job is for: workers 1..chunks-1 join
    std::atomic<uint64_t> m_claim{0};   // generation << 32 | pieces << 16 | next piece
    std::atomic<int64_t> m_finished{0}; // pieces of the current job done
    std::atomic<bool> m_stop{false};
    std::atomic<int64_t> m_test_delay_us{0};
};

} // namespace longscope
