// Chat template renderer (jinja.h): evaluates the parsed program (jinja_ast.h) with jinja2's
// semantics — Python operators, `and`/`or` returning an operand, loop scopes that do not leak
// (hence namespace()), undefined values that print as "" but fail on attribute access.
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "hp/core/error.h"
#include "hp/data/jinja_ast.h"

namespace hp::data::jinja {

struct Template::Impl {
  detail::Program prog;
};

namespace detail {
namespace {

enum class Flow { normal, break_, continue_ };

// Bounds of one render: a template is data, and a runaway one (nested loops over huge ranges)
// must end in an error rather than hang or exhaust memory.
constexpr int64_t kMaxIterations = int64_t{1} << 22;
constexpr size_t kMaxOutput = size_t{1} << 28;

class Renderer {
 public:
  Renderer(const Program& prog, const Dict& context, const Value& track, RenderResult& res)
      : prog_(prog), res_(res), out_(&res.text) {
    scopes_.emplace_back();
    for (const auto& [k, v] : context.items) scopes_.back()[k] = v;
    if (track.kind == Value::Kind::list) {
      for (const Value& m : *track.list) tracked_.push_back(m.kind == Value::Kind::dict ? m.dict.get() : nullptr);
      res.tracked.assign(tracked_.size(), {0, 0});
    }
  }

  void run() { exec(prog_.body); }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    HP_THROW(ValueError, "chat", prog_.name, ":", line, ": ", what);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) return f->second;
    return Value();
  }

  Flow exec(const Body& body) {
    for (const auto& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s) {
    try {
      switch (s.kind) {
        case Stmt::Kind::text: *out_ += s.text; break;
        case Stmt::Kind::output: *out_ += to_str(eval(*s.expr)); break;
        case Stmt::Kind::if_:
          for (const auto& [cond, body] : s.branches)
            if (truthy(eval(*cond))) return exec(body);
          return exec(s.else_body);
        case Stmt::Kind::for_: return exec_for(s);
        case Stmt::Kind::set: assign(s, eval(*s.expr)); break;
        case Stmt::Kind::set_block: {
          std::string text, *saved = out_;
          out_ = &text;
          exec(s.body);
          out_ = saved;
          assign(s, Value::string(std::move(text)));
          break;
        }
        case Stmt::Kind::generation: {
          const size_t begin = out_->size();
          const Flow f = exec(s.body);
          if (out_ == &res_.text) res_.generation.emplace_back(begin, out_->size());
          return f;
        }
        case Stmt::Kind::break_: return Flow::break_;
        case Stmt::Kind::continue_: return Flow::continue_;
      }
    } catch (const EvalError& e) {
      fail(s.line, e.what());
    }
    return Flow::normal;
  }

  void assign(const Stmt& s, Value v) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = std::move(v);
      return;
    }
    Value ns = lookup(s.targets[0]);
    if (ns.kind != Value::Kind::dict || !ns.dict->is_namespace)
      throw EvalError("'" + s.targets[0] + "' is not a namespace: cannot set an attribute of it");
    ns.dict->set(s.targets[1], std::move(v));
  }

