// KV cache rows on the device, in the encodings of the CPU's caches (engine/src/cpu/quant.h,
// ggml's blocks bit for bit): F32, F16 (IEEE halves, little endian), Q8_0 (34 bytes per 32
// values: f16 d, int8 q[32]; x = d * q) and Q4_0 (18 bytes per 32 values: f16 d, then 16 bytes
// whose low nibbles hold values 0-15 and high nibbles values 16-31; x = d * (q - 8)). A row of n
// values is n / 32 whole blocks. The attention kernels read single values with kv_load (no
// float copy of the cache is made); kv_convert.cu writes rows.
#pragma once

#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace longscope::cuda {

// Numbered as LONGSCOPE_CUDA_KV_* and longscope::KvType.
constexpr int k_kv_f32 = 0;
constexpr int k_kv_f16 = 1;
constexpr int k_kv_q8_0 = 2;
constexpr int k_kv_q4_0 = 3;

constexpr int k_kv_block = 32;          // values per Q8_0 / Q4_0 block
constexpr int k_kv_q8_0_bytes = 34;     // f16 d + 32 int8
constexpr int k_kv_q4_0_bytes = 18;     // f16 d + 16 bytes of nibbles

inline bool kv_type_valid(int type) { return type >= k_kv_f32 && type <= k_kv_q4_0; }
inline bool kv_type_blocked(int type) { return type == k_kv_q8_0 || type == k_kv_q4_0; }

// Bytes of a row of n values (n a multiple of 32 for the block types).
__host__ __device__ inline int64_t kv_row_bytes(int type, int64_t n)
{
    switch (type) {
    case k_kv_f32: return n * 4;
    case k_kv_f16: return n * 2;
    case k_kv_q8_0: return n / k_kv_block * k_kv_q8_0_bytes;
    default: return n / k_kv_block * k_kv_q4_0_bytes;
    }
}

// Rows of one side of a cache: row j at p + j * row_bytes.
struct KvRows {
    const void *p = nullptr;
    int type = k_kv_f32;
    int64_t row_bytes = 0;
};

#ifdef __CUDACC__
// The f16 at p (two bytes, little endian; read bytewise, so any even or odd address works).
__device__ __forceinline__ float kv_half_at(const uint8_t *p)
{
    return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

// Value e of row j of rows of type T, decoded as the CPU's dequantize_row decodes it (d * q in
// float).
template <int T>
__device__ __forceinline__ float kv_load_t(const KvRows &r, int64_t j, int64_t e)
{
    const uint8_t *row = static_cast<const uint8_t *>(r.p) + j * r.row_bytes;
    if constexpr (T == k_kv_f32) {
        return reinterpret_cast<const float *>(row)[e];
    } else if constexpr (T == k_kv_f16) {
        return kv_half_at(row + 2 * e);
    } else if constexpr (T == k_kv_q8_0) {
        const uint8_t *b = row + (e / k_kv_block) * k_kv_q8_0_bytes;
        return kv_half_at(b) * float(static_cast<int8_t>(b[2 + e % k_kv_block]));
    } else {
        const uint8_t *b = row + (e / k_kv_block) * k_kv_q4_0_bytes;
        const int i = int(e % k_kv_block);
        const int byte = b[2 + (i & 15)];
        return kv_half_at(b) * float((i < 16 ? (byte & 0x0f) : (byte >> 4)) - 8);
    }
}

// The same for the type r.type.
__device__ __forceinline__ float kv_load(const KvRows &r, int64_t j, int64_t e)
{
    switch (r.type) {
    case k_kv_f32: return kv_load_t<k_kv_f32>(r, j, e);
    case k_kv_f16: return kv_load_t<k_kv_f16>(r, j, e);
    case k_kv_q8_0: return kv_load_t<k_kv_q8_0>(r, j, e);
    default: return kv_load_t<k_kv_q4_0>(r, j, e);
    }
}

// Type tags for with_kv_type.
template <int T>
struct KvTypeTag {
    static constexpr int value = T;
};

// Calls f(KvTypeTag<type>{}): code that loads many values of one type is compiled once per
// type, with no type test per value (kernels that unroll such loads stay small).
template <typename F>
__device__ __forceinline__ void with_kv_type(int type, F &&f)
{
    switch (type) {
    case k_kv_f32: f(KvTypeTag<k_kv_f32>{}); break;
    case k_kv_f16: f(KvTypeTag<k_kv_f16>{}); break;
    case k_kv_q8_0: f(KvTypeTag<k_kv_q8_0>{}); break;
    default: f(KvTypeTag<k_kv_q4_0>{}); break;
    }
}
#endif

// Re-encodes n_rows packed rows of n values from src (src.type) into dst (dst_type). Both
// types without blocks: one thread per value; otherwise one warp per block of 32 values, which
// quantizes as ggml's quantize_row_q8_0_ref / q4_0_ref (n must be a multiple of 32).
// cudaErrorInvalidValue for a bad type or shape.
cudaError_t launch_kv_convert(const KvRows &src, void *dst, int dst_type, int64_t n_rows, int64_t n,
                              cudaStream_t stream);

// A step's keys and values (n_rows packed float rows of n values each) written into their cache
// rows as k_type and v_type: F32 and F16 on both sides in one launch, the same bytes as two
// launch_kv_convert calls (which blocks types take).
cudaError_t launch_kv_store_pair(const float *k, void *k_dst, int k_type, const float *v, void *v_dst, int v_type,
                                 int64_t n_rows, int64_t n, cudaStream_t stream);

} // namespace longscope::cuda
