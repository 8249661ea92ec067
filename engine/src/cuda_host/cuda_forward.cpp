#include "cuda_host/cuda_forward.h"

#include "cpu/ops.h"
#include "longscope/errors.h"

#include <algorithm>
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
    : m_api(api), m_ctx(ctx), m_mode(mode), m_limit(limit)
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

float *CudaKvCache::keys(int layer) const { return m_keys.at(size_t(layer)); }
float *CudaKvCache::values(int layer) const { return m_values.at(size_t(layer)); }

LongscopeCudaKvInfo CudaKvCache::info() const
{
    LongscopeCudaKvInfo i{};
    if (m_api.kv_info(m_ctx, m_kv, &i) != 0)
        throw BackendError(std::string("CUDA: KV cache information: ") + m_api.error(m_ctx));
    return i;
}

// ---------------------------------------------------------------------------------------------
// CudaForward

CudaForward::CudaForward(const Model &model, int device) : m_model(model), m_hp(model.hparams())
{
    m_api = load_cuda_api();
    char reason[512] = {0};
    if (m_api.context_create(device, &m_ctx, reason, sizeof reason) != 0)
        throw BackendError(std::string("CUDA: no context on GPU ") + std::to_string(device) + ": " + reason);
    try {
        const ModelWeights &w = model.weights();
        m_tok_embd = upload_matrix(w.tok_embd);
        m_output_norm = upload_norm(w.output_norm);
        m_output = upload_matrix(w.output);
        for (const LayerWeights &lw : w.layers) {
            DeviceLayer d;
            d.attn_norm = upload_norm(lw.attn_norm);
            d.wq = upload_matrix(lw.wq);
            d.wk = upload_matrix(lw.wk);
            d.wv = upload_matrix(lw.wv);
            d.wo = upload_matrix(lw.wo);
            d.ffn_norm = upload_norm(lw.ffn_norm);
            d.w_gate = upload_matrix(lw.w_gate);
            d.w_up = upload_matrix(lw.w_up);
            d.w_down = upload_matrix(lw.w_down);
            m_layers.push_back(d);
        }
    } catch (...) {
        release_all();
        throw;
    }
}

CudaForward::~CudaForward() { release_all(); }

void CudaForward::release_all()
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

void CudaForward::check(int rc, const char *what) const
{
    if (rc != 0)
        throw BackendError(std::string("CUDA: ") + what + ": " + m_api.error(m_ctx));
}

void *CudaForward::alloc(size_t bytes)
{
    void *p = nullptr;
    check(m_api.alloc(m_ctx, bytes, &p), "device memory");
    return p;
}

CudaForward::DeviceWeight CudaForward::upload_matrix(const WeightView &w)
{
    if (auto it = m_uploaded.find(w.data); it != m_uploaded.end())
        return it->second;
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
                weight_row_f32(w, r0 + r, row.data());
                for (int64_t i = 0; i < d.n_in; ++i)
                    half[size_t(r * d.n_in + i)] = f32_to_f16(row[size_t(i)]);
            }
            check(m_api.upload(m_ctx, static_cast<char *>(d.data) + r0 * d.n_in * 2, half.data(), half.size() * 2),
                  ("uploading tensor " + w.name).c_str());
        }
        m_weight_bytes += count * 2;
    }
    m_uploaded.emplace(w.data, d);
    return d;
}

CudaForward::DeviceWeight CudaForward::upload_norm(const WeightView &w)
{
    DeviceWeight d;
    d.n_in = w.ne(0);
    d.n_out = 1;
    std::vector<float> v(size_t(d.n_in));
    weight_row_f32(w, 0, v.data());
    d.data = alloc(v.size() * 4);
    m_weight_allocs.push_back(d.data);
    check(m_api.upload(m_ctx, d.data, v.data(), v.size() * 4), ("uploading tensor " + w.name).c_str());
    m_weight_bytes += v.size() * 4;
    return d;
}

