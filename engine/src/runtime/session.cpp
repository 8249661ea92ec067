#include "longscope/engine.h"

#include "arch/forward.h"
#include "backend/backend.h"
#include "longscope/errors.h"
#include "runtime/backends.h"
#include "runtime/rope_base.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <chrono>
#include <thread>

namespace longscope {

namespace {

int resolve_limit(const Model &model, int n_ctx, const Settings &s)
{
    if (s.context_limit > 0)
        return s.context_limit;
    if (n_ctx > 0)
        return n_ctx;
    return std::min(model.hparams().n_ctx_train, k_default_ctx_cap);
}

} // namespace

// The session's state. The backend is one object whatever it is: switching backend or
// falling back to the CPU replaces it, and the cache is then rebuilt from the tokens.
struct Session::Impl {
    explicit Impl(const Model &m) : model(m) {}

    // The RoPE of a sequence of seq_len tokens; its factors are kept in rope_factors, which
    // the forward parameters point into.
    double rope_for(int seq_len);

    ForwardParams forward_params(double rope_base) const;
    // Evaluates tokens at positions start_pos.. into kv, appending the logits of positions
    // >= logits_from to `logits`; memory-efficient attention in chunks.
    void run(std::span<const int32_t> tokens, int start_pos, int logits_from, KvCache &kv, const ForwardParams &params,
             ForwardStats &stats);
    // One step on the current backend: the cache brought in line with the settings, then the
    // tokens evaluated. Returns the cache's reserved and resident bytes.
    void step(std::span<const int32_t> tokens, int past, int len, double base, const ForwardParams &params,
              int logits_from, ForwardStats &st, uint64_t &kv_reserved, uint64_t &kv_resident);
    void apply_kv_settings(double rope_base);
    // A cache of the settings' KV types on the current backend.
    std::unique_ptr<KvCache> make_kv(KvMode mode, int limit) const
    {
        return backend->make_kv(mode, limit, settings.kv_type_k, settings.kv_type_v);
    }
    // eval() of tokens that fit in the context.
    std::span<const float> eval_step(std::span<const int32_t> tokens, bool all_logits);
    // eval() under the shift policy of tokens that do not fit: in pieces, shifting between.
    std::span<const float> eval_shifting(std::span<const int32_t> tokens, bool all_logits);
    // Drops at least `need` tokens after the sinks (Settings::shift_discard of them, or half)
    // and moves the rest down; throws ContextOverflow when fewer than `need` can go.
    void shift_context(int need);
    // Turns the cached keys of rows [j0, j0 + n), rotated after RoPE, by delta positions.
    void rotate_shifted_keys(int j0, int n, int delta);
    void convert_cached_keys(bool to_before_rope, double rope_base);
    // Drops the cache, counting what it copied.
    void retire_kv();
    void replace_backend(std::unique_ptr<Backend> fresh);
    void fill_ledger(MemoryLedger &ledger, uint64_t scratch, uint64_t kv_reserved, uint64_t kv_resident);
    int n_past() const { return int(history.size()); }

