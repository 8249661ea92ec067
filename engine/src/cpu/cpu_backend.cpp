#include "cpu/cpu_backend.h"

#include "cpu/attention.h"
#include "cpu/kernel_table.h"
#include "cpu/ops.h"
#include "cpu/quant.h"
#include "cpu/simd.h"
#include "kv/kv_store.h"
#include "longscope/cpu_options.h"
#include "longscope/errors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <utility>

namespace longscope {

std::vector<double> rope_inv_freq(double base, int n_rot)
{
    std::vector<double> f(size_t(n_rot / 2));
    for (int i = 0; i < n_rot / 2; ++i)
        f[size_t(i)] = std::pow(base, -2.0 * i / n_rot);
    return f;
}

CpuBackend::CpuBackend(const Model &model, int n_threads)
    : m_model(model), m_hp(model.hparams()), m_pool(n_threads),
      m_tuners(size_t(k_tuned_rows), ThreadTuner(m_pool.size()))
{
}

namespace {
// Sizes a buffer to exactly n floats, giving memory back when it held far more (after a long
// prefill, decode steps need one row), so the ledger's scratch is what the step really holds.
void fit(AlignedVector<float> &v, size_t n)
{
    v.resize(n);
    if (v.capacity() > 2 * n + 4096)
        v.shrink_to_fit();
}
uint64_t bytes_of(const AlignedVector<float> &v) { return uint64_t(v.capacity()) * sizeof(float); }

KvStore &host_store(KvCache &kv)
{
    // A CPU backend only ever sees caches it made.
    return static_cast<KvStore &>(kv);
}
} // namespace

std::span<const double> CpuBackend::inv_freq(const ForwardParams &params)
{
    const bool same_factors = m_inv_factors.size() == params.rope_factors.size() &&
                              std::equal(m_inv_factors.begin(), m_inv_factors.end(), params.rope_factors.begin());
    if (m_inv.empty() || m_inv_base != params.rope_base || !same_factors) {
        m_inv = rope_inv_freq(params.rope_base, m_hp.n_rot);
        m_inv_base = params.rope_base;
        m_inv_factors.assign(params.rope_factors.begin(), params.rope_factors.end());
        for (size_t i = 0; i < m_inv.size() && i < m_inv_factors.size(); ++i)
            m_inv[i] /= double(m_inv_factors[i]);
        ++m_inv_generation;
    }
    return m_inv;
}

// ---- KV cache --------------------------------------------------------------------------------

std::unique_ptr<KvCache> CpuBackend::make_kv(KvMode mode, int limit, KvType type_k, KvType type_v)
{
    return make_kv_store(mode, m_hp.n_layer, limit, m_hp.n_embd_kv(), type_k, type_v);
}

void CpuBackend::copy_kv_rows(KvCache &from, KvCache &to, int n_tokens)
{
    longscope::copy_kv_rows(host_store(from), host_store(to), n_tokens);
}

void CpuBackend::rotate_cached_keys(KvCache &kv, int j0, int n, double base, double pos_scale, bool undo)
{
    // Rotating by -angle undoes a rotation. One position at a time, as the keys were rotated.
    const std::vector<double> inv = rope_inv_freq(base, m_hp.n_rot);
    for (int j = j0; j < j0 + n; ++j) {
        const double pos[1] = {(undo ? -1.0 : 1.0) * j * pos_scale};
        rotate_key_rows(kv, j, 1, pos, inv);
    }
}

void CpuBackend::shift_cached_keys(KvCache &kv, int j0, int n, int delta, double base, double pos_scale,
                                   std::span<const float> factors)
{
    if (n <= 0 || delta == 0)
        return;
    check_kv_shift(j0 + n, j0, 0, host_store(kv).capacity());
    std::vector<double> inv = rope_inv_freq(base, m_hp.n_rot);
    for (size_t i = 0; i < inv.size() && i < factors.size(); ++i)
        inv[i] /= double(factors[i]);
    const std::vector<double> pos(size_t(n), double(delta) * pos_scale);
    rotate_key_rows(kv, j0, n, pos, inv);
}

void CpuBackend::rotate_key_rows(KvCache &kv, int j0, int n, std::span<const double> positions,
                                 std::span<const double> inv)
{
    // Rows of floats are rotated in place; keys of another type are decoded, rotated and
    // encoded again.
    KvStore &store = host_store(kv);
    const int64_t ekv = m_hp.n_embd_kv();
    if (store.type_k() == KvType::F32) {
        for (int l = 0; l < m_hp.n_layer; ++l)
            longscope::rope(kv.keys(l) + int64_t(j0) * ekv, n, m_hp.n_head_kv, m_hp.head_dim(), m_hp.n_rot,
                            m_hp.rope_style, positions, inv, &m_pool);
        return;
    }
    const DType type = kv_dtype(store.type_k());
    const uint64_t rb = store.key_row_bytes();
    std::vector<float> rows(size_t(n) * size_t(ekv));
    for (int l = 0; l < m_hp.n_layer; ++l) {
        for (int i = 0; i < n; ++i)
            dequantize_row(type, store.key_data(l) + uint64_t(j0 + i) * rb, rows.data() + int64_t(i) * ekv, ekv);
        longscope::rope(rows.data(), n, m_hp.n_head_kv, m_hp.head_dim(), m_hp.n_rot, m_hp.rope_style, positions, inv,
                        &m_pool);
        write_kv_rows(store, 0, l, j0, rows.data(), n);
    }
}

// ---- operations ------------------------------------------------------------------------------

Activations CpuBackend::activations(int64_t n)
{
    const size_t e = size_t(n * m_hp.n_embd), eq = size_t(n * m_hp.n_embd_q()), ekv = size_t(n * m_hp.n_embd_kv()),
                 f = size_t(n * m_hp.n_ff);
    try {
        for (auto *v : {&m_x, &m_xn, &m_proj})
            fit(*v, e);
        fit(m_q, eq);
        fit(m_attn, eq);
        fit(m_k, ekv);
        fit(m_v, ekv);
        fit(m_gate, f);
        fit(m_up, f);
    } catch (const std::bad_alloc &) {
        throw OutOfMemory("not enough memory for the activations of a batch of " + std::to_string(n) +
                          " tokens; memory-efficient attention evaluates long prompts in chunks");
    }
    return {m_x.data(), m_xn.data(), m_q.data(), m_k.data(), m_v.data(),
            m_attn.data(), m_proj.data(), m_gate.data(), m_up.data()};
}

void CpuBackend::embed(const WeightView &table, std::span<const int32_t> tokens, float *x)
{
    const int64_t e = m_hp.n_embd;
    for_rows(&m_pool, int64_t(tokens.size()), e, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
            weight_row_f32(table, tokens[size_t(t)], x + t * e);
    });
}

