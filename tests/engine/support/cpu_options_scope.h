// CPU options (longscope/cpu_options.h) set for one scope of a test, the previous ones put
// back when it ends, so a failing check cannot leave a forced kernel set to the next test.
#pragma once

#include "longscope/cpu_options.h"

namespace longscope::test {

class CpuOptionsScope {
public:
    explicit CpuOptionsScope(const CpuOptions &options) : m_saved(cpu_options()) { set_cpu_options(options); }
    ~CpuOptionsScope() { set_cpu_options(m_saved); }
    CpuOptionsScope(const CpuOptionsScope &) = delete;
    CpuOptionsScope &operator=(const CpuOptionsScope &) = delete;

private:
    CpuOptions m_saved;
};

} // namespace longscope::test
