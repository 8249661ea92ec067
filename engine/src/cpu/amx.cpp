#include "cpu/amx.h"

#include "cpu/ops.h"
#include "cpu/packed.h"
#include "cpu/quant.h"
#include "cpu/thread_pool.h"
#include "cpu/transpose16.h"
#include "longscope/types.h"
#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

// GCC 12's AVX-512 headers trip its own uninitialised-value warnings inside the conversion
// intrinsics; the values are defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace longscope {

namespace {

constexpr int64_t k_tile = 16;          // rows, tokens and input pairs per tile
constexpr int64_t k_chunk = 32;         // inputs per tile (16 pairs of BF16)
constexpr int64_t k_block = 512;        // BF16 values per tile (1 KiB)
constexpr int64_t k_panel = 2 * k_tile; // weight rows per row pair (two tiles); panels hold several

#if defined(__x86_64__)

bool ask_for_tiles()
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    if (!amx_bf16 || !amx_tile || !__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) // OSXSAVE
        return false;
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    constexpr unsigned xtilecfg = 1u << 17, xtiledata = 1u << 18;
    if ((lo & (xtilecfg | xtiledata)) != (xtilecfg | xtiledata))
        return false;
    // Linux grants the tile state per process, on request (since 5.16).
    constexpr long arch_get_xcomp_perm = 0x1022, arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0)
        return false;
    unsigned long granted = 0;
    return syscall(SYS_arch_prctl, arch_get_xcomp_perm, &granted) == 0 && (granted & xtiledata) != 0;
}

#define LS_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

struct TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t bytes_per_row[16] = {};
    uint8_t rows[16] = {};
};

// Eight tiles of 16 rows by 64 bytes: 0-3 accumulators, 4-5 weights, 6-7 activations.
LS_AMX void configure_tiles()
{
    TileConfig c;
    for (int i = 0; i < 8; ++i) {
        c.bytes_per_row[i] = 64;
        c.rows[i] = 16;
    }
    _tile_loadconfig(&c);
}

LS_AMX void release_tiles() { _tile_release(); }

// hi = bf16(v) (nearest even), lo = bf16(v - hi): 32 values each, as one register of 32 BF16.
LS_AMX inline void split32(const float *v, __m512i &hi, __m512i &lo)
{
    const __m512 a = _mm512_loadu_ps(v), b = _mm512_loadu_ps(v + 16);
    const __m512bh h = _mm512_cvtne2ps_pbh(b, a);
    hi = __m512i(h);
    // Back to float: each BF16 is a float's upper half.
    const __m512i hv = hi;
    const __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hv)), 16));
    const __m512 hb =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hv, 1)), 16));
    lo = __m512i(_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha)));
}

LS_AMX inline __m512i round32(const float *v)
{
    return __m512i(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(v + 16), _mm512_loadu_ps(v)));
}

// The activations of token tile `tile` (tokens 16 tile .. 16 tile + 15, zeros past n_tokens;
// token t's n_in inputs at x + t * ldx) in tile layout: block (term, tile, chunk) holds row
// p = input pair, column t = token, the pair (x_t[32 chunk + 2p], x_t[32 chunk + 2p + 1]) in
// each 32-bit element.
LS_AMX void acts_tile(const float *x, int64_t ldx, int64_t n_tokens, int64_t n_in, int64_t tile, int terms,
                      uint16_t *out, size_t term_stride)
{
    const int64_t n_chunks = n_in / k_chunk;
    const int64_t t0 = tile * k_tile;
    const int nt = int(std::min<int64_t>(k_tile, n_tokens - t0));
    for (int64_t c = 0; c < n_chunks; ++c) {
        __m512i hi[16], lo[16];
        for (int t = 0; t < 16; ++t) {
            if (t < nt) {
                const float *v = x + (t0 + t) * ldx + c * k_chunk;
                if (terms == 2)
                    split32(v, hi[t], lo[t]);
                else
                    hi[t] = round32(v);
            } else {
                hi[t] = lo[t] = _mm512_setzero_si512();
            }
        }
        uint16_t *dst = out + (size_t(tile) * size_t(n_chunks) + size_t(c)) * k_block;
        transpose16(hi);
        for (int p = 0; p < 16; ++p)
            _mm512_storeu_si512(dst + p * 32, hi[p]);
        if (terms == 2) {
            transpose16(lo);
            for (int p = 0; p < 16; ++p)
                _mm512_storeu_si512(dst + term_stride + p * 32, lo[p]);
        }
    }
}

