#include "args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace longscope::cli {

Args::Args(const std::vector<std::string> &argv, const std::vector<OptionSpec> &specs)
{
    std::map<std::string, const OptionSpec *> by_name;
    for (const OptionSpec &s : specs)
        for (const std::string &n : s.names)
            by_name[n] = &s;
    bool only_positional = false;
    for (size_t i = 0; i < argv.size(); ++i) {
        const std::string &a = argv[i];
        if (only_positional || a.size() < 2 || a[0] != '-' ||
            (a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'))) {
            m_positional.push_back(a);
            continue;
        }
        if (a == "--") {
            only_positional = true;
            continue;
        }
        std::string name = a, inline_value;
        bool has_inline = false;
        if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
            name = a.substr(0, eq);
            inline_value = a.substr(eq + 1);
            has_inline = true;
        }
        auto it = by_name.find(name);
        if (it == by_name.end())
            throw UsageError("unknown option " + name);
        const std::string &canonical = it->second->names.back();
        if (!it->second->takes_value) {
            if (has_inline)
                throw UsageError("option " + name + " takes no value");
            m_flags.insert(canonical);
            continue;
        }
        if (!has_inline && i + 1 >= argv.size())
            throw UsageError("option " + name + " needs a value");
        m_values[canonical] = has_inline ? inline_value : argv[++i];
        m_all_values[canonical].push_back(m_values[canonical]);
    }
}

std::vector<std::string> Args::values(const std::string &name) const
{
    auto it = m_all_values.find(name);
    return it == m_all_values.end() ? std::vector<std::string>{} : it->second;
}

std::optional<std::string> Args::value(const std::string &name) const
{
    auto it = m_values.find(name);
    if (it == m_values.end())
        return std::nullopt;
    return it->second;
}

std::optional<int> Args::get_int(const std::string &name, int min, int max) const
{
    auto v = value(name);
    if (!v)
        return std::nullopt;
    errno = 0;
    char *end = nullptr;
    long long x = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || errno == ERANGE || x < min || x > max)
        throw UsageError(name + " must be an integer between " + std::to_string(min) + " and " +
                         std::to_string(max) + ", got '" + *v + "'");
    return int(x);
}

std::optional<double> Args::get_double(const std::string &name, double min, double max) const
{
    auto v = value(name);
    if (!v)
        return std::nullopt;
    char *end = nullptr;
    double x = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !std::isfinite(x) || x < min || x > max)
        throw UsageError(name + " must be a number between " + std::to_string(min) + " and " +
                         std::to_string(max) + ", got '" + *v + "'");
    return x;
}

std::optional<uint64_t> Args::get_u64(const std::string &name) const
{
    auto v = value(name);
    if (!v)
        return std::nullopt;
    errno = 0;
    char *end = nullptr;
    unsigned long long x = std::strtoull(v->c_str(), &end, 10);
    if (v->empty() || (*v)[0] == '-' || *end != '\0' || errno == ERANGE)
        throw UsageError(name + " must be a non-negative integer, got '" + *v + "'");
    return uint64_t(x);
}

} // namespace longscope::cli
