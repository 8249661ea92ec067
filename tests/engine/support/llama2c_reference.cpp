// See llama2c_reference.h. Plain loops, float64 arithmetic, no engine code.
#include "llama2c_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string_view>

namespace longscope_test {

namespace {

std::string read_whole_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error(path + ": cannot open file");
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad())
        throw std::runtime_error(path + ": read error");
    return bytes;
}

int32_t read_i32(const std::string &bytes, size_t offset)
{
    int32_t v;
    std::memcpy(&v, bytes.data() + offset, sizeof v);
    return v;
}

float read_f32(const std::string &bytes, size_t offset)
{
    float v;
    std::memcpy(&v, bytes.data() + offset, sizeof v);
    return v;
}

[[noreturn]] void fail(const std::string &path, const std::string &what)
{
    throw std::runtime_error(path + ": " + what);
}

// y[i] = sum_j W[i*n_in + j] * x[j]; W is float32 [n_out, n_in] row-major.
void matvec(const float *w, const std::vector<double> &x, int n_in, int n_out,
            std::vector<double> &y)
{
    y.assign(static_cast<size_t>(n_out), 0.0);
    for (int i = 0; i < n_out; ++i) {
        double sum = 0.0;
        const float *row = w + static_cast<size_t>(i) * static_cast<size_t>(n_in);
        for (int j = 0; j < n_in; ++j)
            sum += static_cast<double>(row[j]) * x[static_cast<size_t>(j)];
        y[static_cast<size_t>(i)] = sum;
    }
}

// out = x / sqrt(mean(x^2) + 1e-5) * weight
std::vector<double> rmsnorm(const std::vector<double> &x, const float *weight)
{
    double ss = 0.0;
    for (double v : x)
        ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i)
        out[i] = x[i] * scale * static_cast<double>(weight[i]);
    return out;
}

} // namespace

// ---------------------------------------------------------------------------------------
// Model

Llama2cReference Llama2cReference::load(const std::string &path)
{
    const std::string bytes = read_whole_file(path);
    constexpr size_t header_bytes = 7 * sizeof(int32_t);
    if (bytes.size() < header_bytes)
        fail(path, "file too short for the 28-byte llama2.c header (" +
                       std::to_string(bytes.size()) + " bytes)");

    Llama2cReference r;
    Llama2cConfig &c = r.m_cfg;
    c.dim = read_i32(bytes, 0);
    c.hidden_dim = read_i32(bytes, 4);
    c.n_layers = read_i32(bytes, 8);
    c.n_heads = read_i32(bytes, 12);
    c.n_kv_heads = read_i32(bytes, 16);
    const int32_t raw_vocab = read_i32(bytes, 20);
    c.seq_len = read_i32(bytes, 24);

    // Sane limits: each value positive and small enough that the size arithmetic below
    // cannot overflow int64 (at most 2^20 each, products of three < 2^63).
    constexpr int64_t limit = 1 << 20;
    auto check = [&](const char *name, int64_t v) {
        if (v <= 0 || v > limit)
            fail(path, std::string("header ") + name + " = " + std::to_string(v) +
                           " is out of range (1.." + std::to_string(limit) + ")");
    };
    check("dim", c.dim);
    check("hidden_dim", c.hidden_dim);
    check("n_layers", c.n_layers);
    check("n_heads", c.n_heads);
    check("n_kv_heads", c.n_kv_heads);
    if (raw_vocab == std::numeric_limits<int32_t>::min())
        fail(path, "header vocab_size is INT32_MIN");
    check("vocab_size", raw_vocab < 0 ? -static_cast<int64_t>(raw_vocab) : raw_vocab);
    check("seq_len", c.seq_len);
    c.shared_classifier = raw_vocab > 0;
    c.vocab_size = raw_vocab < 0 ? -raw_vocab : raw_vocab;
    if (c.dim % c.n_heads != 0)
        fail(path, "dim " + std::to_string(c.dim) + " is not a multiple of n_heads " +
                       std::to_string(c.n_heads));
    if (c.head_size() % 2 != 0)
        fail(path, "head size " + std::to_string(c.head_size()) + " is odd (RoPE needs pairs)");
    if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
        fail(path, "n_heads " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " +
                       std::to_string(c.n_kv_heads));

    const int64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers,
                  vocab = c.vocab_size, seq = c.seq_len, hs = c.head_size(),
                  q_dim = static_cast<int64_t>(c.n_heads) * hs, kv_dim = c.kv_dim();

    // Lay out the arrays in file order; offsets in floats after the header.
    int64_t at = 0;
    auto take = [&](size_t &offset, int64_t count) {
        offset = static_cast<size_t>(at);
        at += count;
    };
    take(r.m_tok_emb, vocab * dim);
    take(r.m_rms_att, layers * dim);
    take(r.m_wq, layers * dim * q_dim);
    take(r.m_wk, layers * dim * kv_dim);
    take(r.m_wv, layers * dim * kv_dim);
    take(r.m_wo, layers * q_dim * dim);
    take(r.m_rms_ffn, layers * dim);
    take(r.m_w1, layers * hidden * dim);
    take(r.m_w2, layers * dim * hidden);
    take(r.m_w3, layers * hidden * dim);
    take(r.m_rms_final, dim);
    size_t freq_skip = 0;
    take(freq_skip, seq * hs / 2); // freq_cis_real (legacy, unused)
    take(freq_skip, seq * hs / 2); // freq_cis_imag (legacy, unused)
    if (c.shared_classifier)
        r.m_wcls = r.m_tok_emb;
    else
        take(r.m_wcls, vocab * dim);

    const int64_t expected = static_cast<int64_t>(header_bytes) + at * 4;
    if (static_cast<int64_t>(bytes.size()) != expected)
        fail(path, "size is " + std::to_string(bytes.size()) + " bytes but the header (dim " +
                       std::to_string(dim) + ", hidden " + std::to_string(hidden) + ", layers " +
                       std::to_string(layers) + ", heads " + std::to_string(c.n_heads) + "/" +
                       std::to_string(c.n_kv_heads) + ", vocab " + std::to_string(raw_vocab) +
                       ", seq " + std::to_string(seq) + ") implies " + std::to_string(expected) +
                       (bytes.size() < static_cast<size_t>(expected) ? " (truncated)" : ""));

    r.m_data.resize(static_cast<size_t>(at));
    std::memcpy(r.m_data.data(), bytes.data() + header_bytes, static_cast<size_t>(at) * 4);
    for (size_t i = 0; i < r.m_data.size(); ++i) {
        if (!std::isfinite(r.m_data[i]))
            fail(path, "weight float #" + std::to_string(i) + " is not finite");
    }

    const size_t cache = static_cast<size_t>(layers * seq * kv_dim);
    r.m_key_cache.assign(cache, 0.0);
    r.m_value_cache.assign(cache, 0.0);
    return r;
}

