// The decode thread count chosen from step times (cpu/thread_tuner.h): against simulated
// machines whose step time per thread count is set by the test, it keeps all threads where
// they are fastest at a small cost, moves to fewer where fewer are faster (as beside a busy
// process) and back when that ends, walks a longer ladder to the best count, and never asks
// a one-thread pool for more. On a real model, steps on a changing thread count give the
// same logits, bit for bit, as steps on a fixed one, and a batch of two sequences the same
// tokens.
#include "cpu/thread_tuner.h"
#include "support/cpu_options_scope.h"
#include "support/greedy_trace.h"

#include "longscope/engine.h"
#include "longscope/quantize.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <functional>
#include <map>
#include <random>

using namespace longscope;
using namespace longscope::test;

namespace {

// Runs `steps` steps with step time time_of(count, step), times a random factor in
// [1 - noise, 1 + noise]; returns how many steps ran on each count.
std::map<int, int64_t> simulate(ThreadTuner &tuner, int64_t steps, const std::function<double(int, int64_t)> &time_of,
                                double noise = 0.05, uint32_t seed = 1)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> jitter(1.0 - noise, 1.0 + noise);
    std::map<int, int64_t> used;
    for (int64_t s = 0; s < steps; ++s) {
        const int n = tuner.next();
        ++used[n];
        tuner.record(time_of(n, s) * jitter(rng));
    }
    return used;
}

// A model whose decode products split across two threads (dim 512, FFN 1536), written to path.
std::string split_model(const std::string &path)
{
    RandomModelSpec spec;
    spec.n_embd = 512;
    spec.n_layer = 2;
    spec.n_head = 8;
    spec.n_head_kv = 4;
    spec.n_ff = 1536;
    spec.n_vocab = 1000;
    spec.n_ctx = 256;
    spec.type = DType::Q8_0;
    spec.stddev = 0.05f;
    spec.seed = 11;
    write_random_model_file(path, spec);
    return path;
}

} // namespace

class TestThreadTuner : public QObject {
    Q_OBJECT

private slots:
    void keepsAllThreadsWhereTheyAreFastest()
    {
        // Two threads 1.6x as fast as one (a quiet machine): the count stays 2, and the steps
        // spent trying 1 are few: the first step of each trial, far slower, ends it.
        ThreadTuner tuner(2);
        const auto used = simulate(tuner, 4000, [](int n, int64_t) { return n == 2 ? 1.0 : 1.6; });
        QCOMPARE(tuner.current(), 2);
        QVERIFY(tuner.trials() >= 10); // it kept checking
        QVERIFY2(used.count(1) && used.at(1) <= 4000 / 100, "more than 1% of the steps ran on the slower count");
    }

    void keepsAllThreadsWhenTheGainIsSmall()
    {
        // Two threads only 8% faster (memory-bound decode): the trials run to the end (the
        // first step is not far slower) and still choose 2.
        ThreadTuner tuner(2);
        const auto used = simulate(tuner, 4000, [](int n, int64_t) { return n == 2 ? 1.0 : 1.08; }, 0.03);
        QCOMPARE(tuner.current(), 2);
        QVERIFY(used.at(2) >= 4000 * 95 / 100);
    }

    void movesToFewerWhenFewerAreFaster()
    {
        // Beside a busy process one thread is 15% faster: taken at the first trial, after
        // first_trial steps, and kept.
        ThreadTuner tuner(2);
        const ThreadTunerParams p;
        const auto used = simulate(tuner, 2000, [](int n, int64_t) { return n == 2 ? 1.15 : 1.0; });
        QCOMPARE(tuner.current(), 1);
        QVERIFY(used.at(1) >= 2000 - p.first_trial - 4 * p.trial_pairs * 8);
    }

    void comesBackWhenTheBusyProcessEnds()
    {
        // Busy for 1000 steps (one thread faster), then quiet (two threads 1.6x as fast): back
        // on two threads within max_interval steps and a trial of the change.
        ThreadTuner tuner(2);
        const ThreadTunerParams p;
        int64_t back_at = -1;
        for (int64_t s = 0; s < 3000; ++s) {
            const bool busy = s < 1000;
            const int n = tuner.next();
            if (s == 999)
                QCOMPARE(tuner.current(), 1);
            tuner.record(busy ? (n == 2 ? 1.15 : 1.0) : (n == 2 ? 0.6 : 1.0));
            if (!busy && back_at < 0 && tuner.current() == 2)
                back_at = s;
        }
        QVERIFY(back_at >= 1000);
        QVERIFY2(back_at - 1000 <= p.max_interval + 2 * p.trial_pairs, "took too long to come back to two threads");
        QCOMPARE(tuner.current(), 2);
    }

    void findsTheBestOfALongerLadder()
    {
        // Eight threads, step time least on two (memory saturated at two, the others only
        // add overhead): 8 -> 4 -> 2, and neither 1 nor 4 is kept.
        ThreadTuner tuner(8);
        const auto time_of = [](int n, int64_t) { return 1.0 + 0.2 * std::abs(std::log2(double(n)) - 1.0); };
        simulate(tuner, 3000, time_of, 0.02);
        QCOMPARE(tuner.current(), 2);
    }

