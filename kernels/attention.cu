// Attention kernels. The reference for every one of them is the CPU's attention_naive
// (engine/src/cpu/attention.cpp): same layouts, score scale (1/sqrt(head_dim) unless given),
// soft-capping of the scaled scores before the mask, causal rule j <= q_pos0 + i (bottom-right
// aligned) and the sliding window j > q_pos0 + i - window, grouped-query heads
// h -> h / (n_head / n_head_kv). Keys and values are read in the cache's encoding (F32, F16,
// Q8_0, Q4_0; kv_format.cuh), one value at a time, as the CPU decodes them.
//
// - Plain attention, as in the original LLaMA code: scores [n_head, n_q, n_kv], an optional
//   explicit additive causal mask, a row softmax, the weighted sum of the values.
// - Memory-efficient attention after FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster
//   Attention with Better Parallelism and Work Partitioning"): one block per (query head,
//   query tile), the key tiles streamed through shared memory, and the online softmax of
//   Milakov & Gimelshein (2018, "Online normalizer calculation for softmax"): a running max m
//   and sum l per row, the accumulator rescaled by exp(m_old - m_new) when the max grows and
//   divided by l at the end. Key tiles entirely above the causal diagonal are skipped.
// - Split-KV decoding (Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for long-context
//   inference"): the keys of one query are cut into ranges processed by separate blocks, each
//   leaving (m, l, unnormalised output); a second kernel rescales them to the common max and
//   sums them.
// Keys cached before RoPE are rotated per element as they are read (rope.cuh), like the CPU's
// load_keys.
#include "attention.cuh"

#include "reduce.cuh"
#include "rope.cuh"

#include <cmath>

namespace longscope::cuda {

namespace {

constexpr int k_threads = 128; // four warps
// Values a thread loads before it stores any when filling shared memory: enough in flight to
// hide the memory's latency, few enough to keep the kernels' registers.
constexpr int k_loads_in_flight = 8;

// Query i sees keys [visible_begin, visible_end): up to its position (and the cache's end),
// and after its window's start.
__device__ __forceinline__ int64_t visible_end(const AttentionArgs &a, int64_t i)
{
    const int64_t last = a.q_pos0 + i + 1;
    return last < a.n_kv ? last : a.n_kv;
}

__device__ __forceinline__ int64_t visible_begin(const AttentionArgs &a, int64_t i)
{
    if (a.window <= 0)
        return 0;
    const int64_t first = a.q_pos0 + i - a.window + 1, end = visible_end(a, i);
    return first < 0 ? 0 : (first > end ? end : first);
}

// The CPU's mask rule for key j and query position pos.
__device__ __forceinline__ bool key_visible(const AttentionArgs &a, int64_t pos, int64_t j)
{
    return j <= pos && (a.window <= 0 || j > pos - a.window);
}

// Q8_0 / Q4_0 keys stored rotated are scored against the query rounded to blocks of 32 as the
// CPU rounds it (engine/src/cpu/attention_qk.h: ggml's Q8_0 rounding, d = max|x| / 127,
// x -> d * round(x / d), the scale a float), so both backends compute the same scores up to
// float rounding. q_s holds n values (whole blocks); the caller synchronises before and after.
__device__ void round_query_blocks(const AttentionArgs &a, float *q_s, int n)
{
    if (a.rotate_keys || !(a.k.type == k_kv_q8_0 || a.k.type == k_kv_q4_0))
        return;
    for (int b = threadIdx.x; b < n / k_kv_block; b += blockDim.x) {
        float *x = q_s + b * k_kv_block;
        float amax = 0.0f;
        for (int e = 0; e < k_kv_block; ++e)
            amax = fmaxf(amax, fabsf(x[e]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int e = 0; e < k_kv_block; ++e)
            x[e] = d * roundf(x[e] * id);
    }
}

// The score of a dot product: scaled, then soft-capped.
__device__ __forceinline__ float score_of(const AttentionArgs &a, float dot)
{
    const float s = dot * a.scale;
    return a.softcap > 0.0f ? a.softcap * tanhf(s / a.softcap) : s;
}

// Element d of key j for kv head kvh as attention sees it (rotated when the cache holds keys
// before RoPE).
__device__ __forceinline__ float key_element(const AttentionArgs &a, int64_t j, int kvh, int d,
                                             const double *inv_freq)
{
    const int64_t e0 = int64_t(kvh) * a.head_dim;
    if (!a.rotate_keys)
        return kv_load(a.k, j, e0 + d);
    return rope_rotated_element(a.k, j, e0, d, a.n_rot, a.rope_style, double(j) * a.pos_scale, inv_freq);
}

__device__ __forceinline__ float value_element(const AttentionArgs &a, int64_t j, int kvh, int d)
{
    return kv_load(a.v, j, int64_t(kvh) * a.head_dim + d);
}

// ---------------------------------------------------------------------------------------------
// Plain attention.

__global__ void causal_mask_kernel(AttentionArgs a, float *mask)
{
    const int64_t total = a.n_q * a.n_kv;
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = idx / a.n_kv, j = idx % a.n_kv;
        mask[idx] = key_visible(a, a.q_pos0 + i, j) ? 0.0f : -INFINITY;
    }
}

// Block x: one (head, query) row, row = h * n_q + i; block y: a range of k_threads keys. `keys`
// is the cache's keys or (rotating) their rotated float copy.
__global__ void naive_scores_kernel(AttentionArgs a, KvRows keys, const float *mask, float *scores)
{
    extern __shared__ float q_s[]; // [head_dim]
    const int64_t row = blockIdx.x;
    const int h = int(row / a.n_q);
    const int64_t i = row % a.n_q;
    const int kvh = h / (a.n_head / a.n_head_kv);
    const int hd = a.head_dim;
    for (int d = threadIdx.x; d < hd; d += blockDim.x)
        q_s[d] = a.q[(i * a.n_head + h) * hd + d];
    __syncthreads();
    round_query_blocks(a, q_s, hd);
    __syncthreads();
    // With the mask every key is scored and the mask added; without it only the visible keys
    // are, and those before the window get -inf (as the CPU's causal_flash path).
    const int64_t n_keys = mask ? a.n_kv : visible_end(a, i);
    const int64_t first = mask ? 0 : visible_begin(a, i);
    const int64_t j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    if (j >= n_keys)
        return;
    if (j < first) {
        scores[row * a.n_kv + j] = -INFINITY;
        return;
    }
    const int64_t e0 = int64_t(kvh) * hd;
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d)
        dot += q_s[d] * kv_load(keys, j, e0 + d);
    float s = score_of(a, dot);
    if (mask)
        s += mask[i * a.n_kv + j];
    scores[row * a.n_kv + j] = s;
}

// One block per row: softmax over the row's n_keys scores, in place.
__global__ void naive_softmax_kernel(AttentionArgs a, bool all_keys, float *scores)
{
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const int64_t i = row % a.n_q;
    const int64_t n_keys = all_keys ? a.n_kv : visible_end(a, i);
    float *s = scores + row * a.n_kv;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x)
        m = fmaxf(m, s[j]);
    m = block_max(m, red);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x) {
        const float e = expf(s[j] - m);
        s[j] = e;
        sum += e;
    }
    sum = block_sum(sum, red);
    const float inv = 1.0f / sum;
    for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x)
        s[j] *= inv;
}

