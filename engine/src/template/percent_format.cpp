// Python's printf-style string formatting, `"%s: %d" % (name, n)`: what jinja2 evaluates when a
// template applies `%` to a string (conversions s r a d i u x X o c e E f F g G %, flags
// "#0- +", width and precision, "%(key)s" with a mapping).
#include "template/ast.h"

#include <cmath>
#include <cstdio>

namespace longscope::jinja {

namespace {

struct Spec {
    std::string flags;
    int width = -1;
    int precision = -1;
    char conversion = 0;
};

bool has(const Spec &s, char flag) { return s.flags.find(flag) != std::string::npos; }

// Pads to the width by code points: left-justified with '-', else right.
std::string pad(std::string text, const Spec &s, bool zero_allowed)
{
    const size_t n = code_point_count(text);
    if (s.width < 0 || n >= size_t(s.width))
        return text;
    const size_t fill = size_t(s.width) - n;
    if (has(s, '-'))
        return text + std::string(fill, ' ');
    if (zero_allowed && has(s, '0')) {
        const size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+' || text[0] == ' ') ? 1 : 0;
        const size_t prefix = text.compare(sign, 2, "0x") == 0 || text.compare(sign, 2, "0X") == 0 ||
                                      text.compare(sign, 2, "0o") == 0
                                  ? 2
                                  : 0;
        return text.insert(sign + prefix, fill, '0');
    }
    return std::string(fill, ' ') + text;
}

std::string sign_of(bool negative, const Spec &s)
{
    return negative ? "-" : has(s, '+') ? "+" : has(s, ' ') ? " " : "";
}

bool is_number(const Value &v)
{
    return v.kind == Value::Kind::Int || v.kind == Value::Kind::Float || v.kind == Value::Kind::Bool;
}

std::string integer_text(const Value &v, const Spec &s, const std::string &at)
{
    const char c = s.conversion;
    const bool integral = v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool;
    if (!is_number(v) || (!integral && (c == 'x' || c == 'X' || c == 'o')))
        throw TemplateError(at + ": %" + std::string(1, c) + " format: " +
                            (c == 'd' || c == 'i' || c == 'u' ? "a real number" : "an integer") + " is required, not " +
                            type_name(v));
    if (v.kind == Value::Kind::Float && !std::isfinite(v.f))
        throw TemplateError(at + ": cannot convert float " + py_float(v.f) + " to integer");
    const int64_t i = v.as_int();
    const uint64_t mag = i < 0 ? uint64_t(0) - uint64_t(i) : uint64_t(i);
    char buf[32];
    std::snprintf(buf, sizeof buf, c == 'x' ? "%llx" : c == 'X' ? "%llX" : c == 'o' ? "%llo" : "%llu",
                  static_cast<unsigned long long>(mag));
    std::string digits = buf;
    if (s.precision > 0 && digits.size() < size_t(s.precision))
        digits.insert(0, size_t(s.precision) - digits.size(), '0');
    std::string prefix;
    if (has(s, '#'))
        prefix = c == 'x' ? "0x" : c == 'X' ? "0X" : c == 'o' ? "0o" : "";
    return sign_of(i < 0, s) + prefix + digits;
}

std::string float_text(const Value &v, const Spec &s, const std::string &at)
{
    if (!is_number(v))
        throw TemplateError(at + ": %" + std::string(1, s.conversion) + " format: a real number is required, not " +
                            type_name(v));
    const double d = v.as_double();
    if (!std::isfinite(d)) {
        std::string t = std::isnan(d) ? "nan" : "inf";
        if (std::isupper(static_cast<unsigned char>(s.conversion)))
            for (char &ch : t)
                ch = char(std::toupper(static_cast<unsigned char>(ch)));
        return sign_of(std::signbit(d) && !std::isnan(d), s) + t;
    }
    const std::string fmt = std::string("%") + (has(s, '#') ? "#" : "") + "." +
                            std::to_string(s.precision < 0 ? 6 : std::min(s.precision, 100)) + s.conversion;
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt.c_str(), std::fabs(d));
    return sign_of(std::signbit(d), s) + buf;
}

std::string convert(const Value &v, const Spec &s, const std::string &at)
{
    switch (s.conversion) {
    case 's':
    case 'r':
    case 'a': {
        std::string t = s.conversion == 's' ? to_str(v) : repr(v);
        if (s.precision >= 0) {
            const std::vector<std::string> cps = code_points(t);
            if (cps.size() > size_t(s.precision)) {
                t.clear();
                for (size_t k = 0; k < size_t(s.precision); ++k)
                    t += cps[k];
            }
        }
        return pad(std::move(t), s, false);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': return pad(integer_text(v, s, at), s, true);
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G': return pad(float_text(v, s, at), s, true);
    case 'c': {
        if (v.kind == Value::Kind::String && code_point_count(v.s) == 1)
            return pad(v.s, s, false);
        if (v.kind != Value::Kind::Int || v.i < 0 || v.i > 0x10FFFF)
            throw TemplateError(at + ": %c requires an int in range(0x110000) or a single character");
        const auto cp = uint32_t(v.i);
        std::string t;
        if (cp < 0x80) {
            t += char(cp);
        } else if (cp < 0x800) {
            t += char(0xC0 | (cp >> 6));
            t += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            t += char(0xE0 | (cp >> 12));
            t += char(0x80 | ((cp >> 6) & 0x3F));
            t += char(0x80 | (cp & 0x3F));
        } else {
            t += char(0xF0 | (cp >> 18));
            t += char(0x80 | ((cp >> 12) & 0x3F));
            t += char(0x80 | ((cp >> 6) & 0x3F));
            t += char(0x80 | (cp & 0x3F));
        }
        return pad(std::move(t), s, false);
    }
    }
    throw TemplateError(at + ": unsupported format character '" + std::string(1, s.conversion) + "'");
}

} // namespace

std::string percent_format(const std::string &format, const Value &args, const std::string &at, size_t limit)
{
    // A tuple gives the values in order; anything else is one value (or, for %(key)s, a mapping).
    const bool tuple = args.kind == Value::Kind::List && args.seq == Value::Seq::Tuple;
    const List single{args};
    const List &values = tuple ? *args.list : single;
    size_t next = 0;
    bool used_key = false;
    std::string out;
    for (size_t k = 0; k < format.size(); ++k) {
        if (format[k] != '%') {
            out += format[k];
            continue;
        }
        if (++k >= format.size())
            throw TemplateError(at + ": incomplete format");
        Spec s;
        const Value *value = nullptr;
        if (format[k] == '(') {
            const size_t close = format.find(')', k);
            if (close == std::string::npos)
                throw TemplateError(at + ": incomplete format key");
            if (!args.is_mapping())
                throw TemplateError(at + ": format requires a mapping");
            const std::string key = format.substr(k + 1, close - k - 1);
            value = args.dict->find(key);
            if (!value)
                throw TemplateError(at + ": KeyError: '" + key + "'");
            used_key = true;
            k = close + 1;
        }
        while (k < format.size() && std::string_view("#0- +").find(format[k]) != std::string_view::npos)
            s.flags += format[k++];
        auto number = [&] {
            int n = 0;
            while (k < format.size() && std::isdigit(static_cast<unsigned char>(format[k])))
                n = std::min(n * 10 + (format[k++] - '0'), 1 << 20);
            return n;
        };
        if (k < format.size() && format[k] == '*')
            throw TemplateError(at + ": '*' width in a format is not supported");
        if (k < format.size() && std::isdigit(static_cast<unsigned char>(format[k])))
            s.width = number();
        if (k < format.size() && format[k] == '.') {
            ++k;
            s.precision = number();
        }
        while (k < format.size() && (format[k] == 'h' || format[k] == 'l' || format[k] == 'L'))
            ++k;
        if (k >= format.size())
            throw TemplateError(at + ": incomplete format");
        s.conversion = format[k];
        if (s.conversion == '%') {
            out += '%';
            continue;
        }
        if (!value) {
            if (next >= values.size())
                throw TemplateError(at + ": not enough arguments for format string");
            value = &values[next++];
        }
        out += convert(*value, s, at);
        if (out.size() > limit)
            throw TemplateError(at + ": the formatted string is longer than " + std::to_string(limit) + " bytes");
    }
    if (!used_key && next < values.size() && !(args.is_mapping() && !tuple))
        throw TemplateError(at + ": not all arguments converted during string formatting");
    return out;
}

} // namespace longscope::jinja
