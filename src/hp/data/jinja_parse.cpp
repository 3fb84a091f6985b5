// Chat template parser (jinja.h): recursive descent over jinja_lex.cpp's pieces and tokens, with
// jinja2's precedence (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < filters and tests < postfix).
#include <cctype>
#include <cstdlib>
#include <string>

#include "hp/core/error.h"
#include "hp/data/jinja_ast.h"

namespace hp::data::jinja::detail {

namespace {

// ---- expressions ----

// Nesting bound of expressions and blocks: a template is data, and a deep one must be an error,
// not a stack overflow.
constexpr int kMaxDepth = 200;

class ExprParser {
 public:
  ExprParser(const std::string& src, int line, const std::string& name)
      : toks_(tokenize(src, line, name)), line_(line), name_(name) {}

  [[noreturn]] void fail(const std::string& what) const {
    HP_THROW(ValueError, "chat", name_, ":", line_, ": ", what);
  }
  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  bool at_end() const { return peek().kind == Token::Kind::end; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::op && peek(ahead).text == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::name && peek(ahead).text == n;
  }
  bool accept_op(const char* op) { return is_op(op) ? (++pos_, true) : false; }
  bool accept_name(const char* n) { return is_name(n) ? (++pos_, true) : false; }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', got '" + peek().text + "'");
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::name) fail("expected a name, got '" + peek().text + "'");
    return toks_[pos_++].text;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + peek().text + "'");
  }

  ExprPtr expression(bool with_cond = true) {
    const Nest nest(*this);
    ExprPtr e = or_expr();
    if (with_cond && accept_name("if")) {
      ExprPtr c = node(Expr::Kind::cond);
      c->args.push_back(std::move(e));
      c->args.push_back(or_expr());
      c->args.push_back(accept_name("else") ? expression() : nullptr);
      return c;
    }
    return e;
  }

 private:
  struct Nest {
    explicit Nest(ExprParser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.fail("expression nested more than " + std::to_string(kMaxDepth) + " deep");
    }
    ~Nest() { --p_.depth_; }
    ExprParser& p_;
  };

  ExprPtr node(Expr::Kind k) const {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }
  ExprPtr binary(Expr::Kind k, ExprPtr a, ExprPtr b, std::string op = {}) const {
    ExprPtr e = node(k);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) e = binary(Expr::Kind::or_, std::move(e), and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) e = binary(Expr::Kind::and_, std::move(e), not_expr());
    return e;
  }
  ExprPtr not_expr() {
    const Nest nest(*this);
    if (accept_name("not")) {
      ExprPtr e = node(Expr::Kind::not_);
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr first = math1();
    ExprPtr e;
    for (;;) {
      std::string op;
      static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">="};
      for (const char* o : kOps)
        if (is_op(o)) op = o;
      if (!op.empty()) ++pos_;
      else if (accept_name("in")) op = "in";
      else if (is_name("not") && is_name("in", 1)) pos_ += 2, op = "notin";
      else break;
      if (!e) {
        e = node(Expr::Kind::compare);
        e->args.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->args.push_back(math1());
    }
    return e ? std::move(e) : std::move(first);
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = toks_[pos_++].text;
      e = binary(Expr::Kind::binary, std::move(e), concat(), op);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (accept_op("~")) e = binary(Expr::Kind::binary, std::move(e), math2(), "~");
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = toks_[pos_++].text;
      e = binary(Expr::Kind::binary, std::move(e), power(), op);
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary(true);
    while (accept_op("**")) e = binary(Expr::Kind::binary, std::move(e), unary(true), "**");
    return e;
  }
  ExprPtr unary(bool with_filter) {
    const Nest nest(*this);
    ExprPtr e;
    if (accept_op("-")) {
      e = node(Expr::Kind::neg);
      e->args.push_back(unary(false));
    } else if (accept_op("+")) {
      e = unary(false);
    } else {
      e = postfix(primary());
    }
    return with_filter ? filters(std::move(e)) : std::move(e);
  }
  void call_args(Expr& e) {
    if (accept_op(")")) return;
    for (;;) {
      if (peek().kind == Token::Kind::name && is_op("=", 1)) {
        std::string k = expect_name();
        ++pos_;
        e.kwargs.emplace_back(std::move(k), expression());
      } else {
        e.args.push_back(expression());
      }
      if (accept_op(")")) return;
      expect_op(",");
    }
  }
  // `e(args...)` after its "(" was accepted.
  ExprPtr call_on(ExprPtr e) {
    ExprPtr c = node(Expr::Kind::call);
    c->args.push_back(std::move(e));
    call_args(*c);
    return c;
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (accept_op(".")) {
        ExprPtr a = node(Expr::Kind::attr);
        if (peek().kind == Token::Kind::integer) a->name = toks_[pos_++].text;
        else a->name = expect_name();
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (accept_op("[")) {
        ExprPtr start = is_op(":") ? nullptr : expression();
        if (accept_op(":")) {
          ExprPtr s = node(Expr::Kind::slice);
          s->args.push_back(std::move(e));
          s->args.push_back(std::move(start));
          s->args.push_back(is_op(":") || is_op("]") ? nullptr : expression());
          s->args.push_back(accept_op(":") && !is_op("]") ? expression() : nullptr);
          e = std::move(s);
        } else {
          e = binary(Expr::Kind::item, std::move(e), std::move(start));
        }
        expect_op("]");
      } else if (accept_op("(")) {
        e = call_on(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (accept_op("|")) {
        ExprPtr f = node(Expr::Kind::filter);
        f->name = expect_name();
        f->args.push_back(std::move(e));
        if (accept_op("(")) call_args(*f);
        e = std::move(f);
      } else if (accept_name("is")) {
        ExprPtr t = node(Expr::Kind::test);
        t->negated = accept_name("not");
        t->name = expect_name();
        t->args.push_back(std::move(e));
        const Token& n = peek();
        if (accept_op("(")) {
          call_args(*t);
        } else if ((n.kind == Token::Kind::name && n.text != "else" && n.text != "or" &&
                    n.text != "and" && n.text != "if") ||
                   n.kind == Token::Kind::string || n.kind == Token::Kind::integer ||
                   n.kind == Token::Kind::number || is_op("[") || is_op("{")) {
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (accept_op("(")) {
        e = call_on(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprPtr literal(Value v) {
    ExprPtr e = node(Expr::Kind::literal);
    e->value = std::move(v);
    return e;
  }
  ExprPtr primary() {
    const Token t = peek();
    ++pos_;
    switch (t.kind) {
      case Token::Kind::name:
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true));
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false));
        if (t.text == "none" || t.text == "None") return literal(Value::none());
        {
          ExprPtr e = node(Expr::Kind::name);
          e->name = t.text;
          return e;
        }
      case Token::Kind::string: {
        std::string s = t.text;
        while (peek().kind == Token::Kind::string) s += toks_[pos_++].text;
        return literal(Value::string(std::move(s)));
      }
      case Token::Kind::integer: return literal(Value::integer(std::strtoll(t.text.c_str(), nullptr, 10)));
      case Token::Kind::number: return literal(Value::number(std::strtod(t.text.c_str(), nullptr)));
      case Token::Kind::op:
        if (t.text == "(") {
          ExprPtr e = expression();
          if (is_op(",")) fail("tuples are not supported");
          expect_op(")");
          return e;
        }
        if (t.text == "[" || t.text == "{") {
          const bool dict = t.text == "{";
          ExprPtr e = node(dict ? Expr::Kind::dict : Expr::Kind::list);
          const char* close = dict ? "}" : "]";
          while (!accept_op(close)) {
            e->args.push_back(expression());
            if (dict) {
              expect_op(":");
              e->args.push_back(expression());
            }
            if (!is_op(close)) expect_op(",");
          }
          return e;
        }
        break;
      case Token::Kind::end: fail("unexpected end of expression");
    }
    fail("unexpected '" + t.text + "'");
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int line_;
  const std::string& name_;
};

// ---- statements ----

class Parser {
 public:
  Parser(std::vector<Piece> pieces, Program& prog) : pieces_(std::move(pieces)), prog_(prog) {}

  // Statements up to one of `ends` (a block tag's keyword; none = the end of the template).
  // Returns the keyword found, its parser positioned after it.
  std::string body(Body& out, std::initializer_list<const char*> ends,
                   std::unique_ptr<ExprParser>* tail = nullptr) {
    while (pos_ < pieces_.size()) {
      const Piece& p = pieces_[pos_++];
      if (p.kind == Piece::Kind::comment) continue;
      if (p.kind == Piece::Kind::text) {
        if (p.src.empty()) continue;
        auto s = stmt(Stmt::Kind::text, p.line);
        s->text = p.src;
        out.push_back(std::move(s));
        continue;
      }
      auto ep = std::make_unique<ExprParser>(p.src, p.line, prog_.name);
      if (p.kind == Piece::Kind::var) {
        auto s = stmt(Stmt::Kind::output, p.line);
        s->expr = ep->expression();
        ep->expect_end();
        out.push_back(std::move(s));
        continue;
      }
      const std::string kw = ep->expect_name();
      for (const char* e : ends)
        if (kw == e) {
          if (tail) *tail = std::move(ep);
          else ep->expect_end();
          return kw;
        }
      out.push_back(block(kw, *ep, p.line));
    }
    if (ends.size() > 0)
      HP_THROW(ValueError, "chat", prog_.name, ": missing '{% ", *(ends.end() - 1), " %}'");
    return {};
  }

 private:
  std::unique_ptr<Stmt> stmt(Stmt::Kind k, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = line;
    return s;
  }
  std::unique_ptr<Stmt> block(const std::string& kw, ExprParser& ep, int line) {
    if (++depth_ > kMaxDepth) ep.fail("blocks nested more than " + std::to_string(kMaxDepth) + " deep");
    std::unique_ptr<Stmt> s = block_body(kw, ep, line);
    --depth_;
    return s;
  }
  std::unique_ptr<Stmt> block_body(const std::string& kw, ExprParser& ep, int line) {
    if (kw == "for") {
      auto s = stmt(Stmt::Kind::for_, line);
      do s->targets.push_back(ep.expect_name());
      while (ep.accept_op(","));
      if (!ep.accept_name("in")) ep.fail("expected 'in' in for");
      s->expr = ep.expression(/*with_cond=*/false);
      if (ep.accept_name("if")) s->cond = ep.expression();
      if (ep.is_name("recursive")) ep.fail("recursive loops are not supported");
      ep.expect_end();
      if (body(s->body, {"endfor", "else"}) == "else") body(s->else_body, {"endfor"});
      return s;
    }
    if (kw == "if") {
      auto s = stmt(Stmt::Kind::if_, line);
      ExprPtr cond = ep.expression();
      ep.expect_end();
      for (;;) {
        Body b;
        std::unique_ptr<ExprParser> tail;
        const std::string end = body(b, {"elif", "else", "endif"}, &tail);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") {
          cond = tail->expression();
          tail->expect_end();
          continue;
        }
        tail->expect_end();
        if (end == "else") body(s->else_body, {"endif"});
        return s;
      }
    }
    if (kw == "set") {
      std::vector<std::string> target{ep.expect_name()};
      if (ep.accept_op(".")) target.push_back(ep.expect_name());
      if (ep.is_op(",")) ep.fail("tuple assignment is not supported");
      if (ep.accept_op("=")) {
        auto s = stmt(Stmt::Kind::set, line);
        s->targets = std::move(target);
        s->expr = ep.expression();
        ep.expect_end();
        return s;
      }
      ep.expect_end();
      auto s = stmt(Stmt::Kind::set_block, line);
      s->targets = std::move(target);
      body(s->body, {"endset"});
      return s;
    }
    if (kw == "generation") {
      ep.expect_end();
      prog_.has_generation = true;
      auto s = stmt(Stmt::Kind::generation, line);
      body(s->body, {"endgeneration"});
      return s;
    }
    if (kw == "break" || kw == "continue") {
      ep.expect_end();
      return stmt(kw == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_, line);
    }
    ep.fail("'{% " + kw + " %}' is not supported (jinja.h lists what is)");
  }

  std::vector<Piece> pieces_;
  size_t pos_ = 0;
  int depth_ = 0;
  Program& prog_;
};

}  // namespace

Program parse(std::string_view source, std::string name) {
  Program prog;
  prog.name = std::move(name);
  Parser(lex(source, prog.name), prog).body(prog.body, {});
  return prog;
}

}  // namespace hp::data::jinja::detail
