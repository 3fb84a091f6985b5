// The parsed form of a chat template (jinja.h), shared by the parser (jinja_parse.cpp) and the
// renderer (jinja_render.cpp). Internal to hp::data.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hp/data/jinja.h"

namespace hp::data::jinja::detail {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,   // value
    name,      // name
    list,      // args
    dict,      // args: key, value, key, value, ...
    attr,      // args[0].name
    item,      // args[0][args[1]]
    slice,     // args[0][args[1]:args[2]:args[3]] (null = omitted)
    call,      // args[0](args[1..], kwargs)
    filter,    // args[0] | name(args[1..], kwargs)
    test,      // args[0] is [not] name(args[1..])
    not_,      // not args[0]
    neg,       // -args[0]
    binary,    // args[0] name args[1]: + - * / // % ~ **
    compare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    and_,
    or_,
    cond,      // args[0] if args[1] else args[2] (args[2] null = undefined)
  };
  Kind kind = Kind::literal;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { text, output, for_, if_, set, set_block, generation, break_, continue_ };
  Kind kind = Kind::text;
  int line = 0;
  std::string text;                    // text
  ExprPtr expr;                        // output, set, for (iterable)
  ExprPtr cond;                        // for: the `if` filter
  std::vector<std::string> targets;    // for: loop variables; set: name [, attribute]
  Body body, else_body;                // for, set_block, generation; if: else
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif
};

struct Program {
  std::string name;
  Body body;
  bool has_generation = false;
};

// A tag or a run of text of the template (jinja_lex.cpp).
struct Piece {
  enum class Kind { text, var, block, comment } kind = Kind::text;
  std::string src;  // text, or the tag's inside without its delimiters and `-` / `+`
  int line = 1;
  size_t begin = 0;  // text: where it starts in the template
  bool strip_before = false, keep_before = false, strip_after = false;
};

// A token of a tag's expression; strings hold their unescaped value.
struct Token {
  enum class Kind { name, string, integer, number, op, end } kind = Kind::end;
  std::string text;
};

// The template as text and tags, whitespace control applied; ValueError naming `name` and the
// line of an unclosed tag.
std::vector<Piece> lex(std::string_view source, const std::string& name);
// A tag's tokens, ending with Kind::end; ValueError("[chat] NAME:LINE: ...") for a stray
// character or an unterminated string.
std::vector<Token> tokenize(const std::string& src, int line, const std::string& name);

// Parses a whole template (jinja_parse.cpp).
Program parse(std::string_view source, std::string name);

// An evaluation error; the renderer adds the template name and line.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Kwargs = std::vector<std::pair<std::string, Value>>;
// Built-ins (jinja_builtins.cpp). EvalError for an unknown name or bad arguments.
Value apply_filter(const std::string& name, const Value& v, const std::vector<Value>& args,
                   const Kwargs& kwargs);
bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args);
Value call_method(const Value& obj, const std::string& name, const std::vector<Value>& args);
// Python's len(); EvalError for values without one.
int64_t length(const Value& v);
// s[start:stop:step] with Python's rules, on code points for strings.
Value slice(const Value& v, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step);
// v[key]: dict member, list/string index (negative from the end); undefined when absent.
Value subscript(const Value& v, const Value& key);
// The elements a for loop visits: list elements, dict keys, string characters.
List iterate(const Value& v);

}  // namespace hp::data::jinja::detail
