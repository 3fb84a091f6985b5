// Schema registration: typed bindings, validators, YAML writing and the schema listing.
#include "hp/train/schema.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <limits>
#include <sstream>

#include "hp/train/schema_detail.h"

namespace hp::train {

namespace detail {

std::string format_number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string describe_node(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  return "'" + n.Scalar() + "'";
}

bool parse_int(const YAML::Node& n, int64_t* out) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

bool parse_float(const YAML::Node& n, double* out) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  // YAML's spellings of the non-finite numbers read as numbers, so that validate refuses them
  // naming the key ("must be finite") rather than calling them something other than a number.
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const std::pair<std::string_view, double> special[] = {
      {".nan", std::numeric_limits<double>::quiet_NaN()},
      {".NaN", std::numeric_limits<double>::quiet_NaN()},
      {".NAN", std::numeric_limits<double>::quiet_NaN()},
      {".inf", inf},
      {".Inf", inf},
      {".INF", inf},
      {"+.inf", inf},
      {"+.Inf", inf},
      {"+.INF", inf},
      {"-.inf", -inf},
      {"-.Inf", -inf},
      {"-.INF", -inf}};
  for (const auto& [word, value] : special)
    if (s == word) return *out = value, true;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

bool parse_bool(const YAML::Node& n, bool* out) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True" || s == "TRUE") return *out = true, true;
  if (s == "false" || s == "False" || s == "FALSE") return *out = false, true;
  return false;
}

bool parse_string(const YAML::Node& n, std::string* out) {
  if (!n.IsScalar()) return false;
  *out = n.Scalar();
  return true;
}

void emit_string(YAML::Emitter& e, const std::string& s) {
  // Quote what a YAML reader would otherwise take for null, a bool or a number.
  double d;
  YAML::Node probe(s);
  bool ambiguous = s.empty() || s == "~" || s == "null" || s == "true" || s == "false" ||
                   s == "yes" || s == "no" || parse_float(probe, &d);
  if (ambiguous)
    e << YAML::DoubleQuoted << s;
  else
    e << s;
}

}  // namespace detail

using detail::describe_node;
using detail::format_number;

Field& Schema::add_field(std::string_view name, std::string type, std::string doc) {
  std::string path = prefix_;
  for (const auto& s : scope_) path += (path.empty() ? "" : ".") + s;
  path += (path.empty() ? "" : ".") + std::string(name);
  auto f = std::make_unique<Field>();
  f->path = std::move(path);
  f->type = std::move(type);
  f->doc = std::move(doc);
  fields_.push_back(std::move(f));
  return *fields_.back();
}

void Schema::deprecated_alias(std::string_view name, std::string target) {
  Field& f = add_field(name, "", "deprecated: use " + target);
  f.alias_of = std::move(target);
  f.default_text = "-";
  groups_.push_back({{f.path}, {f.alias_of}});
}

void Schema::exclusive(const std::vector<std::string>& one, const std::vector<std::string>& other) {
  std::string scope = prefix_;
  for (const auto& s : scope_) scope += (scope.empty() ? "" : ".") + s;
  const auto full = [&](const std::vector<std::string>& names) {
    std::vector<std::string> out;
    for (const auto& n : names) out.push_back(scope.empty() ? n : scope + "." + n);
    return out;
  };
  groups_.emplace_back(full(one), full(other));
}

namespace {
// Registers a scalar or list binding: parse(node, T*) → ok; emit(e, const T&); nums(const T&).
template <class T, class Parse, class Emit, class Nums>
FieldRef bind(Field& f, T* v, const char* expected, Parse parse, Emit emit, Nums nums) {
  f.assign = [v, expected, parse, path = f.path](const YAML::Node& n, Source& src) {
    T tmp{};
    // 1: parsed; 0: wrong type (reported here); -1: list elements already reported.
    const int r = static_cast<int>(parse(n, &tmp, &src, path));
    if (r == 0)
      src.error(n, path, std::string("expected ") + expected + ", got " + describe_node(n));
    else if (r == 1)
      *v = std::move(tmp);
  };
  f.reset = [v, initial = *v] { *v = initial; };
  f.emit = [v, emit](YAML::Emitter& e) { emit(e, *v); };
  f.numbers = [v, nums] { return nums(*v); };
  YAML::Emitter e;
  e << YAML::Flow;
  f.emit(e);
  f.default_text = e.c_str();
  return FieldRef(f);
}

template <class T, class ParseOne>
auto list_parser(ParseOne one) {
  return [one](const YAML::Node& n, std::vector<T>* out, Source* src, const std::string& path) {
    if (!n.IsSequence()) return 0;
    bool ok = true;
    for (size_t i = 0; i < n.size(); ++i) {
      T x{};
      if (one(n[i], &x)) {
        out->push_back(std::move(x));
      } else {
        src->error(n[i], path + "[" + std::to_string(i) + "]",
                   "expected " + std::string(std::is_same_v<T, double> ? "a number" : "a string") +
                       ", got " + describe_node(n[i]));
        ok = false;
      }
    }
    return ok ? 1 : -1;
  };
}

auto no_numbers = [](const auto&) { return std::vector<double>{}; };
}  // namespace

