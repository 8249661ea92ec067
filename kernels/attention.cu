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
// Split-KV decoding.

// Block x: row = i * n_head + h; block y: the key range [y * chunk, (y + 1) * chunk) cut to the
// keys the query sees. Writes the range's max m, sum l and unnormalised output.
__global__ void __launch_bounds__(k_threads)
    split_partial_kernel(AttentionArgs a, int64_t chunk, float *part_m, float *part_l, float *part_acc)
{
    extern __shared__ double smem[];
    __shared__ float red[32];
    const int hd = a.head_dim;
    double *inv_freq = smem;
    float *q_s = reinterpret_cast<float *>(smem + (a.rotate_keys ? a.n_rot / 2 : 0) + 1);
    float *s_s = q_s + hd; // [chunk]

    const int64_t row = blockIdx.x;
    const int h = int(row % a.n_head);
    const int64_t i = row / a.n_head;
    const int kvh = h / (a.n_head / a.n_head_kv);
    const int n_splits = int(gridDim.y);
    const int64_t part = row * n_splits + blockIdx.y;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, n_warps = int(blockDim.x / 32);

    // The range's keys that the query sees: [j_begin, j_end).
    const int64_t range_begin = int64_t(blockIdx.y) * chunk;
    const int64_t vis_begin = visible_begin(a, i);
    const int64_t j_begin = range_begin > vis_begin ? range_begin : vis_begin;
    const int64_t j_end_all = range_begin + chunk;
    const int64_t n_vis = visible_end(a, i);
    const int64_t j_end = j_end_all < n_vis ? j_end_all : n_vis;
    const int64_t count = j_end > j_begin ? j_end - j_begin : 0;

    if (a.rotate_keys)
        for (int k = tid; k < a.n_rot / 2; k += blockDim.x)
            inv_freq[k] = a.inv_freq[k];
    for (int d = tid; d < hd; d += blockDim.x)
        q_s[d] = a.q[(i * a.n_head + h) * hd + d];
    __syncthreads();
    round_query_blocks(a, q_s, hd);
    __syncthreads();

    // One warp per key, lanes over the dims.
    for (int64_t c = warp; c < count; c += n_warps) {
        const int64_t j = j_begin + c;
        float dot = 0.0f;
        for (int d = lane; d < hd; d += 32)
            dot += q_s[d] * key_element(a, j, kvh, d, inv_freq);
        dot = warp_sum(dot);
        if (lane == 0)
            s_s[c] = score_of(a, dot);
    }
    __syncthreads();

    float m = -INFINITY;
    for (int64_t c = tid; c < count; c += blockDim.x)
        m = fmaxf(m, s_s[c]);
    m = block_max(m, red);
    float l = 0.0f;
    if (count > 0) {
        for (int64_t c = tid; c < count; c += blockDim.x) {
            const float p = expf(s_s[c] - m);
            s_s[c] = p;
            l += p;
        }
    }
    l = block_sum(l, red); // synchronises: the probabilities are visible to every thread
    for (int d = tid; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t c = 0; c < count; ++c) {
            const float p = s_s[c];
            if (p != 0.0f)
                o += p * value_element(a, j_begin + c, kvh, d);
        }
        part_acc[part * hd + d] = o;
    }
    if (tid == 0) {
        part_m[part] = m;
        part_l[part] = l;
    }
}

// One block per row: out = sum_s acc_s e^{m_s - M} / sum_s l_s e^{m_s - M}, M = max_s m_s.
__global__ void split_combine_kernel(AttentionArgs a, int n_splits, const float *part_m, const float *part_l,
                                     const float *part_acc)
{
    const int64_t row = blockIdx.x;
    const int hd = a.head_dim;
    const float *pm = part_m + row * n_splits;
    const float *pl = part_l + row * n_splits;
    float M = -INFINITY;
    for (int s = 0; s < n_splits; ++s)
        M = fmaxf(M, pm[s]);
    float L = 0.0f;
    if (M != -INFINITY)
        for (int s = 0; s < n_splits; ++s)
            if (pm[s] != -INFINITY)
                L += pl[s] * expf(pm[s] - M);
    // row = i * n_head + h is also the output row of [n_q, n_head, head_dim].
    float *out = a.out + row * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        if (L > 0.0f) {
            for (int s = 0; s < n_splits; ++s)
                if (pm[s] != -INFINITY)
                    o += part_acc[(row * n_splits + s) * hd + d] * expf(pm[s] - M);
            o /= L;
        }
        out[d] = o;
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

cudaError_t launch_attention_tiled(const AttentionArgs &a, bool skip_masked_tiles, unsigned long long *tile_counter,
                                   cudaStream_t stream)
{
    if (!valid(a) || a.head_dim > k_attn_max_head_dim)
        return cudaErrorInvalidValue;
    if (a.n_q == 0)
        return cudaSuccess;
    if (a.n_kv == 0)
        return zero_output(a, stream);
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
    const size_t smem = size_t((a.rotate_keys ? a.n_rot / 2 : 0) + 1) * sizeof(double) +
                        (size_t(a.head_dim) + size_t(chunk)) * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t err =
            cudaFuncSetAttribute(split_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (err != cudaSuccess)
            return err;
    }
    split_partial_kernel<<<dim3(unsigned(rows), unsigned(n_splits)), k_threads, smem, stream>>>(a, chunk, part_m,
                                                                                              part_l, part_acc);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
        return err;
    split_combine_kernel<<<unsigned(rows), k_threads, 0, stream>>>(a, n_splits, part_m, part_l, part_acc);
    return cudaGetLastError();
}

} // namespace longscope::cuda
