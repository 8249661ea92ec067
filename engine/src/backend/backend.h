// The interface every compute backend implements: the operations a forward pass is written
// in, on activation buffers the backend owns, and the KV cache it keeps them in. An
// architecture (arch/) writes its layer once as a sequence of these operations; the CPU
// backend (cpu/cpu_backend.h) is the reference for each, the CUDA backend
// (cuda_host/cuda_backend.h) runs the same sequence on the device. Switching backend, or
// falling back to the CPU, replaces one Backend object (runtime/session.cpp).
//
// Pointers handed out by a backend (activations, cache rows, logits before read_logits) live
// in that backend's memory: host memory for the CPU, device memory for CUDA. The forward
// pass only offsets them and passes them back; it never dereferences them.
#pragma once

#include "longscope/errors.h"
#include "longscope/model.h"
#include "longscope/settings.h"
#include "model/weights.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace longscope {

// What one forward call runs with; the session derives it from the live settings.
struct ForwardParams {
    double rope_base = 10000.0;    // base in effect now (model base, dynamic scaling, NTK alpha)
    double pos_scale = 1.0;        // linear rope scaling: positions are multiplied by this
    // Per-dimension divisors of the rotary frequencies, [n_rot / 2] (YaRN, llama3, LongRoPE;
    // empty: none): inv_freq[i] = base^(-2i/n_rot) / rope_factors[i]. Points into the caller's
    // memory for the call.
    std::span<const float> rope_factors;
    // The attention factor of YaRN and LongRoPE: q and k are both scaled by it, so the scores
    // by its square (applied through AttentionCall::scale).
    double rope_attn_factor = 1.0;
    bool keys_before_rope = false; // the cache holds unrotated keys; attention rotates them
    bool memory_efficient = false; // tiled attention with an online softmax
    bool causal_flash = false;     // causality from positions, masked tiles skipped
};

struct ForwardStats {
    uint64_t scratch_bytes = 0;    // peak activations + attention scratch of the call
    int64_t tiles_skipped = 0;
    int threads = 0;               // CPU threads the step ran on (Backend::step_threads)
};

// One sequence's KV cache on a backend, in one of the modes concat, static or vmm
// (settings.h KvMode). Per layer it holds keys and values as rows of n_embd_kv floats indexed
// by position. ensure(n) makes positions [0, n) writable, keeping the rows already there;
// the row pointers are valid until the next ensure() or clear().
class KvCache {
public:
    virtual ~KvCache() = default;

    virtual KvMode mode() const = 0;
    virtual int limit() const = 0;   // the most positions it may ever hold
    // Throws OutOfMemory (or BackendError on a device) when memory cannot be had; the cache is
    // then unchanged.
    virtual void ensure(int n_tokens) = 0;
    virtual void clear() = 0;
    // [capacity, n_embd_kv] rows of one layer, in the backend's memory, for a cache that
    // holds them as f32 (type_k() / type_v()).
    virtual float *keys(int layer) = 0;
    virtual float *values(int layer) = 0;
    // How keys and values are stored (settings.h KvType).
    virtual KvType type_k() const { return KvType::F32; }
    virtual KvType type_v() const { return KvType::F32; }
    // A context shift's move: of the first n_tokens positions, keeps [0, keep), drops
    // [keep, keep + drop) and moves the rows of [keep + drop, n_tokens) down to start at `keep`,
    // in every layer, keys and values, unchanged (the backend re-rotates keys cached after
    // RoPE: Backend::shift_cached_keys). Throws InvalidArgument for a range outside
    // [0, n_tokens) or n_tokens beyond what the cache holds.
    virtual void shift(int n_tokens, int keep, int drop) = 0;

    // Accounting for the memory ledger.
    virtual uint64_t reserved_bytes() const = 0;       // allocated or reserved address space
    virtual uint64_t resident_bytes() const = 0;       // physically backed memory
    virtual uint64_t copied_bytes() const = 0;         // bytes copied by growth, cumulative
    virtual uint64_t peak_resident_bytes() const = 0;  // including transient growth copies
};

