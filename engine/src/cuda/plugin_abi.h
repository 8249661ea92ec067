// The C interface between the engine and the CUDA plugin (liblongscope-cuda.so), resolved with
// dlsym so nothing in the engine links the CUDA runtime or the driver.
#pragma once

#include <cstddef>
#include <cstdint>

// 2: contexts, device buffers and the forward-pass ops.
// 3: device-to-device copies and KV caches on the device (concat, static, vmm).
// 4: the operations of the qwen2, qwen3, gemma2/3 and phi3 families (RMSNorm weight offset,
//    GeGLU, scale, soft-capping, bias); RoPE over frequency tables the engine computes (every
//    scaling method) with positions that may stand still (a context shift's rotation);
//    attention with a score scale, soft-capping and a sliding window over keys and values
//    stored as F32, F16, Q8_0 or Q4_0 rows; KV caches whose keys and values have rows of their
//    own sizes; conversion of rows between those types.
// 5: fused ops for a decode step's launches: products of one activation row with up to four
//    matrices, RoPE of queries and keys together, a residual add with the next RMSNorm, a step's
//    keys and values stored together.
#define LONGSCOPE_CUDA_ABI_VERSION 5

extern "C" {

struct LongscopeCudaDevice {
    char name[256];
    uint64_t total_memory;
    uint64_t free_memory;
    int compute_major;
    int compute_minor;
};

int longscope_cuda_abi_version();

// Fills up to `max` devices and returns how many there are (0 with `reason` filled when none
// can be used: no driver, no device, driver too old...).
int longscope_cuda_probe(LongscopeCudaDevice *devices, int max, char *reason, size_t reason_len);

// Runs RMSNorm of `rows` rows of `n` floats on device `device` and copies the result to `out`
// (a self-test of the kernel build and the device path). Returns 0, or a CUDA error code with
// `reason` filled.
int longscope_cuda_rmsnorm_selftest(int device, const float *x, const float *weight, float *out, int rows, int n,
                                    float eps, char *reason, size_t reason_len);

// ---------------------------------------------------------------------------------------------
// Contexts, buffers and ops (ABI 2).
//
// A context is one device with its own stream and cuBLAS handle. Every function below returns 0
// on success; otherwise a nonzero code (a cudaError_t value, LONGSCOPE_CUDA_ERR_CUBLAS for a
// cuBLAS failure, LONGSCOPE_CUDA_ERR_ARGUMENT for an invalid argument) and
// longscope_cuda_error(ctx) says what failed and why. Nothing aborts the process.
//
// Pointers named "device" are device memory from longscope_cuda_alloc. Ops are queued on the
// context's stream and return without waiting for the device; an error the device meets while
// running them surfaces at the next longscope_cuda_synchronize or download. Uploads and
// downloads wait for the copy (and so for everything queued before it).

#define LONGSCOPE_CUDA_ERR_ARGUMENT (-1)
#define LONGSCOPE_CUDA_ERR_CUBLAS (-2)

// Element types of device weights.
#define LONGSCOPE_CUDA_F32 0
#define LONGSCOPE_CUDA_F16 1
#define LONGSCOPE_CUDA_BF16 2

// RoPE pair layouts, numbered as longscope::RopeStyle.
#define LONGSCOPE_CUDA_ROPE_INTERLEAVED 0 // pairs (2i, 2i+1): GPT-J, original LLaMA
#define LONGSCOPE_CUDA_ROPE_ROTATE_HALF 1 // pairs (i, i + n_rot/2): GPT-NeoX, Hugging Face

// Attention algorithms.
#define LONGSCOPE_CUDA_ATTN_NAIVE 0    // score matrix, softmax, weighted sum
#define LONGSCOPE_CUDA_ATTN_TILED 1    // memory-efficient: tiles with an online softmax
#define LONGSCOPE_CUDA_ATTN_SPLIT_KV 2 // split-KV decoding: partial results, then a combine

typedef struct LongscopeCudaContext LongscopeCudaContext;

// Creates a context on `device` (cudaSetDevice, a stream, a cuBLAS handle). On failure returns
// nonzero with `reason` filled and *out null.
int longscope_cuda_context_create(int device, LongscopeCudaContext **out, char *reason, size_t reason_len);
// Waits for the stream, then frees the context and its scratch memory. Null is accepted.
void longscope_cuda_context_destroy(LongscopeCudaContext *ctx);
// The reason for the last failure on this context ("" when none); valid until the next call.
const char *longscope_cuda_error(const LongscopeCudaContext *ctx);
// Waits until everything queued on the context has run.
int longscope_cuda_synchronize(LongscopeCudaContext *ctx);
// Free and total device memory (cudaMemGetInfo), and the bytes of scratch the context holds.
int longscope_cuda_mem_info(LongscopeCudaContext *ctx, uint64_t *free_bytes, uint64_t *total_bytes,
                            uint64_t *scratch_bytes);

// Device buffers (cudaMalloc, never managed memory).
int longscope_cuda_alloc(LongscopeCudaContext *ctx, size_t bytes, void **device_ptr);
int longscope_cuda_free(LongscopeCudaContext *ctx, void *device_ptr);
int longscope_cuda_upload(LongscopeCudaContext *ctx, void *device_dst, const void *host_src, size_t bytes);
int longscope_cuda_download(LongscopeCudaContext *ctx, void *host_dst, const void *device_src, size_t bytes);
int longscope_cuda_memset(LongscopeCudaContext *ctx, void *device_dst, int value, size_t bytes);

// out[t, :] = table[tokens[t], :] as floats. table: [n_rows, n_embd] of `type`; tokens: int32
// on the device; an id outside [0, n_rows) gives zeros.
int longscope_cuda_embedding(LongscopeCudaContext *ctx, const void *table, int type, int64_t n_rows, int64_t n_embd,
                             const int32_t *tokens, int64_t n_tokens, float *out);

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * (weight_offset + weight), rows of n floats; weight:
// n floats. y may be x (per-head norms run in place).
int longscope_cuda_rmsnorm(LongscopeCudaContext *ctx, const float *x, const float *weight, float *y, int64_t rows,
                           int64_t n, float eps, float weight_offset);

// out = a + b over n floats (out may alias a or b).
int longscope_cuda_add(LongscopeCudaContext *ctx, const float *a, const float *b, float *out, int64_t n);

// out = silu(gate) * up over n floats (out may alias gate or up).
int longscope_cuda_swiglu(LongscopeCudaContext *ctx, const float *gate, const float *up, float *out, int64_t n);

// out = gelu(gate) * up over n floats, gelu with the tanh approximation (out may alias gate or up).
int longscope_cuda_geglu(LongscopeCudaContext *ctx, const float *gate, const float *up, float *out, int64_t n);

// x *= s over n floats.
int longscope_cuda_scale(LongscopeCudaContext *ctx, float *x, float s, int64_t n);

// x = cap * tanh(x / cap) over n floats (cap > 0).
int longscope_cuda_softcap(LongscopeCudaContext *ctx, float *x, float cap, int64_t n);

// x[t, i] += bias[i] for t < n_rows, i < width (x [n_rows, width], bias [width] floats).
int longscope_cuda_add_bias(LongscopeCudaContext *ctx, float *x, const float *bias, int64_t n_rows, int64_t width);

// y[t, o] = sum_i W[o, i] x[t, i]: W is n_out rows of n_in values of `type` (F32, F16, BF16),
// x [n_tokens, n_in] and y [n_tokens, n_out] floats. One token: the plugin's own kernel, float
// activations times the weights as floats, float sums. More: cuBLAS (cublasGemmEx, 32-bit float
// accumulation), with F16/BF16 weights the activations first rounded to the weight type.
int longscope_cuda_matmul(LongscopeCudaContext *ctx, const void *w, int type, int64_t n_in, int64_t n_out,
                          const float *x, float *y, int64_t n_tokens);

// Rotates in place the first n_rot dims of each head of x [n_tokens, n_heads, head_dim]. Token
// t is at positions[t] (doubles on the device) or, with positions null, at
// (pos0 + t * pos_step) * pos_scale (pos_step 1: consecutive positions; 0: every row turned by
// the same angle). Pair i turns by position * inv_freq[i]: inv_freq holds n_rot / 2 doubles on
// the device, the table the engine computes (base^(-2i/n_rot) divided by the per-dimension
// factors of YaRN, llama3 or LongRoPE; an NTK alpha is a larger base).
int longscope_cuda_rope(LongscopeCudaContext *ctx, float *x, int64_t n_tokens, int n_heads, int head_dim, int n_rot,
                        int style, const double *positions, double pos0, double pos_step, double pos_scale,
                        const double *inv_freq);

// KV row encodings, numbered as longscope::KvType: floats, IEEE halves, and ggml's Q8_0 (34 bytes
// per 32 values: f16 d, int8 q[32]; x = d q) and Q4_0 (18 bytes per 32: f16 d, 16 bytes whose
// low nibbles are values 0-15 and high nibbles 16-31; x = d (q - 8)) blocks.
#define LONGSCOPE_CUDA_KV_F32 0
#define LONGSCOPE_CUDA_KV_F16 1
#define LONGSCOPE_CUDA_KV_Q8_0 2
#define LONGSCOPE_CUDA_KV_Q4_0 3

// Copies cached keys j0 .. j0+n_keys-1 stored before RoPE (row k at src + k * src_row_bytes
// bytes, n_heads * head_dim values encoded as src_type) into dst (packed float rows) rotated
// for position j * pos_scale with the table inv_freq (as longscope_cuda_rope).
int longscope_cuda_rope_keys(LongscopeCudaContext *ctx, const void *src, int src_type, int64_t src_row_bytes,
                             float *dst, int64_t j0, int64_t n_keys, int n_heads, int head_dim, int n_rot, int style,
                             double pos_scale, const double *inv_freq);

// Re-encodes n_rows rows of n values from src_type to dst_type (rows packed on both sides):
// decoded to floats, then encoded as the CPU encodes a KV row (round to nearest even for F16;
// ggml's reference quantizers for Q8_0 and Q4_0, so the blocks are the CPU's bit for bit). The
// same type on both sides is a plain copy. Block types need n a multiple of 32. Queued.
int longscope_cuda_kv_convert(LongscopeCudaContext *ctx, const void *src, int src_type, void *dst, int dst_type,
                              int64_t n_rows, int64_t n);

// One attention call with the semantics of the CPU's AttentionProblem
// (engine/src/cpu/attention.h): query i at position p = q_pos0 + i sees keys j < n_kv with
// j <= p and, with a window, j > p - window; scores q.k * scale, soft-capped when softcap > 0,
// then softmax; grouped-query heads.
struct LongscopeCudaAttention {
    int n_head;
    int n_head_kv;
    int head_dim;
    const float *q; // [n_q, n_head, head_dim], device
    int64_t n_q;
    int64_t q_pos0;
    const void *k;  // [n_kv] rows of n_head_kv * head_dim values encoded as k_type, device
    const void *v;  // the same with v_type
    int k_type;     // LONGSCOPE_CUDA_KV_*; block types need head_dim a multiple of 32
    int v_type;
    int64_t n_kv;
    float *out;     // [n_q, n_head, head_dim], device

    float scale;    // score scale; 0: 1 / sqrt(head_dim)
    float softcap;  // scores -> softcap * tanh(scores / softcap); 0: none
    int64_t window; // sliding window (keys j > p - window); 0: all

    // Nonzero: the cache holds keys before RoPE; key j is rotated for position j * pos_scale
    // with the table inv_freq (n_rot / 2 doubles, device) as it is read.
    int rotate_keys;
    int n_rot;
    int rope_style;
    const double *inv_freq;
    double pos_scale;

    int algorithm;    // LONGSCOPE_CUDA_ATTN_*
    // NAIVE: nonzero scores only the keys up to each query's position, zero builds and adds
    // an explicit [n_q, n_kv] causal mask. TILED: nonzero skips key tiles lying entirely
    // beyond a query tile's last position, zero computes and masks them. SPLIT_KV: unused.
    int causal_flash;
    int n_splits;     // SPLIT_KV: key ranges per query; 0 chooses about 256 keys per range
    // Optional (may be null), device: TILED adds one per (query head, query tile, key tile)
    // computed.
    unsigned long long *tile_counter;
};

struct LongscopeCudaAttentionInfo {
    uint64_t scratch_bytes; // device scratch the call used (score matrix, mask, partials)
    int q_tile;             // TILED: queries per tile
    int k_tile;             // TILED: keys per tile
    int n_splits;           // SPLIT_KV: the ranges used
};

// `info` may be null.
int longscope_cuda_attention(LongscopeCudaContext *ctx, const LongscopeCudaAttention *problem,
                             LongscopeCudaAttentionInfo *info);

// out[r] = the index of the largest of the n logits of row r (lowest index on ties), int32 on
// the device; NaN entries never win.
int longscope_cuda_argmax(LongscopeCudaContext *ctx, const float *logits, int64_t n_rows, int64_t n, int32_t *out);

// ---------------------------------------------------------------------------------------------
// ABI 3: copies on the device and KV caches.

// Queues a device-to-device copy of `bytes` on the context's stream (does not wait).
int longscope_cuda_copy(LongscopeCudaContext *ctx, void *device_dst, const void *device_src, size_t bytes);

// ---------------------------------------------------------------------------------------------
// ABI 5: fused ops (each gives the results of the ops it replaces, bit for bit).

// y_m = W_m x for m < count (1 .. 4): matrices of one `type` (F32, F16, BF16) and one n_in,
// n_out[m] rows each, times one activation row x [n_in]; y_m [n_out[m]] floats. As
// longscope_cuda_matmul with one token, in one launch.
int longscope_cuda_matvec_group(LongscopeCudaContext *ctx, int type, int64_t n_in, const float *x, int count,
                                const void *const *w, const int64_t *n_out, float *const *y);

// x += residual over [rows, n] (x written back), then y = RMSNorm(x) as longscope_cuda_rmsnorm
// (y may not be residual).
int longscope_cuda_add_rmsnorm(LongscopeCudaContext *ctx, float *x, const float *residual, const float *weight,
                               float *y, int64_t rows, int64_t n, float eps, float weight_offset);

// longscope_cuda_rope of two tensors of the same n_tokens tokens (queries with n_heads0 heads,
// keys with n_heads1) at positions (pos0 + t) * pos_scale, in one launch.
int longscope_cuda_rope_pair(LongscopeCudaContext *ctx, float *x0, int n_heads0, float *x1, int n_heads1,
                             int64_t n_tokens, int head_dim, int n_rot, int style, double pos0, double pos_scale,
                             const double *inv_freq);

// Stores a step's keys and values: n_rows packed float rows of n values from k and v into
// k_dst as k_type and v_dst as v_type (LONGSCOPE_CUDA_KV_*), as two longscope_cuda_kv_convert
// calls from F32 would.
int longscope_cuda_kv_store(LongscopeCudaContext *ctx, const float *k, void *k_dst, int k_type, const float *v,
                            void *v_dst, int v_type, int64_t n_rows, int64_t n);

// KV cache modes on the device (numbered as longscope::KvMode; "none" keeps no cache).
#define LONGSCOPE_CUDA_KV_CONCAT 1 // a new buffer, a copy and a free each time it grows
#define LONGSCOPE_CUDA_KV_STATIC 2 // one buffer for the limit, allocated up front
#define LONGSCOPE_CUDA_KV_VMM 3    // address space for the limit, physical granules mapped as rows arrive

typedef struct LongscopeCudaKv LongscopeCudaKv;

// A cache of 2 * n_layer regions (keys and values of each layer), each of up to `limit_rows`
// rows, of key_row_bytes for keys and value_row_bytes for values (their encodings may differ).
// STATIC allocates every row now; CONCAT and VMM start empty. VMM reserves
// the address space of every region (each rounded up to the allocation granularity) with the
// driver's virtual memory management, reached through cudaGetDriverEntryPointByVersion (the
// plugin never links the driver library). On failure returns nonzero, *out null.
int longscope_cuda_kv_create(LongscopeCudaContext *ctx, int mode, int n_layer, int64_t limit_rows,
                             int64_t key_row_bytes, int64_t value_row_bytes, LongscopeCudaKv **out);
// Makes rows [0, rows) of every region writable, keeping the rows already there. CONCAT
// allocates exactly `rows`, copies the old rows on the stream and frees the old buffer
// (cudaFree waits for the device: the price of this mode); VMM maps granules up to the one
// holding row `rows - 1` and never moves a row; STATIC only checks. rows > limit is an error.
int longscope_cuda_kv_reserve(LongscopeCudaContext *ctx, LongscopeCudaKv *kv, int64_t rows);
// The keys and values of `layer` ([capacity rows, key / value row bytes], device). Valid until the next
// reserve (CONCAT moves rows; STATIC and VMM never do) or release.
int longscope_cuda_kv_layer(LongscopeCudaContext *ctx, LongscopeCudaKv *kv, int layer, void **keys, void **values);

struct LongscopeCudaKvInfo {
    int mode;
    int64_t capacity_rows;   // rows writable now in every region
    uint64_t reserved_bytes; // allocated, or address space reserved (VMM)
    uint64_t resident_bytes; // backed by device memory
    uint64_t copied_bytes;   // CONCAT: bytes copied by growth, cumulative
    uint64_t granule_bytes;  // VMM: the mapping granularity; 0 otherwise
};
int longscope_cuda_kv_info(LongscopeCudaContext *ctx, const LongscopeCudaKv *kv, LongscopeCudaKvInfo *info);
// Forgets every row: CONCAT frees its buffer, VMM unmaps and releases every granule (the
// reservation stays), STATIC keeps its buffer.
int longscope_cuda_kv_clear(LongscopeCudaContext *ctx, LongscopeCudaKv *kv);
// Waits for the stream, then frees everything the cache holds. Null is accepted.
void longscope_cuda_kv_release(LongscopeCudaContext *ctx, LongscopeCudaKv *kv);
}
