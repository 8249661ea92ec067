// The renderer's internals: values, tokens and the syntax tree.
#pragma once

#include "template/jinja.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace longscope::jinja {

struct Value;
struct CallArgs;
class Interpreter;

using List = std::vector<Value>;
// Insertion-ordered, as Python dicts are. Keys are strings (JSON objects, dict literals).
struct Dict {
    std::vector<std::pair<std::string, Value>> items;
    const Value *find(std::string_view key) const;
    void set(const std::string &key, Value v);
};
struct Callable {
    std::string name;
    std::function<Value(CallArgs &)> fn;
};

struct Value {
    enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };
    Kind kind = Kind::Undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;                  // String; for Undefined, the name that was looked up
    bool safe = false;              // String: markupsafe's Markup (from `safe`, `escape`, Markup + str)
    std::shared_ptr<List> list;     // List
    enum class Seq { List, Tuple, Generator } seq = Seq::List; // what Python would have: list, tuple, generator
    std::shared_ptr<Dict> dict;     // Dict, Namespace
    std::shared_ptr<Callable> call; // Callable

    static Value none() { return make(Kind::None); }
    static Value undefined(std::string name = {})
    {
        Value v;
        v.s = std::move(name);
        return v;
    }
    static Value boolean(bool x)
    {
        Value v = make(Kind::Bool);
        v.b = x;
        return v;
    }
    static Value integer(int64_t x)
    {
        Value v = make(Kind::Int);
        v.i = x;
        return v;
    }
    static Value real(double x)
    {
        Value v = make(Kind::Float);
        v.f = x;
        return v;
    }
    static Value string(std::string x)
    {
        Value v = make(Kind::String);
        v.s = std::move(x);
        return v;
    }
    static Value of_list(List l)
    {
        Value v = make(Kind::List);
        v.list = std::make_shared<List>(std::move(l));
        return v;
    }
    static Value of_dict(Dict d, Kind k = Kind::Dict)
    {
        Value v = make(k);
        v.dict = std::make_shared<Dict>(std::move(d));
        return v;
    }
    static Value function(std::string name, std::function<Value(CallArgs &)> fn)
    {
        Value v = make(Kind::Callable);
        v.call = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
        return v;
    }
    static Value of_tuple(List l)
    {
        Value v = of_list(std::move(l));
        v.seq = Seq::Tuple;
        return v;
    }
    static Value generator(List l)
    {
        Value v = of_list(std::move(l));
        v.seq = Seq::Generator;
        return v;
    }
    static Value from_json(const nlohmann::ordered_json &j);

    bool is(Kind k) const { return kind == k; }
    bool is_undefined() const { return kind == Kind::Undefined; }
    bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
    bool is_mapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }
    double as_double() const { return kind == Kind::Float ? f : double(as_int()); }
    int64_t as_int() const { return kind == Kind::Bool ? int64_t(b) : kind == Kind::Int ? i : float_to_int(f); }

    // A float truncated toward zero; NaN gives 0 and a value past int64's range its nearest
    // limit (a plain cast is undefined there).
    static int64_t float_to_int(double f)
    {
        if (std::isnan(f))
            return 0;
        if (f >= 9223372036854775808.0)
            return INT64_MAX;
        if (f < -9223372036854775808.0)
            return INT64_MIN;
        return int64_t(f);
    }

private:
    static Value make(Kind k)
    {
        Value v;
        v.kind = k;
        return v;
    }
};

struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    std::string where; // "line L, column C" of the call, for errors

    // The argument at `index` or named `name`, or `fallback`; removes it from the arguments.
    Value take(size_t index, std::string_view name, Value fallback = Value::undefined());
    // Throws when arguments are left that the callee did not take.
    void done(std::string_view callee) const;
    size_t taken = 0;
};

// Dict keys: strings as they are; other keys (numbers, booleans, none) encoded after a
// control byte (1-3), so that {0: 'a'} works as in Python; a string that itself starts with
// a byte 0-3 is stored after a 0 byte.
std::string dict_key(const Value &key);
Value key_value(const std::string &key);

// Python's str(), repr(), truth and comparisons, and json.dumps.
std::string to_str(const Value &v);
std::string repr(const Value &v);
// Python's `format % args` (printf-style); TemplateError where Python raises, or past `limit` bytes.
std::string percent_format(const std::string &format, const Value &args, const std::string &at, size_t limit);
bool truthy(const Value &v);
bool equal(const Value &a, const Value &b);
std::string type_name(const Value &v);
// -1, 0, 1 for numbers, strings and lists; TemplateError naming `op` for other types.
int compare_values(const Value &a, const Value &b, const std::string &op, const std::string &at);
std::string py_float(double d);
std::string to_json(const Value &v, int indent, bool ensure_ascii, bool sort_keys, const std::string &item_sep,
                    const std::string &key_sep, size_t limit);

// UTF-8: strings index and measure by code point, as Python's do.
std::vector<std::string> code_points(const std::string &s);
// markupsafe's escape: & < > " ' as entities.
std::string html_escape(const std::string &s);
size_t code_point_count(const std::string &s);

// Tokens.
struct Token {
    enum class Type { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
    Type type;
    std::string text; // data, name, string value, operator, number spelling
    int line = 1;
    int col = 1;
};
std::vector<Token> lex(std::string_view source);

// The syntax tree.
struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Expr {
    enum class Kind { Literal, Name, List, Dict, Attr, Subscript, Slice, Call, Filter, Test, Unary, Binary, Cond };
    Kind kind;
    int line = 0, col = 0;
    std::string name;                                  // Name, Attr, Filter, Test; operator of Unary/Binary
    Value literal;                                     // Literal
    std::vector<ExprPtr> args;                         // operands, elements, call arguments (null: omitted slice part)
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    bool negated = false;                              // Test: is not
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;
struct Macro {
    std::string name;
    std::vector<std::pair<std::string, ExprPtr>> params; // default null when none
    Body body;
};
struct Node {
    enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, Scope };
    Kind kind;
    int line = 0, col = 0;
    std::string text;                  // Text; Set/SetBlock: the variable
    std::string attr;                  // Set: namespace attribute (ns.attr = ...)
    std::vector<std::string> targets;  // For: loop variables
    std::vector<ExprPtr> exprs;        // Output/Set: value; If: conditions; For: iterable, filter (may be null); CallBlock: call
    std::vector<Body> bodies;          // If: one per condition (+ else); For: body, else; others: body
    std::shared_ptr<Macro> macro;      // Macro; CallBlock: caller
};

struct Program {
    Body body;
};

Program parse(std::string_view source, const Limits &limits);

bool has_filter(const std::string &name);
bool has_test(const std::string &name);

std::string where(int line, int col);
[[noreturn]] void fail(int line, int col, const std::string &what);

} // namespace longscope::jinja
