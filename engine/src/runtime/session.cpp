#include "longscope/engine.h"

#include "cpu/cpu_forward.h"
#include "cpu/ops.h"
#include "cuda_host/cuda_forward.h"
#include "kv/kv_store.h"
#include "longscope/errors.h"
#include "runtime/rope_base.h"

#include <algorithm>
#include <cmath>

#include <chrono>
#include <thread>

namespace longscope {

namespace {

// Memory-efficient attention evaluates long prompts in chunks of this many tokens, so no
// activation buffer grows with the prompt.
constexpr int k_prefill_chunk = 256;

int resolve_limit(const Model &model, int n_ctx, const Settings &s)
{
    if (s.context_limit > 0)
        return s.context_limit;
    if (n_ctx > 0)
        return n_ctx;
    return std::min(model.hparams().n_ctx_train, k_default_ctx_cap);
}

} // namespace

Session::Session(const Model &model, const SessionOptions &options) : m_model(model)
{
    if (options.n_ctx < 0)
        throw InvalidArgument("context limit must be positive, got " + std::to_string(options.n_ctx));
    if (options.n_ctx > (1 << 24))
        throw InvalidArgument("context limit " + std::to_string(options.n_ctx) + " is too large");
    if (options.n_threads < 0 || options.n_threads > 1024)
        throw InvalidArgument("thread count must be between 1 and 1024, got " +
                              std::to_string(options.n_threads));
    options.settings.validate();
    m_settings = options.settings;
    // The trained context is the default, not a ceiling: a larger limit is allowed. The
    // default is capped so that a model trained on 128K tokens does not reserve a huge cache
    // nobody asked for.
    m_n_ctx = resolve_limit(model, options.n_ctx, m_settings);
    m_settings.context_limit = m_n_ctx; // settings() reports the limit in effect
    int threads = options.n_threads;
    if (threads == 0)
        threads = std::max(1, int(std::thread::hardware_concurrency()));
    m_forward = std::make_unique<CpuForward>(model, threads);
    if (m_settings.backend == ComputeBackend::Cuda) {
        m_cuda = std::make_unique<CudaForward>(model);
        if (m_settings.kv_mode != KvMode::None)
            m_cuda_kv = m_cuda->make_kv(m_settings.kv_mode, m_n_ctx);
    } else if (m_settings.kv_mode != KvMode::None) {
        m_kv = make_kv_store(m_settings.kv_mode, model.hparams().n_layer, m_n_ctx, model.hparams().n_embd_kv());
    }
    m_kv_before_rope = m_settings.rope.store_kv_before_rope;
}

Session::~Session() = default;

int Session::n_past() const { return int(m_history.size()); }
int Session::n_threads() const { return m_forward->n_threads(); }

void Session::reset()
{
    m_history.clear();
    m_key_base.clear();
    if (m_kv)
        m_kv->clear();
    if (m_cuda_kv)
        m_cuda_kv->clear();
}

void Session::set_settings(const Settings &settings)
{
    settings.validate();
    // 0 means the model's default, as in SessionOptions.
    const int limit = resolve_limit(m_model, 0, settings);
    if (limit < n_past())
        throw InvalidArgument("the context limit cannot drop to " + std::to_string(limit) +
                              " below the " + std::to_string(n_past()) + " tokens already in the context");
    if (settings.backend == ComputeBackend::Cuda && !m_cuda) {
        // Throws BackendError when CUDA cannot be used; nothing has changed yet.
        m_cuda = std::make_unique<CudaForward>(m_model);
        // The device cache is built from the context at the next step.
        if (m_kv) {
            m_retired_copied += m_kv->copied_bytes();
            m_kv.reset();
        }
        m_key_base.clear();
    } else if (settings.backend == ComputeBackend::Cpu && m_cuda) {
        // The CPU cache is built from the context at the next step.
        m_cuda_kv.reset();
        m_cuda.reset();
        m_key_base.clear();
    }
    m_settings = settings;
    m_settings.context_limit = limit;
    m_n_ctx = limit;
}

void Session::truncate(int n_tokens)
{
    if (n_tokens < 0 || n_tokens > n_past())
        throw InvalidArgument("cannot keep " + std::to_string(n_tokens) + " tokens of a context of " +
                              std::to_string(n_past()));
    // The cache rows past n_tokens stay allocated and are overwritten by the next tokens.
    m_history.resize(size_t(n_tokens));
    if (m_key_base.size() > size_t(n_tokens))
        m_key_base.resize(size_t(n_tokens));
}

double rope_base_in_effect(const HParams &hp, const RopeSettings &rope, int seq_len)
{
    double base = hp.rope_base;
    const double d = hp.n_rot;
    // Hugging Face "dynamic" NTK from config.json: grows once the sequence passes the
    // trained length.
    if (hp.rope_scaling == RopeScalingType::Dynamic && seq_len > hp.n_ctx_train) {
        const double f = hp.rope_scaling_factor;
        base *= std::pow(f * double(seq_len) / hp.n_ctx_train - (f - 1), d / (d - 2));
    }
    // NTK-aware alpha set by the user: base' = base * alpha^(d / (d - 2)).
    const double alpha = effective_ntk_alpha(rope, seq_len, hp.n_ctx_train);
    if (alpha != 1.0)
        base *= std::pow(alpha, d / (d - 2));
    return base;
}

double rope_pos_scale(const HParams &hp)
{
    return hp.rope_scaling == RopeScalingType::Linear ? 1.0 / hp.rope_scaling_factor : 1.0;
}

double Session::rope_base_for(int seq_len) const
{
    return rope_base_in_effect(m_model.hparams(), m_settings.rope, seq_len);
}

void Session::convert_cached_keys(bool to_before_rope, double rope_base)
{
    // Rotating by -angle undoes a rotation; each cached key remembers the base it was
    // rotated with, since with auto alpha that differs from position to position.
    const HParams &hp = m_model.hparams();
    const int n = n_past();
    const double pos_scale = rope_pos_scale(hp);
    const int64_t ekv = hp.n_embd_kv();
    for (int j = 0; j < n; ++j) {
        const double base = to_before_rope ? m_key_base[size_t(j)] : rope_base;
        if (base <= 0)
            continue;
        const std::vector<double> inv = rope_inv_freq(base, hp.n_rot);
        const double pos[1] = {(to_before_rope ? -1.0 : 1.0) * j * pos_scale};
        for (int l = 0; l < hp.n_layer; ++l)
            rope(m_kv->keys(l) + j * ekv, 1, hp.n_head_kv, hp.head_dim(), hp.n_rot, hp.rope_style, pos, inv);
        m_key_base[size_t(j)] = to_before_rope ? 0.0 : rope_base;
    }
    m_kv_before_rope = to_before_rope;
}

void Session::apply_kv_settings(double rope_base)
{
    const HParams &hp = m_model.hparams();
    const KvMode want = m_settings.kv_mode;
    if (want == KvMode::None) {
        if (m_kv) {
            m_retired_copied += m_kv->copied_bytes();
            m_kv.reset();
        }
        m_key_base.clear();
        return;
    }
    if (!m_kv || m_kv->mode() != want || m_kv->limit() != m_n_ctx) {
        auto fresh = make_kv_store(want, hp.n_layer, m_n_ctx, hp.n_embd_kv());
        if (m_kv) {
            // Migrate the cached tokens: nothing is lost when the mode or limit changes.
            copy_kv_rows(*m_kv, *fresh, n_past());
            m_retired_copied += m_kv->copied_bytes() + uint64_t(n_past()) * uint64_t(hp.n_embd_kv()) *
                                                         sizeof(float) * 2 * uint64_t(hp.n_layer);
            m_kv = std::move(fresh);
        } else {
            // From the no-cache mode: build the cache by evaluating the context once.
            m_kv = std::move(fresh);
            m_key_base.clear();
            m_kv_before_rope = m_settings.rope.store_kv_before_rope;
            if (n_past() > 0) {
                m_kv->ensure(n_past());
                ForwardStats st;
                run(m_history, 0, n_past(), *m_kv, forward_params(rope_base), st);
                m_key_base.assign(size_t(n_past()), m_kv_before_rope ? 0.0 : rope_base);
            }
        }
    }
    if (m_kv_before_rope != m_settings.rope.store_kv_before_rope)
        convert_cached_keys(m_settings.rope.store_kv_before_rope, rope_base);
}

ForwardParams Session::forward_params(double rope_base) const
{
    const HParams &hp = m_model.hparams();
    ForwardParams p;
    p.rope_base = rope_base;
    p.pos_scale = rope_pos_scale(hp);
    p.keys_before_rope = m_settings.rope.store_kv_before_rope;
    p.memory_efficient = m_settings.attention.memory_efficient;
    p.causal_flash = m_settings.attention.causal_flash;
    return p;
}

void Session::run(std::span<const int32_t> tokens, int start_pos, int logits_from, KvStore &kv,
                  const ForwardParams &params, ForwardStats &stats)
{
    // logits_from is an absolute position: logits are kept for tokens at positions >= it.
    const int n = int(tokens.size());
    const int chunk = params.memory_efficient ? k_prefill_chunk : std::max(1, n);
    for (int c0 = 0; c0 < n; c0 += chunk) {
        const int c1 = std::min(n, c0 + chunk);
        const int first = std::max(0, logits_from - (start_pos + c0));
        auto l = m_forward->eval(tokens.subspan(size_t(c0), size_t(c1 - c0)), start_pos + c0, first, kv,
                                 params, stats);
        m_logits.insert(m_logits.end(), l.begin(), l.end());
    }
}

std::span<const float> Session::eval(std::span<const int32_t> tokens, bool all_logits)
{
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    if (tokens.empty())
        throw InvalidArgument("nothing to evaluate: the token list is empty");
    const HParams &hp = m_model.hparams();
    for (int32_t id : tokens)
        if (id < 0 || id >= hp.n_vocab)
            throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary of " +
                                  std::to_string(hp.n_vocab));
    const int n = int(tokens.size());
    const int64_t len = int64_t(m_history.size()) + n;
    if (len > m_n_ctx)
        throw ContextOverflow(std::to_string(len) + " tokens do not fit in the context limit of " +
                              std::to_string(m_n_ctx) + " (raise the context limit)");
    const int past = n_past();
    const double base = rope_base_for(int(len));
    const ForwardParams params = forward_params(base);
    ForwardStats st;
    m_logits.clear();
    uint64_t kv_reserved = 0, kv_resident = 0;

