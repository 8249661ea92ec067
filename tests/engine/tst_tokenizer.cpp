// The tokenizer against libsentencepiece as the truth: the vocabulary embedded in a GGUF file
// must tokenize exactly like the tokenizer.model it was converted from, decode must invert
// encode, and streamed text must equal decoded text without ever splitting a character.

#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "longscope/tokenizer.h"
#include "support/gguf_writer.h"
#include "support/read_file.h"

#include <sentencepiece_processor.h>

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <random>

using namespace longscope;
using longscope::test::read_file;

namespace {

const std::string kDataDir = LONGSCOPE_TEST_DATA;

// Strict UTF-8 check written independently of Utf8Stream: decode each code point and reject
// overlong forms, surrogates and values past U+10FFFF.
bool is_valid_utf8(std::string_view s)
{
    size_t i = 0;
    while (i < s.size()) {
        const auto b0 = static_cast<unsigned char>(s[i]);
        int len = 0;
        uint32_t cp = 0;
        uint32_t min_cp = 0;
        if (b0 < 0x80) {
            ++i;
            continue;
        } else if ((b0 & 0xE0) == 0xC0) {
            len = 2, cp = b0 & 0x1F, min_cp = 0x80;
        } else if ((b0 & 0xF0) == 0xE0) {
            len = 3, cp = b0 & 0x0F, min_cp = 0x800;
        } else if ((b0 & 0xF8) == 0xF0) {
            len = 4, cp = b0 & 0x07, min_cp = 0x10000;
        } else {
            return false;
        }
        if (i + static_cast<size_t>(len) > s.size())
            return false;
        for (int k = 1; k < len; ++k) {
            const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
            if ((b & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (b & 0x3F);
        }
        if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += static_cast<size_t>(len);
    }
    return true;
}

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// About `length` bytes of text from `offset`, moved to character boundaries.
std::string utf8_slice(const std::string &text, size_t offset, size_t length)
{
    size_t begin = std::min(offset, text.size());
    while (begin < text.size() && is_continuation(text[begin]))
        ++begin;
    size_t end = std::min(begin + length, text.size());
    while (end < text.size() && is_continuation(text[end]))
        --end;
    return text.substr(begin, end - begin);
}

QByteArray bytes_of(std::string_view s) { return QByteArray(s.data(), static_cast<qsizetype>(s.size())); }

std::string str_of(const QByteArray &b) { return std::string(b.constData(), static_cast<size_t>(b.size())); }

std::vector<int32_t> with_bos(std::vector<int> ids, int bos)
{
    std::vector<int32_t> out;
    out.push_back(bos);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
}

// Empty when equal; otherwise where the two id lists part, with some context.
QString diff_ids(const std::vector<int32_t> &got, const std::vector<int32_t> &want)
{
    if (got == want)
        return {};
    size_t at = 0;
    while (at < got.size() && at < want.size() && got[at] == want[at])
        ++at;
    const auto window = [at](const std::vector<int32_t> &v) {
        QStringList parts;
        for (size_t i = at > 3 ? at - 3 : 0; i < std::min(v.size(), at + 5); ++i)
            parts << QString::number(v[i]);
        return parts.join(' ');
    };
    return QStringLiteral("ids differ at index %1 (sizes %2 vs %3): got [... %4] want [... %5]")
        .arg(at)
        .arg(got.size())
        .arg(want.size())
        .arg(window(got), window(want));
}

std::vector<int32_t> to_i32(const std::vector<int> &v) { return {v.begin(), v.end()}; }

// Runs f and returns the message of the expected exception type, or a description of what
// happened instead (so a failing check shows it).
template <typename E>
QString message_of(const std::function<void()> &f)
{
    try {
        f();
    } catch (const E &e) {
        return QString::fromStdString(e.what());
    } catch (const std::exception &e) {
        return QStringLiteral("<wrong exception type: %1>").arg(e.what());
    }
    return QStringLiteral("<no exception>");
}

// A minimal llama (sentencepiece) vocabulary written as GGUF, with every tokenizer key
// optional so error cases can remove or damage one.
struct VocabFile {
    std::optional<std::string> model = "llama";
    std::optional<std::vector<std::string>> tokens =
        std::vector<std::string>{"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab"};
    bool tokens_as_ints = false;
    std::optional<std::vector<float>> scores =
        std::vector<float>{0.0f, 0.0f, 0.0f, -1.0f, -2.0f, -3.0f, -0.5f, -0.25f};
    std::optional<std::vector<int32_t>> types = std::vector<int32_t>{2, 3, 3, 1, 1, 1, 1, 1};
    std::optional<int32_t> bos = 1;
    std::optional<int32_t> eos = 2;
    std::optional<int32_t> unk = 0;
    std::optional<bool> add_bos;
    std::optional<bool> add_space_prefix;

    QByteArray bytes() const
    {
        test::GgufWriter w;
        w.add_string("general.architecture", "llama");
        if (model)
            w.add_string("tokenizer.ggml.model", *model);
        if (tokens && tokens_as_ints)
            w.add_i32_array("tokenizer.ggml.tokens", std::vector<int32_t>(tokens->size(), 7));
        else if (tokens)
            w.add_string_array("tokenizer.ggml.tokens", *tokens);
        if (scores)
            w.add_f32_array("tokenizer.ggml.scores", *scores);
        if (types)
            w.add_i32_array("tokenizer.ggml.token_type", *types);
        if (bos)
            w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos));
        if (eos)
            w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*eos));
        if (unk)
            w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(*unk));
        if (add_bos)
            w.add_bool("tokenizer.ggml.add_bos_token", *add_bos);
        if (add_space_prefix)
            w.add_bool("tokenizer.ggml.add_space_prefix", *add_space_prefix);
        return bytes_of(w.bytes());
    }
};

