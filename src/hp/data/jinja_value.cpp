// Values of the chat template engine (jinja.h) behaving as the Python objects jinja2 renders:
// truthiness, str()/repr(), ==, json.dumps, len, subscripts and slices (strings by code point).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "hp/data/jinja_ast.h"

namespace hp::data::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  if (Value* old = find(key)) *old = std::move(v);
  else items.emplace_back(key, std::move(v));
}

Value Value::make_list(List v) {
  Value x = with(Kind::list);
  x.list = std::make_shared<List>(std::move(v));
  return x;
}

Value Value::make_dict(Dict v) {
  Value x = with(Kind::dict);
  x.dict = std::make_shared<Dict>(std::move(v));
  return x;
}

const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "undefined";
    case Value::Kind::none: return "none";
    case Value::Kind::boolean: return "bool";
    case Value::Kind::integer: return "int";
    case Value::Kind::number: return "float";
    case Value::Kind::string: return "str";
    case Value::Kind::list: return "list";
    case Value::Kind::dict: return v.dict->is_namespace ? "namespace" : "dict";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: return false;
    case Value::Kind::boolean: return v.b;
    case Value::Kind::integer: return v.i != 0;
    case Value::Kind::number: return v.d != 0;
    case Value::Kind::string: return !v.s.empty();
    case Value::Kind::list: return !v.list->empty();
    case Value::Kind::dict: return v.dict->is_namespace || !v.dict->items.empty();
  }
  return false;
}

namespace {

// Python's repr(float): the shortest form that reads back, with ".0" on integral values.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string py_repr_string(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out + q;
}

std::string repr(const Value& v) {
  return v.kind == Value::Kind::string ? py_repr_string(v.s) : to_str(v);
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json(const Value& v, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind) {
    case Value::Kind::undefined:
      throw detail::EvalError("tojson of an undefined value");
    case Value::Kind::none: out += "null"; return;
    case Value::Kind::boolean: out += v.b ? "true" : "false"; return;
    case Value::Kind::integer: out += std::to_string(v.i); return;
    case Value::Kind::number: {
      const std::string f = float_repr(v.d);
      out += f == "nan" ? "NaN" : f == "inf" ? "Infinity" : f == "-inf" ? "-Infinity" : f;
      return;
    }
    case Value::Kind::string: json_string(v.s, out); return;
    case Value::Kind::list: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json((*v.list)[i], indent, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < v.dict->items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(v.dict->items[i].first, out);
        out += ": ";
        json(v.dict->items[i].second, indent, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
  }
}

// Byte offsets of each code point of UTF-8 `s`, plus s.size().
std::vector<size_t> code_points(const std::string& s) {
  std::vector<size_t> at;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) at.push_back(i);
  at.push_back(s.size());
  return at;
}

// Python's slice.indices: clamps start and stop into range for the step's direction.
int64_t clamp_index(std::optional<int64_t> x, int64_t n, int64_t step, bool is_start) {
  if (!x) return step > 0 ? (is_start ? 0 : n) : (is_start ? n - 1 : -1);
  int64_t i = *x < 0 ? *x + n : *x;
  if (step > 0) return std::clamp<int64_t>(i, 0, n);
  return std::clamp<int64_t>(i, -1, n - 1);
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "";
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return v.b ? "True" : "False";
    case Value::Kind::integer: return std::to_string(v.i);
    case Value::Kind::number: return float_repr(v.d);
    case Value::Kind::string: return v.s;
    case Value::Kind::list: {
      std::string out = "[";
      for (size_t i = 0; i < v.list->size(); ++i) out += (i ? ", " : "") + repr((*v.list)[i]);
      return out + "]";
    }
    case Value::Kind::dict: {
      if (v.dict->is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t i = 0; i < v.dict->items.size(); ++i)
        out += (i ? ", " : "") + py_repr_string(v.dict->items[i].first) + ": " +
               repr(v.dict->items[i].second);
      return out + "}";
    }
  }
  return "";
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  const bool an = a.kind == K::boolean || a.kind == K::integer || a.kind == K::number;
  const bool bn = b.kind == K::boolean || b.kind == K::integer || b.kind == K::number;
  if (an && bn) {
    auto num = [](const Value& x) {
      return x.kind == K::number ? x.d : x.kind == K::integer ? double(x.i) : double(x.b);
    };
    return num(a) == num(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::undefined:
    case K::none: return true;
    case K::string: return a.s == b.s;
    case K::list:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case K::dict:
      if (a.dict == b.dict) return true;
      if (a.dict->is_namespace || b.dict->is_namespace) return false;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    default: return false;
  }
}

std::string to_json(const Value& v, int indent) {
  std::string out;
  json(v, indent, 0, out);
  return out;
}

namespace detail {

int64_t length(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return 0;
    case Value::Kind::string: return static_cast<int64_t>(code_points(v.s).size()) - 1;
    case Value::Kind::list: return static_cast<int64_t>(v.list->size());
    case Value::Kind::dict: return static_cast<int64_t>(v.dict->items.size());
    default: throw EvalError(std::string("object of type '") + kind_name(v) + "' has no len()");
  }
}

Value slice(const Value& v, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) throw EvalError("slice step cannot be zero");
  if (v.kind != Value::Kind::string && v.kind != Value::Kind::list)
    throw EvalError(std::string("cannot slice a ") + kind_name(v));
  const int64_t n = length(v);
  const int64_t b = clamp_index(start, n, st, true), e = clamp_index(stop, n, st, false);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  if (v.kind == Value::Kind::list) {
    List out;
    for (int64_t i : idx) out.push_back((*v.list)[static_cast<size_t>(i)]);
    return Value::make_list(std::move(out));
  }
  const std::vector<size_t> cp = code_points(v.s);
  std::string out;
  for (int64_t i : idx) {
    const size_t k = static_cast<size_t>(i);
    out.append(v.s, cp[k], cp[k + 1] - cp[k]);
  }
  return Value::string(std::move(out));
}

Value subscript(const Value& v, const Value& key) {
  if (v.kind == Value::Kind::dict) {
    if (key.kind != Value::Kind::string) return Value();
    const Value* m = v.dict->find(key.s);
    return m ? *m : Value();
  }
  if ((v.kind == Value::Kind::list || v.kind == Value::Kind::string) &&
      key.kind == Value::Kind::integer) {
    const int64_t n = length(v);
    const int64_t i = key.i < 0 ? key.i + n : key.i;
    if (i < 0 || i >= n) return Value();
    if (v.kind == Value::Kind::list) return (*v.list)[static_cast<size_t>(i)];
    return slice(v, i, i + 1, 1);
  }
  if (v.kind == Value::Kind::undefined)
    throw EvalError("'" + to_str(key) + "' of an undefined value");
  return Value();
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return {};
    case Value::Kind::list: return *v.list;
    case Value::Kind::dict: {
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::string: {
      List chars;
      const std::vector<size_t> cp = code_points(v.s);
      for (size_t k = 0; k + 1 < cp.size(); ++k)
        chars.push_back(Value::string(v.s.substr(cp[k], cp[k + 1] - cp[k])));
      return chars;
    }
    default: throw EvalError(std::string("'") + kind_name(v) + "' object is not iterable");
  }
}

}  // namespace detail

}  // namespace hp::data::jinja