void CpuBackend::rmsnorm(const float *x, const WeightView &weight, float *out, int64_t n_rows, int64_t n, float eps,
                         float weight_offset)
{
    longscope::rmsnorm(x, weight, out, n_rows, n, eps, weight_offset, &m_pool);
}

void CpuBackend::matmul(const WeightView &w, const float *x, float *y, int64_t n_rows)
{
    longscope::matmul(m_pool, w, x, y, n_rows);
}

void CpuBackend::matmul_group(std::span<const Projection> outs, const float *x, int64_t n_rows)
{
    MatmulOut mo[4];
    if (outs.size() > 4)
        throw InvalidArgument("a matmul group holds at most 4 products");
    for (size_t i = 0; i < outs.size(); ++i)
        mo[i] = MatmulOut{outs[i].w, outs[i].y};
    longscope::matmul_group(m_pool, std::span<const MatmulOut>(mo, outs.size()), x, n_rows);
}

void CpuBackend::rope(float *x, int64_t n_rows, int n_heads, int64_t pos0, const ForwardParams &params)
{
    const std::span<const double> inv = inv_freq(params);
    if (pos0 != m_rope_pos0 || n_rows != m_rope_rows || params.pos_scale != m_rope_scale ||
        m_inv_generation != m_rope_generation) {
        m_pos.resize(size_t(n_rows));
        for (int64_t t = 0; t < n_rows; ++t)
            m_pos[size_t(t)] = double(pos0 + t) * params.pos_scale;
        rope_table(m_rope, m_hp.n_rot, m_hp.rope_style, m_pos, inv);
        for (auto *v : {&m_rope.cos, &m_rope.sin})
            if (v->capacity() > 2 * v->size() + 4096)
                v->shrink_to_fit(); // a decode step after a long prefill
        m_rope_pos0 = pos0;
        m_rope_rows = n_rows;
        m_rope_scale = params.pos_scale;
        m_rope_generation = m_inv_generation;
    }
    rope_apply(x, n_rows, n_heads, m_hp.head_dim(), m_rope, &m_pool);
}

void CpuBackend::store_kv(KvCache &kv, int layer, int64_t pos0, const float *k, const float *v, int64_t n_rows)
{
    // Rows are encoded one by one (whole blocks), so a split changes nothing.
    KvStore &store = host_store(kv);
    const int64_t ekv = m_hp.n_embd_kv();
    for_rows(&m_pool, n_rows, 2 * ekv, [&](int64_t begin, int64_t end) {
        write_kv_rows(store, 0, layer, pos0 + begin, k + begin * ekv, end - begin);
        write_kv_rows(store, 1, layer, pos0 + begin, v + begin * ekv, end - begin);
    });
}

