// The architecture fixtures (tests/data/arch/<family>/, made by scripts/gen-arch-fixtures.py):
// tiny random-weight models of every family, as a Hugging Face directory and a GGUF of the same
// weights, with the logits and greedy continuation that Hugging Face transformers computed for
// them (reference.json). Shared by the suites that check a backend against transformers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace longscope::test {

// The families, and where a family's fixture is: format "hf" (the directory) or "gguf".
inline const char *const k_arch_families[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"};
std::string arch_fixture_path(const std::string &family, const std::string &format);

struct ArchRefSequence {
    std::vector<int32_t> tokens;
    std::vector<float> logits; // [n, vocab], transformers' logits of every position
};

struct ArchReference {
    int n_vocab = 0;
    std::vector<ArchRefSequence> seqs;
    std::vector<int32_t> prompt, continuation; // a greedy continuation by transformers
};

// reference.json of a family; n_vocab 0 when it cannot be read.
ArchReference load_arch_reference(const std::string &family);

} // namespace longscope::test
