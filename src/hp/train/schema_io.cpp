// Schema walking: applying YAML and --set, validation, writing, listing and did-you-mean.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "hp/train/schema.h"
#include "hp/train/schema_detail.h"

namespace hp::train {

using detail::describe_node;

std::string Source::where(const YAML::Node& at) const {
  if (!has_lines_ || !at.IsDefined() || at.Mark().is_null()) return name_;
  return name_ + ":" + std::to_string(at.Mark().line + 1);
}

void Source::error(const YAML::Node& at, std::string_view path, std::string_view what) {
  errors_->push_back("[config] " + where(at) + ": " + std::string(path) + ": " + std::string(what));
}

Field* Schema::find(std::string_view path) {
  for (auto& f : fields_)
    if (f->path == path) return f.get();
  return nullptr;
}

const Field* Schema::field(std::string_view path) const {
  for (const auto& f : fields_)
    if (f->path == path) return f.get();
  return nullptr;
}

bool Schema::given(std::string_view path) const {
  const Field* f = field(path);
  if (!f) return false;
  if (!f->origin.empty()) return true;
  for (const auto& a : fields_)
    if (a->alias_of == f->path && !a->origin.empty()) return true;
  return false;
}

Field* Schema::target_of(Field* f) {
  return f->alias_of.empty() ? f : find(f->alias_of);
}

std::vector<std::string> Schema::known_paths() const {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& f : fields_) {
    if (!f->alias_of.empty()) continue;  // never suggest a deprecated spelling
    for (size_t dot = f->path.find('.', prefix_.size() + 1); dot != std::string::npos;
         dot = f->path.find('.', dot + 1))
      if (seen.insert(f->path.substr(0, dot)).second) out.push_back(f->path.substr(0, dot));
    if (seen.insert(f->path).second) out.push_back(f->path);
  }
  return out;
}

void Schema::apply(const YAML::Node& map, Source& src) {
  apply_map(map, prefix_, src);
}

void Schema::apply_map(const YAML::Node& map, const std::string& prefix, Source& src) {
  if (!map.IsMap()) {
    src.error(map, prefix.empty() ? "(root)" : prefix,
              "expected a mapping of keys, got " + describe_node(map));
    return;
  }
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first, value = it->second;
    if (!key.IsScalar()) {
      src.error(key, prefix.empty() ? "(root)" : prefix, "keys must be plain names");
      continue;
    }
    const std::string path = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
    if (!seen.insert(key.Scalar()).second) {
      src.error(key, path, "duplicate key");
      continue;
    }
    if (Field* f = find(path)) {
      if (Field* target = target_of(f)) {
        target->assign(value, src);
        f->origin = src.where(key);
        f->origin_is_flag = false;
      } else {
        src.error(key, path, "alias of the unknown key " + f->alias_of);
      }
      continue;
    }
    const bool is_section = std::any_of(fields_.begin(), fields_.end(), [&](const auto& f) {
      return f->path.rfind(path + ".", 0) == 0;
    });
    if (is_section) {
      // "section:" with every key commented out is an empty section, not an error.
      if (!value.IsNull()) apply_map(value, path, src);
      continue;
    }
    std::string hint = did_you_mean(path, known_paths());
    src.error(key, path, hint.empty() ? "unknown key" : "unknown key (did you mean " + hint + "?)");
  }
}

void Schema::apply_override(const std::string& assignment, std::vector<std::string>* errors) {
  Source src("--set " + assignment, false, errors);
  const size_t eq = assignment.find('=');
  const YAML::Node none;
  if (eq == std::string::npos || eq == 0) {
    src.error(none, assignment, "expected key=value");
    return;
  }
  const std::string path = assignment.substr(0, eq);
  Field* f = find(path);
  if (!f) {
    const auto known = known_paths();
    if (std::find(known.begin(), known.end(), path) != known.end()) {
      src.error(none, path, "is a section; set one of its keys (" + path + ".<key>=value)");
    } else {
      std::string hint = did_you_mean(path, known);
      src.error(none, path,
                hint.empty() ? "unknown key" : "unknown key (did you mean " + hint + "?)");
    }
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    src.error(none, path, "invalid YAML value: " + e.msg);
    return;
  }
  Field* target = target_of(f);
  if (!target) {
    src.error(none, path, "alias of the unknown key " + f->alias_of);
    return;
  }
  if (value.IsNull()) {
    // key=null: the default, as if no file or flag had given it (under either spelling).
    target->reset();
    for (const auto& g : fields_)
      if (g.get() == target || g->alias_of == target->path) g->origin.clear();
    return;
  }
  replace_other_sides(*f, src.name());
  target->assign(value, src);
  f->origin = src.name();
  f->origin_is_flag = true;
}

std::string Schema::drop_file_value(Field& f) {
  if (f.origin.empty() || f.origin_is_flag) return "";
  Field* target = target_of(&f);
  // An alias's value is its target's, unless the target was given itself.
  if (target && (target == &f || target->origin.empty())) target->reset();
  return std::exchange(f.origin, "");
}

void Schema::replace_other_sides(const Field& set, const std::string& flag) {
  std::string dropped;
  for (const auto& [one, other] : groups_)
    for (const auto* sides : {&one, &other}) {
      if (std::find(sides->begin(), sides->end(), set.path) == sides->end()) continue;
      for (const auto& path : sides == &one ? other : one)
        if (Field* g = find(path))
          if (std::string origin = drop_file_value(*g); !origin.empty())
            dropped += (dropped.empty() ? "" : ", ") + path + " (" + origin + ")";
    }
  if (!dropped.empty())
    replacements_.push_back("[config] " + flag + " replaces the file's " + dropped +
                            " (back to the default)");
}

