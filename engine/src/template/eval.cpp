// The evaluator: statements and expressions over Python-like values, within the bounds.
#include "template/interpreter.h"

#include <cmath>

namespace longscope::jinja {

Interpreter::~Interpreter()
{
    for (const ScopePtr &s : m_macro_scopes)
        s->vars.clear();
    for (const auto &d : m_namespaces)
        d->items.clear();
}

Interpreter::Deeper::Deeper(Interpreter &i, int line, int col) : in(i)
{
    if (++in.m_depth > in.limits().max_depth)
        fail(line, col, "nesting or recursion deeper than " + std::to_string(in.limits().max_depth) + " levels");
}

void Interpreter::check_size(size_t n, const std::string &at) const
{
    if (n > limits().max_output)
        throw TemplateError(at + ": value larger than " + std::to_string(limits().max_output) + " bytes or items");
}

void Interpreter::count_iteration(const std::string &at)
{
    if (++m_iterations > limits().max_loop_iterations)
        throw TemplateError(at + ": more than " + std::to_string(limits().max_loop_iterations) + " loop iterations");
}

void Interpreter::append(std::string &out, const std::string &text, const std::string &at) const
{
    if (out.size() + text.size() > limits().max_output)
        throw TemplateError(at + ": output larger than " + std::to_string(limits().max_output) + " bytes");
    out += text;
}

List Interpreter::iterate(const Value &v, const std::string &at) const
{
    switch (v.kind) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return *v.list;
    case Value::Kind::Dict: {
        List keys;
        for (const auto &kv : v.dict->items)
            keys.push_back(key_value(kv.first));
        return keys;
    }
    case Value::Kind::String: {
        List chars;
        for (auto &c : code_points(v.s))
            chars.push_back(Value::string(std::move(c)));
        return chars;
    }
    default: throw TemplateError(at + ": '" + type_name(v) + "' object is not iterable");
    }
}

// ---- statements ----

