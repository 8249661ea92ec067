// Random inputs for the kernel suites: n floats drawn from N(0, sigma^2) by an mt19937 seeded
// with `seed`, so a seed names the same values in every suite.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

namespace longscope::test {

// N(mean, sigma^2) floats from a 32-bit generator, called as std::normal_distribution<float>
// is (dist(rng)): Box-Muller on two 24-bit uniforms, two values per pair. Not
// std::normal_distribution: libstdc++'s generate_canonical works out two long-double
// logarithms on every draw, and drawing the inputs took a third of tst_attention's time in the
// ASan build (perf: __ieee754_logl 23%, generate_canonical 7%).
class Normal {
public:
    explicit Normal(float mean = 0.0f, float sigma = 1.0f) : m_mean(mean), m_sigma(sigma) {}

    template <class Rng> float operator()(Rng &rng)
    {
        static_assert(Rng::min() == 0 && Rng::max() == 0xffffffffu, "a generator of 32-bit words");
        if (m_have_next) {
            m_have_next = false;
            return m_next;
        }
        const double u1 = (double(rng() >> 8) + 0.5) * 0x1p-24; // in (0, 1): the logarithm is finite
        const double u2 = double(rng() >> 8) * 0x1p-24;
        const double r = std::sqrt(-2.0 * std::log(u1)) * m_sigma, a = 2.0 * std::numbers::pi * u2;
        m_next = float(m_mean + r * std::sin(a));
        m_have_next = true;
        return float(m_mean + r * std::cos(a));
    }

private:
    float m_mean, m_sigma;
    float m_next = 0.0f;
    bool m_have_next = false;
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, float sigma = 1.0f)
{
    std::mt19937 rng(seed);
    Normal dist(0.0f, sigma);
    std::vector<float> v(n);
    for (float &x : v)
        x = dist(rng);
    return v;
}

} // namespace longscope::test
