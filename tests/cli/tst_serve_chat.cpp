// serve's /v1/chat/completions rendering: the request's messages and tools go to the template
// as they came, and the prompt is byte-equal to what jinja2 renders for the same conversation
// (tests/data/templates/expected.json); what the template cannot render is a 400 carrying the
// renderer's message; replies come back split (reasoning_content, tool_calls).
#include "support/read_file.h"

#include "server_api.h"

#include "longscope/model.h"

#include <QtTest>

#include <nlohmann/json.hpp>

using namespace longscope;
using namespace longscope::cli::api;
// Keys kept in the order written, as a client's JSON and Python's dicts keep them.
using ojson = nlohmann::ordered_json;
using longscope::test::read_file;

namespace {

const std::string dir = LONGSCOPE_TEST_DATA "/templates/";

std::string corpus_name(const std::string &name) { return "corpus/llama.cpp-templates__" + name + ".jinja"; }

// Templates that do not read the date (the fixtures render strftime_now on a fixed day).
const std::vector<std::string> k_templates = {
    "Qwen-Qwen2.5-7B-Instruct",           "Qwen-Qwen3-0.6B",
    "Qwen-QwQ-32B",                       "meta-llama-Llama-3.1-8B-Instruct",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "mistralai-Mistral-Nemo-Instruct-2407", "google-gemma-2-2b-it",
};

} // namespace

class TestServeChat : public QObject {
    Q_OBJECT
    std::unique_ptr<Model> m_model;
    ojson m_conversations;
    ojson m_expected;

    const ojson *expected(const std::string &tmpl, const std::string &conversation) const
    {
        for (const ojson &e : m_expected)
            if (e["template"] == tmpl && e["conversation"] == conversation)
                return &e;
        return nullptr;
    }

    // The request body a client sends for a fixture conversation.
    ojson body_of(const std::string &conversation) const
    {
        const ojson &c = m_conversations.at(conversation);
        ojson body{{"messages", c["messages"]}, {"max_tokens", 4}};
        if (!c["tools"].is_null())
            body["tools"] = c["tools"];
        return body;
    }

    ChatPrompt render(const ojson &body, const std::string &template_text) const
    {
        const CompletionRequest r = parse_request(Endpoint::Chat, body.dump(), Settings{});
        return chat_prompt(*m_model, r, template_text, 1 << 20, 0, OverflowPolicy::Error);
    }

private slots:
    void initTestCase()
    {
        // The bundled stories260K writes BOS and EOS as <s> and </s>, as the fixtures do.
        m_model = Model::load(LONGSCOPE_BUNDLED_MODEL);
        m_conversations = ojson::parse(read_file(dir + "conversations.json"));
        m_expected = ojson::parse(read_file(dir + "expected.json"));
    }

    void prompt_is_what_jinja2_renders()
    {
        int outputs = 0, errors = 0;
        for (const std::string &name : k_templates) {
            const std::string tmpl = corpus_name(name);
            const std::string text = read_file(dir + tmpl);
            for (const auto &[conversation, c] : m_conversations.items()) {
                if (!c["add_generation_prompt"].get<bool>())
                    continue; // the server always asks for the reply
                const ojson *want = expected(tmpl, conversation);
                QVERIFY2(want, (tmpl + " / " + conversation + ": no fixture").c_str());
                const std::string where = name + " / " + conversation;
                if (want->contains("output")) {
                    const ChatPrompt p = render(body_of(conversation), text);
                    QVERIFY2(p.text == (*want)["output"].get<std::string>(), (where + ":\n" + p.text).c_str());
                    QCOMPARE(p.format, std::string("custom"));
                    ++outputs;
                    continue;
                }
                // jinja2 raised: a 400 naming the template, never a fallback format.
                try {
                    render(body_of(conversation), text);
                    QFAIL((where + ": rendered where jinja2 raises").c_str());
                } catch (const ApiError &e) {
                    QCOMPARE(e.status(), 400);
                    QCOMPARE(e.code(), std::string("template_error"));
                    QCOMPARE(e.param(), std::string("messages"));
                    // A raise_exception's own words reach the client.
                    const std::string raised = (*want)["error"].get<std::string>();
                    if (raised.rfind("TemplateError: ", 0) == 0)
                        QVERIFY2(std::string(e.what()).find(raised.substr(15)) != std::string::npos,
                                 (where + ": " + e.what()).c_str());
                }
                ++errors;
            }
        }
        qInfo("%d prompts byte-equal to jinja2's, %d refused where jinja2 raises", outputs, errors);
        QVERIFY(outputs > 30);
        QVERIFY(errors > 5);
    }