void Llama2cReference::reset()
{
    std::fill(m_key_cache.begin(), m_key_cache.end(), 0.0);
    std::fill(m_value_cache.begin(), m_value_cache.end(), 0.0);
    m_n_cached = 0;
}

std::vector<float> Llama2cReference::forward(int token, int pos)
{
    const Llama2cConfig &c = m_cfg;
    if (token < 0 || token >= c.vocab_size)
        throw std::out_of_range("Llama2cReference::forward: token " + std::to_string(token) +
                                " outside the vocabulary [0, " + std::to_string(c.vocab_size) +
                                ")");
    if (pos < 0 || pos >= c.seq_len || pos > m_n_cached)
        throw std::out_of_range("Llama2cReference::forward: position " + std::to_string(pos) +
                                " invalid (cached " + std::to_string(m_n_cached) +
                                ", seq_len " + std::to_string(c.seq_len) + ")");

    const int dim = c.dim, hidden = c.hidden_dim, hs = c.head_size(), kv_dim = c.kv_dim();
    const int q_dim = c.n_heads * hs;
    const int group = c.n_heads / c.n_kv_heads; // query heads per kv head
    const float *w = m_data.data();
    const size_t udim = static_cast<size_t>(dim);

    // Token embedding.
    std::vector<double> x(udim);
    for (int i = 0; i < dim; ++i)
        x[static_cast<size_t>(i)] =
            w[m_tok_emb + static_cast<size_t>(token) * udim + static_cast<size_t>(i)];

    std::vector<double> q, k, v, att_out(static_cast<size_t>(q_dim)), proj, h1, h3, ffn_out;
    std::vector<double> scores;

    for (int l = 0; l < c.n_layers; ++l) {
        const size_t ul = static_cast<size_t>(l);

        // ---- attention ----
        const std::vector<double> xn = rmsnorm(x, w + m_rms_att + ul * udim);
        matvec(w + m_wq + ul * udim * static_cast<size_t>(q_dim), xn, dim, q_dim, q);
        matvec(w + m_wk + ul * udim * static_cast<size_t>(kv_dim), xn, dim, kv_dim, k);
        matvec(w + m_wv + ul * udim * static_cast<size_t>(kv_dim), xn, dim, kv_dim, v);

        // RoPE, llama2.c layout: within each head, pair (2i, 2i+1) rotated by
        // theta = pos * 10000^(-2i / head_size) (base and position scale settable).
        auto rope = [&](std::vector<double> &vec, int n_heads_here) {
            for (int h = 0; h < n_heads_here; ++h) {
                for (int i = 0; i < hs / 2; ++i) {
                    const double freq = std::pow(m_rope_base, -2.0 * i / static_cast<double>(hs));
                    const double theta = static_cast<double>(pos) * m_rope_pos_scale * freq;
                    const double cs = std::cos(theta), sn = std::sin(theta);
                    double &a = vec[static_cast<size_t>(h * hs + 2 * i)];
                    double &b = vec[static_cast<size_t>(h * hs + 2 * i + 1)];
                    const double a0 = a, b0 = b;
                    a = a0 * cs - b0 * sn;
                    b = a0 * sn + b0 * cs;
                }
            }
        };
        rope(q, c.n_heads);
        rope(k, c.n_kv_heads);

        // Store this position's key and value.
        const size_t layer_base = ul * static_cast<size_t>(c.seq_len) * static_cast<size_t>(kv_dim);
        for (int i = 0; i < kv_dim; ++i) {
            const size_t at =
                layer_base + static_cast<size_t>(pos) * static_cast<size_t>(kv_dim) +
                static_cast<size_t>(i);
            m_key_cache[at] = k[static_cast<size_t>(i)];
            m_value_cache[at] = v[static_cast<size_t>(i)];
        }

        // Causal attention over positions 0..pos, per query head.
        const double inv_sqrt_hs = 1.0 / std::sqrt(static_cast<double>(hs));
        for (int h = 0; h < c.n_heads; ++h) {
            const int kvh = h / group;
            scores.assign(static_cast<size_t>(pos + 1), 0.0);
            for (int t = 0; t <= pos; ++t) {
                const size_t kbase = layer_base +
                                     static_cast<size_t>(t) * static_cast<size_t>(kv_dim) +
                                     static_cast<size_t>(kvh * hs);
                double dot = 0.0;
                for (int i = 0; i < hs; ++i)
                    dot += q[static_cast<size_t>(h * hs + i)] * m_key_cache[kbase + static_cast<size_t>(i)];
                scores[static_cast<size_t>(t)] = dot * inv_sqrt_hs;
            }
            double mx = scores[0];
            for (double s : scores)
                mx = s > mx ? s : mx;
            double total = 0.0;
            for (double &s : scores) {
                s = std::exp(s - mx);
                total += s;
            }
            for (int i = 0; i < hs; ++i) {
                double acc = 0.0;
                for (int t = 0; t <= pos; ++t) {
                    const size_t vat = layer_base +
                                       static_cast<size_t>(t) * static_cast<size_t>(kv_dim) +
                                       static_cast<size_t>(kvh * hs + i);
                    acc += scores[static_cast<size_t>(t)] / total * m_value_cache[vat];
                }
                att_out[static_cast<size_t>(h * hs + i)] = acc;
            }
        }

        matvec(w + m_wo + ul * static_cast<size_t>(q_dim) * udim, att_out, q_dim, dim, proj);
        for (int i = 0; i < dim; ++i)
            x[static_cast<size_t>(i)] += proj[static_cast<size_t>(i)];

        // ---- feed-forward: w2( silu(w1 x) * (w3 x) ) ----
        const std::vector<double> xf = rmsnorm(x, w + m_rms_ffn + ul * udim);
        const size_t uhidden = static_cast<size_t>(hidden);
        matvec(w + m_w1 + ul * uhidden * udim, xf, dim, hidden, h1);
        matvec(w + m_w3 + ul * uhidden * udim, xf, dim, hidden, h3);
        for (size_t i = 0; i < uhidden; ++i) {
            const double g = h1[i];
            h1[i] = g / (1.0 + std::exp(-g)) * h3[i];
        }
        matvec(w + m_w2 + ul * udim * uhidden, h1, hidden, dim, ffn_out);
        for (int i = 0; i < dim; ++i)
            x[static_cast<size_t>(i)] += ffn_out[static_cast<size_t>(i)];
    }

    const std::vector<double> xo = rmsnorm(x, w + m_rms_final);
    std::vector<double> logits;
    matvec(w + m_wcls, xo, dim, c.vocab_size, logits);

    m_n_cached = pos + 1;
    return std::vector<float>(logits.begin(), logits.end());
}

