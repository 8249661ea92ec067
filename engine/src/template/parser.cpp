// The parser: tokens to the syntax tree, with jinja2's operator precedence. Unknown tags,
// filters and tests are errors here, as jinja2 reports them when it compiles a template.
#include "template/ast.h"

#include <charconv>
#include <set>

namespace longscope::jinja {

namespace {

using T = Token::Type;

class Parser {
public:
    Parser(std::vector<Token> tokens, const Limits &limits) : m_tok(std::move(tokens)), m_limits(limits) {}

    Program run()
    {
        Program p;
        std::string end;
        p.body = body({}, end);
        return p;
    }

private:
    std::vector<Token> m_tok;
    size_t m_i = 0;
    const Limits &m_limits;
    int m_depth = 0;
    int m_soft = 0; // inside an if block: an unknown filter or test fails only when evaluated

    struct Deeper {
        Parser &p;
        explicit Deeper(Parser &parser, const Token &at) : p(parser)
        {
            if (++p.m_depth > p.m_limits.max_depth)
                fail(at.line, at.col, "nesting deeper than " + std::to_string(p.m_limits.max_depth) + " levels");
        }
        ~Deeper() { --p.m_depth; }
    };

    const Token &cur() const { return m_tok[m_i]; }
    const Token &peek(size_t n = 1) const { return m_tok[std::min(m_i + n, m_tok.size() - 1)]; }
    const Token &next() { return m_tok[m_i < m_tok.size() - 1 ? m_i++ : m_i]; }
    bool is_op(const char *op) const { return cur().type == T::Op && cur().text == op; }
    bool is_name(const char *n) const { return cur().type == T::Name && cur().text == n; }
    bool accept_op(const char *op)
    {
        if (!is_op(op))
            return false;
        next();
        return true;
    }
    bool accept_name(const char *n)
    {
        if (!is_name(n))
            return false;
        next();
        return true;
    }
    [[noreturn]] void unexpected(const std::string &what) const
    {
        const Token &t = cur();
        std::string got = t.type == T::End       ? "end of template"
                          : t.type == T::BlockEnd ? "'%}'"
                          : t.type == T::VarEnd   ? "'}}'"
                                                  : "'" + t.text + "'";
        fail(t.line, t.col, what + ", got " + got);
    }
    void expect_op(const char *op, const char *construct)
    {
        if (!accept_op(op))
            unexpected(std::string(construct) + ": expected '" + op + "'");
    }
    std::string expect_name(const char *construct)
    {
        if (cur().type != T::Name)
            unexpected(std::string(construct) + ": expected a name");
        return next().text;
    }
    void expect_block_end(const std::string &construct)
    {
        if (cur().type != T::BlockEnd)
            unexpected(construct + ": expected '%}'");
        next();
    }

    static ExprPtr make(Expr::Kind k, const Token &at)
    {
        auto e = std::make_unique<Expr>();
        e->kind = k;
        e->line = at.line;
        e->col = at.col;
        return e;
    }

    // ---- statements ----

    // Parses until one of `ends` (a block tag name) and leaves the end tag's name in `end`.
    Body body(const std::set<std::string> &ends, std::string &end)
    {
        Body out;
        for (;;) {
            const Token &t = cur();
            if (t.type == T::End) {
                if (!ends.empty())
                    fail(t.line, t.col, "unexpected end of template: missing '{% " + *ends.begin() + " %}'");
                return out;
            }
            if (t.type == T::Data) {
                auto n = node(Node::Kind::Text, t);
                n->text = t.text;
                out.push_back(std::move(n));
                next();
            } else if (t.type == T::VarBegin) {
                next();
                auto n = node(Node::Kind::Output, t);
                n->exprs.push_back(expression());
                if (cur().type != T::VarEnd)
                    unexpected("expression: expected '}}'");
                next();
                out.push_back(std::move(n));
            } else if (t.type == T::BlockBegin) {
                next();
                if (cur().type != T::Name)
                    unexpected("tag: expected a tag name");
                if (ends.count(cur().text)) {
                    end = next().text;
                    return out;
                }
                out.push_back(statement());
            } else {
                unexpected("unexpected token");
            }
        }
    }

    static std::unique_ptr<Node> node(Node::Kind k, const Token &at)
    {
        auto n = std::make_unique<Node>();
        n->kind = k;
        n->line = at.line;
        n->col = at.col;
        return n;
    }