// One block per row, threads over the head dims: out = sum_j p_j v_j.
__global__ void naive_values_kernel(AttentionArgs a, bool all_keys, const float *scores)
{
    const int64_t row = blockIdx.x;
    const int h = int(row / a.n_q);
    const int64_t i = row % a.n_q;
    const int kvh = h / (a.n_head / a.n_head_kv);
    const int hd = a.head_dim;
    const int64_t n_keys = all_keys ? a.n_kv : visible_end(a, i);
    const float *p = scores + row * a.n_kv;
    float *out = a.out + (i * a.n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n_keys; ++j) {
            const float w = p[j];
            if (w != 0.0f) // masked keys: weight exactly 0, the row is not read
                acc += w * value_element(a, j, kvh, d);
        }
        out[d] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// Memory-efficient (tiled, online softmax) attention.

constexpr int BQ = k_attn_q_tile;
constexpr int BK = k_attn_k_tile;
static_assert(BK == 32, "the online softmax maps one key of a tile to one lane of a warp");
static_assert(BQ % (k_threads / 32) == 0, "each warp owns the same number of query rows");

size_t tiled_smem_bytes(int hd, int n_rot)
{
    const size_t doubles = size_t(n_rot / 2 + 1) * sizeof(double);
    const size_t floats = size_t(BQ) * hd      // Q tile
                          + size_t(BK) * (hd + 1) // K tile, padded against bank conflicts
                          + size_t(BQ) * hd       // output accumulator
                          + size_t(BQ) * BK       // scores / probabilities
                          + 3 * BQ;               // m, l, alpha
    return doubles + floats * sizeof(float);
}

__global__ void __launch_bounds__(k_threads)
    tiled_attention_kernel(AttentionArgs a, bool skip_masked, unsigned long long *tile_counter)
{
    extern __shared__ double smem[];
    const int hd = a.head_dim;
    double *inv_freq = smem;
    float *q_s = reinterpret_cast<float *>(smem + (a.rotate_keys ? a.n_rot / 2 : 0) + 1);
    float *k_s = q_s + BQ * hd;
    float *acc = k_s + BK * (hd + 1);
    float *s_s = acc + BQ * hd;
    float *m_s = s_s + BQ * BK;
    float *l_s = m_s + BQ;
    float *alpha_s = l_s + BQ;

    const int h = int(blockIdx.x % unsigned(a.n_head));
    const int64_t qb = blockIdx.x / unsigned(a.n_head);
    const int kvh = h / (a.n_head / a.n_head_kv);
    const int64_t i0 = qb * BQ;
    const int bq = int(a.n_q - i0 < BQ ? a.n_q - i0 : BQ);
    const int64_t first_pos = a.q_pos0 + i0, last_pos = first_pos + bq - 1;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    constexpr int rows_per_warp = BQ / (k_threads / 32);

    if (a.rotate_keys)
        for (int i = tid; i < a.n_rot / 2; i += blockDim.x)
            inv_freq[i] = a.inv_freq[i];
    for (int e = tid; e < BQ * hd; e += blockDim.x) {
        const int r = e / hd, d = e % hd;
        q_s[e] = r < bq ? a.q[((i0 + r) * a.n_head + h) * hd + d] : 0.0f;
        acc[e] = 0.0f;
    }
    for (int r = tid; r < BQ; r += blockDim.x) {
        m_s[r] = -INFINITY;
        l_s[r] = 0.0f;
    }
    __syncthreads();
    round_query_blocks(a, q_s, BQ * hd);
    __syncthreads();

    const int64_t n_tiles = (a.n_kv + BK - 1) / BK;
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t j0 = t * BK;
        const int w = int(a.n_kv - j0 < BK ? a.n_kv - j0 : BK);
        // Every key of this tile and of all later ones lies beyond the last query of the block.
        if (skip_masked && j0 > last_pos)
            break;
        // Every key of this tile lies before the window of the block's first query (and so of
        // all its queries).
        if (skip_masked && a.window > 0 && j0 + w - 1 <= first_pos - a.window)
            continue;
        if (tile_counter && tid == 0)
            atomicAdd(tile_counter, 1ull);

        for (int e = tid; e < BK * hd; e += blockDim.x) {
            const int c = e / hd, d = e % hd;
            k_s[c * (hd + 1) + d] = c < w ? key_element(a, j0 + c, kvh, d, inv_freq) : 0.0f;
        }
        __syncthreads();

        // Scores of the tile; keys past a query's position, before its window (or past the
        // cache) get -inf.
        for (int e = tid; e < BQ * BK; e += blockDim.x) {
            const int r = e / BK, c = e % BK;
            float s = -INFINITY;
            if (r < bq && c < w && key_visible(a, first_pos + r, j0 + c)) {
                const float *qr = q_s + r * hd;
                const float *kc = k_s + c * (hd + 1);
                float dot = 0.0f;
                for (int d = 0; d < hd; ++d)
                    dot += qr[d] * kc[d];
                s = score_of(a, dot);
            }
            s_s[e] = s;
        }
        __syncthreads();

        // Online softmax: warp `warp` owns rows warp * rows_per_warp ..; lane = key of the tile.
        for (int rr = 0; rr < rows_per_warp; ++rr) {
            const int r = warp * rows_per_warp + rr;
            const float s = s_s[r * BK + lane];
            const float m_old = m_s[r];
            const float m_new = fmaxf(m_old, warp_max(s));
            float p = 0.0f, alpha = 1.0f;
            // Nothing visible to this row yet (m_new = -inf): its state stays (m=-inf, l=0, acc=0).
            if (m_new != -INFINITY) {
                alpha = expf(m_old - m_new); // 0 on the first visible tile (m_old = -inf)
                p = expf(s - m_new);         // 0 for masked keys
            }
            const float sum = warp_sum(p);
            s_s[r * BK + lane] = p;
            __syncwarp(); // every lane has read m_s[r] before lane 0 replaces it
            if (lane == 0) {
                l_s[r] = l_s[r] * alpha + sum;
                m_s[r] = m_new;
                alpha_s[r] = alpha;
            }
        }
        __syncthreads();

        // acc = acc * alpha + P V, threads over (row, dim) so the value rows are read coalesced.
        for (int e = tid; e < BQ * hd; e += blockDim.x) {
            const int r = e / hd, d = e % hd;
            if (r >= bq)
                continue;
            float o = acc[e] * alpha_s[r];
            const float *pr = s_s + r * BK;
            for (int c = 0; c < w; ++c) {
                const float p = pr[c];
                if (p != 0.0f)
                    o += p * value_element(a, j0 + c, kvh, d);
            }
            acc[e] = o;
        }
        __syncthreads();
    }

    for (int e = tid; e < bq * hd; e += blockDim.x) {
        const int r = e / hd, d = e % hd;
        const float l = l_s[r];
        a.out[((i0 + r) * a.n_head + h) * hd + d] = l > 0.0f ? acc[e] / l : 0.0f;
    }
}

