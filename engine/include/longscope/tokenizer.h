// Sentencepiece-backed tokenizer. From an HF directory it loads tokenizer.model; from a GGUF
// file it builds a sentencepiece ModelProto in memory out of tokenizer.ggml.tokens / scores /
// token_type (BPE, byte fallback, identity normaliser, dummy prefix) and loads that, so both
// paths run the same library code and give the same ids.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace longscope {

class GgufFile;

class Tokenizer {
public:
    // Throws IoError / FormatError.
    static std::unique_ptr<Tokenizer> from_sentencepiece_file(const std::string &path);
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile &gguf);
    ~Tokenizer();

    // Text to ids. Any bytes are accepted (invalid UTF-8 included, as sentencepiece does).
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
    // Ids to text, as sentencepiece decodes a whole sequence (leading dummy space removed).
    std::string decode(std::span<const int32_t> ids) const;

    // The bytes one token contributes in the middle of a text, as sentencepiece's Decode
    // renders it: "▁" becomes a space, byte tokens <0xNN> give their byte, control tokens
    // nothing, the unknown token " ⁇ " (sentencepiece's unk surface), unused and user-defined
    // tokens their text. May be part of a UTF-8 character; see TokenTextStream.
    // token_bytes and piece throw InvalidArgument for an id out of range.
    const std::string &token_bytes(int32_t id) const;
    const std::string &piece(int32_t id) const;

    int n_vocab() const { return static_cast<int>(m_token_bytes.size()); }
    int32_t bos_id() const { return m_bos; }
    int32_t eos_id() const { return m_eos; }
    // Whether prompts start with BOS: GGUF tokenizer.ggml.add_bos_token, or HF
    // tokenizer_config.json add_bos_token; true when the model does not say.
    bool add_bos_default() const { return m_add_bos; }
    void set_add_bos_default(bool add) { m_add_bos = add; }
    bool add_dummy_prefix() const { return m_add_dummy_prefix; }
    bool is_control(int32_t id) const;
    // Whether id is a byte-fallback token <0xNN> (false for ids out of range).
    bool is_byte(int32_t id) const;

private:
    Tokenizer();
    void init_from_processor(const std::string &source);

    std::unique_ptr<sentencepiece::SentencePieceProcessor> m_sp;
    std::vector<std::string> m_token_bytes;
    int32_t m_bos = 1;
    int32_t m_eos = 2;
    bool m_add_bos = true;
    bool m_add_dummy_prefix = true;
};

// Incremental UTF-8 assembly: push arbitrary byte chunks, get back only complete characters.
// Bytes that can never form a valid character come out as U+FFFD, as sentencepiece decodes
// them, so the streamed text equals the text decoded at once.
class Utf8Stream {
public:
    std::string push(std::string_view bytes);
    // Whatever is still pending (an incomplete character at the very end) as U+FFFD.
    std::string flush();
    bool pending() const { return !m_pending.empty(); }

private:
    std::string m_pending;
};

// Streams the text of generated tokens: never half a UTF-8 character. The concatenated output
// (plus flush) equals decode() of the whole sequence, except that the leading dummy-prefix
// space that decode() drops is kept. Throws InvalidArgument for an id out of range.
class TokenTextStream {
public:
    explicit TokenTextStream(const Tokenizer &tok) : m_tok(tok) {}
    std::string push(int32_t id);
    std::string flush() { return m_utf8.flush(); }

private:
    const Tokenizer &m_tok;
    Utf8Stream m_utf8;
};

} // namespace longscope
