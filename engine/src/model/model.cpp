#include "longscope/model.h"

#include "longscope/errors.h"
#include "model/loader.h"
#include "model/weights.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

namespace longscope {

namespace fs = std::filesystem;

int64_t WeightView::n_elements() const
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    return n;
}

Model::Model() : m_weights(std::make_unique<ModelWeights>()) {}
Model::~Model() = default;

DecodeCost Model::decode_cost() const
{
    const ModelWeights &mw = *m_weights;
    DecodeCost c;
    c.output_params = double(mw.output.n_elements());
    c.matmul_params = c.output_params;
    for (const LayerWeights &l : mw.layers)
        for (const WeightView *v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            c.matmul_params += double(v->n_elements());
    if (!mw.layers.empty()) {
        const LayerWeights &last = mw.layers.back();
        for (const WeightView *v : {&last.wo, &last.w_gate, &last.w_up, &last.w_down})
            c.last_layer_kept_params += double(v->n_elements());
    }
    const bool tied = mw.output.data == mw.tok_embd.data;
    const double embd_row = double(mw.tok_embd.nbytes) / double(std::max<int64_t>(1, mw.tok_embd.ne(1)));
    c.streamed_bytes = double(m_info.weight_bytes) - (tied ? 0.0 : double(mw.tok_embd.nbytes));
    c.embd_row_bytes = tied ? 0.0 : embd_row;
    return c;
}

std::unique_ptr<Model> Model::load_files(const std::string &path)
{
    std::error_code ec;
    if (path.empty())
        throw IoError("no model path given");
    auto status = fs::status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
        throw IoError(path + ": " + ec.message());
    if (!fs::exists(status))
        throw IoError(path + ": no such file or directory");
    if (fs::is_directory(status)) {
        if (!fs::exists(fs::path(path) / "config.json"))
            throw FormatError(path + ": a model directory needs a config.json (Hugging Face layout)");
        return ModelBuilder::from_hf_dir(path);
    }
    return ModelBuilder::from_gguf(path);
}

namespace {

void check_one(const WeightView &w, std::vector<int64_t> expect, const std::string &source)
{
    if (!w.data)
        throw FormatError(source + ": missing tensor " + w.name);
    if (!dtype_supported(w.type))
        throw FormatError(source + ": tensor " + w.name + " has type " +
                          std::string(dtype_name(w.type)) +
                          ", which this engine cannot compute with yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)");
    // Trailing 1s are equivalent (a [n] vector may be stored as [n, 1]).
    std::vector<int64_t> got = w.shape;
    while (got.size() > expect.size() && got.back() == 1)
        got.pop_back();
    if (got != expect) {
        auto str = [](const std::vector<int64_t> &s) {
            std::string o = "[";
            for (size_t i = 0; i < s.size(); ++i)
                o += (i ? ", " : "") + std::to_string(s[i]);
            return o + "]";
        };
        throw FormatError(source + ": tensor " + w.name + " has shape " + str(w.shape) +
                          ", expected " + str(expect) + " (contiguous dimension first)");
    }
}

} // namespace

void ModelBuilder::check_weights(Model &m, const std::string &source)
{
    const HParams &hp = m.m_hparams;
    ModelWeights &w = *m.m_weights;
    const int64_t e = hp.n_embd, eq = hp.n_embd_q(), ekv = hp.n_embd_kv(), f = hp.n_ff, v = hp.n_vocab,
                  hd = hp.head_dim();
    if (int64_t(w.layers.size()) != hp.n_layer)
        throw FormatError(source + ": expected " + std::to_string(hp.n_layer) + " layers");
    uint64_t bytes = 0;
    auto check = [&](const WeightView &wv, std::vector<int64_t> shape) {
        check_one(wv, std::move(shape), source);
        bytes += wv.nbytes;
    };
    // Biases and norms are read as float vectors by every backend.
    auto check_vector = [&](const WeightView &wv, int64_t n) {
        check(wv, {n});
        if (wv.type != DType::F32 && wv.type != DType::F16 && wv.type != DType::BF16)
            throw FormatError(source + ": tensor " + wv.name + " has type " + std::string(dtype_name(wv.type)) +
                              ", expected F32, F16 or BF16 for a vector");
    };
    check(w.tok_embd, {e, v});
    check(w.output_norm, {e});
    if (w.output.data != w.tok_embd.data)
        check(w.output, {e, v});
    else
        check_one(w.output, {e, v}, source);
    for (const LayerWeights &l : w.layers) {
        check(l.attn_norm, {e});
        check(l.wq, {e, eq});
        check(l.wk, {e, ekv});
        check(l.wv, {e, ekv});
        if (hp.qkv_bias) {
            check_vector(l.bq, eq);
            check_vector(l.bk, ekv);
            check_vector(l.bv, ekv);
        }
        if (hp.qk_norm) {
            check_vector(l.q_norm, hd);
            check_vector(l.k_norm, hd);
        }
        check(l.wo, {eq, e});
        check(l.ffn_norm, {e});
        check(l.w_gate, {e, f});
        check(l.w_up, {e, f});
        check(l.w_down, {f, e});
        if (hp.post_norms) {
            check(l.attn_post_norm, {e});
            check(l.ffn_post_norm, {e});
        }
    }
    m.m_info.weight_bytes = bytes;
}

} // namespace longscope
