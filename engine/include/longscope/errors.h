// Typed engine errors. Every error the engine reports derives from longscope::Error and
// carries a message a user can act on (which file, which tensor, which value, what limit).
#pragma once

#include <stdexcept>
#include <string>

namespace longscope {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A file cannot be opened, mapped or read.
class IoError : public Error {
public:
    using Error::Error;
};

// A model or tokenizer file is malformed, truncated, hostile or unsupported.
class FormatError : public Error {
public:
    using Error::Error;
};

// A configuration value (config.json, hyperparameters, settings) is missing or invalid.
class ConfigError : public Error {
public:
    using Error::Error;
};

// A caller passed an invalid argument (empty prompt, bad sampling parameter, ...).
class InvalidArgument : public Error {
public:
    using Error::Error;
};

// The sequence does not fit in the context limit.
class ContextOverflow : public Error {
public:
    using Error::Error;
};

// An allocation could not be satisfied (KV cache larger than memory, ...).
class OutOfMemory : public Error {
public:
    using Error::Error;
};

// A compute backend cannot be used or failed: the CUDA plugin is missing or finds no GPU, the
// device ran out of memory, a kernel failed. The message says which and why.
class BackendError : public Error {
public:
    using Error::Error;
};

// The caller cancelled the operation (a model load, for example).
class Cancelled : public Error {
public:
    using Error::Error;
};

} // namespace longscope