// One row (n_in floats) into the panel's tile layout: block (term, row tile, chunk), row r % 16,
// 32 BF16 per chunk.
LS_AMX void panel_row(const float *f, int64_t n_in, int64_t r, int terms, uint16_t *panel, size_t term_stride)
{
    const int64_t n_chunks = n_in / k_chunk;
    uint16_t *dst = panel + size_t(r / k_tile) * size_t(n_chunks) * k_block + size_t(r % k_tile) * k_chunk;
    for (int64_t c = 0; c < n_chunks; ++c) {
        __m512i hi, lo;
        if (terms == 2) {
            split32(f + c * k_chunk, hi, lo);
            _mm512_storeu_si512(dst + term_stride + c * k_block, lo);
        } else {
            hi = round32(f + c * k_chunk);
        }
        _mm512_storeu_si512(dst + c * k_block, hi);
    }
}

LS_AMX inline void prefetch_tile(const uint16_t *p)
{
    for (int line = 0; line < 16; ++line)
        _mm_prefetch(reinterpret_cast<const char *>(p + line * 32), _MM_HINT_T0);
}

// The sums of the BF16 terms taken: weight term w times activation term x.
struct Pass {
    int w, x;
};

// Where a row pair's and a token pair's tiles are, and what to sum: the weights' terms are
// w_term apart and a pair's second row tile w_rows after its first; the activations' terms
// x_term apart and a pair's second token tile x_tile after its first; a tile every k_block
// values along the inputs.
struct Operands {
    size_t w_term, w_rows, x_term, x_tile;
    int64_t n_chunks;
    const Pass *passes;
    int n_passes, weight_terms, act_terms;
};

