// Filters, tests and methods of the chat template engine (jinja.h), as jinja2 and Python define
// them for the argument types chat templates use.
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "hp/data/jinja_ast.h"

namespace hp::data::jinja::detail {

namespace {

const char* kWhitespace = " \t\n\r\f\v";

const Value& arg(const std::vector<Value>& args, size_t i, const char* what) {
  if (i >= args.size()) throw EvalError(std::string(what) + ": missing argument " + std::to_string(i + 1));
  return args[i];
}

const std::string& str_arg(const std::vector<Value>& args, size_t i, const char* what) {
  const Value& v = arg(args, i, what);
  if (v.kind != Value::Kind::string)
    throw EvalError(std::string(what) + ": argument " + std::to_string(i + 1) + " must be a string, got " +
                    kind_name(v));
  return v.s;
}

const std::string& self_str(const Value& v, const char* what) {
  if (v.kind != Value::Kind::string)
    throw EvalError(std::string(what) + " needs a string, got " + kind_name(v));
  return v.s;
}

// str.strip / lstrip / rstrip; `chars` none = whitespace.
std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) b = s.find_first_not_of(chars);
  if (b == std::string::npos) return {};
  if (right) e = s.find_last_not_of(chars) + 1;
  return s.substr(b, e - b);
}

std::string strip_chars(const std::vector<Value>& args, const char* what) {
  if (args.empty() || args[0].kind == Value::Kind::none) return kWhitespace;
  return str_arg(args, 0, what);
}

Value split(const std::string& s, const std::vector<Value>& args) {
  List out;
  int64_t max = -1;
  if (args.size() > 1) max = arg(args, 1, "split").i;
  if (args.empty() || args[0].kind == Value::Kind::none) {
    size_t i = s.find_first_not_of(kWhitespace);
    while (i != std::string::npos) {
      size_t j = s.find_first_of(kWhitespace, i);
      if (max >= 0 && static_cast<int64_t>(out.size()) == max) j = std::string::npos;
      out.push_back(Value::string(s.substr(i, j == std::string::npos ? j : j - i)));
      i = j == std::string::npos ? j : s.find_first_not_of(kWhitespace, j);
    }
    return Value::make_list(std::move(out));
  }
  const std::string& sep = str_arg(args, 0, "split");
  if (sep.empty()) throw EvalError("split: empty separator");
  size_t i = 0;
  for (;;) {
    const size_t j = max >= 0 && static_cast<int64_t>(out.size()) == max ? std::string::npos
                                                                         : s.find(sep, i);
    if (j == std::string::npos) {
      out.push_back(Value::string(s.substr(i)));
      break;
    }
    out.push_back(Value::string(s.substr(i, j - i)));
    i = j + sep.size();
  }
  return Value::make_list(std::move(out));
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size()))
    s.replace(i, from.size(), to);
  return s;
}

std::string title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    c = alpha ? static_cast<char>(start ? std::toupper(c) : std::tolower(c)) : c;
    start = !alpha;
  }
  return out;
}