// ---------------------------------------------------------------------------------------------
// Register-tiled memory-efficient attention for heads of up to 128 dims: the same algorithm as
// tiled_attention_kernel (FlashAttention-2's loop, the online softmax, the same tile skipping),
// with larger query tiles and each thread computing a 4 x 4 block of a tile's scores and a
// 4 x (HD / 8) block of its output in registers, as a matrix-product kernel does, so that
// every value read from shared memory feeds several multiply-adds. The 128 threads are 16 row
// groups (rows 4 g .. 4 g + 3 of the query tile) by 8 column groups (keys 4 c .. 4 c + 3 of
// the key tile; output dims 4 c + 32 u .. + 3). Queries and keys sit transposed in shared
// memory (dims outer) so that a thread's four rows and four keys are one 16-byte load each.

template <int HD>
struct RegTile {
    static constexpr int BQ = 64;        // queries per tile
    static constexpr int BK = 32;        // keys per tile
    static constexpr int QS = BQ + 4;    // row stride of Q^T [HD][BQ]
    static constexpr int KS = BK + 4;    // row stride of K^T [HD][BK]
    static constexpr int VS = HD;        // row stride of V [BK][HD]
    static constexpr int PS = BK + 1;    // row stride of P [BQ][BK]
    static constexpr int OD = HD / 8;    // output dims per thread
    static_assert(HD % 32 == 0, "dims in groups of 32");
    static size_t floats() { return size_t(HD) * QS + size_t(HD) * KS + size_t(BK) * VS + size_t(BQ) * PS; }
};

// Doubles before the floats: the RoPE table, rounded to an even count so the floats start
// 16-byte aligned.
__host__ __device__ inline int regtile_doubles(bool rotate, int n_rot) { return ((rotate ? n_rot / 2 : 0) + 2) & ~1; }

// The key tile transposed into kt_s [HD][KS] and the value tile into v_s [BK][HD], zero past
// the cache and the head's dims, k_loads_in_flight values per thread at a time, compiled once
// per encoding (with_kv_type); keys stored before RoPE through the general per-value path.
template <int HD, bool KEYS>
__device__ __forceinline__ void regtile_load_side(const AttentionArgs &a, int64_t j0, int w, int kvh,
                                                  const double *inv_freq, float *dst)
{
    using T = RegTile<HD>;
    constexpr int total = T::BK * HD, per = k_loads_in_flight;
    static_assert(total % (k_threads * per) == 0, "whole passes");
    const int tid = threadIdx.x, hd = a.head_dim;
    // Element e: key c = e / HD, dim d = e % HD; keys go transposed, values row by row.
    auto at = [](int c, int d) { return KEYS ? d * T::KS + c : c * T::VS + d; };
    if (KEYS && a.rotate_keys) {
        for (int e = tid; e < total; e += k_threads) {
            const int c = e / HD, d = e % HD;
            dst[at(c, d)] = (c < w && d < hd) ? key_element(a, j0 + c, kvh, d, inv_freq) : 0.0f;
        }
        return;
    }
    const KvRows &r = KEYS ? a.k : a.v;
    const int64_t e0 = int64_t(kvh) * hd;
    with_kv_type(r.type, [&](auto tag) {
        constexpr int KT = decltype(tag)::value;
#pragma unroll 1
        for (int e0_pass = 0; e0_pass < total; e0_pass += k_threads * per) {
            float v[per];
#pragma unroll
            for (int k = 0; k < per; ++k) {
                const int e = e0_pass + tid + k * k_threads, c = e / HD, d = e % HD;
                v[k] = (c < w && d < hd) ? kv_load_t<KT>(r, j0 + c, e0 + d) : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < per; ++k) {
                const int e = e0_pass + tid + k * k_threads, c = e / HD, d = e % HD;
                dst[at(c, d)] = v[k];
            }
        }
    });
}

template <int HD>
__device__ __forceinline__ void regtile_load(const AttentionArgs &a, int64_t j0, int w, int kvh,
                                             const double *inv_freq, float *kt_s, float *v_s)
{
    regtile_load_side<HD, true>(a, j0, w, kvh, inv_freq, kt_s);
    regtile_load_side<HD, false>(a, j0, w, kvh, inv_freq, v_s);
}

