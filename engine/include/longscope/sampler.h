// Token sampling: greedy, temperature, top-k, top-p, repetition penalty; reproducible from a
// seed (the random stream is defined here, not by the standard library's distributions).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace longscope {

struct SamplingParams {
    float temperature = 0.8f;    // 0 = greedy
    int top_k = 40;              // 0 = no limit
    float top_p = 0.95f;         // 1 = no limit
    float repeat_penalty = 1.0f; // 1 = off; CTRL-style over the tokens in the context
    uint64_t seed = 0;

    // Throws InvalidArgument naming the bad value.
    void validate() const;
};

class Sampler {
public:
    explicit Sampler(const SamplingParams &params);
    // `logits` [n_vocab] is modified in place (penalty, temperature). `history` is the
    // context so far, for the repetition penalty.
    int32_t sample(std::span<float> logits, std::span<const int32_t> history);
    const SamplingParams &params() const { return m_params; }

private:
    double next_uniform(); // [0, 1)
    SamplingParams m_params;
    uint64_t m_state[4];
    std::vector<int32_t> m_candidates;
};

// Index of the largest value; the lowest index on ties.
int32_t argmax(std::span<const float> values);

} // namespace longscope