// The checks every KvCache::shift makes: InvalidArgument unless 0 <= keep, 0 <= drop,
// keep + drop <= n_tokens <= held (the positions the cache can hold now).
inline void check_kv_shift(int n_tokens, int keep, int drop, int held)
{
    if (keep < 0 || drop < 0 || n_tokens < keep + drop || n_tokens > held)
        throw InvalidArgument("cannot shift the KV cache keeping " + std::to_string(keep) + " and dropping " +
                              std::to_string(drop) + " of " + std::to_string(n_tokens) + " tokens (it holds " +
                              std::to_string(held) + ")");
}

// Activation buffers of one forward call for n rows (tokens), in the backend's memory:
// x, xn, proj [n, n_embd]; q, attn [n, n_embd_q]; k, v [n, n_embd_kv]; gate, up [n, n_ff].
struct Activations {
    float *x = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr;
    float *attn = nullptr, *proj = nullptr, *gate = nullptr, *up = nullptr;
};

// y = w x for one weight matrix of a group sharing the same input.
struct Projection {
    const WeightView *w;
    float *y;
};

// One attention call: queries of one sequence against its cache rows of one layer.
struct AttentionCall {
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    const float *q = nullptr;  // [n_q, n_head, head_dim]
    int64_t n_q = 0;
    int64_t q_pos0 = 0;        // position of query 0
    KvCache *kv = nullptr;
    int layer = 0;
    int64_t n_kv = 0;          // keys visible (positions 0 .. n_kv - 1)
    float *out = nullptr;      // [n_q, n_head, head_dim]
    float scale = 0.0f;        // score scale; 0: 1 / sqrt(head_dim)
    float softcap = 0.0f;      // scores -> softcap * tanh(scores / softcap) before the mask; 0: none
    int64_t window = 0;        // sliding window: query at p sees keys j with p - window < j; 0: all
};

struct AttentionResult {
    uint64_t scratch_bytes = 0;
    int64_t tiles_skipped = 0;
};

struct DeviceMemoryInfo {
    uint64_t free = 0;
    uint64_t total = 0;
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual ComputeBackend kind() const = 0;
    virtual int n_threads() const = 0;
    // With memory-efficient attention a long prompt is evaluated in chunks of this many tokens,
    // so no activation buffer grows with the prompt.
    virtual int prefill_chunk() const { return 256; }

    // ---- KV cache ----------------------------------------------------------------------
    // Keys and values stored as type_k / type_v; InvalidArgument for a type the backend
    // cannot store.
    virtual std::unique_ptr<KvCache> make_kv(KvMode mode, int limit, KvType type_k, KvType type_v) = 0;
    // Copies positions [0, n_tokens) of every layer between two caches of this backend
    // (ensure()s the destination first), converting the rows where their types differ.
    virtual void copy_kv_rows(KvCache &from, KvCache &to, int n_tokens) = 0;
    // Rotates the cached keys of positions [j0, j0 + n) in every layer by RoPE with `base`
    // (positions scaled by pos_scale): forward, or with `undo` backwards.
    virtual void rotate_cached_keys(KvCache &kv, int j0, int n, double base, double pos_scale, bool undo) = 0;
    // Moves the cached keys of positions [j0, j0 + n), rotated by RoPE with `base` and the
    // per-dimension `factors` (empty: none), by `delta` positions: every row rotated by the same
    // angle, delta * pos_scale (RoPE rotations compose). What a context shift does to keys
    // cached after RoPE; the one place where a cache whose rows are not plain floats converts
    // a key row, rotates it and stores it back.
    virtual void shift_cached_keys(KvCache &kv, int j0, int n, int delta, double base, double pos_scale,
                                   std::span<const float> factors) = 0;

