// Random inputs for the kernel suites: n floats drawn from N(0, sigma^2) by an mt19937 seeded
// with `seed`, so a seed names the same values in every suite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace longscope::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float sigma = 1.0f)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(n);
    for (float &x : v)
        x = dist(rng);
    return v;
}

} // namespace longscope::test
