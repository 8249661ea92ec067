#include "cpu/thread_pool.h"

#include <algorithm>

namespace longscope {

ThreadPool::ThreadPool(int n_threads) : m_n_threads(std::max(1, n_threads))
{
    for (int i = 1; i < m_n_threads; ++i)
        m_workers.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool()
{
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
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
    int chunks = int(std::min<int64_t>(m_n_threads, std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_thread))));
    if (chunks <= 1) {
        fn(0, n);
        return;
    }
    {
        std::lock_guard lock(m_mutex);
        m_job = &fn;
        m_n = n;
        m_chunks = chunks;
        m_pending = chunks - 1;
        ++m_generation;
    }
    m_wake.notify_all();
    fn(0, n / chunks); // chunk 0 on the calling thread
    std::unique_lock lock(m_mutex);
    m_done.wait(lock, [this] { return m_pending == 0; });
    m_job = nullptr;
}

void ThreadPool::worker(int index)
{
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int64_t, int64_t)> *job;
        int64_t n;
        int chunks;
        {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, [&] { return m_stop || m_generation != seen; });
            if (m_stop)
                return;
            seen = m_generation;
            job = m_job;
            n = m_n;
            chunks = m_chunks;
        }
        if (index < chunks) {
            (*job)(n * index / chunks, n * (index + 1) / chunks);
            std::lock_guard lock(m_mutex);
            if (--m_pending == 0)
                m_done.notify_one();
        }
    }
}

} // namespace longscope