VocabFile vocab_with(const std::function<void(VocabFile &)> &change)
{
    VocabFile v;
    change(v);
    return v;
}

struct CorpusEntry {
    QByteArray name;
    std::string text;
};

constexpr std::array<const char *, 2> kPairs = {"llama2", "stories260K"};

} // namespace

class TestTokenizer : public QObject {
    Q_OBJECT

private:
    // One vocabulary in its two forms, plus libsentencepiece on the .model file as the truth.
    struct Pair {
        sentencepiece::SentencePieceProcessor sp;
        std::unique_ptr<Tokenizer> from_gguf;
        std::unique_ptr<Tokenizer> from_model;
    };

    Pair &pair(const QString &name) { return name == QLatin1String("llama2") ? m_llama2 : m_stories; }
    void add_corpus_rows(bool valid_utf8_only);
    std::string write_temp(const QByteArray &bytes, const QString &name);
    std::unique_ptr<Tokenizer> tokenizer_from_bytes(const QByteArray &gguf_bytes);

    Pair m_llama2;
    Pair m_stories;
    std::vector<CorpusEntry> m_corpus;
    QTemporaryDir m_tmp;

private slots:
    void initTestCase();

    void special_tokens_and_defaults_data();
    void special_tokens_and_defaults();

    void known_ids_data();
    void known_ids();

    void encode_matches_sentencepiece_data();
    void encode_matches_sentencepiece();

    void decode_inverts_encode_data();
    void decode_inverts_encode();

    void token_bytes_match_sentencepiece_decode_data();
    void token_bytes_match_sentencepiece_decode();
    void piece_types_from_gguf();
    void gguf_flags_are_honoured();

    void streaming_matches_decode_data();
    void streaming_matches_decode();
    void streaming_handmade_sequences_data();
    void streaming_handmade_sequences();
    void streaming_random_token_sequences();

    void utf8_stream_cases_data();
    void utf8_stream_cases();
    void utf8_stream_matches_sentencepiece_on_random_bytes();

    void gguf_errors_data();
    void gguf_errors();
    void sentencepiece_file_errors_data();
    void sentencepiece_file_errors();
    void out_of_range_ids();
};

