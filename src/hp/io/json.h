// JSON, the one API for it in hp: reading files (config.json, tokenizer.json, metadata.json, ...)
// with errors that name the file, the key path and the position, and building the documents hp
// writes (checkpoint metadata, HF config.json, safetensors headers, metrics lines, bench results).
//
//   JsonValue  an owning, mutable value: build a document, then dump() it.
//   Json       a read-only view of one node of a parsed document (it keeps the document alive),
//              whose typed accessors throw IoError "[json] <file>: <key path>: <what>".
//
// nlohmann::json is the engine, inside json.cpp only: its parser, and its serializer, so every
// file hp writes keeps nlohmann's bytes (number formatting, escapes, indentation) — checkpoint
// metadata.json carries a CRC over them. This header does not include it.
//
// parse_json, read_json_file and parse_json_value are strict: invalid UTF-8, trailing garbage and
// duplicate object keys are errors ("[json] <file>: <what> at line L col C"). try_parse_json is
// the lenient parse for data lines (JSONL records, caches), which a reader may skip.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace hp::io {

namespace detail {
struct JsonDocument;
struct JsonIndex;
struct JsonBuilder;

// A sequence a JsonValue takes as an array (std::vector<int64_t>, Shape, std::array, ...); not a
// string, which is a sequence of chars.
template <class R, class Value>
concept JsonSequence = requires(const R& r) {
  std::begin(r);
  std::end(r);
}
&&!std::is_convertible_v<const R&, std::string_view> && !std::is_same_v<R, Value>;
}  // namespace detail

// The order dump() writes object members in: as inserted, or sorted by key (nlohmann::json's
// order, which the checksum of metadata.json and some files' layout are defined by).
enum class KeyOrder { inserted, sorted };

// An owning JSON value. Objects keep their members in insertion order, and setting an existing
// key replaces its value in place; lookups stay O(1) in large objects (a hash index). Numbers
// keep their C++ kind: signed integers, unsigned integers and doubles (a float is widened), which
// nlohmann writes differently ("1" vs "1.0"); a non-finite double is written as null.
class JsonValue {
 public:
  // The variant's alternatives, in order.
  enum class Type : uint8_t {
    null,
    boolean,
    integer,
    unsigned_integer,
    number,
    string,
    array,
    object,
  };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;
  JsonValue(std::nullptr_t) {}
  JsonValue(bool b) : v_(b) {}
  template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) JsonValue(T n) {
    if constexpr (std::is_signed_v<T>)
      v_ = static_cast<int64_t>(n);
    else
      v_ = static_cast<uint64_t>(n);
  }
  JsonValue(double d) : v_(d) {}
  JsonValue(const char* s) : v_(std::string(s)) {}
  JsonValue(std::string s) : v_(std::move(s)) {}
  JsonValue(std::string_view s) : v_(std::string(s)) {}
  // An array of the elements of `seq`, each converted as above.
  template <class R>
  requires detail::JsonSequence<R, JsonValue> JsonValue(const R& seq)
      : v_(std::vector<JsonValue>(std::begin(seq), std::end(seq))) {}
  static JsonValue array(std::initializer_list<JsonValue> elements = {});
  // JsonValue::object({{"dtype", "bf16"}, {"shape", shape}}); a key given twice is a bug
  // (InternalError).
  using MemberInit = std::pair<std::string_view, JsonValue>;
  static JsonValue object(std::initializer_list<MemberInit> members = {});

  // Freed without deep recursion, so a hostile 300k-deep document cannot overflow the stack.
  ~JsonValue();
  JsonValue(const JsonValue&) = default;
  JsonValue(JsonValue&&) noexcept = default;
  JsonValue& operator=(const JsonValue&) = default;
  JsonValue& operator=(JsonValue&&) noexcept = default;

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_null() const { return type() == Type::null; }
  bool is_bool() const { return type() == Type::boolean; }
  // Integer or floating-point.
  bool is_number() const;
  bool is_integer() const { return type() == Type::integer || type() == Type::unsigned_integer; }
  bool is_string() const { return type() == Type::string; }
  bool is_array() const { return type() == Type::array; }
  bool is_object() const { return type() == Type::object; }
  // nlohmann's names: "object", "array", "string", "number", "boolean", "null".
  std::string_view type_name() const;
  // Number of members (object) or elements (array); 0 for any other value.
  size_t size() const;

  // Object members. Writing to a null value makes it an empty object first (`JsonValue j;
  // j["step"] = 1;`); on any other non-object the writers throw InternalError. As with a vector,
  // adding members or elements invalidates references to the others.
  JsonValue& operator[](std::string_view key);  // inserted as null when absent
  const JsonValue* find(std::string_view key) const;
  JsonValue* find(std::string_view key);
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Removes member `key`; false when there was none.
  bool erase(std::string_view key);
  // Sets every member of the object `other` here, in its order (nlohmann's update()).
  void update(const JsonValue& other);
  // In insertion order; empty for a non-object.
  const std::vector<Member>& members() const;

  // Array elements. push_back on a null value makes it an empty array first.
  void push_back(JsonValue v);
  // Removes element i (InternalError when this is not an array of more than i elements).
  void erase(size_t i);
  JsonValue& operator[](size_t i);
  const JsonValue& operator[](size_t i) const;
  // Empty for a non-array.
  const std::vector<JsonValue>& elements() const;

  // Scalars; a type mismatch is an IoError without a file or path (Json's accessors name them).
  // as_int and as_uint take integral numbers only, range-checked.
  bool as_bool() const;
  int64_t as_int() const;
  uint64_t as_uint() const;
  double as_double() const;
  const std::string& as_string() const;

  // nlohmann's serialization: compact (indent < 0) or `indent` spaces per level, members in
  // `order`. Invalid UTF-8 in a string is an IoError.
  std::string dump(int indent = -1, KeyOrder order = KeyOrder::inserted) const;

 private:
  friend struct detail::JsonBuilder;

  // Members with a hash index once there are many of them.
  struct Object {
    Object();
    ~Object();
    Object(const Object& other);
    Object(Object&& other) noexcept;
    Object& operator=(const Object& other);
    Object& operator=(Object&& other) noexcept;
    // Index of `key` in members, or -1.
    ptrdiff_t position(std::string_view key) const;
    // Appends a member whose key is not present.
    JsonValue& append(std::string key, JsonValue value);
    // After members were reordered or removed.
    void reindex();

    std::vector<Member> members;
    std::unique_ptr<detail::JsonIndex> index;
  };

  Object& object_for_write();
  std::vector<JsonValue>& array_for_write();

  std::variant<std::nullptr_t, bool, int64_t, uint64_t, double, std::string, std::vector<JsonValue>,
               Object>
      v_;
};