    bool on_cuda = m_cuda != nullptr;
    if (on_cuda) {
        try {
            step_cuda(tokens, past, int(len), base, params, all_logits, st, kv_reserved, kv_resident);
        } catch (const BackendError &e) {
            // The context is still here (m_history): rebuild it on the CPU and go on there.
            fall_back_to_cpu(e.what());
            on_cuda = false;
            st = ForwardStats{};
            m_logits.clear();
        }
    }
    if (on_cuda) {
        // step_cuda did the work
    } else if (m_settings.kv_mode == KvMode::None) {
        // No cache: recompute the whole sequence in a buffer that lives for this step only.
        apply_kv_settings(base);
        std::vector<int32_t> seq(m_history);
        seq.insert(seq.end(), tokens.begin(), tokens.end());
        auto scratch_kv = make_kv_store(KvMode::Static, hp.n_layer, int(len), hp.n_embd_kv());
        run(seq, 0, all_logits ? past : int(len) - 1, *scratch_kv, params, st);
        kv_reserved = scratch_kv->reserved_bytes();
        kv_resident = scratch_kv->resident_bytes();
    } else {
        apply_kv_settings(base);
        m_kv->ensure(int(len));
        m_logits.clear();
        run(tokens, past, all_logits ? past : int(len) - 1, *m_kv, params, st);
        m_key_base.resize(size_t(len), params.keys_before_rope ? 0.0 : base);
        std::fill(m_key_base.begin() + past, m_key_base.end(), params.keys_before_rope ? 0.0 : base);
        kv_reserved = m_kv->reserved_bytes();
        kv_resident = m_kv->resident_bytes();
    }
    m_history.insert(m_history.end(), tokens.begin(), tokens.end());

