#include "tokenizer/bpe.h"

#include <queue>

namespace longscope::detail {

namespace {

void append_utf8(std::string &out, uint32_t cp)
{
    if (cp < 0x80) {
        out.push_back(char(cp));
    } else if (cp < 0x800) {
        out.push_back(char(0xC0 | (cp >> 6)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(char(0xE0 | (cp >> 12)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    }
}

// GPT-2's bytes_to_unicode: the printable bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' stand for
// themselves; the other 68 bytes, in order, take the characters from U+0100 on.
struct ByteAlphabet {
    std::array<std::string, 256> chars;
    std::unordered_map<uint32_t, uint8_t> bytes; // code point -> byte
    ByteAlphabet()
    {
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            const uint32_t cp = printable ? b : next++;
            append_utf8(chars[b], cp);
            bytes.emplace(cp, uint8_t(b));
        }
    }
};

const ByteAlphabet &alphabet()
{
    static const ByteAlphabet a;
    return a;
}

// Length of the UTF-8 sequence starting with lead byte c and its code point; 1 and -1 for a
// byte that does not start a well-formed sequence of the alphabet's range.
int decode_char(std::string_view s, size_t i, uint32_t &cp)
{
    const auto c = uint8_t(s[i]);
    if (c < 0x80) {
        cp = c;
        return 1;
    }
    const int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + size_t(len) > s.size())
        return -1;
    cp = c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
        const auto cc = uint8_t(s[i + size_t(k)]);
        if ((cc & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (cc & 0x3F);
    }
    return len;
}

} // namespace

const std::string &byte_level_char(uint8_t b)
{
    return alphabet().chars[b];
}

std::string byte_level_encode(std::string_view bytes)
{
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes)
        out += byte_level_char(uint8_t(c));
    return out;
}

std::string byte_level_decode(std::string_view text)
{
    const ByteAlphabet &a = alphabet();
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        uint32_t cp = 0;
        const int len = decode_char(text, i, cp);
        if (len < 0) {
            out.push_back(text[i++]);
            continue;
        }
        const auto it = a.bytes.find(cp);
        if (it != a.bytes.end())
            out.push_back(char(it->second));
        else
            out.append(text.substr(i, size_t(len)));
        i += size_t(len);
    }
    return out;
}

BpeMerger::BpeMerger(const std::vector<std::string> &pieces, const std::vector<bool> &mergeable,
                     const std::vector<std::pair<std::string, std::string>> &merges, bool ignore_merges)
    : m_n_vocab(uint32_t(pieces.size())), m_next_symbol(uint32_t(pieces.size())), m_ignore_merges(ignore_merges)
{
    m_symbols.reserve(pieces.size() + merges.size() / 4);
    // Symbols past the vocabulary start at m_n_vocab whatever is left out here.
    for (uint32_t id = 0; id < m_n_vocab; ++id)
        if (id < mergeable.size() && mergeable[id])
            m_symbols[pieces[id]] = id; // a repeated text means its last id, as the vocabularies do
    // A byte character only an added token spells (DeepSeek's) is still that byte's token.
    for (uint32_t id = 0; id < m_n_vocab; ++id)
        if (id >= mergeable.size() || !mergeable[id])
            m_symbols.emplace(pieces[id], id);
    for (uint32_t b = 0; b < 256; ++b)
        m_byte_symbol[b] = intern(byte_level_char(uint8_t(b)));
    m_merges.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto &[a, b] = merges[rank];
        const uint32_t left = intern(a);
        const uint32_t right = intern(b);
        const uint32_t result = intern(a + b);
        // The first listing of a pair is its rank.
        m_merges.emplace(pair_key(left, right), Merge{int32_t(rank), result});
    }
}

uint32_t BpeMerger::intern(const std::string &text)
{
    const auto [it, added] = m_symbols.emplace(text, m_next_symbol);
    if (added)
        ++m_next_symbol;
    return it->second;
}

uint32_t BpeMerger::find_symbol(std::string_view text) const
{
    const auto it = m_symbols.find(std::string(text));
    return it == m_symbols.end() ? UINT32_MAX : it->second;
}

void BpeMerger::encode_word(std::string_view word, int32_t unk_id, std::vector<int32_t> &out) const
{
    if (word.empty())
        return;
    if (m_ignore_merges) {
        const uint32_t whole = find_symbol(byte_level_encode(word));
        if (whole < m_n_vocab) {
            out.push_back(int32_t(whole));
            return;
        }
    }
    // One node per byte; merged nodes keep the leftmost and die on the right.
    struct Node {
        uint32_t symbol;
        int32_t prev, next;
        uint32_t start, length;
    };
    const auto n = int32_t(word.size());
    std::vector<Node> nodes(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i)
        nodes[size_t(i)] = Node{m_byte_symbol[uint8_t(word[size_t(i)])], i - 1, i + 1 < n ? i + 1 : -1,
                                uint32_t(i), 1};

    struct Candidate {
        int32_t rank;
        int32_t left;
        uint32_t left_symbol, right_symbol;
        bool operator>(const Candidate &o) const
        {
            return rank != o.rank ? rank > o.rank : left > o.left;
        }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto consider = [&](int32_t left) {
        if (left < 0 || nodes[size_t(left)].next < 0)
            return;
        const Node &l = nodes[size_t(left)];
        const Node &r = nodes[size_t(l.next)];
        const auto it = m_merges.find(pair_key(l.symbol, r.symbol));
        if (it != m_merges.end())
            queue.push(Candidate{it->second.rank, left, l.symbol, r.symbol});
    };
    for (int32_t i = 0; i + 1 < n; ++i)
        consider(i);

    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        Node &l = nodes[size_t(c.left)];
        // Stale: the left node was merged away, changed, or lost its right neighbour.
        if (l.length == 0 || l.symbol != c.left_symbol || l.next < 0 ||
            nodes[size_t(l.next)].symbol != c.right_symbol)
            continue;
        Node &r = nodes[size_t(l.next)];
        l.symbol = m_merges.at(pair_key(c.left_symbol, c.right_symbol)).result;
        l.length += r.length;
        l.next = r.next;
        if (r.next >= 0)
            nodes[size_t(r.next)].prev = c.left;
        r.length = 0;
        consider(l.prev);
        consider(c.left);
    }

    for (int32_t i = 0; i >= 0; i = nodes[size_t(i)].next) {
        const Node &node = nodes[size_t(i)];
        if (node.symbol < m_n_vocab) {
            out.push_back(int32_t(node.symbol));
            continue;
        }
        for (uint32_t k = node.start; k < node.start + node.length; ++k) {
            const uint32_t b = m_byte_symbol[uint8_t(word[k])];
            if (b < m_n_vocab)
                out.push_back(int32_t(b));
            else if (unk_id >= 0)
                out.push_back(unk_id);
        }
    }
}

} // namespace longscope::detail