    void arguments_sent_as_json_text_render_as_objects()
    {
        // OpenAI clients send tool-call arguments as JSON text; the fixture holds them as a
        // mapping, which is what Hugging Face templates read.
        ojson body = body_of("tools");
        for (ojson &m : body["messages"])
            if (m.contains("tool_calls"))
                for (ojson &call : m["tool_calls"])
                    call["function"]["arguments"] = call["function"]["arguments"].dump();
        for (const char *name : {"Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
                                 "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"}) {
            const std::string tmpl = corpus_name(name);
            const ChatPrompt p = render(body, read_file(dir + tmpl));
            QVERIFY2(p.text == (*expected(tmpl, "tools"))["output"].get<std::string>(), (name + (":\n" + p.text)).c_str());
        }
    }

    void model_template_errors_do_not_fall_back()
    {
        // stories260K carries no template: the built-in fallback renders (and says so).
        const ChatPrompt p = render(body_of("single"), "");
        QVERIFY(!p.format.empty());
        QVERIFY(p.format != "custom" && p.format != "model");
        QVERIFY(!p.note.empty());
        // A construct the renderer refuses: the 400 names where.
        try {
            render(body_of("single"), "{% for m in messages %}{{ m.content | no_such_filter }}{% endfor %}");
            QFAIL("rendered with an unknown filter");
        } catch (const ApiError &e) {
            QCOMPARE(e.status(), 400);
            QVERIFY2(std::string(e.what()).find("no_such_filter") != std::string::npos, e.what());
            QVERIFY2(std::string(e.what()).find("line 1") != std::string::npos, e.what());
        }
    }

    void reply_format_follows_the_request()
    {
        const std::string qwen = read_file(dir + corpus_name("Qwen-Qwen3-0.6B"));
        ojson body = body_of("tools");
        CompletionRequest r = parse_request(Endpoint::Chat, body.dump(), Settings{});
        ChatPrompt p = chat_prompt(*m_model, r, qwen, 1 << 20, 0, OverflowPolicy::Error);
        ReplyFormat f = chat_reply_format(*m_model, r, qwen, p);
        QVERIFY(f.reasoning);
        QCOMPARE(f.tools, ReplyFormat::Tools::Hermes);
        body["tool_choice"] = "none";
        r = parse_request(Endpoint::Chat, body.dump(), Settings{});
        QCOMPARE(chat_reply_format(*m_model, r, qwen, p).tools, ReplyFormat::Tools::None);
        body.erase("tool_choice");
        body.erase("tools");
        r = parse_request(Endpoint::Chat, body.dump(), Settings{});
        QCOMPARE(chat_reply_format(*m_model, r, qwen, p).tools, ReplyFormat::Tools::None);
        // The built-in fallback (no template text) has neither.
        p = chat_prompt(*m_model, r, "", 1 << 20, 0, OverflowPolicy::Error);
        f = chat_reply_format(*m_model, r, "", p);
        QVERIFY(!f.reasoning);
        QCOMPARE(f.tools, ReplyFormat::Tools::None);
    }

