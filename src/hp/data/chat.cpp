// Chat templates, conversations and their loss masks (chat.h).
#include "hp/data/chat.h"

#include <algorithm>
#include <filesystem>

#include "hp/core/error.h"
#include "hp/data/encoder.h"

namespace hp::data {

namespace {

jinja::Value from_json(const io::JsonValue& j) {
  using jinja::Value;
  using Type = io::JsonValue::Type;
  switch (j.type()) {
    case Type::null: return Value::none();
    case Type::boolean: return Value::boolean(j.as_bool());
    case Type::integer: return Value::integer(j.as_int());
    case Type::unsigned_integer: return Value::integer(static_cast<int64_t>(j.as_uint()));
    case Type::number: return Value::number(j.as_double());
    case Type::string: return Value::string(j.as_string());
    case Type::array: {
      jinja::List out;
      for (const io::JsonValue& e : j.elements()) out.push_back(from_json(e));
      return Value::make_list(std::move(out));
    }
    case Type::object: {
      // A parsed document's keys are sorted; a JSONL record's order is not kept (tojson of a
      // message then differs from Python's only in key order, which the supported templates
      // never print).
      jinja::Dict d;
      for (const auto& [k, v] : j.members()) d.set(k, from_json(v));
      return Value::make_dict(std::move(d));
    }
  }
  return Value();
}

// bos_token / eos_token: a string, an AddedToken object {"content": ...}, or absent / null.
std::string special_token(const io::Json& cfg, const char* key) {
  const auto t = cfg.find(key);
  if (!t || t->is_null()) return {};
  if (t->is_object()) return t->get_string("content");
  return t->as_string();
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& path) {
  if (path.size() > 6 && path.compare(path.size() - 6, 6, ".jinja") == 0)
    return ChatTemplate(io::read_text_file(path, "data"), path, "", "");
  const io::Json cfg = io::read_json_file(path);
  const auto t = cfg.find("chat_template");
  if (!t || t->is_null())
    HP_THROW(IoError, "data", "'", path, "' has no chat_template (data.chat_template names a ",
             "tokenizer_config.json that has one, or a .jinja file)");
  std::string source;
  if (t->is_array()) {
    for (const io::Json& e : t->elements())
      if (e.get_string("name") == "default") source = e.get_string("template");
    if (source.empty())
      HP_THROW(IoError, "data", "'", path, "': chat_template lists no template named 'default'");
  } else {
    source = t->as_string();
  }
  return ChatTemplate(source, path, special_token(cfg, "bos_token"), special_token(cfg, "eos_token"));
}

ChatTemplate::ChatTemplate(std::string_view source, std::string name, std::string bos_token,
                           std::string eos_token)
    : tmpl_(source, std::move(name)), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  // What add_generation_prompt adds after one user turn. A template that refuses such a
  // conversation (or renders it oddly) has none to strip: its assistant turns train whole.
  jinja::Dict user;
  user.set("role", jinja::Value::string("user"));
  user.set("content", jinja::Value::string("Hi"));
  const jinja::Value one = jinja::Value::make_list({jinja::Value::make_dict(std::move(user))});
  try {
    const std::string with = render(one, true), without = render(one, false);
    if (with.size() >= without.size() && with.compare(0, without.size(), without) == 0)
      generation_prompt_ = with.substr(without.size());
  } catch (const ValueError&) {
  }
}

jinja::RenderResult ChatTemplate::run(const jinja::Value& messages, bool add_generation_prompt,
                                      bool track) const {
  jinja::Dict ctx;
  ctx.set("messages", messages);
  ctx.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  ctx.set("bos_token", jinja::Value::string(bos_));
  ctx.set("eos_token", jinja::Value::string(eos_));
  return tmpl_.render(ctx, track ? messages : jinja::Value());
}

std::string ChatTemplate::render(const jinja::Value& messages, bool add_generation_prompt) const {
  return run(messages, add_generation_prompt, false).text;
}

std::vector<std::pair<std::string, bool>> ChatTemplate::pieces(const jinja::Value& messages) const {
  const jinja::RenderResult r = run(messages, false, true);
  std::vector<std::pair<size_t, size_t>> spans;
  if (tmpl_.has_generation_blocks()) {
    spans = r.generation;
  } else {
    for (size_t m = 0; m < r.tracked.size(); ++m) {
      const jinja::Value* role = (*messages.list)[m].dict->find("role");
      auto [b, e] = r.tracked[m];
      if (b == e || role->s != "assistant") continue;
      const std::string& g = generation_prompt_;
      if (!g.empty() && r.text.compare(b, g.size(), g) == 0) b = std::min(e, b + g.size());
      spans.emplace_back(b, e);
    }
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<std::string, bool>> out;
  size_t at = 0;
  for (auto [b, e] : spans) {
    b = std::max(b, at);
    if (e <= b) continue;
    if (b > at) out.emplace_back(r.text.substr(at, b - at), false);
    out.emplace_back(r.text.substr(b, e - b), true);
    at = e;
  }
  if (at < r.text.size()) out.emplace_back(r.text.substr(at), false);
  return out;
}

jinja::Value parse_conversation(const io::Json& record, const std::string& field,
                                const std::string& where) {
  if (!record.is_object())
    HP_THROW(ValueError, "data", where, ": the line is a JSON ", record.type_name(), ", not an object");
  const io::JsonValue* list = record.value().find(field);
  if (!list) HP_THROW(ValueError, "data", where, ": the line has no field '", field, "'");
  if (!list->is_array())
    HP_THROW(ValueError, "data", where, ": field '", field, "' is a ", list->type_name(),
             ", not an array of messages");
  jinja::List messages;
  for (size_t i = 0; i < list->size(); ++i) {
    const io::JsonValue& m = (*list)[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (!m.is_object())
      HP_THROW(ValueError, "data", where, ": ", at, " is a ", m.type_name(), ", not an object");
    const io::JsonValue* role = m.find("role");
    if (!role || !role->is_string())
      HP_THROW(ValueError, "data", where, ": ", at, ".role is ",
               !role ? std::string("missing") : "a " + std::string(role->type_name()),
               " (a string: system, user, assistant or tool)");
    const std::string& r = role->as_string();
    if (std::none_of(std::begin(kChatRoles), std::end(kChatRoles), [&](const char* k) { return r == k; }))
      HP_THROW(ValueError, "data", where, ": ", at, ".role '", r,
               "' is not one of system, user, assistant, tool");
    const io::JsonValue* content = m.find("content");
    if (!content || !content->is_string())
      HP_THROW(ValueError, "data", where, ": ", at, ".content is ",
               !content ? std::string("missing") : "a " + std::string(content->type_name()),
               ", not a string");
    messages.push_back(from_json(m));
  }
  if (messages.empty()) HP_THROW(ValueError, "data", where, ": field '", field, "' has no messages");
  return jinja::Value::make_list(std::move(messages));
}

jinja::Value parse_chat_line(std::string_view line, const std::string& field,
                             const std::string& where) {
  std::string why;
  const std::optional<io::Json> j = io::try_parse_json(line, where, &why);
  if (!j) HP_THROW(ValueError, "data", where, ": the line is not JSON (", why, ")");
  return parse_conversation(*j, field, where);
}

std::string chat_template_path(const std::string& chat_template, const std::string& tokenizer) {
  if (!chat_template.empty()) return chat_template;
  if (tokenizer.empty())
    HP_THROW(ValueError, "data", "chat data needs a chat template: data.chat_template (a ",
             "tokenizer_config.json or .jinja file), or a data.tokenizer with a ",
             "tokenizer_config.json beside it");
  const std::string dir = std::filesystem::path(tokenizer).parent_path().string();
  return (dir.empty() ? std::string() : dir + "/") + "tokenizer_config.json";
}

void encode_conversation(const ChatTemplate& tmpl, const DocumentEncoder& encoder,
                         const jinja::Value& messages, const std::string& where,
                         std::vector<int32_t>& ids, std::vector<uint8_t>& mask) {
  try {
    for (const auto& [text, trained] : tmpl.pieces(messages)) {
      encoder.encode(text, ids);
      mask.resize(ids.size(), trained ? 1 : 0);
    }
  } catch (const Error& e) {
    HP_THROW(ValueError, "data", where, ": ", e.what());
  }
  ids.push_back(encoder.separator_id());
  mask.push_back(0);
}

}  // namespace hp::data
