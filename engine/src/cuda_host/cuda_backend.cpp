#include "cuda_host/cuda_backend.h"

#include "longscope/errors.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace longscope {

namespace {

int cuda_kv_mode(KvMode m)
{
    switch (m) {
    case KvMode::Concat: return LONGSCOPE_CUDA_KV_CONCAT;
    case KvMode::Static: return LONGSCOPE_CUDA_KV_STATIC;
    case KvMode::Vmm: return LONGSCOPE_CUDA_KV_VMM;
    case KvMode::None: break;
    }
    throw InvalidArgument("the KV mode 'none' keeps no cache");
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

} // namespace

// ---------------------------------------------------------------------------------------------
// CudaKvCache

CudaKvCache::CudaKvCache(const CudaApi &api, LongscopeCudaContext *ctx, KvMode mode, int n_layer, int limit,
                         int n_embd_kv)
    : m_api(api), m_ctx(ctx), m_mode(mode), m_limit(limit), m_n_embd_kv(n_embd_kv)
{
    const int rc = m_api.kv_create(m_ctx, cuda_kv_mode(mode), n_layer, limit, int64_t(n_embd_kv) * 4, &m_kv);
    if (rc != 0)
        throw BackendError(std::string("CUDA: the ") + std::string(to_string(mode)) + " KV cache for " +
                           std::to_string(limit) + " tokens cannot be made: " + m_api.error(m_ctx));
    m_keys.assign(size_t(n_layer), nullptr);
    m_values.assign(size_t(n_layer), nullptr);
    try {
        refresh();
    } catch (...) {
        m_api.kv_release(m_ctx, m_kv);
        throw;
    }
}

CudaKvCache::~CudaKvCache() { m_api.kv_release(m_ctx, m_kv); }

void CudaKvCache::refresh()
{
    for (size_t l = 0; l < m_keys.size(); ++l) {
        void *k = nullptr, *v = nullptr;
        if (m_api.kv_layer(m_ctx, m_kv, int(l), &k, &v) != 0)
            throw BackendError(std::string("CUDA: KV cache layer ") + std::to_string(l) + ": " + m_api.error(m_ctx));
        m_keys[l] = static_cast<float *>(k);
        m_values[l] = static_cast<float *>(v);
    }
}

void CudaKvCache::ensure(int n_tokens)
{
    if (n_tokens > m_limit)
        throw ContextOverflow(std::to_string(n_tokens) + " tokens do not fit in the KV cache's limit of " +
                              std::to_string(m_limit));
    if (m_api.kv_reserve(m_ctx, m_kv, n_tokens) != 0)
        throw BackendError(std::string("CUDA: the ") + std::string(to_string(m_mode)) + " KV cache cannot grow to " +
                           std::to_string(n_tokens) + " tokens: " + m_api.error(m_ctx));
    refresh();
}

void CudaKvCache::clear()
{
    if (m_api.kv_clear(m_ctx, m_kv) != 0)
        throw BackendError(std::string("CUDA: clearing the KV cache: ") + m_api.error(m_ctx));
    refresh();
}

float *CudaKvCache::keys(int layer) { return m_keys.at(size_t(layer)); }
float *CudaKvCache::values(int layer) { return m_values.at(size_t(layer)); }

void CudaKvCache::shift(int n_tokens, int keep, int drop)
{
    check_kv_shift(n_tokens, keep, drop, int(std::min<int64_t>(info().capacity_rows, m_limit)));
    if (drop == 0)
        return;
    // A device copy may not overlap itself: rows move in runs of at most `drop`, lowest first,
    // so each run's destination lies entirely below its source and above what was moved.
    const int64_t row = m_n_embd_kv;
    for (int j = keep + drop; j < n_tokens; j += drop) {
        const int64_t rows = std::min(drop, n_tokens - j);
        for (size_t l = 0; l < m_keys.size(); ++l)
            for (float *base : {m_keys[l], m_values[l]})
                if (m_api.copy(m_ctx, base + (j - drop) * row, base + j * row, size_t(rows * row) * 4) != 0)
                    throw BackendError(std::string("CUDA: shifting the KV cache: ") + m_api.error(m_ctx));
    }
}

LongscopeCudaKvInfo CudaKvCache::info() const
{
    LongscopeCudaKvInfo i{};
    if (m_api.kv_info(m_ctx, m_kv, &i) != 0)
        throw BackendError(std::string("CUDA: KV cache information: ") + m_api.error(m_ctx));
    return i;
}

// ---------------------------------------------------------------------------------------------
// CudaBackend

namespace {

// What the device kernels cannot run yet, or an empty string.
std::string missing_on_device(const HParams &hp)
{
    if (hp.family != ArchFamily::Llama)
        return "the " + hp.architecture + " architecture";
    if (hp.n_embd_q() != hp.n_embd)
        return "a head size other than width / heads";
    if (hp.sliding_window > 0)
        return "sliding-window attention";
    if (hp.rope.type == RopeScalingType::Yarn || hp.rope.type == RopeScalingType::Llama3 ||
        hp.rope.type == RopeScalingType::LongRope)
        return std::string("RoPE scaling ") + std::string(to_string(hp.rope.type));
    return {};
}

} // namespace

CudaBackend::CudaBackend(const Model &model, const HostWeightReader &reader, int device)
    : m_model(model), m_hp(model.hparams()), m_reader(reader)
{
    if (const std::string missing = missing_on_device(m_hp); !missing.empty())
        throw BackendError("CUDA: this model needs " + missing +
                           ", which the CUDA backend does not run yet (use the CPU backend)");
    m_api = load_cuda_api();
    char reason[512] = {0};
    if (m_api.context_create(device, &m_ctx, reason, sizeof reason) != 0)
        throw BackendError(std::string("CUDA: no context on GPU ") + std::to_string(device) + ": " + reason);
    try {
        const ModelWeights &w = model.weights();
        upload_matrix(w.tok_embd);
        upload_norm(w.output_norm);
        upload_matrix(w.output);
        for (const LayerWeights &lw : w.layers) {
            upload_norm(lw.attn_norm);
            for (const WeightView *m : {&lw.wq, &lw.wk, &lw.wv, &lw.wo})
                upload_matrix(*m);
            upload_norm(lw.ffn_norm);
            for (const WeightView *m : {&lw.w_gate, &lw.w_up, &lw.w_down})
                upload_matrix(*m);
        }
    } catch (...) {
        release_all();
        throw;
    }
}

CudaBackend::~CudaBackend() { release_all(); }

void CudaBackend::release_all()
{
    if (!m_ctx)
        return;
    m_api.synchronize(m_ctx); // nothing may still read what is freed below
    for (void *p : m_weight_allocs)
        m_api.free(m_ctx, p);
    m_weight_allocs.clear();
    if (m_act)
        m_api.free(m_ctx, m_act);
    m_act = nullptr;
    m_api.context_destroy(m_ctx);
    m_ctx = nullptr;
}

void CudaBackend::check(int rc, const char *what) const
{
    if (rc != 0)
        throw BackendError(std::string("CUDA: ") + what + ": " + m_api.error(m_ctx));
}

void *CudaBackend::alloc(size_t bytes)
{
    void *p = nullptr;
    check(m_api.alloc(m_ctx, bytes, &p), "device memory");
    return p;
}

const CudaBackend::DeviceWeight &CudaBackend::device(const WeightView &w) const
{
    const auto it = m_weights.find(&w);
    if (it == m_weights.end())
        throw BackendError("CUDA: tensor " + w.name + " is not on the device");
    return it->second;
}

void CudaBackend::upload_matrix(const WeightView &w)
{
    if (auto it = m_uploaded.find(w.data); it != m_uploaded.end()) {
        m_weights[&w] = it->second;
        return;
    }
    DeviceWeight d;
    d.n_in = w.ne(0);
    d.n_out = w.ne(1);
    const uint64_t count = uint64_t(d.n_in) * uint64_t(d.n_out);
    if (w.type == DType::F32 || w.type == DType::F16 || w.type == DType::BF16) {
        d.type = w.type == DType::F32 ? LONGSCOPE_CUDA_F32 : w.type == DType::F16 ? LONGSCOPE_CUDA_F16 : LONGSCOPE_CUDA_BF16;
        const uint64_t bytes = count * (w.type == DType::F32 ? 4 : 2);
        if (bytes > w.nbytes)
            throw FormatError("tensor " + w.name + " holds fewer bytes than its shape needs");
        d.data = alloc(size_t(bytes));
        m_weight_allocs.push_back(d.data);
        check(m_api.upload(m_ctx, d.data, w.data, size_t(bytes)), ("uploading tensor " + w.name).c_str());
        m_weight_bytes += bytes;
    } else {
        if (!dtype_supported(w.type))
            throw BackendError("CUDA: tensor " + w.name + " has type " + std::string(dtype_name(w.type)) +
                               ", which the engine cannot compute with");
        // Quantized weights are dequantized to F16 once, here, block of rows by block of rows.
        d.type = LONGSCOPE_CUDA_F16;
        d.data = alloc(size_t(count * 2));
        m_weight_allocs.push_back(d.data);
        const int64_t block = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(1, d.n_in));
        std::vector<float> row(size_t(d.n_in));
        std::vector<uint16_t> half;
        for (int64_t r0 = 0; r0 < d.n_out; r0 += block) {
            const int64_t rows = std::min(block, d.n_out - r0);
            half.resize(size_t(rows * d.n_in));
            for (int64_t r = 0; r < rows; ++r) {
                m_reader.row_f32(w, r0 + r, row.data());
                for (int64_t i = 0; i < d.n_in; ++i)
                    half[size_t(r * d.n_in + i)] = m_reader.to_f16(row[size_t(i)]);
            }
            check(m_api.upload(m_ctx, static_cast<char *>(d.data) + r0 * d.n_in * 2, half.data(), half.size() * 2),
                  ("uploading tensor " + w.name).c_str());
        }
        m_weight_bytes += count * 2;
    }
    m_uploaded.emplace(w.data, d);
    m_weights[&w] = d;
}