FieldRef Schema::add(std::string_view name, bool* v, std::string doc) {
  return bind(
      add_field(name, "bool", std::move(doc)), v, "true or false",
      [](const YAML::Node& n, bool* o, Source*, const std::string&) {
        return detail::parse_bool(n, o);
      },
      [](YAML::Emitter& e, bool x) { e << (x ? "true" : "false"); }, no_numbers);
}

FieldRef Schema::add(std::string_view name, int64_t* v, std::string doc) {
  return bind(
      add_field(name, "int", std::move(doc)), v, "an integer",
      [](const YAML::Node& n, int64_t* o, Source*, const std::string&) {
        return detail::parse_int(n, o);
      },
      [](YAML::Emitter& e, int64_t x) { e << x; },
      [](int64_t x) { return std::vector<double>{static_cast<double>(x)}; });
}

FieldRef Schema::add(std::string_view name, double* v, std::string doc) {
  return bind(
      add_field(name, "float", std::move(doc)), v, "a number",
      [](const YAML::Node& n, double* o, Source*, const std::string&) {
        return detail::parse_float(n, o);
      },
      [](YAML::Emitter& e, double x) { e << format_number(x); },
      [](double x) { return std::vector<double>{x}; });
}

FieldRef Schema::add(std::string_view name, std::string* v, std::string doc) {
  return bind(
      add_field(name, "string", std::move(doc)), v, "a string",
      [](const YAML::Node& n, std::string* o, Source*, const std::string&) {
        return detail::parse_string(n, o);
      },
      [](YAML::Emitter& e, const std::string& x) { detail::emit_string(e, x); }, no_numbers);
}

FieldRef Schema::add(std::string_view name, std::optional<double>* v, std::string doc) {
  return bind(
      add_field(name, "float?", std::move(doc)), v, "a number or null",
      [](const YAML::Node& n, std::optional<double>* o, Source*, const std::string&) {
        if (n.IsNull()) return o->reset(), true;
        double d;
        if (!detail::parse_float(n, &d)) return false;
        return *o = d, true;
      },
      [](YAML::Emitter& e, const std::optional<double>& x) {
        if (x)
          e << format_number(*x);
        else
          e << YAML::Null;
      },
      [](const std::optional<double>& x) {
        return x ? std::vector<double>{*x} : std::vector<double>{};
      });
}

FieldRef Schema::add(std::string_view name, std::vector<double>* v, std::string doc) {
  return bind(
      add_field(name, "[float]", std::move(doc)), v, "a list of numbers",
      list_parser<double>(detail::parse_float),
      [](YAML::Emitter& e, const std::vector<double>& x) {
        e << YAML::Flow << YAML::BeginSeq;
        for (double d : x) e << format_number(d);
        e << YAML::EndSeq;
      },
      [](const std::vector<double>& x) { return x; });
}

FieldRef Schema::add(std::string_view name, std::vector<std::string>* v, std::string doc) {
  return bind(
      add_field(name, "[string]", std::move(doc)), v, "a list of strings",
      list_parser<std::string>(detail::parse_string),
      [](YAML::Emitter& e, const std::vector<std::string>& x) {
        e << YAML::Flow << YAML::BeginSeq;
        for (const auto& s : x) detail::emit_string(e, s);
        e << YAML::EndSeq;
      },
      no_numbers);
}

FieldRef Schema::add_enum(std::string_view name, std::string doc, EnumBinding binding) {
  auto b = std::make_shared<EnumBinding>(std::move(binding));
  std::string joined;
  for (const auto& n : b->names) joined += (joined.empty() ? "" : "|") + n;
  Field& f = add_field(name, joined, std::move(doc));
  f.enumerated = true;
  const auto spelling = [b] {
    const int i = b->index();
    return i < 0 ? std::string() : b->names[static_cast<size_t>(i)];
  };
  // The text last given. A spelling outside the table is reported by validate, with the config's
  // other value errors and after every --set (which may still correct a file's value).
  auto given = std::make_shared<std::string>(spelling());
  f.assign = [b, given, path = f.path](const YAML::Node& n, Source& src) {
    if (!detail::parse_string(n, given.get())) {
      src.error(n, path, "expected a string, got " + describe_node(n));
      return;
    }
    if (given->empty() && b->optional) return b->store(-1);
    for (size_t i = 0; i < b->names.size(); ++i)
      if (b->names[i] == *given) return b->store(static_cast<int>(i));
  };
  f.reset = [b, given, index = b->index(), text = *given] {
    b->store(index);
    *given = text;
  };
  f.emit = [spelling](YAML::Emitter& e) { detail::emit_string(e, spelling()); };
  f.numbers = [] { return std::vector<double>{}; };
  f.checks.push_back([b, given, joined] {
    if (given->empty() && b->optional) return std::string();
    for (const auto& n : b->names)
      if (n == *given) return std::string();
    return "must be one of " + joined + ", got '" + *given + "'";
  });
  YAML::Emitter e;
  f.emit(e);
  f.default_text = e.c_str();
  return FieldRef(f);
}

