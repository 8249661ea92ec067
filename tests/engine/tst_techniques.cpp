// The long-context techniques: every attention setting x causal flash x KV mode x keys
// before RoPE gives the plain path's tokens and logits; NTK alpha against its formula;
// settings switched between steps; batches against single runs; the memory ledger.
#include "support/comparisons.h"
#include "support/gguf_writer.h"
#include "support/greedy_trace.h"
#include "support/model_files.h"
#include "support/test_size.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/gguf.h"

#include <QTemporaryDir>

#include <QtTest>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace longscope;

using longscope::test::max_diff;
using longscope::test::run_greedy;
using longscope::test::sized;
using longscope::test::Trace;

namespace {

const std::string gguf_path = LONGSCOPE_BUNDLED_MODEL;

// Steps logits must agree within: the variants sum in different orders (tiles, online
// softmax rescaling), so float32 rounding differs; 1e-4 is ~100x that noise on this model
// and far below the gaps that decide its greedy tokens.
constexpr double k_logit_tol = 1e-4;

// Independent statement of the auto alpha formula (DESIGN.md).
double auto_alpha(int L, int n_ctx_train) { return std::max(1.0, 1.1 * (L / (n_ctx_train / 2.0) - 1.0)); }

std::string book_text(size_t bytes)
{
    std::ifstream in(LONGSCOPE_TEST_DATA "/books/pg98-a-tale-of-two-cities.txt", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string all = ss.str();
    return all.substr(20000, bytes); // past the Gutenberg header
}

std::vector<int32_t> book_prompt(const Model &m, int n_tokens)
{
    auto ids = m.tokenizer().encode(book_text(size_t(n_tokens) * 8), true);
    ids.resize(size_t(n_tokens));
    return ids;
}

} // namespace

class TestTechniques : public QObject {
    Q_OBJECT
    std::unique_ptr<Model> m_model;
    std::vector<int32_t> m_prompt;
    Trace m_plain;

private slots:
    void initTestCase()
    {
        m_model = Model::load(gguf_path);
        m_prompt = m_model->tokenizer().encode("Once upon a time", true);
        m_plain = run_greedy(*m_model, m_prompt, 100, Settings{});
    }

    void every_combination_matches_the_plain_path_data()
    {
        longscope::test::add_technique_matrix_rows();
    }
    void every_combination_matches_the_plain_path()
    {
        const Settings s = longscope::test::technique_matrix_settings();
        Trace t = run_greedy(*m_model, m_prompt, 100, s);
        QCOMPARE(t.tokens, m_plain.tokens);
        for (size_t i = 0; i < t.logits.size(); ++i)
            QVERIFY2(max_diff(t.logits[i], m_plain.logits[i]) <= k_logit_tol,
                     qPrintable(QString("step %1: %2").arg(i).arg(max_diff(t.logits[i], m_plain.logits[i]))));
    }

    void switching_every_setting_between_steps_loses_nothing()
    {
        // Cycle through modes, attention kinds and key storage while generating: the
        // context migrates and converts each time, and the text stays the plain one.
        const KvMode modes[] = {KvMode::Vmm, KvMode::Concat, KvMode::None, KvMode::Static};
        Trace t = run_greedy(*m_model, m_prompt, 100, Settings{}, 512, [&](Session &s, int i) {
            Settings st = s.settings();
            st.kv_mode = modes[i % 4];
            st.rope.store_kv_before_rope = (i / 3) % 2 == 1;
            st.attention.memory_efficient = (i / 2) % 2 == 1;
            st.attention.causal_flash = (i / 5) % 2 == 1;
            s.set_settings(st);
        });
        QCOMPARE(t.tokens, m_plain.tokens);
        for (size_t i = 0; i < t.logits.size(); ++i)
            QVERIFY2(max_diff(t.logits[i], m_plain.logits[i]) <= k_logit_tol, qPrintable(QString("step %1").arg(i)));
        // The settings in effect show in the metrics, step by step.
        QCOMPARE(t.metrics[5].settings.kv_mode, modes[4 % 4]);
    }

