// The evaluator's state: scopes, bounds, and the built-in filters, tests, methods and globals
// (builtins.cpp) it calls.
#pragma once

#include "template/ast.h"

#include <unordered_map>

namespace longscope::jinja {

struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
    const Value *lookup(const std::string &name) const
    {
        for (const Scope *s = this; s; s = s->parent.get())
            if (auto it = s->vars.find(name); it != s->vars.end())
                return &it->second;
        return nullptr;
    }
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
public:
    explicit Interpreter(const RenderOptions &options) : m_options(options) {}
    // Empties the scopes that hold macros and the namespaces: a macro holds the scope it was
    // defined in and a namespace may hold itself, cycles that would otherwise never be freed.
    ~Interpreter();
    Interpreter(const Interpreter &) = delete;
    Interpreter &operator=(const Interpreter &) = delete;

    enum class Flow { Normal, Break, Continue };
    Flow exec(const Body &body, const ScopePtr &scope, std::string &out);
    Value eval(const Expr &e, const ScopePtr &scope);

    Value filter(const std::string &name, const Value &v, CallArgs &args);
    bool test(const std::string &name, const Value &v, CallArgs &args);
    Value attribute(const Value &obj, const std::string &name, const std::string &at);
    Value attribute_or_item(const Value &x, const Value &attr, const std::string &at);
    Value call(const Value &callee, CallArgs &args, const std::string &what);
    void install_globals(Scope &globals);
    Value arithmetic(const std::string &op, const Value &a, const Value &b, const std::string &at);
    Value subscript(const Value &obj, const Value &key, const std::string &at);

    // Bounds: a string or list of `n` bytes/items may be built; one more loop iteration.
    void check_size(size_t n, const std::string &at) const;
    void count_iteration(const std::string &at);
    const Limits &limits() const { return m_options.limits; }
    // The items a for loop, a filter or `in` goes through: list items, dict keys, characters.
    List iterate(const Value &v, const std::string &at) const;

private:
    const RenderOptions &m_options;
    long m_iterations = 0;
    std::vector<ScopePtr> m_macro_scopes;
    std::vector<std::shared_ptr<Dict>> m_namespaces;
    int m_depth = 0;

    struct Deeper {
        Interpreter &in;
        Deeper(Interpreter &i, int line, int col);
        ~Deeper() { --in.m_depth; }
    };

    Flow exec_node(const Node &n, const ScopePtr &scope, std::string &out);
    Flow exec_for(const Node &n, const ScopePtr &scope, std::string &out);
    // One run of a for loop over `iterable`; `depth` counts the loop(...) calls of a recursive loop.
    void exec_loop(const Node &n, const ScopePtr &scope, const Value &iterable, int64_t depth, std::string &out);
    void exec_set(const Node &n, const ScopePtr &scope, std::string &out);
    Value make_macro(const std::shared_ptr<Macro> &m, const ScopePtr &scope);
    Value binary(const Expr &e, const ScopePtr &scope);
    Value slice(const Value &obj, const Value &start, const Value &stop, const Value &step, const std::string &at);
    CallArgs arguments(const Expr &e, size_t first, const ScopePtr &scope);
    void append(std::string &out, const std::string &text, const std::string &at) const;
};

} // namespace longscope::jinja
