// The thread pool's claiming of work: every index of [0, n) is processed exactly once, in
// contiguous pieces that depend only on n, the minimum piece and the pool's size, however
// the threads are scheduled; a worker that has not started is never waited for, one that
// has claimed a piece always is.
#include "cpu/thread_pool.h"

#include <QtTest>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

using namespace longscope;
using namespace std::chrono_literals;

namespace {

struct Record {
    std::vector<std::atomic<int>> hits;
    std::mutex mutex;
    std::vector<std::pair<int64_t, int64_t>> pieces;
    explicit Record(int64_t n) : hits(size_t(n)) {}
};

// Runs one loop over [0, n), recording every index and piece; fails the test on an index
// outside [0, n), an empty piece or a piece out of order.
void run_recorded(ThreadPool &pool, int64_t n, int64_t min_per_thread, Record &rec,
                  const std::function<void(int64_t)> &extra = {})
{
    pool.parallel_for(
        n,
        [&](int64_t b, int64_t e) {
            QVERIFY2(0 <= b && b < e && e <= n, "piece outside [0, n) or empty");
            if (extra)
                extra(b);
            for (int64_t i = b; i < e; ++i)
                rec.hits[size_t(i)].fetch_add(1);
            std::lock_guard lock(rec.mutex);
            rec.pieces.emplace_back(b, e);
        },
        min_per_thread);
}

// Every index once; the pieces tile [0, n) and are as many and as long as documented.
void check_record(Record &rec, int64_t n, int64_t min_per_thread, int threads)
{
    for (int64_t i = 0; i < n; ++i)
        QCOMPARE(rec.hits[size_t(i)].load(), 1);
    std::sort(rec.pieces.begin(), rec.pieces.end());
    int64_t at = 0;
    for (const auto &[b, e] : rec.pieces) {
        QCOMPARE(b, at);
        at = e;
    }
    QCOMPARE(at, n);
    const int64_t count = int64_t(rec.pieces.size());
    if (count > 1)
        for (const auto &[b, e] : rec.pieces)
            QVERIFY(e - b >= min_per_thread);
    // The documented sizes: with at least 16 minimum pieces per thread, 6 per thread that
    // shrink (3 per thread of a quarter of a thread's share n / t, then 1 of an eighth, then
    // 2 of a sixteenth), each within one index of its exact length; otherwise up to 4 per
    // thread of equal length (within one index).
    const int64_t max_pieces = n / min_per_thread;
    const int64_t t = std::min<int64_t>(threads, std::max<int64_t>(1, max_pieces));
    if (t > 1 && max_pieces >= 16 * t) {
        QCOMPARE(count, 6 * t);
        for (int64_t c = 0; c < count; ++c) {
            const double share = double(n) / double(t);
            const double exact = c < 3 * t ? share / 4 : c < 4 * t ? share / 8 : share / 16;
            const double len = double(rec.pieces[size_t(c)].second - rec.pieces[size_t(c)].first);
            QVERIFY2(std::abs(len - exact) <= 1.0, "a piece is not the documented length");
        }
    } else {
        QVERIFY(count <= std::max<int64_t>(1, 4 * threads));
        int64_t shortest = n, longest = 0;
        for (const auto &[b, e] : rec.pieces) {
            shortest = std::min(shortest, e - b);
            longest = std::max(longest, e - b);
        }
        QVERIFY(longest - shortest <= 1);
    }
}

} // namespace

class TestThreadPool : public QObject {
    Q_OBJECT

private slots:
    void everyIndexOnce_data()
    {
        QTest::addColumn<int>("threads");
        for (int t : {1, 2, 3, 4, 7, 16})
            QTest::addRow("%d threads", t) << t;
    }

    void everyIndexOnce()
    {
        QFETCH(int, threads);
        ThreadPool pool(threads);
        for (int64_t n : {0, 1, 2, 3, 5, 8, 15, 16, 17, 63, 64, 100, 1000, 4099, 70000})
            for (int64_t min : {1, 2, 7, 64, 1000}) {
                Record rec(n);
                run_recorded(pool, n, min, rec);
                check_record(rec, n, min, threads);
            }
    }

    void samePiecesEveryCall()
    {
        // Which thread takes a piece varies; where the pieces fall does not.
        ThreadPool pool(4);
        Record first(1000);
        run_recorded(pool, 1000, 3, first);
        std::sort(first.pieces.begin(), first.pieces.end());
        QCOMPARE(int64_t(first.pieces.size()), int64_t(24)); // 1000 / 3 >= 16 x 4: shrinking
        for (int rep = 0; rep < 200; ++rep) {
            Record rec(1000);
            run_recorded(pool, 1000, 3, rec);
            std::sort(rec.pieces.begin(), rec.pieces.end());
            QCOMPARE(rec.pieces, first.pieces);
        }
    }

