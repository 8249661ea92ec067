#include "remote/prometheus.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

namespace longscope::remote {

namespace {

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

[[noreturn]] void fail(size_t line, std::string what)
{
    for (char &c : what) // a stray carriage return quoted from the text stays on the line
        if (c == '\r' || c == '\n')
            c = ' ';
    throw MetricsParseError("metrics line " + std::to_string(line) + ": " + what);
}

void skip_blanks(std::string_view s, size_t &i)
{
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t'))
        ++i;
}

std::string read_name(std::string_view s, size_t &i, size_t line, const char *what)
{
    const size_t start = i;
    if (i >= s.size() || !name_start(s[i]))
        fail(line, std::string("expected a ") + what + " at column " + std::to_string(i + 1));
    while (i < s.size() && name_char(s[i]))
        ++i;
    return std::string(s.substr(start, i - start));
}

// A sample value: a decimal or exponent float, or +Inf, -Inf, NaN (Go's ParseFloat spellings).
double read_value(std::string_view token, size_t line)
{
    if (token == "+Inf" || token == "Inf")
        return std::numeric_limits<double>::infinity();
    if (token == "-Inf")
        return -std::numeric_limits<double>::infinity();
    if (token == "NaN")
        return std::numeric_limits<double>::quiet_NaN();
    // from_chars: the C locale whatever the process's locale (the app sets the user's).
    std::string_view t = token;
    if (t.size() > 1 && t.front() == '+')
        t.remove_prefix(1);
    double v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size())
        fail(line, "'" + std::string(token) + "' is not a number");
    return v;
}

// {name="value",...} with \\, \" and \n escapes; a trailing comma is allowed.
std::map<std::string, std::string> read_labels(std::string_view s, size_t &i, size_t line)
{
    std::map<std::string, std::string> labels;
    ++i; // '{'
    for (;;) {
        skip_blanks(s, i);
        if (i < s.size() && s[i] == '}') {
            ++i;
            return labels;
        }
        std::string name = read_name(s, i, line, "label name");
        skip_blanks(s, i);
        if (i >= s.size() || s[i] != '=')
            fail(line, "expected '=' after the label '" + name + "'");
        ++i;
        skip_blanks(s, i);
        if (i >= s.size() || s[i] != '"')
            fail(line, "the value of the label '" + name + "' must be in double quotes");
        ++i;
        std::string value;
        for (;;) {
            if (i >= s.size())
                fail(line, "the value of the label '" + name + "' is not closed");
            const char c = s[i++];
            if (c == '"')
                break;
            if (c == '\\') {
                if (i >= s.size())
                    fail(line, "the value of the label '" + name + "' ends in a backslash");
                const char e = s[i++];
                if (e == 'n')
                    value += '\n';
                else if (e == '\\' || e == '"')
                    value += e;
                else
                    fail(line, std::string("unknown escape \\") + e + " in the label '" + name + "'");
            } else {
                value += c;
            }
        }
        if (labels.count(name))
            fail(line, "the label '" + name + "' is given twice");
        labels.emplace(std::move(name), std::move(value));
        skip_blanks(s, i);
        if (i < s.size() && s[i] == ',')
            ++i;
        else if (i >= s.size() || s[i] != '}')
            fail(line, "expected ',' or '}' after a label");
    }
}

void parse_comment(std::string_view s, size_t line, MetricsText &out)
{
    size_t i = 1;
    skip_blanks(s, i);
    const size_t kw = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t')
        ++i;
    const std::string_view keyword = s.substr(kw, i - kw);
    if (keyword != "TYPE" && keyword != "HELP")
        return; // an ordinary comment
    skip_blanks(s, i);
    const std::string name = read_name(s, i, line, "metric name");
    if (keyword == "HELP")
        return;
    skip_blanks(s, i);
    std::string type(s.substr(i));
    while (!type.empty() && (type.back() == ' ' || type.back() == '\t'))
        type.pop_back();
    if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped")
        fail(line, "unknown metric type '" + type + "' for " + name);
    out.types[name] = type;
}

} // namespace

bool MetricsText::sum(std::string_view name, double &out) const
{
    bool found = false;
    double total = 0;
    for (const MetricSample &s : samples)
        if (s.name == name) {
            total += s.value;
            found = true;
        }
    if (found)
        out = total;
    return found;
}

bool MetricsText::has(std::string_view name) const
{
    for (const MetricSample &s : samples)
        if (s.name == name)
            return true;
    return false;
}

MetricsText parse_metrics(std::string_view text)
{
    MetricsText out;
    size_t line_no = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos)
            end = text.size();
        std::string_view s = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (!s.empty() && s.back() == '\r')
            s.remove_suffix(1);
        size_t i = 0;
        skip_blanks(s, i);
        if (i == s.size())
            continue;
        if (s[i] == '#') {
            parse_comment(s.substr(i), line_no, out);
            continue;
        }
        MetricSample sample;
        sample.name = read_name(s, i, line_no, "metric name");
        skip_blanks(s, i);
        if (i < s.size() && s[i] == '{')
            sample.labels = read_labels(s, i, line_no);
        skip_blanks(s, i);
        const size_t v = i;
        while (i < s.size() && s[i] != ' ' && s[i] != '\t')
            ++i;
        if (v == i)
            fail(line_no, "the sample " + sample.name + " has no value");
        sample.value = read_value(s.substr(v, i - v), line_no);
        skip_blanks(s, i);
        if (i < s.size()) { // an optional timestamp in milliseconds
            const size_t t = i;
            if (s[i] == '-')
                ++i;
            while (i < s.size() && s[i] >= '0' && s[i] <= '9')
                ++i;
            skip_blanks(s, i);
            if (i != s.size() || t == i)
                fail(line_no, "unexpected text after the value of " + sample.name);
        }
        out.samples.push_back(std::move(sample));
    }
    return out;
}

namespace {

std::string format_value(double v)
{
    if (std::isnan(v))
        return "NaN";
    if (std::isinf(v))
        return v > 0 ? "+Inf" : "-Inf";
    std::ostringstream o;
    o.imbue(std::locale::classic());
    o.precision(17);
    o << v;
    return o.str();
}

} // namespace

void MetricsWriter::family(std::string_view name, std::string_view type, std::string_view help)
{
    std::string h;
    for (char c : help)
        h += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
    m_text += "# HELP " + std::string(name) + " " + h + "\n";
    m_text += "# TYPE " + std::string(name) + " " + std::string(type) + "\n";
}

void MetricsWriter::sample(std::string_view name, double value, const std::map<std::string, std::string> &labels)
{
    m_text += name;
    if (!labels.empty()) {
        m_text += '{';
        bool first = true;
        for (const auto &[k, v] : labels) {
            if (!first)
                m_text += ',';
            first = false;
            m_text += k + "=\"";
            for (char c : v)
                m_text += c == '\n' ? std::string("\\n") : c == '\\' || c == '"' ? std::string("\\") + c : std::string(1, c);
            m_text += '"';
        }
        m_text += '}';
    }
    m_text += ' ' + format_value(value) + '\n';
}

} // namespace longscope::remote
