// What a Tokenizer holds beyond sentencepiece: the special-token matcher and, for byte-level
// BPE, the vocabulary, the pre-tokenizer and the merges. Shared by the GGUF and Hugging Face
// load paths (tokenizer_gguf.cpp, tokenizer_hf.cpp) and tokenizer.cpp.
#pragma once

#include "longscope/tokenizer.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace longscope::detail {

// GGUF tokenizer.ggml.token_type values (sentencepiece's numbering; 0 is "undefined").
enum TokenType : uint8_t {
    kTypeUndefined = 0,
    kTypeNormal = 1,
    kTypeUnknown = 2,
    kTypeControl = 3,
    kTypeUserDefined = 4,
    kTypeUnused = 5,
    kTypeByte = 6,
};

struct TokenizerState {
    SpecialMatcher special;
    // Byte-level BPE only.
    std::vector<std::string> pieces;
    std::unique_ptr<PreTokenizer> pre;
    std::unique_ptr<BpeMerger> merger;
    int32_t unk = -1;
};

// A byte-level BPE vocabulary as read from a file, before it becomes a Tokenizer.
struct BpeSpec {
    std::string source; // the file, for messages
    std::vector<std::string> pieces;
    std::vector<uint8_t> types;
    std::vector<std::pair<std::string, std::string>> merges;
    std::string pre_name;                // for info
    std::vector<std::string> expressions; // the pre-tokenizer
    bool ignore_merges = false;
    std::vector<SpecialToken> added; // extra matching rules (HF added tokens); empty: from types
    std::optional<int32_t> bos, eos, unk;
    std::vector<int32_t> end_ids; // EOT, EOM, ... named by the file
    bool add_bos = false;
};

} // namespace longscope::detail

namespace longscope {

struct TokenizerBuilder {
    static std::unique_ptr<Tokenizer> bpe(detail::BpeSpec spec);
    // Tokenizer::from_hf_directory without its translation of JSON type errors.
    static std::unique_ptr<Tokenizer> hf_directory(const std::string &dir);
    // The special tokens matched in text by token type: control (on request) and user-defined
    // (always).
    static std::vector<detail::SpecialToken> special_by_type(const std::vector<std::string> &texts,
                                                              const std::vector<uint8_t> &types);
};

} // namespace longscope
