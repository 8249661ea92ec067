// Encoding KV cache rows on the device, as the CPU encodes them when a row is written
// (engine/src/cpu/quant.cpp quantize_q8_0 / quantize_q4_0, ggml's quantize_row_*_ref):
//   F16   each value rounded to nearest even (__float2half_rn, as the CPU's f32_to_f16).
//   Q8_0  per block of 32: amax = max |x|, d = amax / 127, id = d ? 1 / d : 0,
//         q = roundf(x * id) (ties away from zero); d stored as f16.
//   Q4_0  per block of 32: m = the value of largest magnitude (the first one on ties; 0 when
//         every value is 0), d = m / -8, id = d ? 1 / d : 0, q = min(15, trunc(x * id + 8.5));
//         values j and j + 16 share byte j (low and high nibble).
// One warp per block: lane l holds value l; the maxima come from butterfly shuffles. Products
// and sums that the CPU rounds one by one are written with __fmul_rn / __fadd_rn so that the
// compiler cannot fuse them into an FMA, so the blocks equal the CPU's bit for bit.
#include "kv_format.cuh"

namespace longscope::cuda {

namespace {

constexpr int k_threads = 256;

unsigned grid_for(int64_t items, int64_t per_block)
{
    const int64_t blocks = (items + per_block - 1) / per_block;
    return unsigned(blocks < 65536 ? blocks : 65536);
}

// One 16-bit store: every half these kernels write sits at an even offset (rows of whole
// halves or of 34- / 18-byte blocks, in buffers from cudaMalloc). Written as two byte stores
// of the half's low and high bits, the sm_90 build of nvcc 13.0 stored 0 for the low byte
// (0x3261 came back as 0x3200) while the same conversion stored as one 16-bit value was exact.
__device__ __forceinline__ void put_half(uint8_t *p, float x)
{
    *reinterpret_cast<unsigned short *>(p) = __half_as_ushort(__float2half_rn(x));
}

// One thread per value: F32 and F16 on both sides.
__global__ void convert_values_kernel(KvRows src, uint8_t *dst, int dst_type, int64_t n_rows, int64_t n)
{
    const int64_t total = n_rows * n;
    const int64_t dst_row = kv_row_bytes(dst_type, n);
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t j = idx / n, e = idx % n;
        const float x = kv_load(src, j, e);
        uint8_t *row = dst + j * dst_row;
        if (dst_type == k_kv_f32)
            reinterpret_cast<float *>(row)[e] = x;
        else
            put_half(row + 2 * e, x);
    }
}

// One warp per block of 32 values (n a multiple of 32). Every lane of a warp runs the same
// iterations (the loop bound depends only on the warp's index), so the shuffles see full warps.
__global__ void convert_blocks_kernel(KvRows src, uint8_t *dst, int dst_type, int64_t n_rows, int64_t n)
{
    const int lane = int(threadIdx.x % 32);
    const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int64_t n_warps = int64_t(gridDim.x) * blockDim.x / 32;
    const int64_t per_row = n / k_kv_block;
    const int64_t total = n_rows * per_row;
    const int64_t dst_row = kv_row_bytes(dst_type, n);
    for (int64_t g = warp; g < total; g += n_warps) {
        const int64_t j = g / per_row, blk = g % per_row;
        const float x = kv_load(src, j, blk * k_kv_block + lane);
        uint8_t *row = dst + j * dst_row;
        switch (dst_type) {
        case k_kv_f32:
            reinterpret_cast<float *>(row)[blk * k_kv_block + lane] = x;
            break;
        case k_kv_f16:
            put_half(row + 2 * (blk * k_kv_block + lane), x);
            break;
        case k_kv_q8_0: {
            float amax = fabsf(x);
            for (int off = 16; off > 0; off >>= 1)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
            const float d = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            uint8_t *b = row + blk * k_kv_q8_0_bytes;
            if (lane == 0)
                put_half(b, d);
            b[2 + lane] = uint8_t(static_cast<int8_t>(int(roundf(__fmul_rn(x, id)))));
            break;
        }
        default: { // Q4_0
            // The first lane holding the largest magnitude (NaN never wins, as in the CPU's
            // strict comparison), found by a butterfly over (magnitude, lane).
            float best = x == x ? fabsf(x) : -1.0f;
            int at = lane;
            for (int off = 16; off > 0; off >>= 1) {
                const float other = __shfl_xor_sync(0xffffffffu, best, off);
                const int other_at = __shfl_xor_sync(0xffffffffu, at, off);
                if (other > best || (other == best && other_at < at)) {
                    best = other;
                    at = other_at;
                }
            }
            const float at_value = __shfl_sync(0xffffffffu, x, at);
            const float m = best > 0.0f ? at_value : 0.0f;
            const float d = m / -8.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            const float hi_x = __shfl_down_sync(0xffffffffu, x, 16); // lanes 0-15: value lane + 16
            uint8_t *b = row + blk * k_kv_q4_0_bytes;
            if (lane == 0)
                put_half(b, d);
            if (lane < 16) {
                const int lo = min(15, int(__fadd_rn(__fmul_rn(x, id), 8.5f)));
                const int hi = min(15, int(__fadd_rn(__fmul_rn(hi_x, id), 8.5f)));
                b[2 + lane] = uint8_t(lo | (hi << 4));
            }
            break;
        }
        }
    }
}

} // namespace

