// Long-context settings. Every field can change between two decode steps of one generation;
// the session applies the new value at the next step without reloading the model or losing
// the context.
#pragma once

#include "longscope/hparams.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace longscope {

enum class KvMode {
    None,   // no cache: every step recomputes the whole sequence
    Concat, // grow by allocating a larger buffer and copying, every step (torch.cat)
    Static, // one buffer per layer for the context limit, written in place
    Vmm,    // address space reserved for the limit, pages committed as tokens arrive
};

// How the KV cache stores keys or values. F32 is the exact storage; F16 halves it; Q8_0 and
// Q4_0 are ggml's blocks of 32 values (34 and 18 bytes per block), quantized once when a row
// is written. Quantized types need a head size that is a multiple of 32.
enum class KvType {
    F32,
    F16,
    Q8_0,
    Q4_0,
};

enum class OverflowPolicy {
    Error,    // a prompt longer than the limit is an error
    HeadTail, // keep the first and last halves of an over-long prompt
    DropOldestTurns, // chats: drop the oldest turns (the chat layer applies this)
    // Context shift with attention sinks (StreamingLLM): when the context is full, the session
    // keeps the first Settings::sink_tokens tokens and the most recent ones, drops the oldest
    // of the rest and moves the kept keys to their new positions, so evaluation never stops.
    Shift,
};

// Where the forward pass runs. CUDA needs the plugin (liblongscope-cuda.so) and a usable GPU.
enum class ComputeBackend {
    Cpu,
    Cuda,
};

struct RopeSettings {
    // NTK-aware scaling: base' = base * alpha^(d / (d - 2)), d the rotary dimension.
    float ntk_alpha = 1.0f;
    // alpha recomputed every step from the sequence length L:
    // max(1, 1.1 * (L / (n_ctx_train / 2) - 1)).
    bool ntk_auto = false;
    // Keys are cached before rotation and rotated with the current base inside attention,
    // so keys cached at different lengths agree when alpha changes.
    bool store_kv_before_rope = false;
    // The position-scaling method (docs/long-context.md); nullopt: the model file's own.
    // With a method chosen here, factor and original context replace the file's values where
    // set (0: the file's, or the trained context). "ntk" is a fixed NTK-aware base with the
    // factor as alpha, on top of ntk_alpha.
    std::optional<RopeScalingType> scaling;
    float scaling_factor = 0.0f;
    int scaling_orig_ctx = 0;

    bool operator==(const RopeSettings &) const = default;
};

struct AttentionSettings {
    // Tiled attention with an online softmax; no [queries x keys] score matrix, and the
    // prompt is evaluated in chunks so no buffer grows with its length.
    bool memory_efficient = false;
    // Causality from positions (bottom-right aligned) instead of a mask tensor, and key tiles
    // entirely above the diagonal skipped.
    bool causal_flash = false;
    // Teaching switch: padded batches get one shared triangular mask, so padding is attended
    // (the known failure of causal flash with padded batches). Off: per-sequence lengths.
    bool reproduce_padding_bug = false;

    bool operator==(const AttentionSettings &) const = default;
};

struct Settings {
    RopeSettings rope;
    AttentionSettings attention;
    KvMode kv_mode = KvMode::Static;
    KvType kv_type_k = KvType::F32;
    KvType kv_type_v = KvType::F32;
    int context_limit = 0; // tokens; 0 = the model's trained context (at most 4096)
    OverflowPolicy overflow = OverflowPolicy::Error;
    ComputeBackend backend = ComputeBackend::Cpu;
    // OverflowPolicy::Shift: tokens at the start of the context that are never dropped (the
    // "attention sinks"; StreamingLLM finds 4 enough), and tokens dropped per shift. 0 drops
    // half of the tokens after the sinks, as llama.cpp's context shift does: one shift then
    // makes room for many steps, and the most recent half of the context stays.
    int sink_tokens = 4;
    int shift_discard = 0;

    // Every field.
    bool operator==(const Settings &) const = default;

    // Throws InvalidArgument naming the bad value (alpha < 1 or not finite, limit < 0, a
    // negative sink or discard count, sinks that leave no room in a context_limit set here;
    // the session checks the sinks against the limit it resolves too).
    void validate() const;
    // InvalidArgument when the shift policy is chosen and the sinks fill a context of `limit`.
    void check_sinks(int limit) const;
};

std::string_view to_string(KvMode m);
std::string_view to_string(OverflowPolicy p);
std::optional<KvMode> parse_kv_mode(std::string_view s);
std::string_view to_string(KvType t); // "f32", "f16", "q8_0", "q4_0"
std::optional<KvType> parse_kv_type(std::string_view s);
// Bytes one row of n values takes in `t` (n a multiple of kv_type_block(t)).
uint64_t kv_type_row_bytes(KvType t, int64_t n);
int kv_type_block(KvType t); // values per block: 1 for f32 / f16, 32 for q8_0 / q4_0
// Throws InvalidArgument when a quantized type is chosen for a head size that is not a
// multiple of its block, naming the head size. Every backend stores every type.
void check_kv_types(const Settings &s, int head_dim);
std::optional<OverflowPolicy> parse_overflow(std::string_view s);
std::string_view to_string(ComputeBackend b); // "cpu", "cuda"
std::optional<ComputeBackend> parse_backend(std::string_view s);

// The NTK alpha in effect for a sequence of `seq_len` tokens.
double effective_ntk_alpha(const RopeSettings &rope, int seq_len, int n_ctx_train);

} // namespace longscope
