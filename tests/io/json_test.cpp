#include "hp/io/json.h"

#include <cmath>
#include <fstream>

#include "io/io_test_util.h"

namespace hp::io {
namespace {

TEST(Json, TypedGettersNameThePath) {
  Json j = parse_json(R"({"model": {"dim": 64, "eps": 1e-5, "name": "llama", "tie": true,
                         "layers": [{"heads": 4}, {"heads": "x"}], "neg": -3, "f": 2.5}})",
                      "config.json");
  Json m = j["model"];
  EXPECT_EQ(m.get_int("dim"), 64);
  EXPECT_EQ(m.get_double("eps"), 1e-5);
  EXPECT_EQ(m.get_string("name"), "llama");
  EXPECT_TRUE(m.get_bool("tie"));
  EXPECT_EQ(m.get_int("neg"), -3);
  EXPECT_EQ(m.get_int_or("absent", 7), 7);
  EXPECT_EQ(m["layers"].at(0).get_int("heads"), 4);
  EXPECT_EQ(m["layers"].size(), 2u);
  EXPECT_EQ(m.items().size(), 7u);
  EXPECT_THROW_MSG(m["layers"].at(1).get_int("heads"), IoError, "[json] config.json",
                   "model.layers[1].heads", "expected integer, got string");
  EXPECT_THROW_MSG(m.get_int("f"), IoError, "model.f", "non-integral number 2.5");
  EXPECT_THROW_MSG(m.at("hidden"), IoError, "config.json", "model", "missing key \"hidden\"");
  EXPECT_THROW_MSG(m["neg"].as_uint(), IoError, "model.neg", "non-negative");
  EXPECT_THROW_MSG(m["name"].as_bool(), IoError, "model.name", "expected boolean");
  EXPECT_THROW_MSG(m["layers"].at(5), IoError, "index 5 out of range");
  EXPECT_THROW_MSG(m["layers"].at(-1), IoError, "negative index -1");
}

TEST(Json, ParseErrorsGiveLineAndColumn) {
  EXPECT_THROW_MSG(parse_json("{\n  \"a\": 1,\n  \"b\": tru\n}", "c.json"), IoError,
                   "[json] c.json: ", "at line 3 col");
  EXPECT_THROW_MSG(parse_json("{\"a\": 1} x", "c.json"), IoError, "c.json", "line 1");
  EXPECT_THROW_MSG(parse_json("{\"a\": \"\xff\"}", "c.json"), IoError, "c.json", "UTF-8");
  EXPECT_THROW_MSG(parse_json("", "c.json"), IoError, "c.json");
}

TEST(Json, DuplicateKeysAreErrors) {
  EXPECT_THROW_MSG(parse_json(R"({"a": {"b": 1, "b": 2}})", "d.json"), IoError, "d.json",
                   "duplicate key \"b\"", "'a'");
  EXPECT_THROW_MSG(parse_json(R"({"x": [{"k": 1}, {"k": 1, "k": 2}]})", "d.json"), IoError,
                   "duplicate key \"k\"", "x[1]");
  // The same key in sibling objects is fine.
  EXPECT_NO_THROW(parse_json(R"([{"k": 1}, {"k": 2}])", "d.json"));
}

// The bytes nlohmann::json::dump writes for the same document (recorded from it): numbers keep
// their kind ("1" vs "1.0"), a float is widened, non-finite doubles are null, escapes as
// nlohmann's.
TEST(JsonValue, DumpWritesNlohmannsBytes) {
  JsonValue j;
  j["zeta"] = 1;
  j["alpha"] = 1.0;
  j["mid"] = 0.1;
  j["nan"] = std::nan("");
  j["str"] = "\xc3\xa9\"\n\x01\t\\/";
  j["u64"] = uint64_t{18446744073709551615u};
  j["flt"] = 1e-5f;
  j["big"] = 1e300;
  j["negzero"] = -0.0;
  j["arr"] = JsonValue::array({1, 2.5, "x", nullptr, false});
  j["empty"] = JsonValue::object();
  j["nested"] = JsonValue::object(
      {{"b", JsonValue::object({{"y", 1}, {"x", 2}})}, {"a", std::vector<int64_t>{3, 4}}});
  j["zeta"] = 7;  // replaced where it was
  EXPECT_EQ(
      j.dump(),
      "{\"zeta\":7,\"alpha\":1.0,\"mid\":0.1,\"nan\":null,\"str\":\"\xc3\xa9\\\"\\n\\u0001\\t"
      "\\\\/\",\"u64\":18446744073709551615,\"flt\":9.999999747378752e-06,\"big\":1e+300,"
      "\"negzero\":-0.0,\"arr\":[1,2.5,\"x\",null,false],\"empty\":{},\"nested\":{\"b\":{\"y\":1,"
      "\"x\":2},\"a\":[3,4]}}");
  EXPECT_EQ(j["nested"].dump(1, KeyOrder::sorted),
            "{\n \"a\": [\n  3,\n  4\n ],\n \"b\": {\n  \"x\": 2,\n  \"y\": 1\n }\n}");
  EXPECT_EQ(JsonValue::array().dump(2), "[]");
  EXPECT_THROW_MSG(JsonValue("\xff").dump(), IoError, "[json] cannot serialize", "UTF-8");
}