Interpreter::Flow Interpreter::exec(const Body &body, const ScopePtr &scope, std::string &out)
{
    for (const auto &n : body)
        if (Flow f = exec_node(*n, scope, out); f != Flow::Normal)
            return f;
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_node(const Node &n, const ScopePtr &scope, std::string &out)
{
    Deeper d(*this, n.line, n.col);
    const std::string at = where(n.line, n.col);
    switch (n.kind) {
    case Node::Kind::Text: append(out, n.text, at); return Flow::Normal;
    case Node::Kind::Output: append(out, to_str(eval(*n.exprs[0], scope)), at); return Flow::Normal;
    case Node::Kind::If:
        for (size_t k = 0; k < n.exprs.size(); ++k)
            if (truthy(eval(*n.exprs[k], scope)))
                return exec(n.bodies[k], scope, out);
        if (n.bodies.size() > n.exprs.size())
            return exec(n.bodies.back(), scope, out);
        return Flow::Normal;
    case Node::Kind::For: return exec_for(n, scope, out);
    case Node::Kind::Set:
    case Node::Kind::SetBlock: exec_set(n, scope, out); return Flow::Normal;
    case Node::Kind::Macro: scope->vars[n.macro->name] = make_macro(n.macro, scope); return Flow::Normal;
    case Node::Kind::CallBlock: {
        const Expr &call = *n.exprs[0];
        Value callee = eval(*call.args[0], scope);
        CallArgs args = arguments(call, 1, scope);
        args.kw.emplace_back("caller", make_macro(n.macro, scope));
        append(out, to_str(this->call(callee, args, at)), at);
        return Flow::Normal;
    }
    case Node::Kind::FilterBlock: {
        std::string text;
        exec(n.bodies[0], std::make_shared<Scope>(Scope{{}, scope}), text);
        Value v = Value::string(std::move(text));
        for (const auto &f : n.exprs) {
            CallArgs args = arguments(*f, 1, scope);
            args.where = where(f->line, f->col);
            v = filter(f->name, v, args);
        }
        append(out, to_str(v), at);
        return Flow::Normal;
    }
    case Node::Kind::Break: return Flow::Break;
    case Node::Kind::Continue: return Flow::Continue;
    case Node::Kind::Scope: return exec(n.bodies[0], scope, out);
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_for(const Node &n, const ScopePtr &scope, std::string &out)
{
    exec_loop(n, scope, eval(*n.exprs[0], scope), 1, out);
    return Flow::Normal;
}

void Interpreter::exec_loop(const Node &n, const ScopePtr &scope, const Value &iterable, int64_t depth,
                            std::string &out)
{
    const std::string at = where(n.line, n.col);
    List all = iterate(iterable, at);
    auto bind = [&](Scope &s, const Value &item) {
        if (n.targets.size() == 1) {
            s.vars[n.targets[0]] = item;
            return;
        }
        List parts = iterate(item, at);
        if (parts.size() != n.targets.size())
            throw TemplateError(at + ": for: cannot unpack " + std::to_string(parts.size()) + " values into " +
                                std::to_string(n.targets.size()) + " names");
        for (size_t k = 0; k < parts.size(); ++k)
            s.vars[n.targets[k]] = parts[k];
    };
    List items;
    if (n.exprs[1]) {
        for (const Value &item : all) {
            count_iteration(at);
            auto s = std::make_shared<Scope>(Scope{{}, scope});
            bind(*s, item);
            if (truthy(eval(*n.exprs[1], s)))
                items.push_back(item);
        }
    } else {
        items = std::move(all);
    }
    if (items.empty()) {
        exec(n.bodies[1], scope, out);
        return;
    }
    const int64_t len = int64_t(items.size());
    for (int64_t k = 0; k < len; ++k) {
        count_iteration(at);
        auto s = std::make_shared<Scope>(Scope{{}, scope});
        bind(*s, items[size_t(k)]);
        Dict loop;
        loop.set("index", Value::integer(k + 1));
        loop.set("index0", Value::integer(k));
        loop.set("revindex", Value::integer(len - k));
        loop.set("revindex0", Value::integer(len - k - 1));
        loop.set("first", Value::boolean(k == 0));
        loop.set("last", Value::boolean(k == len - 1));
        loop.set("length", Value::integer(len));
        loop.set("depth", Value::integer(depth));
        loop.set("depth0", Value::integer(depth - 1));
        loop.set("previtem", k > 0 ? items[size_t(k - 1)] : Value::undefined("previtem"));
        loop.set("nextitem", k + 1 < len ? items[size_t(k + 1)] : Value::undefined("nextitem"));
        loop.set("cycle", Value::function("cycle", [k](CallArgs &a) {
                     if (a.pos.empty())
                         throw TemplateError(a.where + ": loop.cycle: no items");
                     return a.pos[size_t(k) % a.pos.size()];
                 }));
        if (n.attr == "recursive") // loop(children): the same body over other items, one level deeper
            loop.set("__call__", Value::function("loop", [this, &n, scope, depth](CallArgs &a) {
                         if (a.pos.size() != 1 || !a.kw.empty())
                             throw TemplateError(a.where + ": loop(): takes one iterable");
                         std::string text;
                         exec_loop(n, scope, a.pos[0], depth + 1, text);
                         return Value::string(std::move(text));
                     }));
        s->vars["loop"] = Value::of_dict(std::move(loop));
        if (exec(n.bodies[0], s, out) == Flow::Break)
            break;
    }
}

void Interpreter::exec_set(const Node &n, const ScopePtr &scope, std::string &out)
{
    (void)out;
    const std::string at = where(n.line, n.col);
    Value v;
    if (n.kind == Node::Kind::SetBlock) {
        std::string text;
        exec(n.bodies[0], std::make_shared<Scope>(Scope{{}, scope}), text);
        v = Value::string(std::move(text));
        for (const auto &f : n.exprs) {
            CallArgs args = arguments(*f, 1, scope);
            args.where = where(f->line, f->col);
            v = filter(f->name, v, args);
        }
    } else {
        v = eval(*n.exprs[0], scope);
    }
    if (n.attr.empty()) {
        scope->vars[n.text] = std::move(v);
        return;
    }
    const Value *target = scope->lookup(n.text);
    if (!target || target->kind != Value::Kind::Namespace)
        throw TemplateError(at + ": set: cannot assign attribute on non-namespace object '" + n.text + "'");
    if (!n.attr.empty() && n.attr[0] == '_')
        throw TemplateError(at + ": set: namespace attributes may not start with '_'");
    target->dict->set(n.attr, std::move(v));
}

Value Interpreter::make_macro(const std::shared_ptr<Macro> &m, const ScopePtr &scope)
{
    m_macro_scopes.push_back(scope);
    return Value::function(m->name, [this, m, scope](CallArgs &args) {
        Deeper d(*this, 0, 0);
        auto s = std::make_shared<Scope>(Scope{{}, scope});
        for (size_t k = 0; k < m->params.size(); ++k) {
            const auto &[name, def] = m->params[k];
            Value v = args.take(k, name);
            if (v.is_undefined() && def)
                v = eval(*def, s);
            s->vars[name] = v.is_undefined() ? Value::undefined(name) : v;
        }
        List varargs(args.pos.begin() + std::ptrdiff_t(std::min(args.pos.size(), m->params.size())), args.pos.end());
        s->vars["varargs"] = Value::of_list(std::move(varargs));
        Dict kwargs;
        for (auto &[k, v] : args.kw)
            if (k == "caller")
                s->vars["caller"] = v;
            else
                kwargs.set(k, v);
        s->vars["kwargs"] = Value::of_dict(std::move(kwargs));
        std::string text;
        exec(m->body, s, text);
        return Value::string(std::move(text));
    });
}

// ---- expressions ----

CallArgs Interpreter::arguments(const Expr &e, size_t first, const ScopePtr &scope)
{
    CallArgs a;
    a.where = where(e.line, e.col);
    for (size_t k = first; k < e.args.size(); ++k)
        a.pos.push_back(eval(*e.args[k], scope));
    for (const auto &[name, x] : e.kwargs)
        a.kw.emplace_back(name, eval(*x, scope));
    return a;
}

Value Interpreter::call(const Value &callee, CallArgs &args, const std::string &what)
{
    if (callee.is_mapping()) // a recursive loop's `loop`: a mapping that can be called
        if (const Value *fn = callee.dict->find("__call__"); fn && fn->kind == Value::Kind::Callable)
            return fn->call->fn(args);
    if (callee.kind != Value::Kind::Callable) {
        if (callee.is_undefined())
            throw TemplateError(args.where + ": " + what + ": '" + callee.s + "' is undefined");
        throw TemplateError(args.where + ": " + what + ": '" + type_name(callee) + "' object is not callable");
    }
    return callee.call->fn(args);
}

Value Interpreter::eval(const Expr &e, const ScopePtr &scope)
{
    Deeper d(*this, e.line, e.col);
    const std::string at = where(e.line, e.col);
    switch (e.kind) {
    case Expr::Kind::Literal: return e.literal;
    case Expr::Kind::Name: {
        const Value *v = scope->lookup(e.name);
        return v ? *v : Value::undefined(e.name);
    }
    case Expr::Kind::List: {
        List l;
        for (const auto &x : e.args)
            l.push_back(eval(*x, scope));
        return e.name == "tuple" ? Value::of_tuple(std::move(l)) : Value::of_list(std::move(l));
    }
    case Expr::Kind::Dict: {
        Dict dict;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
            Value key = eval(*e.args[k], scope);
            try {
                dict.set(dict_key(key), eval(*e.args[k + 1], scope));
            } catch (const TemplateError &err) {
                throw TemplateError(at + ": dict: " + err.what());
            }
        }
        return Value::of_dict(std::move(dict));
    }
    case Expr::Kind::Attr: {
        Value obj = eval(*e.args[0], scope);
        if (obj.is_undefined())
            throw TemplateError(at + ": attribute '" + e.name + "': '" + obj.s + "' is undefined");
        return attribute(obj, e.name, at);
    }
    case Expr::Kind::Subscript: {
        Value obj = eval(*e.args[0], scope);
        if (obj.is_undefined())
            throw TemplateError(at + ": subscript: '" + obj.s + "' is undefined");
        return subscript(obj, eval(*e.args[1], scope), at);
    }
    case Expr::Kind::Slice: {
        Value obj = eval(*e.args[0], scope);
        if (obj.is_undefined())
            throw TemplateError(at + ": slice: '" + obj.s + "' is undefined");
        auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k], scope) : Value::none(); };
        return slice(obj, part(1), part(2), part(3), at);
    }
    case Expr::Kind::Call: {
        Value callee = eval(*e.args[0], scope);
        CallArgs args = arguments(e, 1, scope);
        const std::string what = e.args[0]->kind == Expr::Kind::Name   ? "call of '" + e.args[0]->name + "'"
                                 : e.args[0]->kind == Expr::Kind::Attr ? "call of '." + e.args[0]->name + "'"
                                                                       : "call";
        return call(callee, args, what);
    }
    case Expr::Kind::Filter: {
        Value v = eval(*e.args[0], scope);
        CallArgs args = arguments(e, 1, scope);
        return filter(e.name, v, args);
    }
    case Expr::Kind::Test: {
        Value v = eval(*e.args[0], scope);
        CallArgs args = arguments(e, 1, scope);
        return Value::boolean(test(e.name, v, args) != e.negated);
    }
    case Expr::Kind::Unary: {
        Value v = eval(*e.args[0], scope);
        if (e.name == "not")
            return Value::boolean(!truthy(v));
        if (!v.is_number())
            throw TemplateError(at + ": unary '" + e.name + "': bad operand type '" + type_name(v) + "'");
        if (e.name == "+")
            return v.kind == Value::Kind::Bool ? Value::integer(v.as_int()) : v;
        if (v.kind == Value::Kind::Float)
            return Value::real(-v.f);
        if (v.as_int() == INT64_MIN)
            throw TemplateError(at + ": integer overflow");
        return Value::integer(-v.as_int());
    }
    case Expr::Kind::Binary: return binary(e, scope);
    case Expr::Kind::Cond:
        if (truthy(eval(*e.args[0], scope)))
            return eval(*e.args[1], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined();
    }
    return Value::undefined();
}

