#include "hp/io/json.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "hp/core/error.h"

namespace hp::io {

namespace detail {

struct JsonDocument {
  std::string source;
  JsonValue root;
};

struct JsonIndex {
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> position;
};

}  // namespace detail

namespace {

// Objects up to this many members are searched linearly; larger ones keep a hash index.
constexpr size_t kIndexFrom = 16;

// 1-based line and column of byte offset `pos` (0-based) in `text`.
std::pair<size_t, size_t> line_col(std::string_view text, size_t pos) {
  pos = std::min(pos, text.size());
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

// nlohmann's messages start "[json.exception.parse_error.101] parse error at line 1, column 5: ";
// keep only the description after the position.
std::string strip_nlohmann_prefix(const std::string& what) {
  size_t p = what.find("column ");
  if (p == std::string::npos) p = what.find("byte ");
  if (p != std::string::npos) {
    size_t colon = what.find(": ", p);
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

// nlohmann's message without its bracketed id ("[json.exception.type_error.316] ").
std::string without_id(const std::string& what) {
  const size_t end = what.find("] ");
  const bool has_id = what.rfind("[json.exception.", 0) == 0 && end != std::string::npos;
  return has_id ? what.substr(end + 2) : what;
}

// The wording of try_parse_json's reason: without nlohmann's id, and without "line 1, " (a
// one-line record's line is known to the caller).
std::string lenient_reason(const std::string& what) {
  std::string s = without_id(what);
  if (s.rfind("parse error at line 1, ", 0) == 0) s = "parse error at " + s.substr(23);
  return s;
}

// `v` as nlohmann::ordered_json (members as inserted) or nlohmann::json (sorted by key), for its
// serializer.
template <class J>
J to_nlohmann(const JsonValue& v) {
  using Type = JsonValue::Type;
  switch (v.type()) {
    case Type::null:
      return J(nullptr);
    case Type::boolean:
      return J(v.as_bool());
    case Type::integer:
      return J(v.as_int());
    case Type::unsigned_integer:
      return J(v.as_uint());
    case Type::number:
      return J(v.as_double());
    case Type::string:
      return J(v.as_string());
    case Type::array: {
      J out = J::array();
      auto& a = out.template get_ref<typename J::array_t&>();
      a.reserve(v.size());
      for (const JsonValue& e : v.elements()) a.push_back(to_nlohmann<J>(e));
      return out;
    }
    case Type::object: {
      J out = J::object();
      auto& o = out.template get_ref<typename J::object_t&>();
      // ordered_json's object is a vector whose emplace() searches it; keys are unique already.
      for (const auto& [key, value] : v.members()) {
        if constexpr (std::is_same_v<J, nlohmann::ordered_json>)
          o.emplace_back(key, to_nlohmann<J>(value));
        else
          o.emplace(key, to_nlohmann<J>(value));
      }
      return out;
    }
  }
  return J();
}

}  // namespace

// --- JsonValue ---------------------------------------------------------------------------------

JsonValue::Object::Object() = default;
JsonValue::Object::~Object() = default;
JsonValue::Object::Object(Object&& other) noexcept = default;
JsonValue::Object& JsonValue::Object::operator=(Object&& other) noexcept = default;

JsonValue::Object::Object(const Object& other)
    : members(other.members),
      index(other.index ? std::make_unique<detail::JsonIndex>(*other.index) : nullptr) {}

JsonValue::Object& JsonValue::Object::operator=(const Object& other) {
  if (this != &other) *this = Object(other);
  return *this;
}

ptrdiff_t JsonValue::Object::position(std::string_view key) const {
  if (index) {
    const auto it = index->position.find(key);
    return it == index->position.end() ? -1 : static_cast<ptrdiff_t>(it->second);
  }
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].first == key) return static_cast<ptrdiff_t>(i);
  return -1;
}

JsonValue& JsonValue::Object::append(std::string key, JsonValue value) {
  members.emplace_back(std::move(key), std::move(value));
  if (index)
    index->position.emplace(members.back().first, members.size() - 1);
  else if (members.size() > kIndexFrom)
    reindex();
  return members.back().second;
}

void JsonValue::Object::reindex() {
  if (members.size() <= kIndexFrom) {
    index.reset();
    return;
  }
  if (!index) index = std::make_unique<detail::JsonIndex>();
  index->position.clear();
  index->position.reserve(members.size());
  for (size_t i = 0; i < members.size(); ++i) index->position.emplace(members[i].first, i);
}

JsonValue::~JsonValue() {
  if (size() == 0) return;
  // Shallow documents are freed recursively (no allocation); below kRecursiveDepth levels the
  // children that hold children of their own move to a work list, and each leaves it emptied, so
  // no destructor recurses deeper.
  thread_local int depth = 0;
  constexpr int kRecursiveDepth = 64;
  if (depth < kRecursiveDepth) {
    ++depth;
    v_ = nullptr;
    --depth;
    return;
  }
  std::vector<JsonValue> pending;
  auto take_children = [&pending](JsonValue& v) {
    if (auto* a = std::get_if<std::vector<JsonValue>>(&v.v_)) {
      for (JsonValue& e : *a)
        if (e.size() > 0) pending.push_back(std::move(e));
      a->clear();
    } else if (auto* o = std::get_if<Object>(&v.v_)) {
      for (Member& m : o->members)
        if (m.second.size() > 0) pending.push_back(std::move(m.second));
      o->members.clear();
      o->index.reset();
    }
  };
  take_children(*this);
  while (!pending.empty()) {
    JsonValue v = std::move(pending.back());
    pending.pop_back();
    take_children(v);
  }
}

JsonValue JsonValue::array(std::initializer_list<JsonValue> elements) {
  JsonValue v;
  v.v_ = std::vector<JsonValue>(elements);
  return v;
}

JsonValue JsonValue::object(std::initializer_list<MemberInit> members) {
  JsonValue v;
  Object& o = v.object_for_write();
  for (const auto& [key, value] : members) {
    HP_CHECK(o.position(key) < 0, "JsonValue::object: key \"", key, "\" given twice");
    o.append(std::string(key), value);
  }
  return v;
}

bool JsonValue::is_number() const {
  return type() == Type::integer || type() == Type::unsigned_integer || type() == Type::number;
}

std::string_view JsonValue::type_name() const {
  switch (type()) {
    case Type::null:
      return "null";
    case Type::boolean:
      return "boolean";
    case Type::string:
      return "string";
    case Type::array:
      return "array";
    case Type::object:
      return "object";
    default:
      return "number";
  }
}

size_t JsonValue::size() const {
  if (const auto* a = std::get_if<std::vector<JsonValue>>(&v_)) return a->size();
  if (const auto* o = std::get_if<Object>(&v_)) return o->members.size();
  return 0;
}

JsonValue::Object& JsonValue::object_for_write() {
  if (is_null()) v_ = Object();
  HP_CHECK(is_object(), "JsonValue: member access on a ", type_name());
  return std::get<Object>(v_);
}

std::vector<JsonValue>& JsonValue::array_for_write() {
  if (is_null()) v_ = std::vector<JsonValue>();
  HP_CHECK(is_array(), "JsonValue: element access on a ", type_name());
  return std::get<std::vector<JsonValue>>(v_);
}

JsonValue& JsonValue::operator[](std::string_view key) {
  Object& o = object_for_write();
  const ptrdiff_t at = o.position(key);
  return at >= 0 ? o.members[static_cast<size_t>(at)].second : o.append(std::string(key), {});
}

const JsonValue* JsonValue::find(std::string_view key) const {
  const auto* o = std::get_if<Object>(&v_);
  if (!o) return nullptr;
  const ptrdiff_t at = o->position(key);
  return at >= 0 ? &o->members[static_cast<size_t>(at)].second : nullptr;
}

JsonValue* JsonValue::find(std::string_view key) {
  return const_cast<JsonValue*>(std::as_const(*this).find(key));
}

bool JsonValue::erase(std::string_view key) {
  auto* o = std::get_if<Object>(&v_);
  const ptrdiff_t at = o ? o->position(key) : -1;
  if (at < 0) return false;
  o->members.erase(o->members.begin() + at);
  o->reindex();
  return true;
}

void JsonValue::update(const JsonValue& other) {
  HP_CHECK(other.is_object(), "JsonValue::update with a ", other.type_name());
  for (const auto& [key, value] : other.members()) (*this)[key] = value;
}

const std::vector<JsonValue::Member>& JsonValue::members() const {
  static const std::vector<Member> kNone;
  const auto* o = std::get_if<Object>(&v_);
  return o ? o->members : kNone;
}

void JsonValue::push_back(JsonValue v) {
  array_for_write().push_back(std::move(v));
}

void JsonValue::erase(size_t i) {
  HP_CHECK(i < elements().size(), "JsonValue: erasing element ", i, " of a ", type_name(),
           " of size ", size());
  auto& a = array_for_write();
  a.erase(a.begin() + static_cast<ptrdiff_t>(i));
}

JsonValue& JsonValue::operator[](size_t i) {
  return const_cast<JsonValue&>(std::as_const(*this)[i]);
}

const JsonValue& JsonValue::operator[](size_t i) const {
  const auto& a = elements();
  HP_CHECK(is_array() && i < a.size(), "JsonValue: element ", i, " of a ", type_name(), " of size ",
           a.size());
  return a[i];
}

const std::vector<JsonValue>& JsonValue::elements() const {
  static const std::vector<JsonValue> kNone;
  const auto* a = std::get_if<std::vector<JsonValue>>(&v_);
  return a ? *a : kNone;
}

bool JsonValue::as_bool() const {
  if (!is_bool()) HP_THROW(IoError, "json", "expected boolean, got ", type_name());
  return std::get<bool>(v_);
}

int64_t JsonValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v_)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      HP_THROW(IoError, "json", "integer ", *u, " out of range");
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v_)) return *i;
  HP_THROW(IoError, "json", "expected integer, got ", is_number() ? "non-integral number " : "",
           is_number() ? dump() : std::string(type_name()));
}

