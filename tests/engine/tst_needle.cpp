// The needle grid (longscope/needle.h) on the bundled stories260K, checked by paths that do
// not go through it: each cell's log-probability against longscope::perplexity() scoring the
// same tokens, greedy retrieval against generate() decoding greedily after the question,
// where the needle lands against the depth asked, and the one-line messages for bad input.
#include "core/system_memory.h"
#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/needle.h"
#include "longscope/perplexity.h"
#include "longscope/tokenizer.h"

#include <QtTest>

#include <cmath>
#include <memory>

using namespace longscope;

namespace {

const std::string k_model = LONGSCOPE_BUNDLED_MODEL;
const std::string k_book = LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt";

std::string readAll(const std::string &path)
{
    QFile f(QString::fromStdString(path));
    if (!f.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", path.c_str());
    return f.readAll().toStdString();
}

// The message InvalidArgument carries, or "" when nothing was thrown.
std::string rejection(const Model &model, const NeedleOptions &o)
{
    try {
        validate_needle_options(model, o);
    } catch (const InvalidArgument &e) {
        return e.what();
    }
    return {};
}

// log p(answer | prompt) from perplexity(): the sum of the NLLs of the answer's tokens when
// prompt + answer (BOS left to perplexity) is scored in one window.
double perplexityLogProb(const Model &model, const NeedlePrompt &p)
{
    std::vector<int32_t> text(p.prompt.begin() + 1, p.prompt.end());
    text.insert(text.end(), p.answer.begin(), p.answer.end());
    PerplexityOptions o;
    o.ctx = int(text.size()) + 1;
    o.n_threads = 2;
    const PerplexityResult r = perplexity(model, text, o);
    double lp = 0;
    for (size_t i = r.nll.size() - p.answer.size(); i < r.nll.size(); ++i)
        lp -= r.nll[i];
    return lp;
}

} // namespace

class TestNeedle : public QObject {
    Q_OBJECT

    std::unique_ptr<Model> m_model;

private slots:
    void initTestCase() { m_model = Model::load(k_model); }