// A read-only view of one node of a parsed document; cheap to copy, keeps the document alive.
class Json {
 public:
  // Source file (or name given to parse_json) and the key path of this node ("model.vocab",
  // "added_tokens[3].id"; "" for the root).
  const std::string& file() const;
  const std::string& path() const { return path_; }

  bool is_null() const { return node_->is_null(); }
  bool is_object() const { return node_->is_object(); }
  bool is_array() const { return node_->is_array(); }
  bool is_string() const { return node_->is_string(); }
  bool is_bool() const { return node_->is_bool(); }
  // Integer or floating-point.
  bool is_number() const { return node_->is_number(); }
  bool is_integer() const { return node_->is_integer(); }
  // "object", "array", "string", "number", "boolean", "null".
  std::string_view type_name() const { return node_->type_name(); }

  // Number of members (object) or elements (array); throws on other types.
  size_t size() const;
  bool contains(std::string_view key) const;
  // Member `key`; throws IoError naming the path when this is not an object or the key is missing.
  Json at(std::string_view key) const;
  Json operator[](std::string_view key) const { return at(key); }
  // Member `key`, or nullopt when absent (a present null is returned as a null node).
  std::optional<Json> find(std::string_view key) const;
  // Element i of an array (the int overload lets at(0) resolve without a cast).
  Json at(size_t i) const;
  Json at(int i) const;
  // Members in key order (a parsed document's objects are sorted) / elements in order.
  std::vector<std::pair<std::string, Json>> items() const;
  std::vector<Json> elements() const;

  // Typed access; a type mismatch throws IoError naming file, path, expected and actual type.
  std::string as_string() const;
  bool as_bool() const;
  double as_double() const;
  // Integral JSON numbers only (1.0 and 1e3 are rejected); range-checked.
  int64_t as_int() const;
  uint64_t as_uint() const;
  // An array's elements, each read as above.
  std::vector<int64_t> as_int_list() const;
  std::vector<double> as_double_list() const;

  // Typed member access: missing key → error; `_or` variants return the default when the key is
  // absent or null.
  std::string get_string(std::string_view key) const { return at(key).as_string(); }
  int64_t get_int(std::string_view key) const { return at(key).as_int(); }
  uint64_t get_uint(std::string_view key) const { return at(key).as_uint(); }
  double get_double(std::string_view key) const { return at(key).as_double(); }
  bool get_bool(std::string_view key) const { return at(key).as_bool(); }
  std::string get_string_or(std::string_view key, std::string def) const;
  int64_t get_int_or(std::string_view key, int64_t def) const;
  uint64_t get_uint_or(std::string_view key, uint64_t def) const;
  double get_double_or(std::string_view key, double def) const;
  bool get_bool_or(std::string_view key, bool def) const;

  // Serialization of this node, keys sorted (compact by default).
  std::string dump(int indent = -1) const { return node_->dump(indent); }
  // The node itself: to copy it into a document being built, or to walk a large one (a 100k-entry
  // vocab) without building a path per member.
  const JsonValue& value() const { return *node_; }

  // Throws IoError "[json] <file>: <path>: <what>"; lets callers report semantic errors in the
  // same format as type errors.
  [[noreturn]] void fail(std::string_view what) const;

 private:
  friend struct detail::JsonBuilder;
  Json(std::shared_ptr<const detail::JsonDocument> doc, const JsonValue* node, std::string path)
      : doc_(std::move(doc)), node_(node), path_(std::move(path)) {}
  Json child(std::string_view key, const JsonValue* node) const;
  Json element(size_t i) const;

  std::shared_ptr<const detail::JsonDocument> doc_;
  const JsonValue* node_;
  std::string path_;
};

// Parses `text`; `source` names it in errors (usually the file path). Objects are sorted by key.
Json parse_json(std::string_view text, std::string source);
// Reads and parses a file; a missing or unreadable file is an IoError naming it.
Json read_json_file(const std::string& path);
// Parses `text` into an owning value whose objects keep the document's order (to edit a file
// and write it back, or embed it in another document); errors as parse_json.
JsonValue parse_json_value(std::string_view text, std::string source);
// Lenient parse of data that may be damaged or foreign (a JSONL record, a cache, a tool's output
// line): nullopt when `text` is not JSON, with the parser's reason in *why ("parse error at column
// 3: syntax error while parsing value - ..."; "at line L, column C" past line 1). A repeated key
// keeps its last value, as Python's json.loads does.
std::optional<Json> try_parse_json(std::string_view text, std::string source,
                                   std::string* why = nullptr);
// Reads a whole file into memory; errors name the file and the OS reason.
std::string read_text_file(const std::string& path, std::string_view component);

}  // namespace hp::io
