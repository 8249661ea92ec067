// The assistant's reply split into reasoning, content and tool calls: the formats read from real
// templates (tests/data/templates), and the same split whatever the pieces the text streams in.
#include "support/read_file.h"

#include "longscope/chat.h"

#include <QtTest>

#include <nlohmann/json.hpp>

using namespace longscope;
using Tools = ReplyFormat::Tools;
using longscope::test::read_file;

namespace {

const std::string dir = LONGSCOPE_TEST_DATA "/templates/";

std::string corpus(const std::string &name)
{
    return read_file(dir + "corpus/llama.cpp-templates__" + name + ".jinja");
}

// jinja2's rendering of the template for the "single" conversation (one user message, with the
// generation prompt), from the fixtures.
std::string rendered_single(const std::string &name)
{
    for (const nlohmann::json &e : nlohmann::json::parse(read_file(dir + "expected.json")))
        if (e["template"] == "corpus/llama.cpp-templates__" + name + ".jinja" && e["conversation"] == "single")
            return e.value("output", std::string());
    return {};
}

struct Split {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
};

// The reply fed in pieces cut at `cuts` (positions), then finished.
Split split_at(const ReplyFormat &f, const std::string &reply, const std::vector<size_t> &cuts)
{
    ReplySplitter s(f);
    Split out;
    auto take = [&](const ReplySplitter::Delta &d) {
        out.reasoning += d.reasoning;
        out.content += d.content;
        out.calls.insert(out.calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    };
    size_t at = 0;
    for (size_t cut : cuts) {
        take(s.feed(std::string_view(reply).substr(at, cut - at)));
        at = cut;
    }
    take(s.feed(std::string_view(reply).substr(at)));
    take(s.finish());
    // The splitter's totals agree with the deltas.
    if (s.reasoning() != out.reasoning || s.content() != out.content || s.tool_calls().size() != out.calls.size())
        out.content = "<totals differ>";
    return out;
}

void compare(const Split &got, const std::string &reasoning, const std::string &content,
             const std::vector<std::pair<std::string, std::string>> &calls, const std::string &where)
{
    const std::string ctx = where;
    QVERIFY2(got.reasoning == reasoning, (ctx + ": reasoning [" + got.reasoning + "]").c_str());
    QVERIFY2(got.content == content, (ctx + ": content [" + got.content + "]").c_str());
    QVERIFY2(got.calls.size() == calls.size(), (ctx + ": calls " + std::to_string(got.calls.size())).c_str());
    for (size_t i = 0; i < calls.size(); ++i) {
        QVERIFY2(got.calls[i].name == calls[i].first, (ctx + ": name " + got.calls[i].name).c_str());
        // Arguments compared as JSON values (the text's spacing is not part of the contract).
        QVERIFY2(nlohmann::json::parse(got.calls[i].arguments) == nlohmann::json::parse(calls[i].second),
                 (ctx + ": arguments " + got.calls[i].arguments).c_str());
    }
}

// Every way of cutting the reply in two and three pieces gives the same split as the whole.
void check_every_cut(const ReplyFormat &f, const std::string &reply, const std::string &reasoning,
                     const std::string &content, const std::vector<std::pair<std::string, std::string>> &calls)
{
    compare(split_at(f, reply, {}), reasoning, content, calls, "whole");
    if (QTest::currentTestFailed())
        return;
    for (size_t i = 0; i <= reply.size(); ++i) {
        for (size_t j = i; j <= reply.size(); j += 3) {
            compare(split_at(f, reply, {i, j}), reasoning, content, calls,
                    "cut at " + std::to_string(i) + "," + std::to_string(j));
            if (QTest::currentTestFailed())
                return;
        }
    }
    // One byte at a time, as a byte-level tokenizer may release it.
    std::vector<size_t> bytes;
    for (size_t i = 1; i < reply.size(); ++i)
        bytes.push_back(i);
    compare(split_at(f, reply, bytes), reasoning, content, calls, "byte by byte");
}

} // namespace

class TestChatReply : public QObject {
    Q_OBJECT

private slots:
    void formats_read_from_real_templates()
    {
        // Qwen3: thinks, opens <think> itself, calls tools the Hermes way.
        const std::string qwen3 = corpus("Qwen-Qwen3-0.6B");
        ReplyFormat f = reply_format(qwen3, rendered_single("Qwen-Qwen3-0.6B"), true);
        QVERIFY(f.reasoning);
        QVERIFY(!f.starts_in_reasoning);
        QCOMPARE(f.tools, Tools::Hermes);
        QCOMPARE(reply_format(qwen3, rendered_single("Qwen-Qwen3-0.6B"), false).tools, Tools::None);

        // DeepSeek-R1 (distilled into Llama): the generation prompt opens <think>.
        f = reply_format(corpus("deepseek-ai-DeepSeek-R1-Distill-Llama-8B"),
                         rendered_single("deepseek-ai-DeepSeek-R1-Distill-Llama-8B"), false);
        QVERIFY(f.reasoning);
        QVERIFY(f.starts_in_reasoning);
        // QwQ's generation prompt holds an empty, closed <think></think>.
        f = reply_format(corpus("Qwen-QwQ-32B"), rendered_single("Qwen-QwQ-32B"), true);
        QVERIFY(f.reasoning);
        QVERIFY(!f.starts_in_reasoning);

        f = reply_format(corpus("Qwen-Qwen2.5-7B-Instruct"), rendered_single("Qwen-Qwen2.5-7B-Instruct"), true);
        QVERIFY(!f.reasoning);
        QCOMPARE(f.tools, Tools::Hermes);
        QCOMPARE(reply_format(corpus("meta-llama-Llama-3.1-8B-Instruct"), "", true).tools, Tools::Json);
        QCOMPARE(reply_format(corpus("meta-llama-Llama-3.2-3B-Instruct"), "", true).tools, Tools::Json);
        QCOMPARE(reply_format(corpus("mistralai-Mistral-Nemo-Instruct-2407"), "", true).tools, Tools::Mistral);
        QCOMPARE(reply_format(corpus("google-gemma-2-2b-it"), "", true).tools, Tools::None);
        QVERIFY(!reply_format(corpus("google-gemma-2-2b-it"), "", true).reasoning);
    }

