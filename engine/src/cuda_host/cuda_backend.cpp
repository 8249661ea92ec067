#include "cuda_host/cuda_backend.h"

#include "longscope/errors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

// The plugin numbers KV encodings as KvType.
int cuda_kv_type(KvType t) { return int(t); }
static_assert(int(KvType::F32) == LONGSCOPE_CUDA_KV_F32 && int(KvType::F16) == LONGSCOPE_CUDA_KV_F16 &&
              int(KvType::Q8_0) == LONGSCOPE_CUDA_KV_Q8_0 && int(KvType::Q4_0) == LONGSCOPE_CUDA_KV_Q4_0);

// The cache made by this backend (a CUDA backend only ever sees its own caches).
CudaKvCache &device_cache(KvCache &kv) { return static_cast<CudaKvCache &>(kv); }

// Largest head size of the plugin's memory-efficient kernel (kernels/attention.cuh
// k_attn_max_head_dim); larger heads take the plain kernel.
constexpr int k_tiled_max_head_dim = 256;

// Split-KV decoding: up to this many queries in a call; ranges chosen for about this many
// blocks (a few per multiprocessor of a large GPU), of at least this many keys, at most this
// many ranges (the plugin lengthens ranges past its shared-memory limit itself).
constexpr int64_t k_split_max_queries = 8;
constexpr int64_t k_split_blocks = 512;
constexpr int64_t k_split_min_keys = 32;
constexpr int64_t k_split_max_ranges = 1024;

} // namespace

// ---------------------------------------------------------------------------------------------
// CudaKvCache

