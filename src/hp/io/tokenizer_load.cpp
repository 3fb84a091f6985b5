// tokenizer.json → TokenizerImpl: the model, added tokens and post-processor here; normalizers,
// pre-tokenizers and decoders in tokenizer_{normalizers,pretokenizers,decoders}.cpp. Every
// component hp does not implement is rejected naming the file and key, rather than tokenizing
// differently from the `tokenizers` package.
#include <algorithm>
#include <limits>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer_impl.h"

namespace hp::io::detail {

namespace {

[[noreturn]] void unsupported(const Json& node, std::string_view what) {
  node.fail(hp::detail::cat("unsupported ", what));
}

int32_t token_id(const Json& node) {
  uint64_t v = node.as_uint();
  if (v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    node.fail(hp::detail::cat("token id ", v, " out of range"));
  return static_cast<int32_t>(v);
}

std::unique_ptr<Model> load_model(const Json& model) {
  std::string type = model.get_string_or("type", "BPE");
  if (type != "BPE") unsupported(model["type"], "model type \"" + type + "\"");
  if (auto d = model.find("dropout"); d && !d->is_null() && d->as_double() != 0.0)
    unsupported(*d, "BPE dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model.get_string_or(key, "").empty()) unsupported(model[key], key);

  // The vocab can hold 100k+ entries: walk the nodes and only build paths for errors.
  Json vocab_node = model.at("vocab");
  if (!vocab_node.is_object())
    vocab_node.fail("expected object, got " + std::string(vocab_node.type_name()));
  TokenMap vocab;
  vocab.reserve(vocab_node.size());
  for (const auto& [token, v] : vocab_node.value().members()) {
    if (v.type() != JsonValue::Type::unsigned_integer ||
        v.as_uint() > std::numeric_limits<int32_t>::max())
      token_id(vocab_node[token]);  // throws with the key path
    vocab.emplace(token, static_cast<int32_t>(v.as_uint()));
  }

  Json merges_node = model.at("merges");
  if (!merges_node.is_array())
    merges_node.fail("expected array, got " + std::string(merges_node.type_name()));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_node.size());
  const std::vector<JsonValue>& raw_merges = merges_node.value().elements();
  for (size_t i = 0; i < raw_merges.size(); ++i) {
    const JsonValue& m = raw_merges[i];
    std::pair<std::string, std::string> pair;
    if (m.is_string()) {
      // Legacy "a b" form: exactly one space (byte-level tokens never contain a raw space).
      const std::string& s = m.as_string();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        merges_node.at(i).fail("merge \"" + s + "\" is not two tokens separated by one space");
      pair = {s.substr(0, sp), s.substr(sp + 1)};
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      pair = {m[0].as_string(), m[1].as_string()};
    } else {
      merges_node.at(i).fail("merge must be \"a b\" or [\"a\", \"b\"], got " + m.dump());
    }
    for (const std::string* t : {&pair.first, &pair.second})
      if (!vocab.count(*t)) merges_node.at(i).fail("token \"" + *t + "\" is not in model.vocab");
    if (!vocab.count(pair.first + pair.second))
      merges_node.at(i).fail("merged token \"" + pair.first + pair.second +
                             "\" is not in model.vocab");
    merges.push_back(std::move(pair));
  }

  BpeOptions opt;
  if (auto u = model.find("unk_token"); u && !u->is_null()) {
    opt.unk_token = u->as_string();
    if (!vocab.count(*opt.unk_token))
      u->fail("unk_token \"" + *opt.unk_token + "\" is not in model.vocab");
  }
  opt.fuse_unk = model.get_bool_or("fuse_unk", false);
  opt.ignore_merges = model.get_bool_or("ignore_merges", false);
  opt.byte_fallback = model.get_bool_or("byte_fallback", false);
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(opt));
}

void load_post_processor(const Json& node, TokenizerImpl& t) {
  if (node.is_null()) return;
  std::string type = node.get_string("type");
  if (type == "Sequence") {
    for (const Json& p : node.at("processors").elements()) load_post_processor(p, t);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets, which hp does not report.
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    // [CLS] A [SEP] / <s> A </s>: "cls" and "sep" are [token, id] pairs.
    if (t.single_template) unsupported(node, "second template post-processor");
    auto id_of = [&](const char* key) { return token_id(node.at(key).at(1)); };
    t.single_template =
        std::vector<TemplateItem>{{false, {id_of("cls")}}, {true, {}}, {false, {id_of("sep")}}};
  } else if (type == "TemplateProcessing") {
    if (t.single_template) unsupported(node, "second TemplateProcessing");
    Json specials = node.at("special_tokens");
    std::vector<TemplateItem> items;
    for (const Json& item : node.at("single").elements()) {
      if (auto seq = item.find("Sequence")) {
        if (seq->get_string("id") != "A")
          unsupported(*seq, "single template sequence other than A");
        items.push_back({true, {}});
      } else if (auto sp = item.find("SpecialToken")) {
        Json entry = specials.at(sp->get_string("id"));
        std::vector<int32_t> ids;
        for (const Json& id : entry.at("ids").elements()) ids.push_back(token_id(id));
        items.push_back({false, std::move(ids)});
      } else {
        unsupported(item, "template item " + item.dump());
      }
    }
    t.single_template = std::move(items);
  } else {
    unsupported(node["type"], "post_processor type \"" + type + "\"");
  }
}

}  // namespace

void index_added_tokens(TokenizerImpl& t) {
  for (size_t i = 0; i < t.added.size(); ++i) {
    const AddedToken& a = t.added[i];
    t.added_by_id[a.id] = i;
    t.added_by_content[a.content] = a.id;
    if (a.content.empty()) continue;
    AddedMatcher& m = a.normalized ? t.normalized_matcher : t.raw_matcher;
    m.by_first_byte[static_cast<unsigned char>(a.content[0])].push_back(&a);
    m.empty = false;
  }
  for (AddedMatcher* m : {&t.raw_matcher, &t.normalized_matcher})
    for (auto& list : m->by_first_byte)
      std::stable_sort(list.begin(), list.end(), [](const AddedToken* a, const AddedToken* b) {
        return a->content.size() > b->content.size();
      });
}

std::shared_ptr<const TokenizerImpl> load_tokenizer(std::string_view json_text,
                                                    std::string source) {
  Json root = parse_json(json_text, source);
  auto t = std::make_shared<TokenizerImpl>();
  t->source = std::move(source);
  t->model = load_model(root.at("model"));

  if (auto n = root.find("normalizer")) t->normalizer = load_normalizer(*n);
  if (auto p = root.find("pre_tokenizer")) t->pre_tokenizer = load_pre_tokenizer(*p);
  if (auto p = root.find("post_processor")) load_post_processor(*p, *t);
  if (auto d = root.find("decoder")) t->decoder = load_decoder(*d);

  if (auto list = root.find("added_tokens"); list && !list->is_null()) {
    for (const Json& a : list->elements()) {
      AddedToken tok;
      tok.id = token_id(a.at("id"));
      tok.content = a.get_string("content");
      tok.special = a.get_bool_or("special", false);
      tok.single_word = a.get_bool_or("single_word", false);
      tok.lstrip = a.get_bool_or("lstrip", false);
      tok.rstrip = a.get_bool_or("rstrip", false);
      tok.normalized = a.get_bool_or("normalized", !tok.special);
      // Normalized tokens are matched against normalized text, so normalize them too.
      if (tok.normalized && t->normalizer) t->normalizer->normalize(tok.content);
      t->added.push_back(std::move(tok));
    }
  }
  index_added_tokens(*t);
  return t;
}

}  // namespace hp::io::detail
