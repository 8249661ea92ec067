// A persistent pool of worker threads for data-parallel loops. The calling thread takes part,
// so a pool of n threads starts n-1 workers.
#pragma once

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

    // Calls fn(begin, end) over [0, n) split in contiguous chunks, one per thread, and
    // returns when all are done. Runs inline when n is small or the pool has one thread.
    // `min_per_thread` keeps tiny loops from paying for a wake-up.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)> &fn,
                      int64_t min_per_thread = 1);

private:
    void worker(int index);

    int m_n_threads;
    std::vector<std::thread> m_workers;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::condition_variable m_done;
    const std::function<void(int64_t, int64_t)> *m_job = nullptr;
    int64_t m_n = 0;
    int m_chunks = 0;
    uint64_t m_generation = 0;
    int m_pending = 0;
    bool m_stop = false;
};

} // namespace longscope
