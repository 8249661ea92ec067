// Values as Python sees them: str(), repr(), truth, equality, json.dumps.
#include "template/ast.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace longscope::jinja {

const Value *Dict::find(std::string_view key) const
{
    for (const auto &[k, v] : items)
        if (k == key)
            return &v;
    return nullptr;
}

void Dict::set(const std::string &key, Value v)
{
    for (auto &[k, old] : items)
        if (k == key) {
            old = std::move(v);
            return;
        }
    items.emplace_back(key, std::move(v));
}

Value Value::from_json(const nlohmann::ordered_json &j)
{
    switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
        if (j.get<uint64_t>() > uint64_t(INT64_MAX))
            return real(double(j.get<uint64_t>()));
        return integer(int64_t(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
        List l;
        l.reserve(j.size());
        for (const auto &e : j)
            l.push_back(from_json(e));
        return of_list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
        Dict d;
        for (const auto &[k, e] : j.items())
            d.items.emplace_back(dict_key(string(k)), from_json(e));
        return of_dict(std::move(d));
    }
    default: return none();
    }
}

Value CallArgs::take(size_t index, std::string_view name, Value fallback)
{
    for (auto it = kw.begin(); it != kw.end(); ++it)
        if (it->first == name) {
            Value v = std::move(it->second);
            kw.erase(it);
            return v;
        }
    if (index < pos.size()) {
        taken = std::max(taken, index + 1);
        return pos[index];
    }
    return fallback;
}

void CallArgs::done(std::string_view callee) const
{
    if (!kw.empty())
        throw TemplateError(where + ": " + std::string(callee) + ": unexpected keyword argument '" + kw.front().first +
                            "'");
    if (pos.size() > taken)
        throw TemplateError(where + ": " + std::string(callee) + ": too many arguments (" + std::to_string(pos.size()) +
                            ")");
}

namespace {
// Whether a stored key starts with a tag byte (0-3) rather than a string's first byte.
bool tagged(const std::string &key)
{
    return !key.empty() && static_cast<unsigned char>(key[0]) <= 3;
}
} // namespace

std::string dict_key(const Value &key)
{
    switch (key.kind) {
    case Value::Kind::String:
        // A string that starts with a tag byte is itself tagged, so it reads back as a string.
        return tagged(key.s) ? '\x00' + key.s : key.s;
    case Value::Kind::Bool:
    case Value::Kind::Int: return "\x01" + std::to_string(key.as_int());
    case Value::Kind::Float:
        if (key.f == std::floor(key.f) && std::fabs(key.f) < 9e18)
            return "\x01" + std::to_string(int64_t(key.f));
        return "\x02" + py_float(key.f);
    case Value::Kind::None: return "\x03";
    default: throw TemplateError("unhashable type: '" + type_name(key) + "'");
    }
}

Value key_value(const std::string &key)
{
    if (!tagged(key))
        return Value::string(key);
    if (key[0] == '\x01')
        return Value::integer(std::stoll(key.substr(1)));
    if (key[0] == '\x02')
        return Value::real(std::stod(key.substr(1)));
    if (key[0] == '\x00')
        return Value::string(key.substr(1));
    return Value::none();
}

std::string type_name(const Value &v)
{
    switch (v.kind) {
    case Value::Kind::Undefined: return "undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List:
        return v.seq == Value::Seq::Tuple ? "tuple" : v.seq == Value::Seq::Generator ? "generator" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Callable: return "function";
    }
    return "?";
}