    void cellsMatchThePerplexityPath_data();
    void cellsMatchThePerplexityPath();
    void greedyRetrievalMatchesTheGenerator();
    void theNeedleLandsAtItsDepth_data();
    void theNeedleLandsAtItsDepth();
    void trialsHideDifferentNeedles();
    void badInputIsNamed();
    void cancelKeepsFinishedTrials();
};

void TestNeedle::cellsMatchThePerplexityPath_data()
{
    QTest::addColumn<int>("task");
    QTest::newRow("passkey") << int(NeedleTask::Passkey);
    QTest::newRow("book") << int(NeedleTask::Book);
}

void TestNeedle::cellsMatchThePerplexityPath()
{
    QFETCH(int, task);
    NeedleOptions o;
    o.task = NeedleTask(task);
    o.lengths = {200, 600}; // within and past the trained context of 512
    o.depths = {0, 0.5, 1};
    o.n_threads = 2;
    o.batch = 97; // steps that do not line up with perplexity's
    if (o.task == NeedleTask::Book)
        o.book = m_model->tokenizer().encode(readAll(k_book), false);
    const NeedleResult r = needle_grid(*m_model, o);
    QCOMPARE(r.cells.size(), size_t(6));
    QCOMPARE(r.n_ctx, 600);
    QCOMPARE(r.n_ctx_train, 512);
    for (size_t i = 0; i < r.cells.size(); ++i) {
        const NeedleCell &c = r.cells[i];
        QCOMPARE(c.length, o.lengths[i / 3]);
        QCOMPARE(c.depth, o.depths[i % 3]);
        QCOMPARE(c.trials, 1);
        const NeedlePrompt p = build_needle_prompt(m_model->tokenizer(), o, c.length, c.depth, 0);
        QCOMPARE(p.prompt.front(), m_model->tokenizer().bos_id());
        QCOMPARE(int(p.prompt.size() + p.answer.size()), c.length);
        QCOMPARE(c.answer_tokens, double(p.answer.size()));
        const double expected = perplexityLogProb(*m_model, p);
        QVERIFY2(std::abs(c.log_prob - expected) < 1e-5 * std::max(1.0, std::abs(expected)),
                 qPrintable(QStringLiteral("cell %1: %2 vs perplexity %3").arg(i).arg(c.log_prob).arg(expected)));
        QVERIFY(c.probability >= 0 && c.probability <= 1);
        QVERIFY(std::abs(c.probability - std::exp(expected)) <= 1e-3 * std::exp(expected) + 1e-300);
        QVERIFY(std::abs(c.mean_token_log_prob - expected / double(p.answer.size())) < 1e-3);
    }
}

void TestNeedle::greedyRetrievalMatchesTheGenerator()
{
    // Two needles of our own: one whose answer is what the model itself continues the
    // question with (found by generate(), so greedy decoding must retrieve it), and one with
    // another answer (it must not).
    const Tokenizer &tok = m_model->tokenizer();
    NeedleOptions o;
    o.lengths = {300};
    o.depths = {0.5};
    o.n_threads = 2;
    o.text = NeedleText{"Tom had a red ball.", "Once upon a time, there was a little girl named", " Lily"};
    const NeedlePrompt p = build_needle_prompt(tok, o, 300, 0.5, 0);

    SessionOptions so;
    so.n_threads = 2;
    so.settings.context_limit = 300;
    Session session(*m_model, so);
    GenerateRequest req;
    req.prompt = p.prompt;
    req.max_new_tokens = 2;
    req.sampling.temperature = 0;
    const GenerateResult greedy = generate(session, req);
    QVERIFY(greedy.tokens.size() >= 1);

    // The model's own continuation as the answer (its tokens' text in the middle of a text,
    // leading space included): retrieved.
    NeedleOptions mine = o;
    mine.text->answer.clear();
    for (int32_t id : greedy.tokens)
        mine.text->answer += tok.token_bytes(id);
    const NeedlePrompt mp = build_needle_prompt(tok, mine, 300, 0.5, 0);
    const NeedleResult yes = needle_grid(*m_model, mine);
    QCOMPARE(yes.cells.front().retrieved, mp.answer == greedy.tokens ? 1 : 0);
    QVERIFY2(mp.answer == greedy.tokens, "the model's own continuation tokenizes back to itself");

    // Another answer: not retrieved, and less likely than the model's own.
    NeedleOptions other = o;
    other.text->answer = " purple elephant";
    const NeedleResult no = needle_grid(*m_model, other);
    QCOMPARE(no.cells.front().retrieved, 0);
    QVERIFY(no.cells.front().log_prob < yes.cells.front().log_prob);
}

void TestNeedle::theNeedleLandsAtItsDepth_data()
{
    QTest::addColumn<int>("task");
    QTest::addColumn<double>("depth");
    for (double d : {0.0, 0.25, 0.5, 0.75, 1.0}) {
        QTest::addRow("passkey %g", d) << int(NeedleTask::Passkey) << d;
        QTest::addRow("book %g", d) << int(NeedleTask::Book) << d;
    }
}

void TestNeedle::theNeedleLandsAtItsDepth()
{
    QFETCH(int, task);
    QFETCH(double, depth);
    const Tokenizer &tok = m_model->tokenizer();
    NeedleOptions o;
    o.task = NeedleTask(task);
    if (o.task == NeedleTask::Book)
        o.book = tok.encode(readAll(k_book), false);
    const int length = 1000;
    const NeedlePrompt p = build_needle_prompt(tok, o, length, depth, 0);
    QCOMPARE(int(p.prompt.size() + p.answer.size()), length);
    // The needle's tokens are where it says, whole.
    const std::vector<int32_t> needle = tok.encode(p.text.needle, false);
    QCOMPARE(p.needle_length, int(needle.size()));
    QVERIFY(std::equal(needle.begin(), needle.end(), p.prompt.begin() + p.needle_begin));
    // Its depth: haystack tokens before it over all of them, within one snap of the target.
    const int hay = p.haystack_end - p.haystack_begin - p.needle_length;
    const int before = p.needle_begin - p.haystack_begin;
    QCOMPARE(p.depth, double(before) / hay);
    QVERIFY2(std::abs(before - depth * hay) <= 64, qPrintable(QStringLiteral("%1 of %2").arg(before).arg(hay)));
    if (depth == 0)
        QCOMPARE(before, 0);
    if (depth == 1)
        QCOMPARE(before, hay);
    // The question ends the prompt and the answer's text follows it.
    const std::string tail = tok.decode(std::vector<int32_t>(p.prompt.begin() + p.haystack_end, p.prompt.end()));
    QVERIFY(tail.find(p.text.question) != std::string::npos || p.text.question.find(tail) != std::string::npos);
    std::vector<int32_t> whole(p.prompt.begin() + p.haystack_end, p.prompt.end());
    whole.insert(whole.end(), p.answer.begin(), p.answer.end());
    QVERIFY(tok.decode(whole).find(p.text.answer.substr(1)) != std::string::npos);
}

void TestNeedle::trialsHideDifferentNeedles()
{
    NeedleOptions o;
    const NeedlePrompt a = build_needle_prompt(m_model->tokenizer(), o, 400, 0.5, 0);
    const NeedlePrompt b = build_needle_prompt(m_model->tokenizer(), o, 400, 0.5, 1);
    const NeedlePrompt a2 = build_needle_prompt(m_model->tokenizer(), o, 800, 0.25, 0);
    QVERIFY(a.text.answer != b.text.answer);
    QCOMPARE(a.text.answer, a2.text.answer); // one trial, one needle in every cell
    o.seed = 2;
    QVERIFY(build_needle_prompt(m_model->tokenizer(), o, 400, 0.5, 0).text.answer != a.text.answer);
}

void TestNeedle::badInputIsNamed()
{
    NeedleOptions o;
    o.lengths = {400};
    o.depths = {0, 1.5};
    QCOMPARE(rejection(*m_model, o), std::string("the needle depth 1.5 is outside 0..1"));
    o.depths = {-0.25};
    QCOMPARE(rejection(*m_model, o), std::string("the needle depth -0.25 is outside 0..1"));
    o.depths = {std::nan("")};
    QVERIFY(rejection(*m_model, o).find("outside 0..1") != std::string::npos);
    o.depths = {};
    QCOMPARE(rejection(*m_model, o), std::string("the needle grid has no depths"));
    o.depths = {0.5};
    o.lengths = {};
    QCOMPARE(rejection(*m_model, o), std::string("the needle grid has no lengths"));

    // A length that cannot hold the needle, question and answer names their size.
    o.lengths = {50, 400};
    const NeedlePrompt p = build_needle_prompt(m_model->tokenizer(), o, 400, 0.5, 0);
    const int fixed = int(p.prompt.size() + p.answer.size()) - (p.haystack_end - p.haystack_begin - p.needle_length);
    QCOMPARE(rejection(*m_model, o), "the length 50 is too short: the needle, question and answer take " +
                                         std::to_string(fixed) + " tokens and the haystack needs at least 1");
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, build_needle_prompt(m_model->tokenizer(), o, 50, 0.5, 0));
    o.lengths = {fixed + 1};
    QCOMPARE(rejection(*m_model, o), std::string());