void TestTokenizer::initTestCase()
{
    QVERIFY(m_tmp.isValid());
    const std::array<std::pair<std::string, std::string>, 2> files = {{
        {kDataDir + "/llama2-tokenizer/tokenizer.model", kDataDir + "/llama2-tokenizer/llama2-vocab.gguf"},
        {kDataDir + "/stories260K/tok512.model", LONGSCOPE_BUNDLED_MODEL},
    }};
    for (size_t i = 0; i < files.size(); ++i) {
        Pair &p = pair(QLatin1String(kPairs[i]));
        const auto status = p.sp.Load(files[i].first);
        QVERIFY2(status.ok(), status.ToString().c_str());
        try {
            p.from_model = Tokenizer::from_sentencepiece_file(files[i].first);
            const auto gguf = GgufFile::open(files[i].second);
            p.from_gguf = Tokenizer::from_gguf(*gguf);
        } catch (const std::exception &e) {
            QFAIL(e.what());
        }
    }

    const auto add = [this](const char *name, std::string text) {
        m_corpus.push_back({QByteArray(name), std::move(text)});
    };
    add("ascii", "The quick brown fox jumps over the lazy dog.");
    add("known_llama2", "Hello world, 你好 ünïcode  two  spaces");
    add("known_stories", "Once upon a time, there was a little girl named Lily.");
    add("cjk", "日本語のテキストと中文文本，还有한국어 문장입니다。");
    add("emoji", "Smile 😀 party 🎉 rocket 🚀!");
    add("emoji_zwj", "Family 👨‍👩‍👧‍👦, rainbow 🏳️‍🌈, coder 👩🏽‍💻, flag 🇫🇷");
    add("combining_marks", "e\xCC\x81 a\xCC\x88 n\xCC\x83 Z\xCC\xA4\xCD\x82 \xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7");
    add("mixed_scripts", "Ünïcödé Ελληνικά русский עברית العربية हिन्दी ไทย");
    add("astral_and_private", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \xEE\x80\x80 \xF4\x8F\xBF\xBD end");
    add("digits_punct", "3.14159, 2+2=4; x_y-z/(w)!? \"quoted\" 'single' <tag> {b} [c] #h @a ~`^|\\");
    add("space_runs", "a  b   c    d     e          f");
    add("leading_trailing_spaces", "   leading and trailing   ");
    add("tabs", "\tcol1\tcol2\t\tcol4\t");
    add("newlines", "line1\nline2\n\nline4\n");
    add("crlf", "line1\r\nline2\r\n\r\n");
    add("control_chars", "bell\x07 esc\x1B[0m del\x7F vt\x0B ff\x0C nul-free\x01\x1F");
    add("empty", "");
    add("lone_space", " ");
    add("only_spaces", "    ");
    add("lone_newline", "\n");
    add("invalid_ff", "\xFF");
    add("invalid_c3_paren", "\xC3(");
    add("truncated_4byte_end", "abc\xF0\x9F\x98");
    add("truncated_4byte_mid", "x\xF0\x9F\x98 tail");
    add("surrogate", "s\xED\xA0\x80s");
    add("overlong", "o\xC0\xAF\xE0\x80\xAFo");
    add("lone_continuations", "\x80\xBF middle \x80");
    {
        // NUL-free binary junk from a fixed seed.
        std::mt19937 rng(1234);
        std::string junk;
        for (int i = 0; i < 600; ++i)
            junk.push_back(static_cast<char>(1 + rng() % 255));
        add("binary_junk", junk);
    }
    for (const char *book : {"pg11-alice-in-wonderland.txt", "pg98-a-tale-of-two-cities.txt"}) {
        const std::string text = read_file(kDataDir + "/books/" + book);
        QVERIFY2(text.size() > 20000, book);
        const std::array<double, 3> starts = {0.0, 0.43, 0.87};
        for (size_t i = 0; i < starts.size(); ++i) {
            const auto offset = static_cast<size_t>(starts[i] * static_cast<double>(text.size()));
            const std::string name = std::string(book).substr(0, 4) + "_page" + std::to_string(i);
            m_corpus.push_back({QByteArray::fromStdString(name), utf8_slice(text, offset, 4000)});
        }
    }
}

void TestTokenizer::add_corpus_rows(bool valid_utf8_only)
{
    QTest::addColumn<QString>("pair");
    QTest::addColumn<QByteArray>("text");
    for (const char *p : kPairs) {
        for (const CorpusEntry &e : m_corpus) {
            if (valid_utf8_only && !is_valid_utf8(e.text))
                continue;
            QTest::addRow("%s/%s", p, e.name.constData()) << QString::fromLatin1(p) << bytes_of(e.text);
        }
    }
}

std::string TestTokenizer::write_temp(const QByteArray &bytes, const QString &name)
{
    const QString path = m_tmp.filePath(name);
    std::ofstream out(path.toStdString(), std::ios::binary | std::ios::trunc);
    out.write(bytes.constData(), bytes.size());
    return path.toStdString();
}

std::unique_ptr<Tokenizer> TestTokenizer::tokenizer_from_bytes(const QByteArray &gguf_bytes)
{
    const auto gguf = GgufFile::open(write_temp(gguf_bytes, QStringLiteral("vocab.gguf")));
    return Tokenizer::from_gguf(*gguf);
}

void TestTokenizer::special_tokens_and_defaults_data()
{
    QTest::addColumn<QString>("pair");
    QTest::addColumn<int>("n_vocab");
    QTest::newRow("llama2") << QStringLiteral("llama2") << 32000;
    QTest::newRow("stories260K") << QStringLiteral("stories260K") << 512;
}

void TestTokenizer::special_tokens_and_defaults()
{
    QFETCH(QString, pair);
    QFETCH(int, n_vocab);
    Pair &p = this->pair(pair);
    for (const Tokenizer *tok : {p.from_gguf.get(), p.from_model.get()}) {
        QCOMPARE(tok->n_vocab(), n_vocab);
        QCOMPARE(tok->bos_id(), p.sp.bos_id());
        QCOMPARE(tok->eos_id(), p.sp.eos_id());
        QCOMPARE(tok->bos_id(), 1);
        QCOMPARE(tok->eos_id(), 2);
        QVERIFY(tok->add_bos_default());
        QVERIFY(tok->add_dummy_prefix());
        QVERIFY(tok->is_control(1));
        QVERIFY(tok->is_control(2));
        QVERIFY(!tok->is_control(0));
        QVERIFY(tok->is_byte(3));
        QCOMPARE(tok->piece(3), std::string("<0x00>"));
        QVERIFY(!tok->is_control(-1));
        QVERIFY(!tok->is_control(n_vocab));
        QVERIFY(!tok->is_byte(n_vocab));
        for (int id = 0; id < n_vocab; ++id) {
            if (tok->piece(id) != p.sp.IdToPiece(id))
                QFAIL(qPrintable(QStringLiteral("piece %1 differs").arg(id)));
        }
    }
}

void TestTokenizer::known_ids_data()
{
    QTest::addColumn<QString>("pair");
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("ids");
    QTest::newRow("llama2") << QStringLiteral("llama2")
                            << QByteArray("Hello world, 你好 ünïcode  two  spaces")
                            << QList<int>{15043, 3186, 29892, 29871, 30919, 31076, 2505,
                                          29876, 30085, 401, 29871, 1023, 29871, 8162};
    QTest::newRow("stories260K") << QStringLiteral("stories260K")
                                 << QByteArray("Once upon a time, there was a little girl named Lily.")
                                 << QList<int>{403, 407, 261, 378, 432, 383, 286, 261,
                                               376, 298, 315, 421, 395, 317, 426};
}

void TestTokenizer::known_ids()
{
    QFETCH(QString, pair);
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, ids);
    const std::vector<int32_t> want(ids.begin(), ids.end());
    Pair &p = this->pair(pair);
    const std::string s = str_of(text);
    for (const Tokenizer *tok : {p.from_gguf.get(), p.from_model.get()}) {
        const QString d = diff_ids(tok->encode(s, false), want);
        QVERIFY2(d.isEmpty(), qPrintable(d));
        std::vector<int32_t> bos_want = want;
        bos_want.insert(bos_want.begin(), 1);
        const QString db = diff_ids(tok->encode(s, true), bos_want);
        QVERIFY2(db.isEmpty(), qPrintable(db));
        QCOMPARE(bytes_of(tok->decode(want)), text);
    }
}

void TestTokenizer::encode_matches_sentencepiece_data() { add_corpus_rows(false); }