namespace {

// Block y = 0: float rows k into kd as k_type; y = 1: v into vd as v_type (F32 or F16 each).
__global__ void store_pair_kernel(const float *k, uint8_t *kd, int k_type, const float *v, uint8_t *vd, int v_type,
                                  int64_t count)
{
    const float *src = blockIdx.y ? v : k;
    uint8_t *dst = blockIdx.y ? vd : kd;
    const int type = blockIdx.y ? v_type : k_type;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
        if (type == k_kv_f32)
            reinterpret_cast<float *>(dst)[i] = src[i];
        else
            put_half(dst + 2 * i, src[i]);
    }
}

} // namespace

cudaError_t launch_kv_store_pair(const float *k, void *k_dst, int k_type, const float *v, void *v_dst, int v_type,
                                 int64_t n_rows, int64_t n, cudaStream_t stream)
{
    if (!kv_type_valid(k_type) || !kv_type_valid(v_type) || n_rows < 0 || n < 0)
        return cudaErrorInvalidValue;
    if (n_rows == 0 || n == 0)
        return cudaSuccess;
    if (kv_type_blocked(k_type) || kv_type_blocked(v_type)) {
        // Blocks take the per-block kernel, one launch per side.
        cudaError_t err = launch_kv_convert(KvRows{k, k_kv_f32, n * 4}, k_dst, k_type, n_rows, n, stream);
        return err != cudaSuccess ? err : launch_kv_convert(KvRows{v, k_kv_f32, n * 4}, v_dst, v_type, n_rows, n, stream);
    }
    const int64_t count = n_rows * n;
    store_pair_kernel<<<dim3(grid_for(count, k_threads), 2), k_threads, 0, stream>>>(
        k, static_cast<uint8_t *>(k_dst), k_type, v, static_cast<uint8_t *>(v_dst), v_type, count);
    return cudaGetLastError();
}

cudaError_t launch_kv_convert(const KvRows &src, void *dst, int dst_type, int64_t n_rows, int64_t n,
                              cudaStream_t stream)
{
    if (!kv_type_valid(src.type) || !kv_type_valid(dst_type) || n_rows < 0 || n < 0)
        return cudaErrorInvalidValue;
    if ((kv_type_blocked(src.type) || kv_type_blocked(dst_type)) && n % k_kv_block != 0)
        return cudaErrorInvalidValue;
    if (n_rows == 0 || n == 0)
        return cudaSuccess;
    if (src.type == dst_type) // the rows are packed on both sides: one copy
        return cudaMemcpyAsync(dst, src.p, size_t(n_rows) * size_t(kv_row_bytes(dst_type, n)),
                               cudaMemcpyDeviceToDevice, stream);
    auto *out = static_cast<uint8_t *>(dst);
    if (!kv_type_blocked(src.type) && !kv_type_blocked(dst_type)) {
        convert_values_kernel<<<grid_for(n_rows * n, k_threads), k_threads, 0, stream>>>(src, out, dst_type, n_rows,
                                                                                          n);
    } else {
        const int64_t blocks = n_rows * (n / k_kv_block);
        convert_blocks_kernel<<<grid_for(blocks, k_threads / 32), k_threads, 0, stream>>>(src, out, dst_type, n_rows,
                                                                                           n);
    }
    return cudaGetLastError();
}

} // namespace longscope::cuda