    void alpha_one_is_no_scaling_exactly()
    {
        Settings s;
        s.rope.ntk_alpha = 1.0f;
        Trace t = run_greedy(*m_model, m_prompt, 30, s);
        for (size_t i = 0; i < t.logits.size(); ++i)
            QCOMPARE(t.logits[i], m_plain.logits[i]);
        // And alpha > 1 really changes the logits.
        s.rope.ntk_alpha = 4.0f;
        Trace four = run_greedy(*m_model, m_prompt, 30, s);
        QVERIFY(max_diff(four.logits[1], m_plain.logits[1]) > 1e-3);
    }

    void auto_alpha_follows_the_formula()
    {
        // Up to ~0.95 of the trained context the formula gives at most 1: auto == alpha 1
        // exactly. Beyond, the alpha in effect is the formula's.
        const int train = m_model->hparams().n_ctx_train; // 512
        auto prompt = book_prompt(*m_model, 470);
        Settings s;
        s.rope.ntk_auto = true;
        Trace a = run_greedy(*m_model, prompt, 60, s, 1024);
        Trace plain = run_greedy(*m_model, prompt, 60, Settings{}, 1024);
        int last_equal = 0;
        for (size_t i = 0; i < a.metrics.size(); ++i) {
            const int L = a.metrics[i].position;
            QCOMPARE(a.metrics[i].ntk_alpha, auto_alpha(L, train));
            if (auto_alpha(L, train) == 1.0) {
                QCOMPARE(a.logits[i], plain.logits[i]);
                last_equal = L;
            }
        }
        QVERIFY(last_equal >= int(0.95 * train) - 1); // 488 tokens: still no scaling
        QVERIFY(a.metrics.back().ntk_alpha > 1.0);
        // The base in effect is base * alpha^(d/(d-2)).
        const double d = m_model->hparams().n_rot;
        const StepMetrics &last = a.metrics.back();
        QVERIFY(std::fabs(last.rope_base - 10000.0 * std::pow(auto_alpha(last.position, train), d / (d - 2))) < 1e-6 * last.rope_base);
    }

