// The Jinja renderer against Python's jinja2 (scripts/render-template-fixtures.py): every real
// template over every conversation byte-equal, or an error where jinja2 raises; single language
// features; hostile templates ending in an error within a time bound.
#include "template/jinja.h"

#include <QtTest>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

using namespace longscope;
using json = nlohmann::ordered_json;

namespace {
const std::string dir = LONGSCOPE_TEST_DATA "/templates/";

std::string read(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    if (!f)
        throw std::runtime_error("cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

json read_json(const std::string &path) { return json::parse(read(path)); }

// The fixed "now" the fixtures were rendered with: 2024-07-26 12:00:00.
jinja::RenderOptions fixed_now()
{
    jinja::RenderOptions o;
    std::tm tm{};
    tm.tm_year = 124;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    tm.tm_hour = 12;
    tm.tm_wday = 5;
    tm.tm_yday = 207;
    o.now = tm;
    return o;
}

// Renders; returns the output, or "ERROR: ..." for a TemplateError. Any other exception fails.
std::string attempt(const std::string &source, const json &context, const jinja::RenderOptions &o = fixed_now())
{
    try {
        return jinja::render(source, context, o);
    } catch (const jinja::TemplateError &e) {
        return std::string("ERROR: ") + e.what();
    }
}

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
} // namespace

// The bound catches a hang, not slowness: a sanitizer build runs the renderer's million
// loop iterations several times slower (14 s under ASan+UBSan).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double k_hostile_seconds = 120.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr double k_hostile_seconds = 120.0;
#else
constexpr double k_hostile_seconds = 10.0;
#endif
#else
constexpr double k_hostile_seconds = 10.0;
#endif

class TestJinja : public QObject {
    Q_OBJECT

private slots:
    void corpus_matches_jinja2()
    {
        const json conversations = read_json(dir + "conversations.json");
        const json expected = read_json(dir + "expected.json");
        QVERIFY(expected.size() > 500);
        int equal = 0, errors = 0;
        QStringList failures;
        for (const json &e : expected) {
            const std::string name = e["template"].get<std::string>() + " / " + e["conversation"].get<std::string>();
            const std::string got = attempt(read(dir + e["template"].get<std::string>()),
                                            conversations[e["conversation"].get<std::string>()]);
            if (e.contains("error")) {
                if (got.rfind("ERROR: ", 0) == 0)
                    ++errors;
                else
                    failures << QString::fromStdString(name + ": jinja2 raises " + e["error"].get<std::string>() +
                                                       ", rendered instead");
            } else if (got == e["output"].get<std::string>()) {
                ++equal;
            } else {
                failures << QString::fromStdString(name + ": " + got.substr(0, 200));
            }
        }
        qInfo("%d pairs: %d byte-equal, %d errors where jinja2 raises, %d failures", int(expected.size()), equal, errors,
              int(failures.size()));
        for (const QString &f : failures.mid(0, 20))
            qWarning("%s", qPrintable(f));
        QCOMPARE(failures.size(), 0);
    }

    void features_match_jinja2()
    {
        const json features = read_json(dir + "features.json");
        QVERIFY(features.size() > 50);
        for (const json &f : features) {
            const std::string got = attempt(f["template"].get<std::string>(), f["context"]);
            const std::string name = f["name"].get<std::string>();
            if (f.contains("error"))
                QVERIFY2(got.rfind("ERROR: ", 0) == 0, (name + " rendered " + got).c_str());
            else
                QVERIFY2(got == f["output"].get<std::string>(),
                         (name + ": got " + got + " want " + f["output"].get<std::string>()).c_str());
        }
    }

    void errors_name_line_column_and_construct()
    {
        const std::string got = attempt("line one\n{{ 1 | no_such }}", json::object());
        QVERIFY2(got.find("line 2, column 8") != std::string::npos, got.c_str());
        QVERIFY2(got.find("filter 'no_such'") != std::string::npos, got.c_str());
        const std::string raised = attempt("{% if true %}\n  {{ raise_exception('Roles must alternate') }}{% endif %}",
                                           json::object());
        QVERIFY2(raised.find("line 2") != std::string::npos, raised.c_str());
        QVERIFY2(raised.find("Roles must alternate") != std::string::npos, raised.c_str());
        const std::string called = attempt("{{ nope() }}", json::object());
        QVERIFY2(called.find("'nope' is undefined") != std::string::npos, called.c_str());
    }

    void hostile_templates_end_in_an_error()
    {
        const std::vector<std::pair<const char *, std::string>> hostile{
            {"deep parentheses", "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}"},
            {"deep ifs", [] {
                 std::string s;
                 for (int k = 0; k < 20000; ++k)
                     s += "{% if true %}";
                 return s;
             }()},
            {"deep lists", "{{ " + std::string(50000, '[') + " }}"},
            {"deep nots", "{{ " + [] {
                 std::string s;
                 for (int k = 0; k < 50000; ++k)
                     s += "not ";
                 return s;
             }() + "1 }}"},
            {"nested huge loops", "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}"},
            {"huge range", "{{ range(10000000000) | length }}"},
            {"macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"},
            {"mutual recursion", "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"},
            {"doubling string", "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                                "{% endfor %}{{ ns.s | length }}"},
            {"string repeat", "{{ 'x' * 1000000000000 }}"},
            {"list repeat", "{{ [1, 2] * 1000000000000 }}"},
            {"output flood", "{% for i in range(1000000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}"},
            {"replace blow-up", "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s | "
                                "replace('a', ns.s) %}{% endfor %}"},
            {"integer overflow", "{{ 2 ** 64 }}"},
            {"integer literal past int64", "{{ 99999999999999999999 }}"},
            {"attribute index past int64", "{{ x.99999999999999999999 }}"},
            {"format index past size_t", "{{ '{99999999999999999999999}'.format(1) }}{{ nope() }}"},
        };
        for (const auto &[name, source] : hostile) {
            const auto t0 = std::chrono::steady_clock::now();
            const std::string got = attempt(source, json::object());
            const double s = seconds_since(t0);
            QVERIFY2(got.rfind("ERROR: ", 0) == 0, (std::string(name) + " rendered " + got.substr(0, 80)).c_str());
            QVERIFY2(s < k_hostile_seconds, (std::string(name) + " took " + std::to_string(s) + " s").c_str());
        }
    }

    // Random byte strings and random splices of template syntax: a TemplateError or output,
    // never another exception, a crash or a hang.
    void random_templates_never_crash()
    {
        std::mt19937 rng(18);
        const std::vector<std::string> pieces{
            "{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "if", "endif", "for", "in", "endfor", "set", "=", "macro",
            "endmacro", "call", "endcall", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "'a'", "\"b\"", "1", "2.5",
            "x", "messages", "loop", "range(3)", "trim", "tojson", "~", "+", "*", "**", "//", "not", "and", "or",
            "is", "defined", "else", "elif", "namespace()", "\n", " ", "caller()", "raise_exception('x')"};
        const json ctx = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"x", 3}};
        const auto t0 = std::chrono::steady_clock::now();
        for (int round = 0; round < 3000; ++round) {
            std::string src;
            const int n = int(rng() % 40);
            for (int k = 0; k < n; ++k) {
                if (round % 3 == 0)
                    src += char(rng() % 256);
                else
                    src += pieces[rng() % pieces.size()] + (rng() % 2 ? " " : "");
            }
            try {
                (void)jinja::render(src, ctx, fixed_now());
            } catch (const jinja::TemplateError &) {
            }
        }
        QVERIFY(seconds_since(t0) < 60.0);
    }

    void bounds_are_configurable()
    {
        jinja::RenderOptions o = fixed_now();
        o.limits.max_loop_iterations = 10;
        QVERIFY(attempt("{% for i in range(5) %}{{ i }}{% endfor %}", json::object(), o) == "01234");
        QVERIFY(attempt("{% for i in range(11) %}{% endfor %}", json::object(), o).rfind("ERROR: ", 0) == 0);
        o.limits.max_output = 8;
        QVERIFY(attempt("{{ 'abcdefghij' }}", json::object(), o).rfind("ERROR: ", 0) == 0);
    }
};

QTEST_APPLESS_MAIN(TestJinja)
#include "tst_jinja.moc"