    StepMetrics &m = m_last;
    m.step = m_steps++;
    m.phase = n > 1 || past == 0 ? StepPhase::Prefill : StepPhase::Decode;
    m.n_tokens = n;
    m.position = int(len);
    m.seconds = std::chrono::duration<double>(clock::now() - t0).count();
    m.tokens_per_second = m.seconds > 0 ? n / m.seconds : 0;
    m.ntk_alpha = effective_ntk_alpha(m_settings.rope, int(len), hp.n_ctx_train);
    m.rope_base = base;
    m.settings = m_settings;
    m.settings.context_limit = m_n_ctx;
    m.attention_tiles_skipped = st.tiles_skipped;
    fill_ledger(m.memory, st.scratch_bytes, kv_reserved, kv_resident);
    if (m_cuda) {
        try {
            const DeviceMemoryInfo d = m_cuda->memory();
            m.memory.device_free = d.free;
            m.memory.device_used = d.total - d.free;
        } catch (const BackendError &) {
            // The step itself succeeded; a failing query leaves the device columns at 0.
        }
    }
    if (m_on_metrics)
        m_on_metrics(m);
    return {m_logits.data(), m_logits.size()};
}

void Session::fill_ledger(MemoryLedger &m, uint64_t scratch, uint64_t kv_reserved, uint64_t kv_resident)
{
    m.weights = m_cuda ? m_cuda->weight_bytes() : m_model.info().weight_bytes;
    m.kv_reserved = kv_reserved;
    m.kv_resident = kv_resident;
    m.scratch = scratch;
    m.total = m.weights + kv_resident + scratch;
    m_peaks.peak_kv_reserved = std::max(m_peaks.peak_kv_reserved, kv_reserved);
    m_peaks.peak_kv_resident = std::max({m_peaks.peak_kv_resident, kv_resident,
                                         m_kv ? m_kv->peak_resident_bytes() : 0});
    m_peaks.peak_scratch = std::max(m_peaks.peak_scratch, scratch);
    m_peaks.peak_total = std::max(m_peaks.peak_total, m.total);
    m.peak_kv_reserved = m_peaks.peak_kv_reserved;
    m.peak_kv_resident = m_peaks.peak_kv_resident;
    m.peak_scratch = m_peaks.peak_scratch;
    m.peak_total = m_peaks.peak_total;
    m.process_rss = process_rss_bytes();
    m.kv_bytes_copied = m_retired_copied + (m_kv ? m_kv->copied_bytes() : 0);
}

