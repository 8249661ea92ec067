// KV caches on the device, one per mode (ABI 3; ABI 4: keys and values with rows of their own
// sizes, as their encodings may differ): concat (a larger buffer, a copy and a free at
// every growth, like torch.cat), static (one buffer for the context limit) and vmm, after
// vAttention (Prabhu et al., 2024): address space for the limit reserved up front with
// cuMemAddressReserve, physical memory created (cuMemCreate), mapped (cuMemMap) and made
// accessible (cuMemSetAccess) one granule at a time as rows arrive, so rows never move and
// resident memory follows the tokens held. The driver API is reached only through
// cudaGetDriverEntryPointByVersion: the plugin never links libcuda. Built only into
// liblongscope-cuda.so.
#include "cuda/context_state.h"
#include "cuda/plugin_abi.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <new>
#include <vector>

namespace {

using namespace longscope::cuda;

// The driver entry points the vmm mode needs.
struct DriverApi {
    PFN_cuGetErrorString_v6000 get_error_string = nullptr;
    PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
    PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
    PFN_cuMemAddressFree_v10020 address_free = nullptr;
    PFN_cuMemCreate_v10020 create = nullptr;
    PFN_cuMemRelease_v10020 release = nullptr;
    PFN_cuMemMap_v10020 map = nullptr;
    PFN_cuMemUnmap_v10020 unmap = nullptr;
    PFN_cuMemSetAccess_v10020 set_access = nullptr;
};

// Fills `api`; on failure returns nonzero with the reason in the context.
int load_driver_api(LongscopeCudaContext *ctx, DriverApi &api)
{
    struct Entry {
        const char *name;
        void **slot;
        unsigned version;
    };
    const Entry entries[] = {
        {"cuGetErrorString", reinterpret_cast<void **>(&api.get_error_string), 6000},
        {"cuMemGetAllocationGranularity", reinterpret_cast<void **>(&api.granularity), 10020},
        {"cuMemAddressReserve", reinterpret_cast<void **>(&api.address_reserve), 10020},
        {"cuMemAddressFree", reinterpret_cast<void **>(&api.address_free), 10020},
        {"cuMemCreate", reinterpret_cast<void **>(&api.create), 10020},
        {"cuMemRelease", reinterpret_cast<void **>(&api.release), 10020},
        {"cuMemMap", reinterpret_cast<void **>(&api.map), 10020},
        {"cuMemUnmap", reinterpret_cast<void **>(&api.unmap), 10020},
        {"cuMemSetAccess", reinterpret_cast<void **>(&api.set_access), 10020},
    };
    for (const Entry &e : entries) {
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        const cudaError_t err = cudaGetDriverEntryPointByVersion(e.name, e.slot, e.version, cudaEnableDefault, &found);
        if (err != cudaSuccess)
            return fail_cuda(ctx, "cudaGetDriverEntryPointByVersion", err);
        if (found != cudaDriverEntryPointSuccess || !*e.slot)
            return fail_arg(ctx, "the NVIDIA driver does not provide %s (virtual memory management needs a newer driver)",
                            e.name);
    }
    return 0;
}

int fail_driver(LongscopeCudaContext *ctx, const DriverApi &api, const char *what, CUresult res)
{
    const char *why = nullptr;
    if (!api.get_error_string || api.get_error_string(res, &why) != CUDA_SUCCESS || !why)
        why = "unknown driver error";
    std::snprintf(ctx->error, sizeof ctx->error, "%s: %s (CUresult %d)", what, why, int(res));
    // A driver status is not a cudaError_t; keep the code nonzero and distinct from both.
    return res == CUDA_ERROR_OUT_OF_MEMORY ? int(cudaErrorMemoryAllocation) : LONGSCOPE_CUDA_ERR_ARGUMENT;
}

} // namespace

// Keys (side 0) or values (side 1) of every layer.
struct KvSide {
    int64_t row_bytes = 0;
    // VMM: address space per region, granules [0, mapped) of every region mapped, and their
    // handles [layer][granule] (mapped ones only valid).
    size_t stride = 0;
    int64_t mapped = 0;
    std::vector<CUmemGenericAllocationHandle> handles;
    size_t granules_per_region(size_t granule) const { return stride / granule; }
};

