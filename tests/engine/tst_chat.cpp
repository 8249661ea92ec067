// Chat prompts: templates, turn dropping on overflow; model loading progress and cancel.
#include "support/read_file.h"

#include "longscope/chat.h"
#include "longscope/engine.h"
#include "longscope/errors.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

using namespace longscope;
using longscope::test::read_file;

namespace {
const std::string gguf_path = LONGSCOPE_BUNDLED_MODEL;
const std::string hf_path = LONGSCOPE_TEST_DATA "/stories260K/hf";

std::vector<ChatMessage> conversation(int turns)
{
    std::vector<ChatMessage> m{{ChatMessage::Role::System, "You tell short stories."}};
    for (int i = 0; i < turns; ++i) {
        m.push_back({ChatMessage::Role::User, "Tell me about the dog number " + std::to_string(i) + "."});
        m.push_back({ChatMessage::Role::Assistant, "The dog ran in the park and played with a red ball all day."});
    }
    m.push_back({ChatMessage::Role::User, "And the cat?"});
    return m;
}
} // namespace

class TestChat : public QObject {
    Q_OBJECT
    std::unique_ptr<Model> m_model;

private slots:
    void initTestCase() { m_model = Model::load(gguf_path); }

    void builtin_formats_format_the_conversation()
    {
        std::vector<ChatMessage> m{{ChatMessage::Role::System, "Be brief."},
                                   {ChatMessage::Role::User, "Hi"},
                                   {ChatMessage::Role::Assistant, "Hello"},
                                   {ChatMessage::Role::User, "Bye"}};
        QCOMPARE(format_chat("plain", m), std::string("Be brief.\n\nUser: Hi\nAssistant: Hello\nUser: Bye\nAssistant:"));
        // As Meta's Llama-2-chat template renders it: </s><s> between turns.
        QCOMPARE(format_chat("llama-2", m),
                 std::string("<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]"));
        QCOMPARE(format_chat("chatml", m),
                 std::string("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                             "<|im_start|>assistant\n"));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, format_chat("no-such-format", m));
        // stories260K carries no template and no chat markers: plain, with a note saying so.
        const RenderedChat r = render_chat(*m_model, m);
        QCOMPARE(r.format, std::string("plain"));
        QVERIFY(r.note.find("no chat template") != std::string::npos);
        QCOMPARE(r.text, format_chat("plain", m));
    }

    // The real Llama-2-chat template, rendered by jinja2 (tests/data/templates/expected.json),
    // equals the built-in llama-2 format on the same conversation.
    void llama2_builtin_equals_the_real_template()
    {
        const auto expected = nlohmann::json::parse(read_file(LONGSCOPE_TEST_DATA "/templates/expected.json"));
        const auto conversations =
            nlohmann::json::parse(read_file(LONGSCOPE_TEST_DATA "/templates/conversations.json"));
        int compared = 0;
        for (const auto &e : expected) {
            if (e["template"] != "builtin/llama-2.jinja" || !e.contains("output"))
                continue;
            std::vector<ChatMessage> msgs = parse_chat_messages(conversations[e["conversation"].get<std::string>()].dump());
            QCOMPARE(format_chat("llama-2", msgs, true), e["output"].get<std::string>());
            ++compared;
        }
        QVERIFY(compared >= 5);
    }

    // A template that fails falls back to the format its markers point to, as llama.cpp
    // chooses it; the built-in output equals llama.cpp's own for the formats written to match.
    void fallbacks_match_llama_cpp()
    {
        const auto f = nlohmann::json::parse(read_file(LONGSCOPE_TEST_DATA "/templates/fallbacks.json"));
        const std::vector<ChatMessage> msgs = parse_chat_messages(f["messages"].dump());
        const std::set<std::string> exact{"chatml",     "mistral-v1", "mistral-v3", "mistral-v3-tekken",
                                          "mistral-v7", "llama-3",    "phi-3",      "phi-4",
                                          "zephyr",     "monarch",    "gemma",      "vicuna",
                                          "vicuna-orca", "deepseek",  "command-r"};
        int compared = 0;
        for (const auto &c : f["cases"]) {
            const std::string name = detect_chat_format(c["template"].get<std::string>());
            if (!exact.count(name))
                continue;
            QVERIFY2(format_chat(name, msgs, true) == c["expected"].get<std::string>(),
                     (c["name"].get<std::string>() + " as " + name + ": " + format_chat(name, msgs, true)).c_str());
            ++compared;
        }
        QVERIFY2(compared >= 12, std::to_string(compared).c_str());
    }

    void failing_template_falls_back_with_a_note()
    {
        QTemporaryDir tmp;
        const std::filesystem::path dir = tmp.filePath("hf").toStdString();
        std::filesystem::create_directories(dir);
        for (const auto &e : std::filesystem::directory_iterator(hf_path))
            std::filesystem::copy_file(e.path(), dir / e.path().filename());
        std::ofstream(dir / "tokenizer_config.json")
            << R"({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{{ m.content.nope() }}{% endfor %}"})";
        const auto model = Model::load(dir.string());
        const std::vector<ChatMessage> m{{ChatMessage::Role::User, "Hi"}};
        const RenderedChat r = render_chat(*model, m);
        QCOMPARE(r.format, std::string("chatml"));
        QVERIFY2(r.note.find("failed") != std::string::npos && r.note.find("line 1") != std::string::npos,
                 r.note.c_str());
        QCOMPARE(r.text, format_chat("chatml", m));
        // An explicit template that fails is an error, not a fallback.
        ChatRenderOptions o;
        o.template_text = "{{ raise_exception('no') }}";
        QVERIFY_THROWS_EXCEPTION(FormatError, render_chat(*model, m, o));
    }