int Llama2cReference::argmax(const std::vector<float> &v)
{
    int best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
        if (v[i] > v[static_cast<size_t>(best)])
            best = static_cast<int>(i);
    }
    return best;
}

std::vector<int> Llama2cReference::greedy(const std::vector<int> &prompt_ids, int n_new,
                                          std::vector<std::vector<float>> *step_logits)
{
    if (prompt_ids.empty())
        throw std::invalid_argument("Llama2cReference::greedy: empty prompt");
    if (n_new < 0)
        throw std::invalid_argument("Llama2cReference::greedy: negative n_new");
    reset();
    if (step_logits)
        step_logits->clear();
    std::vector<float> logits;
    int pos = 0;
    for (int id : prompt_ids)
        logits = forward(id, pos++);
    std::vector<int> out;
    out.reserve(static_cast<size_t>(n_new));
    for (int k = 0; k < n_new; ++k) {
        const int next = argmax(logits);
        if (step_logits)
            step_logits->push_back(logits);
        out.push_back(next);
        if (k + 1 < n_new)
            logits = forward(next, pos++);
    }
    return out;
}

// ---------------------------------------------------------------------------------------
// Tokenizer

Llama2cTokenizer Llama2cTokenizer::load(const std::string &path)
{
    const std::string bytes = read_whole_file(path);
    const std::string ext = ".model";
    if (path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
        return load_sentencepiece(path, bytes);
    return load_llama2c(path, bytes);
}

Llama2cTokenizer Llama2cTokenizer::load_llama2c(const std::string &path, const std::string &bytes)
{
    Llama2cTokenizer t;
    if (bytes.size() < 4)
        fail(path, "too short for the llama2.c tokenizer header");
    t.m_max_token_length = read_i32(bytes, 0);
    if (t.m_max_token_length <= 0 || t.m_max_token_length > (1 << 16))
        fail(path, "max_token_length " + std::to_string(t.m_max_token_length) + " out of range");
    size_t at = 4;
    while (at < bytes.size()) {
        if (bytes.size() - at < 8)
            fail(path, "truncated token record #" + std::to_string(t.m_pieces.size()) +
                           " at byte " + std::to_string(at));
        const float score = read_f32(bytes, at);
        const int32_t len = read_i32(bytes, at + 4);
        at += 8;
        if (len < 0 || len > t.m_max_token_length)
            fail(path, "token #" + std::to_string(t.m_pieces.size()) + " length " +
                           std::to_string(len) + " outside [0, max_token_length " +
                           std::to_string(t.m_max_token_length) + "]");
        if (bytes.size() - at < static_cast<size_t>(len))
            fail(path, "token #" + std::to_string(t.m_pieces.size()) + " runs past the end");
        t.m_pieces.emplace_back(bytes.data() + at, static_cast<size_t>(len));
        t.m_scores.push_back(score);
        at += static_cast<size_t>(len);
    }
    if (t.m_pieces.empty())
        fail(path, "no tokens");
    return t;
}

namespace {

// Minimal protobuf wire-format reader, bounds-checked.
struct ProtoReader {
    const std::string &path;
    const unsigned char *p;
    const unsigned char *end;

    bool done() const { return p >= end; }

    uint64_t varint()
    {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p >= end)
                fail(path, "truncated protobuf varint");
            const unsigned char b = *p++;
            v |= static_cast<uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80))
                return v;
        }
        fail(path, "protobuf varint too long");
    }

    std::string_view bytes(uint64_t n)
    {
        if (n > static_cast<uint64_t>(end - p))
            fail(path, "protobuf field runs past the end");
        std::string_view s(reinterpret_cast<const char *>(p), static_cast<size_t>(n));
        p += n;
        return s;
    }

    void skip(uint32_t wire_type)
    {
        switch (wire_type) {
        case 0: varint(); break;
        case 1: bytes(8); break;
        case 2: bytes(varint()); break;
        case 5: bytes(4); break;
        default: fail(path, "unsupported protobuf wire type " + std::to_string(wire_type));
        }
    }
};

} // namespace