    void manyJobsBackToBack()
    {
        // Short jobs one after the other: workers still busy with (or spinning after) one job
        // meet the next, and sizes change from job to job.
        for (int threads : {2, 3, 8}) {
            ThreadPool pool(threads);
            for (int job = 0; job < 3000; ++job) {
                const int64_t n = 1 + (job * 37) % 200;
                Record rec(n);
                run_recorded(pool, n, 1 + job % 3, rec);
                check_record(rec, n, 1 + job % 3, threads);
            }
        }
    }

    void notStartedWorkersAreNotWaitedFor()
    {
        // Workers that take 300 ms to start (as if descheduled): the caller claims every
        // piece itself and returns long before; the late workers then find later jobs, which
        // they must not mistake for the one that woke them.
        ThreadPool pool(4);
        pool.delay_workers_for_testing(300ms);
        const std::thread::id caller = std::this_thread::get_id();
        std::atomic<int> by_others{0};
        const auto t0 = std::chrono::steady_clock::now();
        Record rec(1000);
        run_recorded(pool, 1000, 1, rec, [&](int64_t) {
            if (std::this_thread::get_id() != caller)
                by_others.fetch_add(1);
        });
        const auto elapsed = std::chrono::steady_clock::now() - t0;
        check_record(rec, 1000, 1, 4);
        QCOMPARE(by_others.load(), 0);
        QVERIFY2(elapsed < 200ms, "the caller waited for workers that had not started");
        // Jobs while the delayed workers wake up, look at a stale claim word and maybe join
        // later ones (for 0.5 s or 20000 jobs).
        pool.delay_workers_for_testing(1ms);
        const auto until = std::chrono::steady_clock::now() + 500ms;
        for (int job = 0; job < 20000 && std::chrono::steady_clock::now() < until; ++job) {
            const int64_t n = 1 + job % 97;
            Record r(n);
            run_recorded(pool, n, 1, r);
            check_record(r, n, 1, 4);
        }
        pool.delay_workers_for_testing(0us);
    }

    void claimedPiecesAreWaitedFor()
    {
        // A worker that sleeps inside its piece (descheduled mid-piece): the loop returns only
        // after that piece is done, and the other threads take the rest meanwhile.
        ThreadPool pool(3);
        const std::thread::id caller = std::this_thread::get_id();
        for (int rep = 0; rep < 5; ++rep) {
            std::atomic<bool> slept{false};
            Record rec(600);
            run_recorded(pool, 600, 1, rec, [&](int64_t) {
                if (std::this_thread::get_id() != caller && !slept.exchange(true))
                    std::this_thread::sleep_for(20ms);
            });
            check_record(rec, 600, 1, 3);
        }
    }

    void activeThreadsLimitTheLoop()
    {
        // set_active(n): loops run on at most n threads (the caller included), cut as for a
        // pool of n; out-of-range counts are clamped; the whole pool again after.
        ThreadPool pool(4);
        for (int active : {2, 1, 3, 4}) {
            pool.set_active(active);
            QCOMPARE(pool.active(), active);
            for (int job = 0; job < 200; ++job) {
                std::mutex mutex;
                std::vector<std::thread::id> ids;
                Record rec(1000);
                run_recorded(pool, 1000, 3, rec, [&](int64_t) {
                    std::lock_guard lock(mutex);
                    if (std::find(ids.begin(), ids.end(), std::this_thread::get_id()) == ids.end())
                        ids.push_back(std::this_thread::get_id());
                });
                check_record(rec, 1000, 3, active);
                QVERIFY2(int(ids.size()) <= active, "more threads ran pieces than the active count");
            }
        }
        pool.set_active(0);
        QCOMPARE(pool.active(), 1);
        pool.set_active(99);
        QCOMPARE(pool.active(), 4);
    }

    void nestedPoolsAndDestruction()
    {
        // Pools made and destroyed repeatedly, some never used, some mid-spin.
        for (int rep = 0; rep < 50; ++rep) {
            ThreadPool pool(1 + rep % 5);
            if (rep % 3 == 0)
                continue;
            Record rec(50);
            run_recorded(pool, 50, 1, rec);
            check_record(rec, 50, 1, pool.size());
        }
    }

    void minItemsPerThread()
    {
        QCOMPARE(min_items_per_thread(0), k_min_work_per_thread);
        QCOMPARE(min_items_per_thread(1), k_min_work_per_thread);
        QCOMPARE(min_items_per_thread(64), k_min_work_per_thread / 64);
        QCOMPARE(min_items_per_thread(k_min_work_per_thread), int64_t(1));
        QCOMPARE(min_items_per_thread(1 << 30), int64_t(1));
    }
};

QTEST_APPLESS_MAIN(TestThreadPool)
#include "tst_thread_pool.moc"