    void steadyUnderBimodalNoise()
    {
        // The machine's memory switching between a fast and a slow state every 40-90 steps
        // (step times x1 or x1.8, the same for every count), two threads 1.4x as fast as one:
        // trials interleave the counts, so the switches do not move it off two threads for long.
        ThreadTuner tuner(2);
        std::mt19937 rng(5);
        std::uniform_int_distribution<int> run(40, 90);
        int64_t next_switch = run(rng);
        bool slow = false;
        const auto used = simulate(tuner, 6000, [&](int n, int64_t s) {
            if (s >= next_switch) {
                slow = !slow;
                next_switch = s + run(rng);
            }
            return (slow ? 1.8 : 1.0) * (n == 2 ? 1.0 : 1.4);
        });
        QVERIFY2(used.at(2) >= 6000 * 95 / 100, "noise moved decode off the faster count");
    }

    void onePoolThreadAsksForOne()
    {
        ThreadTuner tuner(1);
        const auto used = simulate(tuner, 500, [](int, int64_t) { return 1.0; });
        QCOMPARE(used.size(), size_t(1));
        QCOMPARE(used.begin()->first, 1);
        QCOMPARE(tuner.trials(), int64_t(0));
    }

    void changingCountsGiveTheSameLogits()
    {
        // A model whose decode products split across two threads (dim 512, FFN 1536): greedy
        // decoding past the first trial (step 32) with the tuner on, so some steps run on one
        // thread, against the same decoding with every step on both. The logits of every step
        // are identical.
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const auto model = Model::load(split_model(dir.path().toStdString() + "/split.gguf"));
        const std::vector<int32_t> prompt = {1, 300, 301, 302, 303};
        CpuOptions off = cpu_options();
        off.decode_thread_tuning = false;
        Trace fixed;
        {
            CpuOptionsScope scope(off);
            fixed = run_greedy(*model, prompt, 48, Settings{}, 256);
        }
        CpuOptions on = cpu_options();
        on.decode_thread_tuning = true;
        Trace tuned;
        {
            CpuOptionsScope scope(on);
            tuned = run_greedy(*model, prompt, 48, Settings{}, 256);
        }
        int on_one = 0, on_two = 0;
        for (const StepMetrics &m : tuned.metrics)
            if (m.phase == StepPhase::Decode)
                (m.threads == 1 ? on_one : on_two) += 1;
        for (const StepMetrics &m : fixed.metrics)
            if (m.phase == StepPhase::Decode)
                QCOMPARE(m.threads, 2);
        QVERIFY2(on_one >= 1 && on_two >= 1, "the tuned run did not use both counts");
        QCOMPARE(tuned.tokens, fixed.tokens);
        QCOMPARE(tuned.logits.size(), fixed.logits.size());
        for (size_t i = 0; i < fixed.logits.size(); ++i)
            QVERIFY2(tuned.logits[i] == fixed.logits[i], qPrintable(QString("step %1's logits differ").arg(i)));
    }

    void batchedStepsAreTunedToo()
    {
        // Two sequences decoded together (steps of two rows, tuned by their own tuner): past
        // the first trial some steps run on one thread, and both sequences' tokens equal those
        // of the same batch with every step on both threads.
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const auto model = Model::load(split_model(dir.path().toStdString() + "/split.gguf"));
        std::vector<GenerateRequest> reqs(2);
        reqs[0].prompt = {1, 300, 301, 302, 303};
        reqs[1].prompt = {1, 410, 411};
        for (auto &r : reqs) {
            r.max_new_tokens = 56;
            r.sampling.temperature = 0;
            r.stop_at_eos = false;
        }
        SessionOptions so;
        so.n_threads = 2;
        so.n_ctx = 128;
        auto run = [&](bool tuning, std::map<int, int> &decode_threads) {
            CpuOptions o = cpu_options();
            o.decode_thread_tuning = tuning;
            CpuOptionsScope scope(o);
            return generate_batch(*model, so, reqs, {}, [&](const StepMetrics &m) {
                if (m.phase == StepPhase::Decode && m.n_tokens == 2)
                    ++decode_threads[m.threads];
            });
        };
        std::map<int, int> fixed_threads, tuned_threads;
        const auto fixed = run(false, fixed_threads);
        const auto tuned = run(true, tuned_threads);
        QCOMPARE(fixed_threads.size(), size_t(1));
        QCOMPARE(fixed_threads.begin()->first, 2);
        QVERIFY2(tuned_threads[1] >= 1 && tuned_threads[2] >= 1, "the tuned batch did not use both counts");
        QCOMPARE(tuned.size(), fixed.size());
        for (size_t i = 0; i < fixed.size(); ++i) {
            QCOMPARE(int(tuned[i].tokens.size()), 56);
            QCOMPARE(tuned[i].tokens, fixed[i].tokens);
        }
    }
};

QTEST_GUILESS_MAIN(TestThreadTuner)
#include "tst_thread_tuner.moc"
