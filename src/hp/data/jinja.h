// A Jinja2 subset for Hugging Face chat templates (tokenizer_config.json `chat_template`), rendered
// as transformers' apply_chat_template renders them: jinja2 with trim_blocks and lstrip_blocks,
// the loopcontrols extension, HF's `{% generation %}` tag, `raise_exception` and a `tojson` that
// keeps key order (json.dumps, ensure_ascii=False). Enough for the templates of Llama-3, Qwen2,
// Qwen3, DeepSeek-V3 and Mistral (tests/data/fixtures/chat: rendered by jinja2 itself,
// tools/make_chat_fixtures.py).
//
// Supported: text, {{ }}, {% %}, {# #} with `-` / `+` whitespace control; for (tuple targets,
// `if` filter, else, loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem,
// break, continue), if/elif/else, set (names, namespace attributes, `{% set x %}...{% endset %}`),
// generation; expressions with Python's literals, lists, dicts, subscripts and slices, attribute
// and method calls on strings (strip/lstrip/rstrip/split/startswith/endswith/upper/lower/replace/
// title/capitalize), dicts (items/keys/values/get), `a if c else b`, or/and/not, comparisons and
// `in`, + - * / // % and ~; filters trim length count list string lower upper capitalize title
// join first last default(d) tojson items selectattr rejectattr map(attribute=) int float abs
// replace safe; tests defined undefined none string number integer float boolean true false
// mapping iterable sequence equalto eq ne sameas odd even in. Anything else (macros, call,
// include, ...) is a ValueError at parse time naming the template, line and construct, never a
// silently different rendering.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hp::data::jinja {

struct Value;
using List = std::vector<Value>;
// Insertion-ordered, as a Python dict (tojson and items() keep the order).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

struct Value {
  enum class Kind { undefined, none, boolean, integer, number, string, list, dict };
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  std::shared_ptr<List> list;  // shared: a message keeps its identity through slices and filters
  std::shared_ptr<Dict> dict;

  static Value none() { return with(Kind::none); }
  static Value boolean(bool v) { Value x = with(Kind::boolean); x.b = v; return x; }
  static Value integer(int64_t v) { Value x = with(Kind::integer); x.i = v; return x; }
  static Value number(double v) { Value x = with(Kind::number); x.d = v; return x; }
  static Value string(std::string v) { Value x = with(Kind::string); x.s = std::move(v); return x; }
  static Value make_list(List v = {});
  static Value make_dict(Dict v = {});
  bool defined() const { return kind != Kind::undefined; }

 private:
  static Value with(Kind k) { Value x; x.kind = k; return x; }
};

// Python's truthiness, str() (as {{ }} prints: None, True, 1.5, ['a'], {'k': 1}; undefined is ""),
// == (deep), and json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: one line).
bool truthy(const Value& v);
std::string to_str(const Value& v);
bool equal(const Value& a, const Value& b);
std::string to_json(const Value& v, int indent = -1);
const char* kind_name(const Value& v);

// Output of one render: the text, and the ranges [begin, end) of it written inside
// `{% generation %}` blocks and while a `for` loop's target was message i of `track` (the last
// non-empty such range per message; {0, 0} when none).
struct RenderResult {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation;
  std::vector<std::pair<size_t, size_t>> tracked;
};

class Template {
 public:
  // Parses `source`; ValueError("[chat] NAME:LINE: ...") for a syntax error or an unsupported
  // construct. `name` names the template in every error.
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context` (its items are the template's globals; raise_exception, namespace and
  // range are built in). `track`: a list whose dict elements' identities are followed (see
  // RenderResult). ValueError("[chat] NAME: ...") for a raise_exception (with its message) or an
  // evaluation error (undefined attribute of undefined, '+' on mixed types, ...).
  RenderResult render(const Dict& context, const Value& track = Value()) const;
  bool has_generation_blocks() const;
  const std::string& name() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hp::data::jinja