    void keys_before_rope_match_recomputing_with_the_new_alpha_data()
    {
        QTest::addColumn<bool>("mem_efficient");
        QTest::newRow("naive") << false;
        QTest::newRow("mem-efficient") << true;
    }
    void keys_before_rope_match_recomputing_with_the_new_alpha()
    {
        // With keys cached before RoPE, the logits after a step with a new alpha equal those
        // of the whole sequence recomputed from scratch with that alpha. Exactly so for a
        // one-layer model, where the cached keys and values depend only on the tokens: in
        // deeper layers the cached rows also carry the earlier alpha through the hidden
        // states, which no cache can undo. The stories260K weights cut to their first layer
        // make that model.
        QFETCH(bool, mem_efficient);
        QTemporaryDir tmp;
        const std::string one_layer = tmp.filePath("one-layer.gguf").toStdString();
        QVERIFY(test::write_first_layer_gguf(gguf_path, one_layer));
        auto m1 = Model::load(one_layer);
        QCOMPARE(m1->hparams().n_layer, 1);
        auto prompt = book_prompt(*m1, 300);
        const float alphas[] = {1.0f, 2.0f, 3.5f, 1.5f, 8.0f};
        auto schedule = [&](Session &ss, int i) {
            Settings st = ss.settings();
            st.rope.ntk_alpha = alphas[i % 5];
            ss.set_settings(st);
        };
        auto recompute = [&](const Model &m, const Trace &t, int i) {
            std::vector<int32_t> seq = prompt;
            seq.insert(seq.end(), t.tokens.begin(), t.tokens.begin() + i + 1);
            SessionOptions o;
            o.n_ctx = 1024;
            o.settings.rope.ntk_alpha = alphas[i % 5];
            o.settings.kv_mode = KvMode::None;
            Session scratch(m, o);
            auto l = scratch.eval(seq);
            return std::vector<float>(l.begin(), l.end());
        };
        Settings s;
        s.rope.store_kv_before_rope = true;
        s.attention.memory_efficient = mem_efficient;
        Trace before = run_greedy(*m1, prompt, 20, s, 1024, schedule);
        s.rope.store_kv_before_rope = false;
        Trace after = run_greedy(*m1, prompt, 20, s, 1024, schedule);
        for (int i = 0; i < 20; ++i) {
            const auto truth = recompute(*m1, before, i);
            QVERIFY2(max_diff(truth, before.logits[size_t(i) + 1]) <= k_logit_tol,
                     qPrintable(QString("step %1: %2").arg(i).arg(max_diff(truth, before.logits[size_t(i) + 1]))));
        }
        // Keys cached after RoPE keep their old rotation, so the same schedule does not
        // (the flaw that caching keys before RoPE fixes).
        QVERIFY(max_diff(recompute(*m1, after, 3), after.logits[4]) > 1e-2);

        // The full model: keys before RoPE come closer to the recomputed logits than keys
        // after RoPE at every step where alpha changed.
        auto full_prompt = book_prompt(*m_model, 300);
        prompt = full_prompt;
        s.rope.store_kv_before_rope = true;
        Trace fb = run_greedy(*m_model, prompt, 10, s, 1024, schedule);
        // The after-RoPE run is fed the same tokens, so only the cache differs.
        s.rope.store_kv_before_rope = false;
        Trace fa = run_greedy(*m_model, prompt, 10, s, 1024, schedule, fb.tokens);
        QCOMPARE(fa.tokens, fb.tokens);
        int compared = 0;
        for (int i = 1; i < 10; ++i) {
            if (alphas[i % 5] == alphas[(i - 1) % 5])
                continue;
            const auto truth = recompute(*m_model, fb, i);
            QVERIFY2(max_diff(truth, fb.logits[size_t(i) + 1]) < max_diff(truth, fa.logits[size_t(i) + 1]),
                     qPrintable(QString("step %1").arg(i)));
            ++compared;
        }
        QVERIFY(compared >= 3);
    }

    void batch_equals_single_runs_data()
    {
        QTest::addColumn<bool>("mem_efficient");
        QTest::addColumn<bool>("causal_flash");
        QTest::addColumn<KvMode>("mode");
        for (bool me : {false, true})
            for (bool cf : {false, true})
                for (KvMode mode : {KvMode::Static, KvMode::Vmm, KvMode::None})
                    QTest::addRow("%s%s kv=%s", me ? "mem-efficient" : "naive", cf ? " causal-flash" : "",
                                  std::string(to_string(mode)).c_str())
                        << me << cf << mode;
    }
    void batch_equals_single_runs()
    {
        QFETCH(bool, mem_efficient);
        QFETCH(bool, causal_flash);
        QFETCH(KvMode, mode);
        SessionOptions o;
        o.n_ctx = 512;
        o.n_threads = 2;
        o.settings.attention.memory_efficient = mem_efficient;
        o.settings.attention.causal_flash = causal_flash;
        o.settings.kv_mode = mode;
        std::vector<GenerateRequest> reqs;
        for (const char *p : {"Once upon a time", "The cat", "Tom and Lily went to the big park to play with their", "Sam"}) {
            GenerateRequest r;
            r.prompt = m_model->tokenizer().encode(p, true);
            r.max_new_tokens = 60;
            r.sampling.temperature = 0;
            r.stop_at_eos = false;
            reqs.push_back(r);
        }
        auto batch = generate_batch(*m_model, o, reqs);
        QCOMPARE(batch.size(), reqs.size());
        for (size_t i = 0; i < reqs.size(); ++i) {
            Session s(*m_model, {512, 2});
            GenerateResult single = generate(s, reqs[i]);
            QCOMPARE(batch[i].tokens, single.tokens);
            QCOMPARE(batch[i].text, single.text);
        }
    }

