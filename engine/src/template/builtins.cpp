// The built-in filters, tests, methods of strings and dicts, and globals, as jinja2 and Python
// define them (case mapping is ASCII only).
#include "template/interpreter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

namespace longscope::jinja {

namespace {

bool py_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

std::string strip(const std::string &s, const Value &chars, bool left, bool right)
{
    auto drop = [&](unsigned char c) {
        return chars.kind == Value::Kind::String ? chars.s.find(char(c)) != std::string::npos : py_space(c);
    };
    size_t b = 0, e = s.size();
    if (left)
        while (b < e && drop(static_cast<unsigned char>(s[b])))
            ++b;
    if (right)
        while (e > b && drop(static_cast<unsigned char>(s[e - 1])))
            --e;
    return s.substr(b, e - b);
}

std::string upper(std::string s)
{
    for (char &c : s)
        c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

std::string lower(std::string s)
{
    for (char &c : s)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string capitalize(const std::string &s)
{
    std::string out = lower(s);
    if (!out.empty())
        out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
}

// jinja2's title: words start after whitespace, '-', '(', '{', '[' or '<'.
std::string title(const std::string &s)
{
    std::string out;
    bool start = true;
    for (char c : s) {
        const bool sep = py_space(static_cast<unsigned char>(c)) || c == '-' || c == '(' || c == '{' || c == '[' ||
                         c == '<';
        out += start && !sep ? char(std::toupper(static_cast<unsigned char>(c)))
                             : char(std::tolower(static_cast<unsigned char>(c)));
        start = sep;
    }
    return out;
}

std::string replace(const std::string &s, const std::string &from, const std::string &to, int64_t count, size_t limit,
                    const std::string &at)
{
    std::string out;
    if (from.empty()) {
        // Python inserts `to` around every character.
        const auto cps = code_points(s);
        for (size_t k = 0; k < cps.size() && (count < 0 || int64_t(k) < count); ++k) {
            out += to + cps[k];
            if (out.size() > limit)
                throw TemplateError(at + ": replace: result larger than " + std::to_string(limit) + " bytes");
        }
        if (count < 0 || int64_t(cps.size()) < count)
            out += to;
        return out;
    }
    size_t pos = 0;
    for (int64_t n = 0; count < 0 || n < count; ++n) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos)
            break;
        out.append(s, pos, hit - pos);
        out += to;
        pos = hit + from.size();
        if (out.size() > limit)
            throw TemplateError(at + ": replace: result larger than " + std::to_string(limit) + " bytes");
    }
    out.append(s, pos);
    return out;
}

Value split(const std::string &s, const Value &sep, int64_t maxsplit, const std::string &at)
{
    List out;
    if (sep.kind != Value::Kind::String) {
        size_t k = 0;
        while (k < s.size()) {
            while (k < s.size() && py_space(static_cast<unsigned char>(s[k])))
                ++k;
            if (k >= s.size())
                break;
            if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
                out.push_back(Value::string(strip(s.substr(k), Value(), false, true)));
                break;
            }
            size_t e = k;
            while (e < s.size() && !py_space(static_cast<unsigned char>(s[e])))
                ++e;
            out.push_back(Value::string(s.substr(k, e - k)));
            k = e;
        }
        return Value::of_list(std::move(out));
    }
    if (sep.s.empty())
        throw TemplateError(at + ": split: empty separator");
    size_t pos = 0;
    for (;;) {
        const size_t hit = s.find(sep.s, pos);
        if (hit == std::string::npos || (maxsplit >= 0 && int64_t(out.size()) == maxsplit)) {
            out.push_back(Value::string(s.substr(pos)));
            break;
        }
        out.push_back(Value::string(s.substr(pos, hit - pos)));
        pos = hit + sep.s.size();
    }
    return Value::of_list(std::move(out));
}

// str.format with {} {0} {name} fields and {{ }} escapes; no format specifications.
std::string format(const std::string &f, CallArgs &args)
{
    std::string out;
    size_t auto_index = 0;
    for (size_t k = 0; k < f.size(); ++k) {
        const char c = f[k];
        if ((c == '{' || c == '}') && k + 1 < f.size() && f[k + 1] == c) {
            out += c;
            ++k;
            continue;
        }
        if (c == '}')
            throw TemplateError(args.where + ": format: single '}' in format string");
        if (c != '{') {
            out += c;
            continue;
        }
        const size_t close = f.find('}', k);
        if (close == std::string::npos)
            throw TemplateError(args.where + ": format: single '{' in format string");
        const std::string field = f.substr(k + 1, close - k - 1);
        if (field.find_first_of(":!.[") != std::string::npos)
            throw TemplateError(args.where + ": format: field '{" + field + "}' is not supported");
        Value v;
        if (field.empty()) {
            v = auto_index < args.pos.size() ? args.pos[auto_index] : Value::undefined();
            ++auto_index;
        } else if (std::all_of(field.begin(), field.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
            size_t idx = 0;
            const bool in_range = std::from_chars(field.data(), field.data() + field.size(), idx).ec == std::errc();
            v = in_range && idx < args.pos.size() ? args.pos[idx] : Value::undefined();
        } else {
            for (auto &[name, val] : args.kw)
                if (name == field)
                    v = val;
        }
        if (v.is_undefined())
            throw TemplateError(args.where + ": format: no argument for '{" + field + "}'");
        out += to_str(v);
        k = close;
    }
    return out;
}

int64_t length(const Value &v, const std::string &at)
{
    switch (v.kind) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return int64_t(code_point_count(v.s));
    case Value::Kind::List:
        if (v.seq == Value::Seq::Generator)
            throw TemplateError(at + ": object of type 'generator' has no len()");
        return int64_t(v.list->size());
    case Value::Kind::Dict:
    case Value::Kind::Namespace: return int64_t(v.dict->items.size());
    default: throw TemplateError(at + ": object of type '" + type_name(v) + "' has no len()");
    }
}

Value to_int(const Value &v, const Value &def, int base)
{
    if (v.kind == Value::Kind::String) {
        const std::string s = strip(v.s, Value(), true, true);
        if (!s.empty()) {
            try {
                size_t used = 0;
                const long long x = std::stoll(s, &used, base);
                if (used == s.size())
                    return Value::integer(x);
            } catch (const std::exception &) {
            }
            try {
                size_t used = 0;
                const double d = std::stod(s, &used);
                if (used == s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
                    return Value::integer(int64_t(d));
            } catch (const std::exception &) {
            }
        }
        return def;
    }
    if (v.is_number()) {
        if (v.kind == Value::Kind::Float && (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18))
            return def;
        return Value::integer(v.as_int());
    }
    return def;
}

Value to_float(const Value &v, const Value &def)
{
    if (v.is_number())
        return Value::real(v.as_double());
    if (v.kind == Value::Kind::String) {
        const std::string s = strip(v.s, Value(), true, true);
        try {
            size_t used = 0;
            const double d = std::stod(s, &used);
            if (used == s.size())
                return Value::real(d);
        } catch (const std::exception &) {
        }
    }
    return def;
}

std::string indent(const std::string &text, const Value &width, bool first, bool blank)
{
    const std::string pad = width.kind == Value::Kind::String ? width.s : std::string(size_t(std::max<int64_t>(0, width.as_int())), ' ');
    std::vector<std::string> lines;
    const std::string s = text + "\n";
    size_t pos = 0;
    while (pos < s.size()) {
        size_t e = s.find_first_of("\r\n", pos);
        lines.push_back(s.substr(pos, e - pos));
        pos = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
    }
    std::string out;
    for (size_t k = 0; k < lines.size(); ++k) {
        if (k)
            out += "\n";
        if ((k > 0 || first) && (blank || !lines[k].empty()))
            out += pad;
        out += lines[k];
    }
    if (first && !blank && !lines.empty() && lines[0].empty())
        out.insert(0, pad);
    return out;
}

const std::set<std::string> &filter_names()
{
    static const std::set<std::string> names{
        "abs",    "attr",  "capitalize", "count", "d",      "default",   "dictsort", "first",     "float",
        "indent", "int",   "items",      "join",  "last",   "length",    "list",     "lower",     "map",
        "max",    "min",   "reject",     "rejectattr",      "replace",   "reverse",  "round",     "safe",
        "select", "selectattr",          "sort",  "string", "sum",       "title",    "tojson",    "trim",
        "unique", "upper", "wordcount",  "e",     "escape"};
    return names;
}

const std::set<std::string> &test_names()
{
    static const std::set<std::string> names{
        "boolean", "callable", "defined", "divisibleby", "eq",    "equalto", "even",      "false",  "filter",
        "float",   "ge",       "gt",      "greaterthan", "in",    "integer", "iterable",  "le",     "lower",
        "lt",      "lessthan", "mapping", "ne",          "none",  "number",  "odd",       "sameas", "sequence",
        "string",  "test",     "true",    "undefined",   "upper", "escaped", "==",        "!=",     "<",
        ">",       "<=",       ">="};
    return names;
}

// Dict attributes Python has; the mutating ones are refused as the sandbox refuses them.
const std::set<std::string> dict_attributes{"clear", "copy",       "fromkeys", "get",    "items", "keys",
                                            "pop",   "popitem",    "setdefault", "update", "values"};

} // namespace

bool has_filter(const std::string &name) { return filter_names().count(name) > 0; }
bool has_test(const std::string &name) { return test_names().count(name) > 0; }

// ---- attributes and methods ----

// jinja2's attribute getter for map, selectattr, join, unique, sort: "a.b.0" goes through
// items, then attributes.
Value Interpreter::attribute_or_item(const Value &x, const Value &attr, const std::string &at)
{
    if (attr.kind == Value::Kind::Int)
        return subscript(x, attr, at);
    Value cur = x;
    const std::string path = to_str(attr);
    size_t pos = 0;
    for (;;) {
        const size_t dot = path.find('.', pos);
        const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        if (cur.is_undefined())
            return cur;
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
        int64_t index = 0;
        if (digits && std::from_chars(part.data(), part.data() + part.size(), index).ec != std::errc())
            return Value::undefined(); // past any list's length, and no key (jinja2: undefined too)
        cur = digits ? subscript(cur, Value::integer(index), at) : subscript(cur, Value::string(part), at);
        if (dot == std::string::npos)
            return cur;
        pos = dot + 1;
    }
}

Value Interpreter::attribute(const Value &obj, const std::string &name, const std::string &at)
{
    auto method = [&](auto fn) {
        return Value::function(name, [obj, fn, name, this](CallArgs &a) {
            Value r = fn(a);
            a.done("." + name + "()");
            return r;
        });
    };
    switch (obj.kind) {
    case Value::Kind::Namespace:
        if (const Value *v = obj.dict->find(name))
            return *v;
        return Value::undefined(name);
    case Value::Kind::Dict:
        if (!dict_attributes.count(name)) {
            if (const Value *v = obj.dict->find(name))
                return *v;
            return Value::undefined(name);
        }
        if (name == "items")
            return method([obj](CallArgs &) {
                List l;
                for (const auto &[k, v] : obj.dict->items)
                    l.push_back(Value::of_tuple({key_value(k), v}));
                return Value::of_list(std::move(l));
            });
        if (name == "keys" || name == "values")
            return method([obj, name](CallArgs &) {
                List l;
                for (const auto &[k, v] : obj.dict->items)
                    l.push_back(name == "keys" ? key_value(k) : v);
                return Value::of_list(std::move(l));
            });
        if (name == "get")
            return method([obj](CallArgs &a) {
                Value key = a.take(0, "key");
                Value def = a.take(1, "default", Value::none());
                if (key.kind != Value::Kind::List && key.kind != Value::Kind::Dict && !key.is_undefined())
                    if (const Value *v = obj.dict->find(dict_key(key)))
                        return *v;
                return def;
            });
        if (name == "copy")
            return method([obj](CallArgs &) { return Value::of_dict(*obj.dict); });
        return Value::function(name, [name](CallArgs &a) -> Value {
            throw TemplateError(a.where + ": dict." + name + "(): modifying a dict is not allowed in a template");
        });
    case Value::Kind::String: {
        const std::string &s = obj.s;
        if (name == "strip" || name == "lstrip" || name == "rstrip")
            return method([s, name](CallArgs &a) {
                return Value::string(strip(s, a.take(0, "chars"), name != "rstrip", name != "lstrip"));
            });
        if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
            return method([s, name](CallArgs &) {
                return Value::string(name == "upper"   ? upper(s)
                                     : name == "lower" ? lower(s)
                                     : name == "title" ? title(s)
                                                       : capitalize(s));
            });
        if (name == "split")
            return method([s, at](CallArgs &a) {
                Value sep = a.take(0, "sep");
                return split(s, sep, a.take(1, "maxsplit", Value::integer(-1)).as_int(), at);
            });
        if (name == "startswith" || name == "endswith")
            return method([s, name, at](CallArgs &a) {
                Value p = a.take(0, "prefix");
                List options = p.kind == Value::Kind::List ? *p.list : List{p};
                for (const Value &o : options) {
                    if (o.kind != Value::Kind::String)
                        throw TemplateError(at + ": " + name + ": expected a string, got " + type_name(o));
                    const bool hit = name == "startswith" ? s.rfind(o.s, 0) == 0
                                                          : s.size() >= o.s.size() &&
                                                                s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0;
                    if (hit)
                        return Value::boolean(true);
                }
                return Value::boolean(false);
            });
        if (name == "replace")
            return method([s, at, this](CallArgs &a) {
                Value from = a.take(0, "old"), to = a.take(1, "new");
                if (from.kind != Value::Kind::String || to.kind != Value::Kind::String)
                    throw TemplateError(at + ": replace: expected strings");
                return Value::string(
                    replace(s, from.s, to.s, a.take(2, "count", Value::integer(-1)).as_int(), limits().max_output, at));
            });
        if (name == "format")
            return Value::function(name, [s](CallArgs &a) { return Value::string(format(s, a)); });
        if (name == "find")
            return method([s](CallArgs &a) {
                Value sub = a.take(0, "sub");
                const size_t hit = s.find(to_str(sub));
                return Value::integer(hit == std::string::npos ? -1 : int64_t(code_point_count(s.substr(0, hit))));
            });
        if (name == "join")
            return method([s, at, this](CallArgs &a) {
                std::string out;
                const List items = iterate(a.take(0, "iterable"), at);
                for (size_t k = 0; k < items.size(); ++k)
                    out += (k ? s : "") + to_str(items[k]);
                return Value::string(out);
            });
        return Value::undefined(name);
    }
    default: return Value::undefined(name);
    }
}

// ---- filters ----

Value Interpreter::filter(const std::string &name, const Value &v, CallArgs &a)
{
    const std::string at = a.where + ": filter '" + name + "'";
    auto done = [&](Value r) {
        a.done("filter '" + name + "'");
        return r;
    };
    auto items = [&](const Value &x) { return iterate(x, at); };
    if (name == "trim")
        return done(Value::string(strip(to_str(v), a.take(0, "chars"), true, true)));
    if (name == "length" || name == "count")
        return done(Value::integer(length(v, at)));
    if (name == "string")
        return done(v.kind == Value::Kind::String ? v : Value::string(to_str(v)));
    if (name == "safe" || name == "e" || name == "escape") {
        const bool escape = name != "safe" && !(v.kind == Value::Kind::String && v.safe);
        Value r = Value::string(escape ? html_escape(to_str(v)) : to_str(v));
        r.safe = true;
        return done(r);
    }
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
        const std::string s = to_str(v);
        return done(Value::string(name == "upper"   ? upper(s)
                                  : name == "lower" ? lower(s)
                                  : name == "title" ? title(s)
                                                    : capitalize(s)));
    }
    if (name == "tojson") {
        const bool ensure_ascii = truthy(a.take(0, "ensure_ascii", Value::boolean(false)));
        const Value ind = a.take(1, "indent", Value::none());
        const Value seps = a.take(2, "separators", Value::none());
        const bool sort_keys = truthy(a.take(3, "sort_keys", Value::boolean(false)));
        if (ind.kind != Value::Kind::None && ind.kind != Value::Kind::Int)
            throw TemplateError(at + ": indent must be an integer");
        const int indent = ind.kind == Value::Kind::Int ? int(std::clamp<int64_t>(ind.i, 0, 64)) : -1;
        std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
        if (seps.kind == Value::Kind::List && seps.list->size() == 2) {
            item_sep = to_str((*seps.list)[0]);
            key_sep = to_str((*seps.list)[1]);
        }
        try {
            return done(Value::string(to_json(v, indent, ensure_ascii, sort_keys, item_sep, key_sep, limits().max_output)));
        } catch (const TemplateError &e) {
            throw TemplateError(a.where + ": " + e.what());
        }
    }
    if (name == "replace") {
        Value from = a.take(0, "old"), to = a.take(1, "new");
        return done(Value::string(replace(to_str(v), to_str(from), to_str(to),
                                          a.take(2, "count", Value::integer(-1)).as_int(), limits().max_output, at)));
    }
    if (name == "first" || name == "last") {
        if (name == "last" && v.kind == Value::Kind::List && v.seq == Value::Seq::Generator)
            throw TemplateError(at + ": 'generator' object is not reversible");
        const List l = items(v);
        if (l.empty())
            return done(Value::undefined());
        return done(name == "first" ? l.front() : l.back());
    }
    if (name == "join") {
        const std::string sep = to_str(a.take(0, "d", Value::string("")));
        const Value attr = a.take(1, "attribute", Value::none());
        std::string out;
        const List l = items(v);
        for (size_t k = 0; k < l.size(); ++k) {
            out += (k ? sep : "") + to_str(attr.kind == Value::Kind::None ? l[k] : attribute_or_item(l[k], attr, at));
            check_size(out.size(), at);
        }
        return done(Value::string(out));
    }
    if (name == "default" || name == "d") {
        Value def = a.take(0, "default_value", Value::string(""));
        const bool boolean = truthy(a.take(1, "boolean", Value::boolean(false)));
        return done(v.is_undefined() || (boolean && !truthy(v)) ? def : v);
    }
    if (name == "items") {
        if (v.is_undefined())
            return done(Value::of_list({}));
        if (!v.is_mapping())
            throw TemplateError(at + ": can only get items of a mapping, got " + type_name(v));
        List l;
        for (const auto &[k, x] : v.dict->items)
            l.push_back(Value::of_tuple({key_value(k), x}));
        return done(Value::generator(std::move(l)));
    }
    if (name == "list")
        return done(Value::of_list(items(v)));
    if (name == "tuple")
        return done(Value::of_tuple(items(v)));
    if (name == "reverse") {
        if (v.kind == Value::Kind::String) {
            auto cps = code_points(v.s);
            std::string out;
            for (auto it = cps.rbegin(); it != cps.rend(); ++it)
                out += *it;
            return done(Value::string(out));
        }
        List l = items(v);
        std::reverse(l.begin(), l.end());
        return done(Value::generator(std::move(l)));
    }
    if (name == "map") {
        List out;
        if (!truthy(v)) {
            a.kw.clear();
            return Value::generator({});
        }
        Value attr = a.take(size_t(-1), "attribute");
        if (!attr.is_undefined()) {
            Value def = a.take(size_t(-1), "default");
            for (const Value &x : items(v)) {
                Value r = attribute_or_item(x, attr, at);
                out.push_back(r.is_undefined() && !def.is_undefined() ? def : r);
            }
            return done(Value::generator(std::move(out)));
        }
        if (a.pos.empty())
            throw TemplateError(at + ": map needs a filter name or attribute=");
        const std::string f = to_str(a.pos[0]);
        if (!has_filter(f))
            throw TemplateError(at + ": no filter named '" + f + "'");
        for (const Value &x : items(v)) {
            CallArgs sub{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw, a.where};
            out.push_back(filter(f, x, sub));
        }
        return Value::generator(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
        const bool by_attr = name == "selectattr" || name == "rejectattr";
        const bool keep = name == "select" || name == "selectattr";
        size_t k = 0;
        Value attr = by_attr ? (a.pos.size() > k ? a.pos[k++] : Value::undefined()) : Value();
        if (by_attr && attr.is_undefined())
            throw TemplateError(at + ": an attribute name is required");
        std::string t = a.pos.size() > k ? to_str(a.pos[k++]) : "";
        if (!t.empty() && !has_test(t))
            throw TemplateError(at + ": no test named '" + t + "'");
        List out;
        if (!truthy(v))
            return Value::generator({});
        for (const Value &x : items(v)) {
            const Value subject = by_attr ? attribute_or_item(x, attr, at) : x;
            CallArgs sub{std::vector<Value>(a.pos.begin() + std::ptrdiff_t(k), a.pos.end()), a.kw, a.where};
            const bool ok = t.empty() ? truthy(subject) : test(t, subject, sub);
            if (ok == keep)
                out.push_back(x);
        }
        return Value::generator(std::move(out));
    }
    if (name == "int") {
        Value def = a.take(0, "default", Value::integer(0));
        return done(to_int(v, def, int(a.take(1, "base", Value::integer(10)).as_int())));
    }
    if (name == "float")
        return done(to_float(v, a.take(0, "default", Value::real(0.0))));
    if (name == "abs") {
        if (!v.is_number())
            throw TemplateError(at + ": bad operand type '" + type_name(v) + "'");
        return done(v.kind == Value::Kind::Float ? Value::real(std::fabs(v.f)) : Value::integer(std::llabs(v.as_int())));
    }
    if (name == "round") {
        const int64_t precision = a.take(0, "precision", Value::integer(0)).as_int();
        const std::string method = to_str(a.take(1, "method", Value::string("common")));
        const double p = std::pow(10.0, double(precision));
        const double x = v.as_double() * p;
        const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
        return done(Value::real(r / p));
    }
    if (name == "unique") {
        const bool cs = truthy(a.take(0, "case_sensitive", Value::boolean(false)));
        const Value attr = a.take(1, "attribute", Value::none());
        List out, seen;
        for (const Value &x : items(v)) {
            Value key = attr.kind == Value::Kind::None ? x : attribute_or_item(x, attr, at);
            if (!cs && key.kind == Value::Kind::String)
                key = Value::string(lower(key.s));
            if (std::none_of(seen.begin(), seen.end(), [&](const Value &s) { return equal(s, key); })) {
                seen.push_back(key);
                out.push_back(x);
            }
        }
        return done(Value::of_list(std::move(out)));
    }
    if (name == "indent") {
        Value width = a.take(0, "width", Value::integer(4));
        const bool first = truthy(a.take(1, "first", Value::boolean(false)));
        const bool blank = truthy(a.take(2, "blank", Value::boolean(false)));
        const std::string out = indent(to_str(v), width, first, blank);
        check_size(out.size(), at);
        return done(Value::string(out));
    }
    if (name == "wordcount")
        return done(Value::integer(int64_t(split(to_str(v), Value(), -1, at).list->size())));
    if (name == "attr")
        return done(attribute(v, to_str(a.take(0, "name")), at));
    if (name == "sum" || name == "min" || name == "max" || name == "sort" || name == "dictsort") {
        const bool sum = name == "sum";
        const Value attr = a.take(sum ? 0 : 3, "attribute", Value::none());
        List l;
        if (name == "dictsort") {
            CallArgs none{{}, {}, a.where};
            l = *filter("items", v, none).list;
        } else {
            l = items(v);
        }
        auto key = [&](const Value &x) {
            if (name == "dictsort")
                return (*x.list)[0];
            return attr.kind == Value::Kind::None ? x : attribute_or_item(x, attr, at);
        };
        if (sum) {
            Value acc = a.take(1, "start", Value::integer(0));
            for (const Value &x : l)
                acc = arithmetic("+", acc, key(x), at);
            return done(acc);
        }
        const bool rev = name == "sort" || name == "dictsort" ? truthy(a.take(0, "reverse", Value::boolean(false))) : false;
        const bool cs = truthy(a.take(name == "sort" ? 1 : 0, "case_sensitive", Value::boolean(false)));
        auto less = [&](const Value &x, const Value &y) {
            Value kx = key(x), ky = key(y);
            if (!cs && kx.kind == Value::Kind::String && ky.kind == Value::Kind::String)
                return lower(kx.s) < lower(ky.s);
            return compare_values(kx, ky, "<", at) < 0;
        };
        if (name == "min" || name == "max") {
            if (l.empty())
                return done(Value::undefined());
            return done(name == "min" ? *std::min_element(l.begin(), l.end(), less)
                                      : *std::max_element(l.begin(), l.end(), less));
        }
        std::stable_sort(l.begin(), l.end(), less);
        if (rev)
            std::reverse(l.begin(), l.end());
        return done(Value::of_list(std::move(l)));
    }
    throw TemplateError(at + ": no such filter");
}

// ---- tests ----

bool Interpreter::test(const std::string &name, const Value &v, CallArgs &a)
{
    const std::string at = a.where + ": test '" + name + "'";
    auto arg = [&] { return a.take(0, "value"); };
    bool r = false;
    if (name == "defined")
        r = !v.is_undefined();
    else if (name == "undefined")
        r = v.is_undefined();
    else if (name == "none")
        r = v.kind == Value::Kind::None;
    else if (name == "string")
        r = v.kind == Value::Kind::String;
    else if (name == "number")
        r = v.is_number();
    else if (name == "integer")
        r = v.kind == Value::Kind::Int;
    else if (name == "float")
        r = v.kind == Value::Kind::Float;
    else if (name == "boolean")
        r = v.kind == Value::Kind::Bool;
    else if (name == "true")
        r = v.kind == Value::Kind::Bool && v.b;
    else if (name == "false")
        r = v.kind == Value::Kind::Bool && !v.b;
    else if (name == "mapping")
        r = v.kind == Value::Kind::Dict;
    else if (name == "iterable")
        r = v.kind == Value::Kind::String || v.kind == Value::Kind::List || v.kind == Value::Kind::Dict ||
            v.is_undefined();
    else if (name == "sequence")
        r = v.kind == Value::Kind::String || v.kind == Value::Kind::List || v.kind == Value::Kind::Dict;
    else if (name == "callable")
        r = v.kind == Value::Kind::Callable;
    else if (name == "odd" || name == "even") {
        if (!v.is_number())
            throw TemplateError(at + ": expected a number, got " + type_name(v));
        r = (v.as_int() % 2 != 0) == (name == "odd");
    } else if (name == "divisibleby") {
        const int64_t d = arg().as_int();
        if (d == 0)
            throw TemplateError(at + ": division by zero");
        r = v.as_int() % d == 0;
    } else if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
        r = equal(v, arg());
    else if (name == "ne" || name == "!=")
        r = !equal(v, arg());
    else if (name == "lt" || name == "lessthan" || name == "<")
        r = (compare_values(v, arg(), name, at) < 0);
    else if (name == "gt" || name == "greaterthan" || name == ">")
        r = (compare_values(arg(), v, name, at) < 0);
    else if (name == "le" || name == "<=")
        r = !(compare_values(arg(), v, name, at) < 0);
    else if (name == "ge" || name == ">=")
        r = !(compare_values(v, arg(), name, at) < 0);
    else if (name == "in") {
        const Value c = arg();
        if (c.kind == Value::Kind::String)
            r = v.kind == Value::Kind::String && c.s.find(v.s) != std::string::npos;
        else if (c.is_mapping())
            r = v.kind == Value::Kind::String && c.dict->find(v.s);
        else
            for (const Value &x : iterate(c, at))
                r = r || equal(x, v);
    } else if (name == "lower")
        r = v.kind == Value::Kind::String && lower(v.s) == v.s;
    else if (name == "upper")
        r = v.kind == Value::Kind::String && upper(v.s) == v.s;
    else if (name == "filter")
        r = v.kind == Value::Kind::String && has_filter(v.s);
    else if (name == "test")
        r = v.kind == Value::Kind::String && has_test(v.s);
    else if (name == "escaped")
        r = false;
    else
        throw TemplateError(at + ": no such test");
    a.done("test '" + name + "'");
    return r;
}

// ---- globals ----

void Interpreter::install_globals(Scope &g)
{
    g.vars["range"] = Value::function("range", [this](CallArgs &a) {
        int64_t start = 0, stop = 0, step = 1;
        for (const Value &x : a.pos)
            if (x.kind != Value::Kind::Int && x.kind != Value::Kind::Bool)
                throw TemplateError(a.where + ": range: expected integers, got " + type_name(x));
        if (a.pos.size() == 1)
            stop = a.pos[0].as_int();
        else if (a.pos.size() == 2 || a.pos.size() == 3) {
            start = a.pos[0].as_int();
            stop = a.pos[1].as_int();
            if (a.pos.size() == 3)
                step = a.pos[2].as_int();
        } else
            throw TemplateError(a.where + ": range: expected 1 to 3 arguments");
        if (step == 0)
            throw TemplateError(a.where + ": range: step must not be zero");
        const double n = std::ceil((double(stop) - double(start)) / double(step));
        if (n > double(limits().max_loop_iterations))
            throw TemplateError(a.where + ": range: more than " + std::to_string(limits().max_loop_iterations) +
                                " items");
        List l;
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
            l.push_back(Value::integer(k));
        if (!a.kw.empty())
            a.done("range");
        return Value::of_list(std::move(l));
    });
    auto dict_of = [](CallArgs &a, const char *what) {
        Dict d;
        if (a.pos.size() > 1)
            throw TemplateError(a.where + ": " + what + ": expected at most one positional argument");
        if (a.pos.size() == 1) {
            if (!a.pos[0].is_mapping())
                throw TemplateError(a.where + ": " + what + ": expected a mapping");
            d = *a.pos[0].dict;
        }
        for (auto &[k, v] : a.kw)
            d.set(k, v);
        return d;
    };
    g.vars["namespace"] = Value::function("namespace", [this, dict_of](CallArgs &a) {
        Dict d = dict_of(a, "namespace");
        for (const auto &kv : d.items)
            if (!kv.first.empty() && kv.first[0] == '_')
                throw TemplateError(a.where + ": namespace: attributes may not start with '_'");
        Value ns = Value::of_dict(std::move(d), Value::Kind::Namespace);
        m_namespaces.push_back(ns.dict);
        return ns;
    });
    g.vars["dict"] = Value::function("dict", [dict_of](CallArgs &a) { return Value::of_dict(dict_of(a, "dict")); });
    g.vars["raise_exception"] = Value::function("raise_exception", [](CallArgs &a) -> Value {
        throw TemplateError(a.where + ": raise_exception: " + (a.pos.empty() ? std::string() : to_str(a.pos[0])));
    });
    g.vars["strftime_now"] = Value::function("strftime_now", [this](CallArgs &a) {
        const std::string fmt = to_str(a.take(0, "format"));
        a.done("strftime_now");
        std::tm tm{};
        if (m_options.now) {
            tm = *m_options.now;
        } else {
            const std::time_t t = std::time(nullptr);
            localtime_r(&t, &tm);
        }
        if (fmt.size() > 1024)
            throw TemplateError(a.where + ": strftime_now: format too long");
        std::string buf(fmt.size() * 64 + 64, '\0');
        const size_t n = fmt.empty() ? 0 : std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
        buf.resize(n);
        return Value::string(buf);
    });
}

} // namespace longscope::jinja