void Schema::bind_list(Field& f, std::function<void(size_t)> resize,
                       std::function<void(size_t, Schema&)> describe_item,
                       std::function<size_t()> size, std::function<void()> restore) {
  Field* fp = &f;
  // Element schemas exist only for loaded elements: one per current element.
  const auto describe_items = [fp, describe_item](size_t n) {
    fp->items.clear();
    for (size_t i = 0; i < n; ++i) {
      auto s = std::make_unique<Schema>(fp->path + "[" + std::to_string(i) + "]");
      describe_item(i, *s);
      fp->items.push_back(std::move(s));
    }
  };
  f.assign = [fp, resize, describe_items](const YAML::Node& n, Source& src) {
    if (!n.IsSequence()) {
      src.error(n, fp->path, "expected a list of mappings, got " + describe_node(n));
      return;
    }
    resize(n.size());
    describe_items(n.size());
    for (size_t i = 0; i < n.size(); ++i) fp->items[i]->apply(n[i], src);
  };
  f.reset = [restore, describe_items, size] {
    restore();
    describe_items(size());
  };
  f.emit = [fp](YAML::Emitter& e) {
    e << YAML::BeginSeq;
    for (const auto& s : fp->items) {
      e << YAML::BeginMap;
      s->emit(e);
      e << YAML::EndMap;
    }
    e << YAML::EndSeq;
  };
  f.numbers = [] { return std::vector<double>{}; };
  describe_items(size());  // the defaults
  f.default_text = size() == 0 ? "[]" : "[...]";
}

namespace {
FieldRef& bound(FieldRef& r, Field& f, std::function<bool(double)> ok, std::string rule) {
  f.checks.push_back([&f, ok, rule] {
    for (double x : f.numbers())
      if (!ok(x)) return "must be " + rule + ", got " + format_number(x);
    return std::string();
  });
  return r;
}
}  // namespace

FieldRef& FieldRef::min(double lo) {
  return bound(
      *this, f_, [lo](double x) { return x >= lo; }, ">= " + format_number(lo));
}
FieldRef& FieldRef::above(double lo) {
  return bound(
      *this, f_, [lo](double x) { return x > lo; }, "> " + format_number(lo));
}
FieldRef& FieldRef::max(double hi) {
  return bound(
      *this, f_, [hi](double x) { return x <= hi; }, "<= " + format_number(hi));
}
FieldRef& FieldRef::below(double hi) {
  return bound(
      *this, f_, [hi](double x) { return x < hi; }, "< " + format_number(hi));
}

FieldRef& FieldRef::choices(std::vector<std::string> allowed) {
  std::string joined;
  for (const auto& a : allowed) joined += (joined.empty() ? "" : "|") + a;
  f_.type = joined;
  // An empty default means "unset" (e.g. model.arch when model.path is given).
  const bool empty_ok = f_.default_text == "\"\"";
  Field* f = &f_;
  f_.checks.push_back([f, allowed, joined, empty_ok] {
    YAML::Emitter e;
    f->emit(e);
    YAML::Node n = YAML::Load(e.c_str());
    const std::string v = n.IsScalar() ? n.Scalar() : "";
    if (v.empty() && empty_ok) return std::string();
    for (const auto& a : allowed)
      if (v == a) return std::string();
    return "must be one of " + joined + ", got '" + v + "'";
  });
  return *this;
}

FieldRef& FieldRef::size(size_t n) {
  Field* f = &f_;
  f_.checks.push_back([f, n] {
    const size_t got = f->numbers().size();
    if (got == n) return std::string();
    return "must have " + std::to_string(n) + " elements, got " + std::to_string(got);
  });
  return *this;
}

FieldRef& FieldRef::non_empty() {
  Field* f = &f_;
  f_.checks.push_back([f] {
    YAML::Emitter e;
    e << YAML::Flow;
    f->emit(e);
    const std::string t = e.c_str();
    return (t == "\"\"" || t == "[]") ? std::string("must not be empty") : std::string();
  });
  return *this;
}

FieldRef& FieldRef::check(std::function<std::string()> fn) {
  f_.checks.push_back(std::move(fn));
  return *this;
}

}  // namespace hp::train
