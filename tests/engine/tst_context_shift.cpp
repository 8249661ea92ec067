// The shift overflow policy (attention sinks, StreamingLLM): the KV stores move rows as a shift
// says, in every layout; after shifts the logits equal those of the kept tokens evaluated from
// scratch at their new positions (a one-layer model, whose cached rows depend only on the
// tokens and their positions), with keys cached before and after RoPE; generation goes on
// past the context and keeps the sinks; bad values are clear errors.
#include "support/comparisons.h"
#include "support/model_files.h"

#include "kv/kv_store.h"
#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/perplexity.h"

#include <QTemporaryDir>

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

using namespace longscope;

using longscope::test::max_diff;

namespace {

const std::string gguf_path = LONGSCOPE_BUNDLED_MODEL;

// As the keys-before-RoPE suite: the paths sum in different orders (a decode step against a
// prompt chunk, a rotation by the delta against one by the position), float32 noise is
// ~1e-6 on this model.
constexpr double k_logit_tol = 1e-4;

std::vector<int32_t> book_tokens(const Model &m, int n_tokens)
{
    std::ifstream in(LONGSCOPE_TEST_DATA "/books/pg98-a-tale-of-two-cities.txt", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto ids = m.tokenizer().encode(ss.str().substr(20000, size_t(n_tokens) * 8), true);
    ids.resize(size_t(n_tokens));
    return ids;
}

// The policy stated independently, one token at a time: a token arriving at a full context
// first drops half of the tokens after the `sinks` first ones.
std::vector<int32_t> expected_context(const std::vector<int32_t> &stream, int ctx, int sinks)
{
    std::vector<int32_t> c;
    for (int32_t id : stream) {
        if (int(c.size()) == ctx) {
            const int drop = std::max(1, (ctx - sinks) / 2);
            c.erase(c.begin() + sinks, c.begin() + sinks + drop);
        }
        c.push_back(id);
    }
    return c;
}

// The last token's logits of `tokens` evaluated afresh (positions 0..n-1, no cache kept).
std::vector<float> fresh_logits(const Model &m, const std::vector<int32_t> &tokens)
{
    SessionOptions o;
    o.n_ctx = int(tokens.size()) + 8;
    o.n_threads = 2;
    o.settings.kv_mode = KvMode::None;
    Session s(m, o);
    auto l = s.eval(tokens);
    return {l.begin(), l.end()};
}

Settings shift_settings(KvMode mode, bool before_rope, bool mem_efficient)
{
    Settings s;
    s.kv_mode = mode;
    s.rope.store_kv_before_rope = before_rope;
    s.attention.memory_efficient = mem_efficient;
    s.overflow = OverflowPolicy::Shift;
    return s;
}

} // namespace

class TestContextShift : public QObject {
    Q_OBJECT
    std::unique_ptr<Model> m_model;
    std::unique_ptr<Model> m_one_layer;
    QTemporaryDir m_tmp;

private slots:
    void initTestCase()
    {
        m_model = Model::load(gguf_path);
        const std::string one = m_tmp.filePath("one-layer.gguf").toStdString();
        QVERIFY(test::write_first_layer_gguf(gguf_path, one));
        m_one_layer = Model::load(one);
        QCOMPARE(m_one_layer->hparams().n_layer, 1);
    }

    void policy_names()
    {
        QVERIFY(parse_overflow("shift") == OverflowPolicy::Shift);
        QCOMPARE(std::string(to_string(OverflowPolicy::Shift)), std::string("shift"));
        QCOMPARE(Settings{}.sink_tokens, 4);
    }

