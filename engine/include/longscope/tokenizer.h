// The tokenizer of a model: sentencepiece or byte-level BPE, from a GGUF file's metadata or a
// Hugging Face directory.
//
// Sentencepiece: from an HF directory it loads tokenizer.model; from a GGUF file
// (tokenizer.ggml.model = "llama") it builds a sentencepiece ModelProto in memory out of
// tokenizer.ggml.tokens / scores / token_type (BPE, byte fallback, identity normaliser, dummy
// prefix) and loads that, so both paths run the same library code and give the same ids.
//
// Byte-level BPE (GGUF tokenizer.ggml.model = "gpt2", or an HF tokenizer.json with a BPE
// model): the text is cut into words by the pre-tokenizer named by tokenizer.ggml.pre (regular
// expressions run by PCRE2), each word's bytes are mapped to GPT-2's byte alphabet and merged
// by the ranks of tokenizer.ggml.merges. docs/engine.md describes both.
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

namespace detail {
struct TokenizerState;
}

enum class TokenizerKind { SentencePiece, Bpe };

class Tokenizer {
public:
    // Throws IoError / FormatError.
    static std::unique_ptr<Tokenizer> from_sentencepiece_file(const std::string &path);
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile &gguf);
    // A Hugging Face directory: tokenizer.json (a BPE model) if present, else tokenizer.model;
    // add_bos_token, bos_token and eos_token from tokenizer_config.json and the end ids of
    // generation_config.json where present.
    static std::unique_ptr<Tokenizer> from_hf_directory(const std::string &dir);
    // Only the tokenizer of a model file or directory (a vocabulary-only GGUF included).
    static std::unique_ptr<Tokenizer> load(const std::string &path);
    ~Tokenizer();

    // Text to ids. Any bytes are accepted (invalid UTF-8 included: sentencepiece takes it as
    // it does; the BPE pre-tokenizer leaves malformed bytes unmatched and they are encoded
    // byte by byte). User-defined tokens are always recognised in the text; with
    // parse_special, control tokens are too (their text, such as "<|im_start|>", becomes the
    // one token instead of being spelled out in ordinary pieces).
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const
    {
        return encode(text, add_bos, false);
    }
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
    // Ids to text, as sentencepiece decodes a whole sequence (leading dummy space removed);
    // BPE: the tokens' bytes concatenated (control tokens give nothing).
    std::string decode(std::span<const int32_t> ids) const;

    // The bytes one token contributes in the middle of a text, as sentencepiece's Decode
    // renders it: "▁" becomes a space, byte tokens <0xNN> give their byte, control tokens
    // nothing, the unknown token " ⁇ " (sentencepiece's unk surface), unused and user-defined
    // tokens their text. May be part of a UTF-8 character; see TokenTextStream.
    // token_bytes and piece throw InvalidArgument for an id out of range.
    const std::string &token_bytes(int32_t id) const;
    const std::string &piece(int32_t id) const;

    int n_vocab() const { return static_cast<int>(m_token_bytes.size()); }
    TokenizerKind kind() const;
    // "sentencepiece" or "bpe".
    std::string_view kind_name() const;
    // The BPE pre-tokenizer's name (tokenizer.ggml.pre, or "tokenizer.json" for an HF
    // pre_tokenizer); empty for sentencepiece.
    const std::string &pre_tokenizer() const { return m_pre; }
    int32_t bos_id() const { return m_bos; }
    int32_t eos_id() const { return m_eos; }
    // The tokens that end a generated reply: EOS, the EOT and EOM ids the file names
    // (tokenizer.ggml.eot_token_id / eom_token_id, generation_config.json eos_token_id) and
    // the tokens whose text is a well-known end of turn (<|eot_id|>, <|eom_id|>, <|im_end|>,
    // <end_of_turn>, <|end|>, <|endoftext|>, <|end_of_text|>, ...). Sorted, no repeats.
    bool is_end_of_generation(int32_t id) const;
    std::span<const int32_t> end_of_generation_ids() const { return m_eog; }
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
    friend struct TokenizerBuilder;
    void init_from_processor(const std::string &source);
    // After the vocabulary is set: the special-token matcher and the end-of-generation set.
    void finish(const std::vector<int32_t> &extra_end_ids);
    void encode_plain(std::string_view text, std::vector<int32_t> &out) const;

    std::unique_ptr<sentencepiece::SentencePieceProcessor> m_sp;
    std::unique_ptr<detail::TokenizerState> m_state; // special tokens; BPE vocabulary and merges
    std::vector<std::string> m_token_bytes;
    // GGUF token types (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
    std::vector<uint8_t> m_types;
    std::vector<int32_t> m_eog;
    std::string m_pre;
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
// space that decode() drops is kept, and that BPE bytes which never form a valid character
// come out as U+FFFD (decode() returns the bytes as they are). Throws InvalidArgument for an id out of range.
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
