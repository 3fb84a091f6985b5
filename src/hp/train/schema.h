// The config schema: one registration mechanism for every config field (docs/ARCHITECTURE.md §3
// "Config").
//
// Each section struct binds its members with a one-line doc in `describe(Schema&)`:
//   s.add("steps", &steps, "number of optimizer steps").min(1);
// The schema then does everything by field, never by hand: YAML loading with type checks, unknown
// keys with a did-you-mean, --set overrides, range validation, writing the resolved YAML and
// printing `hp config schema`. Every value remembers where it was set ("run.yaml:12" or
// "--set training.steps=10") so errors name it. A renamed key stays readable as a deprecated alias:
//   s.deprecated_alias("param_dtype", "training.mixed_precision");
// sets the field at the full path given, the config notes "[config] <alias> is deprecated: use
// <target>", and setting both is an error. Keys that are alternatives to each other form an
// exclusive group of two sides:
//   s.exclusive({"path"}, {"arch", "hidden", ...});
// a file giving both sides is the section's own error (check_consistency), but a --set of a member
// of one side replaces the choice: it resets the file's values of the other side to their
// defaults, with a note naming them. A deprecated alias is the group {alias} vs {target}, so a
// --set of either replaces the file's other spelling. `--set key=null` resets any key to its
// default, as if never given. An enum member binds the same way, read and written as
// the spellings of its enum_names table (enum_names.h). A Schema points into the config it was
// built on, so that config must outlive it and not move.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hp/core/enum_names.h"

namespace YAML {
class Node;
class Emitter;
}  // namespace YAML

namespace hp::train {

class Schema;

// One origin of values (a YAML file or one --set flag) and the errors collected while reading it.
class Source {
 public:
  // name: the file path (marks give line numbers) or "--set k=v" (no line numbers).
  Source(std::string name, bool has_lines, std::vector<std::string>* errors)
      : name_(std::move(name)), has_lines_(has_lines), errors_(errors) {}
  // "run.yaml:12" for a node of a file, the flag itself for --set.
  std::string where(const YAML::Node& at) const;
  const std::string& name() const { return name_; }
  // Records "[config] <where>: <path>: <what>".
  void error(const YAML::Node& at, std::string_view path, std::string_view what);

 private:
  std::string name_;
  bool has_lines_;
  std::vector<std::string>* errors_;
};

struct Field {
  std::string path;             // "training.steps"; list items: "optimizer.groups[0].lr"
  std::string type;             // "int", "float", "bool", "string", "[float]", "a|b", "float?", ...
  std::string doc;              // one line
  std::string default_text;     // the default as YAML flow text
  std::string origin;           // where the value was last set; "" = default
  bool origin_is_flag = false;  // origin is a --set flag (not a file)
  // A deprecated alias: the full path of the field it sets ("" = a field of its own). An alias
  // has no value, checks or assign of its own; its origin says where it was used.
  std::string alias_of;
  // Parses and stores a YAML value, reporting type errors to `src`.
  std::function<void(const YAML::Node&, Source&)> assign;
  // Restores the default value (an alias has none).
  std::function<void()> reset;
  // Writes the value (flow style for lists).
  std::function<void(YAML::Emitter&)> emit;
  // Numeric values that min/max/range apply to (elementwise for lists, none for null).
  std::function<std::vector<double>()> numbers;
  // Value checks: each returns "" when fine, else what is wrong ("must be >= 1, got 0").
  std::vector<std::function<std::string()>> checks;
  // List-of-sections fields: one schema per element, and an empty element's schema for docs.
  std::vector<std::unique_ptr<Schema>> items;
  std::function<std::unique_ptr<Schema>()> item_template;
  // A word field (Schema::add of an enum): a spelling outside its table leaves the default.
  bool enumerated = false;
};

// An enum field with its type erased: Schema::add of an enum member builds it from the enum's
// table.
struct EnumBinding {
  std::vector<std::string> names;  // the spellings, in table order
  std::function<int()> index;      // the current value's position in names; -1: unset
  std::function<void(int)> store;  // sets the value at that position; -1: unset
  bool optional = false;           // a std::optional<E>: "" (its default) leaves it unset
};

// Chained validators on the field just added.
class FieldRef {
 public:
  explicit FieldRef(Field& f) : f_(f) {}
  FieldRef& min(double lo);                             // value >= lo
  FieldRef& above(double lo);                           // value > lo
  FieldRef& max(double hi);                             // value <= hi
  FieldRef& below(double hi);                           // value < hi
  FieldRef& choices(std::vector<std::string> allowed);  // string fields; "" allowed if default
  FieldRef& size(size_t n);                             // list fields: exactly n elements
  FieldRef& non_empty();                                // strings and lists
  FieldRef& check(std::function<std::string()> fn);
  Field& field() { return f_; }

 private:
  Field& f_;
};

class Schema {
 public:
  // prefix: "" for the root, "optimizer.groups[0]" for a list element.
  explicit Schema(std::string prefix = "") : prefix_(std::move(prefix)) {}

