#include "arch/forward.h"
#include "longscope/engine.h"
#include "longscope/errors.h"
#include "runtime/backends.h"
#include "runtime/rope_base.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <span>
#include <thread>

namespace longscope {

namespace {

struct Sequence {
    std::vector<int32_t> history;     // evaluated tokens (prompt, padding included)
    std::vector<int32_t> pending;     // tokens still to evaluate (the prompt's rest, or the sampled one)
    std::unique_ptr<KvCache> kv;      // null in KvMode::None
    std::unique_ptr<KvCache> step_kv; // KvMode::None: this step's throw-away cache
    std::unique_ptr<SequenceDecoder> decoder; // sampling, stops, text: as generate()'s
    std::vector<float> logits;
    std::vector<float> rope_factors;  // this step's per-dimension RoPE factors (rope_in_effect)
    bool done = false;
    bool sampled = false; // its prompt is evaluated and it has been sampled at least once
};

} // namespace

std::vector<GenerateResult> generate_batch(const Model &model, const SessionOptions &options,
                                           const std::vector<GenerateRequest> &requests,
                                           const BatchTokenCallback &on_token,
                                           const MetricsCallback &on_metrics)
{
    using clock = std::chrono::steady_clock;
    if (requests.empty())
        throw InvalidArgument("the batch holds no prompt");
    const Settings &st = options.settings;
    st.validate();
    check_rope_settings(model.hparams(), st.rope);
    check_kv_types(st, model.hparams().head_dim());
    if (st.backend != ComputeBackend::Cpu)
        throw BackendError("batched generation runs on the CPU backend only (the CUDA backend evaluates one "
                           "sequence per session)");
    if (st.overflow == OverflowPolicy::Shift)
        throw InvalidArgument("batched generation does not shift the context: the shift overflow policy is for "
                              "one sequence (generate on a session; in the CLI, without --batch-file)");
    const HParams &hp = model.hparams();
    const int limit = st.context_limit > 0 ? st.context_limit
                      : options.n_ctx > 0  ? options.n_ctx
                                           : std::min(hp.n_ctx_train, k_default_ctx_cap);
    int threads = options.n_threads > 0 ? options.n_threads : std::max(1, int(std::thread::hardware_concurrency()));

    size_t longest = 0;
    for (const GenerateRequest &r : requests) {
        if (r.prompt.empty())
            throw InvalidArgument("a prompt in the batch is empty");
        if (r.max_new_tokens < 0)
            throw InvalidArgument("the number of tokens to generate must not be negative");
        if (r.continue_context || r.keep_reply_in_context)
            throw InvalidArgument("a batch has no context to continue or keep: continue_context and "
                                  "keep_reply_in_context are for generate() on a session");
        r.sampling.validate();
        longest = std::max(longest, r.prompt.size());
    }
    const bool pad = st.attention.reproduce_padding_bug && requests.size() > 1;
    const std::unique_ptr<Backend> backend = make_backend(ComputeBackend::Cpu, model, threads);
    std::vector<Sequence> seqs(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
        Sequence &s = seqs[i];
        const GenerateRequest &r = requests[i];
        if (pad)
            s.pending.assign(longest - r.prompt.size(), 0);
        s.pending.insert(s.pending.end(), r.prompt.begin(), r.prompt.end());
        if (int64_t(s.pending.size()) > limit)
            throw ContextOverflow("prompt " + std::to_string(i + 1) + " of the batch has " +
                                  std::to_string(s.pending.size()) + " tokens, more than the context limit of " +
                                  std::to_string(limit));
        for (int32_t id : s.pending)
            if (id < 0 || id >= hp.n_vocab)
                throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary");
        if (st.kv_mode != KvMode::None)
            s.kv = backend->make_kv(st.kv_mode, limit, st.kv_type_k, st.kv_type_v);
        TokenCallback forward_token;
        if (on_token)
            forward_token = [&on_token, i](int32_t id, std::string_view text) { return on_token(i, id, text); };
        s.decoder = std::make_unique<SequenceDecoder>(model.tokenizer(), r, std::move(forward_token));
        s.done = s.decoder->done();
    }

    // With memory-efficient attention each prompt goes in as chunks of the backend's prefill
    // chunk, as Session::eval takes a prompt, so that no activation buffer grows with the
    // prompts (a 16384-token prompt held 1.7 GiB of TinyLlama's activations in one pass); a
    // sequence is sampled after the step that evaluated the last of its prompt.
    const size_t chunk = st.attention.memory_efficient ? size_t(std::max(1, backend->prefill_chunk()))
                                                       : std::numeric_limits<size_t>::max();
    const auto t_start = clock::now();
    double prefill_seconds = 0;
    bool prefilling = true;
    StepMetrics m;
    MemoryLedger peaks;
    for (;;) {
        const auto t_step = clock::now();
        // One forward pass over every sequence that still has tokens to evaluate.
        std::vector<ForwardSegment> segs;
        std::vector<size_t> owner;
        std::vector<size_t> taken; // pending tokens each segment evaluates
        std::vector<std::vector<int32_t>> full; // KvMode::None: the whole sequence
        full.reserve(seqs.size());
        for (size_t i = 0; i < seqs.size(); ++i) {
            Sequence &s = seqs[i];
            if (s.done || s.pending.empty())
                continue;
            const int len = int(s.history.size() + s.pending.size());
            ForwardSegment seg;
            RopeInEffect rope = rope_in_effect(hp, st.rope, len);
            s.rope_factors = std::move(rope.factors);
            seg.params.rope_base = rope.base;
            seg.params.pos_scale = rope.pos_scale;
            seg.params.rope_factors = s.rope_factors;
            seg.params.rope_attn_factor = rope.attn_factor;
            seg.params.keys_before_rope = st.rope.store_kv_before_rope;
            seg.params.memory_efficient = st.attention.memory_efficient;
            seg.params.causal_flash = st.attention.causal_flash;
            // A prompt's rope is chosen for its whole length (rope_in_effect above, the same for
            // every chunk of it), as Session::eval chooses it: only a sampled token can cross.
            size_t take = s.pending.size();
            if (s.kv && s.sampled && crosses_longrope_switch(hp, st.rope, int(s.history.size()), len)) {
                // As Session::eval: the whole context again with the long factors.
                s.kv->ensure(len);
                full.emplace_back(s.history);
                full.back().insert(full.back().end(), s.pending.begin(), s.pending.end());
                seg.tokens = full.back();
                seg.n_past = 0;
                seg.kv = s.kv.get();
            } else if (s.kv) {
                s.kv->ensure(len);
                take = std::min(s.pending.size(), chunk);
                seg.tokens = std::span<const int32_t>(s.pending).first(take);
                seg.n_past = int(s.history.size());
                seg.kv = s.kv.get();
            } else {
                full.emplace_back(s.history);
                full.back().insert(full.back().end(), s.pending.begin(), s.pending.end());
                s.step_kv = backend->make_kv(KvMode::Static, len, st.kv_type_k, st.kv_type_v);
                s.step_kv->ensure(len);
                seg.tokens = full.back();
                seg.n_past = 0;
                seg.kv = s.step_kv.get();
            }
            seg.logits_from = int(seg.tokens.size()) - 1;
            segs.push_back(seg);
            owner.push_back(i);
            taken.push_back(take);
        }
        if (segs.empty())
            break;
        ForwardStats stats;
        auto logits = forward(*backend, model, segs, stats);
        uint64_t kv_reserved = 0, kv_resident = 0, kv_copied = 0, kv_peak = 0;
        for (const Sequence &s : seqs) {
            const KvCache *kv = s.kv ? s.kv.get() : s.step_kv.get();
            if (!kv)
                continue;
            kv_reserved += kv->reserved_bytes();
            kv_resident += kv->resident_bytes();
            kv_copied += kv->copied_bytes();
            kv_peak += kv->peak_resident_bytes(); // concat's old and new buffers at once
        }
        const size_t v = size_t(hp.n_vocab);
        for (size_t k = 0; k < owner.size(); ++k) {
            Sequence &s = seqs[owner[k]];
            const auto took = s.pending.begin() + std::ptrdiff_t(taken[k]);
            s.history.insert(s.history.end(), s.pending.begin(), took);
            s.pending.erase(s.pending.begin(), took);
            if (s.pending.empty())
                s.logits.assign(logits.begin() + std::ptrdiff_t(k * v), logits.begin() + std::ptrdiff_t((k + 1) * v));
            s.step_kv.reset();
        }
        // The prefill lasts until no sequence has prompt tokens left after a step.
        bool prompts_left = false;
        for (size_t idx : owner)
            prompts_left = prompts_left || !seqs[idx].pending.empty();
        if (on_metrics) {
            int n_tokens = 0, position = 0;
            for (const ForwardSegment &sg : segs) {
                n_tokens += int(sg.tokens.size());
                position = std::max(position, sg.n_past + int(sg.tokens.size()));
            }
            m.phase = prefilling ? StepPhase::Prefill : StepPhase::Decode;
            m.n_tokens = n_tokens;
            m.position = position;
            m.seconds = std::chrono::duration<double>(clock::now() - t_step).count();
            m.tokens_per_second = m.seconds > 0 ? n_tokens / m.seconds : 0;
            m.ntk_alpha = effective_ntk_alpha(st.rope, position, hp.n_ctx_train);
            m.rope_base = segs.front().params.rope_base;
            m.settings = st;
            m.settings.context_limit = limit;
            m.attention_tiles_skipped = stats.tiles_skipped;
            m.threads = stats.threads;
            MemoryLedger &l = m.memory;
            l.weights = model.info().weight_bytes;
            l.kv_reserved = kv_reserved;
            l.kv_resident = kv_resident;
            l.scratch = stats.scratch_bytes;
            l.total = l.weights + kv_resident + l.scratch;
            peaks.peak_kv_reserved = std::max(peaks.peak_kv_reserved, kv_reserved);
            peaks.peak_kv_resident = std::max({peaks.peak_kv_resident, kv_resident, kv_peak});
            peaks.peak_scratch = std::max(peaks.peak_scratch, l.scratch);
            peaks.peak_total = std::max(peaks.peak_total, l.total);
            l.peak_kv_reserved = peaks.peak_kv_reserved;
            l.peak_kv_resident = peaks.peak_kv_resident;
            l.peak_scratch = peaks.peak_scratch;
            l.peak_total = peaks.peak_total;
            l.process_rss = process_rss_bytes();
            l.kv_bytes_copied = kv_copied;
            on_metrics(m);
            ++m.step;
        }
        if (prefilling && !prompts_left) {
            prefill_seconds = std::chrono::duration<double>(clock::now() - t_start).count();
            prefilling = false;
        }
        // Sample the next token of each sequence whose prompt (or last token) is evaluated.
        for (size_t idx : owner) {
            Sequence &s = seqs[idx];
            if (!s.pending.empty())
                continue;
            s.sampled = true;
            if (s.decoder->step(s.logits, s.history, int(s.history.size()), limit))
                s.pending.push_back(s.decoder->next_token());
            else
                s.done = true;
        }
    }
    const double total = std::chrono::duration<double>(clock::now() - t_start).count();
    std::vector<GenerateResult> out;
    for (size_t i = 0; i < seqs.size(); ++i) {
        GenerateResult r = seqs[i].decoder->finish();
        r.n_prompt = int(requests[i].prompt.size());
        r.prefill_seconds = prefill_seconds;
        r.decode_seconds = total - prefill_seconds;
        out.push_back(std::move(r));
    }
    return out;
}

} // namespace longscope
