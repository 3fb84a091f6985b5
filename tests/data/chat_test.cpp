// Chat templates: the rendering of every supported family equals transformers' apply_chat_template
// (fixtures: tools/make_chat_fixtures.py), the jinja subset's own rules, and the loss mask of an
// encoded conversation.
#include "hp/data/chat.h"

#include <gtest/gtest.h>

#include <set>

#include "data/data_test_util.h"
#include "hp/core/error.h"
#include "hp/data/encoder.h"
#include "test_dir.h"

namespace hp::data {
namespace {

std::string chat_fixture(const std::string& name) {
  return std::string(HP_TEST_DIR) + "/fixtures/chat/" + name;
}

// The conversation of a record whose messages are the JSON text `messages`.
jinja::Value conversation(const std::string& messages) {
  return parse_conversation(io::parse_json(R"({"messages": )" + messages + "}", "test:1"),
                            "messages", "test:1");
}

std::string render(std::string_view source, const jinja::Dict& ctx = {}) {
  return jinja::Template(source, "t").render(ctx).text;
}

TEST(ChatTemplate, MatchesTransformersForEveryFamily) {
  const io::Json cases =
      io::parse_json(test::read_bytes(chat_fixture("expected.json")), "expected.json");
  ASSERT_GE(cases.size(), 30u);
  std::set<std::string> families;
  for (const io::Json& c : cases.elements()) {
    const std::string family = c.get_string("family");
    families.insert(family);
    const ChatTemplate t = ChatTemplate::load(chat_fixture(family + "/tokenizer_config.json"));
    const jinja::Value messages = conversation(c.at("messages").dump());
    SCOPED_TRACE(family + ": " + c.at("messages").dump());
    const bool add_generation_prompt = c.get_bool("add_generation_prompt");
    if (c.contains("error")) {
      const std::string error = c.get_string("error");
      EXPECT_THROW_MSG(t.render(messages, add_generation_prompt), ValueError, error.c_str());
    } else {
      EXPECT_EQ(t.render(messages, add_generation_prompt), c.get_string("text"));
    }
  }
  EXPECT_EQ(families, (std::set<std::string>{"llama3", "qwen2", "qwen3", "deepseek_v3", "mistral"}));
}

TEST(ChatTemplate, GenerationPromptOfEachFamily) {
  auto prompt = [](const std::string& family) {
    return ChatTemplate::load(chat_fixture(family + "/tokenizer_config.json")).generation_prompt();
  };
  EXPECT_EQ(prompt("llama3"), "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(prompt("qwen2"), "<|im_start|>assistant\n");
  EXPECT_EQ(prompt("qwen3"), "<|im_start|>assistant\n");
  EXPECT_EQ(prompt("deepseek_v3"), "<｜Assistant｜>");
  EXPECT_EQ(prompt("mistral"), "");
}

TEST(Jinja, ExpressionsFiltersAndScopes) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 1 / 2 }}"), "7 3 -4 1 0.5");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ [1, 'x'] }} {{ {'k': true} }}"), "a1None [1, 'x'] {'k': True}");
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ 'abc'[::-1] }}|{{ 'héllo'[1:3] }}|{{ 'héllo' | length }}"),
            "x|cba|él|5");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ 'xxhixx'.strip('x') }} {{ 'Ab'.startswith('A') }}"),
            "['a', 'b', '', 'c'] hi True");
  EXPECT_EQ(render("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ 3 is not odd }}"),
            "False True True False");
  EXPECT_EQ(render("{{ 0 or 'y' }} {{ 'x' and 0 }} {{ 'yes' if 1 < 2 < 3 else 'no' }} {{ 2 in [1, 2] }}"),
            "y 0 yes True");
  // A set inside a loop does not leak out of it; a namespace carries state across iterations.
  EXPECT_EQ(render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}"
                   "{% set n = n + 1 %}{% set ns.n = ns.n + i %}{% endfor %}{{ n }} {{ ns.n }}"),
            "0 3");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() if v > 1 %}{{ k }}={{ v }}"
                   "{{ loop.length }}{% else %}none{% endfor %}"),
            "b=21");
  EXPECT_EQ(render("{% for i in [1, 2, 3, 4] %}{% if i == 2 %}{% continue %}{% endif %}"
                   "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{{ {'b': [1, {'c': 'é\"'}], 'a': none} | tojson }}"), "{\"b\": [1, {\"c\": \"é\\\"\"}], \"a\": null}");
  EXPECT_EQ(render("{{ [{'r': 'u'}, {'r': 'a'}] | selectattr('r', 'equalto', 'u') | list | length }}"), "1");
}

TEST(Jinja, WhitespaceControlAsTransformers) {
  // trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before one;
  // '-' strips every whitespace on its side, '+' keeps the indentation.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render("x  {{- ' y ' -}}  z"), "x y z");
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}"), "  k");
  EXPECT_EQ(render("{# c #}\n{{ '}}' }}"), "}}");
}

