#include "hp/io/json.h"

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