uint64_t JsonValue::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&v_)) return *u;
  // A parsed document holds non-negative integers as unsigned; a built one may hold them signed.
  if (const auto* i = std::get_if<int64_t>(&v_); i && *i >= 0) return static_cast<uint64_t>(*i);
  HP_THROW(IoError, "json", "expected non-negative integer, got ",
           is_number() ? dump() : std::string(type_name()));
}

double JsonValue::as_double() const {
  switch (type()) {
    case Type::integer:
      return static_cast<double>(std::get<int64_t>(v_));
    case Type::unsigned_integer:
      return static_cast<double>(std::get<uint64_t>(v_));
    case Type::number:
      return std::get<double>(v_);
    default:
      HP_THROW(IoError, "json", "expected number, got ", type_name());
  }
}

const std::string& JsonValue::as_string() const {
  if (!is_string()) HP_THROW(IoError, "json", "expected string, got ", type_name());
  return std::get<std::string>(v_);
}

std::string JsonValue::dump(int indent, KeyOrder order) const {
  try {
    return order == KeyOrder::sorted ? to_nlohmann<nlohmann::json>(*this).dump(indent)
                                     : to_nlohmann<nlohmann::ordered_json>(*this).dump(indent);
  } catch (const nlohmann::json::exception& e) {
    // Invalid UTF-8 in a string (type_error.316).
    HP_THROW(IoError, "json", "cannot serialize: ", without_id(e.what()));
  }
}

