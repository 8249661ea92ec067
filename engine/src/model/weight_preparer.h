// How a backend wants a model's matrices in memory, for ModelBuilder::prepare_weights: copied
// out of the file mapping or left there, and which ones re-laid out (packed) for its kernels.
// The model layer does the work that is the same for every layout (one huge-page block, the
// memory check and its fallbacks, threads, progress and cancel, releasing the file's pages);
// the backend, above it, supplies this and knows its layouts.
#pragma once

#include "longscope/model.h"
#include "model/weights.h"

#include <cstddef>
#include <cstdint>

namespace longscope {

class WeightPreparer {
public:
    virtual ~WeightPreparer() = default;

    // Whether the matrices that are not packed are copied too (else they stay in the mapping).
    virtual bool copy_weights() const = 0;
    // Whether `w` is packed; if so its packed size, and the independent units its packing
    // splits into (threads take ranges of them).
    virtual bool packs(const WeightView &w) const = 0;
    virtual size_t packed_bytes(const WeightView &w) const = 0;
    virtual int64_t pack_units(const WeightView &w) const = 0;
    // Writes units [u0, u1) of w's packed copy into dst (packed_bytes long) from `src`, the
    // matrix's bytes in the file's layout.
    virtual void pack(const WeightView &w, const uint8_t *src, uint8_t *dst, int64_t u0, int64_t u1) const = 0;
};

} // namespace longscope
