#include "longscope/model.h"

#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "longscope/mapped_file.h"
#include "model/loader.h"
#include "cpu/packed.h"
#include "kv/kv_store.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <sys/mman.h>
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

std::unique_ptr<Model> Model::load(const std::string &path, const LoadProgress &progress, bool for_cpu)
{
    if (progress && !progress(0.0))
        throw Cancelled("loading " + path + " was cancelled");
    auto model = load_files(path);
    if (for_cpu)
        model->prepare_for_cpu(progress);
    else if (progress && !progress(1.0))
        throw Cancelled("loading " + path + " was cancelled");
    return model;
}

// The matrices the forward pass multiplies by are copied out of the file mapping into one
// block of the Model's own memory, asked for in huge pages: a decode step streams every
// matrix once, and with 4 KiB file pages the hardware prefetchers stop at every page edge
// (one core read F16 rows at 21 GB/s from 4 KiB pages and at 28 GB/s from 2 MiB pages here).
// Matrices the CPU kernels want re-laid out (cpu/packed.h) are packed on the way. The file's
// pages are then let go, so the weights are held once. LONGSCOPE_COPY_WEIGHTS=0 leaves them in
// the mapping (packed matrices are still packed). With a progress callback, the weights left
// in the mapping have one byte of each page read, so the first generation does not stall on
// page faults; progress is reported per tensor and a cancel stops the load.
void Model::prepare_for_cpu(const LoadProgress &progress)
{
    if (m_cpu_prepared)
        return;
    m_cpu_prepared = true;
    ModelWeights &w = m_weights;
    // A tied output matrix is the embedding table: it is streamed every step like any other
    // matrix, so it is copied (and packed) too, and the embedding lookup reads the same copy.
    const bool tied = w.output.data == w.tok_embd.data;
    std::vector<WeightView *> matrices{&w.output}, others{&w.output_norm};
    if (!tied)
        others.push_back(&w.tok_embd);
    for (LayerWeights &l : w.layers) {
        for (WeightView *v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            matrices.push_back(v);
        others.push_back(&l.attn_norm);
        others.push_back(&l.ffn_norm);
    }
    const char *env = std::getenv("LONGSCOPE_COPY_WEIGHTS");
    bool copy = !(env && std::string_view(env) == "0"), pack_any = true;
    // Where each matrix goes in the block (64-byte aligned), or nowhere.
    std::vector<size_t> offset(matrices.size(), SIZE_MAX);
    size_t total_bytes = 0;
    auto plan = [&] {
        total_bytes = 0;
        for (size_t i = 0; i < matrices.size(); ++i) {
            const WeightView &v = *matrices[i];
            const bool pack = pack_any && cpu_wants_packed(v);
            offset[i] = SIZE_MAX;
            if (!pack && !copy)
                continue;
            offset[i] = total_bytes;
            total_bytes += ((pack ? packed_size(v.type, v.ne(0), v.ne(1)) : size_t(v.nbytes)) + 63) / 64 * 64;
        }
    };
    plan();
    // Memory the system can give (the file's own cached pages count as available: they are let
    // go as the copy is made). Where the copy would not fit with room to spare, the weights are
    // used in place in the mapping, which the system can page from the file.
    const uint64_t available = KvStore::available_memory_bytes();
    auto fits = [&] { return total_bytes + total_bytes / 8 + (uint64_t(512) << 20) <= available; };
    if (total_bytes > 0 && !fits()) {
        copy = false;
        plan();
        if (total_bytes > 0 && !fits()) {
            pack_any = false;
            plan();
        }
    }
    uint8_t *block = nullptr;
    if (total_bytes > 0) {
        constexpr size_t huge = size_t(2) << 20;
        const size_t rounded = (total_bytes + huge - 1) / huge * huge;
        std::shared_ptr<uint8_t> buf(static_cast<uint8_t *>(std::aligned_alloc(huge, rounded)), std::free);
        if (buf) {
#ifdef MADV_HUGEPAGE
            ::madvise(buf.get(), rounded, MADV_HUGEPAGE);
#endif
            block = buf.get();
            m_packed.push_back(std::move(buf));
        } else { // refused (an address-space limit, say): everything stays in the mapping
            copy = false;
            pack_any = false;
            plan();
        }
    }
    m_info.cpu_copy_bytes = total_bytes;

    uint64_t total = 0, done = 0;
    for (const WeightView *v : matrices)
        total += v->nbytes;
    for (const WeightView *v : others)
        total += v->nbytes;
    auto report = [&](const WeightView &v) {
        done += v.nbytes;
        if (progress && !progress(total ? double(done) / double(total) : 1.0))
            throw Cancelled("loading " + m_info.path + " was cancelled");
    };
    const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
    volatile uint8_t sink = 0;
    auto prefault = [&](const WeightView &v) {
        const auto *p = static_cast<const uint8_t *>(v.data);
        for (uint64_t off = 0; off < v.nbytes; off += 4096)
            sink = sink + p[off];
    };
    for (size_t i = 0; i < matrices.size(); ++i) {
        WeightView &v = *matrices[i];
        if (offset[i] == SIZE_MAX) {
            if (progress)
                prefault(v);
            report(v);
            continue;
        }
        uint8_t *dst = block + offset[i];
        const auto *src = static_cast<const uint8_t *>(v.data);
        const bool pack = pack_any && cpu_wants_packed(v);
        // Rows split over threads: groups of 16 rows when packing, bytes when copying.
        const int64_t units = pack ? v.ne(1) / packed_group_rows : int64_t(v.nbytes);
        auto work = [&](int64_t a, int64_t b) {
            if (pack)
                pack_rows(v.type, src, v.ne(0), dst, a, b);
            else
                std::memcpy(dst + a, src + a, size_t(b - a));
        };
        const int64_t parts = std::clamp<int64_t>(pack ? units / 16 : units >> 20, 1, n_threads);
        std::vector<std::thread> threads;
        for (int64_t p = 1; p < parts; ++p)
            threads.emplace_back([&, p] { work(units * p / parts, units * (p + 1) / parts); });
        work(0, units / parts);
        for (std::thread &t : threads)
            t.join();
        const void *original = v.data;
        if (pack) {
            v.cpu_packed = dst;
            ++m_info.packed_matrices;
            m_info.weight_bytes = m_info.weight_bytes + packed_size(v.type, v.ne(0), v.ne(1)) - v.nbytes;
        } else {
            v.data = dst;
        }
        if (tied && &v == &w.output) { // the embedding lookup reads the copy too
            w.tok_embd.data = v.data;
            w.tok_embd.cpu_packed = v.cpu_packed;
        }
        for (const auto &f : m_files)
            f->release(original, v.nbytes);
        if (m_gguf)
            m_gguf->mapping().release(original, v.nbytes);
        report(v);
    }
    for (const WeightView *v : others) {
        if (progress)
            prefault(*v);
        report(*v);
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
