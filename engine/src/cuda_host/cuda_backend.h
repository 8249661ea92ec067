// The CUDA backend: the operations of backend/backend.h as calls into the CUDA plugin (ABI 4)
// on device pointers, with the CPU backend's semantics op by op, for every architecture family
// of arch/llama.cpp and every RoPE method. This is engine code and never links CUDA: the plugin
// is reached through the function pointers of CudaApi. Weights are uploaded once when the
// backend is made (F32, F16 and BF16 as they are; quantized types dequantized to F16; norm
// weights and biases to F32) and stay on the device; activations and the KV cache (F32, F16,
// Q8_0 or Q4_0 rows) stay there too, and a step copies to the host only its tokens and its
// logits (and a RoPE frequency table when the step needs one it has not seen).
#pragma once

#include "backend/backend.h"
#include "cuda_host/cuda_api.h"
#include "longscope/model.h"
#include "model/weights.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace longscope {

// A KV cache on the device (the plugin's kv_cache.cpp has the device side), keys and values
// each stored as their KvType (rows of kv_type_row_bytes). Made by CudaBackend::make_kv and
// destroyed before it.
class CudaKvCache final : public KvCache {
public:
    ~CudaKvCache() override;
    CudaKvCache(const CudaKvCache &) = delete;
    CudaKvCache &operator=(const CudaKvCache &) = delete;

    KvMode mode() const override { return m_mode; }
    int limit() const override { return m_limit; }
    // Throws BackendError (out of device memory included) with the plugin's reason.
    void ensure(int n_tokens) override;
    void clear() override;
    // The rows as floats: InvalidArgument unless that side is stored as f32.
    float *keys(int layer) override;
    float *values(int layer) override;
    KvType type_k() const override { return m_type[0]; }
    KvType type_v() const override { return m_type[1]; }
    // [capacity] rows of one layer in their encoding, row_bytes(side) apart (device).
    uint8_t *key_data(int layer) { return m_rows[0].at(size_t(layer)); }
    uint8_t *value_data(int layer) { return m_rows[1].at(size_t(layer)); }
    uint64_t row_bytes(int side) const { return m_row_bytes[side]; }
    // Non-overlapping device copies, `drop` rows at a time, queued on the stream.
    void shift(int n_tokens, int keep, int drop) override;

    uint64_t reserved_bytes() const override { return info().reserved_bytes; }
    uint64_t resident_bytes() const override { return info().resident_bytes; }
    uint64_t copied_bytes() const override { return info().copied_bytes; }
    uint64_t peak_resident_bytes() const override { return info().resident_bytes; }
    LongscopeCudaKvInfo info() const;

private:
    friend class CudaBackend;
    CudaKvCache(const CudaApi &api, LongscopeCudaContext *ctx, KvMode mode, int n_layer, int limit, int n_embd_kv,
                KvType type_k, KvType type_v);

    const CudaApi &m_api;
    LongscopeCudaContext *m_ctx;
    LongscopeCudaKv *m_kv = nullptr;
    KvMode m_mode;
    int m_limit;
    KvType m_type[2];                   // keys, values
    uint64_t m_row_bytes[2];
    std::vector<uint8_t *> m_rows[2];   // per layer, refreshed after every ensure()
    void refresh();
};

// What the host computes with the CPU backend's own code: a weight row as F32 (any weight
// type), the F16 rounding of a float, and the RoPE frequencies base^(-2i/n_rot). The runtime
// hands them in, so this backend has no second copy of them and never includes another
// backend's code.
struct HostFunctions {
    void (*row_f32)(const WeightView &w, int64_t row, float *out) = nullptr;
    uint16_t (*to_f16)(float f) = nullptr;
    std::vector<double> (*rope_inv_freq)(double base, int n_rot) = nullptr;
};