namespace {

} // namespace

int compare_values(const Value &a, const Value &b, const std::string &op, const std::string &at)
{
    if (a.is_number() && b.is_number()) {
        const double x = a.as_double(), y = b.as_double();
        if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float)
            return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
        return x < y ? -1 : x > y;
    }
    if (a.kind == Value::Kind::String && b.kind == Value::Kind::String)
        return a.s.compare(b.s) < 0 ? -1 : a.s.compare(b.s) > 0;
    if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
        for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k)
            if (!equal((*a.list)[k], (*b.list)[k]))
                return compare_values((*a.list)[k], (*b.list)[k], op, at);
        return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
    }
    throw TemplateError(at + ": '" + op + "' not supported between '" + type_name(a) + "' and '" + type_name(b) + "'");
}

namespace {

bool contains(const Value &container, const Value &item, const std::string &at)
{
    switch (container.kind) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
        if (item.kind != Value::Kind::String)
            throw TemplateError(at + ": 'in <string>' requires string as left operand, not " + type_name(item));
        return container.s.find(item.s) != std::string::npos;
    case Value::Kind::List:
        for (const Value &v : *container.list)
            if (equal(v, item))
                return true;
        return false;
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
        return item.kind != Value::Kind::List && item.kind != Value::Kind::Dict &&
               container.dict->find(dict_key(item)) != nullptr;
    default: throw TemplateError(at + ": argument of type '" + type_name(container) + "' is not iterable");
    }
}

} // namespace

