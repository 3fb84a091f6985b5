// Sizes in a training config that can only be mistakes (their parameter or batch element count
// overflows int64) fail in set-up, naming the key, before anything is allocated; token ids outside
// the model's vocabulary are named as stored, with their position.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "has.h"
#include "hp/data/dataset.h"
#include "hp/train/config.h"
#include "hp/train/setup.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

using test::has;

ModelSection tiny_model() {
  ModelSection m;
  m.arch = "qwen3";
  m.hidden = 32;
  m.layers = 2;
  m.heads = 4;
  m.kv_heads = 2;
  m.intermediate = 64;
  return m;
}

TEST(SizeBounds, ModelSizesWhoseParameterCountOverflowsNameTheKey) {
  const int64_t big = int64_t(1) << 62;
  EXPECT_EQ(arch_model_config(tiny_model(), 257, 32, -1).hidden_size, 32);
  ModelSection m = tiny_model();
  m.hidden = big;
  std::string e = error_of([&] { arch_model_config(m, 257, 32, -1); });
  EXPECT_TRUE(has(e, "[train] model.hidden") && has(e, "4611686018427387904") &&
              has(e, "overflow int64"))
      << e;
  m = tiny_model();
  m.layers = big;
  e = error_of([&] { arch_model_config(m, 257, 32, -1); });
  EXPECT_TRUE(has(e, "[train] model.layers") && has(e, "overflow int64")) << e;
  m = tiny_model();
  m.vocab = big;
  e = error_of([&] { arch_model_config(m, 257, 32, -1); });
  EXPECT_TRUE(has(e, "[train] model.vocab")) << e;
}

// A u16 token file of `ids`.
std::string token_file(const std::string& name, const std::vector<uint16_t>& ids) {
  const fs::path p = fs::temp_directory_path() / ("hp_size_bounds_" + name + ".u16");
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()),
             static_cast<std::streamsize>(ids.size() * sizeof(uint16_t)));
  return p.string();
}

Config config_for(const std::string& data_path, int64_t vocab, int64_t batch, int64_t seq_len) {
  Config c;
  c.model = tiny_model();
  c.model.vocab = vocab;
  c.data.path = data_path;
  c.data.format = DataFormat::tokens_u16;
  c.training.batch_size = batch;
  c.training.seq_len = seq_len;
  c.training.grad_accum = 1;
  return c;
}

TEST(SizeBounds, BatchWhoseElementCountOverflowsFailsBeforeAllocation) {
  const std::string path = token_file("batch", std::vector<uint16_t>(64, 3));
  data::DatasetOptions o;
  o.path = path;
  o.format = data::DatasetFormat::tokens_u16;
  const auto ds = data::TokenDataset::load(o);
  EXPECT_NE(build_causal_lm(config_for(path, 16, 2, 8), *ds), nullptr);
  const std::string e =
      error_of([&] { build_causal_lm(config_for(path, 16, int64_t(1) << 62, 8), *ds); });
  EXPECT_TRUE(has(e, "training.batch_size = 4611686018427387904") &&
              has(e, "training.seq_len = 8") && has(e, "int64"))
      << e;
}

TEST(SizeBounds, TokenIdOutsideTheVocabularyIsNamedWithItsPosition) {
  std::vector<uint16_t> ids(40, 1);
  ids[5] = 300;
  ids[9] = 500;
  const std::string path = token_file("vocab", ids);
  data::DatasetOptions o;
  o.path = path;
  o.format = data::DatasetFormat::tokens_u16;
  const auto ds = data::TokenDataset::load(o);
  const std::string e = error_of([&] { build_causal_lm(config_for(path, 257, 2, 8), *ds); });
  // The first bad id as stored (300, not the largest id or a clamped one) and where it is.
  EXPECT_TRUE(has(e, "has token ids up to 500 but the model's vocabulary is 257") &&
              has(e, "the first, token id 300, at position 5 of the token stream"))
      << e;
}

}  // namespace
}  // namespace hp::train
