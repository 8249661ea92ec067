// The llama.cpp vocabulary fixtures in tests/data/vocab/: gzip'd vocabulary-only GGUF files
// with their test vectors (.inp: texts separated by "\n__ggml_vocab_test__\n"; .out: one line
// of space-separated ids per text).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace longscope::test {

// The decompressed bytes of a gzip file. Throws std::runtime_error when it cannot be read.
std::string read_gz(const std::string &path);

// Decompresses tests/data/vocab/ggml-vocab-NAME.gguf.gz into dir and returns the file's path.
// Throws std::runtime_error when the fixture cannot be read or written.
std::string unpack_vocab(const std::string &name, const std::string &dir);

// The .inp/.out vectors of one vocabulary, as llama.cpp's test-tokenizer-0 reads them.
std::vector<std::pair<std::string, std::vector<int32_t>>> vocab_vectors(const std::string &name);

} // namespace longscope::test
