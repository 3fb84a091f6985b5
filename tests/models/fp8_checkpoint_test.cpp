// FP8 block-quantized checkpoints (DeepSeek-V3 / Kimi-K2 format, mx/fp8_blocks.h) against the
// fixture of tools/make_fp8_fixtures.py: loading gives transformers' logits of the dequantized
// model, the next-token-prediction layer is skipped with one log line, bad scales and
// quantization_configs are named, and `hp ckpt export-hf --fp8-blocks` writes the same codes back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "error_of.h"
#include "hp/autograd/grad_mode.h"
#include "hp/checkpoint/dcp.h"
#include "hp/io/json.h"
#include "hp/io/safetensors.h"
#include "hp/models/hf/registry.h"
#include "hp/models/hf/weights.h"
#include "models/compare.h"
#include "test_dir.h"

namespace hp::models {
namespace {

namespace fs = std::filesystem;
using hp::testing::error_of;
using testing::max_abs_diff;

const std::string kFixture = std::string(HP_TEST_DIR) + "/fixtures/deepseek_v3_fp8";

Tensor load_ref(const io::SafetensorsFile& f, const std::string& name) {
  const auto& t = f.tensor(name);
  return from_blob(const_cast<std::byte*>(t.data), t.shape, t.dtype, nullptr).clone();
}

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

Tensor logits_of(CausalLM& model) {
  autograd::NoGradGuard no_grad;
  const auto ref = io::SafetensorsFile::open(kFixture + "/reference.safetensors");
  return model.forward(load_ref(ref, "input_ids"));
}

class Fp8Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hp_fp8_checkpoint_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A copy of the fixture in `name` whose config.json has `edit` applied and whose weights are
  // the fixture's with `drop` removed and `add` added.
  std::string variant(const std::string& name, const std::function<void(io::JsonValue&)>& edit,
                      const std::string& drop = "", const io::SafetensorsEntry* add = nullptr) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    io::JsonValue cfg = io::parse_json_value(read(kFixture + "/config.json"), "config.json");
    edit(cfg);
    std::ofstream(d / "config.json") << cfg.dump(2);
    const auto src = io::SafetensorsFile::open(kFixture + "/model.safetensors");
    std::vector<io::SafetensorsEntry> entries;
    for (const auto& t : src.tensors())
      if (t.name != drop) entries.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
    if (add) entries.push_back(*add);
    io::write_safetensors((d / "model.safetensors").string(), entries);
    return d.string();
  }

  fs::path dir_;
};

// Logits of the FP8 checkpoint, dequantized on load, within 1e-4 of transformers' logits of the
// dequantized model; the 2 × 2-block weight with partial edge blocks dequantizes bitwise as the
// script does; the MTP layer (model.layers.2.*) is skipped with exactly one log line.
TEST_F(Fp8Checkpoint, LoadsToTheDequantizedModelsLogits) {
  ::testing::internal::CaptureStderr();
  auto model = load_model(kFixture);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_NE(log.find("model.layers.2.*"), std::string::npos) << log;
  EXPECT_NE(log.find("num_nextn_predict_layers = 1"), std::string::npos) << log;
  EXPECT_EQ(model->config().num_nextn_predict_layers, 1);
  ASSERT_TRUE(model->config().fp8_blocks.has_value());
  EXPECT_EQ(model->config().fp8_blocks->rows, 128);

  const auto ref = io::SafetensorsFile::open(kFixture + "/reference.safetensors");
  const std::string w = "model.layers.0.mlp.gate_proj.weight";
  EXPECT_EQ(model->parameter(w).to_vector(), load_ref(ref, "dequant." + w).to_vector());
  EXPECT_LE(max_abs_diff(logits_of(*model), load_ref(ref, "logits")), 1e-4);
}

