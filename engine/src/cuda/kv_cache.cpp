// KV caches on the device, one per mode (ABI 3): concat (a larger buffer, a copy and a free at
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

struct LongscopeCudaKv {
    int mode = 0;
    int n_regions = 0;       // 2 * n_layer: keys of layer l at 2l, values at 2l + 1
    int64_t limit_rows = 0;
    int64_t row_bytes = 0;
    int64_t capacity = 0;    // rows writable now
    uint64_t copied = 0;

    // CONCAT and STATIC: one cudaMalloc buffer, region r at base + r * capacity * row_bytes
    // (CONCAT) or r * limit_rows * row_bytes (STATIC).
    char *buffer = nullptr;

    // VMM: region r at va + r * stride; granules [0, mapped) of every region are mapped.
    DriverApi api;
    CUmemAllocationProp prop{};
    CUdeviceptr va = 0;
    size_t stride = 0;
    size_t granule = 0;
    size_t reserved = 0;
    int64_t mapped = 0;                                 // granules mapped per region
    std::vector<CUmemGenericAllocationHandle> handles; // [region][granule], mapped ones only valid

    size_t region_bytes_now() const
    {
        return mode == LONGSCOPE_CUDA_KV_STATIC ? size_t(limit_rows * row_bytes) : size_t(capacity * row_bytes);
    }
};

namespace {

// Unmaps and releases granules [from, to) of every region.
void vmm_unmap(LongscopeCudaKv *kv, int64_t from, int64_t to)
{
    for (int r = 0; r < kv->n_regions; ++r)
        for (int64_t g = from; g < to; ++g) {
            const CUdeviceptr at = kv->va + CUdeviceptr(size_t(r) * kv->stride + size_t(g) * kv->granule);
            kv->api.unmap(at, kv->granule);
            kv->api.release(kv->handles[size_t(r) * (kv->stride / kv->granule) + size_t(g)]);
        }
}

// Maps granules [kv->mapped, want) of every region; on failure undoes what it mapped.
int vmm_map(LongscopeCudaContext *ctx, LongscopeCudaKv *kv, int64_t want)
{
    const size_t per_region = kv->stride / kv->granule;
    CUmemAccessDesc access{};
    access.location = kv->prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int r = 0; r < kv->n_regions; ++r) {
        for (int64_t g = kv->mapped; g < want; ++g) {
            const CUdeviceptr at = kv->va + CUdeviceptr(size_t(r) * kv->stride + size_t(g) * kv->granule);
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
                // Undo this call: granules [mapped, g) of region r, [mapped, want) of regions < r.
                for (int rr = 0; rr <= r; ++rr) {
                    const int64_t end = rr < r ? want : g;
                    for (int64_t gg = kv->mapped; gg < end; ++gg) {
                        const CUdeviceptr a2 =
                            kv->va + CUdeviceptr(size_t(rr) * kv->stride + size_t(gg) * kv->granule);
                        kv->api.unmap(a2, kv->granule);
                        kv->api.release(kv->handles[size_t(rr) * per_region + size_t(gg)]);
                    }
                }
                char what[128];
                std::snprintf(what, sizeof what, "mapping %zu bytes of KV cache (cuMemCreate/cuMemMap/cuMemSetAccess)",
                              kv->granule);
                return fail_driver(ctx, kv->api, what, res);
            }
            kv->handles[size_t(r) * per_region + size_t(g)] = h;
        }
    }
    kv->mapped = want;
    return 0;
}

} // namespace

extern "C" {

LONGSCOPE_CUDA_EXPORT int longscope_cuda_copy(LongscopeCudaContext *ctx, void *device_dst, const void *device_src,
                                              size_t bytes)
{
    if (int rc = enter(ctx))
        return rc;
    if (bytes == 0)
        return 0;
    const cudaError_t err = cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, ctx->stream);
    return err == cudaSuccess ? 0 : fail_cuda(ctx, "cudaMemcpyAsync (device to device)", err);
}