TEST(JsonValue, ObjectsKeepOrderAndLookUpLargeOnes) {
  JsonValue o = JsonValue::object();
  for (int i = 0; i < 100; ++i) o[std::to_string(99 - i)] = i;  // past the index threshold
  EXPECT_EQ(o.size(), 100u);
  EXPECT_EQ(o.members().front().first, "99");
  EXPECT_EQ(o.find("0")->as_int(), 99);
  o["50"] = "x";
  EXPECT_EQ(o.members()[49].second.as_string(), "x");
  EXPECT_TRUE(o.erase("99"));
  EXPECT_FALSE(o.erase("99"));
  EXPECT_EQ(o.find("0")->as_int(), 99);  // positions after the erased member moved
  EXPECT_EQ(o.members().front().first, "98");
  const JsonValue copy = o;
  EXPECT_EQ(copy.find("1")->as_int(), 98);
  o.update(JsonValue::object({{"1", true}, {"new", nullptr}}));
  EXPECT_TRUE(o.find("1")->as_bool());
  EXPECT_EQ(o.members().back().first, "new");

  JsonValue a;
  a.push_back(1);
  a.push_back("two");
  a.erase(0);
  EXPECT_EQ(a.dump(), "[\"two\"]");
  EXPECT_THROW(a["key"], InternalError);
  EXPECT_THROW(JsonValue::object({{"k", 1}, {"k", 2}}), InternalError);
  EXPECT_THROW_MSG(a[size_t{0}].as_int(), IoError, "[json] expected integer, got string");
  EXPECT_EQ(JsonValue(-1).as_double(), -1.0);
  EXPECT_THROW_MSG(JsonValue(-1).as_uint(), IoError, "expected non-negative integer, got -1");
}

TEST(JsonValue, ParsedValueKeepsTheDocumentOrder) {
  const std::string text = R"({"b":1,"a":{"z":[1,2.5,"x"],"y":null},"c":-2})";
  EXPECT_EQ(parse_json_value(text, "v.json").dump(), text);
  // A Json view sorts; its value() is the node itself.
  const Json sorted = parse_json(text, "v.json");
  EXPECT_EQ(sorted.dump(), R"({"a":{"y":null,"z":[1,2.5,"x"]},"b":1,"c":-2})");
  EXPECT_EQ(sorted["a"].value().find("z")->size(), 3u);
  EXPECT_THROW_MSG(sorted["a"]["z"].as_double_list(), IoError, "v.json: a.z[2]: expected number");
}

TEST(Json, TryParseIsLenient) {
  std::string why;
  EXPECT_FALSE(try_parse_json("{not json", "l.jsonl", &why));
  EXPECT_EQ(why.rfind("parse error at column ", 0), 0u) << why;
  EXPECT_NE(why.find("syntax error"), std::string::npos) << why;
  EXPECT_FALSE(try_parse_json("{\n\"a\": x}", "l.jsonl", &why));
  EXPECT_EQ(why.rfind("parse error at line 2, column ", 0), 0u) << why;
  const std::optional<Json> j = try_parse_json(R"({"a": 1, "a": 2})", "l.jsonl");
  ASSERT_TRUE(j);
  EXPECT_EQ(j->get_int("a"), 2);  // the last value, as Python's json.loads
  EXPECT_EQ(j->get_uint_or("b", 5u), 5u);
}

TEST(JsonValue, DeepValueIsFreedWithoutRecursion) {
  JsonValue v;
  for (int i = 0; i < 300'000; ++i) {
    JsonValue outer = JsonValue::array();
    outer.push_back(std::move(v));
    v = std::move(outer);
  }
  EXPECT_EQ(v.size(), 1u);
}

TEST(Json, Files) {
  test::TempDir dir;
  std::ofstream(dir.file("ok.json")) << R"({"v": [1, 2, 3]})";
  EXPECT_EQ(read_json_file(dir.file("ok.json"))["v"].at(2).as_int(), 3);
  EXPECT_THROW_MSG(read_json_file(dir.file("missing.json")), IoError, "missing.json",
                   "cannot open");
}

}  // namespace
}  // namespace hp::io

namespace hp::io {
namespace {

// A hostile safetensors header can nest arbitrarily deep within its 100 MB: parsing and freeing
// must not recurse per level.
TEST(Json, DeepNestingDoesNotOverflowTheStack) {
  const size_t depth = 300'000;  // far beyond what an 8 MB stack survives recursively
  std::string text(depth, '[');
  text.append(depth, ']');
  EXPECT_EQ(parse_json(text, "deep.json").size(), 1u);
  EXPECT_THROW_MSG(parse_json(std::string(depth, '['), "deep.json"), IoError, "deep.json");
}

}  // namespace
}  // namespace hp::io
