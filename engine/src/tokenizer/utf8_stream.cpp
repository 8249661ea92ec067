#include "longscope/tokenizer.h"

#include <algorithm>
#include <cstdint>

namespace longscope {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD"; // U+FFFD

// Length of the sequence a lead byte starts, or 0 for a byte that can never start a valid
// character (continuation bytes, C0/C1 which only give overlong forms, F5..FF beyond U+10FFFF).
int sequence_length(uint8_t lead)
{
    if (lead < 0x80)
        return 1;
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF)
        return 3;
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    return 0;
}

// Whether byte b may stand at position pos (1-based after the lead) of a sequence starting
// with lead. The narrowed second-byte ranges reject overlong forms, UTF-16 surrogates and code
// points past U+10FFFF: exactly the sequences sentencepiece's DecodeUTF8 refuses, so a prefix
// that fails here can be replaced at once without waiting for more bytes.
bool continuation_ok(uint8_t lead, size_t pos, uint8_t b)
{
    uint8_t lo = 0x80;
    uint8_t hi = 0xBF;
    if (pos == 1) {
        switch (lead) {
        case 0xE0: lo = 0xA0; break;
        case 0xED: hi = 0x9F; break;
        case 0xF0: lo = 0x90; break;
        case 0xF4: hi = 0x8F; break;
        default: break;
        }
    }
    return b >= lo && b <= hi;
}

} // namespace

std::string Utf8Stream::push(std::string_view bytes)
{
    m_pending.append(bytes);
    std::string out;
    out.reserve(m_pending.size());
    size_t i = 0;
    const size_t n = m_pending.size();
    while (i < n) {
        const auto lead = static_cast<uint8_t>(m_pending[i]);
        const int len = sequence_length(lead);
        if (len == 1) {
            out.push_back(m_pending[i]);
            ++i;
            continue;
        }
        // sentencepiece replaces an invalid lead byte alone and then looks at the next byte
        // afresh, so each byte of a broken sequence becomes its own U+FFFD.
        bool broken = len == 0;
        const size_t avail = std::min(static_cast<size_t>(len), n - i);
        for (size_t k = 1; !broken && k < avail; ++k)
            broken = !continuation_ok(lead, k, static_cast<uint8_t>(m_pending[i + k]));
        if (broken) {
            out.append(kReplacement);
            ++i;
            continue;
        }
        if (avail < static_cast<size_t>(len))
            break; // a valid prefix: wait for the rest of the character
        out.append(m_pending, i, static_cast<size_t>(len));
        i += static_cast<size_t>(len);
    }
    m_pending.erase(0, i);
    return out;
}

std::string Utf8Stream::flush()
{
    // What is left is the valid prefix of one character; at the end of the input sentencepiece
    // replaces its lead byte and then each continuation byte separately.
    std::string out;
    for (size_t i = 0; i < m_pending.size(); ++i)
        out.append(kReplacement);
    m_pending.clear();
    return out;
}

std::string TokenTextStream::push(int32_t id)
{
    const std::string &bytes = m_tok.token_bytes(id);
    // Byte-level BPE tokens are byte strings that may end or start inside a character: the
    // text is assembled across tokens.
    if (m_tok.is_byte(id) || m_tok.kind() == TokenizerKind::Bpe)
        return m_utf8.push(bytes);
    // sentencepiece assembles each run of byte tokens on its own: any token that is not a
    // byte token (a control token with no text included) ends the run, and a character left
    // incomplete there is replaced even if later byte tokens would have completed it.
    std::string out = m_utf8.flush();
    out += m_utf8.push(bytes);
    return out;
}

} // namespace longscope