    std::unique_ptr<Node> statement()
    {
        const Token at = cur();
        Deeper d(*this, at);
        const std::string name = next().text;
        if (name == "if")
            return if_stmt(at);
        if (name == "for")
            return for_stmt(at);
        if (name == "set")
            return set_stmt(at);
        if (name == "macro")
            return macro_stmt(at);
        if (name == "call")
            return call_stmt(at);
        if (name == "filter")
            return filter_stmt(at);
        if (name == "generation") {
            expect_block_end("generation");
            auto n = node(Node::Kind::Scope, at);
            std::string end;
            n->bodies.push_back(body({"endgeneration"}, end));
            expect_block_end("endgeneration");
            return n;
        }
        if (name == "break" || name == "continue") {
            expect_block_end(name);
            return node(name == "break" ? Node::Kind::Break : Node::Kind::Continue, at);
        }
        fail(at.line, at.col, "unknown tag '" + name + "'");
    }

    std::unique_ptr<Node> if_stmt(const Token &at)
    {
        auto n = node(Node::Kind::If, at);
        n->exprs.push_back(expression());
        expect_block_end("if");
        ++m_soft;
        struct Soft {
            int &n;
            ~Soft() { --n; }
        } soft{m_soft};
        for (;;) {
            std::string end;
            n->bodies.push_back(body({"elif", "else", "endif"}, end));
            if (end == "elif") {
                n->exprs.push_back(expression());
                expect_block_end("elif");
            } else if (end == "else") {
                expect_block_end("else");
                n->bodies.push_back(body({"endif"}, end));
                expect_block_end("endif");
                return n;
            } else {
                expect_block_end("endif");
                return n;
            }
        }
    }

    std::unique_ptr<Node> for_stmt(const Token &at)
    {
        auto n = node(Node::Kind::For, at);
        do
            n->targets.push_back(expect_name("for"));
        while (accept_op(","));
        if (!accept_name("in"))
            unexpected("for: expected 'in'");
        n->exprs.push_back(or_expr());
        if (is_op(",")) // a tuple of iterables
            unexpected("for: a tuple as the iterable is not supported");
        n->exprs.push_back(accept_name("if") ? expression() : nullptr);
        if (accept_name("recursive"))
            n->attr = "recursive";
        expect_block_end("for");
        std::string end;
        n->bodies.push_back(body({"else", "endfor"}, end));
        if (end == "else") {
            expect_block_end("else");
            n->bodies.push_back(body({"endfor"}, end));
        } else {
            n->bodies.emplace_back();
        }
        expect_block_end("endfor");
        return n;
    }

    std::unique_ptr<Node> set_stmt(const Token &at)
    {
        std::string target = expect_name("set");
        std::string attr;
        if (accept_op("."))
            attr = expect_name("set");
        if (is_op(","))
            fail(cur().line, cur().col, "set: assigning to several names is not supported");
        if (cur().type == T::BlockEnd || is_op("|")) {
            if (!attr.empty())
                unexpected("set: expected '='");
            auto n = node(Node::Kind::SetBlock, at);
            n->text = target;
            std::vector<ExprPtr> filters = filter_chain();
            expect_block_end("set");
            std::string end;
            n->bodies.push_back(body({"endset"}, end));
            expect_block_end("endset");
            n->exprs = std::move(filters);
            return n;
        }
        expect_op("=", "set");
        auto n = node(Node::Kind::Set, at);
        n->text = target;
        n->attr = attr;
        n->exprs.push_back(tuple_expr());
        expect_block_end("set");
        return n;
    }

    // `| f(args) | g` after a block set or filter tag: filters applied to a placeholder.
    std::vector<ExprPtr> filter_chain()
    {
        std::vector<ExprPtr> out;
        while (accept_op("|")) {
            const Token at = cur();
            auto f = make(Expr::Kind::Filter, at);
            f->name = filter_name();
            f->args.push_back(make(Expr::Kind::Literal, at)); // replaced by the body's text
            if (is_op("("))
                call_args(*f);
            out.push_back(std::move(f));
        }
        return out;
    }