  FieldRef add(std::string_view name, bool* v, std::string doc);
  FieldRef add(std::string_view name, int64_t* v, std::string doc);
  FieldRef add(std::string_view name, double* v, std::string doc);
  FieldRef add(std::string_view name, std::string* v, std::string doc);
  FieldRef add(std::string_view name, std::optional<double>* v, std::string doc);
  FieldRef add(std::string_view name, std::vector<double>* v, std::string doc);
  FieldRef add(std::string_view name, std::vector<std::string>* v, std::string doc);
  // An enum member, type "a|b|c" from its table. A spelling outside the table sets nothing and is
  // kept as given until validate reports it ("must be one of a|b|c, got 'd'").
  template <Enum E>
  FieldRef add(std::string_view name, E* v, std::string doc) {
    return add_enum(name, std::move(doc),
                    {spellings<E>(), [v] { return static_cast<int>(enum_index(*v)); },
                     [v](int i) { *v = enum_names(E{})[static_cast<size_t>(i)].value; }, false});
  }
  // An optional enum member: "" (the default) leaves it unset, meaning another key's value.
  template <Enum E>
  FieldRef add(std::string_view name, std::optional<E>* v, std::string doc) {
    return add_enum(name, std::move(doc),
                    {spellings<E>(), [v] { return *v ? static_cast<int>(enum_index(**v)) : -1; },
                     [v](int i) {
                       if (i < 0)
                         v->reset();
                       else
                         *v = enum_names(E{})[static_cast<size_t>(i)].value;
                     },
                     true});
  }

  // `name` (under the current section) as a deprecated spelling of the field at `target` (its
  // full path in this schema): a value given under it sets `target`.
  void deprecated_alias(std::string_view name, std::string target);
  // Keys of the current section that are alternatives to each other (see the top of this file).
  void exclusive(const std::vector<std::string>& one, const std::vector<std::string>& other);

  // Fields of `obj` (obj.describe(*this)) under "<prefix>.<name>".
  template <class T>
  void section(std::string_view name, T& obj) {
    scope_.emplace_back(name);
    obj.describe(*this);
    scope_.pop_back();
  }
  // A list of sections (e.g. optimizer.groups): a YAML sequence of mappings, each element
  // described by T::describe.
  template <class T>
  FieldRef add_list(std::string_view name, std::vector<T>* v, std::string doc) {
    Field& f = add_field(name, "[{...}]", std::move(doc));
    const std::string path = f.path;
    f.item_template = [path] {
      auto s = std::make_unique<Schema>(path + "[]");
      auto obj = std::make_shared<T>();
      s->keep_alive_ = obj;
      obj->describe(*s);
      return s;
    };
    bind_list(
        f, [v](size_t n) { v->assign(n, T{}); }, [v](size_t i, Schema& s) { (*v)[i].describe(s); },
        [v] { return v->size(); }, [v, initial = *v] { *v = initial; });
    return FieldRef(f);
  }

  const std::vector<std::unique_ptr<Field>>& fields() const { return fields_; }
  Field* find(std::string_view path);
  const std::string& prefix() const { return prefix_; }

  // Applies a YAML mapping (the root of a file, or one list element) field by field; unknown
  // keys, duplicates and type errors go to src.
  void apply(const YAML::Node& map, Source& src);
  // Applies one "path=value" override (value parsed as YAML flow text; null: the default).
  void apply_override(const std::string& assignment, std::vector<std::string>* errors);
  // Runs every field's checks, recording "[config] <origin>: <path>: <what>" (a value given
  // through an alias is reported at the alias), and rejects an alias set together with its target.
  // Returns whether a word field's spelling was rejected (that field still holds its default).
  bool validate(const std::string& default_origin, std::vector<std::string>* errors) const;
  // Whether the field at `path` was given (a file, an alias or --set), not left at its default.
  bool given(std::string_view path) const;
  // "[config] <alias> is deprecated: use <target>" for each alias that was set, in schema order.
  std::vector<std::string> deprecations() const;
  // "[config] --set k=v replaces <key> (<origin>), ..." for each override that dropped the file's
  // values of an exclusive group's other side.
  const std::vector<std::string>& replacements() const { return replacements_; }
  // Whether the field at `path` holds a value other than its default.
  bool differs_from_default(std::string_view path) const;
  // Writes the current values as nested YAML mappings (the body of the enclosing map).
  void emit(YAML::Emitter& out) const;
  // One line per field: path, type, default, doc (list elements as "groups[].lr").
  std::string describe_text() const;
  // Every field and section path, for did-you-mean.
  std::vector<std::string> known_paths() const;

 private:
  Field& add_field(std::string_view name, std::string type, std::string doc);
  FieldRef add_enum(std::string_view name, std::string doc, EnumBinding binding);
  template <class E>
  static std::vector<std::string> spellings() {
    std::vector<std::string> out;
    for (const EnumName<E>& n : enum_names(E{})) out.emplace_back(n.name);
    return out;
  }
  const Field* field(std::string_view path) const;
  // The field a value given at `f` goes to: f itself, or an alias's target (null: unknown).
  Field* target_of(Field* f);
  void bind_list(Field& f, std::function<void(size_t)> resize,
                 std::function<void(size_t, Schema&)> describe_item, std::function<size_t()> size,
                 std::function<void()> restore);
  // Resets `f` (a field or an alias) when a file gave it; returns its origin then, else "".
  std::string drop_file_value(Field& f);
  // Drops the file's values of the groups' other sides of `set` (the key a --set names).
  void replace_other_sides(const Field& set, const std::string& flag);
  void apply_map(const YAML::Node& map, const std::string& prefix, Source& src);
  void collect_lines(std::vector<std::vector<std::string>>& rows) const;

  std::string prefix_;
  std::vector<std::string> scope_;
  std::vector<std::unique_ptr<Field>> fields_;
  // Exclusive groups: two sides of full paths each.
  std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> groups_;
  std::vector<std::string> replacements_;
  std::shared_ptr<void> keep_alive_;  // the element an item_template schema points into
};

// Damerau–Levenshtein (optimal string alignment) distance, for did-you-mean.
size_t edit_distance(std::string_view a, std::string_view b);
// The closest of `candidates` to `wrong` (by edit distance, then same last component), or "".
std::string did_you_mean(std::string_view wrong, const std::vector<std::string>& candidates);

}  // namespace hp::train
