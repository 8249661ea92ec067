#include "longscope/model.h"

#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "longscope/mapped_file.h"
#include "model/loader.h"
#include "cpu/packed.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

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

Model::Model() = default;
Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string &path, const LoadProgress &progress)
{
    if (progress && !progress(0.0))
        throw Cancelled("loading " + path + " was cancelled");
    auto model = load_files(path);
    model->pack_for_cpu(progress);
    return model;
}

// Every matrix the CPU kernels want re-laid out (cpu/packed.h) is packed into memory of the
// Model's own, and the pages of the original in the file mapping are let go. With a progress
// callback, every other weight has one byte of each page read, so the first generation does
// not stall on page faults; progress is reported per tensor and a cancel stops the load.
void Model::pack_for_cpu(const LoadProgress &progress)
{
    std::vector<WeightView *> views;
    ModelWeights &w = m_weights;
    views.push_back(&w.tok_embd);
    views.push_back(&w.output_norm);
    const bool tied = w.output.data == w.tok_embd.data;
    views.push_back(&w.output);
    for (LayerWeights &l : w.layers)
        for (WeightView *v : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
            views.push_back(v);
    uint64_t total = 0, done = 0;
    for (const WeightView *v : views)
        total += v->nbytes;
    const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
    volatile uint8_t sink = 0;
    for (WeightView *v : views) {
        const bool matrix = v != &w.tok_embd && v != &w.output_norm;
        if (matrix && cpu_wants_packed(*v)) {
            const int64_t n_in = v->ne(0), n_out = v->ne(1), groups = n_out / packed_group_rows;
            const size_t bytes = packed_size(n_in, n_out);
            std::shared_ptr<uint8_t> buf(static_cast<uint8_t *>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)),
                                         std::free);
            if (!buf)
                throw OutOfMemory("loading " + m_info.path + ": no memory for the " + std::to_string(bytes >> 20) +
                                  " MiB CPU copy of " + v->name);
            const auto *src = static_cast<const uint8_t *>(v->data);
            const int64_t parts = std::min<int64_t>(n_threads, groups);
            std::vector<std::thread> threads;
            for (int64_t i = 1; i < parts; ++i)
                threads.emplace_back(
                    [&, i] { pack_q4_k(src, n_in, buf.get(), groups * i / parts, groups * (i + 1) / parts); });
            pack_q4_k(src, n_in, buf.get(), 0, groups / parts);
            for (std::thread &t : threads)
                t.join();
            v->cpu_packed = buf.get();
            m_packed.push_back(std::move(buf));
            m_info.weight_bytes = m_info.weight_bytes + bytes - v->nbytes;
            if (!(tied && v == &w.output))
                for (const auto &f : m_files)
                    f->release(v->data, v->nbytes);
        } else if (progress && !(tied && v == &w.output)) {
            const auto *p = static_cast<const uint8_t *>(v->data);
            for (uint64_t off = 0; off < v->nbytes; off += 4096)
                sink = sink + p[off];
        }
        done += v->nbytes;
        if (progress && !progress(total ? double(done) / double(total) : 1.0))
            throw Cancelled("loading " + m_info.path + " was cancelled");
    }
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
    ModelWeights &w = m.m_weights;
    const int64_t e = hp.n_embd, ekv = hp.n_embd_kv(), f = hp.n_ff, v = hp.n_vocab;
    if (int64_t(w.layers.size()) != hp.n_layer)
        throw FormatError(source + ": expected " + std::to_string(hp.n_layer) + " layers");
    uint64_t bytes = 0;
    auto check = [&](const WeightView &wv, std::vector<int64_t> shape) {
        check_one(wv, std::move(shape), source);
        bytes += wv.nbytes;
    };
    check(w.tok_embd, {e, v});
    check(w.output_norm, {e});
    if (w.output.data != w.tok_embd.data)
        check(w.output, {e, v});
    else
        check_one(w.output, {e, v}, source);
    for (const LayerWeights &l : w.layers) {
        check(l.attn_norm, {e});
        check(l.wq, {e, e});
        check(l.wk, {e, ekv});
        check(l.wv, {e, ekv});
        check(l.wo, {e, e});
        check(l.ffn_norm, {e});
        check(l.w_gate, {e, f});
        check(l.w_up, {e, f});
        check(l.w_down, {f, e});
    }
    m.m_info.weight_bytes = bytes;
}

} // namespace longscope
