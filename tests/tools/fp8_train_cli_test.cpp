// Training from an FP8 block-quantized checkpoint and exporting the result in the same format:
// `hp train` on the DeepSeek-V3 FP8 fixture (dequantized on load, the MTP layer skipped with one
// log line), `hp ckpt export-hf --fp8-blocks`, then `hp forward` on the export, whose logits stay
// close to those of the unquantized export of the same checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "hp/io/safetensors.h"
#include "test_dir.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_hp;

std::vector<float> read_floats(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(f), {});
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

TEST(Fp8TrainCli, TrainsFromAnFp8CheckpointAndExportsFp8Blocks) {
  ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
  const fs::path dir = fs::temp_directory_path() / ("hp_fp8_train_cli_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::vector<uint16_t> ids(3000);  // token ids below the fixture's vocabulary of 96
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>((i * 37 + i / 5) % 96);
    std::ofstream(dir / "tokens.u16", std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 2));
  }
  std::ofstream(dir / "t.yaml") << "model: {path: " << HP_TEST_DIR
                                << "/../models/fixtures/deepseek_v3_fp8}\n"
                                << "data: {path: " << (dir / "tokens.u16").string()
                                << ", format: tokens_u16}\n"
                                << "training: {steps: 2, batch_size: 2, seq_len: 16}\n"
                                << "metrics: {peak_tflops: 1.0, progress: none}\n"
                                << "run: {dir: " << (dir / "run").string() << "}\n";
  // hp model info counts the FP8 weights as parameters and their block scales apart.
  auto r = run_hp("model info " + std::string(HP_TEST_DIR) + "/../models/fixtures/deepseek_v3_fp8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("F8_E4M3    198272 params"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("quantization  FP8 e4m3, a scale per 128 x 128 block (90 scales)"),
            std::string::npos)
      << r.output;

  r = run_hp("train " + (dir / "t.yaml").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string skip = "skipping 7 tensor(s) of the next-token-prediction (MTP) layer(s)";
  const size_t at = r.output.find(skip);
  EXPECT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(skip, at + 1), std::string::npos) << r.output;

  const std::string run = (dir / "run").string(), fp8 = (dir / "fp8").string(),
                    plain = (dir / "plain").string();
  r = run_hp("ckpt export-hf " + run + " " + fp8 + " --fp8-blocks");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_hp("ckpt export-hf " + run + " " + plain);
  ASSERT_EQ(r.code, 0) << r.output;
  {
    const auto ckpt = io::SafetensorsCheckpoint::open(fp8);
    EXPECT_EQ(ckpt.tensor("model.layers.0.mlp.gate_proj.weight").dtype, DType::f8e4m3);
    const auto& scale = ckpt.tensor("model.layers.0.mlp.gate_proj.weight_scale_inv");
    EXPECT_EQ(scale.dtype, DType::f32);
    EXPECT_EQ(scale.shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(ckpt.tensor("model.layers.1.mlp.experts.3.down_proj.weight").dtype, DType::f8e4m3);
    for (const char* kept :
         {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
          "model.layers.1.mlp.gate.weight", "model.layers.0.self_attn.kv_a_layernorm.weight"})
      EXPECT_EQ(ckpt.tensor(kept).dtype, DType::f32) << kept;
  }

  std::ofstream(dir / "tokens.txt") << "1 2 3 4 5 6 7 8\n";
  for (const std::string& model : {fp8, plain}) {
    r = run_hp("forward --model " + model + " --tokens " + (dir / "tokens.txt").string() +
               " --out " + model + ".f32");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  const auto a = read_floats(fp8 + ".f32"), b = read_floats(plain + ".f32");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 8u * 96u);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(double(a[i]) - b[i]));
  EXPECT_GT(diff, 0.0);  // the weights were quantized
  EXPECT_LT(diff, 0.3);  // by E4M3 with a scale per block: logits of magnitude ~4 move by ~0.1
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hp::cli