std::string py_float(double d)
{
    if (std::isnan(d))
        return "nan";
    if (std::isinf(d))
        return d < 0 ? "-inf" : "inf";
    if (d == 0)
        return std::signbit(d) ? "-0.0" : "0.0";
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, r.ptr);
    const size_t e = sci.find('e');
    const int exp = std::stoi(sci.substr(e + 1));
    std::string mant = sci.substr(0, e);
    const bool neg = mant[0] == '-';
    if (neg)
        mant.erase(0, 1);
    std::string digits;
    for (char c : mant)
        if (c != '.')
            digits += c;
    std::string out = neg ? "-" : "";
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out += "0." + std::string(size_t(-exp - 1), '0') + digits;
        } else if (size_t(exp) + 1 >= digits.size()) {
            out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
        } else {
            out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (digits.size() > 1)
        out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + ebuf;
}

namespace {

std::string repr_string(const std::string &s)
{
    const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
    const char q = dq ? '"' : '\'';
    std::string out(1, q);
    for (unsigned char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == q)
            out += std::string("\\") + char(q);
        else if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (c == '\t')
            out += "\\t";
        else if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else
            out += char(c);
    }
    return out + q;
}

void json_string(std::string &out, const std::string &s, bool ensure_ascii)
{
    out += '"';
    for (size_t i = 0; i < s.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        switch (c) {
        case '"': out += "\\\""; continue;
        case '\\': out += "\\\\"; continue;
        case '\n': out += "\\n"; continue;
        case '\r': out += "\\r"; continue;
        case '\t': out += "\\t"; continue;
        case '\b': out += "\\b"; continue;
        case '\f': out += "\\f"; continue;
        default: break;
        }
        char buf[16];
        if (c < 0x20) {
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else if (c < 0x80 || !ensure_ascii) {
            out += char(c);
        } else {
            // Decode one UTF-8 sequence; escape it as \uXXXX (a surrogate pair above U+FFFF).
            int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
            uint32_t cp = n == 3 ? c & 0x07 : n == 2 ? c & 0x0F : c & 0x1F;
            if (n == 0 || i + size_t(n) >= s.size()) {
                std::snprintf(buf, sizeof buf, "\\u%04x", 0xFFFD);
                out += buf;
                continue;
            }
            for (int k = 1; k <= n; ++k)
                cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(k)]) & 0x3F);
            i += size_t(n);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            }
            out += buf;
        }
    }
    out += '"';
}

struct JsonWriter {
    int indent;
    bool ensure_ascii;
    bool sort_keys;
    const std::string &item_sep;
    const std::string &key_sep;
    size_t limit;
    std::string out;

    void newline(int level)
    {
        if (indent < 0)
            return;
        out += '\n';
        out.append(size_t(indent) * size_t(level), ' ');
    }

    void write(const Value &v, int level)
    {
        if (out.size() > limit)
            throw TemplateError("tojson: output larger than " + std::to_string(limit) + " bytes");
        if (level > 512)
            throw TemplateError("tojson: value nested too deeply");
        switch (v.kind) {
        case Value::Kind::None: out += "null"; return;
        case Value::Kind::Bool: out += v.b ? "true" : "false"; return;
        case Value::Kind::Int: out += std::to_string(v.i); return;
        case Value::Kind::Float:
            out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity") : py_float(v.f);
            return;
        case Value::Kind::String: json_string(out, v.s, ensure_ascii); return;
        case Value::Kind::List: {
            if (v.seq == Value::Seq::Generator)
                throw TemplateError("tojson: object of type generator is not JSON serializable");
            if (v.list->empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k)
                    out += item_sep;
                newline(level + 1);
                write((*v.list)[k], level + 1);
            }
            newline(level);
            out += ']';
            return;
        }
        case Value::Kind::Dict: {
            if (v.dict->items.empty()) {
                out += "{}";
                return;
            }
            std::vector<const std::pair<std::string, Value> *> items;
            for (const auto &kv : v.dict->items)
                items.push_back(&kv);
            if (sort_keys)
                std::stable_sort(items.begin(), items.end(), [](auto *a, auto *b) { return a->first < b->first; });
            out += '{';
            for (size_t k = 0; k < items.size(); ++k) {
                if (k)
                    out += item_sep;
                newline(level + 1);
                json_string(out, to_str(key_value(items[k]->first)), ensure_ascii);
                out += key_sep;
                write(items[k]->second, level + 1);
            }
            newline(level);
            out += '}';
            return;
        }
        default: throw TemplateError("tojson: object of type " + type_name(v) + " is not JSON serializable");
        }
    }
};

} // namespace

