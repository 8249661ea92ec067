// The CPU backend: every operation of backend/backend.h on host memory with the CPU kernels
// (cpu/ops.h, cpu/attention.h) over a persistent thread pool; KV caches are the host stores
// of kv/. It is the reference every other backend is checked against.
#pragma once

#include "backend/backend.h"
#include "cpu/aligned_vector.h"
#include "cpu/attention.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "cpu/thread_tuner.h"
#include "longscope/model.h"
#include "model/weights.h"

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace longscope {

// base^(-2i/n_rot) for i < n_rot/2.
std::vector<double> rope_inv_freq(double base, int n_rot);

class CpuBackend final : public Backend {
public:
    CpuBackend(const Model &model, int n_threads);

    ComputeBackend kind() const override { return ComputeBackend::Cpu; }
    int n_threads() const override { return m_pool.size(); }
    ThreadPool &pool() { return m_pool; }

    std::unique_ptr<KvCache> make_kv(KvMode mode, int limit, KvType type_k, KvType type_v) override;
    void copy_kv_rows(KvCache &from, KvCache &to, int n_tokens) override;
    void rotate_cached_keys(KvCache &kv, int j0, int n, double base, double pos_scale, bool undo) override;
    void shift_cached_keys(KvCache &kv, int j0, int n, int delta, double base, double pos_scale,
                           std::span<const float> factors) override;

    Activations activations(int64_t n_rows) override;
    void embed(const WeightView &table, std::span<const int32_t> tokens, float *x) override;
    void rmsnorm(const float *x, const WeightView &weight, float *out, int64_t n_rows, int64_t n,
                 float eps, float weight_offset) override;
    void matmul(const WeightView &w, const float *x, float *y, int64_t n_rows) override;
    void matmul_group(std::span<const Projection> outs, const float *x, int64_t n_rows) override;
    void rope(float *x, int64_t n_rows, int n_heads, int64_t pos0, const ForwardParams &params) override;
    void store_kv(KvCache &kv, int layer, int64_t pos0, const float *k, const float *v, int64_t n_rows) override;
    AttentionResult attention(const AttentionCall &call, const ForwardParams &params) override;
    void add_inplace(float *x, const float *y, int64_t n) override;
    void swiglu(const float *gate, const float *up, float *out, int64_t n) override;
    void geglu(const float *gate, const float *up, float *out, int64_t n) override;
    void add_bias(float *x, const WeightView &bias, int64_t n_rows, int64_t width) override;
    void scale(float *x, float s, int64_t n) override;
    void softcap(float *x, float cap, int64_t n) override;
    void move_row(float *x, int64_t to, int64_t from, int64_t width) override;
    float *logits_buffer(int64_t n_rows) override;
    std::span<const float> read_logits(int64_t n_rows) override;
    uint64_t step_scratch_bytes(uint64_t attention_scratch) override;
    void begin_step(int64_t n_rows) override;
    int step_threads() const override { return m_pool.active(); }
    void end_step() override;

    uint64_t weight_bytes() const override;
    uint64_t scratch_bytes() const override;

private:
    // Rotates the cached keys of rows [j0, j0 + n) in every layer, row t by positions[t]
    // (already scaled) with the frequencies `inv`: the one place cached keys are rotated.
    void rotate_key_rows(KvCache &kv, int j0, int n, std::span<const double> positions, std::span<const double> inv);
    // RoPE frequencies for the params' base and factors, computed once per pair in use.
    std::span<const double> inv_freq(const ForwardParams &params);

    const Model &m_model;
    const HParams &m_hp;
    ThreadPool m_pool;
    // The thread count of steps of up to k_tuned_rows rows (decode, one sequence or a few),
    // from their times (CpuOptions::decode_thread_tuning): one tuner per row count, since a
    // step's time grows with its rows. Larger steps (prefill) use the whole pool.
    static constexpr int64_t k_tuned_rows = 16;
    std::vector<ThreadTuner> m_tuners; // [n_rows - 1]
    ThreadTuner *m_timing = nullptr;   // the tuner timing the current step
    std::chrono::steady_clock::time_point m_step_start;

    // Activations for the tokens of one call: [n, width].
    AlignedVector<float> m_x, m_xn, m_q, m_k, m_v, m_attn, m_proj, m_gate, m_up, m_logits;
    // Plain attention's score matrix, for the layers of one step (released by end_step).
    AttentionWorkspace m_attn_work;
    std::vector<double> m_pos;
    double m_inv_base = 0;
    std::vector<float> m_inv_factors;
    std::vector<double> m_inv;
    uint64_t m_inv_generation = 0; // counts the times m_inv was computed
    // The RoPE table of the last rope() call's positions, kept for the other layers and for K
    // after Q: rows pos0 .. pos0 + rows - 1 at scale m_rope_scale with m_inv's generation.
    RopeTable m_rope;
    int64_t m_rope_pos0 = -1, m_rope_rows = 0;
    double m_rope_scale = 0;
    uint64_t m_rope_generation = 0;
};

} // namespace longscope