MemoryLedger Session::memory() const
{
    MemoryLedger m = m_last.memory;
    m.kv_reserved = m_kv ? m_kv->reserved_bytes() : 0;
    m.kv_resident = m_kv ? m_kv->resident_bytes() : 0;
    m.scratch = m_forward->scratch_bytes();
    m.weights = m_model.info().weight_bytes;
    m.device_used = m.device_free = 0;
    if (m_cuda) {
        m.weights = m_cuda->weight_bytes();
        try {
            if (m_cuda_kv) {
                const LongscopeCudaKvInfo kv = m_cuda_kv->info();
                m.kv_reserved = kv.reserved_bytes;
                m.kv_resident = kv.resident_bytes;
            }
            const DeviceMemoryInfo d = m_cuda->memory();
            m.scratch = d.scratch;
            m.device_free = d.free;
            m.device_used = d.total - d.free;
        } catch (const BackendError &) {
            // Between steps the ledger is informative only: keep what the last step reported.
        }
    }
    m.total = m.weights + m.kv_resident + m.scratch;
    m.process_rss = process_rss_bytes();
    return m;
}

// ---------------------------------------------------------------------------------------------
// The CUDA backend: the same steps as the CPU's above, on the device cache.

void Session::run_cuda(std::span<const int32_t> tokens, int start_pos, int logits_from, CudaKvCache &kv,
                       const ForwardParams &params, ForwardStats &stats)
{
    const int n = int(tokens.size());
    const int chunk = params.memory_efficient ? k_prefill_chunk : std::max(1, n);
    for (int c0 = 0; c0 < n; c0 += chunk) {
        const int c1 = std::min(n, c0 + chunk);
        const int first = std::max(0, logits_from - (start_pos + c0));
        auto l = m_cuda->eval(tokens.subspan(size_t(c0), size_t(c1 - c0)), start_pos + c0, first, kv, params, stats);
        m_logits.insert(m_logits.end(), l.begin(), l.end());
    }
}

