// The size of the long engine suites' runs (prompt lengths, tokens generated). Under a
// sanitizer they run many times slower: scripts/test-sanitizer sets LONGSCOPE_TEST_SIZE=reduced,
// and the suites then pick smaller sizes that still check the same property (a prompt longer
// than one memory-efficient chunk, a context past the trained length, and so on). Only the
// tests read this variable, never the engine.
#pragma once

#include <QString>
#include <QtGlobal>

namespace longscope::test {

inline bool reduced_size()
{
    static const bool reduced = qEnvironmentVariable("LONGSCOPE_TEST_SIZE") == QLatin1String("reduced");
    return reduced;
}

// `full` normally, `reduced` under LONGSCOPE_TEST_SIZE=reduced.
inline int sized(int full, int reduced) { return reduced_size() ? reduced : full; }

} // namespace longscope::test