void TestTokenizer::encode_matches_sentencepiece()
{
    QFETCH(QString, pair);
    QFETCH(QByteArray, text);
    Pair &p = this->pair(pair);
    const std::string s = str_of(text);
    std::vector<int> truth;
    QVERIFY(p.sp.Encode(s, &truth).ok());
    for (const Tokenizer *tok : {p.from_gguf.get(), p.from_model.get()}) {
        const QString plain = diff_ids(tok->encode(s, false), to_i32(truth));
        QVERIFY2(plain.isEmpty(), qPrintable(plain));
        const QString bos = diff_ids(tok->encode(s, true), with_bos(truth, p.sp.bos_id()));
        QVERIFY2(bos.isEmpty(), qPrintable(bos));
    }
}

void TestTokenizer::decode_inverts_encode_data() { add_corpus_rows(false); }

void TestTokenizer::decode_inverts_encode()
{
    QFETCH(QString, pair);
    QFETCH(QByteArray, text);
    Pair &p = this->pair(pair);
    const std::string s = str_of(text);
    // Valid text comes back unchanged; invalid bytes come back as sentencepiece renders them
    // (its normaliser turns each into U+FFFD).
    const QByteArray want = is_valid_utf8(s) ? text : bytes_of(p.sp.DecodeIds(p.sp.EncodeAsIds(s)));
    for (const Tokenizer *tok : {p.from_gguf.get(), p.from_model.get()}) {
        QCOMPARE(bytes_of(tok->decode(tok->encode(s, false))), want);
        QCOMPARE(bytes_of(tok->decode(tok->encode(s, true))), want);
    }
}

void TestTokenizer::token_bytes_match_sentencepiece_decode_data()
{
    QTest::addColumn<QString>("pair");
    for (const char *p : kPairs)
        QTest::newRow(p) << QString::fromLatin1(p);
}

void TestTokenizer::token_bytes_match_sentencepiece_decode()
{
    QFETCH(QString, pair);
    Pair &p = this->pair(pair);
    // After a visible byte token, sentencepiece's Decode renders each following token as it
    // appears in the middle of a text: that is what token_bytes must give.
    const int anchor = p.sp.PieceToId("<0x41>");
    const std::string anchor_text = p.sp.DecodeIds({anchor});
    QCOMPARE(anchor_text, std::string("A"));
    for (const Tokenizer *tok : {p.from_gguf.get(), p.from_model.get()}) {
        for (int id = 0; id < tok->n_vocab(); ++id) {
            if (p.sp.IsByte(id)) {
                // A lone byte decodes as U+FFFD when it is not ASCII; the stream needs the byte.
                const std::string &piece = p.sp.IdToPiece(id);
                const auto byte = static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
                QCOMPARE(tok->token_bytes(id), std::string(1, byte));
                continue;
            }
            const std::string want = p.sp.DecodeIds({anchor, id}).substr(anchor_text.size());
            if (tok->token_bytes(id) != want)
                QFAIL(qPrintable(QStringLiteral("token %1 '%2': token_bytes '%3', sentencepiece '%4'")
                                     .arg(id)
                                     .arg(QString::fromStdString(p.sp.IdToPiece(id)),
                                          QString::fromStdString(tok->token_bytes(id)),
                                          QString::fromStdString(want))));
        }
    }
}

void TestTokenizer::piece_types_from_gguf()
{
    // The stories260K vocabulary with one piece marked unused, one user-defined, and two added
    // pieces: the token types must reach sentencepiece (user-defined pieces match whole, control
    // pieces are never produced from text) and token_bytes must agree with its Decode.
    Pair &p = m_stories;
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    for (int id = 0; id < p.sp.GetPieceSize(); ++id) {
        tokens.push_back(p.sp.IdToPiece(id));
        scores.push_back(p.sp.GetScore(id));
        types.push_back(p.sp.IsUnknown(id) ? 2 : p.sp.IsControl(id) ? 3 : p.sp.IsByte(id) ? 6 : 1);
    }
    const int unused = p.sp.PieceToId("\xE2\x96\x81the");
    const int user = p.sp.PieceToId("\xE2\x96\x81" "a");
    QVERIFY(unused > 2 && user > 2 && unused != user);
    types[static_cast<size_t>(unused)] = 5;
    types[static_cast<size_t>(user)] = 4;
    const auto im_start = static_cast<int32_t>(tokens.size());
    tokens.push_back("<|im_start|>");
    scores.push_back(0.0f);
    types.push_back(4);
    const auto ctl = static_cast<int32_t>(tokens.size());
    tokens.push_back("<ctl>");
    scores.push_back(0.0f);
    types.push_back(3);

    const VocabFile v = vocab_with([&](VocabFile &f) {
        f.tokens = tokens;
        f.scores = scores;
        f.types = types;
    });
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = tokenizer_from_bytes(v.bytes());
    } catch (const std::exception &e) {
        QFAIL(e.what());
    }
    QCOMPARE(tok->n_vocab(), static_cast<int>(tokens.size()));
    QVERIFY(tok->is_control(ctl));
    QVERIFY(!tok->is_control(im_start));

    const std::vector<int32_t> ids = tok->encode("x <|im_start|>y <ctl>", false);
    QVERIFY(std::find(ids.begin(), ids.end(), im_start) != ids.end());
    QVERIFY(std::find(ids.begin(), ids.end(), ctl) == ids.end());
    QVERIFY(std::find(ids.begin(), ids.end(), unused) == ids.end());
    QCOMPARE(bytes_of(tok->decode(ids)), QByteArray("x <|im_start|>y <ctl>"));

    const int32_t anchor = p.sp.PieceToId("<0x41>");
    for (int32_t id = 0; id < tok->n_vocab(); ++id) {
        if (tok->is_byte(id))
            continue;
        const std::string want = tok->decode(std::vector<int32_t>{anchor, id}).substr(1);
        QCOMPARE(tok->token_bytes(id), want);
    }
    QCOMPARE(tok->token_bytes(unused), std::string(" the"));
    QCOMPARE(tok->token_bytes(user), std::string(" a"));
    QCOMPARE(tok->token_bytes(ctl), std::string());
    QCOMPARE(tok->token_bytes(0), std::string(" \xE2\x81\x87 "));
}