void CudaBackend::upload_norm(const WeightView &w)
{
    DeviceWeight d;
    d.n_in = w.ne(0);
    d.n_out = 1;
    std::vector<float> v(size_t(d.n_in));
    m_reader.row_f32(w, 0, v.data());
    d.data = alloc(v.size() * 4);
    m_weight_allocs.push_back(d.data);
    check(m_api.upload(m_ctx, d.data, v.data(), v.size() * 4), ("uploading tensor " + w.name).c_str());
    m_weight_bytes += v.size() * 4;
    m_weights[&w] = d;
}

// ---- KV cache --------------------------------------------------------------------------------

std::unique_ptr<KvCache> CudaBackend::make_kv(KvMode mode, int limit, KvType type_k, KvType type_v)
{
    check_kv_types_supported(ComputeBackend::Cuda, type_k, type_v);
    return std::unique_ptr<KvCache>(new CudaKvCache(m_api, m_ctx, mode, m_hp.n_layer, limit, m_hp.n_embd_kv()));
}

void CudaBackend::copy_kv_rows(KvCache &from, KvCache &to, int n_tokens)
{
    to.ensure(n_tokens);
    const size_t bytes = size_t(n_tokens) * size_t(m_hp.n_embd_kv()) * 4;
    for (int l = 0; l < m_hp.n_layer; ++l) {
        check(m_api.copy(m_ctx, to.keys(l), from.keys(l), bytes), "copying cached keys");
        check(m_api.copy(m_ctx, to.values(l), from.values(l), bytes), "copying cached values");
    }
    // `from` may be destroyed next (a concat buffer freed, granules unmapped): its rows must
    // have been read by then. Mode changes are rare; this wait is not in a decode step.
    check(m_api.synchronize(m_ctx), "copying the KV cache");
}

