// Byte-level BPE and the tokenizer features around it, against truth from outside the engine:
// llama.cpp's vocabulary files and their test vectors (tests/data/vocab/, ids written by the
// models' own Hugging Face tokenizers), a tokenizer.json built with the `tokenizers` package
// and that package's ids (scripts/gen_hf_bpe_fixture.py), and ids published for the chat
// formats (Llama 3, Qwen 2); and the `tokenizers` package's ids for a whole book with the
// Llama 3 and Qwen 2 vocabularies (scripts/gen_bpe_book_ids.py).
#include "support/read_file.h"
#include "support/vocab_files.h"

#include "longscope/errors.h"
#include "longscope/generator.h"
#include "longscope/tokenizer.h"

#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <sstream>

using namespace longscope;
using longscope::test::read_file;

namespace {

const std::string kDataDir = LONGSCOPE_TEST_DATA;

// Every vocabulary with test vectors; the ones with "spm" in their kind are sentencepiece.
struct VocabInfo {
    const char *name;
    TokenizerKind kind;
    const char *pre;
};
const VocabInfo kVocabs[] = {
    {"llama-bpe", TokenizerKind::Bpe, "llama-bpe"},
    {"qwen2", TokenizerKind::Bpe, "qwen2"},
    {"deepseek-llm", TokenizerKind::Bpe, "deepseek-llm"},
    {"deepseek-coder", TokenizerKind::Bpe, "deepseek-coder"},
    {"gpt-2", TokenizerKind::Bpe, "gpt-2"},
    {"falcon", TokenizerKind::Bpe, "falcon"},
    {"starcoder", TokenizerKind::Bpe, "starcoder"},
    {"refact", TokenizerKind::Bpe, "refact"},
    {"mpt", TokenizerKind::Bpe, "mpt"},
    {"phi-3", TokenizerKind::SentencePiece, ""},
    {"llama-spm", TokenizerKind::SentencePiece, ""},
};

QList<int> as_list(const std::vector<int32_t> &v) { return QList<int>(v.begin(), v.end()); }

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts)
{
    std::vector<int32_t> out;
    for (const auto &p : parts)
        out.insert(out.end(), p.begin(), p.end());
    return out;
}

} // namespace

class TestBpe : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::map<std::string, std::unique_ptr<Tokenizer>> m_tok;
    const Tokenizer &tok(const std::string &name) { return *m_tok.at(name); }

private slots:
    void initTestCase();

    void vocabulary_kinds_data();
    void vocabulary_kinds();
    void llama_cpp_vectors_data();
    void llama_cpp_vectors();
    void decode_round_trip_data();
    void decode_round_trip();
    void whole_book_matches_tokenizers_data();
    void whole_book_matches_tokenizers();

    void special_tokens_on_request();
    void special_tokens_sentencepiece();
    void end_of_generation_sets();
    void generator_stops_at_end_of_turn();
    void phi3_extra_unknown_tokens_are_unused();

    void invalid_utf8_is_encoded_byte_by_byte();
    void pathological_inputs_are_fast();
    void streaming_assembles_characters();

    void hf_tokenizer_json_matches_tokenizers_data();
    void hf_tokenizer_json_matches_tokenizers();
    void hf_directory_specials();
};

void TestBpe::initTestCase()
{
    QVERIFY(m_dir.isValid());
    for (const VocabInfo &v : kVocabs) {
        const std::string path = test::unpack_vocab(v.name, m_dir.path().toStdString());
        // The tokenizer-only load path: these files have no tensors.
        m_tok[v.name] = Tokenizer::load(path);
    }
}

void TestBpe::vocabulary_kinds_data()
{
    QTest::addColumn<QString>("name");
    for (const VocabInfo &v : kVocabs)
        QTest::newRow(v.name) << QString(v.name);
}

void TestBpe::vocabulary_kinds()
{
    QFETCH(QString, name);
    const VocabInfo &v = *std::find_if(std::begin(kVocabs), std::end(kVocabs),
                                       [&](const VocabInfo &x) { return name == x.name; });
    const Tokenizer &t = tok(v.name);
    QCOMPARE(int(t.kind()), int(v.kind));
    QCOMPARE(t.pre_tokenizer(), std::string(v.pre));
    QCOMPARE(std::string(t.kind_name()), std::string(v.kind == TokenizerKind::Bpe ? "bpe" : "sentencepiece"));
}