    const Model &model;
    int n_ctx = 0;
    int n_threads = 1;
    Settings settings;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<KvCache> kv;            // null in KvMode::None (declared after backend: freed first)
    std::string backend_note;
    bool kv_before_rope = false;            // how the keys in kv are stored
    std::vector<double> key_base;           // per cached position: base its key was rotated with
    std::vector<float> rope_factors;        // per-dimension RoPE factors in effect (rope_for)
    double rope_attn_factor = 1.0;
    std::vector<int32_t> history;
    std::vector<float> logits;              // assembled across prefill chunks
    uint64_t retired_copied = 0;            // bytes copied by caches since replaced
    MemoryLedger peaks;
    StepMetrics last;
    int64_t steps = 0;
    MetricsCallback on_metrics;
    // Rows at and after this position were computed with tokens in view that a context shift
    // has since dropped; INT_MAX: none.
    int shifted_at = std::numeric_limits<int>::max();
    int64_t shifts = 0;
};

namespace {

// The checks of the settings that need the model and the limit in effect.
void check_session_settings(const Model &model, const Settings &s, int limit)
{
    check_rope_settings(model.hparams(), s.rope);
    check_kv_types(s, model.hparams().head_dim());
    s.check_sinks(limit);
    if (s.overflow == OverflowPolicy::Shift && s.kv_mode != KvMode::None && model.hparams().per_layer_rope() &&
        !s.rope.store_kv_before_rope)
        throw InvalidArgument("the shift overflow policy re-rotates cached keys with one RoPE base, and this model "
                              "has per-layer bases (Gemma): use the KV mode none or another overflow policy");
}

} // namespace

Session::Session(const Model &model, const SessionOptions &options) : m(std::make_unique<Impl>(model))
{
    if (options.n_ctx < 0)
        throw InvalidArgument("context limit must be positive, got " + std::to_string(options.n_ctx));
    if (options.n_ctx > (1 << 24))
        throw InvalidArgument("context limit " + std::to_string(options.n_ctx) + " is too large");
    if (options.n_threads < 0 || options.n_threads > 1024)
        throw InvalidArgument("thread count must be between 1 and 1024, got " +
                              std::to_string(options.n_threads));
    options.settings.validate();
    m->settings = options.settings;
    // The trained context is the default, not a ceiling: a larger limit is allowed. The
    // default is capped so that a model trained on 128K tokens does not reserve a huge cache
    // nobody asked for.
    m->n_ctx = resolve_limit(model, options.n_ctx, m->settings);
    check_session_settings(model, options.settings, m->n_ctx);
    m->settings.context_limit = m->n_ctx; // settings() reports the limit in effect
    m->n_threads = options.n_threads > 0 ? options.n_threads : std::max(1, int(std::thread::hardware_concurrency()));
    m->backend = make_backend(m->settings.backend, model, m->n_threads);
    if (m->settings.kv_mode != KvMode::None)
        m->kv = m->make_kv(m->settings.kv_mode, m->n_ctx);
    m->kv_before_rope = m->settings.rope.store_kv_before_rope;
}

Session::~Session() = default;

const Settings &Session::settings() const { return m->settings; }
void Session::set_metrics_callback(MetricsCallback cb) { m->on_metrics = std::move(cb); }
const StepMetrics &Session::last_metrics() const { return m->last; }
const std::string &Session::backend_note() const { return m->backend_note; }
int Session::n_past() const { return m->n_past(); }
int Session::n_ctx() const { return m->n_ctx; }
int Session::n_threads() const { return m->n_threads; }
const std::vector<int32_t> &Session::history() const { return m->history; }
const Model &Session::model() const { return m->model; }

int Session::exact_prefix() const { return std::min(m->shifted_at, m->n_past()); }
int64_t Session::shifts() const { return m->shifts; }

void Session::reset()
{
    m->shifted_at = std::numeric_limits<int>::max();
    m->history.clear();
    m->key_base.clear();
    if (m->kv)
        m->kv->clear();
}

void Session::Impl::retire_kv()
{
    if (!kv)
        return;
    try {
        retired_copied += kv->copied_bytes();
    } catch (const BackendError &) {
        // A device that cannot say what it copied: the ledger goes without it.
    }
    kv.reset();
}

void Session::Impl::replace_backend(std::unique_ptr<Backend> fresh)
{
    // The cache belongs to the old backend: dropped first, rebuilt from the tokens at the next
    // step (apply_kv_settings).
    retire_kv();
    key_base.clear();
    backend = std::move(fresh);
}

void Session::set_settings(const Settings &settings)
{
    settings.validate();
    // 0 means the model's default, as in SessionOptions.
    const int limit = resolve_limit(m->model, 0, settings);
    check_session_settings(m->model, settings, limit);
    if (limit < n_past())
        throw InvalidArgument("the context limit cannot drop to " + std::to_string(limit) +
                              " below the " + std::to_string(n_past()) + " tokens already in the context");
    if (settings.backend != m->backend->kind()) {
        // Throws BackendError when CUDA cannot be used; nothing has changed yet.
        m->replace_backend(make_backend(settings.backend, m->model, m->n_threads));
    }
    m->settings = settings;
    m->settings.context_limit = limit;
    m->n_ctx = limit;
}

void Session::truncate(int n_tokens)
{
    if (n_tokens < 0 || n_tokens > n_past())
        throw InvalidArgument("cannot keep " + std::to_string(n_tokens) + " tokens of a context of " +
                              std::to_string(n_past()));
    // The cache rows past n_tokens stay allocated and are overwritten by the next tokens.
    m->history.resize(size_t(n_tokens));
    if (n_tokens <= m->shifted_at)
        m->shifted_at = std::numeric_limits<int>::max();
    if (m->key_base.size() > size_t(n_tokens))
        m->key_base.resize(size_t(n_tokens));
}

double Session::Impl::rope_for(int seq_len)
{
    RopeInEffect r = rope_in_effect(model.hparams(), settings.rope, seq_len);
    rope_factors = std::move(r.factors);
    rope_attn_factor = r.attn_factor;
    return r.base;
}

void Session::Impl::convert_cached_keys(bool to_before_rope, double rope_base)
{
    // Rotating by -angle undoes a rotation; each cached key remembers the base it was rotated
    // with, since with auto alpha that differs from position to position. Runs of positions
    // sharing a base are rotated in one call.
    const int n = n_past();
    const double pos_scale = rope_pos_scale(model.hparams(), settings.rope);
    auto base_of = [&](int j) { return to_before_rope ? key_base[size_t(j)] : rope_base; };
    for (int j = 0; j < n;) {
        const double base = base_of(j);
        if (base <= 0) {
            ++j;
            continue;
        }
        int j1 = j + 1;
        while (j1 < n && base_of(j1) == base)
            ++j1;
        backend->rotate_cached_keys(*kv, j, j1 - j, base, pos_scale, to_before_rope);
        for (int k = j; k < j1; ++k)
            key_base[size_t(k)] = to_before_rope ? 0.0 : rope_base;
        j = j1;
    }
    kv_before_rope = to_before_rope;
}

void Session::Impl::apply_kv_settings(double rope_base)
{
    const HParams &hp = model.hparams();
    const KvMode want = settings.kv_mode;
    if (want == KvMode::None) {
        retire_kv();
        key_base.clear();
        return;
    }
    if (!kv || kv->mode() != want || kv->limit() != n_ctx || kv->type_k() != settings.kv_type_k ||
        kv->type_v() != settings.kv_type_v) {
        auto fresh = make_kv(want, n_ctx);
        if (kv) {
            // Migrate the cached tokens: nothing is lost when the mode or limit changes, and
            // when the KV types do the rows are converted (not recomputed).
            backend->copy_kv_rows(*kv, *fresh, n_past());
            retired_copied += kv->copied_bytes() + uint64_t(n_past()) * uint64_t(hp.n_layer) *
                                                       (kv_type_row_bytes(kv->type_k(), hp.n_embd_kv()) +
                                                        kv_type_row_bytes(kv->type_v(), hp.n_embd_kv()));
            kv = std::move(fresh);
        } else {
            // From the no-cache mode or another backend: build the cache by evaluating the
            // context once.
            kv = std::move(fresh);
            key_base.clear();
            kv_before_rope = settings.rope.store_kv_before_rope;
            if (n_past() > 0) {
                kv->ensure(n_past());
                ForwardStats st;
                run(history, 0, n_past(), *kv, forward_params(rope_base), st);
                key_base.assign(size_t(n_past()), kv_before_rope ? 0.0 : rope_base);
                shifted_at = std::numeric_limits<int>::max(); // every row evaluated afresh
            }
        }
    }
    if (kv_before_rope != settings.rope.store_kv_before_rope)
        convert_cached_keys(settings.rope.store_kv_before_rope, rope_base);
}

ForwardParams Session::Impl::forward_params(double rope_base) const
{
    const HParams &hp = model.hparams();
    ForwardParams p;
    p.rope_base = rope_base;
    p.pos_scale = rope_pos_scale(hp, settings.rope);
    p.rope_factors = rope_factors;
    p.rope_attn_factor = rope_attn_factor;
    p.keys_before_rope = settings.rope.store_kv_before_rope;
    p.memory_efficient = settings.attention.memory_efficient;
    p.causal_flash = settings.attention.causal_flash;
    return p;
}

void Session::Impl::run(std::span<const int32_t> tokens, int start_pos, int logits_from, KvCache &cache,
                        const ForwardParams &params, ForwardStats &stats)
{
    // logits_from is an absolute position: logits are kept for tokens at positions >= it.
    const int n = int(tokens.size());
    const int chunk = params.memory_efficient ? backend->prefill_chunk() : std::max(1, n);
    for (int c0 = 0; c0 < n; c0 += chunk) {
        const int c1 = std::min(n, c0 + chunk);
        ForwardSegment seg;
        seg.tokens = tokens.subspan(size_t(c0), size_t(c1 - c0));
        seg.n_past = start_pos + c0;
        seg.logits_from = std::max(0, logits_from - (start_pos + c0));
        seg.kv = &cache;
        seg.params = params;
        auto l = forward(*backend, model, std::span<const ForwardSegment>(&seg, 1), stats);
        logits.insert(logits.end(), l.begin(), l.end());
    }
}

void Session::Impl::step(std::span<const int32_t> tokens, int past, int len, double base, const ForwardParams &params,
                         int logits_from, ForwardStats &st, uint64_t &kv_reserved, uint64_t &kv_resident)
{
    apply_kv_settings(base);
    if (settings.kv_mode == KvMode::None) {
        // No cache: recompute the whole sequence in a buffer that lives for this step only.
        std::vector<int32_t> seq(history);
        seq.insert(seq.end(), tokens.begin(), tokens.end());
        auto scratch_kv = make_kv(KvMode::Static, len);
        scratch_kv->ensure(len);
        run(seq, 0, logits_from, *scratch_kv, params, st);
        kv_reserved = scratch_kv->reserved_bytes();
        kv_resident = scratch_kv->resident_bytes();
        return;
    }
    kv->ensure(len);
    run(tokens, past, logits_from, *kv, params, st);
    key_base.resize(size_t(len), params.keys_before_rope ? 0.0 : base);
    std::fill(key_base.begin() + past, key_base.end(), params.keys_before_rope ? 0.0 : base);
    kv_reserved = kv->reserved_bytes();
    kv_resident = kv->resident_bytes();
}

std::span<const float> Session::eval(std::span<const int32_t> tokens, bool all_logits)
{
    if (tokens.empty())
        throw InvalidArgument("nothing to evaluate: the token list is empty");
    const HParams &hp = m->model.hparams();
    for (int32_t id : tokens)
        if (id < 0 || id >= hp.n_vocab)
            throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary of " +
                                  std::to_string(hp.n_vocab));
    const int64_t len = int64_t(m->history.size()) + int64_t(tokens.size());
    if (len <= m->n_ctx)
        return m->eval_step(tokens, all_logits);
    if (m->settings.overflow != OverflowPolicy::Shift)
        throw ContextOverflow(std::to_string(len) + " tokens do not fit in the context limit of " +
                              std::to_string(m->n_ctx) + " (raise the context limit)");
    return m->eval_shifting(tokens, all_logits);
}