// --- Parsing -------------------------------------------------------------------------------------

// nlohmann's SAX events → a JsonValue tree, built on an explicit stack (no recursion per level).
struct detail::JsonBuilder {
  enum class Order { sorted, document };
  enum class Repeats { reject, keep_last };

  JsonBuilder(const std::string& source, Order order, Repeats repeats)
      : source_(source), order_(order), repeats_(repeats) {}

  bool null() { return add(JsonValue()); }
  bool boolean(bool b) { return add(JsonValue(b)); }
  bool number_integer(int64_t n) { return add(JsonValue(n)); }
  bool number_unsigned(uint64_t n) { return add(JsonValue(n)); }
  bool number_float(double d, const std::string& /*text*/) { return add(JsonValue(d)); }
  bool string(std::string& s) { return add(JsonValue(std::move(s))); }
  bool binary(nlohmann::json::binary_t& /*bytes*/) { return true; }  // not in JSON text
  bool start_object(size_t /*elements*/) {
    frames_.push_back({JsonValue::object(), {}, -1});
    return true;
  }
  bool start_array(size_t /*elements*/) {
    frames_.push_back({JsonValue::array(), {}, -1});
    return true;
  }
  bool key(std::string& k);
  bool end_object();
  bool end_array() { return close(); }
  template <class Exception>
  bool parse_error(size_t /*position*/, const std::string& /*last_token*/, const Exception& e) {
    what_ = e.what();
    if constexpr (std::is_same_v<Exception, nlohmann::json::parse_error>) byte_ = e.byte;
    return false;
  }