    void padding_bug_switch_reproduces_the_failure()
    {
        SessionOptions o;
        o.n_ctx = 512;
        o.settings.attention.causal_flash = true;
        o.settings.attention.reproduce_padding_bug = true;
        std::vector<GenerateRequest> reqs(2);
        reqs[0].prompt = m_model->tokenizer().encode("Tom and Lily went to the big park to play with their", true);
        reqs[1].prompt = m_model->tokenizer().encode("Once upon a time", true);
        for (auto &r : reqs) {
            r.max_new_tokens = 40;
            r.sampling.temperature = 0;
        }
        auto bugged = generate_batch(*m_model, o, reqs);
        Session s(*m_model, {512, 2});
        // The longest prompt has no padding and is unaffected; the short one attends its
        // padding and its text changes.
        QCOMPARE(bugged[0].tokens, generate(s, reqs[0]).tokens);
        QVERIFY(bugged[1].tokens != generate(s, reqs[1]).tokens);
        o.settings.attention.reproduce_padding_bug = false;
        QCOMPARE(generate_batch(*m_model, o, reqs)[1].tokens, generate(s, reqs[1]).tokens);
    }

    void memory_efficient_scratch_is_flat_naive_grows_quadratically()
    {
        // Lengths of one, two and three units, each unit more than one 256-token chunk.
        const int unit = sized(600, 300);
        std::map<int, uint64_t> naive, tiled;
        for (int n : {unit, 2 * unit, 3 * unit}) {
            auto prompt = book_prompt(*m_model, n);
            for (bool me : {false, true}) {
                SessionOptions o;
                o.n_ctx = 2048;
                o.settings.attention.memory_efficient = me;
                o.settings.attention.causal_flash = me;
                Session s(*m_model, o);
                s.eval(prompt);
                (me ? tiled : naive)[n] = s.last_metrics().memory.peak_scratch;
            }
        }
        qInfo("scratch peak, naive: %llu %llu %llu; memory-efficient: %llu %llu %llu", (unsigned long long)naive[unit],
              (unsigned long long)naive[2 * unit], (unsigned long long)naive[3 * unit], (unsigned long long)tiled[unit],
              (unsigned long long)tiled[2 * unit], (unsigned long long)tiled[3 * unit]);
        // Flat: the same chunk-sized buffers whatever the length (a few KB of slack for the
        // logits row and the size of the last chunk).
        for (int n : {2 * unit, 3 * unit})
            QVERIFY2(std::llabs(int64_t(tiled[n]) - int64_t(tiled[unit])) <= int64_t(tiled[unit] / 100),
                     qPrintable(QString("%1 vs %2").arg(tiled[n]).arg(tiled[unit])));
        // Tripling the prompt: the score matrix grows 9x, the linear activations 3x.
        QVERIFY(double(naive[3 * unit]) / double(naive[unit]) > 6.0);
        QVERIFY(naive[unit] > 4 * tiled[unit]);
    }