    // A book shorter than the haystack.
    o.task = NeedleTask::Book;
    o.book = m_model->tokenizer().encode("A short book. It ends here.", false);
    o.lengths = {400};
    QVERIFY2(rejection(*m_model, o).find("the book has " + std::to_string(o.book.size()) + " tokens") == 0,
             rejection(*m_model, o).c_str());
    o.task = NeedleTask::Passkey;

    // Too many cells, trials, a length past the limit.
    o.lengths.assign(65, 400);
    o.depths.assign(64, 0.5);
    QCOMPARE(rejection(*m_model, o), std::string("the needle grid has 4160 cells, more than 4096"));
    o.lengths = {400};
    o.depths = {0.5};
    o.trials = 0;
    QCOMPARE(rejection(*m_model, o), std::string("the trials per cell must be 1..1000, got 0"));
    o.trials = 1;
    o.lengths = {(1 << 24) + 1};
    QCOMPARE(rejection(*m_model, o), std::string("a needle length must be 1..16777216 tokens, got 16777217"));

    // The longest length's KV cache against the memory left: F16 keys and values of every
    // layer, counted here from the model's shape.
    o.lengths = {1 << 24};
    const HParams &hp = m_model->hparams();
    const double need = 4.0 * hp.n_layer * hp.n_embd_kv() * double(1 << 24);
    const uint64_t left = available_memory_bytes();
    const std::string why = rejection(*m_model, o);
    if (left != UINT64_MAX && need > double(left))
        QVERIFY2(why.find("the longest needle length, 16777216 tokens, needs " +
                          std::to_string(int64_t(need / (1024.0 * 1024.0))) + " MiB of KV cache") == 0,
                 why.c_str());
    else
        QCOMPARE(why, std::string());
    // Grids that fit the model's memory but not its limit fail at the session with its own
    // message, never a crash: covered by needle_grid throwing an engine Error.
}

void TestNeedle::cancelKeepsFinishedTrials()
{
    NeedleOptions o;
    o.lengths = {200, 300};
    o.depths = {0, 1};
    o.n_threads = 2;
    o.batch = 64;
    int steps = 0;
    // 200 tokens in steps of 64 are 4 steps: the sixth is in the second cell's prompt.
    o.progress = [&](int64_t, int64_t) { return ++steps < 6; };
    const NeedleResult r = needle_grid(*m_model, o);
    QVERIFY(r.cancelled);
    QCOMPARE(r.cells.size(), size_t(4));
    QCOMPARE(r.cells[0].trials, 1);
    QCOMPARE(r.cells[1].trials, 0);
    QCOMPARE(r.cells[3].trials, 0);
}

QTEST_GUILESS_MAIN(TestNeedle)
#include "tst_needle.moc"