void TestTokenizer::gguf_flags_are_honoured()
{
    // Defaults: add_bos and the dummy prefix are on when the keys are absent.
    const auto dflt = tokenizer_from_bytes(VocabFile().bytes());
    QVERIFY(dflt->add_bos_default());
    QVERIFY(dflt->add_dummy_prefix());
    QCOMPARE(dflt->n_vocab(), 8);
    QCOMPARE(dflt->encode("a", false), (std::vector<int32_t>{6}));   // "▁a"
    QCOMPARE(dflt->encode("ab", true), (std::vector<int32_t>{1, 3, 7})); // <s> "▁" "ab": the better-scored merge wins

    const auto off = tokenizer_from_bytes(vocab_with([](VocabFile &f) {
                                              f.add_bos = false;
                                              f.add_space_prefix = false;
                                          }).bytes());
    QVERIFY(!off->add_bos_default());
    QVERIFY(!off->add_dummy_prefix());
    QCOMPARE(off->encode("ab", false), (std::vector<int32_t>{7})); // "ab", no "▁"
    QCOMPARE(off->decode(std::vector<int32_t>{3, 7}), std::string(" ab"));

    // No token_type array: pieces default to normal, and the named unknown id becomes the
    // unknown piece sentencepiece requires. A character outside the vocabulary maps to it.
    const auto untyped = tokenizer_from_bytes(vocab_with([](VocabFile &f) {
                                                  f.types.reset();
                                                  f.scores.reset();
                                              }).bytes());
    QCOMPARE(untyped->encode("z", false), (std::vector<int32_t>{3, 0}));
    QCOMPARE(untyped->token_bytes(0), std::string(" \xE2\x81\x87 "));
    QCOMPARE(untyped->bos_id(), 1);
    QCOMPARE(untyped->eos_id(), 2);
}

void TestTokenizer::streaming_matches_decode_data() { add_corpus_rows(false); }

void TestTokenizer::streaming_matches_decode()
{
    QFETCH(QString, pair);
    QFETCH(QByteArray, text);
    Pair &p = this->pair(pair);
    const std::string s = str_of(text);
    for (const Tokenizer *tok : {p.from_gguf.get(), p.from_model.get()}) {
        for (const bool bos : {false, true}) {
            const std::vector<int32_t> ids = tok->encode(s, bos);
            TokenTextStream stream(*tok);
            std::string streamed;
            for (int32_t id : ids) {
                const std::string chunk = stream.push(id);
                QVERIFY2(is_valid_utf8(chunk), qPrintable(QStringLiteral("chunk for id %1 is not valid UTF-8").arg(id)));
                streamed += chunk;
            }
            streamed += stream.flush();
            // sentencepiece drops the dummy-prefix space of the first piece; the stream keeps
            // it (a continuation needs it).
            std::string want = p.sp.DecodeIds(std::vector<int>(ids.begin(), ids.end()));
            const auto first = std::find_if(ids.begin(), ids.end(), [&](int32_t id) { return !tok->is_control(id); });
            if (first != ids.end() && p.sp.IdToPiece(*first).starts_with("\xE2\x96\x81"))
                want.insert(0, " ");
            QCOMPARE(bytes_of(streamed), bytes_of(want));
        }
    }
}