void TestBpe::llama_cpp_vectors_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("ids");
    for (const VocabInfo &v : kVocabs) {
        const auto vectors = test::vocab_vectors(v.name);
        QVERIFY(vectors.size() >= 30);
        for (size_t i = 0; i < vectors.size(); ++i)
            QTest::addRow("%s #%02zu", v.name, i)
                << QString(v.name) << QByteArray::fromStdString(vectors[i].first) << as_list(vectors[i].second);
    }
}

void TestBpe::llama_cpp_vectors()
{
    QFETCH(QString, name);
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, ids);
    const Tokenizer &t = tok(name.toStdString());
    // As llama.cpp's test: no BOS, special tokens not parsed.
    QCOMPARE(as_list(t.encode(text.toStdString(), false)), ids);
    QCOMPARE(as_list(t.encode(text.toStdString(), false, false)), ids);
}

void TestBpe::decode_round_trip_data() { llama_cpp_vectors_data(); }

void TestBpe::decode_round_trip()
{
    QFETCH(QString, name);
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, ids);
    const Tokenizer &t = tok(name.toStdString());
    const std::vector<int32_t> v(ids.begin(), ids.end());
    // The reference ids decode back to the text, byte for byte. sentencepiece drops the one
    // leading space it added itself (the dummy prefix), so its decode is the text exactly too.
    QCOMPARE(QByteArray::fromStdString(t.decode(v)), text);
}

void TestBpe::whole_book_matches_tokenizers_data()
{
    QTest::addColumn<QString>("name");
    QTest::newRow("llama-bpe") << QString("llama-bpe");
    QTest::newRow("qwen2") << QString("qwen2");
}

void TestBpe::whole_book_matches_tokenizers()
{
    // All of Alice in Wonderland (CRLF line ends, 167 kB): the ids of the `tokenizers`
    // package with the same vocabulary and merges (scripts/gen_bpe_book_ids.py).
    QFETCH(QString, name);
    const std::string book = read_file(kDataDir + "/books/pg11-alice-in-wonderland.txt");
    std::istringstream in(test::read_gz(kDataDir + "/vocab/alice-" + name.toStdString() + ".ids.gz"));
    std::vector<int32_t> want;
    for (int32_t id = 0; in >> id;)
        want.push_back(id);
    QVERIFY(want.size() > 40000);
    const Tokenizer &t = tok(name.toStdString());
    const std::vector<int32_t> got = t.encode(book, false);
    QCOMPARE(got.size(), want.size());
    const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
    QVERIFY2(diff.first == got.end(), qPrintable(QString("first difference at token %1").arg(diff.first - got.begin())));
    QCOMPARE(t.decode(got), book);
}

void TestBpe::special_tokens_on_request()
{
    // Llama 3's chat header: ids as Meta's tokenizer gives them (<|start_header_id|> 128006,
    // "user" 882, <|end_header_id|> 128007, "\n\n" 271, <|eot_id|> 128009).
    const Tokenizer &l3 = tok("llama-bpe");
    QCOMPARE(as_list(l3.encode("<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>", true, true)),
             as_list(concat({{128000, 128006, 882, 128007, 271}, l3.encode("Hello", false), {128009}})));
    // Without parse_special the same text is spelled in ordinary pieces.
    const auto plain = l3.encode("<|eot_id|>", false, false);
    QVERIFY(plain.size() > 1);
    QVERIFY(std::none_of(plain.begin(), plain.end(), [](int32_t id) { return id >= 128000; }));
    QCOMPARE(l3.decode(plain), std::string("<|eot_id|>"));

    // Qwen 2's ChatML: <|im_start|> 151644, <|im_end|> 151645, "user" 872, "\n" 198.
    const Tokenizer &q = tok("qwen2");
    QCOMPARE(as_list(q.encode("<|im_start|>user\nHello world<|im_end|>\n", false, true)),
             as_list(concat({{151644, 872, 198}, q.encode("Hello world", false), {151645, 198}})));
    QCOMPARE(as_list(q.encode("Hello world", false)), QList<int>({9707, 1879})); // from the vectors
    // Specials back to back, at the ends, and the longest match where texts share a prefix.
    QCOMPARE(as_list(q.encode("<|im_end|><|im_start|>", false, true)), QList<int>({151645, 151644}));
    // An unterminated special is text.
    QCOMPARE(q.decode(q.encode("<|im_start", false, true)), std::string("<|im_start"));
}

