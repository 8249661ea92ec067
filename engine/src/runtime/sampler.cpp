#include "longscope/sampler.h"

#include "longscope/errors.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace longscope {

void SamplingParams::validate() const
{
    if (!std::isfinite(temperature) || temperature < 0)
        throw InvalidArgument("temperature must be a number >= 0");
    if (top_k < 0)
        throw InvalidArgument("top-k must be >= 0 (0 disables it)");
    if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1)
        throw InvalidArgument("top-p must be in (0, 1]");
    if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0)
        throw InvalidArgument("repetition penalty must be a number > 0 (1 disables it)");
}

namespace {
// splitmix64 seeds the xoshiro256** state: a well-defined stream on every platform.
uint64_t splitmix64(uint64_t &x)
{
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
} // namespace

Sampler::Sampler(const SamplingParams &params) : m_params(params)
{
    params.validate();
    uint64_t s = params.seed;
    for (uint64_t &v : m_state)
        v = splitmix64(s);
}

double Sampler::next_uniform()
{
    // xoshiro256**
    const uint64_t result = rotl(m_state[1] * 5, 7) * 9;
    const uint64_t t = m_state[1] << 17;
    m_state[2] ^= m_state[0];
    m_state[3] ^= m_state[1];
    m_state[1] ^= m_state[2];
    m_state[0] ^= m_state[3];
    m_state[2] ^= t;
    m_state[3] = rotl(m_state[3], 45);
    return double(result >> 11) * 0x1.0p-53;
}

int32_t argmax(std::span<const float> values)
{
    int32_t best = 0;
    for (size_t i = 1; i < values.size(); ++i)
        if (values[i] > values[size_t(best)])
            best = int32_t(i);
    return best;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history)
{
    const int32_t n = int32_t(logits.size());
    if (m_params.repeat_penalty != 1.0f) {
        // CTRL-style: make every token already in the context less likely, once each.
        std::unordered_set<int32_t> seen(history.begin(), history.end());
        for (int32_t id : seen) {
            if (id < 0 || id >= n)
                continue;
            float &l = logits[size_t(id)];
            l = l > 0 ? l / m_params.repeat_penalty : l * m_params.repeat_penalty;
        }
    }
    if (m_params.temperature <= 0)
        return argmax(logits);

    // Candidates sorted by logit (ties: lower id first), cut by top-k.
    m_candidates.resize(size_t(n));
    std::iota(m_candidates.begin(), m_candidates.end(), 0);
    const size_t k = m_params.top_k > 0 ? std::min<size_t>(size_t(m_params.top_k), size_t(n)) : size_t(n);
    auto cmp = [&](int32_t a, int32_t b) {
        return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    };
    std::partial_sort(m_candidates.begin(), m_candidates.begin() + std::ptrdiff_t(k), m_candidates.end(), cmp);
    m_candidates.resize(k);

    // Softmax at the temperature over the candidates.
    const double max_l = logits[size_t(m_candidates[0])];
    std::vector<double> probs(k);
    double sum = 0;
    for (size_t i = 0; i < k; ++i) {
        probs[i] = std::exp((double(logits[size_t(m_candidates[i])]) - max_l) / m_params.temperature);
        sum += probs[i];
    }
    // Top-p: the smallest prefix whose probability reaches p (at least one token).
    size_t keep = k;
    if (m_params.top_p < 1.0f) {
        double acc = 0;
        for (size_t i = 0; i < k; ++i) {
            acc += probs[i] / sum;
            if (acc >= m_params.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double kept_sum = 0;
    for (size_t i = 0; i < keep; ++i)
        kept_sum += probs[i];
    double r = next_uniform() * kept_sum;
    for (size_t i = 0; i < keep; ++i) {
        r -= probs[i];
        if (r < 0)
            return m_candidates[i];
    }
    return m_candidates[keep - 1];
}

} // namespace longscope
