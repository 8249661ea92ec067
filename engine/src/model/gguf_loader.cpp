// GGUF (architecture "llama") to Model: hyperparameters from llama.* keys, weights as views
// into the mapped file, tokenizer from the embedded vocabulary.
#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "model/loader.h"

#include <cmath>
#include <filesystem>
#include <limits>

namespace longscope {

namespace {

int to_int(const GgufFile &g, const std::string &key, std::optional<int64_t> v, bool required,
           int fallback)
{
    if (!v) {
        if (required)
            throw FormatError(g.path() + ": missing metadata key " + key);
        return fallback;
    }
    if (*v < 0 || *v > std::numeric_limits<int>::max())
        throw ConfigError(g.path() + ": metadata key " + key + " has invalid value " +
                          std::to_string(*v));
    return int(*v);
}

WeightView view_of(const GgufFile &g, const std::string &name)
{
    WeightView w;
    w.name = name;
    if (const GgufTensorInfo *t = g.find_tensor(name)) {
        w.type = t->type;
        w.shape = t->shape;
        w.data = t->data;
        w.nbytes = t->nbytes;
    }
    return w;
}

} // namespace

std::unique_ptr<Model> ModelBuilder::from_gguf(const std::string &path)
{
    std::shared_ptr<GgufFile> g = GgufFile::open(path);
    auto arch = g->get_string("general.architecture");
    if (!arch)
        throw FormatError(path + ": missing metadata key general.architecture (is this a "
                                 "vocabulary-only GGUF?)");
    if (*arch != "llama")
        throw FormatError(path + ": architecture '" + *arch +
                          "' is not supported (supported: llama)");

    auto model = make();
    HParams &hp = hparams(*model);
    const std::string a = "llama.";
    hp.architecture = *arch;
    hp.n_embd = to_int(*g, a + "embedding_length", g->get_int(a + "embedding_length"), true, 0);
    hp.n_layer = to_int(*g, a + "block_count", g->get_int(a + "block_count"), true, 0);
    hp.n_ff = to_int(*g, a + "feed_forward_length", g->get_int(a + "feed_forward_length"), true, 0);
    hp.n_head = to_int(*g, a + "attention.head_count", g->get_int(a + "attention.head_count"), true, 0);
    hp.n_head_kv = to_int(*g, a + "attention.head_count_kv",
                          g->get_int(a + "attention.head_count_kv"), false, hp.n_head);
    hp.n_ctx_train = to_int(*g, a + "context_length", g->get_int(a + "context_length"), true, 0);
    hp.n_rot = to_int(*g, a + "rope.dimension_count", g->get_int(a + "rope.dimension_count"),
                      false, hp.n_head > 0 ? hp.n_embd / hp.n_head : 0);
    hp.rms_eps = float(g->get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    hp.rope_base = float(g->get_float(a + "rope.freq_base").value_or(10000.0));
    hp.rope_style = RopeStyle::Interleaved;
    if (auto st = g->get_string(a + "rope.scaling.type")) {
        float factor = float(g->get_float(a + "rope.scaling.factor").value_or(1.0));
        if (*st == "linear")
            hp.rope_scaling = RopeScalingType::Linear;
        else if (*st == "none")
            hp.rope_scaling = RopeScalingType::None;
        else
            throw ConfigError(path + ": rope scaling type '" + *st +
                              "' is not supported (supported: none, linear)");
        hp.rope_scaling_factor = factor;
    } else if (auto f = g->get_float(a + "rope.scale_linear")) {
        hp.rope_scaling = RopeScalingType::Linear;
        hp.rope_scaling_factor = float(*f);
    }

    const GgufTensorInfo *embd = g->find_tensor("token_embd.weight");
    if (!embd)
        throw FormatError(path + ": missing tensor token_embd.weight");
    if (embd->shape.size() != 2)
        throw FormatError(path + ": tensor token_embd.weight must have 2 dimensions [n_embd, n_vocab], it has " +
                          std::to_string(embd->shape.size()));
    int64_t vocab_from_tensor = embd->shape[1];
    hp.n_vocab = to_int(*g, a + "vocab_size", g->get_int(a + "vocab_size"), false,
                        int(std::min<int64_t>(vocab_from_tensor, std::numeric_limits<int>::max())));
    hp.validate(path);

    ModelWeights &w = weights(*model);
    w.tok_embd = view_of(*g, "token_embd.weight");
    w.output_norm = view_of(*g, "output_norm.weight");
    w.output = view_of(*g, "output.weight");
    if (!w.output.data) {
        w.output = w.tok_embd;
        hp.tied_embeddings = true;
    }
    w.layers.resize(size_t(hp.n_layer));
    for (int i = 0; i < hp.n_layer; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        LayerWeights &l = w.layers[size_t(i)];
        l.attn_norm = view_of(*g, p + "attn_norm.weight");
        l.wq = view_of(*g, p + "attn_q.weight");
        l.wk = view_of(*g, p + "attn_k.weight");
        l.wv = view_of(*g, p + "attn_v.weight");
        l.wo = view_of(*g, p + "attn_output.weight");
        l.ffn_norm = view_of(*g, p + "ffn_norm.weight");
        l.w_gate = view_of(*g, p + "ffn_gate.weight");
        l.w_up = view_of(*g, p + "ffn_up.weight");
        l.w_down = view_of(*g, p + "ffn_down.weight");
    }
    check_weights(*model, path);

    auto tok = Tokenizer::from_gguf(*g);
    if (tok->n_vocab() > hp.n_vocab)
        throw FormatError(path + ": the tokenizer has " + std::to_string(tok->n_vocab()) +
                          " tokens but the model only " + std::to_string(hp.n_vocab));
    tokenizer(*model) = std::move(tok);

    ModelInfo &in = info(*model);
    in.format = ModelFormat::Gguf;
    in.path = path;
    in.name = g->get_string("general.name").value_or(std::filesystem::path(path).stem().string());
    in.file_bytes = g->file_size();
    in.tensor_count = g->tensors().size();
    for (const GgufTensorInfo &t : g->tensors())
        in.tensor_types[std::string(dtype_name(t.type))]++;
    in.gguf_version = g->version();
    if (const GgufValue *ct = g->find("tokenizer.chat_template"); ct && ct->as_string())
        in.chat_template = *ct->as_string();
    gguf(*model) = std::move(g);
    return model;
}

} // namespace longscope
