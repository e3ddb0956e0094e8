// The lexer and parser: Jinja2's grammar, with whitespace control applied the way Jinja2's
// lexer applies it under trim_blocks=True and lstrip_blocks=True (see jinja2/lexer.py):
//  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` after it;
//  - trim_blocks: the first newline after a block or comment tag is dropped (`+%}` keeps it);
//  - lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag
//    are dropped (`{%+` keeps them); variable tags are never lstripped;
//  - "\r\n" and "\r" read as "\n", and one trailing newline of the template is dropped
//    (keep_trailing_newline=False).
#include <cstring>
#include <string_view>

#include "loom/error.hpp"
#include "template/ast.hpp"

namespace loom::tmpl {

namespace {

constexpr int kMaxNesting = 128;  // expressions and blocks; hostile templates nest deeply

enum class Tok : uint8_t { data, var_begin, var_end, block_begin, block_end, name, string,
                           integer, floating, op, eof };

struct Token {
  Tok type;
  std::string text;  // data, name, string (unescaped), number literal, operator
  size_t offset;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : name_(name) {
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit(Tok::data, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[start + 1];
      const char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')
                            ? src_[start + 2] : '\0';
      std::string text = src_.substr(pos, start - pos);
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool only_space = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) only_space = only_space && is_space(text[k]);
          if (only_space) text.resize(l_pos);
        }
      }
      if (!text.empty()) emit(Tok::data, std::move(text), pos);
      size_t p = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        const size_t end = src_.find("#}", p);
        if (end == std::string::npos) fail(start, "missing end of comment tag");
        const char esign = end > p && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
        pos = after_tag_end(end + 2, esign, true);
      } else if (kind == '%' && raw_begin(p)) {
        pos = lex_raw(p, start);
      } else {
        pos = lex_tag(p, start, kind == '{');
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{Tok::eof, {}, src_.size()});
    return std::move(tokens_);
  }

  Pos pos_of(size_t offset) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= offset) lo = mid;
      else hi = mid;
    }
    return Pos{static_cast<int>(lo + 1), static_cast<int>(offset - line_starts_[lo] + 1)};
  }

  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    const Pos p = pos_of(offset);
    throw Error(ErrorCode::template_error, name_ + ":" + std::to_string(p.line) + ":" +
                                               std::to_string(p.col) + ": " + what);
  }

 private:
  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos && i + 1 < src_.size();
         i = src_.find('{', i + 1)) {
      const char c = src_[i + 1];
      if (c == '{' || c == '%' || c == '#') return i;
    }
    return std::string::npos;
  }

  // After a closing `%}`/`#}`/`}}` at `p` (just past it): `-` eats all whitespace that
  // follows, otherwise trim_blocks eats one newline after block and comment tags.
  size_t after_tag_end(size_t p, char sign, bool trims) const {
    if (sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (sign != '+' && trims && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  size_t skip_space(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    return p;
  }

  bool word_at(size_t p, std::string_view w) const {
    return src_.compare(p, w.size(), w) == 0 &&
           (p + w.size() >= src_.size() || !is_name_char(src_[p + w.size()]));
  }

  // `{% raw %}` or `{% raw -%}`: sets raw_end_ to the offset just past its `%}`.
  bool raw_begin(size_t p) {
    p = skip_space(p);
    if (!word_at(p, "raw")) return false;
    p = skip_space(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      raw_end_ = skip_space(p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      raw_end_ = p + 2;
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t /*p*/, size_t start) {
    for (size_t i = src_.find("{%", raw_end_); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t q = i + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : '\0';
      if (sign) ++q;
      q = skip_space(q);
      if (!word_at(q, "endraw")) continue;
      q = skip_space(q + 6);
      char esign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) esign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(raw_end_, i - raw_end_);
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+') {
        const size_t nl = text.rfind('\n');
        if (nl != std::string::npos) {
          bool only_space = nl + 1 < text.size();
          for (size_t k = nl + 1; k < text.size(); ++k) only_space = only_space && is_space(text[k]);
          if (only_space) text.resize(nl + 1);
        }
      }
      if (!text.empty()) emit(Tok::data, std::move(text), raw_end_);
      return after_tag_end(q + 2, esign, true);
    }
    fail(start, "missing end of raw directive");
  }

  size_t lex_tag(size_t p, size_t start, bool variable) {
    emit(variable ? Tok::var_begin : Tok::block_begin, {}, start);
    int depth = 0;
    for (;;) {
      p = skip_space(p);
      if (p >= src_.size()) {
        fail(start, variable ? "unexpected end of template, expected '}}'"
                             : "unexpected end of template, expected '%}'");
      }
      if (depth == 0) {
        const char* close = variable ? "}}" : "%}";
        if ((src_[p] == '-' || (src_[p] == '+' && !variable)) && src_.compare(p + 1, 2, close) == 0) {
          emit(variable ? Tok::var_end : Tok::block_end, {}, p);
          return after_tag_end(p + 3, src_[p], !variable);
        }
        if (src_.compare(p, 2, close) == 0) {
          emit(variable ? Tok::var_end : Tok::block_end, {}, p);
          return after_tag_end(p + 2, '\0', !variable);
        }
      }
      const char c = src_[p];
      if (is_name_start(c)) {
        size_t q = p;
        while (q < src_.size() && is_name_char(src_[q])) ++q;
        emit(Tok::name, src_.substr(p, q - p), p);
        p = q;
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static constexpr const char* kOps2[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kOps2) {
          if (src_.compare(p, 2, two) == 0) op = two;
        }
        if (op.empty()) {
          if (std::strchr("+-*/%~[](){}<>=.:|,;", c) == nullptr) {
            fail(p, std::string("unexpected character '") + c + "'");
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          if (++depth > kMaxNesting) fail(p, "brackets nested too deeply");
        } else if (op == ")" || op == "]" || op == "}") {
          if (depth == 0) fail(p, "unexpected '" + op + "'");
          --depth;
        }
        emit(Tok::op, op, p);
        p += op.size();
      }
    }
  }

  size_t lex_number(size_t p) {
    size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1])))) ++q;
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      ++q;
      digits();
      is_float = true;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && is_digit(src_[r])) {
        q = r;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = p; k < q; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    emit(is_float ? Tok::floating : Tok::integer, std::move(text), p);
    return q;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  static int hex_value(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Python's unicode-escape, as Jinja2 decodes string literals; unknown escapes stay as is.
  size_t lex_string(size_t p) {
    const char quote = src_[p];
    std::string out;
    size_t q = p + 1;
    for (;;) {
      if (q >= src_.size()) fail(p, "unterminated string");
      const char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) fail(p, "unterminated string");
      const char e = src_[q + 1];
      q += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const int h = q + k < src_.size() ? hex_value(src_[q + k]) : -1;
            if (h < 0) fail(q - 2, "truncated \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(q - 2, "invalid escape");
          append_utf8(out, cp);
          q += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k, ++q) {
              cp = cp * 8 + static_cast<uint32_t>(src_[q] - '0');
            }
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    emit(Tok::string, std::move(out), p);
    return q + 1;
  }

  void emit(Tok type, std::string text, size_t offset) {
    tokens_.push_back(Token{type, std::move(text), offset});
  }

  const std::string& name_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t raw_end_ = 0;
};

class Parser {
 public:
  Parser(const Lexer& lexer, std::vector<Token> tokens) : lexer_(lexer), toks_(std::move(tokens)) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != Tok::eof) fail_here("unexpected '" + cur().text + "'");
    return body;
  }

 private:
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  Pos here() const { return lexer_.pos_of(cur().offset); }

  [[noreturn]] void fail_here(const std::string& what) const { lexer_.fail(cur().offset, what); }

  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::eof: return "end of template";
      case Tok::block_end: return "end of statement block";
      case Tok::var_end: return "end of print statement";
      case Tok::block_begin: return "begin of statement block";
      case Tok::var_begin: return "begin of print statement";
      case Tok::data: return "template data";
      case Tok::string: return "string";
      default: return "'" + t.text + "'";
    }
  }

  bool is_op(std::string_view op) const { return cur().type == Tok::op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_here("expected '" + std::string(op) + "', got " + describe(cur()));
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail_here(std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::name) fail_here("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail_here("template nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  ExprPtr make(ExprKind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---- statements ----

  Body subparse(std::initializer_list<std::string_view> end_names) {
    DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.type == Tok::eof) return body;
      if (t.type == Tok::data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::text;
        s->pos = here();
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::var_begin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::output;
        s->pos = here();
        next();
        s->expr = parse_tuple(true, {});
        expect(Tok::var_end, "end of print statement");
        body.push_back(std::move(s));
      } else if (t.type == Tok::block_begin) {
        const Token& n = peek();
        if (n.type != Tok::name) {
          next();
          fail_here("expected a statement name, got " + describe(cur()));
        }
        for (std::string_view end : end_names) {
          if (n.text == end) return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail_here("unexpected " + describe(t));
      }
    }
  }

  // At block_begin of an end tag the caller expects: consumes `{% name %}`.
  void end_tag(std::string_view name) {
    expect(Tok::block_begin, "a block");
    if (!skip_name(name)) fail_here("expected '" + std::string(name) + "'");
    expect(Tok::block_end, "end of statement block");
  }

  [[noreturn]] void unclosed(std::string_view tag, Pos pos, std::string_view expected) {
    lexer_.fail(cur().offset, "unexpected end of template: the '" + std::string(tag) + "' at line " +
                                  std::to_string(pos.line) + " expects '" + std::string(expected) + "'");
  }

  // At a block_begin after a body: the name of the tag that ended it.
  std::string_view ending_name(std::string_view tag, Pos pos, std::string_view expected) {
    if (cur().type == Tok::eof) unclosed(tag, pos, expected);
    return peek().text;
  }

  std::unique_ptr<Stmt> parse_statement() {
    auto s = std::make_unique<Stmt>();
    s->pos = here();
    const std::string tag = expect_name();
    if (tag == "if") return parse_if(std::move(s));
    if (tag == "for") return parse_for(std::move(s));
    if (tag == "set") return parse_set(std::move(s));
    if (tag == "macro") return parse_macro(std::move(s));
    if (tag == "call") return parse_call_block(std::move(s));
    if (tag == "filter") return parse_filter_block(std::move(s));
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) lexer_.fail(toks_[i_ - 1].offset, "'" + tag + "' outside of a loop");
      s->kind = tag == "break" ? StmtKind::break_ : StmtKind::continue_;
      expect(Tok::block_end, "end of statement block");
      return s;
    }
    static constexpr const char* kUnsupported[] = {"include", "import", "from", "extends", "block",
                                                   "with", "autoescape", "do"};
    for (const char* u : kUnsupported) {
      if (tag == u) lexer_.fail(toks_[i_ - 1].offset, "the '" + tag + "' tag is not supported");
    }
    lexer_.fail(toks_[i_ - 1].offset, "unknown tag '" + tag + "'");
  }

  std::unique_ptr<Stmt> parse_if(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::if_;
    s->conds.push_back(parse_tuple(false, {}));
    expect(Tok::block_end, "end of statement block");
    for (;;) {
      s->bodies.push_back(subparse({"elif", "else", "endif"}));
      const std::string_view end = ending_name("if", s->pos, "endif");
      next();
      next();
      if (end == "elif") {
        s->conds.push_back(parse_tuple(false, {}));
        expect(Tok::block_end, "end of statement block");
        continue;
      }
      expect(Tok::block_end, "end of statement block");
      if (end == "else") {
        s->else_body = subparse({"endif"});
        ending_name("if", s->pos, "endif");
        end_tag("endif");
      }
      return s;
    }
  }

  std::unique_ptr<Stmt> parse_for(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::for_;
    s->targets.push_back(expect_name());
    while (skip_op(",")) {
      if (is_name("in")) break;
      s->targets.push_back(expect_name());
    }
    if (!skip_name("in")) fail_here("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, {"recursive"});
    if (skip_name("if")) s->filter_cond = parse_expression(true);
    if (skip_name("recursive")) s->recursive = true;
    expect(Tok::block_end, "end of statement block");
    ++loop_depth_;
    s->bodies.push_back(subparse({"endfor", "else"}));
    --loop_depth_;
    const std::string_view end = ending_name("for", s->pos, "endfor");
    if (end == "else") {
      next();
      next();
      expect(Tok::block_end, "end of statement block");
      s->else_body = subparse({"endfor"});
      ending_name("for", s->pos, "endfor");
    }
    end_tag("endfor");
    return s;
  }

  std::unique_ptr<Stmt> parse_set(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::set;
    s->targets.push_back(expect_name());
    if (skip_op(".")) {
      s->attr = expect_name();
    } else {
      while (skip_op(",")) s->targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      s->expr = parse_tuple(true, {});
      expect(Tok::block_end, "end of statement block");
      return s;
    }
    if (!s->attr.empty() || s->targets.size() != 1) fail_here("expected '='");
    s->kind = StmtKind::set_block;
    if (is_op("|")) s->filters.push_back(parse_filter_chain());
    expect(Tok::block_end, "end of statement block");
    s->bodies.push_back(subparse({"endset"}));
    ending_name("set", s->pos, "endset");
    end_tag("endset");
    return s;
  }

  void parse_params(std::vector<Param>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  std::unique_ptr<Stmt> parse_macro(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::macro;
    s->text = expect_name();
    parse_params(s->params);
    expect(Tok::block_end, "end of statement block");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(subparse({"endmacro"}));
    loop_depth_ = saved;
    ending_name("macro", s->pos, "endmacro");
    end_tag("endmacro");
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::call_block;
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::call) fail_here("expected a call");
    expect(Tok::block_end, "end of statement block");
    s->bodies.push_back(subparse({"endcall"}));
    ending_name("call", s->pos, "endcall");
    end_tag("endcall");
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::filter_block;
    s->filters.push_back(parse_filter_chain(false));
    expect(Tok::block_end, "end of statement block");
    s->bodies.push_back(subparse({"endfilter"}));
    ending_name("filter", s->pos, "endfilter");
    end_tag("endfilter");
    return s;
  }

  // `| f | g(x)` (or `f | g` in a filter block) applied to the block-value placeholder.
  ExprPtr parse_filter_chain(bool leading_pipe = true) {
    ExprPtr node = make(ExprKind::name, here());
    node->name = kBlockValue;
    if (!leading_pipe) node = parse_filter(std::move(node));
    while (is_op("|")) {
      next();
      node = parse_filter(std::move(node));
    }
    return node;
  }

  // ---- expressions ----

  bool tuple_end(std::initializer_list<std::string_view> extra) const {
    const Token& t = cur();
    if (t.type == Tok::var_end || t.type == Tok::block_end || t.type == Tok::eof) return true;
    if (t.type == Tok::op && (t.text == ")" || t.text == "]" || t.text == "}")) return true;
    if (t.type == Tok::name) {
      for (std::string_view e : extra) {
        if (t.text == e) return true;
      }
    }
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra,
                      bool explicit_parens = false) {
    const Pos pos = here();
    std::vector<ExprPtr> items;
    bool saw_comma = false;
    for (;;) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        saw_comma = true;
      }
      if (tuple_end(extra)) break;
      items.push_back(parse_expression(with_condexpr));
    }
    if (!saw_comma) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_here("expected an expression, got " + describe(cur()));
    }
    ExprPtr t = make(ExprKind::tuple, pos);
    t->args = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const Pos pos = here();
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      ExprPtr c = make(ExprKind::cond, pos);
      ExprPtr test = parse_or();
      ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(expr));
      c->args.push_back(std::move(other));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, Pos pos, ExprPtr a, ExprPtr b, std::string op = {}) {
    ExprPtr e = make(kind, pos);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    const Pos pos = here();
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::or_, pos, std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    const Pos pos = here();
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::and_, pos, std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      ExprPtr e = make(ExprKind::not_, here());
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Pos pos = here();
    ExprPtr expr = parse_math1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      const Token& t = cur();
      if (t.type == Tok::op && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::name && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::compare, pos);
        cmp->args.push_back(std::move(expr));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  ExprPtr parse_math1() {
    const Pos pos = here();
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      left = binary(ExprKind::binop, pos, std::move(left), parse_concat(), op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Pos pos = here();
    ExprPtr left = parse_math2();
    while (skip_op("~")) left = binary(ExprKind::binop, pos, std::move(left), parse_math2(), "~");
    return left;
  }

  ExprPtr parse_math2() {
    const Pos pos = here();
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      left = binary(ExprKind::binop, pos, std::move(left), parse_pow(), op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    const Pos pos = here();
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary(ExprKind::binop, pos, std::move(left), parse_unary(true), "**");
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const Pos pos = here();
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      ExprPtr e = make(is_op("-") ? ExprKind::neg : ExprKind::pos, pos);
      next();
      e->args.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr literal(Value v, Pos pos) {
    ExprPtr e = make(ExprKind::literal, pos);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Pos pos = here();
    const Token& t = cur();
    switch (t.type) {
      case Tok::name: {
        static const std::pair<const char*, int> kConstants[] = {
            {"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", 2}, {"None", 2}};
        for (const auto& [word, what] : kConstants) {
          if (t.text == word) {
            next();
            return literal(what == 2 ? Value::none() : Value::boolean(what == 1), pos);
          }
        }
        ExprPtr e = make(ExprKind::name, pos);
        e->name = t.text;
        next();
        return e;
      }
      case Tok::string: {
        std::string s = t.text;
        next();
        while (cur().type == Tok::string) {
          s += cur().text;
          next();
        }
        return literal(Value::string(std::move(s)), pos);
      }
      case Tok::integer: {
        int64_t v = 0;
        for (char c : t.text) {
          if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v)) {
            fail_here("integer literal too large");
          }
        }
        next();
        return literal(Value::integer(v), pos);
      }
      case Tok::floating: {
        const double v = std::strtod(t.text.c_str(), nullptr);
        next();
        return literal(Value::floating(v), pos);
      }
      case Tok::op:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          ExprPtr e = make(ExprKind::list, pos);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          next();
          ExprPtr e = make(ExprKind::dict, pos);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail_here("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    for (;;) {
      const Pos pos = here();
      if (is_op(".")) {
        next();
        if (cur().type == Tok::name) {
          ExprPtr e = make(ExprKind::attr, pos);
          e->name = cur().text;
          next();
          e->args.push_back(std::move(node));
          node = std::move(e);
        } else if (cur().type == Tok::integer) {
          ExprPtr idx = parse_primary();
          node = binary(ExprKind::item, pos, std::move(node), std::move(idx));
        } else {
          fail_here("expected a name after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        next();
        node = parse_subscript(std::move(node), pos);
        expect_op("]");
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
      if (++chain_ > 10000) fail_here("expression too long");
    }
  }

  ExprPtr parse_subscript(ExprPtr node, Pos pos) {
    ExprPtr parts[3];
    bool slice = false;
    if (!is_op(":")) parts[0] = parse_expression(true);
    if (skip_op(":")) {
      slice = true;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression(true);
      if (skip_op(":") && !is_op("]")) parts[2] = parse_expression(true);
    }
    if (!slice) {
      if (!parts[0]) fail_here("expected an index");
      return binary(ExprKind::item, pos, std::move(node), std::move(parts[0]));
    }
    ExprPtr e = make(ExprKind::slice, pos);
    e->args.push_back(std::move(node));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().type == Tok::name && peek().type == Tok::op && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail_here("positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    ExprPtr e = make(ExprKind::call, here());
    e->args.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr node) {
    ExprPtr e = make(ExprKind::filter, here());
    e->name = expect_name();
    while (is_op(".") && peek().type == Tok::name) {
      next();
      e->name += "." + expect_name();
    }
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    for (;;) {
      if (is_op("|")) {
        next();
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        next();
        ExprPtr e = make(ExprKind::test, here());
        e->negated = skip_name("not");
        e->name = expect_name();
        while (is_op(".") && peek().type == Tok::name) {
          next();
          e->name += "." + expect_name();
        }
        e->args.push_back(std::move(node));
        const Token& t = cur();
        if (is_op("(")) {
          parse_call_args(*e);
        } else if ((t.type == Tok::name || t.type == Tok::string || t.type == Tok::integer ||
                    t.type == Tok::floating || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail_here("you cannot chain multiple tests with is");
          ExprPtr arg = parse_primary();
          e->args.push_back(parse_postfix(std::move(arg)));
        }
        node = std::move(e);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
      if (++chain_ > 10000) fail_here("expression too long");
    }
  }

  const Lexer& lexer_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  size_t chain_ = 0;
};

}  // namespace

Program parse_template(std::string_view source, const std::string& name) {
  Lexer lexer(source, name);
  std::vector<Token> tokens = lexer.run();
  Parser parser(lexer, std::move(tokens));
  Program program;
  program.name = name;
  program.body = parser.parse_all();
  return program;
}

}  // namespace loom::tmpl