std::span<const float> Session::Impl::eval_shifting(std::span<const int32_t> tokens, bool all_logits)
{
    // The tokens go in as pieces that fit, the context shifted whenever it is full.
    std::vector<float> gathered;
    for (size_t done = 0; done < tokens.size();) {
        if (n_past() >= n_ctx)
            shift_context(n_past() - n_ctx + 1);
        const size_t piece = std::min(tokens.size() - done, size_t(n_ctx - n_past()));
        const std::span<const float> l = eval_step(tokens.subspan(done, piece), all_logits);
        if (all_logits)
            gathered.insert(gathered.end(), l.begin(), l.end());
        done += piece;
    }
    if (all_logits)
        logits = std::move(gathered);
    return {logits.data(), logits.size()};
}

void Session::Impl::shift_context(int need)
{
    const int n = n_past();
    const int keep = std::min(settings.sink_tokens, n);
    const int droppable = n - keep;
    if (need > droppable)
        throw ContextOverflow("a context shift cannot make room for " + std::to_string(need) + " tokens: only " +
                              std::to_string(droppable) + " follow the " + std::to_string(keep) + " sink tokens");
    const int drop = std::clamp(settings.shift_discard > 0 ? settings.shift_discard : droppable / 2, need, droppable);
    const int moved = n - keep - drop;
    if (kv && !kv_before_rope && key_base.size() < size_t(n))
        retire_kv(); // no record of how the keys were rotated: rebuilt from the tokens instead
    if (kv) {
        try {
            kv->shift(n, keep, drop);
            if (!kv_before_rope)
                rotate_shifted_keys(keep, moved, -drop);
        } catch (const BackendError &) {
            // A device that failed mid-shift: the cache is rebuilt from the tokens at the next
            // step (apply_kv_settings), and the step's own fallback takes over if it fails again.
            retire_kv();
        }
    }
    history.erase(history.begin() + keep, history.begin() + keep + drop);
    if (kv && key_base.size() >= size_t(n))
        key_base.erase(key_base.begin() + keep, key_base.begin() + keep + drop);
    else
        key_base.clear();
    // Rows after the sinks were computed with the dropped tokens in view. Without a cache the
    // next step recomputes everything from the tokens.
    if (kv)
        shifted_at = std::min(shifted_at, keep);
    ++shifts;
}