// The products of NA row tiles by NB token tiles over every chunk and pass, stored into c as
// [NA][NB] blocks of 16 x 16 floats (row r of a block: weight row, column: token). The passes
// come ordered so that consecutive ones share an operand, which is loaded once. With a
// `stride`, the blocks go into a matrix of rows that many bytes apart instead. The weights'
// tiles two chunks ahead are prefetched into L1 (a tile load from L2 stalls the products that
// wait for it: one core here, 0.8 TFLOP/s from L2 without, 1.4 with), and the activations'
// where `prefetch_acts` (the first row pair to read them). Each tile is loaded just before the
// first product that needs it, so the products start while the later loads run (loading all
// four first: TinyLlama prefill of 512 tokens on two cores of the AMX Xeon, alternating, Q8_0
// 537-574 -> 571-612 tokens/s, Q4_K_M 553-572 -> 592-607, F16 293-306 -> 302-323; a further
// step, each chunk's loads issued during the chunk before, read no faster). The products of
// each accumulator run in the same order either way: the same bits.
template <int NA, int NB>
LS_AMX void tile_product(const uint16_t *panel, const uint16_t *acts, const Operands &o, bool prefetch_acts, float *c,
                         size_t stride = 0)
{
    _tile_zero(0);
    if constexpr (NB == 2)
        _tile_zero(1);
    if constexpr (NA == 2)
        _tile_zero(2);
    if constexpr (NA == 2 && NB == 2)
        _tile_zero(3);
    for (int64_t ch = 0; ch < o.n_chunks; ++ch) {
        for (int t = 0; t < o.weight_terms; ++t)
            for (int i = 0; i < NA; ++i)
                prefetch_tile(panel + t * o.w_term + i * o.w_rows + size_t(ch + 2) * k_block);
        if (prefetch_acts)
            for (int t = 0; t < o.act_terms; ++t)
                for (int j = 0; j < NB; ++j)
                    prefetch_tile(acts + t * o.x_term + j * o.x_tile + size_t(ch + 2) * k_block);
        int loaded_w = -1, loaded_x = -1;
        for (int p = 0; p < o.n_passes; ++p) {
            const bool new_w = o.passes[p].w != loaded_w, new_x = o.passes[p].x != loaded_x;
            const uint16_t *a = panel + o.passes[p].w * o.w_term + size_t(ch) * k_block;
            const uint16_t *b = acts + o.passes[p].x * o.x_term + size_t(ch) * k_block;
            loaded_w = o.passes[p].w;
            loaded_x = o.passes[p].x;
            if (new_w)
                _tile_loadd(4, a, 64);
            if (new_x)
                _tile_loadd(6, b, 64);
            _tile_dpbf16ps(0, 4, 6);
            if constexpr (NB == 2) {
                if (new_x)
                    _tile_loadd(7, b + o.x_tile, 64);
                _tile_dpbf16ps(1, 4, 7);
            }
            if constexpr (NA == 2) {
                if (new_w)
                    _tile_loadd(5, a + o.w_rows, 64);
                _tile_dpbf16ps(2, 5, 6);
                if constexpr (NB == 2)
                    _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    if (stride == 0) {
        _tile_stored(0, c, 64);
        if constexpr (NB == 2)
            _tile_stored(1, c + 256, 64);
        if constexpr (NA == 2)
            _tile_stored(2, c + NB * 256, 64);
        if constexpr (NA == 2 && NB == 2)
            _tile_stored(3, c + 768, 64);
        return;
    }
    // Into a matrix `stride` bytes per row: block (i, j) at row 16 i, column 16 j.
    const size_t down = 16 * stride / sizeof(float);
    _tile_stored(0, c, stride);
    if constexpr (NB == 2)
        _tile_stored(1, c + 16, stride);
    if constexpr (NA == 2)
        _tile_stored(2, c + down, stride);
    if constexpr (NA == 2 && NB == 2)
        _tile_stored(3, c + down + 16, stride);
}

// y[t * ldy + r] from a block of 16 x 16 (row r, token t), nr rows and nt tokens of it: the
// block transposed in registers, then one (masked) store per token.
LS_AMX void store_block(const float *c, int nr, int nt, float *y, int64_t ldy)
{
    __m512i v[16];
    for (int r = 0; r < 16; ++r)
        v[r] = _mm512_loadu_si512(c + 16 * r);
    transpose16(v);
    const __mmask16 rows = __mmask16((1u << nr) - 1);
    for (int t = 0; t < nt; ++t)
        _mm512_mask_storeu_ps(y + t * ldy, rows, _mm512_castsi512_ps(v[t]));
}

struct Acts {
    AlignedVector<uint16_t> buf;
    int terms = 0;
    int64_t n_tiles = 0, n_chunks = 0;
    size_t term_stride() const { return size_t(n_tiles * n_chunks * k_block); }
};

thread_local Acts t_amx_acts;

// Rows per panel: a multiple of 32 whose BF16 terms fill about 1 MiB, half the L2 cache of the
// cores with AMX: the panel stays there while every token tile pair streams past it (each pair
// is read once per panel, so larger panels read the activations fewer times).
int64_t panel_rows(int64_t n_in, int terms)
{
    const int64_t bytes_per_row = n_in * 2 * terms;
    return std::clamp<int64_t>((int64_t(1) << 20) / bytes_per_row / k_panel * k_panel, k_panel, 256);
}

LS_AMX void product_rows(const WeightView &w, float *y, const Acts &acts, int64_t n_tokens, AmxTerms terms,
                         int64_t row_begin, int64_t row_end)
{
    const int64_t n_in = w.ne(0), n_out = w.ne(1);
    const int64_t n_chunks = n_in / k_chunk;
    const int64_t rows = panel_rows(n_in, terms.weight);
    const size_t w_term = size_t(rows / k_tile * n_chunks * k_block), w_rows = size_t(n_chunks) * k_block;
    // The panel and the row's floats in buffers each thread keeps between calls (rows of a
    // last, partial row tile past the panel's rows keep what they held: their products are
    // never stored).
    thread_local AlignedVector<uint16_t> panel;
    thread_local AlignedVector<float> f;
    panel.resize(std::max(panel.size(), w_term * size_t(terms.weight)));
    f.resize(std::max(f.size(), static_cast<size_t>(n_in)));
    alignas(64) float c[4 * 256];
    // (w0, x1), (w0, x0), (w1, x0): each pass shares one operand with the one before.
    Pass ps[3];
    int n_passes = 0;
    if (terms.act == 2)
        ps[n_passes++] = {0, 1};
    ps[n_passes++] = {0, 0};
    if (terms.weight == 2)
        ps[n_passes++] = {1, 0};
    const Operands ops{w_term, w_rows, acts.term_stride(), size_t(n_chunks) * k_block, n_chunks, ps, n_passes,
                       terms.weight, terms.act};
    configure_tiles();
    for (int64_t p0 = row_begin; p0 < row_end; p0 += rows) {
        const int64_t np = std::min(rows, row_end - p0);
        for (int64_t r = 0; r < np;) {
            // A packed group of sixteen rows a block at a time where its type has a kernel for it
            // (the same bits as row by row: tst_quant), else a row at a time.
            if (w.cpu_packed && terms.weight == 1 && (p0 + r) % 16 == 0 && r + 16 <= np &&
                widen_packed_group_bf16(w.type, w.cpu_packed, n_in, (p0 + r) / 16,
                                        panel.data() + size_t(r / k_tile) * size_t(n_chunks) * k_block, k_block)) {
                r += 16;
                continue;
            }
            weight_row_f32(w, p0 + r, f.data());
            panel_row(f.data(), n_in, r, terms.weight, panel.data(), w_term);
            ++r;
        }
        // Every token pair past the panel, row pair by row pair (the first row pair brings the
        // activations' tiles into L1 for the others).
        for (int64_t tile = 0; tile < acts.n_tiles; tile += 2) {
            const int nb = tile + 1 < acts.n_tiles ? 2 : 1;
            const uint16_t *b = acts.buf.data() + size_t(tile) * ops.x_tile;
            for (int64_t q = 0; q < np; q += k_panel) {
                const int nr = int(std::min<int64_t>(k_panel, np - q));
                const int na = nr > k_tile ? 2 : 1;
                const uint16_t *a = panel.data() + size_t(q / k_panel) * 2 * w_rows;
                if (na == 2 && nb == 2)
                    tile_product<2, 2>(a, b, ops, q == 0, c);
                else if (na == 2)
                    tile_product<2, 1>(a, b, ops, q == 0, c);
                else if (nb == 2)
                    tile_product<1, 2>(a, b, ops, q == 0, c);
                else
                    tile_product<1, 1>(a, b, ops, q == 0, c);
                for (int i = 0; i < na; ++i)
                    for (int j = 0; j < nb; ++j) {
                        const int64_t t0 = (tile + j) * k_tile;
                        const int nt = int(std::min<int64_t>(k_tile, n_tokens - t0));
                        const int nrows = std::min<int>(int(k_tile), nr - i * int(k_tile));
                        store_block(c + (i * nb + j) * 256, nrows, nt, y + t0 * n_out + p0 + q + i * k_tile, n_out);
                    }
            }
        }
    }
    release_tiles();
}

// Sixteen BF16 as the upper halves of sixteen 32-bit lanes (as floats: their values).
LS_AMX inline __m512i widen(__m256bh h) { return _mm512_slli_epi32(_mm512_cvtepu16_epi32(__m256i(h)), 16); }

// The second operand from the columns of x (k rows, row i at x + i * ldx; n columns, a
// multiple of 16): block (term, column tile, chunk) holds row p = row pair, column j = column,
// the pair (x[32 chunk + 2p][16 tile + j], x[32 chunk + 2p + 1][16 tile + j]); rows past k are
// zeros.
LS_AMX void column_tiles(const float *x, int64_t ldx, int64_t k, int64_t n, int terms, AmxMatrix &out)
{
    const int64_t n_tiles = n / k_tile, n_chunks = out.n_chunks;
    const size_t ts = out.term_stride();
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t c = 0; c < n_chunks; ++c)
        for (int p = 0; p < 16; ++p) {
            const int64_t r0 = c * k_chunk + 2 * p;
            const float *x0 = r0 < k ? x + r0 * ldx : nullptr, *x1 = r0 + 1 < k ? x + (r0 + 1) * ldx : nullptr;
            for (int64_t j = 0; j < n_tiles; ++j) {
                const __m512 a = x0 ? _mm512_loadu_ps(x0 + j * k_tile) : zero;
                const __m512 b = x1 ? _mm512_loadu_ps(x1 + j * k_tile) : zero;
                const __m256bh ha = _mm512_cvtneps_pbh(a), hb = _mm512_cvtneps_pbh(b);
                uint16_t *dst = out.buf.data() + size_t(j * n_chunks + c) * k_block + p * 32;
                _mm512_storeu_si512(dst, _mm512_or_si512(_mm512_srli_epi32(widen(ha), 16), widen(hb)));
                if (terms == 2) {
                    const __m256bh la = _mm512_cvtneps_pbh(_mm512_sub_ps(a, _mm512_castsi512_ps(widen(ha))));
                    const __m256bh lb = _mm512_cvtneps_pbh(_mm512_sub_ps(b, _mm512_castsi512_ps(widen(hb))));
                    _mm512_storeu_si512(dst + ts, _mm512_or_si512(_mm512_srli_epi32(widen(la), 16), widen(lb)));
                }
            }
        }
}

// c[i * ldc + j] = row i of a . column j of b, for whole tiles: i < 16 a.n_tiles, j < 16 b.n_tiles
// (rows and columns past a.n and b.n hold what the padding gives). Straight from the
// accumulator tiles into c.
LS_AMX void small_product(const AmxMatrix &a, const AmxMatrix &b, float *c, int64_t ldc)
{
    Pass ps[3];
    int n_passes = 0;
    if (b.terms == 2)
        ps[n_passes++] = {0, 1};
    ps[n_passes++] = {0, 0};
    if (a.terms == 2)
        ps[n_passes++] = {1, 0};
    const size_t w_rows = size_t(a.n_chunks) * k_block, x_tile = size_t(b.n_chunks) * k_block;
    const Operands ops{a.term_stride(), w_rows, b.term_stride(), x_tile, a.n_chunks, ps, n_passes, a.terms, b.terms};
    const size_t stride = size_t(ldc) * sizeof(float);
    configure_tiles();
    for (int64_t rt = 0; rt < a.n_tiles; rt += 2) {
        const int na = rt + 1 < a.n_tiles ? 2 : 1;
        const uint16_t *pa = a.buf.data() + size_t(rt) * w_rows;
        for (int64_t ct = 0; ct < b.n_tiles; ct += 2) {
            const int nb = ct + 1 < b.n_tiles ? 2 : 1;
            const uint16_t *pb = b.buf.data() + size_t(ct) * x_tile;
            float *dst = c + rt * k_tile * ldc + ct * k_tile;
            if (na == 2 && nb == 2)
                tile_product<2, 2>(pa, pb, ops, false, dst, stride);
            else if (na == 2)
                tile_product<2, 1>(pa, pb, ops, false, dst, stride);
            else if (nb == 2)
                tile_product<1, 2>(pa, pb, ops, false, dst, stride);
            else
                tile_product<1, 1>(pa, pb, ops, false, dst, stride);
        }
    }
    release_tiles();
}

// Four independent accumulators cover the instruction's latency (one core of the Xeon in
// docs/cpu-kernels.md: 3.1 TFLOP/s).
LS_AMX float probe_loop(int64_t iterations)
{
    alignas(64) uint16_t ones[k_block];
    std::fill(ones, ones + k_block, uint16_t(0x3c00)); // bf16 1/128: sums stay exact and finite
    alignas(64) float out[256];
    configure_tiles();
    _tile_loadd(4, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t i = 0; i < iterations; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(2, 4, 6);
        _tile_dpbf16ps(3, 4, 6);
    }
    _tile_stored(3, out, 64);
    release_tiles();
    return out[0] + out[255];
}

#endif

} // namespace

float amx_bf16_probe(int64_t iterations)
{
#if defined(__x86_64__)
    return probe_loop(iterations);
#else
    (void)iterations;
    return 0;
#endif
}

bool amx_bf16_usable()
{
#if defined(__x86_64__)
    static const bool usable = ask_for_tiles();
    return usable;
#else
    return false;
#endif
}

AmxTerms amx_default_terms(int dtype)
{
    switch (DType(dtype)) {
    case DType::F32:
    case DType::F16: return {2, 2};
    case DType::BF16: return {1, 2};
    default: return {1, 1};
    }
}

void AmxMatrix::shape(int64_t n_, int64_t k, int terms_)
{
    n = n_;
    terms = terms_;
    n_tiles = (n + k_tile - 1) / k_tile;
    n_chunks = (k + k_chunk - 1) / k_chunk;
    const size_t need = term_stride() * size_t(terms);
    if (buf.size() < need)
        buf.resize(need);
}

size_t AmxMatrix::term_stride() const { return size_t(n_tiles * n_chunks * k_block); }

void amx_pack_rows(const float *x, int64_t ldx, int64_t n, int64_t k, int terms, AmxMatrix &out)
{
    out.shape(n, k, terms);
#if defined(__x86_64__)
    for (int64_t i = 0; i < n; ++i)
        panel_row(x + i * ldx, k, i, terms, out.buf.data(), out.term_stride());
#else
    (void)x, (void)ldx;
#endif
}

void amx_pack_row_columns(const float *x, int64_t ldx, int64_t n, int64_t k, int terms, AmxMatrix &out)
{
    out.shape(n, k, terms);
#if defined(__x86_64__)
    for (int64_t t = 0; t < out.n_tiles; ++t)
        acts_tile(x, ldx, n, k, t, terms, out.buf.data(), out.term_stride());
#else
    (void)x, (void)ldx;
#endif
}

void amx_pack_columns(const float *x, int64_t ldx, int64_t k, int64_t n, int terms, AmxMatrix &out)
{
    out.shape(n, k, terms);
#if defined(__x86_64__)
    column_tiles(x, ldx, k, n, terms, out);
#else
    (void)x, (void)ldx;
#endif
}

void amx_product(const AmxMatrix &a, const AmxMatrix &b, float *c, int64_t ldc)
{
#if defined(__x86_64__)
    small_product(a, b, c, ldc);
#else
    (void)a, (void)b, (void)c, (void)ldc;
#endif
}

uint64_t amx_scratch_bytes() { return 2 * uint64_t(t_amx_acts.buf.capacity()); }

void matmul_amx(ThreadPool &pool, std::span<const WeightView *const> ws, std::span<float *const> ys,
                const float *x, int64_t n_tokens, bool one_term)
{
#if defined(__x86_64__)
    if (ws.empty() || n_tokens <= 0)
        return;
    const int64_t n_in = ws[0]->ne(0);
    Acts &acts = t_amx_acts;
    acts.terms = 1;
    for (const WeightView *w : ws)
        acts.terms = std::max(acts.terms, one_term ? 1 : amx_default_terms(int(w->type)).act);
    acts.n_tiles = (n_tokens + k_tile - 1) / k_tile;
    acts.n_chunks = n_in / k_chunk;
    acts.buf.resize(acts.term_stride() * size_t(acts.terms));
    Acts *const a = &acts; // the workers reach the calling thread's buffer through this
    pool.parallel_for(
        a->n_tiles,
        [&](int64_t b, int64_t e) {
            for (int64_t tile = b; tile < e; ++tile)
                acts_tile(x, n_in, n_tokens, n_in, tile, a->terms, a->buf.data(), a->term_stride());
        },
        std::max<int64_t>(1, min_items_per_thread(k_tile * n_in)));
    for (size_t i = 0; i < ws.size(); ++i) {
        const WeightView &w = *ws[i];
        AmxTerms terms = one_term ? AmxTerms{1, 1} : amx_default_terms(int(w.type));
        terms.act = std::min(terms.act, a->terms);
        // Pieces of whole row pairs (32 rows), a thread's piece in panels of panel_rows.
        const int64_t n_out = w.ne(1), n_pairs = (n_out + k_panel - 1) / k_panel;
        float *const y = ys[i];
        pool.parallel_for(
            n_pairs,
            [&](int64_t b, int64_t e) { product_rows(w, y, *a, n_tokens, terms, b * k_panel, std::min(n_out, e * k_panel)); },
            std::max<int64_t>(1, min_items_per_thread(k_panel * n_in * n_tokens)));
    }
#else
    (void)pool, (void)ws, (void)ys, (void)x, (void)n_tokens, (void)one_term;
#endif
}

} // namespace longscope
