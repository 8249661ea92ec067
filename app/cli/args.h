// Command-line parsing for longscope-cli: options of the form --name VALUE, -x VALUE and
// flags, plus positional arguments. Errors are UsageError with one clear line.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace longscope::cli {

class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct OptionSpec {
    std::vector<std::string> names; // e.g. {"-m", "--model"}; the last is the canonical one
    bool takes_value = true;
};

class Args {
public:
    // Throws UsageError for an unknown option or a missing value.
    Args(const std::vector<std::string> &argv, const std::vector<OptionSpec> &specs);

    bool flag(const std::string &name) const { return m_flags.count(name) > 0; }
    std::optional<std::string> value(const std::string &name) const; // the last one given
    std::vector<std::string> values(const std::string &name) const;   // every one, in order
    const std::vector<std::string> &positional() const { return m_positional; }

    std::optional<int> get_int(const std::string &name, int min, int max) const;
    std::optional<double> get_double(const std::string &name, double min, double max) const;
    std::optional<uint64_t> get_u64(const std::string &name) const;

private:
    std::map<std::string, std::string> m_values;
    std::map<std::string, std::vector<std::string>> m_all_values;
    std::set<std::string> m_flags;
    std::vector<std::string> m_positional;
};

} // namespace longscope::cli