  // Parses `text`; false (and what(), byte()) when it is not JSON.
  bool run(std::string_view text) {
    return nlohmann::json::sax_parse(text.begin(), text.end(), this,
                                     nlohmann::json::input_format_t::json, /*strict=*/true);
  }
  JsonValue take_root() { return std::move(root_); }
  // A view of a parsed document's root.
  static Json root_view(std::shared_ptr<const JsonDocument> doc) {
    const JsonValue* root = &doc->root;
    return Json(std::move(doc), root, "");
  }
  // nlohmann's message, and the 1-based offset of the last byte read (0 when the error has no
  // position: a number out of range).
  const std::string& what() const { return what_; }
  size_t byte() const { return byte_; }

 private:
  struct Frame {
    JsonValue value;   // the array or object being read
    std::string key;   // objects: the key whose value comes next
    ptrdiff_t repeat;  // objects, keep_last: the position of that key when it was seen before
  };

  bool add(JsonValue v);
  bool close() {
    JsonValue v = std::move(frames_.back().value);
    frames_.pop_back();
    return add(std::move(v));
  }
  std::string current_path() const;

  const std::string& source_;
  Order order_;
  Repeats repeats_;
  std::vector<Frame> frames_;
  JsonValue root_;
  std::string what_;
  size_t byte_ = 0;
};

bool detail::JsonBuilder::add(JsonValue v) {
  if (frames_.empty()) {
    root_ = std::move(v);
    return true;
  }
  Frame& f = frames_.back();
  if (f.value.is_array()) {
    f.value.push_back(std::move(v));
  } else {
    auto& o = std::get<JsonValue::Object>(f.value.v_);
    if (f.repeat >= 0)
      o.members[static_cast<size_t>(f.repeat)].second = std::move(v);
    else
      o.append(std::move(f.key), std::move(v));
  }
  return true;
}

bool detail::JsonBuilder::key(std::string& k) {
  Frame& f = frames_.back();
  f.repeat = std::get<JsonValue::Object>(f.value.v_).position(k);
  // Rejected where it is met, naming its object: nlohmann would keep the last value silently.
  if (f.repeat >= 0 && repeats_ == Repeats::reject)
    HP_THROW(IoError, "json", source_, ": duplicate key \"", k, "\" in object '", current_path(),
             "'");
  f.key = std::move(k);
  return true;
}

bool detail::JsonBuilder::end_object() {
  if (order_ == Order::sorted) {
    auto& o = std::get<JsonValue::Object>(frames_.back().value.v_);
    std::sort(
        o.members.begin(), o.members.end(),
        [](const JsonValue::Member& a, const JsonValue::Member& b) { return a.first < b.first; });
    o.reindex();
  }
  return close();
}

// The key path of the object being read ("a.b[1]"; "" for the root).
std::string detail::JsonBuilder::current_path() const {
  std::string p;
  for (size_t i = 0; i + 1 < frames_.size(); ++i) {
    const Frame& f = frames_[i];
    if (f.value.is_object()) {
      if (!p.empty()) p += '.';
      p += f.key;
    } else {
      p += '[';
      p += std::to_string(f.value.size());
      p += ']';
    }
  }
  return p;
}

namespace {

using detail::JsonBuilder;

// Strict parse of `text` (source names it in errors).
JsonValue parse_strict(std::string_view text, const std::string& source, JsonBuilder::Order order) {
  JsonBuilder b(source, order, JsonBuilder::Repeats::reject);
  if (b.run(text)) return b.take_root();
  if (b.byte() == 0) HP_THROW(IoError, "json", source, ": ", strip_nlohmann_prefix(b.what()));
  // byte() is 1-based and points at the last character read.
  auto [line, col] = line_col(text, b.byte() - 1);
  HP_THROW(IoError, "json", source, ": ", strip_nlohmann_prefix(b.what()), " at line ", line,
           " col ", col);
}

}  // namespace

Json parse_json(std::string_view text, std::string source) {
  auto doc = std::make_shared<detail::JsonDocument>();
  doc->source = std::move(source);
  doc->root = parse_strict(text, doc->source, JsonBuilder::Order::sorted);
  return JsonBuilder::root_view(std::move(doc));
}

JsonValue parse_json_value(std::string_view text, std::string source) {
  return parse_strict(text, source, JsonBuilder::Order::document);
}

std::optional<Json> try_parse_json(std::string_view text, std::string source, std::string* why) {
  auto doc = std::make_shared<detail::JsonDocument>();
  doc->source = std::move(source);
  JsonBuilder b(doc->source, JsonBuilder::Order::sorted, JsonBuilder::Repeats::keep_last);
  if (!b.run(text)) {
    if (why) *why = lenient_reason(b.what());
    return std::nullopt;
  }
  doc->root = b.take_root();
  return JsonBuilder::root_view(std::move(doc));
}