void CudaForward::size_activations(int64_t n)
{
    if (n <= m_rows)
        return;
    const size_t e = size_t(m_hp.n_embd), f = size_t(m_hp.n_ff), v = size_t(m_hp.n_vocab), rows = size_t(n);
    const size_t sizes[] = {rows * e * 4, rows * e * 4, rows * e * 4, rows * e * 4, rows * e * 4,
                            rows * f * 4, rows * f * 4, rows * v * 4, rows * 4};
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
    auto take = [&](size_t i) {
        char *at = p;
        p += align_up(sizes[i]);
        return at;
    };
    m_x = reinterpret_cast<float *>(take(0));
    m_xn = reinterpret_cast<float *>(take(1));
    m_q = reinterpret_cast<float *>(take(2));
    m_attn = reinterpret_cast<float *>(take(3));
    m_proj = reinterpret_cast<float *>(take(4));
    m_gate = reinterpret_cast<float *>(take(5));
    m_up = reinterpret_cast<float *>(take(6));
    m_dlogits = reinterpret_cast<float *>(take(7));
    m_tokens = reinterpret_cast<int32_t *>(take(8));
}

std::span<const float> CudaForward::eval(std::span<const int32_t> tokens, int n_past, int logits_from, CudaKvCache &kv,
                                         const ForwardParams &params, ForwardStats &stats)
{
    const int64_t n = int64_t(tokens.size());
    const int64_t e = m_hp.n_embd, ekv = m_hp.n_embd_kv(), f = m_hp.n_ff, V = m_hp.n_vocab;
    const int hd = m_hp.head_dim();
    m_logits.clear();
    if (n == 0)
        return {};
    size_activations(n);

    // The one copy to the device in a step; the stream is idle here (the last step ended by
    // reading its logits), so waiting for it costs nothing.
    check(m_api.upload(m_ctx, m_tokens, tokens.data(), size_t(n) * 4), "uploading the tokens");
    check(m_api.embedding(m_ctx, m_tok_embd.data, m_tok_embd.type, m_tok_embd.n_out, e, m_tokens, n, m_x),
          "embedding");

    uint64_t attn_scratch = 0;
    for (int l = 0; l < m_hp.n_layer; ++l) {
        const DeviceLayer &lw = m_layers[size_t(l)];
        check(m_api.rmsnorm(m_ctx, m_x, static_cast<const float *>(lw.attn_norm.data), m_xn, n, e, m_hp.rms_eps),
              "attention RMSNorm");
        // q [n, n_head, hd]; k and v [n, n_head_kv, hd] written straight into the cache rows
        // of positions n_past .. n_past + n - 1.
        float *k_rows = kv.keys(l) + int64_t(n_past) * ekv;
        float *v_rows = kv.values(l) + int64_t(n_past) * ekv;
        check(m_api.matmul(m_ctx, lw.wq.data, lw.wq.type, lw.wq.n_in, lw.wq.n_out, m_xn, m_q, n), "Q projection");
        check(m_api.matmul(m_ctx, lw.wk.data, lw.wk.type, lw.wk.n_in, lw.wk.n_out, m_xn, k_rows, n), "K projection");
        check(m_api.matmul(m_ctx, lw.wv.data, lw.wv.type, lw.wv.n_in, lw.wv.n_out, m_xn, v_rows, n), "V projection");
        // Token t at position (n_past + t) * pos_scale, as the CPU computes it.
        check(m_api.rope(m_ctx, m_q, n, m_hp.n_head, hd, m_hp.n_rot, int(m_hp.rope_style), nullptr, double(n_past),
                         params.pos_scale, params.rope_base),
              "RoPE (queries)");
        if (!params.keys_before_rope)
            check(m_api.rope(m_ctx, k_rows, n, m_hp.n_head_kv, hd, m_hp.n_rot, int(m_hp.rope_style), nullptr,
                             double(n_past), params.pos_scale, params.rope_base),
                  "RoPE (keys)");

        LongscopeCudaAttention a{};
        a.n_head = m_hp.n_head;
        a.n_head_kv = m_hp.n_head_kv;
        a.head_dim = hd;
        a.q = m_q;
        a.n_q = n;
        a.q_pos0 = n_past;
        a.k = kv.keys(l);
        a.v = kv.values(l);
        a.n_kv = n_past + n;
        a.out = m_attn;
        a.rotate_keys = params.keys_before_rope ? 1 : 0;
        a.n_rot = m_hp.n_rot;
        a.rope_style = int(m_hp.rope_style);
        a.rope_base = params.rope_base;
        a.pos_scale = params.pos_scale;
        a.algorithm = params.memory_efficient ? LONGSCOPE_CUDA_ATTN_TILED : LONGSCOPE_CUDA_ATTN_NAIVE;
        a.causal_flash = params.causal_flash ? 1 : 0;
        LongscopeCudaAttentionInfo info{};
        check(m_api.attention(m_ctx, &a, &info), "attention");
        attn_scratch = std::max<uint64_t>(attn_scratch, info.scratch_bytes);

        check(m_api.matmul(m_ctx, lw.wo.data, lw.wo.type, lw.wo.n_in, lw.wo.n_out, m_attn, m_proj, n),
              "output projection");
        check(m_api.add(m_ctx, m_x, m_proj, m_x, n * e), "residual add");

        check(m_api.rmsnorm(m_ctx, m_x, static_cast<const float *>(lw.ffn_norm.data), m_xn, n, e, m_hp.rms_eps),
              "FFN RMSNorm");
        check(m_api.matmul(m_ctx, lw.w_gate.data, lw.w_gate.type, lw.w_gate.n_in, lw.w_gate.n_out, m_xn, m_gate, n),
              "FFN gate");
        check(m_api.matmul(m_ctx, lw.w_up.data, lw.w_up.type, lw.w_up.n_in, lw.w_up.n_out, m_xn, m_up, n), "FFN up");
        check(m_api.swiglu(m_ctx, m_gate, m_up, m_gate, n * f), "SwiGLU");
        check(m_api.matmul(m_ctx, lw.w_down.data, lw.w_down.type, lw.w_down.n_in, lw.w_down.n_out, m_gate, m_proj, n),
              "FFN down");
        check(m_api.add(m_ctx, m_x, m_proj, m_x, n * e), "residual add");
    }

    // Final norm and LM head for the rows asked for (they are the last rows of x).
    const int64_t first = std::clamp<int64_t>(logits_from, 0, n);
    const int64_t n_out = n - first;
    if (n_out > 0) {
        check(m_api.rmsnorm(m_ctx, m_x + first * e, static_cast<const float *>(m_output_norm.data), m_xn, n_out, e,
                            m_hp.rms_eps),
              "output RMSNorm");
        check(m_api.matmul(m_ctx, m_output.data, m_output.type, m_output.n_in, m_output.n_out, m_xn, m_dlogits, n_out),
              "LM head");
        m_logits.resize(size_t(n_out * V));
        // The step's one wait: reading the logits (an error the device met surfaces here).
        check(m_api.download(m_ctx, m_logits.data(), m_dlogits, m_logits.size() * 4), "reading the logits");
    } else {
        check(m_api.synchronize(m_ctx), "running the step");
    }
    uint64_t plugin_scratch = 0;
    check(m_api.mem_info(m_ctx, nullptr, nullptr, &plugin_scratch), "device memory information");
    stats.scratch_bytes = std::max(stats.scratch_bytes, m_act_bytes + std::max(plugin_scratch, attn_scratch));
    return {m_logits.data(), m_logits.size()};
}

std::unique_ptr<CudaKvCache> CudaForward::make_kv(KvMode mode, int limit)
{
    return std::unique_ptr<CudaKvCache>(new CudaKvCache(m_api, m_ctx, mode, m_hp.n_layer, limit, m_hp.n_embd_kv()));
}

void CudaForward::copy_rows(const CudaKvCache &from, CudaKvCache &to, int n_tokens)
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

void CudaForward::rotate_cached_keys(CudaKvCache &kv, int j0, int n, double base, double pos_scale, bool undo)
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

DeviceMemoryInfo CudaForward::memory() const
{
    DeviceMemoryInfo m;
    uint64_t plugin_scratch = 0;
    check(m_api.mem_info(m_ctx, &m.free, &m.total, &plugin_scratch), "device memory information");
    m.scratch = m_act_bytes + plugin_scratch;
    return m;
}

} // namespace longscope