CudaKvCache::CudaKvCache(const CudaApi &api, LongscopeCudaContext *ctx, KvMode mode, int n_layer, int limit,
                         int n_embd_kv, KvType type_k, KvType type_v)
    : m_api(api), m_ctx(ctx), m_mode(mode), m_limit(limit), m_type{type_k, type_v},
      m_row_bytes{kv_type_row_bytes(type_k, n_embd_kv), kv_type_row_bytes(type_v, n_embd_kv)}
{
    const int rc = m_api.kv_create(m_ctx, cuda_kv_mode(mode), n_layer, limit, int64_t(m_row_bytes[0]),
                                   int64_t(m_row_bytes[1]), &m_kv);
    if (rc != 0)
        throw BackendError(std::string("CUDA: the ") + std::string(to_string(mode)) + " KV cache for " +
                           std::to_string(limit) + " tokens cannot be made: " + m_api.error(m_ctx));
    for (auto &rows : m_rows)
        rows.assign(size_t(n_layer), nullptr);
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
    for (size_t l = 0; l < m_rows[0].size(); ++l) {
        void *k = nullptr, *v = nullptr;
        if (m_api.kv_layer(m_ctx, m_kv, int(l), &k, &v) != 0)
            throw BackendError(std::string("CUDA: KV cache layer ") + std::to_string(l) + ": " + m_api.error(m_ctx));
        m_rows[0][l] = static_cast<uint8_t *>(k);
        m_rows[1][l] = static_cast<uint8_t *>(v);
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

float *CudaKvCache::keys(int layer)
{
    if (m_type[0] != KvType::F32)
        throw InvalidArgument("the CUDA KV cache stores its keys as " + std::string(to_string(m_type[0])) +
                              ", not as floats");
    return reinterpret_cast<float *>(key_data(layer));
}

float *CudaKvCache::values(int layer)
{
    if (m_type[1] != KvType::F32)
        throw InvalidArgument("the CUDA KV cache stores its values as " + std::string(to_string(m_type[1])) +
                              ", not as floats");
    return reinterpret_cast<float *>(value_data(layer));
}

void CudaKvCache::shift(int n_tokens, int keep, int drop)
{
    check_kv_shift(n_tokens, keep, drop, int(std::min<int64_t>(info().capacity_rows, m_limit)));
    if (drop == 0)
        return;
    // A device copy may not overlap itself: rows move in runs of at most `drop`, lowest first,
    // so each run's destination lies entirely below its source and above what was moved. Rows
    // move whole, in their encoding.
    for (int j = keep + drop; j < n_tokens; j += drop) {
        const int64_t rows = std::min(drop, n_tokens - j);
        for (int side = 0; side < 2; ++side) {
            const uint64_t rb = m_row_bytes[side];
            for (uint8_t *base : m_rows[side])
                if (m_api.copy(m_ctx, base + uint64_t(j - drop) * rb, base + uint64_t(j) * rb, size_t(uint64_t(rows) * rb)) != 0)
                    throw BackendError(std::string("CUDA: shifting the KV cache: ") + m_api.error(m_ctx));
        }
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

CudaBackend::CudaBackend(const Model &model, const HostFunctions &host, int device)
    : m_model(model), m_hp(model.hparams()), m_host(host)
{
    if (!m_host.row_f32 || !m_host.to_f16 || !m_host.rope_inv_freq)
        throw InvalidArgument("CUDA: the backend needs the host's weight reader, F16 rounding and RoPE frequencies");
    m_api = load_cuda_api();
    char reason[512] = {0};
    if (m_api.context_create(device, &m_ctx, reason, sizeof reason) != 0)
        throw BackendError(std::string("CUDA: no context on GPU ") + std::to_string(device) + ": " + reason);
    try {
        const ModelWeights &w = model.weights();
        upload_matrix(w.tok_embd);
        upload_vector(w.output_norm);
        upload_matrix(w.output);
        for (const LayerWeights &lw : w.layers) {
            upload_vector(lw.attn_norm);
            // Phi-3's fused matrices arrive as row ranges of one tensor: each is its own matrix.
            for (const WeightView *m : {&lw.wq, &lw.wk, &lw.wv, &lw.wo})
                upload_matrix(*m);
            if (m_hp.qkv_bias)
                for (const WeightView *b : {&lw.bq, &lw.bk, &lw.bv})
                    upload_vector(*b);
            if (m_hp.qk_norm) {
                upload_vector(lw.q_norm);
                upload_vector(lw.k_norm);
            }
            if (m_hp.post_norms) {
                upload_vector(lw.attn_post_norm);
                upload_vector(lw.ffn_post_norm);
            }
            upload_vector(lw.ffn_norm);
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
    for (FreqTable &t : m_freqs)
        m_api.free(m_ctx, t.data);
    m_freqs.clear();
    if (m_act)
        m_api.free(m_ctx, m_act);
    m_act = nullptr;
    if (m_dlogits)
        m_api.free(m_ctx, m_dlogits);
    m_dlogits = nullptr;
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
    if (!w.data)
        throw FormatError("tensor " + w.name + " is missing");
    if (auto it = m_uploaded.find(w.data); it != m_uploaded.end() && it->second.n_in == w.ne(0) &&
                                           it->second.n_out == w.ne(1)) {
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
                m_host.row_f32(w, r0 + r, row.data());
                for (int64_t i = 0; i < d.n_in; ++i)
                    half[size_t(r * d.n_in + i)] = m_host.to_f16(row[size_t(i)]);
            }
            check(m_api.upload(m_ctx, static_cast<char *>(d.data) + r0 * d.n_in * 2, half.data(), half.size() * 2),
                  ("uploading tensor " + w.name).c_str());
        }
        m_weight_bytes += count * 2;
    }
    m_uploaded.insert_or_assign(w.data, d);
    m_weights[&w] = d;
}

void CudaBackend::upload_vector(const WeightView &w)
{
    if (!w.data)
        throw FormatError("tensor " + w.name + " is missing");
    DeviceWeight d;
    d.n_in = w.ne(0);
    d.n_out = 1;
    std::vector<float> v(size_t(d.n_in));
    m_host.row_f32(w, 0, v.data());
    d.data = alloc(v.size() * 4);
    m_weight_allocs.push_back(d.data);
    check(m_api.upload(m_ctx, d.data, v.data(), v.size() * 4), ("uploading tensor " + w.name).c_str());
    m_weight_bytes += v.size() * 4;
    m_weights[&w] = d;
}

// ---- KV cache --------------------------------------------------------------------------------

std::unique_ptr<KvCache> CudaBackend::make_kv(KvMode mode, int limit, KvType type_k, KvType type_v)
{
    for (KvType t : {type_k, type_v})
        if (m_hp.head_dim() % kv_type_block(t) != 0)
            throw InvalidArgument("the KV cache type " + std::string(to_string(t)) +
                                  " needs a head size that is a multiple of " + std::to_string(kv_type_block(t)) +
                                  "; this model's head size is " + std::to_string(m_hp.head_dim()));
    return std::unique_ptr<KvCache>(
        new CudaKvCache(m_api, m_ctx, mode, m_hp.n_layer, limit, m_hp.n_embd_kv(), type_k, type_v));
}

void CudaBackend::copy_kv_rows(KvCache &from_kv, KvCache &to_kv, int n_tokens)
{
    CudaKvCache &from = device_cache(from_kv), &to = device_cache(to_kv);
    to.ensure(n_tokens);
    // Rows of the same type are copied; of another type decoded and encoded again (q8_0 -> f32
    // gives the q8_0 values exactly; f32 -> q8_0 quantizes as writing the row would).
    for (int l = 0; l < m_hp.n_layer; ++l) {
        check(m_api.kv_convert(m_ctx, from.key_data(l), cuda_kv_type(from.type_k()), to.key_data(l),
                               cuda_kv_type(to.type_k()), n_tokens, m_hp.n_embd_kv()),
              "copying cached keys");
        check(m_api.kv_convert(m_ctx, from.value_data(l), cuda_kv_type(from.type_v()), to.value_data(l),
                               cuda_kv_type(to.type_v()), n_tokens, m_hp.n_embd_kv()),
              "copying cached values");
    }
    // `from` may be destroyed next (a concat buffer freed, granules unmapped): its rows must
    // have been read by then. Mode changes are rare; this wait is not in a decode step.
    check(m_api.synchronize(m_ctx), "copying the KV cache");
}

const double *CudaBackend::freq_table(double base, std::span<const float> factors)
{
    ++m_freq_clock;
    for (FreqTable &t : m_freqs)
        if (t.base == base && std::equal(t.factors.begin(), t.factors.end(), factors.begin(), factors.end())) {
            t.last_use = m_freq_clock;
            return t.data;
        }
    // The CPU backend's table: its frequencies, divided by the factors it has (cpu_backend.cpp).
    std::vector<double> inv = m_host.rope_inv_freq(base, m_hp.n_rot);
    for (size_t i = 0; i < inv.size() && i < factors.size(); ++i)
        inv[i] /= double(factors[i]);
    if (inv.empty())
        inv.push_back(0.0); // n_rot 0: nothing is rotated, but the table is never null
    FreqTable *slot = nullptr;
    if (m_freqs.size() < k_freq_tables) {
        FreqTable fresh;
        fresh.data = static_cast<double *>(alloc(inv.size() * sizeof(double)));
        m_freqs.push_back(std::move(fresh));
        slot = &m_freqs.back();
    } else {
        // The least recently used table is overwritten. The upload is queued after the work
        // that still reads the old values, so no queued op sees the new ones.
        slot = &*std::min_element(m_freqs.begin(), m_freqs.end(),
                                  [](const FreqTable &a, const FreqTable &b) { return a.last_use < b.last_use; });
    }
    // Matches nothing until its upload succeeded.
    slot->base = std::numeric_limits<double>::quiet_NaN();
    check(m_api.upload(m_ctx, slot->data, inv.data(), inv.size() * sizeof(double)), "uploading RoPE frequencies");
    slot->base = base;
    slot->factors.assign(factors.begin(), factors.end());
    slot->last_use = m_freq_clock;
    return slot->data;
}

void CudaBackend::rope_cached_keys(KvCache &kv_in, int j0, int n, double pos0, double pos_step, double pos_scale,
                                   const double *inv_freq, const char *what)
{
    if (n <= 0)
        return;
    CudaKvCache &kv = device_cache(kv_in);
    check_kv_shift(j0 + n, j0, 0, int(std::min<int64_t>(kv.info().capacity_rows, kv.limit())));
    const int64_t ekv = m_hp.n_embd_kv();
    const uint64_t rb = kv.row_bytes(0);
    const int type = cuda_kv_type(kv.type_k());
    auto rope_rows = [&](float *rows) {
        check(m_api.rope(m_ctx, rows, n, m_hp.n_head_kv, m_hp.head_dim(), m_hp.n_rot, int(m_hp.rope_style), nullptr,
                         pos0, pos_step, pos_scale, inv_freq),
              what);
    };
    if (kv.type_k() == KvType::F32) {
        for (int l = 0; l < m_hp.n_layer; ++l)
            rope_rows(reinterpret_cast<float *>(kv.key_data(l) + uint64_t(j0) * rb));
        return;
    }
    // Decoded into a buffer of n rows, rotated, encoded again; one buffer for every layer (the
    // stream runs the layers in order). Freed once the stream has used it.
    auto *buf = static_cast<float *>(alloc(size_t(n) * size_t(ekv) * sizeof(float)));
    try {
        for (int l = 0; l < m_hp.n_layer; ++l) {
            uint8_t *rows = kv.key_data(l) + uint64_t(j0) * rb;
            check(m_api.kv_convert(m_ctx, rows, type, buf, LONGSCOPE_CUDA_KV_F32, n, ekv), what);
            rope_rows(buf);
            check(m_api.kv_convert(m_ctx, buf, LONGSCOPE_CUDA_KV_F32, rows, type, n, ekv), what);
        }
        check(m_api.synchronize(m_ctx), what);
    } catch (...) {
        m_api.synchronize(m_ctx);
        m_api.free(m_ctx, buf);
        throw;
    }
    check(m_api.free(m_ctx, buf), what);
}

void CudaBackend::rotate_cached_keys(KvCache &kv, int j0, int n, double base, double pos_scale, bool undo)
{
    // Key j is rotated for position j * pos_scale, or -(j * pos_scale) to undo, with the plain
    // frequencies (as the CPU): the rope op puts row t at (j0 + t) * scale, so undoing uses
    // scale -pos_scale (a sign change is exact).
    if (n <= 0)
        return;
    rope_cached_keys(kv, j0, n, double(j0), 1.0, undo ? -pos_scale : pos_scale, freq_table(base, {}),
                     "converting cached keys");
}

void CudaBackend::shift_cached_keys(KvCache &kv, int j0, int n, int delta, double base, double pos_scale,
                                    std::span<const float> factors)
{
    // RoPE rotations compose: every row turns by the same angle, delta * pos_scale (the rope
    // op with a position step of 0), with the frequencies the keys were rotated with.
    if (n <= 0 || delta == 0)
        return;
    rope_cached_keys(kv, j0, n, double(delta), 0.0, pos_scale, freq_table(base, factors), "shifting cached keys");
}

// ---- operations ------------------------------------------------------------------------------

Activations CudaBackend::activations(int64_t n)
{
    if (n <= m_rows)
        return m_buf;
    const size_t e = size_t(m_hp.n_embd), eq = size_t(m_hp.n_embd_q()), ekv = size_t(m_hp.n_embd_kv()),
                 f = size_t(m_hp.n_ff), rows = size_t(n);
    // In the order taken below: x, xn, q, k, v, attn, proj, gate, up, tokens.
    const size_t sizes[] = {rows * e * 4,  rows * e * 4, rows * eq * 4, rows * ekv * 4, rows * ekv * 4,
                            rows * eq * 4, rows * e * 4, rows * f * 4,  rows * f * 4,   rows * 4};
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
    const DeviceWeight &w = device(weight);
    if (w.n_in != n)
        throw BackendError("CUDA: RMSNorm over rows of " + std::to_string(n) + " with the weight " + weight.name +
                           " of " + std::to_string(w.n_in));
    check(m_api.rmsnorm(m_ctx, x, static_cast<const float *>(w.data), out, n_rows, n, eps, weight_offset), "RMSNorm");
}

void CudaBackend::matmul(const WeightView &w, const float *x, float *y, int64_t n_rows)
{
    const DeviceWeight &d = device(w);
    check(m_api.matmul(m_ctx, d.data, d.type, d.n_in, d.n_out, x, y, n_rows), ("matrix product " + w.name).c_str());
}

void CudaBackend::matmul_group(std::span<const Projection> outs, const float *x, int64_t n_rows)
{
    // One token: the products of matrices of one type and width in one launch.
    if (n_rows == 1 && !outs.empty() && outs.size() <= 4) {
        const void *w[4];
        int64_t n_out[4];
        float *y[4];
        const DeviceWeight &first = device(*outs[0].w);
        bool same = true;
        for (size_t m = 0; m < outs.size(); ++m) {
            const DeviceWeight &d = device(*outs[m].w);
            same = same && d.type == first.type && d.n_in == first.n_in;
            w[m] = d.data;
            n_out[m] = d.n_out;
            y[m] = outs[m].y;
        }
        if (same) {
            check(m_api.matvec_group(m_ctx, first.type, first.n_in, x, int(outs.size()), w, n_out, y),
                  "matrix products");
            return;
        }
    }
    for (const Projection &o : outs)
        matmul(*o.w, x, o.y, n_rows);
}

void CudaBackend::rope(float *x, int64_t n_rows, int n_heads, int64_t pos0, const ForwardParams &params)
{
    const double *inv = freq_table(params.rope_base, params.rope_factors);
    check(m_api.rope(m_ctx, x, n_rows, n_heads, m_hp.head_dim(), m_hp.n_rot, int(m_hp.rope_style), nullptr,
                     double(pos0), 1.0, params.pos_scale, inv),
          "RoPE");
}

void CudaBackend::rope_qk(float *q, int n_head, float *k, int n_head_kv, int64_t n_rows, int64_t pos0,
                          const ForwardParams &params)
{
    if (!k) {
        rope(q, n_rows, n_head, pos0, params);
        return;
    }
    const double *inv = freq_table(params.rope_base, params.rope_factors);
    check(m_api.rope_pair(m_ctx, q, n_head, k, n_head_kv, n_rows, m_hp.head_dim(), m_hp.n_rot, int(m_hp.rope_style),
                          double(pos0), params.pos_scale, inv),
          "RoPE");
}

void CudaBackend::store_kv(KvCache &kv_in, int layer, int64_t pos0, const float *k, const float *v, int64_t n_rows)
{
    // Encoded once, here, as the row is written.
    CudaKvCache &kv = device_cache(kv_in);
    check(m_api.kv_store(m_ctx, k, kv.key_data(layer) + uint64_t(pos0) * kv.row_bytes(0), cuda_kv_type(kv.type_k()),
                         v, kv.value_data(layer) + uint64_t(pos0) * kv.row_bytes(1), cuda_kv_type(kv.type_v()),
                         n_rows, m_hp.n_embd_kv()),
          "storing keys and values");
}

AttentionResult CudaBackend::attention(const AttentionCall &c, const ForwardParams &params)
{
    CudaKvCache &kv = device_cache(*c.kv);
    LongscopeCudaAttention a{};
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim = c.head_dim;
    a.q = c.q;
    a.n_q = c.n_q;
    a.q_pos0 = c.q_pos0;
    a.k = kv.key_data(c.layer);
    a.v = kv.value_data(c.layer);
    a.k_type = cuda_kv_type(kv.type_k());
    a.v_type = cuda_kv_type(kv.type_v());
    a.n_kv = c.n_kv;
    a.out = c.out;
    a.scale = c.scale;
    a.softcap = c.softcap;
    a.window = c.window;
    a.rotate_keys = params.keys_before_rope ? 1 : 0;
    a.n_rot = m_hp.n_rot;
    a.rope_style = int(m_hp.rope_style);
    a.inv_freq = params.keys_before_rope ? freq_table(params.rope_base, params.rope_factors) : nullptr;
    a.pos_scale = params.pos_scale;
    // Unlike the CPU's tiled kernels the device's know soft-capping and windows; heads above the
    // tiled kernel's limit take the plain one. A few queries (a decode step) take split-KV
    // decoding: the tiled kernel would run one block per head walking the whole cache, where
    // split-KV cuts the cache into ranges, a block each, and merges them.
    if (params.memory_efficient && c.n_q <= k_split_max_queries) {
        a.algorithm = LONGSCOPE_CUDA_ATTN_SPLIT_KV;
        // Enough ranges for about k_split_blocks blocks of (query, KV head), none under
        // k_split_min_keys keys.
        const int64_t rows = std::max<int64_t>(1, c.n_q * c.n_head_kv);
        const int64_t most = std::max<int64_t>(1, (c.n_kv + k_split_min_keys - 1) / k_split_min_keys);
        a.n_splits = int(std::clamp<int64_t>((k_split_blocks + rows - 1) / rows, 1, std::min(most, k_split_max_ranges)));
    } else {
        const bool tiled = params.memory_efficient && c.head_dim <= k_tiled_max_head_dim;
        a.algorithm = tiled ? LONGSCOPE_CUDA_ATTN_TILED : LONGSCOPE_CUDA_ATTN_NAIVE;
    }
    a.causal_flash = params.causal_flash ? 1 : 0;
    LongscopeCudaAttentionInfo info{};
    check(m_api.attention(m_ctx, &a, &info), "attention");
    return {info.scratch_bytes, 0};
}

void CudaBackend::add_rmsnorm(float *x, const float *y, const WeightView &weight, float *out, int64_t n_rows,
                              int64_t n, float eps, float weight_offset)
{
    const DeviceWeight &w = device(weight);
    if (w.n_in != n)
        throw BackendError("CUDA: RMSNorm over rows of " + std::to_string(n) + " with the weight " + weight.name +
                           " of " + std::to_string(w.n_in));
    check(m_api.add_rmsnorm(m_ctx, x, y, static_cast<const float *>(w.data), out, n_rows, n, eps, weight_offset),
          "residual add and RMSNorm");
}

void CudaBackend::add_inplace(float *x, const float *y, int64_t n)
{
    check(m_api.add(m_ctx, x, y, x, n), "residual add");
}

void CudaBackend::swiglu(const float *gate, const float *up, float *out, int64_t n)
{
    check(m_api.swiglu(m_ctx, gate, up, out, n), "SwiGLU");
}

void CudaBackend::geglu(const float *gate, const float *up, float *out, int64_t n)
{
    check(m_api.geglu(m_ctx, gate, up, out, n), "GeGLU");
}

void CudaBackend::add_bias(float *x, const WeightView &bias, int64_t n_rows, int64_t width)
{
    const DeviceWeight &b = device(bias);
    if (b.n_in != width)
        throw BackendError("CUDA: bias " + bias.name + " of " + std::to_string(b.n_in) + " values on rows of " +
                           std::to_string(width));
    check(m_api.add_bias(m_ctx, x, static_cast<const float *>(b.data), n_rows, width), "bias addition");
}

void CudaBackend::scale(float *x, float s, int64_t n)
{
    check(m_api.scale(m_ctx, x, s, n), "scaling");
}

void CudaBackend::softcap(float *x, float cap, int64_t n)
{
    check(m_api.softcap(m_ctx, x, cap, n), "soft-capping");
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
    if (n_rows > m_logit_rows) {
        if (m_dlogits) {
            check(m_api.synchronize(m_ctx), "waiting for the device");
            check(m_api.free(m_ctx, m_dlogits), "freeing logits");
            m_dlogits = nullptr;
            m_logit_rows = 0;
        }
        m_dlogits = static_cast<float *>(alloc(align_up(size_t(n_rows) * size_t(m_hp.n_vocab) * 4)));
        m_logit_rows = n_rows;
    }
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
    return m_act_bytes + logit_bytes() + std::max(plugin_scratch, attention_scratch) + freq_table_bytes();
}

uint64_t CudaBackend::logit_bytes() const
{
    return m_dlogits ? align_up(size_t(m_logit_rows) * size_t(m_hp.n_vocab) * 4) : 0;
}

uint64_t CudaBackend::freq_table_bytes() const
{
    return uint64_t(m_freqs.size()) * uint64_t(std::max(1, m_hp.n_rot / 2)) * sizeof(double);
}

// ---- memory ----------------------------------------------------------------------------------

uint64_t CudaBackend::scratch_bytes() const
{
    uint64_t plugin_scratch = 0;
    check(m_api.mem_info(m_ctx, nullptr, nullptr, &plugin_scratch), "device memory information");
    return m_act_bytes + logit_bytes() + plugin_scratch + freq_table_bytes();
}

std::optional<DeviceMemoryInfo> CudaBackend::device_memory() const
{
    DeviceMemoryInfo m;
    check(m_api.mem_info(m_ctx, &m.free, &m.total, nullptr), "device memory information");
    return m;
}

} // namespace longscope