std::string map_chars(std::string s, int (*f)(int)) {
  for (char& c : s) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

// selectattr / rejectattr(attribute, test = truthy, test args...).
Value select_attr(const Value& v, const std::vector<Value>& args, bool keep) {
  const std::string& attr = str_arg(args, 0, "selectattr");
  const std::vector<Value> test_args(args.size() > 2 ? args.begin() + 2 : args.end(), args.end());
  List out;
  for (const Value& x : iterate(v)) {
    const Value a = x.kind == Value::Kind::dict ? subscript(x, Value::string(attr)) : Value();
    const bool pass = args.size() > 1 ? apply_test(str_arg(args, 1, "selectattr"), a, test_args)
                                      : truthy(a);
    if (pass == keep) out.push_back(x);
  }
  return Value::make_list(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const std::vector<Value>& args,
                   const Kwargs& kwargs) {
  if (name == "trim") return Value::string(strip(self_str(v, "trim"), strip_chars(args, "trim"), true, true));
  if (name == "length" || name == "count") return Value::integer(length(v));
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "string") return Value::string(to_str(v));
  if (name == "safe") return v;
  if (name == "lower") return Value::string(map_chars(to_str(v), std::tolower));
  if (name == "upper") return Value::string(map_chars(to_str(v), std::toupper));
  if (name == "title") return Value::string(title(to_str(v)));
  if (name == "capitalize") {
    std::string s = map_chars(to_str(v), std::tolower);
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return Value::string(s);
  }
  if (name == "replace")
    return Value::string(replace_all(to_str(v), str_arg(args, 0, "replace"), str_arg(args, 1, "replace")));
  if (name == "first" || name == "last") {
    const List items = iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const std::string sep = args.empty() ? "" : str_arg(args, 0, "join");
    std::string out;
    const List items = iterate(v);
    for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + to_str(items[i]);
    return Value::string(out);
  }
  if (name == "default" || name == "d") {
    const bool boolean = args.size() > 1 && truthy(args[1]);
    if (boolean ? truthy(v) : v.defined()) return v;
    return args.empty() ? Value::string("") : args[0];
  }
  if (name == "tojson") {
    int indent = -1;
    for (const auto& [k, a] : kwargs)
      if (k == "indent" && a.kind == Value::Kind::integer) indent = static_cast<int>(a.i);
    if (!args.empty() && args[0].kind == Value::Kind::integer) indent = static_cast<int>(args[0].i);
    return Value::string(to_json(v, indent));
  }
  if (name == "items") return call_method(v, "items", {});
  if (name == "selectattr" || name == "rejectattr") return select_attr(v, args, name == "selectattr");
  if (name == "map") {
    for (const auto& [k, a] : kwargs)
      if (k == "attribute") {
        List out;
        for (const Value& x : iterate(v)) out.push_back(subscript(x, a));
        return Value::make_list(std::move(out));
      }
    List out;
    for (const Value& x : iterate(v)) out.push_back(apply_filter(str_arg(args, 0, "map"), x, {}, {}));
    return Value::make_list(std::move(out));
  }
  if (name == "int") {
    if (v.kind == Value::Kind::number) {
      if (!(std::fabs(v.d) < 9.2e18)) throw EvalError("int() of " + to_str(v) + " overflows");
      return Value::integer(static_cast<int64_t>(v.d));
    }
    if (v.kind == Value::Kind::integer || v.kind == Value::Kind::boolean) return Value::integer(v.kind == Value::Kind::boolean ? v.b : v.i);
    return Value::integer(v.kind == Value::Kind::string ? std::strtoll(v.s.c_str(), nullptr, 10) : 0);
  }
  if (name == "float") {
    if (v.kind == Value::Kind::integer) return Value::number(double(v.i));
    if (v.kind == Value::Kind::number) return v;
    return Value::number(v.kind == Value::Kind::string ? std::strtod(v.s.c_str(), nullptr) : 0.0);
  }
  if (name == "abs") {
    if (v.kind == Value::Kind::integer) {
      if (v.i == INT64_MIN) throw EvalError("integer overflow");
      return Value::integer(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == Value::Kind::number) return Value::number(std::fabs(v.d));
    throw EvalError(std::string("abs of a ") + kind_name(v));
  }
  throw EvalError("unknown filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  using K = Value::Kind;
  if (name == "defined") return v.defined();
  if (name == "undefined") return !v.defined();
  if (name == "none") return v.kind == K::none;
  if (name == "string") return v.kind == K::string;
  if (name == "number") return v.kind == K::integer || v.kind == K::number;
  if (name == "integer") return v.kind == K::integer;
  if (name == "float") return v.kind == K::number;
  if (name == "boolean") return v.kind == K::boolean;
  if (name == "true") return v.kind == K::boolean && v.b;
  if (name == "false") return v.kind == K::boolean && !v.b;
  if (name == "mapping") return v.kind == K::dict;
  if (name == "iterable") return v.kind == K::list || v.kind == K::dict || v.kind == K::string;
  if (name == "sequence") return v.kind == K::list || v.kind == K::dict || v.kind == K::string;
  if (name == "equalto" || name == "eq" || name == "==") return equal(v, arg(args, 0, name.c_str()));
  if (name == "ne" || name == "!=") return !equal(v, arg(args, 0, name.c_str()));
  if (name == "sameas") {
    const Value& o = arg(args, 0, "sameas");
    if (v.kind != o.kind) return false;
    if (v.kind == K::list) return v.list == o.list;
    if (v.kind == K::dict) return v.dict == o.dict;
    return equal(v, o);
  }
  if (name == "odd" || name == "even") {
    if (v.kind != K::integer) throw EvalError("'" + name + "' needs an integer");
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "in") {
    const Value& c = arg(args, 0, "in");
    if (c.kind == K::string) return v.kind == K::string && c.s.find(v.s) != std::string::npos;
    for (const Value& x : iterate(c))
      if (equal(x, v)) return true;
    return false;
  }
  throw EvalError("unknown test '" + name + "'");
}

Value call_method(const Value& obj, const std::string& name, const std::vector<Value>& args) {
  if (obj.kind == Value::Kind::string) {
    const std::string& s = obj.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value::string(strip(s, strip_chars(args, name.c_str()), name != "rstrip", name != "lstrip"));
    if (name == "split") return split(s, args);
    if (name == "startswith") return Value::boolean(s.rfind(str_arg(args, 0, "startswith"), 0) == 0);
    if (name == "endswith") {
      const std::string& x = str_arg(args, 0, "endswith");
      return Value::boolean(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
      return apply_filter(name, obj, {}, {});
    if (name == "replace")
      return Value::string(replace_all(s, str_arg(args, 0, "replace"), str_arg(args, 1, "replace")));
    if (name == "find") return Value::integer([&] {
        const size_t i = s.find(str_arg(args, 0, "find"));
        return i == std::string::npos ? int64_t{-1} : length(Value::string(s.substr(0, i)));
      }());
  }
  if (obj.kind == Value::Kind::dict && !obj.dict->is_namespace) {
    if (name == "items") {
      List out;
      for (const auto& [k, v] : obj.dict->items)
        out.push_back(Value::make_list({Value::string(k), v}));
      return Value::make_list(std::move(out));
    }
    if (name == "keys") return Value::make_list(iterate(obj));
    if (name == "values") {
      List out;
      for (const auto& kv : obj.dict->items) out.push_back(kv.second);
      return Value::make_list(std::move(out));
    }
    if (name == "get") {
      const Value* m = obj.dict->find(str_arg(args, 0, "get"));
      return m ? *m : args.size() > 1 ? args[1] : Value::none();
    }
  }
  throw EvalError(std::string("'") + kind_name(obj) + "' object has no method '" + name + "'");
}

}  // namespace hp::data::jinja::detail