std::string read_text_file(const std::string& path, std::string_view component) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) HP_THROW(IoError, component, path, ": cannot open: ", std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) HP_THROW(IoError, component, path, ": read error");
  return out;
}

Json read_json_file(const std::string& path) {
  return parse_json(read_text_file(path, "json"), path);
}

// --- Json ----------------------------------------------------------------------------------------

namespace {

// A typed read of a Json's node: JsonValue's type error, reported with the file and key path.
template <class Read>
auto read_node(const Json& j, Read&& read) -> decltype(read(j.value())) {
  try {
    return read(j.value());
  } catch (const IoError& e) {
    j.fail(std::string_view(e.what()).substr(std::strlen("[json] ")));
  }
}

}  // namespace

const std::string& Json::file() const {
  return doc_->source;
}

void Json::fail(std::string_view what) const {
  HP_THROW(IoError, "json", doc_->source, ": ", path_.empty() ? "<root>" : path_, ": ", what);
}

Json Json::child(std::string_view key, const JsonValue* node) const {
  std::string p = path_;
  if (!p.empty()) p += '.';
  p += key;
  return Json(doc_, node, std::move(p));
}

Json Json::element(size_t i) const {
  return Json(doc_, &node_->elements()[i], path_ + "[" + std::to_string(i) + "]");
}

size_t Json::size() const {
  if (!is_object() && !is_array())
    fail(hp::detail::cat("expected object or array, got ", type_name()));
  return node_->size();
}

bool Json::contains(std::string_view key) const {
  return node_->contains(key);
}

Json Json::at(std::string_view key) const {
  if (!is_object())
    fail(hp::detail::cat("expected object with key \"", key, "\", got ", type_name()));
  const JsonValue* v = node_->find(key);
  if (!v) fail(hp::detail::cat("missing key \"", key, "\""));
  return child(key, v);
}

std::optional<Json> Json::find(std::string_view key) const {
  const JsonValue* v = node_->find(key);
  if (!v) return std::nullopt;
  return child(key, v);
}

Json Json::at(size_t i) const {
  if (!is_array()) fail(hp::detail::cat("expected array, got ", type_name()));
  if (i >= node_->size())
    fail(hp::detail::cat("index ", i, " out of range (size ", node_->size(), ")"));
  return element(i);
}

Json Json::at(int i) const {
  if (i < 0) fail(hp::detail::cat("negative index ", i));
  return at(static_cast<size_t>(i));
}

std::vector<std::pair<std::string, Json>> Json::items() const {
  if (!is_object()) fail(hp::detail::cat("expected object, got ", type_name()));
  std::vector<std::pair<std::string, Json>> out;
  out.reserve(node_->size());
  for (const auto& [key, value] : node_->members()) out.emplace_back(key, child(key, &value));
  return out;
}

std::vector<Json> Json::elements() const {
  if (!is_array()) fail(hp::detail::cat("expected array, got ", type_name()));
  std::vector<Json> out;
  out.reserve(node_->size());
  for (size_t i = 0; i < node_->size(); ++i) out.push_back(element(i));
  return out;
}

std::string Json::as_string() const {
  return read_node(*this, [](const JsonValue& v) { return v.as_string(); });
}
bool Json::as_bool() const {
  return read_node(*this, [](const JsonValue& v) { return v.as_bool(); });
}
double Json::as_double() const {
  return read_node(*this, [](const JsonValue& v) { return v.as_double(); });
}
int64_t Json::as_int() const {
  return read_node(*this, [](const JsonValue& v) { return v.as_int(); });
}
uint64_t Json::as_uint() const {
  return read_node(*this, [](const JsonValue& v) { return v.as_uint(); });
}

std::vector<int64_t> Json::as_int_list() const {
  std::vector<int64_t> out;
  for (const Json& e : elements()) out.push_back(e.as_int());
  return out;
}
std::vector<double> Json::as_double_list() const {
  std::vector<double> out;
  for (const Json& e : elements()) out.push_back(e.as_double());
  return out;
}

std::string Json::get_string_or(std::string_view key, std::string def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_string() : def;
}
int64_t Json::get_int_or(std::string_view key, int64_t def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_int() : def;
}
uint64_t Json::get_uint_or(std::string_view key, uint64_t def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_uint() : def;
}
double Json::get_double_or(std::string_view key, double def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_double() : def;
}
bool Json::get_bool_or(std::string_view key, bool def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_bool() : def;
}

}  // namespace hp::io
