// The matrices the forward pass multiplies by are copied out of the file mapping into one
// block of the Model's own memory, asked for in huge pages: a decode step streams every
// matrix once, and with 4 KiB file pages the hardware prefetchers stop at every page edge
// (one core read F16 rows at 21 GB/s from 4 KiB pages and at 28 GB/s from 2 MiB pages here).
// Matrices the backend wants re-laid out (for the CPU: cpu/packed.h) are packed on the way.
// The file's pages are then let go, so the weights are held once. Without the copy
// (CpuOptions::copy_weights off) the matrices stay in the mapping and only the packed ones
// move. With a progress callback, the weights left in the mapping have one byte of each page
// read, so the first generation does not stall on page faults; progress is reported per
// tensor and a cancel stops the work.
#include "core/system_memory.h"
#include "longscope/errors.h"
#include "longscope/gguf.h"
#include "longscope/mapped_file.h"
#include "model/loader.h"
#include "model/weight_preparer.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace longscope {

void ModelBuilder::prepare_weights(Model &m, const WeightPreparer &prep, const LoadProgress &progress)
{
    if (m.m_cpu_prepared)
        return;
    m.m_cpu_prepared = true;
    ModelWeights &w = *m.m_weights;
    // A tied output matrix is the embedding table: it is streamed every step like any other
    // matrix, so it is copied (and packed) too, and the embedding lookup reads the same copy.
    const bool tied = w.output.data == w.tok_embd.data;
    std::vector<WeightView *> matrices{&w.output}, others{&w.output_norm};
    if (!tied)
        others.push_back(&w.tok_embd);
    for (LayerWeights &l : w.layers) {
        for (WeightView *v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            matrices.push_back(v);
        for (WeightView *v : {&l.attn_norm, &l.ffn_norm, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                              &l.attn_post_norm, &l.ffn_post_norm})
            if (v->data)
                others.push_back(v);
    }
    bool copy = prep.copy_weights(), pack_any = true;
    // Where each matrix goes in the block (64-byte aligned), or nowhere.
    std::vector<size_t> offset(matrices.size(), SIZE_MAX);
    size_t total_bytes = 0;
    auto plan = [&] {
        total_bytes = 0;
        for (size_t i = 0; i < matrices.size(); ++i) {
            const WeightView &v = *matrices[i];
            const bool pack = pack_any && prep.packs(v);
            offset[i] = SIZE_MAX;
            if (!pack && !copy)
                continue;
            offset[i] = total_bytes;
            total_bytes += ((pack ? prep.packed_bytes(v) : size_t(v.nbytes)) + 63) / 64 * 64;
        }
    };
    plan();
    // Memory the system can give (the file's own cached pages count as available: they are let
    // go as the copy is made). Where the copy would not fit with room to spare, the weights are
    // used in place in the mapping, which the system can page from the file.
    const uint64_t available = available_memory_bytes();
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
        std::shared_ptr<uint8_t> buf = allocate_huge_pages(total_bytes);
        if (buf) {
            block = buf.get();
            m.m_packed.push_back(std::move(buf));
        } else { // refused (an address-space limit, say): everything stays in the mapping
            copy = false;
            pack_any = false;
            plan();
        }
    }
    m.m_info.cpu_copy_bytes = total_bytes;

    uint64_t total = 0, done = 0;
    for (const WeightView *v : matrices)
        total += v->nbytes;
    for (const WeightView *v : others)
        total += v->nbytes;
    auto report = [&](const WeightView &v) {
        done += v.nbytes;
        if (progress && !progress(total ? double(done) / double(total) : 1.0))
            throw Cancelled("loading " + m.m_info.path + " was cancelled");
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
        const bool pack = pack_any && prep.packs(v);
        // Split over threads: the packing's units (sixteen or more per thread), or bytes when
        // copying (a MiB or more per thread).
        const int64_t units = pack ? prep.pack_units(v) : int64_t(v.nbytes);
        auto work = [&](int64_t a, int64_t b) {
            if (pack)
                prep.pack(v, src, dst, a, b);
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
            ++m.m_info.packed_matrices;
            m.m_info.weight_bytes = m.m_info.weight_bytes + prep.packed_bytes(v) - v.nbytes;
        } else {
            v.data = dst;
        }
        if (tied && &v == &w.output) { // the embedding lookup reads the copy too
            w.tok_embd.data = v.data;
            w.tok_embd.cpu_packed = v.cpu_packed;
        }
        for (const auto &f : m.m_files)
            f->release(original, v.nbytes);
        if (m.m_gguf)
            m.m_gguf->mapping().release(original, v.nbytes);
        report(v);
    }
    for (const WeightView *v : others) {
        if (progress)
            prefault(*v);
        report(*v);
    }
}

} // namespace longscope