    std::vector<std::pair<std::string, ExprPtr>> params(const char *construct)
    {
        std::vector<std::pair<std::string, ExprPtr>> out;
        expect_op("(", construct);
        while (!accept_op(")")) {
            if (!out.empty())
                expect_op(",", construct);
            if (accept_op(")"))
                break;
            std::string name = expect_name(construct);
            ExprPtr def = accept_op("=") ? expression() : nullptr;
            out.emplace_back(std::move(name), std::move(def));
        }
        return out;
    }

    std::unique_ptr<Node> macro_stmt(const Token &at)
    {
        auto n = node(Node::Kind::Macro, at);
        n->macro = std::make_shared<Macro>();
        n->macro->name = expect_name("macro");
        n->macro->params = params("macro");
        expect_block_end("macro");
        std::string end;
        n->macro->body = body({"endmacro"}, end);
        expect_block_end("endmacro");
        return n;
    }

    std::unique_ptr<Node> call_stmt(const Token &at)
    {
        auto n = node(Node::Kind::CallBlock, at);
        n->macro = std::make_shared<Macro>();
        n->macro->name = "caller";
        if (is_op("("))
            n->macro->params = params("call");
        ExprPtr call = expression();
        if (call->kind != Expr::Kind::Call)
            fail(at.line, at.col, "call: expected a macro call");
        n->exprs.push_back(std::move(call));
        expect_block_end("call");
        std::string end;
        n->macro->body = body({"endcall"}, end);
        expect_block_end("endcall");
        return n;
    }

    std::unique_ptr<Node> filter_stmt(const Token &at)
    {
        auto n = node(Node::Kind::FilterBlock, at);
        --m_i; // filter_chain starts at '|': parse `filter f | g` as `| f | g`
        m_tok[m_i] = Token{T::Op, "|", at.line, at.col};
        n->exprs = filter_chain();
        expect_block_end("filter");
        std::string end;
        n->bodies.push_back(body({"endfilter"}, end));
        expect_block_end("endfilter");
        return n;
    }

    // ---- expressions ----

    // An expression, or several separated by commas (a tuple, given as a list).
    ExprPtr tuple_expr()
    {
        const Token at = cur();
        ExprPtr first = expression();
        if (!is_op(","))
            return first;
        auto list = make(Expr::Kind::List, at);
        list->name = "tuple";
        list->args.push_back(std::move(first));
        while (accept_op(",")) {
            if (cur().type == T::BlockEnd || cur().type == T::VarEnd)
                break;
            list->args.push_back(expression());
        }
        return list;
    }

    ExprPtr expression()
    {
        const Token at = cur();
        Deeper d(*this, at);
        ExprPtr e = or_expr();
        if (is_name("if")) {
            next();
            auto c = make(Expr::Kind::Cond, at);
            c->args.push_back(or_expr());
            c->args.push_back(std::move(e));
            c->args.push_back(accept_name("else") ? expression() : nullptr);
            return c;
        }
        return e;
    }

    ExprPtr binary(const Token &at, std::string op, ExprPtr l, ExprPtr r)
    {
        auto b = make(Expr::Kind::Binary, at);
        b->name = std::move(op);
        b->args.push_back(std::move(l));
        b->args.push_back(std::move(r));
        return b;
    }

    ExprPtr or_expr()
    {
        ExprPtr l = and_expr();
        while (is_name("or")) {
            const Token at = next();
            l = binary(at, "or", std::move(l), and_expr());
        }
        return l;
    }

    ExprPtr and_expr()
    {
        ExprPtr l = not_expr();
        while (is_name("and")) {
            const Token at = next();
            l = binary(at, "and", std::move(l), not_expr());
        }
        return l;
    }

    ExprPtr not_expr()
    {
        if (is_name("not")) {
            const Token at = next();
            Deeper d(*this, at);
            auto u = make(Expr::Kind::Unary, at);
            u->name = "not";
            u->args.push_back(not_expr());
            return u;
        }
        return compare();
    }

    ExprPtr compare()
    {
        ExprPtr l = math1();
        for (;;) {
            const Token at = cur();
            std::string op;
            if (at.type == T::Op && (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == ">" ||
                                     at.text == "<=" || at.text == ">=")) {
                op = next().text;
            } else if (is_name("in")) {
                next();
                op = "in";
            } else if (is_name("not") && peek().type == T::Name && peek().text == "in") {
                next();
                next();
                op = "not in";
            } else {
                return l;
            }
            // a < b < c is (a < b) and (b < c) in Jinja; chains beyond one are rare in templates.
            l = binary(at, op, std::move(l), math1());
        }
    }

