// Helpers the fuzz harnesses share: a scratch folder for inputs that the code under test
// reads from files, and an invariant check that stops the run with a message.
#pragma once

#include "longscope/errors.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace longscope::fuzz {

// A folder of this process's own (in /dev/shm where it is writable, else the temporary
// folder), created on first use and removed at exit.
const std::string &scratch_dir();

// Writes `size` bytes to scratch_dir()/name (replacing it) and returns the path.
std::string write_scratch(const std::string &name, const uint8_t *data, size_t size);
std::string write_scratch(const std::string &name, const std::string &bytes);

// A file of tests/data as bytes (aborts when it cannot be read: the harness is broken).
std::string test_data(const std::string &relative_path);

// The config.json of a tiny LLaMA (one layer, hidden size 8, the 512-token stories260K
// vocabulary) whose weights tiny_hf_dir() writes.
std::string tiny_hf_config();

// A Hugging Face folder in the scratch folder holding the tiny model: config.json,
// model.safetensors, tokenizer.model and tokenizer_config.json; loads as it is. Written once;
// the harnesses overwrite one of its files per input and put it back.
const std::string &tiny_hf_dir();

// Aborts with `what` when `ok` is false: a broken invariant is a finding like a crash.
void check(bool ok, const char *what);

// Runs `f`; a longscope::Error (the clean refusal of bad input, with a message) is an accepted
// outcome. Any other exception escapes and fails the run.
template <class F> void refused_cleanly_or_ok(F &&f)
{
    try {
        f();
    } catch (const Error &) {
    }
}

} // namespace longscope::fuzz