void Session::Impl::rotate_shifted_keys(int j0, int n, int delta)
{
    // Each key was rotated with the base of its own step (they differ under auto alpha); runs
    // of positions sharing a base turn in one call. key_base still holds the old positions.
    const HParams &hp = model.hparams();
    const double pos_scale = rope_pos_scale(hp, settings.rope);
    const std::vector<float> factors = rope_in_effect(hp, settings.rope, n_past()).factors;
    auto base_of = [&](int j) { return key_base[size_t(j - delta)]; };
    for (int j = j0; j < j0 + n;) {
        int j1 = j + 1;
        while (j1 < j0 + n && base_of(j1) == base_of(j))
            ++j1;
        if (base_of(j) > 0)
            backend->shift_cached_keys(*kv, j, j1 - j, delta, base_of(j), pos_scale, factors);
        j = j1;
    }
}

std::span<const float> Session::Impl::eval_step(std::span<const int32_t> tokens, bool all_logits)
{
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const HParams &hp = model.hparams();
    const int n = int(tokens.size());
    const int64_t len = int64_t(history.size()) + n;
    const int past = n_past();
    const int logits_from = all_logits ? past : int(len) - 1;
    // LongRoPE's switch: the step that takes the sequence past the original context evaluates
    // the whole context again with the long factors, as Hugging Face's Phi-3 does, instead of
    // keeping keys rotated with the short ones.
    std::vector<int32_t> replay;
    std::span<const int32_t> run_tokens = tokens;
    int run_past = past;
    if (past > 0 && settings.kv_mode != KvMode::None && crosses_longrope_switch(model.hparams(), settings.rope, past, int(len))) {
        replay = history;
        replay.insert(replay.end(), tokens.begin(), tokens.end());
        run_tokens = replay;
        run_past = 0;
    }
    const double base = rope_for(int(len));
    const ForwardParams params = forward_params(base);
    ForwardStats st;
    logits.clear();
    uint64_t kv_reserved = 0, kv_resident = 0;
    try {
        step(run_tokens, run_past, int(len), base, params, logits_from, st, kv_reserved, kv_resident);
    } catch (const BackendError &e) {
        if (backend->kind() == ComputeBackend::Cpu)
            throw;
        // The context is still here (history): rebuild it on the CPU and go on there.
        backend_note = std::string("the CUDA backend failed and the session continues on the CPU: ") + e.what();
        kv.reset();
        key_base.clear();
        backend.reset();
        backend = make_backend(ComputeBackend::Cpu, model, n_threads);
        settings.backend = ComputeBackend::Cpu;
        st = ForwardStats{};
        logits.clear();
        step(run_tokens, run_past, int(len), base, params, logits_from, st, kv_reserved, kv_resident);
    }
    history.insert(history.end(), tokens.begin(), tokens.end());

    StepMetrics &sm = last;
    sm.step = steps++;
    sm.phase = n > 1 || past == 0 ? StepPhase::Prefill : StepPhase::Decode;
    sm.n_tokens = n;
    sm.position = int(len);
    sm.seconds = std::chrono::duration<double>(clock::now() - t0).count();
    sm.tokens_per_second = sm.seconds > 0 ? n / sm.seconds : 0;
    sm.ntk_alpha = effective_ntk_alpha(settings.rope, int(len), hp.n_ctx_train);
    sm.rope_base = base;
    sm.settings = settings;
    sm.settings.context_limit = n_ctx;
    sm.attention_tiles_skipped = st.tiles_skipped;
    sm.threads = st.threads;
    fill_ledger(sm.memory, st.scratch_bytes, kv_reserved, kv_resident);
    try {
        if (const auto d = backend->device_memory()) {
            sm.memory.device_free = d->free;
            sm.memory.device_used = d->total - d->free;
        }
    } catch (const BackendError &) {
        // The step itself succeeded; a failing query leaves the device columns at 0.
    }
    if (on_metrics)
        on_metrics(sm);
    return {logits.data(), logits.size()};
}