    void batch_prefill_goes_in_chunks()
    {
        // generate_batch with memory-efficient attention takes long prompts a chunk at a time,
        // as a session does: every step evaluates at most one chunk of each sequence, the
        // scratch stays flat however long the prompts, and the text is a session's, for
        // prompts of one, two and three units (each unit more than one 256-token chunk) side
        // by side and for a one-unit prompt alone. The step count checks that chunks ran.
        const int unit = sized(600, 300);
        std::vector<GenerateRequest> reqs;
        for (int n : {unit, 3 * unit, 2 * unit}) {
            GenerateRequest r;
            r.prompt = book_prompt(*m_model, n);
            r.max_new_tokens = 12;
            r.sampling.temperature = 0;
            r.stop_at_eos = false;
            reqs.push_back(r);
        }
        SessionOptions o;
        o.n_ctx = 4 * unit;
        o.n_threads = 2;
        o.settings.attention.memory_efficient = true;
        o.settings.attention.causal_flash = true;
        const auto scratch_of = [&](const std::vector<GenerateRequest> &rs, std::vector<StepMetrics> *steps) {
            uint64_t peak = 0;
            auto res = generate_batch(*m_model, o, rs, {}, [&](const StepMetrics &m) {
                peak = std::max(peak, m.memory.scratch);
                if (steps)
                    steps->push_back(m);
            });
            return std::make_pair(res, peak);
        };
        std::vector<StepMetrics> steps;
        const auto [batch, peak_three] = scratch_of(reqs, &steps);
        const int chunk = 256;
        int prefill_steps = 0;
        for (const StepMetrics &m : steps) {
            QVERIFY2(m.n_tokens <= 3 * chunk, qPrintable(QString("a step of %1 tokens").arg(m.n_tokens)));
            prefill_steps += m.phase == StepPhase::Prefill ? 1 : 0;
        }
        // The longest prompt needs ceil(3 unit / 256) steps; the last of them is a prefill step
        // for the batch, and the shorter prompts are already decoding by then.
        QCOMPARE(prefill_steps, (3 * unit + chunk - 1) / chunk);
        for (size_t i = 0; i < reqs.size(); ++i) {
            Session s(*m_model, o);
            const GenerateResult single = generate(s, reqs[i]);
            QCOMPARE(batch[i].tokens, single.tokens);
        }
        // Flat: three prompts of up to 3 units hold the scratch of three chunks at most; one
        // prompt of one unit about one chunk's. Without chunks the scratch grew with the
        // prompts: 6 units of tokens in one pass.
        const auto [alone, peak_one] = scratch_of({reqs[0]}, nullptr);
        QCOMPARE(alone[0].tokens, batch[0].tokens);
        qInfo("scratch peak: one prompt of %d tokens %llu, three prompts of %d tokens in all %llu", unit,
              (unsigned long long)peak_one, 6 * unit, (unsigned long long)peak_three);
        QVERIFY2(peak_three < 4 * peak_one, qPrintable(QString("%1 vs %2").arg(peak_three).arg(peak_one)));
        o.settings.attention.memory_efficient = false;
        o.settings.attention.causal_flash = false;
        const auto [whole, peak_whole] = scratch_of({reqs[1]}, nullptr);
        QCOMPARE(whole.size(), size_t(1));
        QVERIFY2(peak_whole > 2 * peak_one, qPrintable(QString("%1 vs %2").arg(peak_whole).arg(peak_one)));
    }

