// The Prometheus text exposition format (version 0.0.4), which /metrics of vLLM, SGLang,
// llama.cpp's llama-server and `longscope-cli serve` answer: a parser for the client and a
// writer for the server.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace longscope::remote {

// One line of the exposition: a name, its labels and a value (NaN and +-Inf included).
struct MetricSample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
};

struct MetricsText {
    std::vector<MetricSample> samples;      // in the order of the text
    std::map<std::string, std::string> types; // "# TYPE name counter|gauge|histogram|summary|untyped"

    // The sum over every sample named `name` (all label sets, e.g. one per tensor-parallel
    // rank or model); false when there is none.
    bool sum(std::string_view name, double &out) const;
    // Whether a sample of that name exists.
    bool has(std::string_view name) const;
};

class MetricsParseError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Parses a whole exposition. Comments other than HELP and TYPE and blank lines are skipped;
// a timestamp after the value is accepted and dropped. Throws MetricsParseError naming the
// line number and what is wrong.
MetricsText parse_metrics(std::string_view text);

// Writes an exposition: family() once per metric (its HELP and TYPE lines), then its samples.
class MetricsWriter {
public:
    void family(std::string_view name, std::string_view type, std::string_view help);
    void sample(std::string_view name, double value, const std::map<std::string, std::string> &labels = {});
    const std::string &text() const { return m_text; }

private:
    std::string m_text;
};

} // namespace longscope::remote