LONGSCOPE_CUDA_EXPORT int longscope_cuda_kv_create(LongscopeCudaContext *ctx, int mode, int n_layer,
                                                   int64_t limit_rows, int64_t row_bytes, LongscopeCudaKv **out)
{
    if (int rc = enter(ctx))
        return rc;
    if (!out)
        return fail_arg(ctx, "kv_create: no place for the cache");
    *out = nullptr;
    if (mode != LONGSCOPE_CUDA_KV_CONCAT && mode != LONGSCOPE_CUDA_KV_STATIC && mode != LONGSCOPE_CUDA_KV_VMM)
        return fail_arg(ctx, "kv_create: unknown mode %d", mode);
    if (n_layer <= 0 || n_layer > (1 << 16) || limit_rows <= 0 || row_bytes <= 0 || limit_rows > (int64_t(1) << 32) ||
        row_bytes > (int64_t(1) << 32))
        return fail_arg(ctx, "kv_create: sizes out of range (%d layers, %lld rows of %lld bytes)", n_layer,
                        (long long)limit_rows, (long long)row_bytes);
    const unsigned __int128 total = (unsigned __int128)(2 * n_layer) * (unsigned __int128)limit_rows *
                                    (unsigned __int128)row_bytes;
    if (total > (unsigned __int128)(uint64_t(1) << 50))
        return fail_arg(ctx, "kv_create: %d layers of %lld rows of %lld bytes is too large", n_layer,
                        (long long)limit_rows, (long long)row_bytes);

    auto *kv = new (std::nothrow) LongscopeCudaKv;
    if (!kv)
        return fail_arg(ctx, "kv_create: out of host memory");
    kv->mode = mode;
    kv->n_regions = 2 * n_layer;
    kv->limit_rows = limit_rows;
    kv->row_bytes = row_bytes;

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
        const size_t region = size_t(limit_rows) * size_t(row_bytes);
        kv->stride = (region + kv->granule - 1) / kv->granule * kv->granule;
        kv->reserved = kv->stride * size_t(kv->n_regions);
        res = kv->api.address_reserve(&kv->va, kv->reserved, 0, 0, 0);
        if (res != CUDA_SUCCESS) {
            char what[128];
            std::snprintf(what, sizeof what, "cuMemAddressReserve of %zu bytes for the vmm KV cache", kv->reserved);
            const int rc = fail_driver(ctx, kv->api, what, res);
            delete kv;
            return rc;
        }
        try {
            kv->handles.assign(size_t(kv->n_regions) * (kv->stride / kv->granule), 0);
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
        const size_t old_region = size_t(kv->capacity) * size_t(kv->row_bytes);
        const size_t new_region = size_t(rows) * size_t(kv->row_bytes);
        char *fresh = nullptr;
        cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&fresh), new_region * size_t(kv->n_regions));
        if (err != cudaSuccess) {
            cudaGetLastError();
            char what[128];
            std::snprintf(what, sizeof what, "cudaMalloc of %zu bytes for the concat KV cache",
                          new_region * size_t(kv->n_regions));
            return fail_cuda(ctx, what, err);
        }
        if (kv->buffer && old_region > 0) {
            // Every region's rows in one strided copy: n_regions rows of old_region bytes.
            err = cudaMemcpy2DAsync(fresh, new_region, kv->buffer, old_region, old_region, size_t(kv->n_regions),
                                    cudaMemcpyDeviceToDevice, ctx->stream);
            if (err != cudaSuccess) {
                cudaFree(fresh);
                return fail_cuda(ctx, "cudaMemcpy2DAsync (concat KV growth)", err);
            }
            kv->copied += uint64_t(old_region) * uint64_t(kv->n_regions);
        }
        if (kv->buffer) {
            // cudaFree waits for the work queued on the old buffer (the copy above included).
            err = cudaFree(kv->buffer);
            if (err != cudaSuccess) {
                kv->buffer = fresh; // the copy was queued; the new buffer holds the rows
                kv->capacity = rows;
                return fail_cuda(ctx, "cudaFree (concat KV growth)", err);
            }
        }
        kv->buffer = fresh;
        kv->capacity = rows;
        return 0;
    }
    case LONGSCOPE_CUDA_KV_VMM: {
        const int64_t want = int64_t((size_t(rows) * size_t(kv->row_bytes) + kv->granule - 1) / kv->granule);
        if (int rc = vmm_map(ctx, kv, want))
            return rc;
        const int64_t cap = int64_t(size_t(want) * kv->granule / size_t(kv->row_bytes));
        kv->capacity = cap < kv->limit_rows ? cap : kv->limit_rows;
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
    if (!kv || layer < 0 || layer >= kv->n_regions / 2)
        return fail_arg(ctx, "kv_layer: layer %d outside the cache", layer);
    char *k = nullptr, *v = nullptr;
    if (kv->mode == LONGSCOPE_CUDA_KV_VMM) {
        k = reinterpret_cast<char *>(kv->va) + size_t(2 * layer) * kv->stride;
        v = k + kv->stride;
    } else if (kv->buffer) {
        const size_t region = kv->region_bytes_now();
        k = kv->buffer + size_t(2 * layer) * region;
        v = k + region;
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
        info->resident_bytes = uint64_t(kv->mapped) * kv->granule * uint64_t(kv->n_regions);
        info->granule_bytes = kv->granule;
    } else {
        info->reserved_bytes = kv->buffer ? uint64_t(kv->region_bytes_now()) * uint64_t(kv->n_regions) : 0;
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
    vmm_unmap(kv, 0, kv->mapped);
    kv->mapped = 0;
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
            vmm_unmap(kv, 0, kv->mapped);
            kv->api.address_free(kv->va, kv->reserved);
        }
    } else if (kv->buffer) {
        cudaFree(kv->buffer);
    }
    delete kv;
}
}