Llama2cTokenizer Llama2cTokenizer::load_sentencepiece(const std::string &path,
                                                      const std::string &bytes)
{
    // ModelProto { repeated SentencePiece pieces = 1; ... }
    // SentencePiece { string piece = 1; float score = 2; Type type = 3; }
    // Type: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6.
    Llama2cTokenizer t;
    ProtoReader top{path, reinterpret_cast<const unsigned char *>(bytes.data()),
                    reinterpret_cast<const unsigned char *>(bytes.data()) + bytes.size()};
    std::vector<uint64_t> types;
    while (!top.done()) {
        const uint64_t key = top.varint();
        const uint32_t field = static_cast<uint32_t>(key >> 3), wt = static_cast<uint32_t>(key & 7);
        if (field != 1 || wt != 2) {
            top.skip(wt);
            continue;
        }
        const std::string_view msg = top.bytes(top.varint());
        ProtoReader sub{path, reinterpret_cast<const unsigned char *>(msg.data()),
                        reinterpret_cast<const unsigned char *>(msg.data()) + msg.size()};
        std::string piece;
        float score = 0.0f;
        uint64_t type = 1;
        while (!sub.done()) {
            const uint64_t k2 = sub.varint();
            const uint32_t f2 = static_cast<uint32_t>(k2 >> 3), w2 = static_cast<uint32_t>(k2 & 7);
            if (f2 == 1 && w2 == 2) {
                piece = std::string(sub.bytes(sub.varint()));
            } else if (f2 == 2 && w2 == 5) {
                const std::string_view s = sub.bytes(4);
                std::memcpy(&score, s.data(), 4);
            } else if (f2 == 3 && w2 == 0) {
                type = sub.varint();
            } else {
                sub.skip(w2);
            }
        }
        t.m_pieces.push_back(std::move(piece));
        t.m_scores.push_back(score);
        types.push_back(type);
    }
    if (t.m_pieces.empty())
        fail(path, "no sentencepiece pieces found");

    // Convert as llama2.c's tokenizer export does. Its BOS/EOS are sentencepiece's ids 1/2
    // (the CONTROL pieces <s> and </s> in a LLaMA tokenizer).
    for (size_t i = 0; i < t.m_pieces.size(); ++i) {
        std::string &s = t.m_pieces[i];
        if (i == 1 && s == "<s>")
            s = "\n<s>\n";
        else if (i == 2 && s == "</s>")
            s = "\n</s>\n";
        static const std::string lower_one_eighth_block = "\xE2\x96\x81"; // U+2581
        std::string out;
        for (size_t j = 0; j < s.size();) {
            if (s.compare(j, lower_one_eighth_block.size(), lower_one_eighth_block) == 0) {
                out += ' ';
                j += lower_one_eighth_block.size();
            } else {
                out += s[j++];
            }
        }
        s = std::move(out);
        t.m_max_token_length = std::max(t.m_max_token_length, static_cast<int>(s.size()));
    }
    return t;
}

