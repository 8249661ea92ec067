// A fixture file's bytes, whole: empty when it cannot be read (the suites then fail on what
// they expected to find in it).
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace longscope::test {

inline std::string read_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

} // namespace longscope::test