struct LongscopeCudaKv {
    int mode = 0;
    int n_layer = 0;
    int64_t limit_rows = 0;
    KvSide side[2];
    int64_t capacity = 0;    // rows writable now
    uint64_t copied = 0;

    // CONCAT and STATIC: one cudaMalloc buffer holding the key regions of every layer, then the
    // value regions, each of `rows_per_region()` rows.
    char *buffer = nullptr;

    // VMM: the key regions (side[0].stride apart) from va, then the value regions.
    DriverApi api;
    CUmemAllocationProp prop{};
    CUdeviceptr va = 0;
    size_t granule = 0;
    size_t reserved = 0;

    int64_t row_bytes_both() const { return side[0].row_bytes + side[1].row_bytes; }
    int64_t rows_per_region() const { return mode == LONGSCOPE_CUDA_KV_STATIC ? limit_rows : capacity; }
    // Byte offset of a layer's region of one side, in the buffer (rows_per_region rows per
    // region) or from va.
    size_t region_offset(int s, int layer) const
    {
        if (mode == LONGSCOPE_CUDA_KV_VMM)
            return (s == 0 ? 0 : size_t(n_layer) * side[0].stride) + size_t(layer) * side[s].stride;
        const size_t rows = size_t(rows_per_region());
        return (s == 0 ? 0 : size_t(n_layer) * rows * size_t(side[0].row_bytes)) +
               size_t(layer) * rows * size_t(side[s].row_bytes);
    }
    size_t buffer_bytes() const
    {
        return buffer ? size_t(rows_per_region()) * size_t(row_bytes_both()) * size_t(n_layer) : 0;
    }
};

namespace {

CUdeviceptr granule_address(const LongscopeCudaKv *kv, int s, int layer, int64_t g)
{
    return kv->va + CUdeviceptr(kv->region_offset(s, layer) + size_t(g) * kv->granule);
}

// Unmaps and releases granules [from, to) of every region of one side.
void vmm_unmap(LongscopeCudaKv *kv, int s, int64_t from, int64_t to)
{
    KvSide &side = kv->side[s];
    const size_t per_region = side.granules_per_region(kv->granule);
    for (int l = 0; l < kv->n_layer; ++l)
        for (int64_t g = from; g < to; ++g) {
            kv->api.unmap(granule_address(kv, s, l, g), kv->granule);
            kv->api.release(side.handles[size_t(l) * per_region + size_t(g)]);
        }
}

// Maps granules [side.mapped, want) of every region of one side; on failure undoes what this
// call mapped.
int vmm_map(LongscopeCudaContext *ctx, LongscopeCudaKv *kv, int s, int64_t want)
{
    KvSide &side = kv->side[s];
    const size_t per_region = side.granules_per_region(kv->granule);
    CUmemAccessDesc access{};
    access.location = kv->prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int l = 0; l < kv->n_layer; ++l) {
        for (int64_t g = side.mapped; g < want; ++g) {
            const CUdeviceptr at = granule_address(kv, s, l, g);
            CUmemGenericAllocationHandle h = 0;
            CUresult res = kv->api.create(&h, kv->granule, &kv->prop, 0);
            if (res == CUDA_SUCCESS) {
                res = kv->api.map(at, kv->granule, 0, h, 0);
                if (res != CUDA_SUCCESS)
                    kv->api.release(h);
            }
            if (res == CUDA_SUCCESS) {
                res = kv->api.set_access(at, kv->granule, &access, 1);
                if (res != CUDA_SUCCESS) {
                    kv->api.unmap(at, kv->granule);
                    kv->api.release(h);
                }
            }
            if (res != CUDA_SUCCESS) {
                // Undo this call: granules [mapped, g) of layer l, [mapped, want) of layers < l.
                for (int ll = 0; ll <= l; ++ll) {
                    const int64_t end = ll < l ? want : g;
                    for (int64_t gg = side.mapped; gg < end; ++gg) {
                        kv->api.unmap(granule_address(kv, s, ll, gg), kv->granule);
                        kv->api.release(side.handles[size_t(ll) * per_region + size_t(gg)]);
                    }
                }
                char what[128];
                std::snprintf(what, sizeof what, "mapping %zu bytes of KV cache (cuMemCreate/cuMemMap/cuMemSetAccess)",
                              kv->granule);
                return fail_driver(ctx, kv->api, what, res);
            }
            side.handles[size_t(l) * per_region + size_t(g)] = h;
        }
    }
    if (want > side.mapped)
        side.mapped = want;
    return 0;
}