AttentionResult CpuBackend::attention(const AttentionCall &c, const ForwardParams &params)
{
    const KeyRotation rotation{inv_freq(params), params.pos_scale, m_hp.n_rot, m_hp.rope_style};
    AttentionProblem p;
    p.n_head = c.n_head;
    p.n_head_kv = c.n_head_kv;
    p.head_dim = c.head_dim;
    p.q = c.q;
    p.n_q = c.n_q;
    p.q_pos0 = c.q_pos0;
    KvStore &store = host_store(*c.kv);
    p.k = store.key_data(c.layer);
    p.v = store.value_data(c.layer);
    p.k_type = kv_dtype(store.type_k());
    p.v_type = kv_dtype(store.type_v());
    p.n_kv = c.n_kv;
    p.rotate_keys = params.keys_before_rope ? &rotation : nullptr;
    p.out = c.out;
    p.scale = c.scale;
    p.softcap = c.softcap;
    p.window = c.window;
    p.workspace = &m_attn_work;
    // Prefill's key tiles are 128 keys (half the per-tile softmax and rescaling steps per key;
    // one thread, 256 queries at 8192 keys: 5% faster than 64); decode's stay 64, so that short
    // caches still split into enough ranges for the threads. The AMX tiles keep 64.
    const int tile = p.n_q > attention_split_keys_max_queries && !kernel_table().amx_attention ? 128 : 64;
    const AttentionStats as = params.memory_efficient ? attention_tiled(m_pool, p, params.causal_flash, tile)
                                                      : attention_naive(m_pool, p, params.causal_flash);
    return {as.scratch_bytes, as.tiles_skipped};
}

void CpuBackend::add_inplace(float *x, const float *y, int64_t n)
{
    const CpuKernels &k = cpu_kernels();
    for_values(&m_pool, n, [&](int64_t b, int64_t e) { k.add(x + b, y + b, e - b); });
}

void CpuBackend::swiglu(const float *gate, const float *up, float *out, int64_t n)
{
    longscope::swiglu(gate, up, out, n, &m_pool);
}

void CpuBackend::geglu(const float *gate, const float *up, float *out, int64_t n)
{
    longscope::geglu(gate, up, out, n, &m_pool);
}

void CpuBackend::add_bias(float *x, const WeightView &bias, int64_t n_rows, int64_t width)
{
    std::vector<float> b(static_cast<size_t>(width));
    weight_row_f32(bias, 0, b.data());
    const CpuKernels &k = cpu_kernels();
    for_rows(&m_pool, n_rows, width, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
            k.add(x + t * width, b.data(), width);
    });
}

void CpuBackend::scale(float *x, float s, int64_t n)
{
    const CpuKernels &k = cpu_kernels();
    for_values(&m_pool, n, [&](int64_t b, int64_t e) { k.scale(x + b, s, e - b); });
}

void CpuBackend::softcap(float *x, float cap, int64_t n)
{
    longscope::softcap(x, cap, n, &m_pool);
}

void CpuBackend::move_row(float *x, int64_t to, int64_t from, int64_t width)
{
    if (to != from)
        std::memmove(x + to * width, x + from * width, size_t(width) * 4);
}

float *CpuBackend::logits_buffer(int64_t n_rows)
{
    try {
        fit(m_logits, size_t(n_rows * m_hp.n_vocab));
    } catch (const std::bad_alloc &) {
        throw OutOfMemory("not enough memory for the logits of " + std::to_string(n_rows) + " tokens");
    }
    return m_logits.data();
}

std::span<const float> CpuBackend::read_logits(int64_t n_rows)
{
    return {m_logits.data(), size_t(n_rows * m_hp.n_vocab)};
}

uint64_t CpuBackend::step_scratch_bytes(uint64_t attention_scratch)
{
    return scratch_bytes() + attention_scratch;
}

// A step of up to k_tuned_rows rows (decode of one sequence or of a small batch) runs on the
// thread count its row count's tuner asks for, and its time goes back to that tuner; larger
// steps use the whole pool. Results do not depend on the count.
void CpuBackend::begin_step(int64_t n_rows)
{
    m_timing = nullptr;
    if (n_rows < 1 || n_rows > k_tuned_rows || m_pool.size() == 1 || !cpu_options().decode_thread_tuning)
        return;
    m_timing = &m_tuners[size_t(n_rows - 1)];
    m_pool.set_active(m_timing->next());
    m_step_start = std::chrono::steady_clock::now();
}

void CpuBackend::end_step()
{
    m_attn_work.release();
    if (!m_timing)
        return;
    ThreadTuner *tuner = std::exchange(m_timing, nullptr);
    m_pool.set_active(m_pool.size());
    // A step cut short by an error says nothing of the count's speed (the tuner then asks
    // for the same count again).
    if (std::uncaught_exceptions() == 0)
        tuner->record(std::chrono::duration<double>(std::chrono::steady_clock::now() - m_step_start).count());
}

// ---- memory ----------------------------------------------------------------------------------

uint64_t CpuBackend::weight_bytes() const { return m_model.info().weight_bytes; }

uint64_t CpuBackend::scratch_bytes() const
{
    uint64_t b = 0;
    for (const auto *v : {&m_x, &m_xn, &m_q, &m_k, &m_v, &m_attn, &m_proj, &m_gate, &m_up, &m_logits})
        b += bytes_of(*v);
    b += uint64_t(m_rope.cos.capacity() + m_rope.sin.capacity()) * sizeof(float);
    return b + matmul_scratch_bytes();
}

} // namespace longscope