void CudaBackend::rotate_cached_keys(KvCache &kv, int j0, int n, double base, double pos_scale, bool undo)
{
    if (n <= 0)
        return;
    const int64_t ekv = m_hp.n_embd_kv();
    // Key j is rotated for position j * pos_scale, or -(j * pos_scale) to undo: the rope op puts
    // token t at (pos0 + t) * scale, so undoing uses scale -pos_scale (a sign change is exact).
    for (int l = 0; l < m_hp.n_layer; ++l)
        check(m_api.rope(m_ctx, kv.keys(l) + int64_t(j0) * ekv, n, m_hp.n_head_kv, m_hp.head_dim(), m_hp.n_rot,
                         int(m_hp.rope_style), nullptr, double(j0), undo ? -pos_scale : pos_scale, base),
              "converting cached keys");
}

void CudaBackend::shift_cached_keys(KvCache &kv, int j0, int n, int delta, double base, double pos_scale,
                                    std::span<const float> factors)
{
    if (n <= 0 || delta == 0)
        return;
    if (!factors.empty())
        throw BackendError("CUDA: the context shift of keys rotated with per-dimension frequency factors (YaRN, "
                           "llama3, LongRoPE) is not implemented; cache keys before RoPE or use the CPU");
    // The rope op rotates row t for (pos0 + t) * scale: undoing the rotation of the rows' old
    // positions and applying that of the new ones turns every row by delta positions.
    const int64_t ekv = m_hp.n_embd_kv();
    for (int l = 0; l < m_hp.n_layer; ++l) {
        float *rows = kv.keys(l) + int64_t(j0) * ekv;
        check(m_api.rope(m_ctx, rows, n, m_hp.n_head_kv, m_hp.head_dim(), m_hp.n_rot, int(m_hp.rope_style), nullptr,
                         double(j0 - delta), -pos_scale, base),
              "shifting cached keys");
        check(m_api.rope(m_ctx, rows, n, m_hp.n_head_kv, m_hp.head_dim(), m_hp.n_rot, int(m_hp.rope_style), nullptr,
                         double(j0), pos_scale, base),
              "shifting cached keys");
    }
}