void TestBpe::special_tokens_sentencepiece()
{
    // Llama 2's sentencepiece vocabulary: "<s>" 1, "</s>" 2; "▁Hello" 15043 (the vectors'
    // "Hello" row), each text fragment with its own dummy prefix as llama.cpp gives it.
    const Tokenizer &t = tok("llama-spm");
    QCOMPARE(as_list(t.encode("Hello", false)), QList<int>({15043}));
    QCOMPARE(as_list(t.encode("<s>Hello</s>", false, true)), QList<int>({1, 15043, 2}));
    const auto plain = t.encode("<s>Hello", false, false);
    QVERIFY(std::find(plain.begin(), plain.end(), 1) == plain.end());
}

void TestBpe::end_of_generation_sets()
{
    auto eog = [&](const char *name) {
        const auto s = tok(name).end_of_generation_ids();
        return QList<int>(s.begin(), s.end());
    };
    // Llama 3 (3.0: 128008 is still a reserved token there): <|end_of_text|> 128001 (EOS),
    // <|eot_id|> 128009.
    QCOMPARE(eog("llama-bpe"), QList<int>({128001, 128009}));
    QVERIFY(tok("llama-bpe").is_end_of_generation(128009));
    QVERIFY(!tok("llama-bpe").is_end_of_generation(128006));
    // Qwen 2: <|endoftext|> 151643 (EOS), <|im_end|> 151645.
    QCOMPARE(eog("qwen2"), QList<int>({151643, 151645}));
    // Phi-3: </s> 2, <|endoftext|> 32000 (EOS), <|end|> 32007.
    QCOMPARE(eog("phi-3"), QList<int>({2, 32000, 32007}));
    QCOMPARE(eog("gpt-2"), QList<int>({50256}));
    QCOMPARE(eog("llama-spm"), QList<int>({2}));
}

void TestBpe::generator_stops_at_end_of_turn()
{
    // The one place generation's end tokens are decided: with none given, the tokenizer's set
    // (and BOS). A sampler forced onto <|eot_id|> ends the sequence at once.
    const Tokenizer &l3 = tok("llama-bpe");
    GenerateRequest req;
    req.max_new_tokens = 8;
    SequenceDecoder d(l3, req, {});
    std::vector<float> logits(size_t(l3.n_vocab()), 0.0f);
    logits[128009] = 100.0f;
    QVERIFY(!d.step(logits, {}, 0, 100));
    QCOMPARE(int(d.result().stop), int(StopReason::EndOfSequence));
    QVERIFY(d.result().tokens.empty());
}

void TestBpe::phi3_extra_unknown_tokens_are_unused()
{
    // Phi-3 types 53 tokens UNKNOWN (its padding); the one named by unknown_token_id (0) stays
    // the unknown token and the vocabulary loads. Nothing encodes to the padding ids.
    const Tokenizer &t = tok("phi-3");
    QCOMPARE(t.n_vocab(), 32064);
    QVERIFY(!t.is_control(0));
    const auto ids = t.encode("hello <|placeholder1|> world \xF0\x9F\x98\x80", false, true);
    QVERIFY(std::none_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 32011; }));
}

void TestBpe::invalid_utf8_is_encoded_byte_by_byte()
{
    // Malformed UTF-8 is never refused: the bytes come back out of decode unchanged where the
    // vocabulary has a token for every byte. (Others lack some: Falcon has no token for 0xFF,
    // StarCoder gives its unknown token, DeepSeek spells some bytes only as user-defined
    // tokens whose text decodes as written - the same in llama.cpp and Hugging Face. Those
    // must still encode without error.)
    std::mt19937 rng(7);
    const std::string sample("ab\xFF\xC3 \xE2\x82", 8);
    for (const char *name : {"deepseek-llm", "deepseek-coder", "falcon", "starcoder", "refact", "mpt"})
        QVERIFY(!tok(name).encode(sample, false).empty());
    for (const char *name : {"llama-bpe", "qwen2", "gpt-2"}) {
        const Tokenizer &t = tok(name);
        for (const std::string &s : {std::string("ab\xFF" "cd"), std::string("\xC3"), std::string("\xE2\x82 x"),
                                     std::string("\xF0\x9F\x98 \x80\x80\x80"), std::string("a\0b", 3)})
            QCOMPARE(QByteArray::fromStdString(t.decode(t.encode(s, false))).toHex(), QByteArray::fromStdString(s).toHex());
        for (int k = 0; k < 50; ++k) {
            std::string s(size_t(rng() % 64), '\0');
            for (char &c : s)
                c = char(rng());
            QCOMPARE(t.decode(t.encode(s, false, true)), s);
        }
    }
}

