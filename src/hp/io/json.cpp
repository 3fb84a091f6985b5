#include "hp/io/json.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "hp/core/error.h"

namespace hp::io {

namespace detail {
struct JsonDocument {
  std::string source;
  nlohmann::json root;
};
}  // namespace detail

namespace {

using nlohmann::json;

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

// Tracks the key path during parsing so a duplicate key can be reported with its location;
// nlohmann would otherwise keep the last value silently.
class DuplicateKeyChecker {
 public:
  explicit DuplicateKeyChecker(const std::string& source) : source_(source) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        frames_.push_back(Frame{true, {}, {}, 0});
        break;
      case json::parse_event_t::array_start:
        frames_.push_back(Frame{false, {}, {}, 0});
        break;
      case json::parse_event_t::key: {
        Frame& f = frames_.back();
        f.last_key = parsed.get<std::string>();
        if (!f.keys.insert(f.last_key).second)
          HP_THROW(IoError, "json", source_, ": duplicate key \"", f.last_key, "\" in object '",
                   current_path(), "'");
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        element_done();
        break;
      case json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_object;
    std::unordered_set<std::string> keys;
    std::string last_key;
    size_t index;
  };

  void element_done() {
    if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().index;
  }

  std::string current_path() const {
    std::string p;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.is_object) {
        if (!p.empty()) p += '.';
        p += f.last_key;
      } else {
        p += '[';
        p += std::to_string(f.index);
        p += ']';
      }
    }
    return p;
  }

  const std::string& source_;
  std::vector<Frame> frames_;
};

}  // namespace

const std::string& Json::file() const {
  return doc_->source;
}

bool Json::is_null() const {
  return node_->is_null();
}
bool Json::is_object() const {
  return node_->is_object();
}
bool Json::is_array() const {
  return node_->is_array();
}
bool Json::is_string() const {
  return node_->is_string();
}
bool Json::is_bool() const {
  return node_->is_boolean();
}
bool Json::is_number() const {
  return node_->is_number();
}
bool Json::is_integer() const {
  return node_->is_number_integer();
}
std::string_view Json::type_name() const {
  return node_->type_name();
}

void Json::fail(std::string_view what) const {
  HP_THROW(IoError, "json", doc_->source, ": ", path_.empty() ? "<root>" : path_, ": ", what);
}

Json Json::child(std::string_view key, const nlohmann::json* node) const {
  std::string p = path_;
  if (!p.empty()) p += '.';
  p += key;
  return Json(doc_, node, std::move(p));
}

size_t Json::size() const {
  if (!node_->is_object() && !node_->is_array())
    fail(hp::detail::cat("expected object or array, got ", type_name()));
  return node_->size();
}

bool Json::contains(std::string_view key) const {
  return node_->is_object() && node_->find(key) != node_->end();
}

Json Json::at(std::string_view key) const {
  if (!node_->is_object())
    fail(hp::detail::cat("expected object with key \"", key, "\", got ", type_name()));
  auto it = node_->find(key);
  if (it == node_->end()) fail(hp::detail::cat("missing key \"", key, "\""));
  return child(key, &*it);
}

std::optional<Json> Json::find(std::string_view key) const {
  if (!node_->is_object()) return std::nullopt;
  auto it = node_->find(key);
  if (it == node_->end()) return std::nullopt;
  return child(key, &*it);
}

Json Json::at(size_t i) const {
  if (!node_->is_array()) fail(hp::detail::cat("expected array, got ", type_name()));
  if (i >= node_->size())
    fail(hp::detail::cat("index ", i, " out of range (size ", node_->size(), ")"));
  return Json(doc_, &(*node_)[i], path_ + "[" + std::to_string(i) + "]");
}

Json Json::at(int i) const {
  if (i < 0) fail(hp::detail::cat("negative index ", i));
  return at(static_cast<size_t>(i));
}

std::vector<std::pair<std::string, Json>> Json::items() const {
  if (!node_->is_object()) fail(hp::detail::cat("expected object, got ", type_name()));
  std::vector<std::pair<std::string, Json>> out;
  out.reserve(node_->size());
  for (auto it = node_->begin(); it != node_->end(); ++it)
    out.emplace_back(it.key(), child(it.key(), &*it));
  return out;
}

std::vector<Json> Json::elements() const {
  if (!node_->is_array()) fail(hp::detail::cat("expected array, got ", type_name()));
  std::vector<Json> out;
  out.reserve(node_->size());
  for (size_t i = 0; i < node_->size(); ++i)
    out.push_back(Json(doc_, &(*node_)[i], path_ + "[" + std::to_string(i) + "]"));
  return out;
}

std::string Json::as_string() const {
  if (!node_->is_string()) fail(hp::detail::cat("expected string, got ", type_name()));
  return node_->get<std::string>();
}

bool Json::as_bool() const {
  if (!node_->is_boolean()) fail(hp::detail::cat("expected boolean, got ", type_name()));
  return node_->get<bool>();
}

double Json::as_double() const {
  if (!node_->is_number()) fail(hp::detail::cat("expected number, got ", type_name()));
  return node_->get<double>();
}

int64_t Json::as_int() const {
  if (node_->is_number_unsigned()) {
    uint64_t v = node_->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(hp::detail::cat("integer ", v, " out of range"));
    return static_cast<int64_t>(v);
  }
  if (node_->is_number_integer()) return node_->get<int64_t>();
  fail(hp::detail::cat("expected integer, got ", node_->is_number() ? "non-integral number " : "",
                       node_->is_number() ? dump() : std::string(type_name())));
}

uint64_t Json::as_uint() const {
  if (node_->is_number_unsigned()) return node_->get<uint64_t>();
  if (node_->is_number_integer())
    fail(hp::detail::cat("expected non-negative integer, got ", dump()));
  fail(hp::detail::cat("expected non-negative integer, got ",
                       node_->is_number() ? dump() : std::string(type_name())));
}

std::string Json::get_string_or(std::string_view key, std::string def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_string() : def;
}
int64_t Json::get_int_or(std::string_view key, int64_t def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_int() : def;
}
double Json::get_double_or(std::string_view key, double def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_double() : def;
}
bool Json::get_bool_or(std::string_view key, bool def) const {
  auto v = find(key);
  return v && !v->is_null() ? v->as_bool() : def;
}

std::string Json::dump() const {
  return node_->dump();
}

Json parse_json(std::string_view text, std::string source) {
  auto doc = std::make_shared<detail::JsonDocument>();
  doc->source = std::move(source);
  DuplicateKeyChecker checker(doc->source);
  try {
    doc->root = json::parse(text.begin(), text.end(), std::ref(checker));
  } catch (const json::parse_error& e) {
    // e.byte is 1-based and points at the last character read.
    auto [line, col] = line_col(text, e.byte == 0 ? 0 : e.byte - 1);
    HP_THROW(IoError, "json", doc->source, ": ", strip_nlohmann_prefix(e.what()), " at line ", line,
             " col ", col);
  } catch (const json::exception& e) {
    HP_THROW(IoError, "json", doc->source, ": ", strip_nlohmann_prefix(e.what()));
  }
  const json* root = &doc->root;
  return Json(std::move(doc), root, "");
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

}  // namespace hp::io
