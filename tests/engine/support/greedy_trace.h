// Whole-model runs step by step, for the suites that compare two runs (the CPU variants with
// each other, the CUDA backend with the CPU): greedy decoding through a Session, recording
// the logits and metrics of every step.
#pragma once

#include "longscope/engine.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace longscope::test {

struct Trace {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits; // after the prompt, then after each token
    std::vector<StepMetrics> metrics;
    std::string note; // the session's backend note (empty unless it fell back to the CPU)
};

// Greedy decoding of n_new tokens after `prompt` with the given settings (2 threads),
// recording every step's logits; `between` runs before token i is fed. With `forced`, those
// tokens are fed instead of the argmax (teacher forcing: two runs then see the same tokens,
// so a near tie cannot make them diverge).
Trace run_greedy(const Model &m, const std::vector<int32_t> &prompt, int n_new, const Settings &s,
                 int n_ctx = 512, const std::function<void(Session &, int)> &between = {},
                 const std::vector<int32_t> &forced = {});

} // namespace longscope::test