const std::string &Llama2cTokenizer::piece(int id) const
{
    if (id < 0 || id >= size())
        throw std::out_of_range("Llama2cTokenizer: id " + std::to_string(id) + " out of range");
    return m_pieces[static_cast<size_t>(id)];
}

float Llama2cTokenizer::score(int id) const
{
    if (id < 0 || id >= size())
        throw std::out_of_range("Llama2cTokenizer: id " + std::to_string(id) + " out of range");
    return m_scores[static_cast<size_t>(id)];
}

std::string Llama2cTokenizer::decode(int prev_token, int token) const
{
    std::string p = piece(token);
    if (prev_token == 1 && !p.empty() && p[0] == ' ')
        p.erase(0, 1);
    // "<0xNN>" (exactly 6 characters, two hex digits) is the raw byte NN.
    if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>') {
        auto hex = [](char ch) -> int {
            if (ch >= '0' && ch <= '9') return ch - '0';
            if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
            if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
            return -1;
        };
        const int hi = hex(p[3]), lo = hex(p[4]);
        if (hi >= 0 && lo >= 0)
            return std::string(1, static_cast<char>(hi * 16 + lo));
    }
    return p;
}

std::string Llama2cTokenizer::decode_all(const std::vector<int> &ids, int prev_token) const
{
    std::string out;
    for (int id : ids) {
        out += decode(prev_token, id);
        prev_token = id;
    }
    return out;
}

} // namespace longscope_test
