// A Session holds one sequence's context (its KV cache) on a model; generate_batch runs
// several sequences together. The generation loop itself (generate(), GenerateRequest,
// GenerateResult, fit_prompt) is declared in longscope/generator.h, included here.
#pragma once

#include "longscope/generator.h"
#include "longscope/metrics.h"
#include "longscope/model.h"
#include "longscope/sampler.h"
#include "longscope/settings.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace longscope {

// The default context limit: the model's trained context, at most this many tokens.
inline constexpr int k_default_ctx_cap = 4096;

struct SessionOptions {
    int n_ctx = 0;     // context limit in tokens; 0 = the trained context, at most k_default_ctx_cap
    int n_threads = 0; // 0 = all hardware threads
    Settings settings; // long-context settings; settings.context_limit, when set, wins over n_ctx
};

class CpuForward;
class CudaForward;
class CudaKvCache;
class KvStore;
struct ForwardParams;
struct ForwardStats;
using MetricsCallback = std::function<void(const StepMetrics &)>;

class Session {
public:
    // Throws InvalidArgument for bad options, OutOfMemory when the KV cache cannot be had,
    // BackendError when settings.backend is CUDA and CUDA cannot be used (the reason says
    // why: no plugin, no driver or GPU, weights too large for the device).
    Session(const Model &model, const SessionOptions &options = {});
    ~Session();
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    // Appends `tokens` to the context and evaluates them. Returns the logits of the last
    // one [n_vocab]. With `all_logits`, returns [tokens.size(), n_vocab]. Throws
    // ContextOverflow when the context limit would be passed (the context is unchanged),
    // InvalidArgument for an empty list or an id outside the vocabulary.
    std::span<const float> eval(std::span<const int32_t> tokens, bool all_logits = false);

    // New settings, applied at the next eval(): the cache migrates to a new mode or limit,
    // cached keys are converted when store_kv_before_rope flips; nothing is lost. A
    // context_limit of 0 means the model's default, as in SessionOptions; settings() reports
    // the limit in effect. Throws InvalidArgument for invalid settings or a limit below the
    // current length (the old settings then stay). Changing settings.backend moves the
    // context to the other backend (its cache is rebuilt there from the tokens at the next
    // eval()); BackendError when CUDA is asked for and cannot be used (the old settings stay).
    void set_settings(const Settings &settings);
    const Settings &settings() const { return m_settings; }

    // Called after every eval() with that step's metrics.
    void set_metrics_callback(MetricsCallback cb) { m_on_metrics = std::move(cb); }
    const StepMetrics &last_metrics() const { return m_last; }
    // The ledger as it stands now (between steps).
    MemoryLedger memory() const;

    // Empty, or why the session left the CUDA backend: when a CUDA step fails (out of device
    // memory, a kernel error), the step is evaluated again on the CPU, settings().backend
    // becomes CPU and this says what failed.
    const std::string &backend_note() const { return m_backend_note; }

    void reset();
    // Keeps the first n_tokens of the context and forgets the rest (regenerate, edit an
    // earlier turn). Throws InvalidArgument when n_tokens is negative or beyond n_past().
    void truncate(int n_tokens);
    int n_past() const;
    int n_ctx() const { return m_n_ctx; }
    int n_threads() const;
    const std::vector<int32_t> &history() const { return m_history; }
    const Model &model() const { return m_model; }

private:
    double rope_base_for(int seq_len) const;
    ForwardParams forward_params(double rope_base) const;
    void run(std::span<const int32_t> tokens, int start_pos, int logits_from, KvStore &kv,
             const ForwardParams &params, ForwardStats &stats);
    void apply_kv_settings(double rope_base);
    void convert_cached_keys(bool to_before_rope, double rope_base);
    void fill_ledger(MemoryLedger &m, uint64_t scratch, uint64_t kv_reserved, uint64_t kv_resident);
    // The CUDA backend's side of eval(), apply_kv_settings() and convert_cached_keys().
    void step_cuda(std::span<const int32_t> tokens, int past, int len, double base, const ForwardParams &params,
                   bool all_logits, ForwardStats &st, uint64_t &kv_reserved, uint64_t &kv_resident);
    void run_cuda(std::span<const int32_t> tokens, int start_pos, int logits_from, CudaKvCache &kv,
                  const ForwardParams &params, ForwardStats &stats);
    void apply_cuda_kv_settings(double rope_base);
    void convert_cached_keys_cuda(bool to_before_rope, double rope_base);
    void fall_back_to_cpu(const std::string &reason);

    const Model &m_model;
    int m_n_ctx = 0;
    Settings m_settings;
    std::unique_ptr<CpuForward> m_forward;
    std::unique_ptr<KvStore> m_kv;          // null in KvMode::None and on CUDA
    std::unique_ptr<CudaForward> m_cuda;    // set while the backend is CUDA
    std::unique_ptr<CudaKvCache> m_cuda_kv; // the device cache (declared after m_cuda: freed first)
    std::string m_backend_note;
    bool m_kv_before_rope = false;          // how the keys in m_kv are stored
    std::vector<double> m_key_base;         // per cached position: base its key was rotated with
    std::vector<int32_t> m_history;
    std::vector<float> m_logits;            // assembled across prefill chunks
    uint64_t m_retired_copied = 0;          // bytes copied by stores since replaced
    MemoryLedger m_peaks;
    StepMetrics m_last;
    int64_t m_steps = 0;
    MetricsCallback m_on_metrics;
};

// Called for each generated token of sequence `seq` in a batch, as TokenCallback is (the
// text held to the end comes with id -1). Return false to stop that sequence.
using BatchTokenCallback = std::function<bool(size_t seq, int32_t id, std::string_view text)>;

// Generates for several prompts together: every step evaluates the next token of every
// unfinished sequence in one forward pass (the prompts' prefill too), each sequence with its
// own KV cache and length, so prompts of different lengths need no padding and each result
// equals its own single-sequence run. With settings.attention.reproduce_padding_bug the
// prompts are instead left-padded to the longest with token 0 and the padding is attended,
// as a padded batch under one shared causal mask would: a teaching switch, wrong on purpose.
// `on_metrics` gets one StepMetrics per forward pass, KV memory summed over the sequences.
std::vector<GenerateResult> generate_batch(const Model &model, const SessionOptions &options,
                                           const std::vector<GenerateRequest> &requests,
                                           const BatchTokenCallback &on_token = {},
                                           const MetricsCallback &on_metrics = {});

} // namespace longscope