template <int HD>
__global__ void __launch_bounds__(k_threads)
    regtile_attention_kernel(AttentionArgs a, bool skip_masked, unsigned long long *tile_counter)
{
    using T = RegTile<HD>;
    constexpr int BQ = T::BQ, BK = T::BK, QS = T::QS, KS = T::KS, VS = T::VS, PS = T::PS, OD = T::OD;
    extern __shared__ double smem[];
    const int hd = a.head_dim;
    double *inv_freq = smem;
    float *qt_s = reinterpret_cast<float *>(smem + regtile_doubles(a.rotate_keys, a.n_rot));
    float *kt_s = qt_s + HD * QS;
    float *v_s = kt_s + HD * KS;
    float *p_s = v_s + BK * VS;

    const int h = int(blockIdx.x % unsigned(a.n_head));
    const int64_t qb = blockIdx.x / unsigned(a.n_head);
    const int kvh = h / (a.n_head / a.n_head_kv);
    const int64_t i0 = qb * BQ;
    const int bq = int(a.n_q - i0 < BQ ? a.n_q - i0 : BQ);
    const int64_t first_pos = a.q_pos0 + i0, last_pos = first_pos + bq - 1;
    const int tid = threadIdx.x, lane = tid % 32;
    const int rg = tid / 8, cg = tid % 8;

    if (a.rotate_keys)
        for (int i = tid; i < a.n_rot / 2; i += blockDim.x)
            inv_freq[i] = a.inv_freq[i];
    // Q^T, zero beyond the head's dims and the tile's queries. A warp covers 32 consecutive dims
    // of one query (HD is a multiple of 32), which is one Q8_0 block when the keys are blocks
    // stored rotated: the query is then rounded as round_query_blocks rounds it.
    const bool round_q = !a.rotate_keys && (a.k.type == k_kv_q8_0 || a.k.type == k_kv_q4_0);
    for (int e = tid; e < BQ * HD; e += blockDim.x) {
        const int r = e / HD, d = e % HD;
        float x = (r < bq && d < hd) ? a.q[((i0 + r) * a.n_head + h) * hd + d] : 0.0f;
        if (round_q) {
            const float amax = warp_max(fabsf(x));
            const float dq = amax / 127.0f;
            const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
            x = dq * roundf(x * id);
        }
        qt_s[d * QS + r] = x;
    }
    (void)lane;

    float o[4][OD];
    float m[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < OD; ++k)
            o[i][k] = 0.0f;
    }
    __syncthreads();

    const int64_t n_tiles = (a.n_kv + BK - 1) / BK;
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t j0 = t * BK;
        const int w = int(a.n_kv - j0 < BK ? a.n_kv - j0 : BK);
        if (skip_masked && j0 > last_pos)
            break;
        if (skip_masked && a.window > 0 && j0 + w - 1 <= first_pos - a.window)
            continue;
        if (tile_counter && tid == 0)
            atomicAdd(tile_counter, 1ull);

        regtile_load<HD>(a, j0, w, kvh, inv_freq, kt_s, v_s);
        __syncthreads();

        // Scores of rows 4 rg + i and keys 4 cg + k.
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int k = 0; k < 4; ++k)
                s[i][k] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < HD; ++d) {
            const float4 qv = *reinterpret_cast<const float4 *>(qt_s + d * QS + rg * 4);
            const float4 kv = *reinterpret_cast<const float4 *>(kt_s + d * KS + cg * 4);
            const float qa[4] = {qv.x, qv.y, qv.z, qv.w}, ka[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    s[i][k] += qa[i] * ka[k];
        }

        // Online softmax per row; the eight threads of a row group (consecutive lanes) hold
        // its 32 keys.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = rg * 4 + i;
            float mx = -INFINITY;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int c = cg * 4 + k;
                s[i][k] = (r < bq && c < w && key_visible(a, first_pos + r, j0 + c)) ? score_of(a, s[i][k])
                                                                                   : -INFINITY;
                mx = fmaxf(mx, s[i][k]);
            }
#pragma unroll
            for (int off = 1; off < 8; off <<= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m[i], mx);
            float alpha = 1.0f, sum = 0.0f;
            if (m_new != -INFINITY) {
                alpha = expf(m[i] - m_new);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    s[i][k] = expf(s[i][k] - m_new);
                    sum += s[i][k];
                }
            } else {
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    s[i][k] = 0.0f;
            }
#pragma unroll
            for (int off = 1; off < 8; off <<= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l[i] = l[i] * alpha + sum;
            m[i] = m_new;
#pragma unroll
            for (int k = 0; k < OD; ++k)
                o[i][k] *= alpha;
#pragma unroll
            for (int k = 0; k < 4; ++k)
                p_s[r * PS + cg * 4 + k] = s[i][k];
        }
        __syncthreads();

        // o += P V over the tile's keys (zero rows past the cache add nothing).
#pragma unroll 4
        for (int c = 0; c < BK; ++c) {
            float p[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                p[i] = p_s[(rg * 4 + i) * PS + c];
#pragma unroll
            for (int u = 0; u < HD / 32; ++u) {
                const float4 vv = *reinterpret_cast<const float4 *>(v_s + c * VS + cg * 4 + 32 * u);
                const float va[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int k = 0; k < 4; ++k)
                        o[i][u * 4 + k] += p[i] * va[k];
            }
        }
        __syncthreads(); // the tile's K, V and P are read before the next tile replaces them
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = rg * 4 + i;
        if (r >= bq)
            continue;
        float *out = a.out + ((i0 + r) * a.n_head + h) * hd;
#pragma unroll
        for (int u = 0; u < HD / 32; ++u)
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int d = cg * 4 + 32 * u + k;
                if (d < hd)
                    out[d] = l[i] > 0.0f ? o[i][u * 4 + k] / l[i] : 0.0f;
            }
    }
}

// ---------------------------------------------------------------------------------------------
// Split-KV decoding.

// Block x: row = i * n_head + h; block y: the key range [y * chunk, (y + 1) * chunk) cut to the
// keys the query sees. Writes the range's max m, sum l and unnormalised output. Decoding reads
// few rows from a long cache, so the work is spread over many small blocks, and inside a block
// every warp has independent loads in flight: scores take four keys per warp at a time (lanes
// over the dims), values one key per warp with each lane holding its dims in registers, the
// warps' sums added at the end.
constexpr int k_split_keys_per_warp = 4;
constexpr int k_split_dims_per_pass = 256; // dims a pass over the values keeps in registers