// Granules of one side's region holding rows [0, rows).
int64_t granules_for(const LongscopeCudaKv *kv, int s, int64_t rows)
{
    return int64_t((size_t(rows) * size_t(kv->side[s].row_bytes) + kv->granule - 1) / kv->granule);
}

} // namespace

extern "C" {

LONGSCOPE_CUDA_EXPORT int longscope_cuda_copy(LongscopeCudaContext *ctx, void *device_dst, const void *device_src,
                                              size_t bytes)
{
    if (int rc = enter(ctx))
        return rc;
    OpScope scope(ctx, "copy");
    if (bytes == 0)
        return 0;
    const cudaError_t err = cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, ctx->stream);
    return err == cudaSuccess ? 0 : fail_cuda(ctx, "cudaMemcpyAsync (device to device)", err);
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_kv_create(LongscopeCudaContext *ctx, int mode, int n_layer,
                                                   int64_t limit_rows, int64_t key_row_bytes, int64_t value_row_bytes,
                                                   LongscopeCudaKv **out)
{
    if (int rc = enter(ctx))
        return rc;
    if (!out)
        return fail_arg(ctx, "kv_create: no place for the cache");
    *out = nullptr;
    if (mode != LONGSCOPE_CUDA_KV_CONCAT && mode != LONGSCOPE_CUDA_KV_STATIC && mode != LONGSCOPE_CUDA_KV_VMM)
        return fail_arg(ctx, "kv_create: unknown mode %d", mode);
    if (n_layer <= 0 || n_layer > (1 << 16) || limit_rows <= 0 || key_row_bytes <= 0 || value_row_bytes <= 0 ||
        limit_rows > (int64_t(1) << 32) || key_row_bytes > (int64_t(1) << 32) || value_row_bytes > (int64_t(1) << 32))
        return fail_arg(ctx, "kv_create: sizes out of range (%d layers, %lld rows of %lld + %lld bytes)", n_layer,
                        (long long)limit_rows, (long long)key_row_bytes, (long long)value_row_bytes);
    const unsigned __int128 total = (unsigned __int128)n_layer * (unsigned __int128)limit_rows *
                                    (unsigned __int128)(key_row_bytes + value_row_bytes);
    if (total > (unsigned __int128)(uint64_t(1) << 50))
        return fail_arg(ctx, "kv_create: %d layers of %lld rows of %lld + %lld bytes is too large", n_layer,
                        (long long)limit_rows, (long long)key_row_bytes, (long long)value_row_bytes);

    auto *kv = new (std::nothrow) LongscopeCudaKv;
    if (!kv)
        return fail_arg(ctx, "kv_create: out of host memory");
    kv->mode = mode;
    kv->n_layer = n_layer;
    kv->limit_rows = limit_rows;
    kv->side[0].row_bytes = key_row_bytes;
    kv->side[1].row_bytes = value_row_bytes;

    if (mode == LONGSCOPE_CUDA_KV_STATIC) {
        const size_t bytes = size_t(total);
        const cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&kv->buffer), bytes);
        if (err != cudaSuccess) {
            cudaGetLastError();
            delete kv;
            char what[128];
            std::snprintf(what, sizeof what, "cudaMalloc of %zu bytes for the static KV cache", bytes);
            return fail_cuda(ctx, what, err);
        }
        kv->capacity = limit_rows;
    } else if (mode == LONGSCOPE_CUDA_KV_VMM) {
        if (int rc = load_driver_api(ctx, kv->api)) {
            delete kv;
            return rc;
        }
        kv->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        kv->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        kv->prop.location.id = ctx->device;
        CUresult res = kv->api.granularity(&kv->granule, &kv->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (res != CUDA_SUCCESS || kv->granule == 0) {
            const int rc = fail_driver(ctx, kv->api, "cuMemGetAllocationGranularity", res);
            delete kv;
            return rc ? rc : LONGSCOPE_CUDA_ERR_ARGUMENT;
        }
        for (KvSide &side : kv->side) {
            const size_t region = size_t(limit_rows) * size_t(side.row_bytes);
            side.stride = (region + kv->granule - 1) / kv->granule * kv->granule;
        }
        kv->reserved = (kv->side[0].stride + kv->side[1].stride) * size_t(n_layer);
        res = kv->api.address_reserve(&kv->va, kv->reserved, 0, 0, 0);
        if (res != CUDA_SUCCESS) {
            char what[128];
            std::snprintf(what, sizeof what, "cuMemAddressReserve of %zu bytes for the vmm KV cache", kv->reserved);
            const int rc = fail_driver(ctx, kv->api, what, res);
            delete kv;
            return rc;
        }
        try {
            for (KvSide &side : kv->side)
                side.handles.assign(size_t(n_layer) * side.granules_per_region(kv->granule), 0);
        } catch (const std::bad_alloc &) {
            kv->api.address_free(kv->va, kv->reserved);
            delete kv;
            return fail_arg(ctx, "kv_create: out of host memory for the granule table");
        }
    }
    *out = kv;
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_kv_reserve(LongscopeCudaContext *ctx, LongscopeCudaKv *kv, int64_t rows)
{
    if (int rc = enter(ctx))
        return rc;
    if (!kv)
        return fail_arg(ctx, "kv_reserve: no cache");
    if (rows < 0 || rows > kv->limit_rows)
        return fail_arg(ctx, "kv_reserve: %lld rows outside the cache's limit of %lld", (long long)rows,
                        (long long)kv->limit_rows);
    if (rows <= kv->capacity)
        return 0;
    switch (kv->mode) {
    case LONGSCOPE_CUDA_KV_CONCAT: {
        const int64_t old_rows = kv->capacity;
        const size_t fresh_bytes = size_t(rows) * size_t(kv->row_bytes_both()) * size_t(kv->n_layer);
        char *fresh = nullptr;
        cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&fresh), fresh_bytes);
        if (err != cudaSuccess) {
            cudaGetLastError();
            char what[128];
            std::snprintf(what, sizeof what, "cudaMalloc of %zu bytes for the concat KV cache", fresh_bytes);
            return fail_cuda(ctx, what, err);
        }
        if (kv->buffer && old_rows > 0) {
            // Each side's regions in one strided copy: n_layer rows of old_rows * row_bytes, from
            // regions old_rows rows apart into regions `rows` rows apart.
            for (int s = 0; s < 2; ++s) {
                const size_t rb = size_t(kv->side[s].row_bytes);
                const size_t src_off = s == 0 ? 0 : size_t(kv->n_layer) * size_t(old_rows) * size_t(kv->side[0].row_bytes);
                const size_t dst_off = s == 0 ? 0 : size_t(kv->n_layer) * size_t(rows) * size_t(kv->side[0].row_bytes);
                err = cudaMemcpy2DAsync(fresh + dst_off, size_t(rows) * rb, kv->buffer + src_off, size_t(old_rows) * rb,
                                        size_t(old_rows) * rb, size_t(kv->n_layer), cudaMemcpyDeviceToDevice,
                                        ctx->stream);
                if (err != cudaSuccess) {
                    // Queued copies may still read the old buffer and write the new one: wait
                    // before freeing the new one (the old one stays in use).
                    cudaStreamSynchronize(ctx->stream);
                    cudaFree(fresh);
                    return fail_cuda(ctx, "cudaMemcpy2DAsync (concat KV growth)", err);
                }
            }
            kv->copied += uint64_t(old_rows) * uint64_t(kv->row_bytes_both()) * uint64_t(kv->n_layer);
        }
        if (kv->buffer) {
            // cudaFree waits for the work queued on the old buffer (the copies above included).
            err = cudaFree(kv->buffer);
            if (err != cudaSuccess) {
                kv->buffer = fresh; // the copies were queued; the new buffer holds the rows
                kv->capacity = rows;
                return fail_cuda(ctx, "cudaFree (concat KV growth)", err);
            }
        }
        kv->buffer = fresh;
        kv->capacity = rows;
        return 0;
    }
    case LONGSCOPE_CUDA_KV_VMM: {
        int64_t cap = kv->limit_rows;
        for (int s = 0; s < 2; ++s) {
            if (int rc = vmm_map(ctx, kv, s, granules_for(kv, s, rows)))
                return rc; // the other side may keep granules it mapped: they are accounted for
            const int64_t held = int64_t(size_t(kv->side[s].mapped) * kv->granule / size_t(kv->side[s].row_bytes));
            cap = held < cap ? held : cap;
        }
        kv->capacity = cap;
        return 0;
    }
    default: // STATIC holds every row from the start
        return 0;
    }
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_kv_layer(LongscopeCudaContext *ctx, LongscopeCudaKv *kv, int layer,
                                                  void **keys, void **values)
{
    if (int rc = enter(ctx))
        return rc;
    if (!kv || layer < 0 || layer >= kv->n_layer)
        return fail_arg(ctx, "kv_layer: layer %d outside the cache", layer);
    char *k = nullptr, *v = nullptr;
    if (kv->mode == LONGSCOPE_CUDA_KV_VMM) {
        k = reinterpret_cast<char *>(kv->va) + kv->region_offset(0, layer);
        v = reinterpret_cast<char *>(kv->va) + kv->region_offset(1, layer);
    } else if (kv->buffer) {
        k = kv->buffer + kv->region_offset(0, layer);
        v = kv->buffer + kv->region_offset(1, layer);
    }
    if (keys)
        *keys = k;
    if (values)
        *values = v;
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_kv_info(LongscopeCudaContext *ctx, const LongscopeCudaKv *kv,
                                                 LongscopeCudaKvInfo *info)
{
    if (int rc = enter(ctx))
        return rc;
    if (!kv || !info)
        return fail_arg(ctx, "kv_info: no cache or no place for the answer");
    *info = LongscopeCudaKvInfo{};
    info->mode = kv->mode;
    info->capacity_rows = kv->capacity;
    info->copied_bytes = kv->copied;
    if (kv->mode == LONGSCOPE_CUDA_KV_VMM) {
        info->reserved_bytes = kv->reserved;
        for (const KvSide &side : kv->side)
            info->resident_bytes += uint64_t(side.mapped) * kv->granule * uint64_t(kv->n_layer);
        info->granule_bytes = kv->granule;
    } else {
        info->reserved_bytes = kv->buffer_bytes();
        info->resident_bytes = info->reserved_bytes;
    }
    return 0;
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_kv_clear(LongscopeCudaContext *ctx, LongscopeCudaKv *kv)
{
    if (int rc = enter(ctx))
        return rc;
    if (!kv)
        return fail_arg(ctx, "kv_clear: no cache");
    if (kv->mode == LONGSCOPE_CUDA_KV_STATIC)
        return 0;
    // Queued work may still read the rows.
    const cudaError_t err = cudaStreamSynchronize(ctx->stream);
    if (err != cudaSuccess)
        return fail_cuda(ctx, "cudaStreamSynchronize", err);
    if (kv->mode == LONGSCOPE_CUDA_KV_CONCAT) {
        const cudaError_t ferr = kv->buffer ? cudaFree(kv->buffer) : cudaSuccess;
        kv->buffer = nullptr;
        kv->capacity = 0;
        return ferr == cudaSuccess ? 0 : fail_cuda(ctx, "cudaFree (concat KV)", ferr);
    }
    for (int s = 0; s < 2; ++s) {
        vmm_unmap(kv, s, 0, kv->side[s].mapped);
        kv->side[s].mapped = 0;
    }
    kv->capacity = 0;
    return 0;
}

LONGSCOPE_CUDA_EXPORT void longscope_cuda_kv_release(LongscopeCudaContext *ctx, LongscopeCudaKv *kv)
{
    if (!kv)
        return;
    if (ctx) {
        cudaSetDevice(ctx->device);
        cudaStreamSynchronize(ctx->stream);
    }
    if (kv->mode == LONGSCOPE_CUDA_KV_VMM) {
        if (kv->va) {
            for (int s = 0; s < 2; ++s)
                vmm_unmap(kv, s, 0, kv->side[s].mapped);
            kv->api.address_free(kv->va, kv->reserved);
        }
    } else if (kv->buffer) {
        cudaFree(kv->buffer);
    }
    delete kv;
}
}