Value Interpreter::binary(const Expr &e, const ScopePtr &scope)
{
    const std::string at = where(e.line, e.col);
    const std::string &op = e.name;
    Value a = eval(*e.args[0], scope);
    if (op == "and")
        return truthy(a) ? eval(*e.args[1], scope) : a;
    if (op == "or")
        return truthy(a) ? a : eval(*e.args[1], scope);
    Value b = eval(*e.args[1], scope);
    if (op == "==")
        return Value::boolean(equal(a, b));
    if (op == "!=")
        return Value::boolean(!equal(a, b));
    if (op == "<")
        return Value::boolean(compare_values(a, b, op, at) < 0);
    if (op == ">")
        return Value::boolean(compare_values(a, b, op, at) > 0);
    if (op == "<=")
        return Value::boolean(compare_values(a, b, op, at) <= 0);
    if (op == ">=")
        return Value::boolean(compare_values(a, b, op, at) >= 0);
    if (op == "in")
        return Value::boolean(contains(b, a, at));
    if (op == "not in")
        return Value::boolean(!contains(b, a, at));
    if (op == "~") {
        std::string s = to_str(a);
        const std::string t = to_str(b);
        check_size(s.size() + t.size(), at);
        return Value::string(s + t);
    }
    return arithmetic(op, a, b, at);
}