std::string to_json(const Value &v, int indent, bool ensure_ascii, bool sort_keys, const std::string &item_sep,
                    const std::string &key_sep, size_t limit)
{
    JsonWriter w{indent, ensure_ascii, sort_keys, item_sep, key_sep, limit, {}};
    w.write(v, 0);
    return std::move(w.out);
}

std::string repr(const Value &v)
{
    switch (v.kind) {
    case Value::Kind::String: return repr_string(v.s);
    case Value::Kind::List: {
        if (v.seq == Value::Seq::Generator)
            return "<generator object>";
        const bool tuple = v.seq == Value::Seq::Tuple;
        std::string out = tuple ? "(" : "[";
        for (size_t k = 0; k < v.list->size(); ++k)
            out += (k ? ", " : "") + repr((*v.list)[k]);
        return out + (tuple && v.list->size() == 1 ? "," : "") + (tuple ? ")" : "]");
    }
    case Value::Kind::Dict: {
        std::string out = "{";
        for (size_t k = 0; k < v.dict->items.size(); ++k)
            out += (k ? ", " : "") + repr(key_value(v.dict->items[k].first)) + ": " + repr(v.dict->items[k].second);
        return out + "}";
    }
    default: return to_str(v);
    }
}

std::string to_str(const Value &v)
{
    switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: return py_float(v.f);
    case Value::Kind::String: return v.s;
    case Value::Kind::List:
    case Value::Kind::Dict: return repr(v);
    case Value::Kind::Namespace: return "<Namespace " + repr(Value::of_dict(*v.dict)) + ">";
    case Value::Kind::Callable: return "<function " + v.call->name + ">";
    }
    return "";
}

bool truthy(const Value &v)
{
    switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i != 0;
    case Value::Kind::Float: return v.f != 0;
    case Value::Kind::String: return !v.s.empty();
    case Value::Kind::List: return v.seq == Value::Seq::Generator || !v.list->empty();
    case Value::Kind::Dict: return !v.dict->items.empty();
    default: return true;
    }
}

bool equal(const Value &a, const Value &b)
{
    if (a.is_number() && b.is_number()) {
        if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float)
            return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.s == b.s;
    case Value::Kind::List:
        if (a.list->size() != b.list->size())
            return false;
        for (size_t k = 0; k < a.list->size(); ++k)
            if (!equal((*a.list)[k], (*b.list)[k]))
                return false;
        return true;
    case Value::Kind::Dict: {
        if (a.dict->items.size() != b.dict->items.size())
            return false;
        for (const auto &[k, v] : a.dict->items) {
            const Value *o = b.dict->find(k);
            if (!o || !equal(v, *o))
                return false;
        }
        return true;
    }
    case Value::Kind::Namespace: return a.dict == b.dict;
    case Value::Kind::Callable: return a.call == b.call;
    default: return false;
    }
}

std::vector<std::string> code_points(const std::string &s)
{
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        size_t n = 1;
        while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80 && n < 4)
            ++n;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

std::string html_escape(const std::string &s)
{
    std::string out;
    for (char c : s)
        out += c == '&'    ? "&amp;"
               : c == '<'  ? "&lt;"
               : c == '>'  ? "&gt;"
               : c == '"'  ? "&#34;"
               : c == '\'' ? "&#39;"
                           : std::string(1, c);
    return out;
}

size_t code_point_count(const std::string &s)
{
    size_t n = 0;
    for (unsigned char c : s)
        n += (c & 0xC0) != 0x80;
    return n;
}

} // namespace longscope::jinja