void TestTokenizer::streaming_handmade_sequences_data()
{
    QTest::addColumn<QStringList>("pieces");
    QTest::addColumn<QByteArray>("expected");
    const QByteArray fffd("\xEF\xBF\xBD");
    QTest::newRow("split_cjk") << QStringList{"<0xE4>", "<0xBD>", "<0xA0>"} << QByteArray("你");
    QTest::newRow("truncated_then_text") << QStringList{"<0xE4>", "<0xBD>", "a"} << fffd + fffd + "a";
    QTest::newRow("invalid_ff") << QStringList{"<0xFF>"} << fffd;
    QTest::newRow("truncated_at_end") << QStringList{"a", "<0xF0>", "<0x9F>", "<0x98>"} << "a" + fffd + fffd + fffd;
    QTest::newRow("control_breaks_byte_run")
        << QStringList{"<0xE4>", "</s>", "<0xBD>", "<0xA0>"} << fffd + fffd + fffd;
    QTest::newRow("unknown_mid_text") << QStringList{"a", "<unk>", "b"} << QByteArray("a \xE2\x81\x87 b");
    QTest::newRow("unknown_first") << QStringList{"<unk>", "\xE2\x96\x81" "b"} << QByteArray(" \xE2\x81\x87  b");
    QTest::newRow("bos_then_word") << QStringList{"<s>", "\xE2\x96\x81Hello"} << QByteArray(" Hello");
    QTest::newRow("byte_then_word") << QStringList{"<0x41>", "\xE2\x96\x81Hello"} << QByteArray("A Hello");
    QTest::newRow("emoji_bytes_then_space")
        << QStringList{"<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "\xE2\x96\x81"} << QByteArray("😀 ");
}

void TestTokenizer::streaming_handmade_sequences()
{
    QFETCH(QStringList, pieces);
    QFETCH(QByteArray, expected);
    Pair &p = m_llama2;
    std::vector<int> ids;
    for (const QString &piece : pieces) {
        const int id = p.sp.PieceToId(piece.toStdString());
        QVERIFY2(p.sp.IdToPiece(id) == piece.toStdString(), qPrintable(piece));
        ids.push_back(id);
    }
    for (const Tokenizer *tok : {p.from_gguf.get(), p.from_model.get()}) {
        TokenTextStream stream(*tok);
        std::string streamed;
        for (int id : ids) {
            const std::string chunk = stream.push(id);
            QVERIFY(is_valid_utf8(chunk));
            streamed += chunk;
        }
        streamed += stream.flush();
        QCOMPARE(bytes_of(streamed), expected);
        // The same sequence decoded at once, with the leading dummy space the stream keeps.
        std::string decoded = tok->decode(std::vector<int32_t>(ids.begin(), ids.end()));
        QCOMPARE(decoded, p.sp.DecodeIds(ids));
        if (bytes_of(decoded) != expected)
            decoded.insert(0, " ");
        QCOMPARE(bytes_of(decoded), expected);
    }
}

void TestTokenizer::streaming_random_token_sequences()
{
    // Random mixes of byte tokens (lead, continuation and invalid bytes), control, unknown and
    // plain tokens: the stream must equal sentencepiece's Decode every time.
    Pair &p = m_llama2;
    const Tokenizer &tok = *p.from_gguf;
    std::vector<int> pool;
    for (const char *b : {"<0xE4>", "<0xBD>", "<0xA0>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0xC3>",
                          "<0xA9>", "<0xED>", "<0xE0>", "<0xFF>", "<0x41>", "<0xC0>", "<0xF4>", "<0x8F>"})
        pool.push_back(p.sp.PieceToId(b));
    for (const char *piece : {"<s>", "</s>", "<unk>", "a", "\xE2\x96\x81", "\xE2\x96\x81the", "你"})
        pool.push_back(p.sp.PieceToId(piece));
    std::mt19937 rng(42);
    for (int round = 0; round < 3000; ++round) {
        std::vector<int> ids(1 + rng() % 10);
        for (int &id : ids)
            id = pool[rng() % pool.size()];
        TokenTextStream stream(tok);
        std::string streamed;
        for (int id : ids) {
            const std::string chunk = stream.push(id);
            QVERIFY(is_valid_utf8(chunk));
            streamed += chunk;
        }
        streamed += stream.flush();
        std::string want = p.sp.DecodeIds(ids);
        const auto first = std::find_if(ids.begin(), ids.end(), [&](int id) { return !tok.token_bytes(id).empty(); });
        if (first != ids.end() && !tok.is_byte(*first) && p.sp.IdToPiece(*first).starts_with("\xE2\x96\x81"))
            want.insert(0, " ");
        if (streamed != want) {
            QStringList names;
            for (int id : ids)
                names << QString::fromStdString(p.sp.IdToPiece(id));
            QFAIL(qPrintable(QStringLiteral("sequence %1: stream %2, sentencepiece %3")
                                 .arg(names.join(' '), QString::fromLatin1(bytes_of(streamed).toHex(' ')),
                                      QString::fromLatin1(bytes_of(want).toHex(' ')))));
        }
    }
}

void TestTokenizer::utf8_stream_cases_data()
{
    QTest::addColumn<QByteArrayList>("chunks");
    QTest::addColumn<QByteArrayList>("outputs");
    QTest::addColumn<QByteArray>("flushed");
    const QByteArray r("\xEF\xBF\xBD");
    QTest::newRow("emoji_byte_by_byte") << QByteArrayList{"\xF0", "\x9F", "\x98", "\x80"}
                                        << QByteArrayList{"", "", "", "\xF0\x9F\x98\x80"} << QByteArray();
    QTest::newRow("ascii_passes_through") << QByteArrayList{"abc", "", "d"} << QByteArrayList{"abc", "", "d"}
                                          << QByteArray();
    QTest::newRow("split_across_chunks") << QByteArrayList{"ab\xE4", "\xBD\xA0" "c"}
                                         << QByteArrayList{"ab", "\xE4\xBD\xA0" "c"} << QByteArray();
    QTest::newRow("invalid_ff") << QByteArrayList{"\xFF"} << QByteArrayList{r} << QByteArray();
    QTest::newRow("lone_continuation") << QByteArrayList{"\x80x"} << QByteArrayList{r + "x"} << QByteArray();
    QTest::newRow("truncated_then_ascii") << QByteArrayList{"\xE4\xBD", "a"} << QByteArrayList{"", r + r + "a"}
                                          << QByteArray();
    QTest::newRow("flush_incomplete_tail") << QByteArrayList{"ok\xF0\x9F\x98"} << QByteArrayList{"ok"}
                                           << r + r + r;
    QTest::newRow("flush_lone_lead") << QByteArrayList{"\xC3"} << QByteArrayList{""} << r;
    // Prefixes that can never become a character are replaced at once, without waiting.
    QTest::newRow("overlong_c0") << QByteArrayList{"\xC0\xAF"} << QByteArrayList{r + r} << QByteArray();
    QTest::newRow("overlong_e0") << QByteArrayList{"\xE0\x80"} << QByteArrayList{r + r} << QByteArray();
    QTest::newRow("surrogate") << QByteArrayList{"\xED\xA0"} << QByteArrayList{r + r} << QByteArray();
    QTest::newRow("past_10ffff") << QByteArrayList{"\xF4\x90", "\xF5"} << QByteArrayList{r + r, r} << QByteArray();
    QTest::newRow("max_code_point") << QByteArrayList{"\xF4\x8F", "\xBF\xBF"}
                                    << QByteArrayList{"", "\xF4\x8F\xBF\xBF"} << QByteArray();
}

void TestTokenizer::utf8_stream_cases()
{
    QFETCH(QByteArrayList, chunks);
    QFETCH(QByteArrayList, outputs);
    QFETCH(QByteArray, flushed);
    QCOMPARE(chunks.size(), outputs.size());
    Utf8Stream stream;
    for (qsizetype i = 0; i < chunks.size(); ++i)
        QCOMPARE(bytes_of(stream.push(str_of(chunks[i]))), outputs[i]);
    QCOMPARE(stream.pending(), !flushed.isEmpty());
    QCOMPARE(bytes_of(stream.flush()), flushed);
    QVERIFY(!stream.pending());
    QCOMPARE(bytes_of(stream.flush()), QByteArray());
}

void TestTokenizer::utf8_stream_matches_sentencepiece_on_random_bytes()
{
    // Byte sequences biased towards lead and continuation bytes, fed in random chunks: the
    // stream must render them exactly as sentencepiece decodes the same byte tokens.
    Pair &p = m_llama2;
    const std::array<uint8_t, 20> interesting = {0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xC3,
                                                 0xDF, 0xE0, 0xE4, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xF8, 0xFF};
    std::mt19937 rng(7);
    for (int round = 0; round < 3000; ++round) {
        std::string bytes(1 + rng() % 12, '\0');
        for (char &c : bytes)
            c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : interesting[rng() % interesting.size()]);
        std::vector<int> ids;
        for (char c : bytes) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(static_cast<uint8_t>(c)));
            ids.push_back(p.sp.PieceToId(name));
        }
        const std::string want = p.sp.DecodeIds(ids);
        Utf8Stream stream;
        std::string got;
        for (size_t at = 0; at < bytes.size();) {
            const size_t n = std::min(bytes.size() - at, static_cast<size_t>(1 + rng() % 4));
            const std::string chunk = stream.push(std::string_view(bytes).substr(at, n));
            QVERIFY(is_valid_utf8(chunk));
            got += chunk;
            at += n;
        }
        got += stream.flush();
        if (got != want)
            QFAIL(qPrintable(QStringLiteral("bytes %1: stream %2, sentencepiece %3")
                                 .arg(QString::fromLatin1(bytes_of(bytes).toHex(' ')),
                                      QString::fromLatin1(bytes_of(got).toHex(' ')),
                                      QString::fromLatin1(bytes_of(want).toHex(' ')))));
    }
}