Value Interpreter::arithmetic(const std::string &op, const Value &a, const Value &b, const std::string &at)
{
    auto bad = [&]() -> Value {
        throw TemplateError(at + ": unsupported operand types for " + op + ": '" + type_name(a) + "' and '" +
                            type_name(b) + "'");
    };
    if (a.is_number() && b.is_number()) {
        const bool ints = a.kind != Value::Kind::Float && b.kind != Value::Kind::Float;
        const int64_t x = a.as_int(), y = b.as_int();
        const double fx = a.as_double(), fy = b.as_double();
        int64_t r = 0;
        if (op == "+")
            return ints ? (__builtin_add_overflow(x, y, &r) ? bad() : Value::integer(r)) : Value::real(fx + fy);
        if (op == "-")
            return ints ? (__builtin_sub_overflow(x, y, &r) ? bad() : Value::integer(r)) : Value::real(fx - fy);
        if (op == "*")
            return ints ? (__builtin_mul_overflow(x, y, &r) ? bad() : Value::integer(r)) : Value::real(fx * fy);
        if ((op == "/" || op == "//" || op == "%") && (ints ? y == 0 : fy == 0))
            throw TemplateError(at + ": division by zero");
        if (op == "/")
            return Value::real(fx / fy);
        if (op == "//") {
            if (!ints)
                return Value::real(std::floor(fx / fy));
            if (x == INT64_MIN && y == -1)
                return bad();
            int64_t q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                --q;
            return Value::integer(q);
        }
        if (op == "%") {
            if (!ints) {
                double m = std::fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0)))
                    m += fy;
                return Value::real(m);
            }
            if (y == -1)
                return Value::integer(0);
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            return Value::integer(m);
        }
        if (op == "**") {
            if (ints && y >= 0) {
                int64_t acc = 1;
                for (int64_t k = 0; k < y; ++k) {
                    if (__builtin_mul_overflow(acc, x, &acc))
                        return bad();
                    if (acc == 0 || acc == 1 || (acc == -1 && k > 64))
                        break;
                }
                return Value::integer(acc);
            }
            return Value::real(std::pow(fx, fy));
        }
        return bad();
    }
    if (op == "+" && a.kind == Value::Kind::String && b.kind == Value::Kind::String) {
        check_size(a.s.size() + b.s.size(), at);
        if (!a.safe && !b.safe)
            return Value::string(a.s + b.s);
        // Markup + str escapes the str, as markupsafe does.
        Value r = Value::string((a.safe ? a.s : html_escape(a.s)) + (b.safe ? b.s : html_escape(b.s)));
        check_size(r.s.size(), at);
        r.safe = true;
        return r;
    }
    if (op == "+" && a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
        check_size(a.list->size() + b.list->size(), at);
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::of_list(std::move(l));
    }
    if (op == "*" && (a.kind == Value::Kind::String || a.kind == Value::Kind::List) &&
        (b.kind == Value::Kind::Int || b.kind == Value::Kind::Bool)) {
        const int64_t n = std::max<int64_t>(0, b.as_int());
        const size_t unit = a.kind == Value::Kind::String ? a.s.size() : a.list->size();
        if (unit && uint64_t(n) > limits().max_output / unit)
            check_size(limits().max_output + 1, at);
        if (a.kind == Value::Kind::String) {
            std::string s;
            for (int64_t k = 0; k < n; ++k)
                s += a.s;
            return Value::string(std::move(s));
        }
        List l;
        for (int64_t k = 0; k < n; ++k)
            l.insert(l.end(), a.list->begin(), a.list->end());
        return Value::of_list(std::move(l));
    }
    if (op == "*" && b.kind != Value::Kind::Int && (a.kind == Value::Kind::Int || a.kind == Value::Kind::Bool))
        return arithmetic(op, b, a, at);
    if (op == "%" && a.kind == Value::Kind::String)
        return Value::string(percent_format(a.s, b, at, limits().max_output));
    return bad();
}

