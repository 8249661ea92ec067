// The lexer: template data and tags, with jinja2's whitespace control (`-`, `+`) and Hugging
// Face's trim_blocks and lstrip_blocks.
#include "template/ast.h"

#include <cstring>

namespace longscope::jinja {

std::string where(int line, int col)
{
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

void fail(int line, int col, const std::string &what)
{
    throw TemplateError(where(line, col) + ": " + what);
}

namespace {

bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

class Lexer {
public:
    explicit Lexer(std::string_view src) : m_src(src) {}

    std::vector<Token> run()
    {
        while (m_pos < m_src.size())
            data();
        m_out.push_back({Token::Type::End, "", m_line, m_col});
        return std::move(m_out);
    }

private:
    std::string_view m_src;
    size_t m_pos = 0;
    int m_line = 1, m_col = 1;
    std::vector<Token> m_out;

    void advance(size_t n)
    {
        for (size_t k = 0; k < n && m_pos < m_src.size(); ++k, ++m_pos) {
            if (m_src[m_pos] == '\n') {
                ++m_line;
                m_col = 1;
            } else if ((static_cast<unsigned char>(m_src[m_pos]) & 0xC0) != 0x80) {
                ++m_col;
            }
        }
    }

    // The text up to the next tag, stripped as the tag's whitespace control says; then the tag.
    void data()
    {
        const size_t start = m_pos;
        size_t tag = start;
        for (;;) {
            tag = m_src.find('{', tag);
            if (tag == std::string_view::npos || tag + 1 >= m_src.size())
                break;
            const char k = m_src[tag + 1];
            if (k == '{' || k == '%' || k == '#')
                break;
            ++tag;
        }
        if (tag == std::string_view::npos || tag + 1 >= m_src.size())
            tag = m_src.size();
        std::string text(m_src.substr(start, tag - start));
        const int line = m_line, col = m_col;
        if (tag < m_src.size()) {
            const char kind = m_src[tag + 1];
            const char sign = tag + 2 < m_src.size() ? m_src[tag + 2] : '\0';
            if (sign == '-') {
                while (!text.empty() && is_space(text.back()))
                    text.pop_back();
            } else if (sign != '+' && kind != '{') {
                // lstrip_blocks: only spaces and tabs between the line's start and the tag.
                const size_t nl = text.rfind('\n');
                const size_t l = nl == std::string::npos ? 0 : nl + 1;
                const bool line_start = l > 0 || start == 0 || m_src[start - 1] == '\n';
                if (line_start && l < text.size() && text.find_first_not_of(" \t\r\v\f", l) == std::string::npos)
                    text.resize(l);
            }
        }
        if (!text.empty())
            m_out.push_back({Token::Type::Data, std::move(text), line, col});
        advance(tag - start);
        if (tag < m_src.size())
            this->tag();
    }

    void tag()
    {
        const char kind = m_src[m_pos + 1];
        const int line = m_line, col = m_col;
        advance(2);
        if (m_pos < m_src.size() && (m_src[m_pos] == '-' || m_src[m_pos] == '+'))
            advance(1);
        if (kind == '#') {
            const size_t end = m_src.find("#}", m_pos);
            if (end == std::string_view::npos)
                fail(line, col, "comment: missing '#}'");
            const bool strip = end > m_pos && m_src[end - 1] == '-';
            const bool keep = end > m_pos && m_src[end - 1] == '+';
            advance(end + 2 - m_pos);
            after_tag(strip, !keep);
            return;
        }
        if (kind == '%' && raw_block(line, col))
            return;
        m_out.push_back({kind == '{' ? Token::Type::VarBegin : Token::Type::BlockBegin, "", line, col});
        inside(kind == '{' ? '}' : '%', line, col);
    }

    // {% raw %}...{% endraw %}: the text between is data.
    bool raw_block(int line, int col)
    {
        size_t p = m_pos;
        while (p < m_src.size() && is_space(m_src[p]))
            ++p;
        if (m_src.compare(p, 3, "raw") != 0)
            return false;
        p += 3;
        while (p < m_src.size() && is_space(m_src[p]))
            ++p;
        const bool strip_after_open = p < m_src.size() && m_src[p] == '-';
        if (strip_after_open)
            ++p;
        if (m_src.compare(p, 2, "%}") != 0)
            return false;
        advance(p + 2 - m_pos);
        after_tag(strip_after_open, true);
        size_t search = m_pos;
        for (;;) {
            const size_t open = m_src.find("{%", search);
            if (open == std::string_view::npos)
                fail(line, col, "raw: missing '{% endraw %}'");
            size_t q = open + 2;
            const bool strip_before = q < m_src.size() && m_src[q] == '-';
            if (q < m_src.size() && (m_src[q] == '-' || m_src[q] == '+'))
                ++q;
            while (q < m_src.size() && is_space(m_src[q]))
                ++q;
            if (m_src.compare(q, 6, "endraw") != 0) {
                search = open + 2;
                continue;
            }
            q += 6;
            while (q < m_src.size() && is_space(m_src[q]))
                ++q;
            const bool strip_after = q < m_src.size() && m_src[q] == '-';
            if (strip_after)
                ++q;
            if (m_src.compare(q, 2, "%}") != 0)
                fail(m_line, m_col, "raw: malformed '{% endraw %}'");
            std::string text(m_src.substr(m_pos, open - m_pos));
            if (strip_before)
                while (!text.empty() && is_space(text.back()))
                    text.pop_back();
            if (!text.empty())
                m_out.push_back({Token::Type::Data, std::move(text), m_line, m_col});
            advance(q + 2 - m_pos);
            after_tag(strip_after, true);
            return true;
        }
    }

    // After a tag: `-` strips all following whitespace; trim_blocks removes one newline.
    void after_tag(bool strip, bool trim_newline)
    {
        if (strip) {
            while (m_pos < m_src.size() && is_space(m_src[m_pos]))
                advance(1);
        } else if (trim_newline && m_pos < m_src.size() && m_src[m_pos] == '\n') {
            advance(1);
        }
    }

    void inside(char close, int line, int col)
    {
        int depth = 0;
        const Token::Type end_type = close == '}' ? Token::Type::VarEnd : Token::Type::BlockEnd;
        for (;;) {
            while (m_pos < m_src.size() && is_space(m_src[m_pos]))
                advance(1);
            if (m_pos >= m_src.size())
                fail(line, col, std::string(close == '}' ? "expression" : "tag") + ": missing '" + close + "}'");
            const std::string_view rest = m_src.substr(m_pos);
            if (depth == 0) {
                const bool minus = rest.size() >= 3 && rest[0] == '-' && rest[1] == close && rest[2] == '}';
                const bool plus = rest.size() >= 3 && rest[0] == '+' && rest[1] == close && rest[2] == '}';
                if (minus || plus || (rest.size() >= 2 && rest[0] == close && rest[1] == '}')) {
                    m_out.push_back({end_type, "", m_line, m_col});
                    advance(minus || plus ? 3 : 2);
                    after_tag(minus, close == '%' && !plus);
                    return;
                }
            }
            token(depth);
        }
    }

    void token(int &depth)
    {
        const int line = m_line, col = m_col;
        const char c = m_src[m_pos];
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t n = 1;
            while (m_pos + n < m_src.size() &&
                   (std::isalnum(static_cast<unsigned char>(m_src[m_pos + n])) || m_src[m_pos + n] == '_'))
                ++n;
            m_out.push_back({Token::Type::Name, std::string(m_src.substr(m_pos, n)), line, col});
            advance(n);
        } else if (std::isdigit(static_cast<unsigned char>(c))) {
            number(line, col);
        } else if (c == '\'' || c == '"') {
            string(c, line, col);
        } else {
            static const char *ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                        ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", ";"};
            for (const char *op : ops) {
                const size_t n = std::strlen(op);
                if (m_src.compare(m_pos, n, op) == 0) {
                    if (*op == '(' || *op == '[' || *op == '{')
                        ++depth;
                    else if ((*op == ')' || *op == ']' || *op == '}') && depth > 0)
                        --depth;
                    m_out.push_back({Token::Type::Op, op, line, col});
                    advance(n);
                    return;
                }
            }
            fail(line, col, std::string("unexpected character '") + c + "'");
        }
    }

    void number(int line, int col)
    {
        size_t n = 0;
        auto digits = [&] {
            while (m_pos + n < m_src.size() &&
                   (std::isdigit(static_cast<unsigned char>(m_src[m_pos + n])) || m_src[m_pos + n] == '_'))
                ++n;
        };
        digits();
        bool is_float = false;
        if (m_pos + n + 1 < m_src.size() && m_src[m_pos + n] == '.' &&
            std::isdigit(static_cast<unsigned char>(m_src[m_pos + n + 1]))) {
            is_float = true;
            ++n;
            digits();
        }
        if (m_pos + n < m_src.size() && (m_src[m_pos + n] == 'e' || m_src[m_pos + n] == 'E')) {
            size_t e = n + 1;
            if (m_pos + e < m_src.size() && (m_src[m_pos + e] == '+' || m_src[m_pos + e] == '-'))
                ++e;
            if (m_pos + e < m_src.size() && std::isdigit(static_cast<unsigned char>(m_src[m_pos + e]))) {
                is_float = true;
                n = e;
                digits();
            }
        }
        std::string text;
        for (char ch : m_src.substr(m_pos, n))
            if (ch != '_')
                text += ch;
        m_out.push_back({is_float ? Token::Type::Float : Token::Type::Int, text, line, col});
        advance(n);
    }

    static void put_utf8(std::string &out, uint32_t cp)
    {
        if (cp < 0x80) {
            out += char(cp);
        } else if (cp < 0x800) {
            out += char(0xC0 | (cp >> 6));
            out += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += char(0xE0 | (cp >> 12));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        } else {
            out += char(0xF0 | (cp >> 18));
            out += char(0x80 | ((cp >> 12) & 0x3F));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        }
    }

    // Python string literal escapes.
    void string(char quote, int line, int col)
    {
        std::string out;
        size_t p = m_pos + 1;
        for (;;) {
            if (p >= m_src.size())
                fail(line, col, "string: missing closing quote");
            const char c = m_src[p];
            if (c == quote)
                break;
            if (c != '\\') {
                out += c;
                ++p;
                continue;
            }
            if (p + 1 >= m_src.size())
                fail(line, col, "string: missing closing quote");
            const char e = m_src[p + 1];
            p += 2;
            switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'v': out += '\v'; break;
            case 'a': out += '\a'; break;
            case '0': out += '\0'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '\n': break;
            case 'x':
            case 'u':
            case 'U': {
                const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                if (p + n > m_src.size())
                    fail(line, col, "string: truncated escape");
                uint32_t cp = 0;
                for (size_t k = 0; k < n; ++k) {
                    const char h = m_src[p + k];
                    if (!std::isxdigit(static_cast<unsigned char>(h)))
                        fail(line, col, "string: bad escape");
                    cp = cp * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                                         : (std::tolower(h) - 'a' + 10));
                }
                if (cp > 0x10FFFF)
                    fail(line, col, "string: escape out of range");
                put_utf8(out, cp);
                p += n;
                break;
            }
            default:
                out += '\\';
                out += e;
            }
        }
        m_out.push_back({Token::Type::String, std::move(out), line, col});
        advance(p + 1 - m_pos);
    }
};

} // namespace

std::vector<Token> lex(std::string_view source)
{
    return Lexer(source).run();
}

} // namespace longscope::jinja
