// The model and sizes the suites of the quantized KV cache share (tst_kv_quant on the CPU,
// tst_cuda_forward on the GPU): a random llama-family model with a head size of 64 (blocks of
// 32 fit; the bundled model's head is 8), and the bytes of a cached row from the block layouts.
#pragma once

#include "longscope/engine.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace longscope::test {

// Bytes of a cached row of n values, from the block layouts (written out here rather than
// asked of the code): f32 4 per value, f16 2, q8_0 34 per 32 values, q4_0 18 per 32.
uint64_t expected_row_bytes(KvType t, int64_t n);

// A random llama-family model of n_layer layers written to dir/kv<n_layer>.gguf and loaded: a
// head size of 64, two query heads per kv head, a vocabulary of 300, and weights of a larger
// spread than make-model's default, so the logits span several units and differences show.
std::unique_ptr<Model> random_kv_model(const std::string &dir, int n_layer);

// n token ids of that model's vocabulary drawn from `seed` (none of the first three).
std::vector<int32_t> random_kv_tokens(int n, uint32_t seed);

} // namespace longscope::test
