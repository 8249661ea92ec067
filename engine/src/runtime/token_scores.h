// Scoring one position's logits: the log-probability of a token and the greedy choice.
// Shared by perplexity and the needle grid.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace longscope {

// log softmax(logits)[target], in double.
inline double token_log_prob(std::span<const float> logits, int32_t target)
{
    double m = -INFINITY;
    for (float x : logits)
        m = std::max(m, double(x));
    double sum = 0;
    for (float x : logits)
        sum += std::exp(double(x) - m);
    return double(logits[size_t(target)]) - m - std::log(sum);
}

// The most likely token (the first of equals).
inline int32_t greedy_token(std::span<const float> logits)
{
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

} // namespace longscope