  Flow exec_for(const Stmt& s) {
    List items;
    for (Value& x : iterate(eval(*s.expr))) {
      if (s.cond) {
        scopes_.emplace_back();
        bind(s, x);
        const bool keep = truthy(eval(*s.cond));
        scopes_.pop_back();
        if (!keep) continue;
      }
      items.push_back(std::move(x));
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > kMaxIterations || out_->size() > kMaxOutput)
        throw EvalError("the template runs more than " + std::to_string(kMaxIterations) +
                        " loop iterations or writes more than 256 MiB");
      scopes_.emplace_back();
      bind(s, items[static_cast<size_t>(i)]);
      Dict loop;
      loop.set("index0", Value::integer(i));
      loop.set("index", Value::integer(i + 1));
      loop.set("revindex0", Value::integer(n - 1 - i));
      loop.set("revindex", Value::integer(n - i));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value());
      scopes_.back()["loop"] = Value::make_dict(std::move(loop));
      const size_t begin = out_->size();
      const Flow f = exec(s.body);
      scopes_.pop_back();
      record(items[static_cast<size_t>(i)], begin);
      if (f == Flow::break_) break;
    }
    if (n == 0) return exec(s.else_body);
    return Flow::normal;
  }

  // A loop over tracked messages: the output of this iteration belongs to that message.
  void record(const Value& item, size_t begin) {
    if (item.kind != Value::Kind::dict || out_ != &res_.text || out_->size() == begin) return;
    for (size_t m = 0; m < tracked_.size(); ++m)
      if (tracked_[m] == item.dict.get()) res_.tracked[m] = {begin, out_->size()};
  }

  void bind(const Stmt& s, const Value& x) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = x;
      return;
    }
    const List parts = iterate(x);
    if (parts.size() != s.targets.size())
      throw EvalError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                      std::to_string(s.targets.size()) + " loop variables");
    for (size_t k = 0; k < parts.size(); ++k) scopes_.back()[s.targets[k]] = parts[k];
  }

  std::vector<Value> eval_args(const Expr& e, size_t from) {
    std::vector<Value> args;
    for (size_t k = from; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    return args;
  }
  Kwargs eval_kwargs(const Expr& e) {
    Kwargs kw;
    for (const auto& [k, x] : e.kwargs) kw.emplace_back(k, eval(*x));
    return kw;
  }

  std::optional<int64_t> opt_int(const ExprPtr& e) {
    if (!e) return std::nullopt;
    const Value v = eval(*e);
    if (v.kind == Value::Kind::none) return std::nullopt;
    if (v.kind != Value::Kind::integer) throw EvalError("slice indices must be integers");
    return v.i;
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::attr) return call_method(eval(*callee.args[0]), callee.name, eval_args(e, 1));
    if (callee.kind == Expr::Kind::name && !lookup(callee.name).defined()) {
      const std::vector<Value> args = eval_args(e, 1);
      if (callee.name == "raise_exception")
        HP_THROW(ValueError, "chat", prog_.name, ":", e.line, ": the template refused the conversation: ",
                 args.empty() ? std::string() : to_str(args[0]));
      if (callee.name == "namespace") {
        Dict ns;
        ns.is_namespace = true;
        for (auto& [k, v] : eval_kwargs(e)) ns.set(k, std::move(v));
        return Value::make_dict(std::move(ns));
      }
      if (callee.name == "range") {
        int64_t a = 0, b = 0, st = 1;
        for (const Value& v : args)
          if (v.kind != Value::Kind::integer) throw EvalError("range() needs integers");
        if (args.size() == 1) b = args[0].i;
        else if (args.size() >= 2) a = args[0].i, b = args[1].i, st = args.size() > 2 ? args[2].i : 1;
        if (st == 0) throw EvalError("range() step must not be zero");
        if ((double(b) - double(a)) / double(st) > double(kMaxIterations))
          throw EvalError("range() of more than 2^22 numbers");
        List out;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) out.push_back(Value::integer(i));
        return Value::make_list(std::move(out));
      }
    }
    throw EvalError("'" + (callee.kind == Expr::Kind::name ? callee.name : std::string("expression")) +
                    "' is not callable");
  }

  Value arith(const std::string& op, const Value& a, const Value& b) {
    using K = Value::Kind;
    if (op == "~") return Value::string(to_str(a) + to_str(b));
    if (op == "+" && a.kind == K::string && b.kind == K::string) return Value::string(a.s + b.s);
    if (op == "+" && a.kind == K::list && b.kind == K::list) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out));
    }
    const bool an = a.kind == K::integer || a.kind == K::number || a.kind == K::boolean;
    const bool bn = b.kind == K::integer || b.kind == K::number || b.kind == K::boolean;
    if (!an || !bn)
      throw EvalError("unsupported operand types for " + op + ": '" + kind_name(a) + "' and '" +
                      kind_name(b) + "'");
    auto num = [](const Value& x) { return x.kind == K::number ? x.d : double(x.kind == K::integer ? x.i : x.b); };
    const bool ints = a.kind != K::number && b.kind != K::number;
    const int64_t ia = a.kind == K::integer ? a.i : a.b, ib = b.kind == K::integer ? b.i : b.b;
    if (op == "/") {
      if (num(b) == 0) throw EvalError("division by zero");
      return Value::number(num(a) / num(b));
    }
    if (op == "//" || op == "%") {
      if (num(b) == 0) throw EvalError("division by zero");
      if (ints && ia == INT64_MIN && ib == -1) throw EvalError("integer overflow");
      if (ints) {
        int64_t q = ia / ib, r = ia % ib;
        if (r != 0 && ((r < 0) != (ib < 0))) --q, r += ib;  // Python floors
        return Value::integer(op == "//" ? q : r);
      }
      const double q = std::floor(num(a) / num(b));
      return Value::number(op == "//" ? q : num(a) - q * num(b));
    }
    if (op == "**") {
      const double p = std::pow(num(a), num(b));
      if (!ints || ib < 0) return Value::number(p);
      if (!(std::fabs(p) < 9.2e18)) throw EvalError("integer overflow");
      return Value::integer(static_cast<int64_t>(p));
    }
    if (ints) {
      int64_t r = 0;
      const bool over = op == "+" ? __builtin_add_overflow(ia, ib, &r)
                        : op == "-" ? __builtin_sub_overflow(ia, ib, &r)
                                    : __builtin_mul_overflow(ia, ib, &r);
      if (over) throw EvalError("integer overflow");  // Python's ints are unbounded; ours are not
      return Value::integer(r);
    }
    return Value::number(op == "+" ? num(a) + num(b) : op == "-" ? num(a) - num(b) : num(a) * num(b));
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in") return apply_test("in", a, {b});
    if (op == "notin") return !apply_test("in", a, {b});
    using K = Value::Kind;
    int c = 0;
    if (a.kind == K::string && b.kind == K::string) {
      c = a.s.compare(b.s);
    } else if ((a.kind == K::integer || a.kind == K::number || a.kind == K::boolean) &&
               (b.kind == K::integer || b.kind == K::number || b.kind == K::boolean)) {
      auto as_int = [](const Value& x) { return x.kind == K::integer ? x.i : int64_t{x.b}; };
      if (a.kind != K::number && b.kind != K::number) {
        c = as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b) ? 1 : 0;
      } else {
        const double x = a.kind == K::number ? a.d : double(as_int(a));
        const double y = b.kind == K::number ? b.d : double(as_int(b));
        c = x < y ? -1 : x > y ? 1 : 0;
      }
    } else {
      throw EvalError("'" + op + "' not supported between '" + kind_name(a) + "' and '" + kind_name(b) + "'");
    }
    return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: return lookup(e.name);
      case Expr::Kind::list: return Value::make_list(eval_args(e, 0));
      case Expr::Kind::dict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) d.set(to_str(eval(*e.args[k])), eval(*e.args[k + 1]));
        return Value::make_dict(std::move(d));
      }
      case Expr::Kind::attr: {
        const Value o = eval(*e.args[0]);
        if (!o.defined()) throw EvalError("'" + e.name + "' of an undefined value");
        return subscript(o, Value::string(e.name));
      }
      case Expr::Kind::item: return subscript(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::slice: {
        const Value o = eval(*e.args[0]);
        return slice(o, opt_int(e.args[1]), opt_int(e.args[2]), opt_int(e.args[3]));
      }
      case Expr::Kind::call: return call(e);
      case Expr::Kind::filter: return apply_filter(e.name, eval(*e.args[0]), eval_args(e, 1), eval_kwargs(e));
      case Expr::Kind::test: return Value::boolean(apply_test(e.name, eval(*e.args[0]), eval_args(e, 1)) != e.negated);
      case Expr::Kind::not_: return Value::boolean(!truthy(eval(*e.args[0])));
      case Expr::Kind::neg: return arith("-", Value::integer(0), eval(*e.args[0]));
      case Expr::Kind::and_: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case Expr::Kind::or_: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case Expr::Kind::cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value();
      case Expr::Kind::binary: return arith(e.name, eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::compare: {
        Value a = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value b = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], a, b)) return Value::boolean(false);
          a = std::move(b);
        }
        return Value::boolean(true);
      }
    }
    return Value();
  }

  const Program& prog_;
  RenderResult& res_;
  std::string* out_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::vector<const Dict*> tracked_;
  int64_t iterations_ = 0;
};

}  // namespace
}  // namespace detail

Template::Template(std::string_view source, std::string name)
    : impl_(std::make_unique<Impl>(Impl{detail::parse(source, std::move(name))})) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

RenderResult Template::render(const Dict& context, const Value& track) const {
  RenderResult res;
  detail::Renderer(impl_->prog, context, track, res).run();
  return res;
}

bool Template::has_generation_blocks() const { return impl_->prog.has_generation; }
const std::string& Template::name() const { return impl_->prog.name; }

}  // namespace hp::data::jinja