void Session::Impl::fill_ledger(MemoryLedger &l, uint64_t scratch, uint64_t kv_reserved, uint64_t kv_resident)
{
    l.weights = backend->weight_bytes();
    l.kv_reserved = kv_reserved;
    l.kv_resident = kv_resident;
    l.scratch = scratch;
    l.total = l.weights + kv_resident + scratch;
    uint64_t kv_peak = 0, kv_copied = 0;
    try {
        kv_peak = kv ? kv->peak_resident_bytes() : 0;
        kv_copied = kv ? kv->copied_bytes() : 0;
    } catch (const BackendError &) {
        // Informative only.
    }
    peaks.peak_kv_reserved = std::max(peaks.peak_kv_reserved, kv_reserved);
    peaks.peak_kv_resident = std::max({peaks.peak_kv_resident, kv_resident, kv_peak});
    peaks.peak_scratch = std::max(peaks.peak_scratch, scratch);
    peaks.peak_total = std::max(peaks.peak_total, l.total);
    l.peak_kv_reserved = peaks.peak_kv_reserved;
    l.peak_kv_resident = peaks.peak_kv_resident;
    l.peak_scratch = peaks.peak_scratch;
    l.peak_total = peaks.peak_total;
    l.process_rss = process_rss_bytes();
    l.kv_bytes_copied = retired_copied + kv_copied;
}

MemoryLedger Session::memory() const
{
    MemoryLedger l = m->last.memory;
    l.weights = m->backend->weight_bytes();
    l.device_used = l.device_free = 0;
    try {
        l.kv_reserved = m->kv ? m->kv->reserved_bytes() : 0;
        l.kv_resident = m->kv ? m->kv->resident_bytes() : 0;
        l.scratch = m->backend->scratch_bytes();
        if (const auto d = m->backend->device_memory()) {
            l.device_free = d->free;
            l.device_used = d->total - d->free;
        }
    } catch (const BackendError &) {
        // Between steps the ledger is informative only: keep what the last step reported.
    }
    l.total = l.weights + l.kv_resident + l.scratch;
    l.process_rss = process_rss_bytes();
    return l;
}

} // namespace longscope