void TestBpe::pathological_inputs_are_fast()
{
    // One huge word, a huge whitespace run, many newlines, a wall of '<' before specials:
    // each must finish quickly (the merges are a priority queue, the expressions linear).
    const std::vector<std::string> inputs = {
        std::string(200000, 'a'), std::string(200000, ' ') + "x", std::string(100000, '\n'),
        std::string(100000, '<'), std::string(50000, '1'), std::string(30000, '\xE4') + "\xB8\x80",
    };
    for (const char *name : {"llama-bpe", "qwen2", "deepseek-llm", "gpt-2"}) {
        const Tokenizer &t = tok(name);
        for (const std::string &s : inputs) {
            QElapsedTimer timer;
            timer.start();
            const auto ids = t.encode(s, false, true);
            const qint64 ms = timer.elapsed();
            QVERIFY2(ms < 5000, qPrintable(QString("%1: %2 ms for %3 bytes").arg(name).arg(ms).arg(s.size())));
            QCOMPARE(t.decode(ids), s);
        }
    }
}

void TestBpe::streaming_assembles_characters()
{
    // Byte-level tokens split characters ("😀" is several tokens in GPT-2): the stream never
    // emits half a character and ends equal to decode().
    const Tokenizer &t = tok("gpt-2");
    const std::string text = "smile \xF0\x9F\x98\x80 and \xE4\xBD\xA0\xE5\xA5\xBD!";
    const auto ids = t.encode(text, false);
    TokenTextStream stream(t);
    std::string out;
    for (int32_t id : ids) {
        const std::string piece = stream.push(id);
        QVERIFY(QString::fromUtf8(piece.data(), qsizetype(piece.size())).toUtf8() == QByteArray::fromStdString(piece));
        out += piece;
    }
    out += stream.flush();
    QCOMPARE(out, text);
    QCOMPARE(t.decode(ids), text);
}

void TestBpe::hf_tokenizer_json_matches_tokenizers_data()
{
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("ids");
    QTest::addColumn<QByteArray>("decoded");
    const auto j = nlohmann::json::parse(read_file(kDataDir + "/vocab/hf-bpe/expected.json"));
    QVERIFY(j.at("cases").size() >= 30);
    int i = 0;
    for (const auto &c : j.at("cases")) {
        std::vector<int32_t> ids = c.at("ids").get<std::vector<int32_t>>();
        QTest::addRow("%02d", i++) << QByteArray::fromStdString(c.at("text").get<std::string>()) << as_list(ids)
                                   << QByteArray::fromStdString(c.at("decoded").get<std::string>());
    }
}

void TestBpe::hf_tokenizer_json_matches_tokenizers()
{
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, ids);
    QFETCH(QByteArray, decoded);
    static const std::unique_ptr<Tokenizer> t = Tokenizer::load(kDataDir + "/vocab/hf-bpe");
    QCOMPARE(t->kind(), TokenizerKind::Bpe);
    // The `tokenizers` package always splits its added tokens out: parse_special.
    QCOMPARE(as_list(t->encode(text.toStdString(), false, true)), ids);
    QCOMPARE(QByteArray::fromStdString(t->decode(std::vector<int32_t>(ids.begin(), ids.end()))), decoded);
}

void TestBpe::hf_directory_specials()
{
    const auto t = Tokenizer::load(kDataDir + "/vocab/hf-bpe");
    const auto j = nlohmann::json::parse(read_file(kDataDir + "/vocab/hf-bpe/expected.json"));
    QCOMPARE(t->n_vocab(), j.at("vocab_size").get<int>());
    QCOMPARE(t->bos_id(), j.at("bos_id").get<int>());
    QCOMPARE(t->eos_id(), j.at("eos_id").get<int>());
    const auto eog = t->end_of_generation_ids();
    for (int id : j.at("end_ids").get<std::vector<int>>())
        QVERIFY2(t->is_end_of_generation(id), qPrintable(QString::number(id)));
    QVERIFY(!eog.empty());
    QCOMPARE(t->add_bos_default(), j.at("add_bos").get<bool>());
}

QTEST_GUILESS_MAIN(TestBpe)
#include "tst_bpe.moc"
