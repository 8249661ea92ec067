// JSON read from files a user, a download or a network peer supplies (config.json, tokenizer_config.json,
// model.safetensors.index.json, safetensors headers): parsed with the nesting bounded, and
// described in error messages without copying a hostile value whole.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace longscope {

// Deeper nesting than this is refused: real files nest a few levels, and a bound keeps every
// later walk over the value (copy, compare, serialise) from recursing without limit.
constexpr int kMaxJsonDepth = 64;

// Parses [begin, end) into `out`. On invalid JSON or nesting deeper than kMaxJsonDepth,
// returns false with `why` set to one short line ("not valid JSON: ...", "JSON nested
// deeper than 64 levels").
bool parse_json_bounded(const char *begin, const char *end, nlohmann::json &out, std::string &why);
// The same into an ordered_json (objects keep their key order, as chat templates' tojson needs).
bool parse_json_bounded(const char *begin, const char *end, nlohmann::ordered_json &out, std::string &why);

// A short description of `v` for an error message, at most about `max_chars` long: a scalar's
// JSON text (a long string cut, with its length), "an array of N elements", "an object of N
// members". Never recurses into the value.
std::string describe_json(const nlohmann::json &v, size_t max_chars = 60);

} // namespace longscope