    ExprPtr math1()
    {
        ExprPtr l = concat();
        while (is_op("+") || is_op("-")) {
            const Token at = next();
            l = binary(at, at.text, std::move(l), concat());
        }
        return l;
    }

    ExprPtr concat()
    {
        ExprPtr l = math2();
        while (is_op("~")) {
            const Token at = next();
            l = binary(at, "~", std::move(l), math2());
        }
        return l;
    }

    ExprPtr math2()
    {
        ExprPtr l = power();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token at = next();
            l = binary(at, at.text, std::move(l), power());
        }
        return l;
    }

    ExprPtr power()
    {
        ExprPtr l = unary();
        while (is_op("**")) {
            const Token at = next();
            l = binary(at, "**", std::move(l), unary());
        }
        return l;
    }

    ExprPtr unary(bool with_filters = true)
    {
        const Token at = cur();
        Deeper d(*this, at);
        if (is_op("-") || is_op("+")) {
            next();
            auto u = make(Expr::Kind::Unary, at);
            u->name = at.text;
            u->args.push_back(unary(false));
            return with_filters ? filters(postfix(std::move(u))) : postfix(std::move(u));
        }
        ExprPtr e = postfix(primary());
        return with_filters ? filters(std::move(e)) : std::move(e);
    }

    ExprPtr primary()
    {
        const Token at = cur();
        switch (at.type) {
        case T::Name: {
            next();
            auto lit = [&](Value v) {
                auto e = make(Expr::Kind::Literal, at);
                e->literal = std::move(v);
                return e;
            };
            if (at.text == "true" || at.text == "True")
                return lit(Value::boolean(true));
            if (at.text == "false" || at.text == "False")
                return lit(Value::boolean(false));
            if (at.text == "none" || at.text == "None")
                return lit(Value::none());
            auto e = make(Expr::Kind::Name, at);
            e->name = at.text;
            return e;
        }
        case T::String: {
            std::string s;
            while (cur().type == T::String)
                s += next().text;
            auto e = make(Expr::Kind::Literal, at);
            e->literal = Value::string(std::move(s));
            return e;
        }
        case T::Int: {
            next();
            auto e = make(Expr::Kind::Literal, at);
            e->literal = int_literal(at);
            return e;
        }
        case T::Float: {
            next();
            auto e = make(Expr::Kind::Literal, at);
            e->literal = Value::real(std::strtod(at.text.c_str(), nullptr));
            return e;
        }
        case T::Op:
            if (at.text == "(") {
                next();
                if (accept_op(")")) {
                    auto empty = make(Expr::Kind::List, at);
                    empty->name = "tuple";
                    return empty;
                }
                ExprPtr e = expression();
                if (is_op(",")) {
                    auto list = make(Expr::Kind::List, at);
                    list->name = "tuple";
                    list->args.push_back(std::move(e));
                    while (accept_op(",") && !is_op(")"))
                        list->args.push_back(expression());
                    e = std::move(list);
                }
                expect_op(")", "parenthesis");
                return e;
            }
            if (at.text == "[") {
                next();
                auto list = make(Expr::Kind::List, at);
                while (!accept_op("]")) {
                    if (!list->args.empty()) {
                        expect_op(",", "list");
                        if (accept_op("]"))
                            break;
                    }
                    list->args.push_back(expression());
                }
                return list;
            }
            if (at.text == "{") {
                next();
                auto dict = make(Expr::Kind::Dict, at);
                while (!accept_op("}")) {
                    if (!dict->args.empty()) {
                        expect_op(",", "dict");
                        if (accept_op("}"))
                            break;
                    }
                    dict->args.push_back(expression());
                    expect_op(":", "dict");
                    dict->args.push_back(expression());
                }
                return dict;
            }
            break;
        default: break;
        }
        unexpected("expected an expression");
    }

    void call_args(Expr &call)
    {
        expect_op("(", "call");
        bool first = true;
        while (!accept_op(")")) {
            if (!first) {
                expect_op(",", "call");
                if (accept_op(")"))
                    break;
            }
            first = false;
            if (cur().type == T::Name && peek().type == T::Op && peek().text == "=") {
                std::string key = next().text;
                next();
                call.kwargs.emplace_back(std::move(key), expression());
            } else {
                if (is_op("*") || is_op("**"))
                    fail(cur().line, cur().col, "call: *args and **kwargs are not supported");
                if (!call.kwargs.empty())
                    fail(cur().line, cur().col, "call: a positional argument follows a keyword argument");
                call.args.push_back(expression());
            }
        }
    }

