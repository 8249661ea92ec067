// longscope-cli template and generate --chat: the prompt printed exactly as jinja2 renders the
// template (tests/data/templates/expected.json), the format note on stderr, clear errors.
#include "support/read_file.h"

#include "cli_runner.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <fstream>

using longscope::test::run_cli;
using json = nlohmann::ordered_json;
using longscope::test::read_file;

namespace {
const std::string dir = LONGSCOPE_TEST_DATA "/templates/";

// jinja2's output for (template, conversation), as rendered by the fixture script.
std::string expected_output(const std::string &tmpl, const std::string &conversation)
{
    for (const json &e : json::parse(read_file(dir + "expected.json")))
        if (e["template"] == tmpl && e["conversation"] == conversation)
            return e.value("output", std::string("<error>"));
    return "<missing>";
}
} // namespace

class TestChatTemplateCli : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    json m_conversations;

    QString write(const QString &name, const std::string &text)
    {
        const QString path = m_tmp.filePath(name);
        std::ofstream(path.toStdString(), std::ios::binary) << text;
        return path;
    }

    QString messages_file(const std::string &conversation)
    {
        return write(QString::fromStdString(conversation + ".json"), m_conversations[conversation]["messages"].dump());
    }

private slots:
    void initTestCase() { m_conversations = json::parse(read_file(dir + "conversations.json")); }

    void template_prints_exactly_what_jinja2_renders()
    {
        // The bundled stories260K writes BOS and EOS as <s> and </s>, as the fixtures do.
        for (const char *tmpl : {"corpus/llama.cpp-templates__Qwen-Qwen2.5-7B-Instruct.jinja",
                                 "corpus/llama.cpp-templates__meta-llama-Llama-3.1-8B-Instruct.jinja",
                                 "corpus/llama.cpp-templates__google-gemma-2-2b-it.jinja",
                                 "corpus/test-chat-template__mistralai-Mistral-Large-Instruct-2411-mistralai-v7-template.jinja"}) {
            for (const char *conv : {"multi", "unicode", "parts"}) {
                const auto r = run_cli({"template", "--messages", messages_file(conv), "--template",
                                        QString::fromStdString(dir + tmpl)});
                const std::string want = expected_output(tmpl, conv);
                if (want == "<error>") {
                    QVERIFY(r.code != 0);
                    continue;
                }
                QCOMPARE(r.code, 0);
                QVERIFY2(r.out.toStdString() == want, (std::string(tmpl) + " / " + conv + ": " + r.out.toStdString()).c_str());
                QVERIFY(r.err.contains("chat format: custom"));
            }
        }
    }

    void tools_and_no_generation_prompt()
    {
        const std::string tmpl = "corpus/llama.cpp-templates__Qwen-Qwen2.5-7B-Instruct.jinja";
        const QString tools = write("tool-definitions.json", m_conversations["tools"]["tools"].dump());
        const auto r = run_cli({"template", "--messages", messages_file("tools"), "--tools", tools, "--template",
                                QString::fromStdString(dir + tmpl)});
        QCOMPARE(r.code, 0);
        QCOMPARE(r.out.toStdString(), expected_output(tmpl, "tools"));
        const auto n = run_cli({"template", "--messages", messages_file("multi_no_prompt"), "--no-generation-prompt",
                                "--template", QString::fromStdString(dir + tmpl)});
        QCOMPARE(n.code, 0);
        QCOMPARE(n.out.toStdString(), expected_output(tmpl, "multi_no_prompt"));
    }

    void model_without_template_uses_a_named_fallback()
    {
        const auto r = run_cli({"template", "--messages", messages_file("multi")});
        QCOMPARE(r.code, 0);
        QCOMPARE(r.out.toStdString(), expected_output("builtin/plain.jinja", "multi"));
        QVERIFY2(r.err.contains("chat format: plain") && r.err.contains("no chat template"), r.err.constData());
        const auto f = run_cli({"template", "--messages", messages_file("multi"), "--format", "llama-2"});
        QCOMPARE(f.code, 0);
        QCOMPARE(f.out.toStdString(), expected_output("builtin/llama-2.jinja", "multi"));
    }

    void bad_input_is_one_clear_line()
    {
        const QString bad = write("bad.json", R"([{"role": "robot", "content": "x"}])");
        auto r = run_cli({"template", "--messages", bad});
        QVERIFY(r.code > 0);
        QVERIFY(r.out.isEmpty());
        QVERIFY2(r.err.contains("messages[0].role"), r.err.constData());
        r = run_cli({"template", "--messages", write("broken.json", "{")});
        QVERIFY(r.code > 0);
        QVERIFY(r.err.contains("not valid JSON"));
        r = run_cli({"template", "--messages", messages_file("single"), "--template",
                     write("t.jinja", "line\n{{ raise_exception('Roles must alternate') }}")});
        QVERIFY(r.code > 0);
        QVERIFY(r.out.isEmpty());
        QVERIFY2(r.err.contains("line 2") && r.err.contains("Roles must alternate"), r.err.constData());
        r = run_cli({"template", "--messages", messages_file("single"), "--format", "nope"});
        QVERIFY(r.code > 0);
        QVERIFY(r.err.contains("unknown chat format"));
        r = run_cli({"template"});
        QVERIFY(r.code > 0);
    }

    void generate_takes_the_messages_file()
    {
        const auto t = run_cli({"template", "--messages", messages_file("multi")});
        QCOMPARE(t.code, 0);
        const QString prompt = write("prompt.txt", t.out.toStdString());
        const auto tok = run_cli({"tokenize", "--bos", "-f", prompt});
        QCOMPARE(tok.code, 0);
        const int n_prompt = int(tok.out.trimmed().split(' ').size());
        const auto g = run_cli({"generate", "--chat", messages_file("multi"), "--temp", "0", "-n", "4", "--json"});
        QCOMPARE(g.code, 0);
        const json out = json::parse(g.out.toStdString());
        QCOMPARE(out["n_prompt_tokens"].get<int>(), n_prompt);
        QVERIFY(g.err.contains("chat format: plain"));
        const auto both = run_cli({"generate", "--chat", messages_file("multi"), "-p", "x"});
        QVERIFY(both.code > 0);
    }
};

QTEST_APPLESS_MAIN(TestChatTemplateCli)
#include "tst_chat_template.moc"