class CudaBackend final : public Backend {
public:
    // Loads the plugin, makes a context on GPU `device` and uploads the weights. Throws
    // BackendError when CUDA cannot be used or the weights do not fit (the reason says which).
    CudaBackend(const Model &model, const HostFunctions &host, int device = 0);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend &) = delete;
    CudaBackend &operator=(const CudaBackend &) = delete;

    ComputeBackend kind() const override { return ComputeBackend::Cuda; }
    int n_threads() const override { return 1; }
    const std::string &device_name() const { return m_api.device_name; }

    // Keys and values as f32, f16, q8_0 or q4_0 rows (InvalidArgument for block types when the
    // head size is not a multiple of 32).
    std::unique_ptr<KvCache> make_kv(KvMode mode, int limit, KvType type_k, KvType type_v) override;
    void copy_kv_rows(KvCache &from, KvCache &to, int n_tokens) override;
    void rotate_cached_keys(KvCache &kv, int j0, int n, double base, double pos_scale, bool undo) override;
    void shift_cached_keys(KvCache &kv, int j0, int n, int delta, double base, double pos_scale,
                           std::span<const float> factors) override;

    // Long prompts go through in chunks of 1024 tokens: four times the CPU's, as the device's
    // matrix products and attention kernels need many rows to fill it.
    int prefill_chunk() const override { return 1024; }
    Activations activations(int64_t n_rows) override;
    void embed(const WeightView &table, std::span<const int32_t> tokens, float *x) override;
    void rmsnorm(const float *x, const WeightView &weight, float *out, int64_t n_rows, int64_t n,
                 float eps, float weight_offset) override;
    void matmul(const WeightView &w, const float *x, float *y, int64_t n_rows) override;
    void matmul_group(std::span<const Projection> outs, const float *x, int64_t n_rows) override;
    void rope(float *x, int64_t n_rows, int n_heads, int64_t pos0, const ForwardParams &params) override;
    void rope_qk(float *q, int n_head, float *k, int n_head_kv, int64_t n_rows, int64_t pos0,
                 const ForwardParams &params) override;
    void add_rmsnorm(float *x, const float *y, const WeightView &weight, float *out, int64_t n_rows, int64_t n,
                     float eps, float weight_offset) override;
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

    uint64_t weight_bytes() const override { return m_weight_bytes; }
    uint64_t scratch_bytes() const override;
    std::optional<DeviceMemoryInfo> device_memory() const override;

private:
    struct DeviceWeight {
        void *data = nullptr;
        int type = LONGSCOPE_CUDA_F32;
        int64_t n_in = 0, n_out = 0;
    };

    // Throws BackendError naming `what` and the plugin's reason when rc is nonzero.
    void check(int rc, const char *what) const;
    void *alloc(size_t bytes);
    void upload_matrix(const WeightView &w);
    // A vector (norm weight, bias) as F32.
    void upload_vector(const WeightView &w);
    // The device copy of one of the model's weights.
    const DeviceWeight &device(const WeightView &w) const;
    // The RoPE frequency table for `base` and per-dimension `factors` on the device:
    // host.rope_inv_freq(base, n_rot) with entry i divided by factors[i], as the CPU backend
    // forms it, uploaded once and kept (the last k_freq_tables used).
    const double *freq_table(double base, std::span<const float> factors);
    // Rotates the cached keys of positions [j0, j0 + n) of every layer: row t for position
    // (pos0 + t * pos_step) * pos_scale. Keys not stored as f32 are decoded into a float
    // buffer, rotated and encoded again, as the CPU does.
    void rope_cached_keys(KvCache &kv, int j0, int n, double pos0, double pos_step, double pos_scale,
                          const double *inv_freq, const char *what);
    void release_all();

    const Model &m_model;
    const HParams &m_hp;
    HostFunctions m_host;
    CudaApi m_api;
    LongscopeCudaContext *m_ctx = nullptr;
    std::vector<void *> m_weight_allocs;
    std::map<const void *, DeviceWeight> m_uploaded;                 // by host data: a tied output once
    std::unordered_map<const WeightView *, DeviceWeight> m_weights;  // by the model's view
    uint64_t m_weight_bytes = 0;

    struct FreqTable {
        double base = 0;
        std::vector<float> factors;
        double *data = nullptr; // n_rot / 2 doubles, device
        uint64_t last_use = 0;
    };
    static constexpr size_t k_freq_tables = 8;
    std::vector<FreqTable> m_freqs;
    uint64_t m_freq_clock = 0;
    uint64_t freq_table_bytes() const;
    uint64_t logit_bytes() const;

    // Activations for up to m_rows tokens, device: x, xn, proj [n, n_embd]; q, attn
    // [n, n_embd_q]; k, v [n, n_embd_kv]; gate, up [n, n_ff]; tokens [n] int32.
    int64_t m_rows = 0;
    void *m_act = nullptr;
    uint64_t m_act_bytes = 0;
    Activations m_buf;
    int32_t *m_tokens = nullptr;
    // Logits [m_logit_rows, n_vocab], device: sized by the rows a step keeps (a prefill chunk
    // keeps one), not by the rows it evaluates.
    float *m_dlogits = nullptr;
    int64_t m_logit_rows = 0;
    std::vector<float> m_logits; // host
};

} // namespace longscope