    // A prompt evaluated for its last row's logits alone (the last layer trims the other rows,
    // and with memory-efficient attention the chunks before the last keep none) against the
    // same prompt with every row's logits: the same last row, the same cache (the decode steps
    // after it agree), in every KV mode; and a batch whose segments keep different rows.
    void last_layer_keeps_only_the_rows_asked_for_data()
    {
        QTest::addColumn<bool>("mem_efficient");
        QTest::addColumn<KvMode>("mode");
        for (bool me : {false, true})
            for (KvMode mode : {KvMode::Static, KvMode::Vmm, KvMode::Concat, KvMode::None})
                QTest::addRow("%s kv=%s", me ? "mem-efficient" : "naive", std::string(to_string(mode)).c_str())
                    << me << mode;
    }
    void last_layer_keeps_only_the_rows_asked_for()
    {
        QFETCH(bool, mem_efficient);
        QFETCH(KvMode, mode);
        SessionOptions o;
        o.n_ctx = 1024;
        o.n_threads = 2;
        o.settings.attention.memory_efficient = mem_efficient;
        o.settings.attention.causal_flash = mem_efficient;
        o.settings.kv_mode = mode;
        // More than two 256-token chunks.
        const std::vector<int32_t> prompt = book_prompt(*m_model, 600);
        const size_t nv = size_t(m_model->hparams().n_vocab);
        Session last(*m_model, o), every(*m_model, o);
        const std::span<const float> one = last.eval(prompt);
        QCOMPARE(one.size(), nv);
        std::vector<float> a(one.begin(), one.end());
        const std::span<const float> all = every.eval(prompt, /*all_logits=*/true);
        QCOMPARE(all.size(), prompt.size() * nv);
        std::vector<float> b(all.end() - std::ptrdiff_t(nv), all.end());
        for (int step = 0; step < 8; ++step) {
            QVERIFY2(max_diff(a, b) <= k_logit_tol, qPrintable(QString("step %1: %2").arg(step).arg(max_diff(a, b))));
            const int32_t next = int32_t(std::max_element(b.begin(), b.end()) - b.begin());
            const auto la = last.eval(std::span<const int32_t>(&next, 1));
            const auto lb = every.eval(std::span<const int32_t>(&next, 1));
            a.assign(la.begin(), la.end());
            b.assign(lb.begin(), lb.end());
        }
    }

    void kv_modes_memory_ledger()
    {
        // A long prompt, then decoding: enough tokens to cross vmm commit steps (64 KB
        // granules, 512 rows of this model: 1800 -> 2200 crosses one, 1000 -> 1100 too).
        const int n_prompt = sized(1800, 1000), n_new = sized(400, 100), limit = sized(4096, 2048);
        auto prompt = book_prompt(*m_model, n_prompt);
        std::map<KvMode, std::vector<MemoryLedger>> ledgers;
        for (KvMode mode : {KvMode::Static, KvMode::Vmm, KvMode::Concat}) {
            Settings s;
            s.kv_mode = mode;
            s.attention.memory_efficient = true;
            s.attention.causal_flash = true;
            Trace t = run_greedy(*m_model, prompt, n_new, s, limit);
            for (const StepMetrics &m : t.metrics)
                ledgers[mode].push_back(m.memory);
        }
        const HParams &hp = m_model->hparams();
        const uint64_t row = uint64_t(hp.n_embd_kv()) * 4 * 2 * hp.n_layer; // K and V, all layers
        const uint64_t final_len = n_prompt + n_new;
        // static: the whole limit, from the first step.
        QCOMPARE(ledgers[KvMode::Static].front().kv_resident, limit * row);
        QCOMPARE(ledgers[KvMode::Static].back().kv_resident, limit * row);
        QCOMPARE(ledgers[KvMode::Static].back().kv_bytes_copied, uint64_t(0));
        // vmm: reserved for the limit, resident grows with the tokens in page-granular steps,
        // never copies.
        const auto &v = ledgers[KvMode::Vmm];
        QVERIFY(v.front().kv_reserved >= limit * row);
        QVERIFY(v.front().kv_resident >= n_prompt * row);
        QVERIFY(v.front().kv_resident < v.back().kv_resident);
        QVERIFY(v.back().kv_resident >= final_len * row);
        QVERIFY(v.back().kv_resident < limit * row);
        for (size_t i = 1; i < v.size(); ++i)
            QVERIFY(v[i].kv_resident >= v[i - 1].kv_resident);
        QCOMPARE(v.back().kv_bytes_copied, uint64_t(0));
        // concat: exactly the tokens, and a quadratic number of bytes copied: each step
        // copies everything cached before it.
        const auto &c = ledgers[KvMode::Concat];
        QCOMPARE(c.back().kv_resident, final_len * row);
        uint64_t expect = 0;
        for (uint64_t len = n_prompt + 1; len <= final_len; ++len)
            expect += (len - 1) * row;
        QCOMPARE(c.back().kv_bytes_copied, expect);
        QVERIFY(c.back().peak_kv_resident >= (2 * final_len - 1) * row); // old and new at once
        qInfo("after %llu tokens (limit %d): static resident %llu; vmm resident %llu of %llu reserved "
              "(%llu after the prompt); concat resident %llu, peak %llu, copied %llu",
              (unsigned long long)final_len, limit, (unsigned long long)ledgers[KvMode::Static].back().kv_resident,
              (unsigned long long)v.back().kv_resident, (unsigned long long)v.back().kv_reserved,
              (unsigned long long)v.front().kv_resident, (unsigned long long)c.back().kv_resident,
              (unsigned long long)c.back().peak_kv_resident, (unsigned long long)c.back().kv_bytes_copied);
    }