    // ---- the operations of a forward pass ------------------------------------------------
    // Buffers for n rows, valid until the next call. Throws OutOfMemory.
    virtual Activations activations(int64_t n_rows) = 0;
    // x[t] = row tokens[t] of the embedding table.
    virtual void embed(const WeightView &table, std::span<const int32_t> tokens, float *x) = 0;
    // out[t] = x[t] / rms(x[t]) * (weight_offset + weight), per row of width n (Gemma's
    // Hugging Face norms multiply by 1 + w). Per-head norms are rows of head_dim.
    virtual void rmsnorm(const float *x, const WeightView &weight, float *out, int64_t n_rows, int64_t n,
                         float eps, float weight_offset) = 0;
    virtual void matmul(const WeightView &w, const float *x, float *y, int64_t n_rows) = 0;
    // Several products of the same input in one pass, each exactly as matmul gives it.
    virtual void matmul_group(std::span<const Projection> outs, const float *x, int64_t n_rows) = 0;
    // Rotates the first n_rot dims of each head of x [n_rows, n_heads, head_dim] in place,
    // row t at position (pos0 + t) * params.pos_scale with params.rope_base and
    // params.rope_factors.
    virtual void rope(float *x, int64_t n_rows, int n_heads, int64_t pos0, const ForwardParams &params) = 0;
    // RoPE of a step's queries q (n_head heads) and keys k (n_head_kv heads; null: the queries
    // alone), as two rope calls give it; a backend may do both in one pass.
    virtual void rope_qk(float *q, int n_head, float *k, int n_head_kv, int64_t n_rows, int64_t pos0,
                         const ForwardParams &params)
    {
        rope(q, n_rows, n_head, pos0, params);
        if (k)
            rope(k, n_rows, n_head_kv, pos0, params);
    }
    // Writes n rows of keys and values [n, n_embd_kv] at positions pos0 .. pos0 + n - 1.
    virtual void store_kv(KvCache &kv, int layer, int64_t pos0, const float *k, const float *v, int64_t n_rows) = 0;
    // Attention as params say (plain or memory-efficient, causal flash, keys rotated while
    // loading when they are cached before RoPE).
    virtual AttentionResult attention(const AttentionCall &call, const ForwardParams &params) = 0;
    // x += y over n values (the residual).
    virtual void add_inplace(float *x, const float *y, int64_t n) = 0;
    // x += y over n_rows rows of n, then out = RMSNorm(x) as rmsnorm gives it (a residual
    // connection and the norm after it); a backend may do both in one pass.
    virtual void add_rmsnorm(float *x, const float *y, const WeightView &weight, float *out, int64_t n_rows,
                             int64_t n, float eps, float weight_offset)
    {
        add_inplace(x, y, n_rows * n);
        rmsnorm(x, weight, out, n_rows, n, eps, weight_offset);
    }
    // out = silu(gate) * up over n values.
    virtual void swiglu(const float *gate, const float *up, float *out, int64_t n) = 0;
    // out = gelu(gate) * up over n values, gelu with the tanh approximation (GeGLU).
    virtual void geglu(const float *gate, const float *up, float *out, int64_t n) = 0;
    // x[t] += bias for each of n_rows rows of width `width` (the bias a float vector [width]).
    virtual void add_bias(float *x, const WeightView &bias, int64_t n_rows, int64_t width) = 0;
    // x *= s over n values.
    virtual void scale(float *x, float s, int64_t n) = 0;
    // x = cap * tanh(x / cap) over n values (soft-capping of logits).
    virtual void softcap(float *x, float cap, int64_t n) = 0;
    // Moves row `from` of x [*, width] to row `to` (to <= from).
    virtual void move_row(float *x, int64_t to, int64_t from, int64_t width) = 0;
    // A buffer for n_rows of logits [n_rows, n_vocab], then their values on the host (empty
    // for 0 rows). The read ends the step: errors the device met surface here.
    virtual float *logits_buffer(int64_t n_rows) = 0;
    virtual std::span<const float> read_logits(int64_t n_rows) = 0;
    // The scratch a step held: activations plus the backend's own, and the attention
    // scratch of the step.
    virtual uint64_t step_scratch_bytes(uint64_t attention_scratch) = 0;
    // A step over n_rows tokens begins (the CPU backend times single-token steps to choose
    // how many threads they use: cpu/thread_tuner.h).
    virtual void begin_step(int64_t n_rows) { (void)n_rows; }
    // The threads the step begun last runs on (the CPU backend's tuned count for single-token
    // steps; n_threads() otherwise).
    virtual int step_threads() const { return n_threads(); }
    // The step is over: memory held only for it (a score matrix kept for its layers) goes.
    virtual void end_step() {}

    // ---- memory -------------------------------------------------------------------------
    virtual uint64_t weight_bytes() const = 0;
    virtual uint64_t scratch_bytes() const = 0;                 // held now, between steps
    virtual std::optional<DeviceMemoryInfo> device_memory() const { return std::nullopt; }
};

} // namespace longscope
