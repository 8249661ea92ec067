// Byte-level BPE (GPT-2 style): every byte of a word is first mapped to one character of
// GPT-2's printable alphabet, then adjacent symbols are merged by rank (the lowest ranked pair
// first, the leftmost among equals) until no listed pair is left; each final symbol is a
// token, or, where a merge produced text the vocabulary lacks, its bytes one token each.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace longscope::detail {

// The UTF-8 text of the character GPT-2's byte-level alphabet maps byte b to.
const std::string &byte_level_char(uint8_t b);
// Byte-level text back to bytes: each character of the alphabet gives its byte; a character
// outside it (a malformed vocabulary) is kept as its own UTF-8.
std::string byte_level_decode(std::string_view text);
// Bytes to byte-level text.
std::string byte_level_encode(std::string_view bytes);

class BpeMerger {
public:
    // pieces: the vocabulary in byte-level text, indexed by id; merges only produce the
    // pieces whose `mergeable` flag is set (not the added, user-defined or control tokens,
    // whose text may repeat a byte's character, as DeepSeek's do). merges: the pairs in rank
    // order (rank = index). A merge whose parts or result the vocabulary lacks is kept: it
    // only matters as an intermediate step, as in the reference tokenizers.
    BpeMerger(const std::vector<std::string> &pieces, const std::vector<bool> &mergeable,
              const std::vector<std::pair<std::string, std::string>> &merges, bool ignore_merges);

    // Appends the ids of one pre-tokenized word (raw bytes). unk_id (or -1: none) stands for
    // a byte whose alphabet character is not in the vocabulary.
    void encode_word(std::string_view word, int32_t unk_id, std::vector<int32_t> &out) const;

    size_t merge_count() const { return m_merges.size(); }

private:
    struct Merge {
        int32_t rank;
        uint32_t result;
    };
    uint32_t intern(const std::string &text);
    uint32_t find_symbol(std::string_view text) const;
    static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

    uint32_t m_n_vocab = 0;
    uint32_t m_next_symbol = 0;
    // Vocabulary texts and the extra texts merges name, all as symbols: ids below m_n_vocab
    // are the tokens themselves.
    std::unordered_map<std::string, uint32_t> m_symbols;
    std::unordered_map<uint64_t, Merge> m_merges;
    std::array<uint32_t, 256> m_byte_symbol{};
    bool m_ignore_merges = false;
};

} // namespace longscope::detail