Value Interpreter::subscript(const Value &obj, const Value &key, const std::string &at)
{
    if (obj.is_mapping()) {
        if (key.kind != Value::Kind::List && key.kind != Value::Kind::Dict && key.kind != Value::Kind::Undefined &&
            key.kind != Value::Kind::Callable)
            if (const Value *v = obj.dict->find(dict_key(key)))
                return *v;
        if (key.kind == Value::Kind::String)
            return attribute(obj, key.s, at);
        return Value::undefined();
    }
    if (obj.kind == Value::Kind::List && obj.seq == Value::Seq::Generator)
        throw TemplateError(at + ": 'generator' object is not subscriptable");
    if ((obj.kind == Value::Kind::List || obj.kind == Value::Kind::String) &&
        (key.kind == Value::Kind::Int || key.kind == Value::Kind::Bool)) {
        if (obj.kind == Value::Kind::List) {
            const int64_t n = int64_t(obj.list->size());
            int64_t k = key.as_int();
            if (k < 0)
                k += n;
            return k >= 0 && k < n ? (*obj.list)[size_t(k)] : Value::undefined();
        }
        const auto cps = code_points(obj.s);
        const int64_t n = int64_t(cps.size());
        int64_t k = key.as_int();
        if (k < 0)
            k += n;
        return k >= 0 && k < n ? Value::string(cps[size_t(k)]) : Value::undefined();
    }
    if (key.kind == Value::Kind::String)
        return attribute(obj, key.s, at);
    return Value::undefined();
}

Value Interpreter::slice(const Value &obj, const Value &start, const Value &stop, const Value &step,
                         const std::string &at)
{
    auto index = [&](const Value &v) -> std::optional<int64_t> {
        if (v.kind == Value::Kind::None)
            return std::nullopt;
        if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
            throw TemplateError(at + ": slice indices must be integers or none, got " + type_name(v));
        return v.as_int();
    };
    const int64_t st = index(step).value_or(1);
    if (st == 0)
        throw TemplateError(at + ": slice step cannot be zero");
    std::vector<Value> items;
    if (obj.kind == Value::Kind::List)
        items = *obj.list;
    else if (obj.kind == Value::Kind::String)
        for (auto &c : code_points(obj.s))
            items.push_back(Value::string(std::move(c)));
    else
        throw TemplateError(at + ": '" + type_name(obj) + "' object is not subscriptable");
    const int64_t n = int64_t(items.size());
    auto clamp = [&](std::optional<int64_t> v, int64_t def) {
        if (!v)
            return def;
        int64_t x = *v < 0 ? *v + n : *v;
        if (st > 0)
            return std::clamp<int64_t>(x, 0, n);
        return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = clamp(index(start), st > 0 ? 0 : n - 1);
    const int64_t e = clamp(index(stop), st > 0 ? n : -1);
    List out;
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st)
        out.push_back(items[size_t(k)]);
    if (obj.kind == Value::Kind::String) {
        std::string s;
        for (const Value &v : out)
            s += v.s;
        return Value::string(std::move(s));
    }
    return Value::of_list(std::move(out));
}

// ---- entry points ----

Template::Template(std::string_view source, const Limits &limits)
    : m_program(std::make_unique<Program>(parse(source, limits)))
{
}
Template::~Template() = default;
Template::Template(Template &&) noexcept = default;
Template &Template::operator=(Template &&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json &context, const RenderOptions &options) const
{
    if (!context.is_object())
        throw TemplateError("the template's context must be a JSON object");
    Interpreter in(options);
    auto globals = std::make_shared<Scope>();
    in.install_globals(*globals);
    for (const auto &[k, v] : context.items())
        globals->vars[k] = Value::from_json(v);
    auto top = std::make_shared<Scope>(Scope{{}, globals});
    std::string out;
    in.exec(m_program->body, top, out);
    return out;
}

std::string render(std::string_view source, const nlohmann::ordered_json &context, const RenderOptions &options)
{
    return Template(source, options.limits).render(context, options);
}

} // namespace longscope::jinja