// ---- operations ------------------------------------------------------------------------------

Activations CudaBackend::activations(int64_t n)
{
    if (n <= m_rows)
        return m_buf;
    const size_t e = size_t(m_hp.n_embd), ekv = size_t(m_hp.n_embd_kv()), f = size_t(m_hp.n_ff),
                 v = size_t(m_hp.n_vocab), rows = size_t(n);
    const size_t sizes[] = {rows * e * 4,   rows * e * 4,   rows * e * 4, rows * ekv * 4, rows * ekv * 4,
                            rows * e * 4,   rows * e * 4,   rows * f * 4, rows * f * 4,   rows * v * 4,
                            rows * 4};
    size_t total = 0;
    for (size_t s : sizes)
        total += align_up(s);
    if (m_act) {
        check(m_api.synchronize(m_ctx), "waiting for the device");
        check(m_api.free(m_ctx, m_act), "freeing activations");
        m_act = nullptr;
        m_act_bytes = 0;
        m_rows = 0;
    }
    m_act = alloc(total);
    m_act_bytes = total;
    m_rows = n;
    char *p = static_cast<char *>(m_act);
    size_t i = 0;
    auto take = [&]() {
        char *at = p;
        p += align_up(sizes[i++]);
        return reinterpret_cast<float *>(at);
    };
    m_buf.x = take();
    m_buf.xn = take();
    m_buf.q = take();
    m_buf.k = take();
    m_buf.v = take();
    m_buf.attn = take();
    m_buf.proj = take();
    m_buf.gate = take();
    m_buf.up = take();
    m_dlogits = take();
    m_tokens = reinterpret_cast<int32_t *>(take());
    return m_buf;
}

void CudaBackend::embed(const WeightView &table, std::span<const int32_t> tokens, float *x)
{
    const DeviceWeight &d = device(table);
    const int64_t n = int64_t(tokens.size());
    // The one copy to the device in a step; the stream is idle here (the last step ended by
    // reading its logits), so waiting for it costs nothing.
    check(m_api.upload(m_ctx, m_tokens, tokens.data(), size_t(n) * 4), "uploading the tokens");
    check(m_api.embedding(m_ctx, d.data, d.type, d.n_out, m_hp.n_embd, m_tokens, n, x), "embedding");
}

void CudaBackend::rmsnorm(const float *x, const WeightView &weight, float *out, int64_t n_rows, int64_t n, float eps,
                          float weight_offset)
{
    if (weight_offset != 0.0f)
        throw BackendError("CUDA: RMSNorm with a weight offset is not implemented on the device");
    check(m_api.rmsnorm(m_ctx, x, static_cast<const float *>(device(weight).data), out, n_rows, n, eps), "RMSNorm");
}

void CudaBackend::matmul(const WeightView &w, const float *x, float *y, int64_t n_rows)
{
    const DeviceWeight &d = device(w);
    check(m_api.matmul(m_ctx, d.data, d.type, d.n_in, d.n_out, x, y, n_rows), ("matrix product " + w.name).c_str());
}

void CudaBackend::matmul_group(std::span<const Projection> outs, const float *x, int64_t n_rows)
{
    for (const Projection &o : outs)
        matmul(*o.w, x, o.y, n_rows);
}

void CudaBackend::rope(float *x, int64_t n_rows, int n_heads, int64_t pos0, const ForwardParams &params)
{
    if (!params.rope_factors.empty())
        throw BackendError("CUDA: RoPE with per-dimension frequency factors (YaRN, llama3, LongRoPE) is not "
                           "implemented on the device");
    check(m_api.rope(m_ctx, x, n_rows, n_heads, m_hp.head_dim(), m_hp.n_rot, int(m_hp.rope_style), nullptr,
                     double(pos0), params.pos_scale, params.rope_base),
          "RoPE");
}

void CudaBackend::store_kv(KvCache &kv, int layer, int64_t pos0, const float *k, const float *v, int64_t n_rows)
{
    const int64_t ekv = m_hp.n_embd_kv();
    const size_t bytes = size_t(n_rows * ekv) * 4;
    check(m_api.copy(m_ctx, kv.keys(layer) + pos0 * ekv, k, bytes), "storing keys");
    check(m_api.copy(m_ctx, kv.values(layer) + pos0 * ekv, v, bytes), "storing values");
}