TEST(Jinja, ErrorsNameTemplateAndLine) {
  EXPECT_THROW_MSG(jinja::Template("a\n{% macro m() %}{% endmacro %}", "tc.json"), ValueError,
                   "[chat] tc.json:2: '{% macro %}' is not supported");
  EXPECT_THROW_MSG(jinja::Template("{% if x %}", "tc.json"), ValueError, "missing '{% endif %}'");
  EXPECT_THROW_MSG(render("\n{{ x.y }}"), ValueError, "t:2: 'y' of an undefined value");
  EXPECT_THROW_MSG(render("{{ 'a' + 1 }}"), ValueError, "unsupported operand types for +: 'str' and 'int'");
  EXPECT_THROW_MSG(render("{{ raise_exception('no system role') }}"), ValueError,
                   "the template refused the conversation: no system role");
}

TEST(ChatData, BadMessagesAreNamed) {
  auto parse = [](const std::string& line) {
    return parse_conversation(io::parse_json(line, "chat.jsonl:7"), "messages", "chat.jsonl:7");
  };
  EXPECT_THROW_MSG(parse(R"({"text": "x"})"), ValueError, "chat.jsonl:7: the line has no field 'messages'");
  EXPECT_THROW_MSG(parse(R"({"messages": [{"role": "bot", "content": "x"}]})"), ValueError,
                   "chat.jsonl:7: messages[0].role 'bot' is not one of system, user, assistant, tool");
  EXPECT_THROW_MSG(parse(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [1]}]})"),
                   ValueError, "chat.jsonl:7: messages[1].content is a array, not a string");
  EXPECT_THROW_MSG(parse(R"({"messages": [{"content": "x"}]})"), ValueError, "messages[0].role is missing");
  EXPECT_THROW_MSG(parse(R"({"messages": []})"), ValueError, "has no messages");
}

// Ids of the trained tokens, and of the rest, decoded.
std::pair<std::string, std::string> split_by_mask(const DocumentEncoder& enc,
                                                  const std::vector<int32_t>& ids,
                                                  const std::vector<uint8_t>& mask) {
  std::vector<int32_t> on, off;
  for (size_t i = 0; i < ids.size(); ++i) (mask[i] ? on : off).push_back(ids[i]);
  return {enc.decode(on), enc.decode(off)};
}

TEST(ChatData, MaskCoversAssistantRepliesOnly) {
  const std::string msgs =
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "Bye"},
          {"role": "assistant", "content": "See you"}])";
  const DocumentEncoder qwen(test::tokenizer_fixture("qwen2"), "");
  const ChatTemplate qt = ChatTemplate::load(chat_fixture("qwen2/tokenizer_config.json"));
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  encode_conversation(qt, qwen, conversation(msgs), "x:1", ids, mask);
  ASSERT_EQ(ids.size(), mask.size());
  EXPECT_EQ(ids.back(), qwen.separator_id());
  EXPECT_EQ(mask.back(), 0);
  auto [on, off] = split_by_mask(qwen, ids, mask);
  EXPECT_EQ(on, "Hello there<|im_end|>\nSee you<|im_end|>\n");
  EXPECT_EQ(off, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                 "<|im_start|>assistant\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
                 "<|endoftext|>");
  // The pieces encode as the whole rendering does: a mask never changes the ids.
  std::vector<int32_t> whole;
  qwen.encode(qt.render(conversation(msgs)), whole);
  whole.push_back(qwen.separator_id());
  EXPECT_EQ(ids, whole);

  const DocumentEncoder llama(test::tokenizer_fixture("llama3"), "");
  const ChatTemplate lt = ChatTemplate::load(chat_fixture("llama3/tokenizer_config.json"));
  ids.clear(), mask.clear();
  encode_conversation(lt, llama, conversation(msgs), "x:1", ids, mask);
  std::tie(on, off) = split_by_mask(llama, ids, mask);
  EXPECT_EQ(on, "Hello there<|eot_id|>See you<|eot_id|>");
}

TEST(ChatData, GenerationBlocksChooseTheTrainedText) {
  const ChatTemplate t("{% for m in messages %}[{{ m.role }}]{% if m.role == 'assistant' %}"
                       "{% generation %}{{ m.content }}.{% endgeneration %}{% else %}{{ m.content }}"
                       "{% endif %}{% endfor %}",
                       "gen", "", "");
  const auto pieces = t.pieces(
      conversation(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])"));
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0], (std::pair<std::string, bool>{"[user]q[assistant]", false}));
  EXPECT_EQ(pieces[1], (std::pair<std::string, bool>{"a.", true}));
}

TEST(ChatData, TemplateFileErrors) {
  test::TempDir dir;
  test::write_file(dir.file("tc.json"), R"({"bos_token": "<s>"})");
  EXPECT_THROW_MSG(ChatTemplate::load(dir.file("tc.json")), IoError, "has no chat_template");
  EXPECT_THROW_MSG(ChatTemplate::load(dir.file("missing.json")), IoError, "missing.json");
}

}  // namespace
}  // namespace hp::data