void TestTokenizer::gguf_errors_data()
{
    QTest::addColumn<QByteArray>("file");
    QTest::addColumn<QString>("message");
    QTest::newRow("bert_model") << vocab_with([](VocabFile &f) { f.model = "bert"; }).bytes()
                                << QStringLiteral("unsupported tokenizer model 'bert'");
    // A BPE vocabulary needs merges (tst_bpe tests real ones).
    QTest::newRow("gpt2_model_without_merges") << vocab_with([](VocabFile &f) { f.model = "gpt2"; }).bytes()
                                               << QStringLiteral("tokenizer.ggml.merges is missing");
    QTest::newRow("no_tokenizer_model") << vocab_with([](VocabFile &f) { f.model.reset(); }).bytes()
                                        << QStringLiteral("tokenizer.ggml.model is missing");
    QTest::newRow("no_tokens") << vocab_with([](VocabFile &f) { f.tokens.reset(); }).bytes()
                               << QStringLiteral("tokenizer.ggml.tokens is missing");
    QTest::newRow("tokens_not_strings") << vocab_with([](VocabFile &f) { f.tokens_as_ints = true; }).bytes()
                                        << QStringLiteral("not an array of strings");
    QTest::newRow("empty_vocab") << vocab_with([](VocabFile &f) {
        f.tokens = std::vector<std::string>{};
        f.scores.reset();
        f.types.reset();
        f.bos.reset();
        f.eos.reset();
        f.unk.reset();
    }).bytes() << QStringLiteral("tokenizer.ggml.tokens is empty");
    QTest::newRow("scores_too_short") << vocab_with([](VocabFile &f) { f.scores->pop_back(); }).bytes()
                                      << QStringLiteral("tokenizer.ggml.scores has 7 entries but tokenizer.ggml.tokens has 8");
    QTest::newRow("types_too_long") << vocab_with([](VocabFile &f) { f.types->push_back(1); }).bytes()
                                    << QStringLiteral("tokenizer.ggml.token_type has 9 entries");
    QTest::newRow("bad_token_type") << vocab_with([](VocabFile &f) { (*f.types)[4] = 9; }).bytes()
                                    << QStringLiteral("tokenizer.ggml.token_type[4]");
    QTest::newRow("bos_out_of_range") << vocab_with([](VocabFile &f) { f.bos = 8; }).bytes()
                                      << QStringLiteral("tokenizer.ggml.bos_token_id is 8");
    QTest::newRow("unk_out_of_range") << vocab_with([](VocabFile &f) { f.unk = 1000; }).bytes()
                                      << QStringLiteral("tokenizer.ggml.unknown_token_id is 1000");
    QTest::newRow("duplicate_piece") << vocab_with([](VocabFile &f) { (*f.tokens)[5] = "a"; }).bytes()
                                     << QStringLiteral("sentencepiece rejects");
    QTest::newRow("empty_piece") << vocab_with([](VocabFile &f) { (*f.tokens)[5] = ""; }).bytes()
                                 << QStringLiteral("sentencepiece rejects");
    QTest::newRow("no_unknown_piece") << vocab_with([](VocabFile &f) {
        (*f.types)[0] = 1;
        f.unk.reset();
    }).bytes() << QStringLiteral("sentencepiece rejects");
    QTest::newRow("partial_byte_fallback") << vocab_with([](VocabFile &f) {
        (*f.tokens)[5] = "<0x41>";
        (*f.types)[5] = 6;
    }).bytes() << QStringLiteral("sentencepiece rejects");
}