    void bad_tool_fields_data()
    {
        QTest::addColumn<QByteArray>("body");
        QTest::addColumn<QString>("param");
        const QByteArray user = R"({"role": "user", "content": "hi"})";
        QTest::newRow("tools not array") << QByteArray(R"({"messages": [)" + user + R"(], "tools": {}})") << "tools";
        QTest::newRow("tool without function")
            << QByteArray(R"({"messages": [)" + user + R"(], "tools": [{"type": "function"}]})") << "tools[0]";
        QTest::newRow("tool_choice required")
            << QByteArray(R"({"messages": [)" + user + R"(], "tool_choice": "required"})") << "tool_choice";
        QTest::newRow("tool_choice named")
            << QByteArray(R"({"messages": [)" + user + R"(], "tool_choice": {"type": "function", "function": {"name": "f"}}})")
            << "tool_choice";
        QTest::newRow("call without name")
            << QByteArray(R"({"messages": [)" + user +
                          R"(, {"role": "assistant", "tool_calls": [{"type": "function", "function": {}}]}]})")
            << "messages[1].tool_calls[0].function.name";
        QTest::newRow("arguments a number")
            << QByteArray(R"({"messages": [)" + user +
                          R"(, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})")
            << "messages[1].tool_calls[0].function.arguments";
        QTest::newRow("unknown role")
            << QByteArray(R"({"messages": [{"role": "robot", "content": "x"}]})") << "messages[0].role";
        QTest::newRow("functions") << QByteArray(R"({"messages": [)" + user + R"(], "functions": [{"name": "f"}]})")
                                   << "functions";
    }

    void bad_tool_fields()
    {
        QFETCH(QByteArray, body);
        QFETCH(QString, param);
        try {
            parse_request(Endpoint::Chat, body.toStdString(), Settings{});
            QFAIL("accepted");
        } catch (const ApiError &e) {
            QCOMPARE(e.status(), 400);
            QCOMPARE(QString::fromStdString(e.param()), param);
        }
    }

    void responses_carry_reasoning_and_tool_calls()
    {
        ReplySplitter::Delta reply;
        reply.reasoning = "Need the weather.";
        reply.tool_calls.push_back({"", "get_weather", R"({"city":"Rome"})"});
        const json r = chat_response("chatcmpl-x", 1, "m", reply, "stop", Usage{3, 4});
        const json &choice = r["choices"][0];
        QCOMPARE(choice["finish_reason"].get<std::string>(), std::string("tool_calls"));
        const json &msg = choice["message"];
        QVERIFY(msg["content"].is_null());
        QCOMPARE(msg["reasoning_content"].get<std::string>(), reply.reasoning);
        const json &call = msg["tool_calls"][0];
        QCOMPARE(call["type"].get<std::string>(), std::string("function"));
        QCOMPARE(call["function"]["name"].get<std::string>(), std::string("get_weather"));
        QCOMPARE(call["function"]["arguments"].get<std::string>(), std::string(R"({"city":"Rome"})"));
        QVERIFY(call["id"].get<std::string>().rfind("call_", 0) == 0);
        QVERIFY(!call.contains("index"));
        // Cut short while calling: "length" stays.
        QCOMPARE(chat_response("c", 1, "m", reply, "length", {})["choices"][0]["finish_reason"].get<std::string>(),
                 std::string("length"));
        // A plain reply: content, no reasoning or tool_calls keys.
        ReplySplitter::Delta plain;
        plain.content = "Hi";
        const json plain_response = chat_response("c", 1, "m", plain, "stop", {});
        const json &pm = plain_response["choices"][0]["message"];
        QCOMPARE(pm["content"].get<std::string>(), std::string("Hi"));
        QVERIFY(!pm.contains("reasoning_content") && !pm.contains("tool_calls"));
        // Stream chunks number the calls from where the stream is.
        const json chunk = chat_reply_chunk("c", 1, "m", reply, 2);
        QCOMPARE(chunk["choices"][0]["delta"]["tool_calls"][0]["index"].get<int>(), 2);
        QCOMPARE(chunk["choices"][0]["delta"]["reasoning_content"].get<std::string>(), reply.reasoning);
        QVERIFY(!chunk["choices"][0]["delta"].contains("content"));
    }
};

QTEST_APPLESS_MAIN(TestServeChat)
#include "tst_serve_chat.moc"