bool Schema::differs_from_default(std::string_view path) const {
  const Field* f = field(path);
  if (!f || !f->emit) return false;
  YAML::Emitter e;
  e << YAML::Flow;
  f->emit(e);
  return e.c_str() != f->default_text;
}

bool Schema::validate(const std::string& default_origin, std::vector<std::string>* errors) const {
  bool rejected_word = false;
  for (const auto& f : fields_) {
    if (!f->alias_of.empty()) {
      const Field* target = field(f->alias_of);
      if (!f->origin.empty() && target && !target->origin.empty())
        errors->push_back("[config] " + f->origin + ": " + f->path + ": deprecated alias of " +
                          target->path + ", which is also set (" + target->origin +
                          "): keep only " + target->path);
      continue;
    }
    // A value given only through an alias is reported where the alias was used.
    const Field* via = f.get();
    if (f->origin.empty())
      for (const auto& a : fields_)
        if (a->alias_of == f->path && !a->origin.empty()) via = a.get();
    // Every number of the config is finite (inf and nan reach no check as a failure otherwise:
    // nan compares false with every bound).
    std::string non_finite;
    if (f->numbers)
      for (double x : f->numbers())
        if (!std::isfinite(x)) {
          non_finite = std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
          break;
        }
    if (!non_finite.empty()) {
      errors->push_back("[config] " + (via->origin.empty() ? default_origin : via->origin) + ": " +
                        via->path + ": must be a finite number, got " + non_finite);
      continue;
    }
    for (const auto& check : f->checks) {
      std::string what = check();
      if (what.empty()) continue;
      errors->push_back("[config] " + (via->origin.empty() ? default_origin : via->origin) + ": " +
                        via->path + ": " + what);
      rejected_word |= f->enumerated;
      break;
    }
    for (const auto& item : f->items) rejected_word |= item->validate(default_origin, errors);
  }
  return rejected_word;
}

std::vector<std::string> Schema::deprecations() const {
  std::vector<std::string> out;
  for (const auto& f : fields_)
    if (!f->alias_of.empty() && !f->origin.empty())
      out.push_back("[config] " + f->path + " is deprecated: use " + f->alias_of);
  return out;
}

void Schema::emit(YAML::Emitter& out) const {
  // Fields are registered section by section, so nested maps open and close in order.
  std::vector<std::string> open;
  for (const auto& f : fields_) {
    if (!f->alias_of.empty()) continue;  // written under its target's key
    std::string rel = f->path.substr(prefix_.empty() ? 0 : prefix_.size() + 1);
    std::vector<std::string> parts;
    for (size_t b = 0, e; b <= rel.size(); b = e + 1) {
      e = rel.find('.', b);
      if (e == std::string::npos) e = rel.size();
      parts.push_back(rel.substr(b, e - b));
    }
    const std::string leaf = parts.back();
    parts.pop_back();
    size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) ++common;
    while (open.size() > common) {
      out << YAML::EndMap;
      open.pop_back();
    }
    for (size_t i = common; i < parts.size(); ++i) {
      out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open.push_back(parts[i]);
    }
    out << YAML::Key << leaf << YAML::Value;
    f->emit(out);
  }
  while (!open.empty()) {
    out << YAML::EndMap;
    open.pop_back();
  }
}

void Schema::collect_lines(std::vector<std::vector<std::string>>& rows) const {
  for (const auto& f : fields_) {
    const Field* target = f->alias_of.empty() ? f.get() : field(f->alias_of);
    rows.push_back({f->path, target ? target->type : "", f->default_text, f->doc});
    if (f->item_template) f->item_template()->collect_lines(rows);
  }
}

std::string Schema::describe_text() const {
  std::vector<std::vector<std::string>> rows;
  collect_lines(rows);
  size_t w[3] = {0, 0, 0};
  for (const auto& r : rows)
    for (int i = 0; i < 3; ++i) w[i] = std::max(w[i], r[static_cast<size_t>(i)].size());
  std::string out;
  for (const auto& r : rows) {
    for (size_t i = 0; i < 3; ++i) out += r[i] + std::string(w[i] - r[i].size() + 2, ' ');
    out += "# " + r[3] + "\n";
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string did_you_mean(std::string_view wrong, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  const auto depth = [](std::string_view p) { return std::count(p.begin(), p.end(), '.'); };
  for (const auto& c : candidates) {
    // Compare like with like: a key with keys at its own depth (not with its parent section).
    if (depth(c) != depth(wrong)) continue;
    const size_t d = edit_distance(wrong, c);
    if (d < best_d) best_d = d, best = c;
  }
  // A typo: at most a third of the name (and 3 edits) changed.
  if (best_d <= std::min<size_t>(3, std::max<size_t>(1, wrong.size() / 3))) return best;
  // The right key in the wrong section (training.lr → optimizer.lr).
  const size_t dot = wrong.rfind('.');
  if (dot == std::string_view::npos) return "";
  const std::string_view tail = wrong.substr(dot);  // ".lr"
  for (const auto& c : candidates)
    if (std::string_view(c).ends_with(tail)) return c;
  return "";
}

}  // namespace hp::train