// Bad input names the file, the key or tensor, and the value.
TEST_F(Fp8Checkpoint, BadScalesAndConfigsAreNamed) {
  const std::string w = "model.layers.0.mlp.gate_proj.weight";
  const std::string scale = w + "_scale_inv";
  auto none = [](io::JsonValue&) {};

  std::string d = variant("no_scale", none, scale);
  std::string e = error_of([&] { load_model(d); });
  EXPECT_NE(e.find(d + "/model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("FP8 weight '" + w + "' [160, 144] has no scale tensor '" + scale + "'"),
            std::string::npos)
      << e;

  const std::vector<float> small(2, 1.0f);
  const io::SafetensorsEntry wrong{scale, DType::f32, {1, 2}, small.data(), 8};
  d = variant("wrong_scale", none, scale, &wrong);
  e = error_of([&] { load_model(d); });
  EXPECT_NE(e.find(d + "/model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("scale tensor '" + scale + "' is F32 [1, 2], expected"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 2]"), std::string::npos) << e;
  EXPECT_NE(e.find("weight_block_size [128, 128]"), std::string::npos) << e;

  d = variant("block_size", [](io::JsonValue& c) {
    c["quantization_config"]["weight_block_size"] = io::JsonValue::array({128});
  });
  e = error_of([&] { load_model(d); });
  EXPECT_NE(e.find(d + "/config.json: quantization_config.weight_block_size: unsupported block "
                       "size [128]"),
            std::string::npos)
      << e;

  d = variant("fmt", [](io::JsonValue& c) { c["quantization_config"]["fmt"] = "e5m2"; });
  e = error_of([&] { load_model(d); });
  EXPECT_NE(e.find(d + "/config.json: quantization_config.fmt: unsupported FP8 format 'e5m2'"),
            std::string::npos)
      << e;

  d = variant("method",
              [](io::JsonValue& c) { c["quantization_config"]["quant_method"] = "gptq"; });
  e = error_of([&] { load_model(d); });
  EXPECT_NE(e.find("quantization_config.quant_method: unsupported quantization method 'gptq'"),
            std::string::npos)
      << e;

  // FP8 weights without quantization_config: never read as unscaled codes.
  d = variant("no_config", [](io::JsonValue& c) { c.erase("quantization_config"); });
  e = error_of([&] { load_model(d); });
  EXPECT_NE(e.find("unexpected tensor"), std::string::npos) << e;
  EXPECT_NE(e.find("_scale_inv"), std::string::npos) << e;
}

// The FP8 checkpoint loaded, saved as a DCP checkpoint (as training saves it) and exported with
// --fp8-blocks: the same tensors (less the skipped MTP layer) with bitwise the same FP8 codes and
// unquantized tensors, scales equal, config.json with the quantization_config, and the same logits.
TEST_F(Fp8Checkpoint, ExportWithFp8BlocksWritesTheSameCodes) {
  ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
  ::testing::internal::CaptureStderr();
  auto model = load_model(kFixture);
  ::testing::internal::GetCapturedStderr();
  std::vector<checkpoint::Chunk> chunks;
  for (const auto& [fqn, t] : model->named_parameters())
    chunks.push_back({fqn, t, t.shape(), std::vector<int64_t>(t.shape().size(), 0)});
  checkpoint::SaveOptions opt;
  opt.extra_files = {{"config.json", model_config_to_json(model->config())}};
  checkpoint::save((dir_ / "run").string(), 1, chunks, "{}", nullptr, opt);

  const std::string out = (dir_ / "hf").string();
  const auto r = test::run_hp("ckpt export-hf " + (dir_ / "run").string() + " " + out +
                              " --fp8-blocks --max-shard-bytes 100000");
  ASSERT_EQ(r.code, 0) << r.output;

  const auto src = io::SafetensorsCheckpoint::open(kFixture);
  const auto got = io::SafetensorsCheckpoint::open(out);
  std::vector<std::string> want_names;
  for (const auto& n : src.names())
    if (n.rfind("model.layers.2.", 0) != 0) want_names.push_back(n);
  ASSERT_EQ(got.names(), want_names);
  int fp8 = 0;
  for (const auto& n : want_names) {
    const auto& a = src.tensor(n);
    const auto& b = got.tensor(n);
    ASSERT_EQ(b.dtype, a.dtype) << n;
    ASSERT_EQ(b.shape, a.shape) << n;
    if (n.size() > 10 && n.compare(n.size() - 10, 10, "_scale_inv") == 0) {
      const auto* x = reinterpret_cast<const float*>(a.data);
      const auto* y = reinterpret_cast<const float*>(b.data);
      for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(y[i], x[i], 1e-7 * x[i]) << n;
      continue;
    }
    fp8 += a.dtype == DType::f8e4m3;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << n;
  }
  EXPECT_EQ(fp8, 40);  // 8 dense-layer + 32 MoE-layer linear weights

  const io::Json q = io::read_json_file(out + "/config.json").at("quantization_config");
  EXPECT_EQ(q.get_string("quant_method"), "fp8");
  EXPECT_EQ(q.get_string("fmt"), "e4m3");
  EXPECT_EQ(q.at("weight_block_size").dump(), "[128,128]");
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));  // sharded, scales beside

  auto back = load_model(out);
  EXPECT_LE(max_abs_diff(logits_of(*back), logits_of(*model)), 1e-6);
}

}  // namespace
}  // namespace hp::models