    void template_from_tokenizer_config()
    {
        QTemporaryDir tmp;
        const std::filesystem::path dir = tmp.filePath("hf").toStdString();
        std::filesystem::create_directories(dir);
        for (const auto &e : std::filesystem::directory_iterator(hf_path))
            std::filesystem::copy_file(e.path(), dir / e.path().filename());
        std::ofstream(dir / "tokenizer_config.json")
            << R"({"chat_template": "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% endfor %}{% if add_generation_prompt %}!{% endif %}"})";
        const auto model = Model::load(dir.string());
        const std::vector<ChatMessage> m{{ChatMessage::Role::User, "Hi"}};
        const RenderedChat r = render_chat(*model, m);
        QCOMPARE(r.format, std::string("model"));
        QVERIFY(r.note.empty());
        const std::string bos = model->tokenizer().piece(model->tokenizer().bos_id());
        QCOMPARE(r.text, bos + "<|im_start|>user\nHi!");
        ChatRenderOptions o;
        o.add_generation_prompt = false;
        QCOMPARE(render_chat(*model, m, o).text, bos + "<|im_start|>user\nHi");
        // The BOS the template writes becomes the BOS token, once.
        const auto ids = tokenize_chat(*model, r.text, true);
        QCOMPARE(ids, model->tokenizer().encode("<|im_start|>user\nHi!", true));
    }

    void messages_file_form()
    {
        const auto m = parse_chat_messages(
            R"([{"role": "developer", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": null, "reasoning_content": "r", "tool_calls": [{"id": "x"}]}, {"role": "tool", "content": "t"}])");
        QCOMPARE(m.size(), size_t(4));
        QCOMPARE(m[0].role, ChatMessage::Role::System);
        QCOMPARE(m[1].content, std::string("ab"));
        QCOMPARE(m[2].reasoning_content, std::string("r"));
        QCOMPARE(m[3].role, ChatMessage::Role::Tool);
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, parse_chat_messages("[{\"role\": \"bot\"}]"));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, parse_chat_messages("{"));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, parse_chat_messages("[]"));
    }

    void oldest_turns_are_dropped_to_fit()
    {
        auto all = conversation(12);
        const ChatPrompt full = build_chat_prompt(*m_model, all, 4096, 0, OverflowPolicy::DropOldestTurns);
        QCOMPARE(full.dropped_turns, 0);
        const int limit = int(full.tokens.size()) / 2;
        const ChatPrompt cut = build_chat_prompt(*m_model, all, limit, 16, OverflowPolicy::DropOldestTurns);
        QVERIFY(cut.dropped_turns > 0);
        QVERIFY(!cut.truncated);
        QVERIFY(int(cut.tokens.size()) <= limit - 16);
        // What is left is exactly the system prompt plus the newest messages.
        std::vector<ChatMessage> kept{all.front()};
        kept.insert(kept.end(), all.begin() + 1 + cut.dropped_turns, all.end());
        QCOMPARE(cut.tokens, m_model->tokenizer().encode(format_chat("plain", kept), true));
        // One message fewer dropped would not have fitted.
        std::vector<ChatMessage> one_more{all.front()};
        one_more.insert(one_more.end(), all.begin() + cut.dropped_turns, all.end());
        QVERIFY(int(m_model->tokenizer().encode(format_chat("plain", one_more), true).size()) > limit - 16);
    }

    void other_policies()
    {
        auto all = conversation(12);
        QVERIFY_THROWS_EXCEPTION(ContextOverflow, build_chat_prompt(*m_model, all, 64, 16, OverflowPolicy::Error));
        const ChatPrompt ht = build_chat_prompt(*m_model, all, 64, 16, OverflowPolicy::HeadTail);
        QVERIFY(ht.truncated);
        QCOMPARE(ht.tokens.size(), size_t(48));
        // A last message too long even alone falls back to head and tail.
        std::vector<ChatMessage> huge{{ChatMessage::Role::User, std::string(4000, 'a')}};
        const ChatPrompt h = build_chat_prompt(*m_model, huge, 128, 0, OverflowPolicy::DropOldestTurns);
        QVERIFY(h.truncated);
        QCOMPARE(h.tokens.size(), size_t(128));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, build_chat_prompt(*m_model, {}, 128, 0, OverflowPolicy::Error));
    }

    void load_progress_and_cancel()
    {
        std::vector<double> seen;
        auto m = Model::load(gguf_path, [&](double f) {
            seen.push_back(f);
            return true;
        });
        QVERIFY(m);
        QVERIFY(seen.size() >= 3);
        QCOMPARE(seen.front(), 0.0);
        QCOMPARE(seen.back(), 1.0);
        QVERIFY(std::is_sorted(seen.begin(), seen.end()));
        int calls = 0;
        QVERIFY_THROWS_EXCEPTION(Cancelled, Model::load(hf_path, [&](double) { return ++calls < 5; }));
        QVERIFY_THROWS_EXCEPTION(Cancelled, Model::load(gguf_path, [](double) { return false; }));
    }
};

QTEST_APPLESS_MAIN(TestChat)
#include "tst_chat.moc"