void TestTokenizer::gguf_errors()
{
    QFETCH(QByteArray, file);
    QFETCH(QString, message);
    const std::string path = write_temp(file, QStringLiteral("bad-vocab.gguf"));
    std::unique_ptr<GgufFile> gguf;
    try {
        gguf = GgufFile::open(path);
    } catch (const std::exception &e) {
        QFAIL(qPrintable(QStringLiteral("the test file itself is broken: %1").arg(e.what())));
    }
    QVERIFY_THROWS_EXCEPTION(FormatError, Tokenizer::from_gguf(*gguf));
    const QString what = message_of<FormatError>([&] { Tokenizer::from_gguf(*gguf); });
    QVERIFY2(what.contains(message), qPrintable(what));
    QVERIFY2(what.contains(QString::fromStdString(path)), qPrintable(what));
}

void TestTokenizer::sentencepiece_file_errors_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QByteArray>("contents"); // null: do not create the file
    QTest::addColumn<bool>("io_error");       // IoError, else FormatError
    QTest::addColumn<QString>("says");        // what the message holds besides the path
    QTest::newRow("missing") << QStringLiteral("missing.model") << QByteArray() << true << QString();
    QTest::newRow("directory") << QStringLiteral("a-directory") << QByteArray() << true << QString();
    static const char garbage[] = "this is not a sentencepiece model\n\xFF\xFE\x00\x01";
    QTest::newRow("garbage") << QStringLiteral("garbage.model")
                             << QByteArray(garbage, sizeof garbage - 1) << false << QString();
    QTest::newRow("empty") << QStringLiteral("empty.model") << QByteArray("") << false << QString();
    QTest::newRow("gguf_instead") << QStringLiteral("vocab.gguf-as.model") << VocabFile().bytes() << false
                                  << QString();
    // tok512.model made a unigram model (a second trainer_spec merges in model_type 1) with one
    // more piece "\0x" of type normal, hand-encoded in protobuf's wire format. sentencepiece
    // builds its trie from C strings: the piece has length zero there, and the exception it
    // throws from inside its loader ended the process (found by fuzz_sp_model).
    QByteArray nul_piece = QByteArray::fromStdString(read_file(kDataDir + "/stories260K/tok512.model"));
    nul_piece += QByteArray("\x12\x02\x18\x01", 4);                 // trainer_spec { model_type: 1 }
    nul_piece += QByteArray("\x0a\x06\x0a\x02\x00x\x18\x01", 8);     // pieces { piece: "\0x" type: 1 }
    QTest::newRow("piece_with_nul") << QStringLiteral("nul-piece.model") << nul_piece << false
                                    << QStringLiteral("piece 512 holds a NUL byte");
}

void TestTokenizer::sentencepiece_file_errors()
{
    QFETCH(QString, name);
    QFETCH(QByteArray, contents);
    QFETCH(bool, io_error);
    QFETCH(QString, says);
    std::string path = m_tmp.filePath(name).toStdString();
    if (name == QLatin1String("a-directory"))
        QVERIFY(QDir(m_tmp.path()).mkpath(name));
    else if (!contents.isNull())
        path = write_temp(contents, name);
    const auto load = [&] { Tokenizer::from_sentencepiece_file(path); };
    const QString what = io_error ? message_of<IoError>(load) : message_of<FormatError>(load);
    QVERIFY2(!what.startsWith('<'), qPrintable(what));
    QVERIFY2(what.contains(QString::fromStdString(path)), qPrintable(what));
    QVERIFY2(what.contains(says), qPrintable(what));
    QVERIFY_THROWS_EXCEPTION(Error, load());
}

void TestTokenizer::out_of_range_ids()
{
    const Tokenizer &tok = *m_stories.from_gguf;
    const int n = tok.n_vocab();
    for (int32_t bad : {-1, n, n + 1000, std::numeric_limits<int32_t>::min()}) {
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, tok.decode(std::vector<int32_t>{1, 300, bad}));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, tok.token_bytes(bad));
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, tok.piece(bad));
        TokenTextStream stream(tok);
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, stream.push(bad));
        QVERIFY(!tok.is_control(bad));
        QVERIFY(!tok.is_byte(bad));
    }
    QCOMPARE(tok.decode(std::vector<int32_t>{}), std::string());
    QVERIFY(tok.encode("", false).empty());
    QCOMPARE(tok.encode("", true), (std::vector<int32_t>{1}));
}

QTEST_APPLESS_MAIN(TestTokenizer)

#include "tst_tokenizer.moc"