    void reasoning_split_across_every_boundary()
    {
        ReplyFormat qwen3;
        qwen3.reasoning = true;
        check_every_cut(qwen3, "<think>\nThe user asks a sum. 2+2=4.\n</think>\n\nIt is 4.",
                        "The user asks a sum. 2+2=4.", "It is 4.", {});
        // No <think> at the start: all content, tags later in the text included.
        check_every_cut(qwen3, "Plain answer with </think> and <think> in it", "",
                        "Plain answer with </think> and <think> in it", {});
        // Cut off while thinking: all reasoning.
        check_every_cut(qwen3, "  <think>still going", "still going", "", {});

        ReplyFormat r1 = qwen3;
        r1.starts_in_reasoning = true; // the prompt ended with "<think>\n"
        check_every_cut(r1, "Okay, 3+3 is 6.\n</think>\n\n6", "Okay, 3+3 is 6.", "6", {});
        check_every_cut(r1, "</think>Straight to it", "", "Straight to it", {});

        // A format without reasoning leaves the tags alone.
        check_every_cut(ReplyFormat{}, "<think>x</think>y", "", "<think>x</think>y", {});
    }

    void hermes_tool_calls_across_every_boundary()
    {
        ReplyFormat f;
        f.tools = Tools::Hermes;
        check_every_cut(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>", "",
                        "", {{"get_weather", R"({"city": "Rome"})"}});
        check_every_cut(f,
                        "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                        "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
                        "", "Let me check.\n", {{"a", "{}"}, {"b", R"({"x": [1, 2]})"}});
        // Not JSON: the text stays as written.
        check_every_cut(f, "<tool_call>oops</tool_call> done", "", "<tool_call>oops</tool_call> done", {});
        // Reasoning first, then a call (Qwen3).
        f.reasoning = true;
        check_every_cut(f, "<think>need weather</think>\n\n<tool_call>{\"name\": \"w\", \"arguments\": {}}</tool_call>",
                        "need weather", "", {{"w", "{}"}});
    }

    void json_and_mistral_tool_calls()
    {
        ReplyFormat llama;
        llama.tools = Tools::Json;
        check_every_cut(llama, R"({"name": "get_weather", "parameters": {"city": "Rome"}})", "", "",
                        {{"get_weather", R"({"city": "Rome"})"}});
        check_every_cut(llama, R"(<|python_tag|>{"name": "f", "parameters": {}})", "", "", {{"f", "{}"}});
        check_every_cut(llama, "{not a call} at all", "", "{not a call} at all", {});
        check_every_cut(llama, "Rome is sunny.", "", "Rome is sunny.", {});

        ReplyFormat mistral;
        mistral.tools = Tools::Mistral;
        check_every_cut(mistral, R"([TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}])",
                        "", "", {{"a", R"({"x": 1})"}, {"b", "{}"}});
        check_every_cut(mistral, "[TOOL_CALLS] broken", "", "[TOOL_CALLS] broken", {});
        // The id a Mistral call carries is kept.
        const auto d = split_reply(mistral, R"([TOOL_CALLS][{"name": "a", "arguments": {}, "id": "abc123XYZ"}])");
        QCOMPARE(d.tool_calls.size(), size_t(1));
        QCOMPARE(d.tool_calls[0].id, std::string("abc123XYZ"));
    }

    void content_is_released_as_soon_as_known()
    {
        // Text that cannot start a marker is not held back.
        ReplyFormat f;
        f.reasoning = true;
        f.tools = Tools::Hermes;
        ReplySplitter s(f);
        QCOMPARE(s.feed("<thi").content, std::string());     // may be <think>
        QCOMPARE(s.feed("nk>Hmm").reasoning, std::string("Hmm"));
        QCOMPARE(s.feed(" ok</th").reasoning, std::string(" ok")); // may be </think>
        QCOMPARE(s.feed("ink>Answer <tool").content, std::string("Answer ")); // may be <tool_call>
        QCOMPARE(s.feed("box>").content, std::string("<toolbox>"));
        const auto last = s.finish();
        QVERIFY(last.empty());
        QCOMPARE(s.content(), std::string("Answer <toolbox>"));
        QCOMPARE(s.reasoning(), std::string("Hmm ok"));
    }
};

QTEST_APPLESS_MAIN(TestChatReply)
#include "tst_chat_reply.moc"
