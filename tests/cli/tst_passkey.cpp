// longscope-cli passkey as a user runs it: the grid as CSV (its columns, one row per cell in
// lengths-major order, the numbers consistent with each other and with the engine's grid on
// the same options), the Markdown table, the long-context flags, and one-line errors for bad
// input.
#include "cli_runner.h"

#include "longscope/model.h"
#include "longscope/needle.h"

#include <QtTest>

#include <cmath>

using namespace longscope;
using longscope::test::run_cli;

namespace {

const QString k_book = QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt");

QList<QByteArrayList> csvRows(const QByteArray &out)
{
    QList<QByteArrayList> rows;
    for (const QByteArray &line : out.trimmed().split('\n'))
        rows << line.split(',');
    return rows;
}

} // namespace

class TestPasskey : public QObject {
    Q_OBJECT

private slots:
    void csvGridMatchesTheEngine();
    void bookAndLongContextFlags();
    void markdownTableMarksTheTrainedContext();
    void badInputGetsOneLine_data();
    void badInputGetsOneLine();
};

void TestPasskey::csvGridMatchesTheEngine()
{
    const auto r = run_cli({"passkey", "--lengths", "200,600", "--depths", "0,0.5,1", "--threads", "2", "--csv"});
    QVERIFY2(r.code == 0, r.err.constData());
    const QList<QByteArrayList> rows = csvRows(r.out);
    QCOMPARE(rows.size(), 7);
    QCOMPARE(rows[0].join(','), QByteArray("task,length,depth,actual_depth,trials,answer_tokens,log_prob,probability,"
                                           "mean_token_log_prob,retrieved,beyond_trained"));

    // The same grid through the engine (same defaults: seed 1, one trial).
    const auto model = Model::load(LONGSCOPE_BUNDLED_MODEL);
    NeedleOptions o;
    o.lengths = {200, 600};
    o.depths = {0, 0.5, 1};
    o.n_threads = 2;
    const NeedleResult grid = needle_grid(*model, o);
    for (int i = 1; i < rows.size(); ++i) {
        const QByteArrayList &c = rows[i];
        QCOMPARE(c.size(), 11);
        const NeedleCell &e = grid.cells[size_t(i - 1)];
        QCOMPARE(c[0], QByteArray("passkey"));
        QCOMPARE(c[1].toInt(), e.length);
        QCOMPARE(c[2].toDouble(), e.depth);
        QCOMPARE(c[4].toInt(), 1);
        const double logProb = c[6].toDouble();
        const double probability = c[7].toDouble();
        QVERIFY(probability >= 0 && probability <= 1);
        // The columns agree: probability = exp(log_prob), mean = log_prob / answer tokens.
        QVERIFY(std::abs(probability - std::exp(logProb)) <= 1e-5 * std::exp(logProb) + 1e-300);
        QVERIFY(std::abs(c[8].toDouble() - logProb / c[5].toDouble()) < 1e-5);
        QVERIFY(std::abs(logProb - e.log_prob) < 1e-5);
        QCOMPARE(c[9].toInt(), e.retrieved);
        QCOMPARE(c[10].toInt(), e.length > 512 ? 1 : 0);
    }
}

void TestPasskey::bookAndLongContextFlags()
{
    const QStringList base{"passkey", "--lengths", "700", "--depths", "0.5", "--threads", "2", "--book", k_book, "--csv"};
    const auto plain = run_cli(base);
    QVERIFY2(plain.code == 0, plain.err.constData());
    QCOMPARE(csvRows(plain.out).size(), 2);
    QCOMPARE(csvRows(plain.out)[1][0], QByteArray("book"));
    // NTK alpha 4 past the trained context changes what the model makes of the prompt.
    const auto alpha = run_cli(base + QStringList{"--alpha", "4"});
    QVERIFY2(alpha.code == 0, alpha.err.constData());
    QVERIFY(csvRows(alpha.out)[1][6] != csvRows(plain.out)[1][6]);
    // Keys cached before RoPE with alpha 1 compute the same attention: the same numbers up to
    // rounding.
    const auto before = run_cli(base + QStringList{"--kv-before-rope"});
    QVERIFY2(before.code == 0, before.err.constData());
    QVERIFY(std::abs(csvRows(before.out)[1][6].toDouble() - csvRows(plain.out)[1][6].toDouble()) < 1e-3);
}

void TestPasskey::markdownTableMarksTheTrainedContext()
{
    const auto r = run_cli({"passkey", "--lengths", "300,600", "--depths", "0,1", "--threads", "2"});
    QVERIFY2(r.code == 0, r.err.constData());
    QVERIFY(r.out.contains("| length | depth 0 | depth 1 |"));
    QVERIFY(r.out.contains("| 300 |"));
    QVERIFY(r.out.contains("| 600 * |"));
    QVERIFY(r.out.contains("(0/1)") || r.out.contains("(1/1)"));
}

void TestPasskey::badInputGetsOneLine_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QByteArray>("message");
    QTest::newRow("depth above 1") << QStringList{"--depths", "0,1.5"}
                                   << QByteArray("error: the needle depth 1.5 is outside 0..1");
    QTest::newRow("negative depth") << QStringList{"--depths", "-0.1"}
                                    << QByteArray("error: the needle depth -0.1 is outside 0..1");
    QTest::newRow("depth not a number") << QStringList{"--depths", "half"}
                                        << QByteArray("--depths takes numbers separated by commas, got 'half'");
    QTest::newRow("length too short") << QStringList{"--lengths", "100"}
                                      << QByteArray("error: the length 100 is too short: the needle, question and answer take");
    QTest::newRow("length not whole") << QStringList{"--lengths", "300.5"}
                                      << QByteArray("--lengths takes whole numbers of tokens, got '300.5'");
    QTest::newRow("too many cells") << QStringList{"--lengths", QStringLiteral("300,").repeated(80).chopped(1),
                                                   "--depths", QStringLiteral("0.5,").repeated(60).chopped(1)}
                                    << QByteArray("error: the needle grid has 4800 cells, more than 4096");
    QTest::newRow("book too short") << QStringList{"--lengths", "300", "--book", QStringLiteral(LONGSCOPE_TEST_DATA "/README.md"),
                                                   "--lengths", "100000"}
                                    << QByteArray("error: the book has ");
    QTest::newRow("missing book") << QStringList{"--book", "/nonexistent/book.txt"}
                                  << QByteArray("error: /nonexistent/book.txt: cannot open");
    QTest::newRow("needle without answer") << QStringList{"--needle", "Sam has a cat."}
                                           << QByteArray("--needle, --question and --answer go together");
    QTest::newRow("csv and json") << QStringList{"--csv", "--json"} << QByteArray("--csv and --json are exclusive");
}

void TestPasskey::badInputGetsOneLine()
{
    QFETCH(QStringList, args);
    QFETCH(QByteArray, message);
    const auto r = run_cli(QStringList{"passkey"} + args);
    QVERIFY(r.code == 1 || r.code == 2);
    QVERIFY2(r.err.contains(message), r.err.constData());
    QCOMPARE(r.err.trimmed().count('\n'), 0);
    QVERIFY(r.out.isEmpty());
}

QTEST_GUILESS_MAIN(TestPasskey)
#include "tst_passkey.moc"
