// Reading JSON files (config.json, tokenizer.json, index files) with errors that name the file,
// the key path and the position.
//
// A thin facade over nlohmann::json: this header only forward-declares nlohmann, so the many files
// that read a config do not pay for parsing json.hpp. Code that walks large documents (a 100k-entry
// vocab) may include <nlohmann/json.hpp> and use raw().
//
// Parsing is strict: invalid UTF-8, trailing garbage and duplicate object keys are errors
// ("[json] <file>: <what> at line L col C").
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hp::io {

namespace detail {
struct JsonDocument;
}

// A read-only view of one node of a parsed document; cheap to copy, keeps the document alive.
class Json {
 public:
  // Source file (or name given to parse_json) and the key path of this node ("model.vocab",
  // "added_tokens[3].id"; "" for the root).
  const std::string& file() const;
  const std::string& path() const { return path_; }

  bool is_null() const;
  bool is_object() const;
  bool is_array() const;
  bool is_string() const;
  bool is_bool() const;
  // Integer or floating-point.
  bool is_number() const;
  bool is_integer() const;
  // "object", "array", "string", "number", "boolean", "null".
  std::string_view type_name() const;

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
  // Members in key order / elements in order.
  std::vector<std::pair<std::string, Json>> items() const;
  std::vector<Json> elements() const;

  // Typed access; a type mismatch throws IoError naming file, path, expected and actual type.
  std::string as_string() const;
  bool as_bool() const;
  double as_double() const;
  // Integral JSON numbers only (1.0 and 1e3 are rejected); range-checked.
  int64_t as_int() const;
  uint64_t as_uint() const;

  // Typed member access: missing key → error; `_or` variants return the default when the key is
  // absent or null.
  std::string get_string(std::string_view key) const { return at(key).as_string(); }
  int64_t get_int(std::string_view key) const { return at(key).as_int(); }
  double get_double(std::string_view key) const { return at(key).as_double(); }
  bool get_bool(std::string_view key) const { return at(key).as_bool(); }
  std::string get_string_or(std::string_view key, std::string def) const;
  int64_t get_int_or(std::string_view key, int64_t def) const;
  double get_double_or(std::string_view key, double def) const;
  bool get_bool_or(std::string_view key, bool def) const;

  // Compact serialization of this node (for messages and tests).
  std::string dump() const;

  // The underlying node, for io/ code that includes json.hpp.
  const nlohmann::json& raw() const { return *node_; }

  // Throws IoError "[json] <file>: <path>: <what>"; lets callers report semantic errors in the
  // same format as type errors.
  [[noreturn]] void fail(std::string_view what) const;

 private:
  friend Json parse_json(std::string_view, std::string);
  Json(std::shared_ptr<const detail::JsonDocument> doc, const nlohmann::json* node,
       std::string path)
      : doc_(std::move(doc)), node_(node), path_(std::move(path)) {}
  Json child(std::string_view key, const nlohmann::json* node) const;

  std::shared_ptr<const detail::JsonDocument> doc_;
  const nlohmann::json* node_;
  std::string path_;
};

// Parses `text`; `source` names it in errors (usually the file path).
Json parse_json(std::string_view text, std::string source);
// Reads and parses a file; a missing or unreadable file is an IoError naming it.
Json read_json_file(const std::string& path);
// Reads a whole file into memory; errors name the file and the OS reason.
std::string read_text_file(const std::string& path, std::string_view component);

}  // namespace hp::io
