#include "cpu/ops.h"

#include "cpu/aligned_vector.h"
#include "cpu/amx.h"
#include "cpu/gemm.h"
#include "cpu/kernel_table.h"
#include "cpu/packed.h"
#include "cpu/qdot.h"
#include "cpu/quant.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace longscope {

float f16_to_f32(uint16_t h)
{
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { // subnormal: value = mant * 2^-24
            float v = float(mant) * 5.9604644775390625e-8f;
            std::memcpy(&bits, &v, 4);
            bits |= sign;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

float bf16_to_f32(uint16_t h)
{
    uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_f16(float f)
{
    // Round to nearest even, with overflow to infinity and gradual underflow.
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) // inf or nan
        return uint16_t(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
    if (abs >= 0x477ff000u) // rounds to >= 65520: infinity
        return uint16_t(sign | 0x7c00);
    if (abs < 0x38800000u) { // below the smallest normal half: subnormal or zero
        float a;
        std::memcpy(&a, &abs, 4);
        return uint16_t(sign | uint32_t(std::nearbyint(a * 16777216.0f)));
    }
    uint32_t mant = abs + 0xfff + ((abs >> 13) & 1); // round to nearest even
    return uint16_t(sign | ((mant - 0x38000000u) >> 13));
}

uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return uint16_t((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return uint16_t(x >> 16);
}

void weight_row_f32(const WeightView &w, int64_t row, float *out)
{
    // Weights may sit at any byte offset (safetensors does not promise alignment), so
    // elements are loaded with memcpy, which compiles to plain loads.
    const int64_t n = w.ne(0);
    if (w.cpu_packed) {
        dequantize_packed_row(w.type, w.cpu_packed, n, row, out);
        return;
    }
    const auto *bytes = static_cast<const uint8_t *>(w.data);
    switch (w.type) {
    case DType::F32:
        std::memcpy(out, bytes + row * n * 4, size_t(n) * 4);
        return;
    case DType::F16:
        cpu_kernels().f16_to_f32(reinterpret_cast<const uint16_t *>(bytes + row * n * 2), out, n);
        return;
    case DType::BF16:
        cpu_kernels().bf16_to_f32(reinterpret_cast<const uint16_t *>(bytes + row * n * 2), out, n);
        return;
    default:
        if (is_quantized(w.type))
            dequantize_row(w.type, bytes + size_t(row) * row_bytes(w.type, n), out, n);
        return; // the loader rejects every other type
    }
}

float dot_f32(const float *a, const float *b, int64_t n) { return cpu_kernels().dot(a, b, n); }

namespace {

// Buffers the calling thread's matrix products keep from call to call (sized by the largest
// call so far), counted as scratch by matmul_scratch_bytes.
thread_local QuantizedActs t_acts;     // activations quantized to 8 bits (integer path)
thread_local PackedActs t_pacts;       // the same in tiles of four tokens (packed VNNI kernels)
thread_local AlignedVector<uint16_t> t_xb; // activations rounded to BF16 (BF16 path)
thread_local AlignedVector<float> t_xi;    // activations interleaved (packed F16 and BF16 over tokens)

// Rows per tile. A single token takes one row at a time: each thread then reads its weights as
// one sequential stream, which the hardware prefetchers follow at full bandwidth (four rows
// interleaved measured 16 against 27 tokens/s for a Q8_0 decode on two cores). Several tokens
// take four rows, so each token's activations are loaded once per four rows.
int decode_row_block(int64_t n_tokens) { return n_tokens == 1 ? 1 : 4; }

// Quantized weights against activations quantized to 8 bits per block of 32 (qdot.h): the
// weight rows stream once per group of tokens, never widened to floats. Rows [begin, end).
void integer_rows(const WeightView &w, const QuantizedActs &a, const PackedActs *pa, float *y, int64_t n_tokens,
                  int64_t begin, int64_t end)
{
    const int64_t n_out = w.ne(1);
    constexpr int64_t token_group = 64;
    if (w.cpu_packed) {
        // Groups of 16 rows; a group belongs to the range holding its first row.
        constexpr int64_t gr = packed_group_rows;
        for (int64_t g0 = 0; g0 < n_tokens; g0 += token_group) {
            const int64_t g_end = std::min(n_tokens, g0 + token_group);
            const int64_t g_last = (end + gr - 1) / gr;
            // Up to three groups side by side (the blocks-of-32 types; packed_tile_acts takes
            // other types a group at a time): each broadcast of a tile's activations serves
            // them all. TinyLlama Q8_0's products, 64 tokens, one thread on an AMD EPYC: 640,
            // 757 and 789 GOP/s for one, two and three groups. A single token takes the
            // range's groups in one call (packed_tiles reads several side by side).
            const int64_t first = (begin + gr - 1) / gr;
            const int64_t side = n_tokens == 1 ? std::max<int64_t>(1, g_last - first) : 3;
            for (int64_t gi = first; gi < g_last; gi += side) {
                const int64_t ng = std::min<int64_t>(side, g_last - gi);
                for (int64_t t = g0; t < g_end;) {
                    const int nt = int(std::min<int64_t>(4, g_end - t));
                    const int64_t tile = t / packed_act_tile;
                    if (pa && tile < pa->n_tiles) {
                        // Two tiles at once where both are whole (the K types unpack each
                        // group's codes once for their eight tokens).
                        const int n_tiles = t + 2 * packed_act_tile <= g_end && tile + 1 < pa->n_tiles ? 2 : 1;
                        packed_tile_acts(w.type, w.cpu_packed, w.ne(0), gi, int(ng), *pa, tile,
                                         y + t * n_out + gi * gr, n_out, n_tiles);
                        t += n_tiles * packed_act_tile;
                        continue;
                    }
                    packed_tiles(w.type, w.cpu_packed, w.ne(0), gi, ng, a, t, nt, y + t * n_out + gi * gr, n_out);
                    t += 4;
                }
            }
        }
        return;
    }
    const QKernel kernel = qkernel();
    const int token_block = qgemm_token_block(kernel);
    const size_t stride = row_bytes(w.type, w.ne(0));
    if (n_tokens == 1) {
        qgemv_rows(kernel, w.type, static_cast<const uint8_t *>(w.data) + size_t(begin) * stride, stride, end - begin, a,
                   0, y + begin);
        return;
    }
    const int row_block = decode_row_block(n_tokens);
    const void *rows[4];
    for (int64_t g = 0; g < n_tokens; g += token_group) {
        const int64_t g_end = std::min(n_tokens, g + token_group);
        for (int64_t o = begin; o < end; o += row_block) {
            const int nr = int(std::min<int64_t>(row_block, end - o));
            for (int r = 0; r < nr; ++r)
                rows[r] = static_cast<const uint8_t *>(w.data) + size_t(o + r) * stride;
            for (int64_t t = g; t < g_end; t += token_block) {
                const int nt = int(std::min<int64_t>(token_block, g_end - t));
                qgemm_tile_with(kernel, w.type, rows, nr, a, t, nt, y + t * n_out + o, n_out);
            }
        }
    }
}

bool is_packed_half(const WeightView &w) { return w.cpu_packed && (w.type == DType::F16 || w.type == DType::BF16); }

// Float kernel (F32, F16 and BF16 rows read in place and widened in registers; other types
// widened into a per-call buffer first). Rows [begin, end). xi: the activations interleaved
// for the packed F16 and BF16 kernel (interleave_half_acts), or null.
void float_rows(const WeightView &w, const float *x, float *y, int64_t n_tokens, int64_t begin, int64_t end,
                const float *xi = nullptr)
{
    const int64_t n_in = w.ne(0), n_out = w.ne(1);
    if (is_packed_half(w)) {
        // Groups of 16 rows, each in the range of its first row.
        const int64_t gr = packed_group_rows;
        gemm_packed_half(w.type, reinterpret_cast<const uint16_t *>(w.cpu_packed), n_in, (begin + gr - 1) / gr,
                         (end + gr - 1) / gr, x, n_tokens, y, n_out, xi);
        return;
    }
    const bool in_place = w.type == DType::F32 || w.type == DType::F16 || w.type == DType::BF16;
    const int64_t row_stride = in_place ? n_in * (w.type == DType::F32 ? 4 : 2) : 0;
    if (in_place && n_tokens == 1) {
        gemv_rows(w.type, static_cast<const uint8_t *>(w.data) + begin * row_stride, size_t(row_stride), end - begin,
                  x, n_in, y + begin);
        return;
    }
    if (in_place) {
        gemm_rows(w.type, static_cast<const uint8_t *>(w.data) + begin * row_stride, size_t(row_stride), end - begin, x,
                  n_tokens, n_in, y + begin, n_out);
        return;
    }
    const int token_block = gemm_token_block();
    const int row_block = decode_row_block(n_tokens);
    // Tokens are taken in groups whose activations ([64, n_in] floats) stay in the L2 cache
    // while the thread's weight rows stream past them once per group.
    constexpr int64_t token_group = 64;
    std::vector<float> buf(in_place ? 0 : size_t(4 * n_in));
    const void *rows[4];
    const DType kernel_type = in_place ? w.type : DType::F32;
    for (int64_t g = 0; g < n_tokens; g += token_group) {
        const int64_t g_end = std::min(n_tokens, g + token_group);
        for (int64_t o = begin; o < end; o += row_block) {
            const int nr = int(std::min<int64_t>(row_block, end - o));
            for (int r = 0; r < nr; ++r) {
                if (in_place) {
                    rows[r] = static_cast<const uint8_t *>(w.data) + (o + r) * row_stride;
                } else {
                    weight_row_f32(w, o + r, buf.data() + r * n_in);
                    rows[r] = buf.data() + r * n_in;
                }
            }
            for (int64_t t = g; t < g_end; t += token_block) {
                const int nt = int(std::min<int64_t>(token_block, g_end - t));
                gemm_tile(kernel_type, rows, nr, x + t * n_in, n_in, nt, n_in, y + t * n_out + o, n_out);
            }
        }
    }
}

int64_t rows_grain(int64_t n_in, int64_t n_tokens) { return std::max<int64_t>(4, min_items_per_thread(n_in * n_tokens)); }

} // namespace

QuantMatmul matmul_path(const WeightView &w, int64_t n_tokens, QuantMatmul how)
{
    if (w.ne(0) % 32 != 0)
        return QuantMatmul::Dequantize; // the float kernel
    if (how == QuantMatmul::Auto)
        how = kernel_table().quant_matmul;
    if (how == QuantMatmul::Amx)
        how = kernel_table().amx ? QuantMatmul::Amx : QuantMatmul::Auto;
    // F32 weights (small models kept exact, the bundled one among them) stay on the exact float
    // kernel under Auto: the tiles' sums differ from a decode step's in the last bits. Packed
    // matrices take the tiles where their rows widen with vector code (every packed type at the
    // AVX-512 level): with scalar widening the panels cost more than the tiles save (one core,
    // 2048 x 5632 by 256 tokens: Q2_K 179 GOP/s on the tiles against 205 on the packed integer
    // kernels, Q3_K 146 against 206, Q5_0 194 against 276 before its rows had vector code, 530
    // after).
    const bool fast_panels = !w.cpu_packed || dequantize_packed_level(w.type) == VectorLevel::Avx512;
    if (how == QuantMatmul::Auto && kernel_table().amx && n_tokens >= amx_min_tokens && w.type != DType::F32 &&
        fast_panels)
        how = QuantMatmul::Amx;
    if (how == QuantMatmul::Amx)
        return how;
    if (!is_quantized(w.type)) {
        // F16 matrices take the BF16 dot products only where asked for: they round the weights
        // (11 significant bits to 8) and the activations, where the float kernel is exact, for
        // 1.4-1.9 times its speed (one core, TinyLlama shapes by 256 tokens: 127-153 GFLOP/s
        // against 81-88, relative RMS error of the products 2.4e-3; a 512-token TinyLlama F16
        // prefill on one thread: 8.0-8.5 s of CPU time against 11.8-12.2).
        const bool bf16 = w.type == DType::F16 && how == QuantMatmul::Bf16 && n_tokens >= bf16_min_tokens &&
                          has_bf16_dot();
        return bf16 ? QuantMatmul::Bf16 : QuantMatmul::Dequantize;
    }
    // Packed matrices (cpu/packed.h) take the integer kernels at any token count: sixteen rows
    // per vpdpbusd outrun the BF16 dot products over dequantized panels (Q4_K, 2048 x 2048 by
    // 256 tokens on one core here: 220-265 GOP/s against 115-135).
    if (how == QuantMatmul::Auto)
        how = n_tokens >= bf16_min_tokens && has_bf16_dot() && !w.cpu_packed ? QuantMatmul::Bf16 : QuantMatmul::Integer;
    if (how == QuantMatmul::Bf16 && !has_bf16_dot())
        how = QuantMatmul::Integer;
    if (how == QuantMatmul::Integer && !has_integer_dot(w.type))
        how = QuantMatmul::Dequantize;
    return how;
}

namespace {

// Quantized weights over many tokens through BF16 dot products: each panel of rows is
// dequantized once per call (to float, then rounded to BF16) and kept in the L2 cache while
// every token's BF16 activations stream past it, four rows by four tokens per tile.
void matmul_bf16(ThreadPool &pool, const WeightView &w, const float *x, float *y, int64_t n_tokens)
{
    const int64_t n_in = w.ne(0), n_out = w.ne(1);
    // The calling thread's buffer; the workers reach it through this pointer (the thread_local
    // named inside the lambda would be each worker's own).
    t_xb.resize(static_cast<size_t>(n_tokens * n_in));
    uint16_t *const xb = t_xb.data();
    pool.parallel_for(
        n_tokens,
        [&](int64_t begin, int64_t end) { f32_to_bf16_rne(x + begin * n_in, xb + begin * n_in, (end - begin) * n_in); },
        min_items_per_thread(n_in));
    // Rows per panel: about 256 KiB of BF16, a multiple of 4.
    const int64_t panel = std::clamp<int64_t>((262144 / (2 * n_in)) / 4 * 4, 4, 64);
    const uint16_t *xs = xb;
    pool.parallel_for(
        n_out,
        [&](int64_t begin, int64_t end) {
            AlignedVector<float> f(static_cast<size_t>(n_in));
            AlignedVector<uint16_t> wb(static_cast<size_t>(panel * n_in));
            const uint16_t *rows[4];
            for (int64_t p0 = begin; p0 < end; p0 += panel) {
                const int64_t np = std::min(panel, end - p0);
                for (int64_t r = 0; r < np; ++r) {
                    weight_row_f32(w, p0 + r, f.data());
                    f32_to_bf16_rne(f.data(), wb.data() + r * n_in, n_in);
                }
                for (int64_t t = 0; t < n_tokens; t += 4) {
                    const int nt = int(std::min<int64_t>(4, n_tokens - t));
                    for (int64_t o = 0; o < np; o += 4) {
                        const int nr = int(std::min<int64_t>(4, np - o));
                        for (int r = 0; r < nr; ++r)
                            rows[r] = wb.data() + (o + r) * n_in;
                        gemm_tile_bf16dot(rows, nr, xs + t * n_in, n_in, nt, n_in, y + t * n_out + p0 + o, n_out);
                    }
                }
            }
        },
        std::max<int64_t>(panel, min_items_per_thread(n_in * n_tokens)));
}

} // namespace

uint64_t matmul_scratch_bytes()
{
    return t_acts.q.capacity() +
           4 * (t_acts.dl.capacity() + t_acts.db.capacity() + t_acts.ds.capacity() + t_acts.s16.capacity()) +
           t_pacts.bytes() + 2 * t_xb.capacity() + 4 * t_xi.capacity() + amx_scratch_bytes();
}

void matmul(ThreadPool &pool, const WeightView &w, const float *x, float *y, int64_t n_tokens)
{
    matmul_with(pool, w, x, y, n_tokens, QuantMatmul::Auto);
}

void matmul_with(ThreadPool &pool, const WeightView &w, const float *x, float *y, int64_t n_tokens, QuantMatmul how)
{
    const MatmulOut out{&w, y};
    matmul_group(pool, std::span<const MatmulOut>(&out, 1), x, n_tokens, how);
}

void matmul_group(ThreadPool &pool, std::span<const MatmulOut> outs, const float *x, int64_t n_tokens,
                  QuantMatmul how)
{
    if (outs.empty())
        return;
    const int64_t n_in = outs[0].w->ne(0);
    const QuantMatmul path = matmul_path(*outs[0].w, n_tokens, how);
    bool same = true;
    for (const MatmulOut &o : outs)
        same = same && o.w->ne(0) == n_in && matmul_path(*o.w, n_tokens, how) == path;
    if (path == QuantMatmul::Amx && same) {
        std::vector<const WeightView *> ws;
        std::vector<float *> ys;
        for (const MatmulOut &o : outs) {
            ws.push_back(o.w);
            ys.push_back(o.y);
        }
        matmul_amx(pool, ws, ys, x, n_tokens, false);
        return;
    }
    if (path == QuantMatmul::Bf16 || !same) {
        // Each on its own (the BF16 path's loops are long enough not to share a wake-up).
        for (const MatmulOut &o : outs) {
            if (matmul_path(*o.w, n_tokens, how) == QuantMatmul::Bf16)
                matmul_bf16(pool, *o.w, x, o.y, n_tokens);
            else
                matmul_group(pool, std::span<const MatmulOut>(&o, 1), x, n_tokens, how);
        }
        return;
    }
    // One loop over the rows of every weight: one wake-up of the pool instead of one each,
    // and the activations quantized once.
    const QuantizedActs *acts = nullptr;
    const PackedActs *pacts = nullptr;
    if (path == QuantMatmul::Integer) {
        acts = &t_acts;
        // Packed matrices under the VNNI kernels read whole tiles of four tokens from one copy
        // (and, where every matrix is packed, only from it: the rows are for the last tokens).
        const auto is_packed = [](const MatmulOut &o) { return o.w->cpu_packed != nullptr; };
        const bool packed = std::any_of(outs.begin(), outs.end(), is_packed);
        // Every product of a (row, token) pair reads the same span whatever the number of
        // tokens, so that batched and single-token runs keep giving the same bits.
        const auto is_k = [](const MatmulOut &o) { return is_k_quant(o.w->type); };
        const int span = qkernel() == QKernel::Vnni && cpu_options().k_act_span && n_in % act_span_super == 0 &&
                                 std::all_of(outs.begin(), outs.end(), is_k)
                             ? act_span_super
                             : act_span_block;
        if (packed && qkernel() == QKernel::Vnni && n_tokens >= packed_act_tile) {
            quantize_pack_acts(pool, x, n_tokens, n_in, t_acts, t_pacts,
                               !std::all_of(outs.begin(), outs.end(), is_packed), span);
            pacts = &t_pacts;
        } else {
            quantize_acts(&pool, x, n_tokens, n_in, t_acts, span);
        }
    }
    // Packed F16 and BF16 matrices over several tokens read the activations interleaved: one
    // copy, made in parallel, for every thread's range of every matrix of the group.
    const float *xi = nullptr;
    if (!acts && n_tokens > 1 && kernel_table().level != VectorLevel::Portable &&
        std::any_of(outs.begin(), outs.end(), [](const MatmulOut &o) { return is_packed_half(*o.w); })) {
        t_xi.resize(static_cast<size_t>(n_tokens * n_in));
        float *const dst = t_xi.data();
        pool.parallel_for(
            (n_tokens + packed_half_token_block - 1) / packed_half_token_block,
            [&](int64_t b0, int64_t b1) { interleave_half_acts(x, n_in, n_tokens, b0, b1, dst); },
            min_items_per_thread(n_in * packed_half_token_block));
        xi = dst;
    }
    int64_t total = 0;
    for (const MatmulOut &o : outs)
        total += o.w->ne(1);
    pool.parallel_for(
        total,
        [&](int64_t begin, int64_t end) {
            int64_t first = 0;
            for (const MatmulOut &o : outs) {
                const int64_t n_out = o.w->ne(1);
                const int64_t b = std::max(begin, first) - first, e = std::min(end, first + n_out) - first;
                if (b < e) {
                    if (acts)
                        integer_rows(*o.w, *acts, pacts, o.y, n_tokens, b, e);
                    else
                        float_rows(*o.w, x, o.y, n_tokens, b, e, xi);
                }
                first += n_out;
            }
        },
        rows_grain(n_in, n_tokens));
}

void for_rows(ThreadPool *pool, int64_t n_rows, int64_t row_work, const std::function<void(int64_t, int64_t)> &fn)
{
    if (n_rows <= 0)
        return;
    if (pool)
        pool->parallel_for(n_rows, fn, min_items_per_thread(row_work));
    else
        fn(0, n_rows);
}

void for_values(ThreadPool *pool, int64_t n, const std::function<void(int64_t, int64_t)> &fn)
{
    constexpr int64_t block = 16;
    for_rows(pool, (n + block - 1) / block, block,
             [&](int64_t b, int64_t e) { fn(b * block, std::min(n, e * block)); });
}

void rmsnorm(const float *x, const WeightView &weight, float *out, int64_t n_tokens, int64_t n,
             float eps, float weight_offset, ThreadPool *pool)
{
    std::vector<float> wrow(static_cast<size_t>(n));
    weight_row_f32(weight, 0, wrow.data());
    if (weight_offset != 0.0f)
        for (float &w : wrow)
            w += weight_offset;
    const CpuKernels &k = cpu_kernels();
    for_rows(pool, n_tokens, n, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const double ss = k.sum_squares(x + t * n, n);
            const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
            k.scale_mul(x + t * n, scale, wrow.data(), out + t * n, n);
        }
    });
}

void rope_table(RopeTable &table, int n_rot, RopeStyle style, std::span<const double> positions,
                std::span<const double> inv_freq)
{
    const int half = n_rot / 2;
    table.n_rot = n_rot;
    table.style = style;
    table.cos.resize(positions.size() * size_t(n_rot));
    table.sin.resize(positions.size() * size_t(n_rot));
    for (size_t t = 0; t < positions.size(); ++t) {
        float *c = table.cos.data() + t * size_t(n_rot), *s = table.sin.data() + t * size_t(n_rot);
        for (int i = 0; i < half; ++i) {
            const double angle = positions[t] * inv_freq[size_t(i)];
            const float ci = float(std::cos(angle)), si = float(std::sin(angle));
            // Interleaved pairs (2i, 2i+1); rotate_half pairs (i, i + n_rot/2).
            const int a = style == RopeStyle::Interleaved ? 2 * i : i;
            const int b = style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
            c[a] = c[b] = ci;
            s[a] = -si;
            s[b] = si;
        }
    }
}

void rope_apply(float *x, int64_t n_tokens, int n_heads, int head_dim, const RopeTable &table, ThreadPool *pool)
{
    const int n_rot = table.n_rot;
    const bool interleaved = table.style == RopeStyle::Interleaved;
    const CpuKernels &k = cpu_kernels();
    for_rows(pool, n_tokens, int64_t(n_heads) * n_rot, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
            for (int h = 0; h < n_heads; ++h)
                k.rope_head(x + (t * n_heads + h) * head_dim, table.cos.data() + t * n_rot,
                            table.sin.data() + t * n_rot, n_rot, interleaved);
    });
}

void rope(float *x, int64_t n_tokens, int n_heads, int head_dim, int n_rot, RopeStyle style,
          std::span<const double> positions, std::span<const double> inv_freq, ThreadPool *pool)
{
    RopeTable table;
    rope_table(table, n_rot, style, positions.first(size_t(n_tokens)), inv_freq);
    rope_apply(x, n_tokens, n_heads, head_dim, table, pool);
}

void swiglu(const float *gate, const float *up, float *out, int64_t n, ThreadPool *pool)
{
    const CpuKernels &k = cpu_kernels();
    for_values(pool, n, [&](int64_t b, int64_t e) { k.swiglu(gate + b, up + b, out + b, e - b); });
}

void geglu(const float *gate, const float *up, float *out, int64_t n, ThreadPool *pool)
{
    const CpuKernels &k = cpu_kernels();
    for_values(pool, n, [&](int64_t b, int64_t e) { k.geglu(gate + b, up + b, out + b, e - b); });
}

void softcap(float *x, float cap, int64_t n, ThreadPool *pool)
{
    const CpuKernels &k = cpu_kernels();
    for_values(pool, n, [&](int64_t b, int64_t e) { k.softcap(x + b, cap, e - b); });
}

} // namespace longscope
