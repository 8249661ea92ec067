#include "cpu/weight_preparer.h"

#include "cpu/packed.h"

namespace longscope {

bool CpuWeightPreparer::packs(const WeightView &w) const
{
    return cpu_packs(m_table, w);
}

size_t CpuWeightPreparer::packed_bytes(const WeightView &w) const { return packed_size(w.type, w.ne(0), w.ne(1)); }

int64_t CpuWeightPreparer::pack_units(const WeightView &w) const { return w.ne(1) / packed_group_rows; }

void CpuWeightPreparer::pack(const WeightView &w, const uint8_t *src, uint8_t *dst, int64_t u0, int64_t u1) const
{
    pack_rows(w.type, src, w.ne(0), dst, u0, u1);
}

} // namespace longscope
