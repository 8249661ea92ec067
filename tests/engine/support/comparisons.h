// Shared by the suites that compare whole-model runs: the largest difference between two
// logit vectors, and the data rows of the technique matrix (attention x causal flash x KV mode
// x keys before RoPE) that the CPU variants and the CUDA backend are both checked over, with
// the settings of a row.
#pragma once

#include "longscope/settings.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

// The technique matrix's KvMode column.
Q_DECLARE_METATYPE(longscope::KvMode)

namespace longscope::test {

// max_i |a_i - b_i|; infinity when the sizes differ.
inline double max_diff(const std::vector<float> &a, const std::vector<float> &b)
{
    if (a.size() != b.size())
        return INFINITY;
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i)
        d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    return d;
}

// Columns mem_efficient, causal_flash, mode (KvMode) and before_rope; one row per combination,
// 32 in all.
inline void add_technique_matrix_rows()
{
    QTest::addColumn<bool>("mem_efficient");
    QTest::addColumn<bool>("causal_flash");
    QTest::addColumn<KvMode>("mode");
    QTest::addColumn<bool>("before_rope");
    for (bool me : {false, true})
        for (bool cf : {false, true})
            for (KvMode mode : {KvMode::None, KvMode::Concat, KvMode::Static, KvMode::Vmm})
                for (bool br : {false, true})
                    QTest::addRow("%s%s kv=%s%s", me ? "mem-efficient" : "naive", cf ? " causal-flash" : "",
                                  std::string(to_string(mode)).c_str(), br ? " keys-before-rope" : "")
                        << me << cf << mode << br;
}

// `base` with the current technique-matrix row's settings (the columns above) applied.
inline Settings technique_matrix_settings(Settings base = {})
{
    QFETCH(bool, mem_efficient);
    QFETCH(bool, causal_flash);
    QFETCH(KvMode, mode);
    QFETCH(bool, before_rope);
    base.attention.memory_efficient = mem_efficient;
    base.attention.causal_flash = causal_flash;
    base.kv_mode = mode;
    base.rope.store_kv_before_rope = before_rope;
    return base;
}

} // namespace longscope::test