    void stores_move_rows_data()
    {
        QTest::addColumn<KvMode>("mode");
        QTest::newRow("concat") << KvMode::Concat;
        QTest::newRow("static") << KvMode::Static;
        QTest::newRow("vmm") << KvMode::Vmm;
    }
    void stores_move_rows()
    {
        // Every row tagged with its layer, half and position: after shift(n, keep, drop) row p
        // holds what position p (p < keep) or p + drop held, in every layer, K and V alike.
        QFETCH(KvMode, mode);
        const int layers = 2, embd = 8, n = 50, keep = 4, drop = 13;
        auto store = make_kv_store(mode, layers, 64, embd);
        store->ensure(n);
        auto tag = [&](int l, int half, int p, int j) { return float(l * 100000 + half * 10000 + p * 100 + j); };
        for (int l = 0; l < layers; ++l)
            for (int p = 0; p < n; ++p)
                for (int j = 0; j < embd; ++j) {
                    store->keys(l)[p * embd + j] = tag(l, 0, p, j);
                    store->values(l)[p * embd + j] = tag(l, 1, p, j);
                }
        store->shift(n, keep, drop);
        for (int l = 0; l < layers; ++l)
            for (int p = 0; p < n - drop; ++p)
                for (int j = 0; j < embd; ++j) {
                    const int from = p < keep ? p : p + drop;
                    QCOMPARE(store->keys(l)[p * embd + j], tag(l, 0, from, j));
                    QCOMPARE(store->values(l)[p * embd + j], tag(l, 1, from, j));
                }
        // Ranges outside what the store holds are refused, the store left as it is.
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, store->shift(n, 40, 20));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, store->shift(store->capacity() + 1, 4, 1));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, store->shift(n, -1, 1));
        QCOMPARE(store->keys(0)[keep * embd], tag(0, 0, keep + drop, 0));
    }

    void shift_equals_fresh_evaluation_data()
    {
        QTest::addColumn<KvMode>("mode");
        QTest::addColumn<bool>("before_rope");
        QTest::addColumn<bool>("mem_efficient");
        for (KvMode mode : {KvMode::Concat, KvMode::Static, KvMode::Vmm})
            for (bool br : {false, true})
                for (bool me : {false, true})
                    QTest::addRow("kv=%s%s%s", std::string(to_string(mode)).c_str(), br ? " before-rope" : "",
                                  me ? " mem-efficient" : "")
                        << mode << br << me;
    }
    void shift_equals_fresh_evaluation()
    {
        // A 64-token context filled by a prompt, then 80 tokens one at a time: shifts at
        // steps 1, 31 and 61, each dropping 30 tokens after the 4 sinks. At every step the
        // logits equal those of the kept tokens evaluated from scratch.
        QFETCH(KvMode, mode);
        QFETCH(bool, before_rope);
        QFETCH(bool, mem_efficient);
        const int ctx = 64, n_prompt = 64, n_steps = 80;
        const auto stream = book_tokens(*m_one_layer, n_prompt + n_steps);
        SessionOptions o;
        o.n_ctx = ctx;
        o.n_threads = 2;
        o.settings = shift_settings(mode, before_rope, mem_efficient);
        Session s(*m_one_layer, o);
        s.eval(std::span<const int32_t>(stream.data(), size_t(n_prompt)));
        double worst = 0;
        for (int i = n_prompt; i < n_prompt + n_steps; ++i) {
            auto l = s.eval(std::span<const int32_t>(&stream[size_t(i)], 1));
            QVERIFY(s.n_past() <= ctx);
            const std::vector<float> got(l.begin(), l.end());
            const std::vector<int32_t> kept = s.history();
            worst = std::max(worst, max_diff(fresh_logits(*m_one_layer, kept), got));
        }
        qInfo("largest logit difference to the fresh evaluations: %.3g", worst);
        QVERIFY2(worst <= k_logit_tol, qPrintable(QString("max logit difference %1").arg(worst)));
        QCOMPARE(s.shifts(), int64_t(3));
        const std::vector<int32_t> upto(stream.begin(), stream.end());
        QCOMPARE(s.history(), expected_context(upto, ctx, 4));
        QCOMPARE(s.exact_prefix(), 4);
        // The comparison can tell: the whole stream's logits (nothing dropped) differ.
        SessionOptions big;
        big.n_ctx = 256;
        big.n_threads = 2;
        Session all(*m_one_layer, big);
        auto full = all.eval(stream);
        QVERIFY(max_diff(std::vector<float>(full.begin(), full.end()), fresh_logits(*m_one_layer, s.history())) > 1e-2);
    }

    void long_input_streams_in_pieces_data()
    {
        QTest::addColumn<bool>("before_rope");
        QTest::newRow("after-rope") << false;
        QTest::newRow("before-rope") << true;
    }
    void long_input_streams_in_pieces()
    {
        // One eval() of 150 tokens into a 48-token context: evaluated in pieces with shifts
        // between; every token gets its logits, the last equal to a fresh evaluation of what
        // is kept, and each row to a fresh evaluation of the context it was evaluated in.
        QFETCH(bool, before_rope);
        const int ctx = 48, n = 150;
        const auto stream = book_tokens(*m_one_layer, n);
        SessionOptions o;
        o.n_ctx = ctx;
        o.n_threads = 2;
        o.settings = shift_settings(KvMode::Static, before_rope, false);
        Session s(*m_one_layer, o);
        auto l = s.eval(stream, true);
        const size_t v = size_t(m_one_layer->hparams().n_vocab);
        QCOMPARE(l.size(), size_t(n) * v);
        QCOMPARE(s.history(), expected_context(stream, ctx, 4));
        const std::vector<float> last(l.end() - std::ptrdiff_t(v), l.end());
        QVERIFY(max_diff(last, fresh_logits(*m_one_layer, s.history())) <= k_logit_tol);
        // Row 120: its context was the sinks and the tokens since the last shift before it.
        const std::vector<int32_t> ctx120 = expected_context(std::vector<int32_t>(stream.begin(), stream.begin() + 121),
                                                             ctx, 4);
        const std::vector<float> row120(l.begin() + std::ptrdiff_t(120 * v), l.begin() + std::ptrdiff_t(121 * v));
        QVERIFY(max_diff(row120, fresh_logits(*m_one_layer, ctx120)) <= k_logit_tol);
    }

    void generation_goes_past_the_context_keeping_the_sinks_data()
    {
        QTest::addColumn<KvMode>("mode");
        QTest::addColumn<bool>("before_rope");
        QTest::newRow("none") << KvMode::None << false;
        QTest::newRow("static after-rope") << KvMode::Static << false;
        QTest::newRow("vmm before-rope") << KvMode::Vmm << true;
    }
    void generation_goes_past_the_context_keeping_the_sinks()
    {
        QFETCH(KvMode, mode);
        QFETCH(bool, before_rope);
        const int ctx = 64;
        const auto prompt = book_tokens(*m_model, 20);
        SessionOptions o;
        o.n_ctx = ctx;
        o.n_threads = 2;
        o.settings = shift_settings(mode, before_rope, false);
        o.settings.sink_tokens = 6;
        Session s(*m_model, o);
        GenerateRequest r;
        r.prompt = prompt;
        r.max_new_tokens = 4 * ctx;
        r.stop_at_eos = false;
        r.end_tokens = std::vector<int32_t>{};
        r.keep_reply_in_context = true;
        const GenerateResult g = generate(s, r);
        QCOMPARE(g.stop, StopReason::MaxTokens);
        QCOMPARE(int(g.tokens.size()), 4 * ctx);
        QVERIFY(s.n_past() <= ctx);
        QVERIFY(s.shifts() >= 4);
        QCOMPARE(std::vector<int32_t>(s.history().begin(), s.history().begin() + 6),
                 std::vector<int32_t>(prompt.begin(), prompt.begin() + 6));
        // The most recent tokens are the reply's last ones.
        QCOMPARE(std::vector<int32_t>(s.history().end() - 10, s.history().end()),
                 std::vector<int32_t>(g.tokens.end() - 10, g.tokens.end()));

        // A prompt longer than the context goes in too, and the next request reuses no row
        // computed with dropped tokens in view.
        r.prompt = book_tokens(*m_model, 3 * ctx);
        r.max_new_tokens = 8;
        const GenerateResult g2 = generate(s, r);
        QCOMPARE(int(g2.tokens.size()), 8);
        QVERIFY(g2.n_cached <= 6);

        // The error policy stops instead.
        Settings err = s.settings();
        err.overflow = OverflowPolicy::Error;
        s.set_settings(err);
        s.reset();
        r.prompt = prompt;
        r.max_new_tokens = 4 * ctx;
        QCOMPARE(generate(s, r).stop, StopReason::ContextFull);
        r.prompt = book_tokens(*m_model, 3 * ctx);
        QVERIFY_THROWS_EXCEPTION(ContextOverflow, generate(s, r));
    }

    void perplexity_streams_past_the_context()
    {
        // A text 4x the context: under shift every token is scored, each with the NLL that a
        // fresh evaluation of the context it had gives (the one-layer model); streamed under
        // the error policy, scoring stops at the limit and says why.
        const int ctx = 48;
        const std::vector<int32_t> seq = book_tokens(*m_one_layer, 4 * ctx); // BOS first
        QCOMPARE(seq.front(), int32_t(m_one_layer->tokenizer().bos_id()));
        const std::vector<int32_t> text(seq.begin() + 1, seq.end());
        PerplexityOptions o;
        o.ctx = ctx;
        o.batch = 16;
        o.bucket = 8;
        o.n_threads = 2;
        o.settings = shift_settings(KvMode::Static, false, false);
        const PerplexityResult r = perplexity(*m_one_layer, text, o);
        QCOMPARE(r.n_scored, int64_t(text.size()));
        QVERIFY(r.stopped.empty());
        for (size_t i = 0; i < text.size(); i += 11) {
            // seq[i + 1] is predicted from what the context holds after seq[i].
            const auto context = expected_context(std::vector<int32_t>(seq.begin(), seq.begin() + std::ptrdiff_t(i) + 1), ctx, 4);
            const std::vector<float> l = fresh_logits(*m_one_layer, context);
            double mx = -INFINITY, sum = 0;
            for (float x : l)
                mx = std::max(mx, double(x));
            for (float x : l)
                sum += std::exp(double(x) - mx);
            const double nll = std::log(sum) + mx - double(l[size_t(seq[i + 1])]);
            QCOMPARE(r.positions[i], int(context.size()));
            QVERIFY2(std::fabs(nll - double(r.nll[i])) < 1e-3, qPrintable(QString("token %1").arg(i)));
        }
        QCOMPARE(*std::max_element(r.positions.begin(), r.positions.end()), ctx);

        o.settings.overflow = OverflowPolicy::Error;
        o.stream = true;
        const PerplexityResult stopped = perplexity(*m_one_layer, text, o);
        QCOMPARE(stopped.n_scored, int64_t(ctx));
        QVERIFY2(QString::fromStdString(stopped.stopped).contains("context limit of 48"), stopped.stopped.c_str());
        // The first ctx tokens scored alike.
        for (int i = 0; i < ctx; ++i)
            QCOMPARE(stopped.nll[size_t(i)], r.nll[size_t(i)]);
    }

    void bad_values_are_clear_errors()
    {
        auto message = [&](const Settings &st, int ctx) -> QString {
            SessionOptions o;
            o.n_ctx = ctx;
            o.settings = st;
            try {
                Session s(*m_model, o);
            } catch (const InvalidArgument &e) {
                return QString::fromStdString(e.what());
            }
            return {};
        };
        Settings st = shift_settings(KvMode::Static, false, false);
        st.sink_tokens = -1;
        QVERIFY(message(st, 64).contains("sink tokens must not be negative"));
        st.sink_tokens = 64;
        QVERIFY(message(st, 64).contains("64 sink tokens leave no room"));
        st.sink_tokens = 63;
        QVERIFY(message(st, 64).isEmpty());
        st.sink_tokens = 4;
        st.shift_discard = -2;
        QVERIFY(message(st, 64).contains("dropped per context shift"));
        // Sinks filling the context are fine under another policy, which never shifts.
        st.shift_discard = 0;
        st.sink_tokens = 100;
        st.overflow = OverflowPolicy::Error;
        QVERIFY(message(st, 64).isEmpty());

        // Batched generation has no shift: refused, not left to overflow.
        SessionOptions batch;
        batch.n_ctx = 64;
        batch.settings = shift_settings(KvMode::Static, false, false);
        GenerateRequest one;
        one.prompt = book_tokens(*m_model, 8);
        try {
            generate_batch(*m_model, batch, {one});
            QFAIL("a batch under the shift policy was not refused");
        } catch (const InvalidArgument &e) {
            QVERIFY2(QString::fromStdString(e.what()).contains("does not shift"), e.what());
        }

        // A live change to bad values is refused and the old settings stay.
        SessionOptions o;
        o.n_ctx = 64;
        o.settings = shift_settings(KvMode::Static, false, false);
        Session s(*m_model, o);
        Settings bad = s.settings();
        bad.sink_tokens = 64;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, s.set_settings(bad));
        QCOMPARE(s.settings().sink_tokens, 4);
    }

    void sinks_and_discard_are_honoured()
    {
        // 8 sinks and 10 tokens dropped per shift, checked on the kept tokens.
        const int ctx = 40;
        const auto stream = book_tokens(*m_one_layer, 100);
        SessionOptions o;
        o.n_ctx = ctx;
        o.n_threads = 2;
        o.settings = shift_settings(KvMode::Static, false, false);
        o.settings.sink_tokens = 8;
        o.settings.shift_discard = 10;
        Session s(*m_one_layer, o);
        for (int32_t id : stream)
            s.eval(std::span<const int32_t>(&id, 1));
        // 100 tokens: full at 40, then one shift of 10 every 10 tokens: 6 shifts, 40 kept.
        QCOMPARE(s.shifts(), int64_t(6));
        std::vector<int32_t> want(stream.begin(), stream.begin() + 8);
        want.insert(want.end(), stream.end() - 32, stream.end());
        QCOMPARE(s.history(), want);
        auto l = s.eval(std::span<const int32_t>(&stream[50], 1));
        QVERIFY(max_diff(std::vector<float>(l.begin(), l.end()), fresh_logits(*m_one_layer, s.history())) <= k_logit_tol);
    }
};

QTEST_GUILESS_MAIN(TestContextShift)
#include "tst_context_shift.moc"
