// The CPU's answer to the model layer's WeightPreparer (model/weight_preparer.h): quantized
// matrices packed for the integer kernels and F16 ones for the packed float kernel (packed.h)
// where the kernel table says so, the others copied into huge pages unless
// CpuOptions::copy_weights is off.
#pragma once

#include "cpu/kernel_table.h"
#include "model/weight_preparer.h"
#include "model/weights.h"

namespace longscope {

class CpuWeightPreparer : public WeightPreparer {
public:
    explicit CpuWeightPreparer(const CpuKernelTable &table) : m_table(table) {}

    bool copy_weights() const override { return m_table.copy_weights; }
    bool packs(const WeightView &w) const override;
    size_t packed_bytes(const WeightView &w) const override;
    int64_t pack_units(const WeightView &w) const override; // groups of 16 rows
    void pack(const WeightView &w, const uint8_t *src, uint8_t *dst, int64_t u0, int64_t u1) const override;

private:
    CpuKernelTable m_table;
};

} // namespace longscope
