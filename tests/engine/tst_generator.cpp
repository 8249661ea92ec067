// The generator: a prompt sharing a prefix with the session's context evaluates only the rest
// and gives the fresh session's logits bit for bit (every attention, cache and RoPE-storage
// setting); reuse is declined where it could not; stop strings (split across tokens, never
// streamed); end-of-generation token sets; cancellation by request id, in generate() and in a
// batch; the reply kept in the context and continued; the statistics' definitions.
#include "support/comparisons.h"
#include "support/test_size.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/generator.h"

#include <QtTest>

#include <algorithm>
#include <cstring>

using namespace longscope;

namespace {

const std::string gguf_path = LONGSCOPE_BUNDLED_MODEL;

// The bundled model's greedy continuation of "Once upon a time" begins ", there was a little
// girl named Lily. She loved to play outside in the park."; its story ends (a BOS) after 341
// tokens.
constexpr int k_story_tokens = 341;

GenerateRequest greedy(std::vector<int32_t> prompt, int n)
{
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = n;
    r.sampling.temperature = 0;
    r.stop_at_eos = false;
    return r;
}

bool same_bits(std::span<const float> a, std::span<const float> b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

class TestGenerator : public QObject {
    Q_OBJECT

    std::unique_ptr<Model> m_model;

    std::vector<int32_t> encode(const std::string &text, bool bos = true) const
    {
        return m_model->tokenizer().encode(text, bos);
    }
    // A prompt of about 300 tokens, more than one chunk of memory-efficient attention.
    std::vector<int32_t> long_prompt() const
    {
        std::string text;
        for (int i = 0; i < 12; ++i)
            text += "Tom and Lily went to the big park to play with their ball. ";
        return encode(text);
    }
    SessionOptions options(const Settings &s = {}) const
    {
        SessionOptions o;
        o.n_ctx = 512;
        o.n_threads = 2;
        o.settings = s;
        return o;
    }

private slots:
    void initTestCase()
    {
        m_model = Model::load(gguf_path);
        QVERIFY(m_model);
    }

    // A second request on the same session keeps the common prefix (the first prompt, some
    // of its generated tokens) and must give the fresh session's first logits and greedy
    // tokens exactly; so must a request whose whole prompt is cached (one token evaluated).
    void prefix_reuse_equals_fresh_data() { test::add_technique_matrix_rows(); }
    void prefix_reuse_equals_fresh()
    {
        const Settings s = test::technique_matrix_settings();

        // Memory-efficient attention sums decode rows in another order than prompt rows:
        // reuse is declined there, and the results are a fresh context's.
        const bool reused = !s.attention.memory_efficient;

        // Tokens generated: the first request, then each comparison (fewer under a sanitizer;
        // with KV mode none every one of them evaluates the whole context again).
        const int n_first = test::sized(20, 14), n_each = test::sized(24, 6);
        Session shared(*m_model, options(s));
        const GenerateResult first = generate(shared, greedy(long_prompt(), n_first));
        QCOMPARE(first.n_cached, 0);
        QCOMPARE(first.tokens.size(), size_t(n_first));

        // The first prompt, 12 of its generated tokens, then new text.
        std::vector<int32_t> second = long_prompt();
        second.insert(second.end(), first.tokens.begin(), first.tokens.begin() + 12);
        const std::vector<int32_t> more = encode(" Then they went home.", false);
        second.insert(second.end(), more.begin(), more.end());
        const std::vector<int32_t> whole = long_prompt();
        const std::vector<int32_t> shorter(whole.begin(), whole.begin() + 100);

        for (const std::vector<int32_t> &prompt : {second, whole, shorter}) {
            // Logits of the first step: the kept prefix plus the rest, against a fresh session.
            Session fresh(*m_model, options(s));
            const std::span<const float> f = fresh.eval(prompt);
            const std::vector<float> fresh_logits(f.begin(), f.end());
            const int keep = reusable_prefix(shared, prompt);
            QCOMPARE(keep > 0, reused);
            QVERIFY(keep < int(prompt.size()));
            if (keep == 0)
                shared.reset();
            else
                shared.truncate(keep);
            const std::span<const float> r =
                shared.eval(std::span<const int32_t>(prompt).subspan(size_t(keep)));
            QVERIFY2(same_bits(r, fresh_logits),
                     qPrintable(QString("first logits differ, max %1").arg(test::max_diff(
                         std::vector<float>(r.begin(), r.end()), fresh_logits))));

            // Whole generations.
            Session fresh2(*m_model, options(s));
            const GenerateResult want = generate(fresh2, greedy(prompt, n_each));
            const GenerateResult got = generate(shared, greedy(prompt, n_each));
            QCOMPARE(got.n_cached > 0, reused);
            QCOMPARE(got.n_prompt, int(prompt.size()));
            QCOMPARE(got.tokens, want.tokens);
            QCOMPARE(got.text, want.text);
        }
    }

    // A step's RoPE base follows the length under NTK alpha auto and dynamic scaling, and a
    // change of attention or RoPE settings changes every cached row: no reuse then.
    void reuse_declined_when_rows_would_differ()
    {
        const std::vector<int32_t> prompt = long_prompt();
        {
            Settings s;
            s.rope.ntk_auto = true;
            Session shared(*m_model, options(s));
            generate(shared, greedy(prompt, 8));
            QCOMPARE(reusable_prefix(shared, prompt), 0);
            const GenerateResult again = generate(shared, greedy(prompt, 16));
            QCOMPARE(again.n_cached, 0);
            Session fresh(*m_model, options(s));
            QCOMPARE(again.tokens, generate(fresh, greedy(prompt, 16)).tokens);
        }
        {
            Session shared(*m_model, options());
            generate(shared, greedy(prompt, 8));
            QVERIFY(reusable_prefix(shared, prompt) > 0);
            Settings s;
            s.attention.memory_efficient = true;
            shared.set_settings(s);
            QCOMPARE(reusable_prefix(shared, prompt), 0);
            s.attention.memory_efficient = false;
            s.kv_mode = KvMode::Concat; // the cache only moves
            shared.set_settings(s);
            QVERIFY(reusable_prefix(shared, prompt) > 0);
        }
        {
            // Asked not to.
            Session shared(*m_model, options());
            generate(shared, greedy(prompt, 8));
            GenerateRequest r = greedy(prompt, 8);
            r.reuse_prefix = false;
            QCOMPARE(generate(shared, r).n_cached, 0);
        }
    }

    // The greedy text has "Lily" in the middle; the stream holds back whatever might be the
    // start of a stop string, so nothing from the stop string on is ever streamed.
    void stop_strings_data()
    {
        QTest::addColumn<QStringList>("stops");
        QTest::addColumn<QString>("text");
        QTest::addColumn<bool>("stopped");
        QTest::newRow("one token") << QStringList{"Lily"} << ", there was a little girl named " << true;
        QTest::newRow("split across tokens") << QStringList{"girl na"} << ", there was a little " << true;
        QTest::newRow("earliest of two") << QStringList{" park", "Lily"} << ", there was a little girl named "
                                         << true;
        QTest::newRow("inside a token") << QStringList{"ir"} << ", there was a little g" << true;
        QTest::newRow("prefix seen, never whole") << QStringList{"Lily!"} << QString() << false;
    }
    void stop_strings()
    {
        QFETCH(QStringList, stops);
        QFETCH(QString, text);
        QFETCH(bool, stopped);
        Session s(*m_model, options());
        GenerateRequest r = greedy(encode("Once upon a time"), 60);
        r.stop_at_eos = true;
        for (const QString &stop : stops)
            r.stop.push_back(stop.toStdString());
        std::string streamed;
        int calls = 0;
        const GenerateResult res = generate(s, r, [&](int32_t, std::string_view piece) {
            ++calls;
            streamed += piece;
            // Never a byte of a stop string that has been completed.
            for (const std::string &stop : r.stop)
                if (streamed.find(stop) != std::string::npos)
                    return false;
            return true;
        });
        if (stopped) {
            QCOMPARE(QString::fromStdString(res.text), text);
            QCOMPARE(res.stop, StopReason::StopString);
        } else {
            // Held back while it might have been a stop string, then released: the plain text.
            Session plain(*m_model, options());
            GenerateRequest p = r;
            p.stop.clear();
            const GenerateResult want = generate(plain, p);
            QCOMPARE(res.text, want.text);
            QCOMPARE(res.tokens, want.tokens);
            QCOMPARE(res.stop, want.stop);
        }
        QCOMPARE(streamed, res.text);
        QVERIFY(calls >= int(res.tokens.size()));
        if (stopped) {
            // The token that completed the stop string is counted; the text stops before it.
            const std::string all = m_model->tokenizer().decode(res.tokens);
            QVERIFY(all.size() > res.text.size());
        }
    }

    // Batched sequences use the same decoder: the same stop strings, the same text.
    void stop_strings_in_a_batch()
    {
        std::vector<GenerateRequest> reqs{greedy(encode("Once upon a time"), 60), greedy(encode("The cat"), 30)};
        reqs[0].stop = {"girl na"};
        std::vector<std::string> streamed(2);
        const auto res = generate_batch(*m_model, options(), reqs, [&](size_t seq, int32_t, std::string_view t) {
            streamed[seq] += t;
            return true;
        });
        QCOMPARE(res[0].text, std::string(", there was a little "));
        QCOMPARE(res[0].stop, StopReason::StopString);
        QCOMPARE(streamed[0], res[0].text);
        QCOMPARE(streamed[1], res[1].text);
        Session s(*m_model, options());
        QCOMPARE(res[1].tokens, generate(s, reqs[1]).tokens);
    }

    // The request's set of ids that end generation; by default the tokenizer's EOS and BOS
    // (with stop_at_eos), an explicit set replaces them.
    void end_token_sets()
    {
        Session s(*m_model, options());
        const GenerateResult plain = generate(s, greedy(encode("Once upon a time"), 80));
        // The first generated id that did not occur before it.
        size_t at = 3;
        while (std::find(plain.tokens.begin(), plain.tokens.begin() + std::ptrdiff_t(at), plain.tokens[at]) !=
               plain.tokens.begin() + std::ptrdiff_t(at))
            ++at;
        GenerateRequest r = greedy(encode("Once upon a time"), 80);
        r.end_tokens = std::vector<int32_t>{plain.tokens[at]};
        const GenerateResult cut = generate(s, r);
        QCOMPARE(cut.stop, StopReason::EndOfSequence);
        QCOMPARE(cut.tokens, std::vector<int32_t>(plain.tokens.begin(), plain.tokens.begin() + std::ptrdiff_t(at)));

        // The default set (EOS and BOS) ends the story at its BOS; an empty set runs on as
        // stop_at_eos false does.
        const int n = k_story_tokens + 20;
        GenerateRequest eos = greedy(encode("Once upon a time"), n);
        eos.stop_at_eos = true;
        const GenerateResult story = generate(s, eos);
        QCOMPARE(story.stop, StopReason::EndOfSequence);
        QCOMPARE(int(story.tokens.size()), k_story_tokens);
        eos.end_tokens = std::vector<int32_t>{m_model->tokenizer().eos_id(), m_model->tokenizer().bos_id()};
        QCOMPARE(generate(s, eos).tokens, story.tokens);
        eos.end_tokens = std::vector<int32_t>{};
        const GenerateResult on = generate(s, eos);
        QCOMPARE(on.tokens, generate(s, greedy(encode("Once upon a time"), n)).tokens);
        QCOMPARE(int(on.tokens.size()), n);
        QCOMPARE(on.stop, StopReason::MaxTokens);
    }

    // A request cancelled by its id stops at the next step; other ids are not affected, and
    // cancelling an id that is not open does nothing.
    void cancellation_by_id()
    {
        CancelRegistry cancels;
        Session s(*m_model, options());
        GenerateRequest r = greedy(encode("Once upon a time"), 40);
        r.id = 7;
        r.cancelled = cancels.check();
        cancels.open(7);
        cancels.open(8);
        QVERIFY(!cancels.cancel(9));
        int seen = 0;
        bool marked = false;
        const GenerateResult res = generate(s, r, [&](int32_t, std::string_view) {
            if (++seen == 5)
                marked = cancels.cancel(8) && cancels.cancel(7);
            return true;
        });
        QVERIFY(marked);
        QCOMPARE(res.stop, StopReason::Cancelled);
        QCOMPARE(res.tokens.size(), size_t(5));
        QVERIFY(cancels.cancelled(8));
        cancels.close(7);
        QVERIFY(!cancels.cancelled(7));
        QVERIFY(!cancels.cancel(7));

        // In a batch: only the sequence with the cancelled id stops.
        CancelRegistry batch_cancels;
        std::vector<GenerateRequest> reqs{greedy(encode("Once upon a time"), 30), greedy(encode("The cat"), 30),
                                          greedy(encode("Sam"), 30)};
        for (size_t i = 0; i < reqs.size(); ++i) {
            reqs[i].id = 100 + i;
            reqs[i].cancelled = batch_cancels.check();
            batch_cancels.open(reqs[i].id);
        }
        std::vector<int> count(3);
        const auto out = generate_batch(*m_model, options(), reqs, [&](size_t seq, int32_t id, std::string_view) {
            if (id >= 0 && ++count[seq] == 3 && seq == 1)
                batch_cancels.cancel(101);
            return true;
        });
        QCOMPARE(out[1].stop, StopReason::Cancelled);
        QCOMPARE(out[1].tokens.size(), size_t(3));
        for (size_t i : {size_t(0), size_t(2)}) {
            QCOMPARE(out[i].stop, StopReason::MaxTokens);
            Session single(*m_model, options());
            QCOMPARE(out[i].tokens, generate(single, reqs[i]).tokens);
        }
    }

    // A chat keeps its reply in the context; continuing it with no new prompt tokens goes on
    // exactly as one longer generation; before_step runs before every forward pass.
    void keep_reply_and_continue()
    {
        Session whole(*m_model, options());
        const GenerateResult want = generate(whole, greedy(encode("Once upon a time"), 30));

        Session s(*m_model, options());
        GenerateRequest r = greedy(encode("Once upon a time"), 12);
        r.keep_reply_in_context = true;
        int passes = 0;
        r.before_step = [&] { ++passes; };
        const GenerateResult a = generate(s, r);
        QCOMPARE(a.tokens.size(), size_t(12));
        QCOMPARE(passes, 1 + 12); // the prompt, then every token, the last one too
        QCOMPARE(s.n_past(), int(r.prompt.size()) + 12);

        GenerateRequest c = greedy({}, 18);
        c.continue_context = true;
        const GenerateResult b = generate(s, c);
        QCOMPARE(b.n_prompt, int(r.prompt.size()) + 12);
        QCOMPARE(b.n_cached, b.n_prompt - 1);
        std::vector<int32_t> joined = a.tokens;
        joined.insert(joined.end(), b.tokens.begin(), b.tokens.end());
        QCOMPARE(joined, want.tokens);
        QCOMPARE(a.text + b.text, want.text);

        // The caller's logits of the last context token: nothing is evaluated first.
        Session held(*m_model, options());
        const std::span<const float> l = held.eval(encode("Once upon a time"));
        GenerateRequest h = greedy({}, 30);
        h.continue_context = true;
        h.context_logits.assign(l.begin(), l.end());
        int evals = 0;
        held.set_metrics_callback([&](const StepMetrics &) { ++evals; });
        const GenerateResult from_held = generate(held, h);
        QCOMPARE(from_held.tokens, want.tokens);
        QCOMPARE(from_held.n_cached, from_held.n_prompt);
        QCOMPARE(evals, 29); // one step per token but the last
        h.context_logits.pop_back();
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, generate(held, h));

        // An empty prompt without continue_context, or nothing to continue, is an error.
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, generate(s, greedy({}, 4)));
        Session empty(*m_model, options());
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, generate(empty, c));
        // A batch has no context.
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, generate_batch(*m_model, options(), {r}));
    }

    // With the reply kept, a full context stops before sampling a token it could not hold.
    void keep_reply_stops_at_a_full_context()
    {
        SessionOptions o = options();
        o.n_ctx = 20;
        Session s(*m_model, o);
        GenerateRequest r = greedy(encode("Once upon a time"), 100);
        r.keep_reply_in_context = true;
        const GenerateResult res = generate(s, r);
        QCOMPARE(res.stop, StopReason::ContextFull);
        QCOMPARE(s.n_past(), 20);
        QCOMPARE(int(r.prompt.size() + res.tokens.size()), 20);
    }

    // One definition of each figure.
    void statistics()
    {
        GenerateResult r;
        r.n_prompt = 100;
        r.n_cached = 60;
        r.prefill_seconds = 2;
        r.tokens = {1, 2, 3, 4, 5};
        r.decode_seconds = 2;
        QCOMPARE(r.prefill_tokens_per_second(), 20.0); // the 40 tokens evaluated
        QCOMPARE(r.decode_tokens_per_second(), 2.0);   // 4 steps: the first token came from the prefill
        r.tokens.clear();
        QCOMPARE(r.decode_tokens_per_second(), 0.0);

        Session s(*m_model, options());
        const GenerateResult g = generate(s, greedy(encode("Once upon a time"), 10));
        QCOMPARE(g.n_prompt, int(encode("Once upon a time").size()));
        QCOMPARE(g.n_cached, 0);
        QVERIFY(g.prefill_seconds > 0);
        QVERIFY(g.decode_seconds > 0);
    }
};

QTEST_GUILESS_MAIN(TestGenerator)
#include "tst_generator.moc"
