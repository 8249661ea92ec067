// An independent, deliberately naive LLaMA forward pass over the ORIGINAL llama2.c
// checkpoint format (the "legacy" version-0 .bin export), plus a tiny reader for the
// llama2.c tokenizer file. It exists only to give the engine's tests a truth that comes
// from outside the engine: it shares no code with the engine (it does not even include an
// engine header), reads a different file format, and is written as plain loops with no
// caching tricks, threading or SIMD, so that it is easy to read and check by eye.
//
// Precision: the weights are float32 (as stored); every activation, dot product, norm,
// softmax and RoPE angle is computed in float64. The reference is then "the exact result
// of the float32 weights" up to ~1e-15 relative, so any difference seen against the engine
// (float32 throughout) is the engine's own rounding or a bug, and the comparison tolerance
// can be spent entirely on the engine's float32 accumulation-order noise. Speed does not
// matter: stories260K is ~260K parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace longscope_test {

struct Llama2cConfig {
    int dim = 0;        // model width
    int hidden_dim = 0; // FFN width
    int n_layers = 0;
    int n_heads = 0;    // query heads
    int n_kv_heads = 0; // key/value heads (GQA when fewer than n_heads)
    int vocab_size = 0; // always positive here; see shared_classifier
    int seq_len = 0;    // trained context
    bool shared_classifier = true; // header vocab_size > 0: the classifier is the embedding

    int head_size() const { return dim / n_heads; }
    int kv_dim() const { return n_kv_heads * head_size(); }
};

class Llama2cReference {
public:
    // Reads a llama2.c legacy checkpoint. Throws std::runtime_error naming the file and the
    // problem for a missing, truncated, oversized or inconsistent file.
    static Llama2cReference load(const std::string &path);

    // Evaluates `token` at position `pos` and returns the logits [vocab_size] for the next
    // token. The KV cache must already hold positions 0..pos-1 (pos <= n_cached()); evaluating
    // at an earlier position overwrites that slot and forgets everything after it. Throws
    // std::out_of_range for a bad token or position.
    std::vector<float> forward(int token, int pos);

    // RoPE for the following forward() calls: theta = (pos * pos_scale) * base^(-2i / head_size).
    // llama2.c itself uses base 10000 and no scaling; tests of rope_scaling set other values.
    // Keys already cached keep the rotation they were computed with.
    void set_rope(double base, double pos_scale)
    {
        m_rope_base = base;
        m_rope_pos_scale = pos_scale;
    }

    // Forgets the KV cache.
    void reset();
    int n_cached() const { return m_n_cached; }

    // Greedy decoding from a fresh context: evaluates `prompt_ids` (must be non-empty), then
    // appends exactly `n_new` tokens, each the argmax of the logits (lowest index on ties). No
    // end-of-sequence stopping. Returns the new ids only. With `step_logits`, also returns the
    // logits each new token was chosen from (step_logits[k] chose token k; [0] follows the
    // prompt).
    std::vector<int> greedy(const std::vector<int> &prompt_ids, int n_new,
                            std::vector<std::vector<float>> *step_logits = nullptr);

    const Llama2cConfig &config() const { return m_cfg; }
    int dim() const { return m_cfg.dim; }
    int hidden_dim() const { return m_cfg.hidden_dim; }
    int n_layers() const { return m_cfg.n_layers; }
    int n_heads() const { return m_cfg.n_heads; }
    int n_kv_heads() const { return m_cfg.n_kv_heads; }
    int vocab_size() const { return m_cfg.vocab_size; }
    int seq_len() const { return m_cfg.seq_len; }
    bool shared_classifier() const { return m_cfg.shared_classifier; }

    // Lowest index of the largest value.
    static int argmax(const std::vector<float> &v);

private:
    double m_rope_base = 10000.0;
    double m_rope_pos_scale = 1.0;
    Llama2cReference() = default;

    Llama2cConfig m_cfg;
    std::vector<float> m_data; // every float of the file after the header
    // Offsets (in floats) into m_data of each weight array, in file order.
    size_t m_tok_emb = 0, m_rms_att = 0, m_wq = 0, m_wk = 0, m_wv = 0, m_wo = 0;
    size_t m_rms_ffn = 0, m_w1 = 0, m_w2 = 0, m_w3 = 0, m_rms_final = 0, m_wcls = 0;

    // KV cache in float64: [layer][pos][kv_dim].
    std::vector<double> m_key_cache, m_value_cache;
    int m_n_cached = 0;
};

// The llama2.c tokenizer file (tok512.bin): int32 max_token_length, then per token float32
// score, int32 length, that many bytes. Used only to turn ids into text.
//
// As a fallback (for trees that only carry the sentencepiece model), load() also reads a
// sentencepiece .model file (a ModelProto protobuf) with a minimal wire-format parser and
// converts its pieces exactly as llama2.c's tokenizer export does ("▁" -> " ", BOS ->
// "\n<s>\n", EOS -> "\n</s>\n"), which yields the same piece table as tok512.bin.
class Llama2cTokenizer {
public:
    // By file content: a sentencepiece ModelProto when the path ends in ".model", else the
    // llama2.c format. Throws std::runtime_error for a bad file.
    static Llama2cTokenizer load(const std::string &path);

    // llama2.c's decode of one token following `prev_token`: the piece string; "<0xNN>" is
    // that raw byte; the leading space of a piece that follows BOS (id 1) is dropped.
    std::string decode(int prev_token, int token) const;
    // decode() over `ids`, the first one following `prev_token`.
    std::string decode_all(const std::vector<int> &ids, int prev_token) const;

    int size() const { return static_cast<int>(m_pieces.size()); }
    const std::string &piece(int id) const;
    float score(int id) const;
    int max_token_length() const { return m_max_token_length; }

private:
    static Llama2cTokenizer load_llama2c(const std::string &path, const std::string &bytes);
    static Llama2cTokenizer load_sentencepiece(const std::string &path, const std::string &bytes);

    std::vector<std::string> m_pieces;
    std::vector<float> m_scores;
    int m_max_token_length = 0;
};

} // namespace longscope_test