    void beyond_the_trained_context_data()
    {
        QTest::addColumn<KvMode>("mode");
        QTest::addColumn<QString>("alpha");
        for (KvMode mode : {KvMode::None, KvMode::Concat, KvMode::Static, KvMode::Vmm})
            for (const char *a : {"1", "4", "auto"})
                QTest::addRow("kv=%s alpha=%s", std::string(to_string(mode)).c_str(), a) << mode << QString(a);
    }
    void beyond_the_trained_context()
    {
        QFETCH(KvMode, mode);
        QFETCH(QString, alpha);
        Settings s;
        s.kv_mode = mode;
        s.attention.memory_efficient = true;
        s.attention.causal_flash = true;
        if (alpha == "auto")
            s.rope.ntk_auto = true;
        else
            s.rope.ntk_alpha = alpha.toFloat();
        // Past the trained 512 tokens (KV mode none evaluates the whole context every step).
        auto prompt = book_prompt(*m_model, mode == KvMode::None ? sized(1000, 600) : sized(1800, 700));
        Trace t = run_greedy(*m_model, prompt, mode == KvMode::None ? 4 : sized(16, 8), s, 4096);
        for (const auto &l : t.logits)
            for (float x : l)
                QVERIFY(std::isfinite(x));
        QCOMPARE(t.metrics.back().position, int(prompt.size() + t.tokens.size()));
    }

    void bad_settings_are_clear_errors()
    {
        Session s(*m_model, {512, 1});
        Settings bad;
        bad.rope.ntk_alpha = 0.5f;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, s.set_settings(bad));
        bad.rope.ntk_alpha = NAN;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, s.set_settings(bad));
        bad.rope.ntk_alpha = INFINITY;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, s.set_settings(bad));
        bad = Settings{};
        bad.context_limit = -5;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, s.set_settings(bad));
        QVERIFY(!parse_kv_mode("paged").has_value());
        QVERIFY(!parse_overflow("truncate").has_value());
        // A limit below the current length is refused and the old settings stay.
        s.eval(m_prompt);
        bad = Settings{};
        bad.context_limit = 3;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, s.set_settings(bad));
        QCOMPARE(s.n_ctx(), 512);
    }

    void head_tail_keeps_both_ends()
    {
        std::vector<int32_t> p(100);
        for (int i = 0; i < 100; ++i)
            p[size_t(i)] = i;
        auto cut = fit_prompt(p, 50, 10, OverflowPolicy::HeadTail); // budget 40: 20 + 20
        QCOMPARE(cut.size(), size_t(40));
        QCOMPARE(cut.front(), 0);
        QCOMPARE(cut[19], 19);
        QCOMPARE(cut[20], 80);
        QCOMPARE(cut.back(), 99);
        QVERIFY_THROWS_EXCEPTION(ContextOverflow, fit_prompt(p, 50, 10, OverflowPolicy::Error));
        QCOMPARE(fit_prompt(p, 200, 10, OverflowPolicy::Error).size(), size_t(100));
    }
};

QTEST_APPLESS_MAIN(TestTechniques)
#include "tst_techniques.moc"
