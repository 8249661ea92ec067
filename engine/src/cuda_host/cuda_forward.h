// The LLaMA forward pass on an NVIDIA GPU, with the semantics of CpuForward (cpu/cpu_forward.h):
// the same ops in the same order, each one a call into the CUDA plugin (ABI 3) on device
// pointers. This orchestration is engine code and never links CUDA: the plugin is reached
// through the function pointers of CudaApi. Weights are uploaded once when the CudaForward is
// made (F32, F16 and BF16 as they are; quantized types dequantized to F16, norm weights to
// F32) and stay on the device; activations and the KV cache stay there too, and a step copies
// to the host only its logits.
#pragma once

#include "cpu/cpu_forward.h"
#include "cuda_host/cuda_api.h"
#include "longscope/model.h"
#include "longscope/settings.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace longscope {

class CudaForward;

// A KV cache on the device in one of the modes concat, static or vmm (see settings.h KvMode;
// the plugin's kv_cache.cpp has the device side). Made by CudaForward::make_kv and destroyed
// before it.
class CudaKvCache {
public:
    ~CudaKvCache();
    CudaKvCache(const CudaKvCache &) = delete;
    CudaKvCache &operator=(const CudaKvCache &) = delete;

    KvMode mode() const { return m_mode; }
    int limit() const { return m_limit; }
    // Makes positions [0, n_tokens) writable, keeping the rows there. Throws BackendError
    // (out of device memory included) with the plugin's reason.
    void ensure(int n_tokens);
    void clear();
    // [capacity, n_embd_kv] floats on the device; valid until the next ensure() or clear().
    float *keys(int layer) const;
    float *values(int layer) const;

    LongscopeCudaKvInfo info() const;

private:
    friend class CudaForward;
    CudaKvCache(const CudaApi &api, LongscopeCudaContext *ctx, KvMode mode, int n_layer, int limit, int n_embd_kv);

    const CudaApi &m_api;
    LongscopeCudaContext *m_ctx;
    LongscopeCudaKv *m_kv = nullptr;
    KvMode m_mode;
    int m_limit;
    std::vector<float *> m_keys, m_values; // per layer, refreshed after every ensure()
    void refresh();
};

struct DeviceMemoryInfo {
    uint64_t free = 0;
    uint64_t total = 0;
    uint64_t scratch = 0; // activations and the plugin's scratch
};

class CudaForward {
public:
    // Loads the plugin, makes a context on GPU `device` and uploads the weights. Throws
    // BackendError when CUDA cannot be used or the weights do not fit (the reason says which).
    explicit CudaForward(const Model &model, int device = 0);
    ~CudaForward();
    CudaForward(const CudaForward &) = delete;
    CudaForward &operator=(const CudaForward &) = delete;

    // As CpuForward::eval: evaluates `tokens` at positions n_past .. n_past + n - 1, writing
    // their K/V rows into `kv` (which must hold n_past + n writable rows), and returns the
    // logits of tokens from index logits_from on, [n - logits_from, n_vocab], on the host.
    // Throws BackendError with the plugin's reason on any failure.
    std::span<const float> eval(std::span<const int32_t> tokens, int n_past, int logits_from, CudaKvCache &kv,
                                const ForwardParams &params, ForwardStats &stats);

    // A device cache for `limit` positions (mode concat, static or vmm).
    std::unique_ptr<CudaKvCache> make_kv(KvMode mode, int limit);
    // Copies positions [0, n_tokens) of every layer between two device caches (ensure()s the
    // destination first).
    void copy_rows(const CudaKvCache &from, CudaKvCache &to, int n_tokens);
    // Rotates the cached keys of positions [j0, j0 + n) in every layer by RoPE with `base`:
    // forward (cached after RoPE from then on) or, with `undo`, backwards (before RoPE).
    void rotate_cached_keys(CudaKvCache &kv, int j0, int n, double base, double pos_scale, bool undo);

    DeviceMemoryInfo memory() const;
    uint64_t weight_bytes() const { return m_weight_bytes; }
    const std::string &device_name() const { return m_api.device_name; }

private:
    struct DeviceWeight {
        void *data = nullptr;
        int type = LONGSCOPE_CUDA_F32;
        int64_t n_in = 0, n_out = 0;
    };
    struct DeviceLayer {
        DeviceWeight attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    };

    // Throws BackendError naming `what` and the plugin's reason when rc is nonzero.
    void check(int rc, const char *what) const;
    void *alloc(size_t bytes);
    DeviceWeight upload_matrix(const WeightView &w);
    DeviceWeight upload_norm(const WeightView &w);
    void size_activations(int64_t n);
    void release_all();

    const Model &m_model;
    const HParams &m_hp;
    CudaApi m_api;
    LongscopeCudaContext *m_ctx = nullptr;
    std::vector<void *> m_weight_allocs;
    std::map<const void *, DeviceWeight> m_uploaded; // by host data: a tied output is uploaded once
    uint64_t m_weight_bytes = 0;
    DeviceWeight m_tok_embd, m_output_norm, m_output;
    std::vector<DeviceLayer> m_layers;

    // Activations for up to m_rows tokens, device: x, xn, q, attn, proj [n, n_embd]; gate, up
    // [n, n_ff]; logits [n, n_vocab]; tokens [n] int32.
    int64_t m_rows = 0;
    void *m_act = nullptr;
    uint64_t m_act_bytes = 0;
    float *m_x = nullptr, *m_xn = nullptr, *m_q = nullptr, *m_attn = nullptr, *m_proj = nullptr;
    float *m_gate = nullptr, *m_up = nullptr, *m_dlogits = nullptr;
    int32_t *m_tokens = nullptr;
    std::vector<float> m_logits; // host
};

} // namespace longscope