void Session::step_cuda(std::span<const int32_t> tokens, int past, int len, double base, const ForwardParams &params,
                        bool all_logits, ForwardStats &st, uint64_t &kv_reserved, uint64_t &kv_resident)
{
    const int logits_from = all_logits ? past : len - 1;
    apply_cuda_kv_settings(base);
    if (m_settings.kv_mode == KvMode::None) {
        // No cache: recompute the whole sequence in a device buffer that lives for this step only.
        std::vector<int32_t> seq(m_history);
        seq.insert(seq.end(), tokens.begin(), tokens.end());
        auto scratch_kv = m_cuda->make_kv(KvMode::Static, len);
        scratch_kv->ensure(len);
        run_cuda(seq, 0, logits_from, *scratch_kv, params, st);
        const LongscopeCudaKvInfo info = scratch_kv->info();
        kv_reserved = info.reserved_bytes;
        kv_resident = info.resident_bytes;
        return;
    }
    m_cuda_kv->ensure(len);
    run_cuda(tokens, past, logits_from, *m_cuda_kv, params, st);
    m_key_base.resize(size_t(len), params.keys_before_rope ? 0.0 : base);
    std::fill(m_key_base.begin() + past, m_key_base.end(), params.keys_before_rope ? 0.0 : base);
    const LongscopeCudaKvInfo info = m_cuda_kv->info();
    kv_reserved = info.reserved_bytes;
    kv_resident = info.resident_bytes;
}

void Session::apply_cuda_kv_settings(double rope_base)
{
    const HParams &hp = m_model.hparams();
    const KvMode want = m_settings.kv_mode;
    if (want == KvMode::None) {
        if (m_cuda_kv) {
            m_retired_copied += m_cuda_kv->info().copied_bytes;
            m_cuda_kv.reset();
        }
        m_key_base.clear();
        return;
    }
    if (!m_cuda_kv || m_cuda_kv->mode() != want || m_cuda_kv->limit() != m_n_ctx) {
        auto fresh = m_cuda->make_kv(want, m_n_ctx);
        if (m_cuda_kv) {
            // Migrate the cached tokens on the device: nothing is lost when the mode or limit changes.
            m_cuda->copy_rows(*m_cuda_kv, *fresh, n_past());
            m_retired_copied += m_cuda_kv->info().copied_bytes + uint64_t(n_past()) * uint64_t(hp.n_embd_kv()) *
                                                                     sizeof(float) * 2 * uint64_t(hp.n_layer);
            m_cuda_kv = std::move(fresh);
        } else {
            // From the no-cache mode or the other backend: build the cache by evaluating the context once.
            m_cuda_kv = std::move(fresh);
            m_key_base.clear();
            m_kv_before_rope = m_settings.rope.store_kv_before_rope;
            if (n_past() > 0) {
                m_cuda_kv->ensure(n_past());
                ForwardStats st;
                run_cuda(m_history, 0, n_past(), *m_cuda_kv, forward_params(rope_base), st);
                m_key_base.assign(size_t(n_past()), m_kv_before_rope ? 0.0 : rope_base);
            }
        }
    }
    if (m_kv_before_rope != m_settings.rope.store_kv_before_rope)
        convert_cached_keys_cuda(m_settings.rope.store_kv_before_rope, rope_base);
}

void Session::convert_cached_keys_cuda(bool to_before_rope, double rope_base)
{
    // As convert_cached_keys, with runs of positions sharing a base rotated in one call.
    const int n = n_past();
    const double pos_scale = rope_pos_scale(m_model.hparams());
    auto base_of = [&](int j) { return to_before_rope ? m_key_base[size_t(j)] : rope_base; };
    for (int j = 0; j < n;) {
        const double base = base_of(j);
        if (base <= 0) {
            ++j;
            continue;
        }
        int j1 = j + 1;
        while (j1 < n && base_of(j1) == base)
            ++j1;
        m_cuda->rotate_cached_keys(*m_cuda_kv, j, j1 - j, base, pos_scale, to_before_rope);
        for (int k = j; k < j1; ++k)
            m_key_base[size_t(k)] = to_before_rope ? 0.0 : rope_base;
        j = j1;
    }
    m_kv_before_rope = to_before_rope;
}

void Session::fall_back_to_cpu(const std::string &reason)
{
    m_backend_note = "the CUDA backend failed and the session continues on the CPU: " + reason;
    m_cuda_kv.reset();
    m_cuda.reset();
    m_settings.backend = ComputeBackend::Cpu;
    // The CPU cache is built from the context by apply_kv_settings.
    m_kv.reset();
    m_key_base.clear();
}

} // namespace longscope