__global__ void __launch_bounds__(k_threads)
    split_partial_kernel(AttentionArgs a, int64_t chunk, float *part_m, float *part_l, float *part_acc)
{
    extern __shared__ double smem[];
    __shared__ float red[32];
    constexpr int n_warps = k_threads / 32;
    constexpr int dims_per_lane = k_split_dims_per_pass / 32;
    const int hd = a.head_dim;
    double *inv_freq = smem;
    float *q_s = reinterpret_cast<float *>(smem + (a.rotate_keys ? a.n_rot / 2 : 0) + 1);
    float *s_s = q_s + hd;    // [chunk]
    float *o_s = s_s + chunk; // [n_warps, min(hd, k_split_dims_per_pass)]

    const int64_t row = blockIdx.x;
    const int h = int(row % a.n_head);
    const int64_t i = row / a.n_head;
    const int kvh = h / (a.n_head / a.n_head_kv);
    const int n_splits = int(gridDim.y);
    const int64_t part = row * n_splits + blockIdx.y;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

    // The range's keys that the query sees: [j_begin, j_end).
    const int64_t range_begin = int64_t(blockIdx.y) * chunk;
    const int64_t vis_begin = visible_begin(a, i);
    const int64_t j_begin = range_begin > vis_begin ? range_begin : vis_begin;
    const int64_t j_end_all = range_begin + chunk;
    const int64_t n_vis = visible_end(a, i);
    const int64_t j_end = j_end_all < n_vis ? j_end_all : n_vis;
    const int count = int(j_end > j_begin ? j_end - j_begin : 0);

    if (a.rotate_keys)
        for (int k = tid; k < a.n_rot / 2; k += blockDim.x)
            inv_freq[k] = a.inv_freq[k];
    for (int d = tid; d < hd; d += blockDim.x)
        q_s[d] = a.q[(i * a.n_head + h) * hd + d];
    __syncthreads();
    round_query_blocks(a, q_s, hd);
    __syncthreads();

    // Scores: k_split_keys_per_warp keys per warp at a time, lanes over the dims.
    for (int c0 = warp * k_split_keys_per_warp; c0 < count; c0 += n_warps * k_split_keys_per_warp) {
        float dot[k_split_keys_per_warp];
#pragma unroll
        for (int u = 0; u < k_split_keys_per_warp; ++u) {
            dot[u] = 0.0f;
            if (c0 + u < count)
                for (int d = lane; d < hd; d += 32)
                    dot[u] += q_s[d] * key_element(a, j_begin + c0 + u, kvh, d, inv_freq);
        }
#pragma unroll
        for (int u = 0; u < k_split_keys_per_warp; ++u) {
            const float s = warp_sum(dot[u]);
            if (lane == 0 && c0 + u < count)
                s_s[c0 + u] = score_of(a, s);
        }
    }
    __syncthreads();

    float m = -INFINITY;
    for (int c = tid; c < count; c += blockDim.x)
        m = fmaxf(m, s_s[c]);
    m = block_max(m, red);
    float l = 0.0f;
    if (count > 0) {
        for (int c = tid; c < count; c += blockDim.x) {
            const float p = expf(s_s[c] - m);
            s_s[c] = p;
            l += p;
        }
    }
    l = block_sum(l, red); // synchronises: the probabilities are visible to every thread

    // Values: warp w takes keys w, w + n_warps, ...; lane holds dims lane + 32 k of the pass.
    for (int d0 = 0; d0 < hd; d0 += k_split_dims_per_pass) {
        const int pass = hd - d0 < k_split_dims_per_pass ? hd - d0 : k_split_dims_per_pass;
        float acc[dims_per_lane];
#pragma unroll
        for (int k = 0; k < dims_per_lane; ++k)
            acc[k] = 0.0f;
#pragma unroll 2
        for (int c = warp; c < count; c += n_warps) {
            const float p = s_s[c];
            if (p != 0.0f) { // the same for the whole warp
#pragma unroll
                for (int k = 0; k < dims_per_lane; ++k) {
                    const int d = lane + 32 * k;
                    if (d < pass)
                        acc[k] += p * value_element(a, j_begin + c, kvh, d0 + d);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < dims_per_lane; ++k) {
            const int d = lane + 32 * k;
            if (d < pass)
                o_s[warp * pass + d] = acc[k];
        }
        __syncthreads();
        for (int d = tid; d < pass; d += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < n_warps; ++w)
                o += o_s[w * pass + d];
            part_acc[part * hd + d0 + d] = o;
        }
        __syncthreads(); // o_s is reused by the next pass
    }
    if (tid == 0) {
        part_m[part] = m;
        part_l[part] = l;
    }
}

// Split-KV decoding with the query heads of one KV head together (grouped-query attention):
// block x = (query i, KV head kvh), block y = the key range. The range's keys and then its
// values pass through shared memory in tiles of k_group_tile, loaded by every thread at once,
// and each is used by all n_head / n_head_kv query heads of the group, so the cache is read
// once per KV head instead of once per query head. Partials as split_partial_kernel's.
constexpr int k_group_tile = 32;
constexpr int k_group_outputs = 8; // (head, dim) outputs per thread: group * head_dim <= 1024

// Rows j0 .. j0 + w - 1 (keys rotated as attention sees them, or values) of KV head kvh into
// t_s (row stride ts). Each warp takes a group of rows at a time, lanes over the dims: the
// head's dims in slots of 32 (rounded up to 1, 2, 4 or 8 slots), k_loads_in_flight (row, slot)
// pairs per lane, all loaded before any is stored, compiled once per encoding (with_kv_type).
// Keys stored before RoPE take the general per-value path.
template <bool KEYS>
__device__ __forceinline__ void load_rows(const AttentionArgs &a, int64_t j0, int w, int kvh,
                                          const double *inv_freq, float *t_s, int ts)
{
    constexpr int n_warps = k_threads / 32, per = k_loads_in_flight;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, hd = a.head_dim;
    if (KEYS && a.rotate_keys) {
        for (int c = warp; c < w; c += n_warps)
            for (int d = lane; d < hd; d += 32)
                t_s[c * ts + d] = key_element(a, j0 + c, kvh, d, inv_freq);
        return;
    }
    const int shift = hd <= 32 ? 0 : hd <= 64 ? 1 : hd <= 128 ? 2 : 3; // log2 of the slots
    const int rows = per >> shift;                                      // rows per warp and pass
    const KvRows &r = KEYS ? a.k : a.v;
    const int64_t e0 = int64_t(kvh) * hd;
    with_kv_type(r.type, [&](auto tag) {
        constexpr int T = decltype(tag)::value;
#pragma unroll 1
        for (int c = warp * rows; c < w; c += n_warps * rows) {
            float v[per];
#pragma unroll
            for (int it = 0; it < per; ++it) {
                const int u = it >> shift, d = lane + 32 * (it & ((1 << shift) - 1));
                v[it] = (c + u < w && d < hd) ? kv_load_t<T>(r, j0 + c + u, e0 + d) : 0.0f;
            }
#pragma unroll
            for (int it = 0; it < per; ++it) {
                const int u = it >> shift, d = lane + 32 * (it & ((1 << shift) - 1));
                if (c + u < w && d < hd)
                    t_s[(c + u) * ts + d] = v[it];
            }
        }
    });
}

__global__ void __launch_bounds__(k_threads, 4)
    split_group_kernel(AttentionArgs a, int64_t chunk, float *part_m, float *part_l, float *part_acc)
{
    extern __shared__ double smem[];
    constexpr int n_warps = k_threads / 32;
    const int hd = a.head_dim, group = a.n_head / a.n_head_kv, ts = hd + 1;
    double *inv_freq = smem;
    float *q_s = reinterpret_cast<float *>(smem + (a.rotate_keys ? a.n_rot / 2 : 0) + 1); // [group][hd]
    float *t_s = q_s + group * hd;              // [k_group_tile][hd + 1]: keys, then values
    float *s_s = t_s + k_group_tile * ts;       // [group][chunk]

    const int64_t i = blockIdx.x / unsigned(a.n_head_kv);
    const int kvh = int(blockIdx.x % unsigned(a.n_head_kv));
    const int n_splits = int(gridDim.y);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

    const int64_t range_begin = int64_t(blockIdx.y) * chunk;
    const int64_t vis_begin = visible_begin(a, i);
    const int64_t j_begin = range_begin > vis_begin ? range_begin : vis_begin;
    const int64_t j_end_all = range_begin + chunk;
    const int64_t n_vis = visible_end(a, i);
    const int64_t j_end = j_end_all < n_vis ? j_end_all : n_vis;
    const int count = int(j_end > j_begin ? j_end - j_begin : 0);

    if (a.rotate_keys)
        for (int k = tid; k < a.n_rot / 2; k += blockDim.x)
            inv_freq[k] = a.inv_freq[k];
    for (int e = tid; e < group * hd; e += blockDim.x) {
        const int g = e / hd, d = e % hd;
        q_s[e] = a.q[(i * a.n_head + kvh * group + g) * hd + d];
    }
    __syncthreads();
    round_query_blocks(a, q_s, group * hd); // rows of whole blocks: each head's blocks as alone
    __syncthreads();

    // Scores of every head of the group against the range's keys, a tile at a time.
    for (int c0 = 0; c0 < count; c0 += k_group_tile) {
        const int w = count - c0 < k_group_tile ? count - c0 : k_group_tile;
        load_rows<true>(a, j_begin + c0, w, kvh, inv_freq, t_s, ts);
        __syncthreads();
        for (int e = tid; e < group * k_group_tile; e += blockDim.x) {
            const int g = e / k_group_tile, c = e % k_group_tile;
            if (c < w) {
                const float *qr = q_s + g * hd;
                const float *kc = t_s + c * ts;
                float dot = 0.0f;
                for (int d = 0; d < hd; ++d)
                    dot += qr[d] * kc[d];
                s_s[g * chunk + c0 + c] = score_of(a, dot);
            }
        }
        __syncthreads();
    }

    // Softmax statistics per head (a warp each); the scores become e^{s - m}.
    for (int g = warp; g < group; g += n_warps) {
        float *sg = s_s + g * chunk;
        float m = -INFINITY;
        for (int c = lane; c < count; c += 32)
            m = fmaxf(m, sg[c]);
        m = warp_max(m);
        float l = 0.0f;
        if (count > 0)
            for (int c = lane; c < count; c += 32) {
                const float p = expf(sg[c] - m);
                sg[c] = p;
                l += p;
            }
        l = warp_sum(l);
        if (lane == 0) {
            const int64_t part = (i * a.n_head + kvh * group + g) * n_splits + blockIdx.y;
            part_m[part] = m;
            part_l[part] = l;
        }
    }
    __syncthreads();

    // Values: thread outputs e = tid + k * k_threads over (head, dim).
    float acc[k_group_outputs];
#pragma unroll
    for (int k = 0; k < k_group_outputs; ++k)
        acc[k] = 0.0f;
    for (int c0 = 0; c0 < count; c0 += k_group_tile) {
        const int w = count - c0 < k_group_tile ? count - c0 : k_group_tile;
        __syncthreads(); // the previous tile has been used
        load_rows<false>(a, j_begin + c0, w, kvh, inv_freq, t_s, ts);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < k_group_outputs; ++k) {
            const int e = tid + k * k_threads;
            if (e < group * hd) {
                const int g = e / hd, d = e % hd;
                const float *pg = s_s + g * chunk + c0;
                float o = acc[k];
                for (int c = 0; c < w; ++c)
                    o += pg[c] * t_s[c * ts + d];
                acc[k] = o;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < k_group_outputs; ++k) {
        const int e = tid + k * k_threads;
        if (e < group * hd) {
            const int g = e / hd, d = e % hd;
            const int64_t part = (i * a.n_head + kvh * group + g) * n_splits + blockIdx.y;
            part_acc[part * hd + d] = acc[k];
        }
    }
}

// Shared memory of split_group_kernel, or 0 when the grouped kernel does not apply (too many
// outputs per block, or ranges too long for shared memory).
size_t split_group_smem(const AttentionArgs &a, int64_t chunk)
{
    const int64_t group = a.n_head / a.n_head_kv;
    if (group * a.head_dim > int64_t(k_group_outputs) * k_threads)
        return 0;
    const size_t bytes = size_t((a.rotate_keys ? a.n_rot / 2 : 0) + 1) * sizeof(double) +
                         size_t(group * a.head_dim + k_group_tile * (a.head_dim + 1) + group * chunk) * sizeof(float);
    return bytes <= 96 * 1024 ? bytes : 0;
}

// One block per row: out = sum_s acc_s e^{m_s - M} / sum_s l_s e^{m_s - M}, M = max_s m_s. The
// weights e^{m_s - M} of up to k_combine_stage ranges at a time are computed once into shared
// memory, then every thread adds its dims over them.
constexpr int k_combine_stage = 256;

__global__ void __launch_bounds__(k_threads)
    split_combine_kernel(AttentionArgs a, int n_splits, const float *part_m, const float *part_l,
                         const float *part_acc)
{
    __shared__ float red[32];
    __shared__ float w_s[k_combine_stage];
    const int64_t row = blockIdx.x;
    const int hd = a.head_dim;
    const int tid = threadIdx.x;
    const float *pm = part_m + row * n_splits;
    const float *pl = part_l + row * n_splits;
    float M = -INFINITY;
    for (int s = tid; s < n_splits; s += blockDim.x)
        M = fmaxf(M, pm[s]);
    M = block_max(M, red);
    float L = 0.0f;
    if (M != -INFINITY)
        for (int s = tid; s < n_splits; s += blockDim.x)
            if (pm[s] != -INFINITY)
                L += pl[s] * expf(pm[s] - M);
    L = block_sum(L, red);
    // row = i * n_head + h is also the output row of [n_q, n_head, head_dim].
    float *out = a.out + row * hd;
    for (int d0 = 0; d0 < hd; d0 += blockDim.x) {
        const int d = d0 + tid;
        float o = 0.0f;
        for (int s0 = 0; s0 < n_splits; s0 += k_combine_stage) {
            const int n = n_splits - s0 < k_combine_stage ? n_splits - s0 : k_combine_stage;
            __syncthreads(); // the last stage's weights have been used
            for (int s = tid; s < n; s += blockDim.x) {
                const float ms = pm[s0 + s];
                w_s[s] = (M != -INFINITY && ms != -INFINITY) ? expf(ms - M) : 0.0f;
            }
            __syncthreads();
            if (d < hd && L > 0.0f)
                for (int s = 0; s < n; ++s) {
                    const float w = w_s[s];
                    if (w != 0.0f)
                        o += part_acc[(row * n_splits + s0 + s) * hd + d] * w;
                }
        }
        if (d < hd)
            out[d] = L > 0.0f ? o / L : 0.0f;
    }
}

size_t align_up(size_t n) { return (n + 255) & ~size_t(255); }

bool valid(const AttentionArgs &a)
{
    if (a.n_head <= 0 || a.n_head_kv <= 0 || a.head_dim <= 0 || a.n_head % a.n_head_kv != 0)
        return false;
    if (a.n_q < 0 || a.n_kv < 0 || a.q_pos0 < 0 || a.window < 0 || !(a.scale > 0.0f) || !(a.softcap >= 0.0f))
        return false;
    for (const KvRows *r : {&a.k, &a.v})
        if (!kv_type_valid(r->type) || (kv_type_blocked(r->type) && a.head_dim % k_kv_block != 0) ||
            r->row_bytes != kv_row_bytes(r->type, int64_t(a.n_head_kv) * a.head_dim))
            return false;
    if (a.rotate_keys && (a.n_rot < 0 || a.n_rot % 2 != 0 || a.n_rot > a.head_dim || (a.n_rot > 0 && !a.inv_freq)))
        return false;
    return true;
}

// An empty cache: every row sees nothing and gets zeros.
cudaError_t zero_output(const AttentionArgs &a, cudaStream_t stream)
{
    return cudaMemsetAsync(a.out, 0, size_t(a.n_q) * a.n_head * a.head_dim * sizeof(float), stream);
}

} // namespace

size_t attention_naive_scratch(const AttentionArgs &a, bool causal_flash)
{
    const size_t scores = align_up(size_t(a.n_head) * size_t(a.n_q) * size_t(a.n_kv) * sizeof(float));
    const size_t mask = causal_flash ? 0 : align_up(size_t(a.n_q) * size_t(a.n_kv) * sizeof(float));
    const size_t keys = a.rotate_keys ? align_up(size_t(a.n_kv) * a.n_head_kv * a.head_dim * sizeof(float)) : 0;
    return scores + mask + keys;
}

cudaError_t launch_attention_naive(const AttentionArgs &a, bool causal_flash, void *scratch, cudaStream_t stream)
{
    if (!valid(a))
        return cudaErrorInvalidValue;
    if (a.n_q == 0)
        return cudaSuccess;
    if (a.n_kv == 0)
        return zero_output(a, stream);
    const int64_t rows = int64_t(a.n_head) * a.n_q;
    const int64_t key_blocks = (a.n_kv + k_threads - 1) / k_threads;
    if (rows > 2147483647 || key_blocks > 65535)
        return cudaErrorInvalidValue;
    auto *base = static_cast<char *>(scratch);
    float *scores = reinterpret_cast<float *>(base);
    base += align_up(size_t(rows) * size_t(a.n_kv) * sizeof(float));
    float *mask = nullptr;
    if (!causal_flash) {
        mask = reinterpret_cast<float *>(base);
        base += align_up(size_t(a.n_q) * size_t(a.n_kv) * sizeof(float));
    }
    KvRows keys = a.k;
    if (a.rotate_keys) {
        // The whole cache rotated once into floats, as the CPU's plain attention does.
        float *rotated = reinterpret_cast<float *>(base);
        const int64_t ekv = int64_t(a.n_head_kv) * a.head_dim;
        cudaError_t err = launch_rope_keys(a.k, rotated, 0, a.n_kv, a.n_head_kv, a.head_dim, a.n_rot, a.rope_style,
                                           a.pos_scale, a.inv_freq, stream);
        if (err != cudaSuccess)
            return err;
        keys = KvRows{rotated, k_kv_f32, ekv * 4};
    }
    if (mask) {
        int64_t blocks = (a.n_q * a.n_kv + 255) / 256;
        causal_mask_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(a, mask);
        if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
            return err;
    }
    naive_scores_kernel<<<dim3(unsigned(rows), unsigned(key_blocks)), k_threads, size_t(a.head_dim) * sizeof(float),
                          stream>>>(a, keys, mask, scores);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
        return err;
    naive_softmax_kernel<<<unsigned(rows), 256, 0, stream>>>(a, !causal_flash, scores);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
        return err;
    naive_values_kernel<<<unsigned(rows), k_threads, 0, stream>>>(a, !causal_flash, scores);
    return cudaGetLastError();
}

namespace {

template <int HD>
cudaError_t launch_regtile(const AttentionArgs &a, bool skip_masked_tiles, unsigned long long *tile_counter,
                           cudaStream_t stream)
{
    using T = RegTile<HD>;
    const int64_t blocks = ((a.n_q + T::BQ - 1) / T::BQ) * a.n_head;
    if (blocks > 2147483647)
        return cudaErrorInvalidValue;
    const size_t smem = size_t(regtile_doubles(a.rotate_keys, a.n_rot)) * sizeof(double) + T::floats() * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(regtile_attention_kernel<HD>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (err != cudaSuccess)
            return err;
    }
    regtile_attention_kernel<HD><<<unsigned(blocks), k_threads, smem, stream>>>(a, skip_masked_tiles, tile_counter);
    return cudaGetLastError();
}

} // namespace

void attention_tiled_shape(int head_dim, int *q_tile, int *k_tile)
{
    if (head_dim <= k_attn_regtile_max_head_dim) {
        *q_tile = RegTile<32>::BQ;
        *k_tile = RegTile<32>::BK;
    } else {
        *q_tile = k_attn_q_tile;
        *k_tile = k_attn_k_tile;
    }
}

cudaError_t launch_attention_tiled(const AttentionArgs &a, bool skip_masked_tiles, unsigned long long *tile_counter,
                                   cudaStream_t stream)
{
    if (!valid(a) || a.head_dim > k_attn_max_head_dim)
        return cudaErrorInvalidValue;
    if (a.n_q == 0)
        return cudaSuccess;
    if (a.n_kv == 0)
        return zero_output(a, stream);
    if (a.head_dim <= 32)
        return launch_regtile<32>(a, skip_masked_tiles, tile_counter, stream);
    if (a.head_dim <= 64)
        return launch_regtile<64>(a, skip_masked_tiles, tile_counter, stream);
    if (a.head_dim <= k_attn_regtile_max_head_dim)
        return launch_regtile<128>(a, skip_masked_tiles, tile_counter, stream);
    const int64_t blocks = ((a.n_q + BQ - 1) / BQ) * a.n_head;
    if (blocks > 2147483647)
        return cudaErrorInvalidValue;
    const size_t smem = tiled_smem_bytes(a.head_dim, a.rotate_keys ? a.n_rot : 0);
    if (smem > 48 * 1024) {
        // Above the default limit the kernel has to opt in (up to the device's maximum).
        cudaError_t err =
            cudaFuncSetAttribute(tiled_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (err != cudaSuccess)
            return err;
    }
    tiled_attention_kernel<<<unsigned(blocks), k_threads, smem, stream>>>(a, skip_masked_tiles, tile_counter);
    return cudaGetLastError();
}

int attention_split_default(int64_t n_kv)
{
    const int64_t n = (n_kv + 255) / 256;
    return int(n < 1 ? 1 : (n > 1024 ? 1024 : n));
}

size_t attention_split_scratch(const AttentionArgs &a, int n_splits)
{
    const size_t parts = size_t(a.n_q) * size_t(a.n_head) * size_t(n_splits > 0 ? n_splits : 1);
    return align_up(parts * sizeof(float)) * 2 + align_up(parts * a.head_dim * sizeof(float));
}

cudaError_t launch_attention_split(const AttentionArgs &a, int n_splits, void *scratch, cudaStream_t stream)
{
    if (!valid(a) || n_splits <= 0 || n_splits > 65535)
        return cudaErrorInvalidValue;
    if (a.n_q == 0)
        return cudaSuccess;
    if (a.n_kv == 0)
        return zero_output(a, stream);
    const int64_t rows = a.n_q * a.n_head;
    const int64_t chunk = (a.n_kv + n_splits - 1) / n_splits;
    if (rows > 2147483647 || chunk > k_attn_split_max_chunk)
        return cudaErrorInvalidValue;
    const size_t parts = size_t(rows) * size_t(n_splits);
    auto *base = static_cast<char *>(scratch);
    float *part_m = reinterpret_cast<float *>(base);
    float *part_l = reinterpret_cast<float *>(base + align_up(parts * sizeof(float)));
    float *part_acc = reinterpret_cast<float *>(base + 2 * align_up(parts * sizeof(float)));
    const size_t pass = size_t(a.head_dim < k_split_dims_per_pass ? a.head_dim : k_split_dims_per_pass);
    const size_t smem = size_t((a.rotate_keys ? a.n_rot / 2 : 0) + 1) * sizeof(double) +
                        (size_t(a.head_dim) + size_t(chunk) + size_t(k_threads / 32) * pass) * sizeof(float);
    if (const size_t gsmem = split_group_smem(a, chunk); gsmem > 0 && a.n_q * a.n_head_kv <= 2147483647) {
        if (gsmem > 48 * 1024) {
            cudaError_t err =
                cudaFuncSetAttribute(split_group_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(gsmem));
            if (err != cudaSuccess)
                return err;
        }
        split_group_kernel<<<dim3(unsigned(a.n_q * a.n_head_kv), unsigned(n_splits)), k_threads, gsmem, stream>>>(
            a, chunk, part_m, part_l, part_acc);
    } else {
        if (smem > 48 * 1024) {
            cudaError_t err =
                cudaFuncSetAttribute(split_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
            if (err != cudaSuccess)
                return err;
        }
        split_partial_kernel<<<dim3(unsigned(rows), unsigned(n_splits)), k_threads, smem, stream>>>(
            a, chunk, part_m, part_l, part_acc);
    }
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
        return err;
    split_combine_kernel<<<unsigned(rows), k_threads, 0, stream>>>(a, n_splits, part_m, part_l, part_acc);
    return cudaGetLastError();
}

} // namespace longscope::cuda