AttentionResult CudaBackend::attention(const AttentionCall &c, const ForwardParams &params)
{
    if (c.softcap != 0.0f || c.window != 0 ||
        (c.scale != 0.0f && std::fabs(c.scale * std::sqrt(float(c.head_dim)) - 1.0f) > 1e-6f))
        throw BackendError("CUDA: attention with soft-capping, a sliding window or a scale other than "
                           "1/sqrt(head size) is not implemented on the device");
    LongscopeCudaAttention a{};
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim = c.head_dim;
    a.q = c.q;
    a.n_q = c.n_q;
    a.q_pos0 = c.q_pos0;
    a.k = c.kv->keys(c.layer);
    a.v = c.kv->values(c.layer);
    a.n_kv = c.n_kv;
    a.out = c.out;
    a.rotate_keys = params.keys_before_rope ? 1 : 0;
    a.n_rot = m_hp.n_rot;
    a.rope_style = int(m_hp.rope_style);
    a.rope_base = params.rope_base;
    a.pos_scale = params.pos_scale;
    a.algorithm = params.memory_efficient ? LONGSCOPE_CUDA_ATTN_TILED : LONGSCOPE_CUDA_ATTN_NAIVE;
    a.causal_flash = params.causal_flash ? 1 : 0;
    LongscopeCudaAttentionInfo info{};
    check(m_api.attention(m_ctx, &a, &info), "attention");
    return {info.scratch_bytes, 0};
}

void CudaBackend::add_inplace(float *x, const float *y, int64_t n)
{
    check(m_api.add(m_ctx, x, y, x, n), "residual add");
}

void CudaBackend::swiglu(const float *gate, const float *up, float *out, int64_t n)
{
    check(m_api.swiglu(m_ctx, gate, up, out, n), "SwiGLU");
}

void CudaBackend::geglu(const float *, const float *, float *, int64_t)
{
    throw BackendError("CUDA: GeGLU is not implemented on the device");
}

void CudaBackend::add_bias(float *, const WeightView &, int64_t, int64_t)
{
    throw BackendError("CUDA: bias addition is not implemented on the device");
}

void CudaBackend::scale(float *, float, int64_t)
{
    throw BackendError("CUDA: scaling is not implemented on the device");
}

void CudaBackend::softcap(float *, float, int64_t)
{
    throw BackendError("CUDA: soft-capping is not implemented on the device");
}

void CudaBackend::move_row(float *x, int64_t to, int64_t from, int64_t width)
{
    if (to != from)
        check(m_api.copy(m_ctx, x + to * width, x + from * width, size_t(width) * 4), "gathering rows");
}

float *CudaBackend::logits_buffer(int64_t n_rows)
{
    if (n_rows > m_rows)
        throw BackendError("CUDA: logits for " + std::to_string(n_rows) + " rows in a step of " +
                           std::to_string(m_rows));
    return m_dlogits;
}

std::span<const float> CudaBackend::read_logits(int64_t n_rows)
{
    m_logits.clear();
    if (n_rows > 0) {
        m_logits.resize(size_t(n_rows * m_hp.n_vocab));
        // The step's one wait: reading the logits (an error the device met surfaces here).
        check(m_api.download(m_ctx, m_logits.data(), m_dlogits, m_logits.size() * 4), "reading the logits");
    } else {
        check(m_api.synchronize(m_ctx), "running the step");
    }
    return {m_logits.data(), m_logits.size()};
}

uint64_t CudaBackend::step_scratch_bytes(uint64_t attention_scratch)
{
    uint64_t plugin_scratch = 0;
    check(m_api.mem_info(m_ctx, nullptr, nullptr, &plugin_scratch), "device memory information");
    return m_act_bytes + std::max(plugin_scratch, attention_scratch);
}

// ---- memory ----------------------------------------------------------------------------------

uint64_t CudaBackend::scratch_bytes() const
{
    uint64_t plugin_scratch = 0;
    check(m_api.mem_info(m_ctx, nullptr, nullptr, &plugin_scratch), "device memory information");
    return m_act_bytes + plugin_scratch;
}

std::optional<DeviceMemoryInfo> CudaBackend::device_memory() const
{
    DeviceMemoryInfo m;
    check(m_api.mem_info(m_ctx, &m.free, &m.total, nullptr), "device memory information");
    return m;
}

} // namespace longscope
