// Fuzzes byte-level BPE. The first input byte picks the mode:
//   even: the rest is text for a fixed vocabulary (GPT-2's byte alphabet, a few merges, a
//         control token and a user-defined one); encode must not fail, decode must give the
//         text back byte for byte, and with special tokens every id must be in range.
//   odd:  the rest is a vocabulary: lines up to a line "--" are the tokens, the lines after
//         it the merges, the second byte picks tokenizer.ggml.pre. Loading may refuse it
//         with a longscope::Error (one line); a vocabulary that loads must encode text.
#include "support.h"

#include "longscope/errors.h"
#include "longscope/tokenizer.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

// A minimal GGUF v3 writer: the tokenizer keys only, no tensors.
class VocabWriter {
public:
    void string(const std::string &key, std::string_view v)
    {
        key_header(key, 8);
        str(v);
        ++m_count;
    }
    void strings(const std::string &key, const std::vector<std::string> &v)
    {
        key_header(key, 9);
        u32(8);
        u64(v.size());
        for (const std::string &s : v)
            str(s);
        ++m_count;
    }
    void ints(const std::string &key, const std::vector<int32_t> &v)
    {
        key_header(key, 9);
        u32(5);
        u64(v.size());
        for (int32_t x : v)
            u32(uint32_t(x));
        ++m_count;
    }
    void u32_key(const std::string &key, uint32_t v)
    {
        key_header(key, 4);
        u32(v);
        ++m_count;
    }
    // Writes the file into the scratch folder and returns its path.
    std::string write(const std::string &name) const
    {
        std::string out = "GGUF";
        auto put = [&out](uint64_t v, int n) {
            for (int i = 0; i < n; ++i)
                out.push_back(char(v >> (8 * i)));
        };
        put(3, 4);
        put(0, 8);
        put(m_count, 8);
        out += m_kv;
        return longscope::fuzz::write_scratch(name, out);
    }

private:
    void u32(uint32_t v)
    {
        for (int i = 0; i < 4; ++i)
            m_kv.push_back(char(v >> (8 * i)));
    }
    void u64(uint64_t v)
    {
        for (int i = 0; i < 8; ++i)
            m_kv.push_back(char(v >> (8 * i)));
    }
    void str(std::string_view s)
    {
        u64(s.size());
        m_kv.append(s);
    }
    void key_header(const std::string &key, uint32_t type)
    {
        str(key);
        u32(type);
    }
    std::string m_kv;
    uint64_t m_count = 0;
};

std::vector<std::string> byte_alphabet()
{
    std::vector<std::string> out;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const int cp = printable ? b : next++;
        std::string u;
        if (cp < 0x80) {
            u.push_back(char(cp));
        } else {
            u.push_back(char(0xC0 | (cp >> 6)));
            u.push_back(char(0x80 | (cp & 0x3F)));
        }
        out.push_back(u);
    }
    return out;
}

const longscope::Tokenizer &fixed_tokenizer()
{
    static std::unique_ptr<longscope::Tokenizer> tok = [] {
        std::vector<std::string> tokens = byte_alphabet();
        const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "Ġ s", "o n",
                                                 "Ġ w", "r e", "Ġ th", "l l", "he ll", "hell o"};
        for (const std::string &m : merges)
            tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
        tokens.push_back("<|endoftext|>");
        tokens.push_back("<tag>");
        std::vector<int32_t> types(tokens.size(), 1);
        types[types.size() - 2] = 3;
        types.back() = 4;
        VocabWriter w;
        w.string("tokenizer.ggml.model", "gpt2");
        w.string("tokenizer.ggml.pre", "llama-bpe");
        w.strings("tokenizer.ggml.tokens", tokens);
        w.ints("tokenizer.ggml.token_type", types);
        w.strings("tokenizer.ggml.merges", merges);
        w.u32_key("tokenizer.ggml.eos_token_id", uint32_t(tokens.size() - 2));
        return longscope::Tokenizer::load(w.write("fixed.gguf"));
    }();
    return *tok;
}

void fuzz_text(std::string_view text)
{
    const longscope::Tokenizer &tok = fixed_tokenizer();
    // Every byte has its token and nothing is dropped: the text comes back exactly.
    if (tok.decode(tok.encode(text, false, false)) != text)
        std::abort();
    // With special tokens the control token decodes to nothing; every id must be valid.
    for (int32_t id : tok.encode(text, true, true))
        if (id < 0 || id >= tok.n_vocab())
            std::abort();
}

void fuzz_vocabulary(std::string_view data)
{
    static const char *kPre[] = {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
                                 "starcoder", "default"};
    if (data.empty())
        return;
    const char *pre = kPre[uint8_t(data[0]) % 8];
    data.remove_prefix(1);
    std::vector<std::string> tokens, merges;
    bool in_merges = false;
    size_t pos = 0;
    while (pos <= data.size()) {
        size_t nl = data.find('\n', pos);
        if (nl == std::string_view::npos)
            nl = data.size();
        const std::string line(data.substr(pos, nl - pos));
        if (line == "--")
            in_merges = true;
        else
            (in_merges ? merges : tokens).push_back(line);
        pos = nl + 1;
    }
    VocabWriter w;
    w.string("tokenizer.ggml.model", "gpt2");
    w.string("tokenizer.ggml.pre", pre);
    w.strings("tokenizer.ggml.tokens", tokens);
    w.strings("tokenizer.ggml.merges", merges);
    const std::string path = w.write("fuzzed.gguf");
    std::unique_ptr<longscope::Tokenizer> tok;
    try {
        tok = longscope::Tokenizer::load(path);
    } catch (const longscope::Error &e) {
        if (std::string_view(e.what()).find('\n') != std::string_view::npos)
            std::abort(); // errors are one line
        return;
    }
    const std::string sample(data.substr(0, 256));
    const std::vector<int32_t> ids = tok->encode(sample, true, true);
    for (int32_t id : ids)
        if (id < 0 || id >= tok->n_vocab())
            std::abort();
    (void)tok->decode(ids);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const std::string_view rest(reinterpret_cast<const char *>(data) + 1, size - 1);
    if (data[0] % 2 == 0)
        fuzz_text(rest);
    else
        fuzz_vocabulary(rest);
    return 0;
}