    // An integer token's value; one past int64_t is an error (jinja2 has big integers).
    Value int_literal(const Token &t)
    {
        int64_t v = 0;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
            fail(t.line, t.col, "integer literal out of range");
        return Value::integer(v);
    }

    ExprPtr postfix(ExprPtr e)
    {
        for (;;) {
            const Token at = cur();
            if (accept_op(".")) {
                auto a = make(Expr::Kind::Attr, at);
                if (cur().type == T::Int) { // x.0 is x[0]
                    a->kind = Expr::Kind::Subscript;
                    a->args.push_back(std::move(e));
                    auto idx = make(Expr::Kind::Literal, cur());
                    idx->literal = int_literal(next());
                    a->args.push_back(std::move(idx));
                } else {
                    a->name = expect_name("attribute");
                    a->args.push_back(std::move(e));
                }
                e = std::move(a);
            } else if (accept_op("[")) {
                e = subscript(at, std::move(e));
            } else if (is_op("(")) {
                auto c = make(Expr::Kind::Call, at);
                c->args.push_back(std::move(e));
                call_args(*c);
                e = std::move(c);
            } else {
                return e;
            }
        }
    }

    ExprPtr subscript(const Token &at, ExprPtr obj)
    {
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        for (;;) {
            if (is_op(":")) {
                slice = true;
                next();
                if (++n > 2)
                    unexpected("subscript: too many ':'");
                continue;
            }
            if (is_op("]")) {
                next();
                break;
            }
            if (parts[n])
                unexpected("subscript: expected ']'");
            parts[n] = expression();
        }
        auto s = make(slice ? Expr::Kind::Slice : Expr::Kind::Subscript, at);
        s->args.push_back(std::move(obj));
        if (slice) {
            for (auto &p : parts)
                s->args.push_back(std::move(p));
        } else {
            if (!parts[0])
                fail(at.line, at.col, "subscript: empty '[]'");
            s->args.push_back(std::move(parts[0]));
        }
        return s;
    }

    std::string filter_name()
    {
        const Token at = cur();
        std::string name = expect_name("filter");
        while (is_op(".") && peek().type == T::Name) {
            next();
            name += "." + next().text;
        }
        if (!has_filter(name) && !m_soft)
            fail(at.line, at.col, "filter '" + name + "': no such filter");
        return name;
    }

    ExprPtr filters(ExprPtr e)
    {
        for (;;) {
            const Token at = cur();
            if (accept_op("|")) {
                auto f = make(Expr::Kind::Filter, at);
                f->name = filter_name();
                f->args.push_back(std::move(e));
                if (is_op("("))
                    call_args(*f);
                e = postfix(std::move(f));
            } else if (is_name("is")) {
                next();
                auto t = make(Expr::Kind::Test, at);
                t->negated = accept_name("not");
                const Token nt = cur();
                t->name = expect_name("test");
                if (!has_test(t->name) && !m_soft)
                    fail(nt.line, nt.col, "test '" + t->name + "': no such test");
                t->args.push_back(std::move(e));
                if (is_op("(")) {
                    call_args(*t);
                } else if ((cur().type == T::Name || cur().type == T::String || cur().type == T::Int ||
                            cur().type == T::Float || is_op("[") || is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and") && !is_name("is") &&
                           !is_name("if")) {
                    t->args.push_back(postfix(primary()));
                }
                e = std::move(t);
            } else {
                return e;
            }
        }
    }
};

} // namespace

Program parse(std::string_view source, const Limits &limits)
{
    // As jinja2 reads a template: \r\n and \r become \n, and one trailing newline is dropped.
    std::string text;
    text.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {
        if (source[k] == '\r') {
            text += '\n';
            if (k + 1 < source.size() && source[k + 1] == '\n')
                ++k;
        } else {
            text += source[k];
        }
    }
    if (!text.empty() && text.back() == '\n')
        text.pop_back();
    return Parser(lex(text), limits).run();
}

} // namespace longscope::jinja
