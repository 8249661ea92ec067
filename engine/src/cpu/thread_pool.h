// A persistent pool of worker threads for data-parallel loops. The calling thread takes part,
// so a pool of n threads starts n-1 workers. Between jobs the workers spin briefly before they
// sleep: a decode step runs ~150 short loops back to back, and waking a sleeping thread costs
// more than many of them take.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace longscope {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int size() const { return m_n_threads; }

    // Calls fn(begin, end) over [0, n) split in contiguous pieces, up to four per thread and
    // each at least `min_per_thread` long, which the threads take in turn; returns when all
    // are done. Runs inline when n is small or the pool has one thread. Which thread runs a
    // piece varies from call to call: fn must not depend on it.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)> &fn,
                      int64_t min_per_thread = 1);

private:
    void worker(int index);
    void run_pieces(const std::function<void(int64_t, int64_t)> &fn);

    int m_n_threads;
    std::vector<std::thread> m_workers;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::condition_variable m_done;
    // The job: written by the caller before m_state is bumped (release), read by the
    // workers after they see the new generation (acquire).
    // Only workers that have a chunk read the job (the caller waits for them, so it cannot
    // change under them); the chunk count travels in the same atomic as the generation, so a
    // worker without a chunk never reads a later job's fields as this one's.
    std::atomic<const std::function<void(int64_t, int64_t)> *> m_job{nullptr};
    std::atomic<int64_t> m_n{0};
    std::atomic<int64_t> m_pieces{0};
    std::atomic<int64_t> m_next{0}; // the next piece to take
    std::atomic<uint64_t> m_state{0}; // generation << 16 | chunk count
    std::atomic<int> m_pending{0};
    std::atomic<bool> m_stop{false};
};

} // namespace longscope
