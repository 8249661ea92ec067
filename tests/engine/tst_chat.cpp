// Chat prompts: templates, turn dropping on overflow; model loading progress and cancel.
#include "longscope/chat.h"
#include "longscope/engine.h"
#include "longscope/errors.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>

using namespace longscope;

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

    void templates_format_the_conversation()
    {
        std::vector<ChatMessage> m{{ChatMessage::Role::System, "Be brief."},
                                   {ChatMessage::Role::User, "Hi"},
                                   {ChatMessage::Role::Assistant, "Hello"},
                                   {ChatMessage::Role::User, "Bye"}};
        QCOMPARE(format_chat(ChatTemplate::Plain, m),
                 std::string("Be brief.\n\nUser: Hi\nAssistant: Hello\nUser: Bye\nAssistant:"));
        QCOMPARE(format_chat(ChatTemplate::Llama2, m),
                 std::string("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello [INST] Bye [/INST]"));
        QCOMPARE(format_chat(ChatTemplate::ChatML, m),
                 std::string("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                             "<|im_start|>assistant\n"));
        QCOMPARE(chat_template_of(*m_model), ChatTemplate::Plain); // stories260K carries none
    }

    void template_from_tokenizer_config()
    {
        QTemporaryDir tmp;
        const std::filesystem::path dir = tmp.filePath("hf").toStdString();
        std::filesystem::create_directories(dir);
        for (const auto &e : std::filesystem::directory_iterator(hf_path))
            std::filesystem::copy_file(e.path(), dir / e.path().filename());
        std::ofstream(dir / "tokenizer_config.json")
            << R"({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"})";
        QCOMPARE(chat_template_of(*Model::load(dir.string())), ChatTemplate::ChatML);
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
        QCOMPARE(cut.tokens, m_model->tokenizer().encode(format_chat(ChatTemplate::Plain, kept), true));
        // One message fewer dropped would not have fitted.
        std::vector<ChatMessage> one_more{all.front()};
        one_more.insert(one_more.end(), all.begin() + cut.dropped_turns, all.end());
        QVERIFY(int(m_model->tokenizer().encode(format_chat(ChatTemplate::Plain, one_more), true).size()) > limit - 16);
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
