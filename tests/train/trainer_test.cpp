// The training loop end to end on a tiny model and a slice of the bundled corpus: the loss falls,
// runs are bitwise reproducible for any thread count, a resumed run continues exactly as the
// uninterrupted one, MXFP8 tracks the bf16 run, and the run directory holds what it promises.
#include "hp/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "corpus.h"
#include "hp/checkpoint/dcp.h"
#include "hp/checkpoint/export.h"
#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/io/json.h"
#include "hp/models/hf/registry.h"
#include "hp/models/transformer.h"
#include "hp/models/hf/weights.h"
#include "hp/ops/ops.h"
#include "hp/train/config.h"
#include "test_dir.h"
#include "train/train_run.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;

// A ~60k-parameter Qwen3 on the first 200 kB of the KJV corpus (written once per process).
std::string corpus() {
  static const std::string path = testing::corpus_prefix("hp_trainer_test", 200000);
  return path;
}

std::string run_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("hp_trainer_test_" + name);
  fs::remove_all(p);
  return p.string();
}

Config tiny_config(const std::string& name, std::vector<std::string> sets = {}) {
  const std::string yaml = R"(model:
  arch: qwen3
  hidden: 32
  layers: 2
  heads: 4
  kv_heads: 2
  intermediate: 64
data:
  path: )" + corpus() + R"(
optimizer:
  lr: 0.01
lr_scheduler:
  warmup_steps: 2
training:
  steps: 12
  batch_size: 4
  seq_len: 32
  seed: 7
metrics:
  log_every: 100
  progress: none
checkpoint:
  save_final: false
run:
  dir: )" + run_dir(name) + "\n";
  return parse_config(yaml, "tiny.yaml", sets);
}

using test::losses;

using test::quiet_train;

TEST(Trainer, LossFallsAndRunDirHoldsConfigMetricsAndPlot) {
  Config c = tiny_config("falls", {"training.steps=40", "metrics.log_every=5"});
  TrainResult r = quiet_train(c);
  ASSERT_EQ(r.steps.size(), 40u);
  double head = 0, tail = 0;
  for (int i = 0; i < 5; ++i) head += r.steps[size_t(i)].loss, tail += r.steps[size_t(35 + i)].loss;
  EXPECT_LT(tail, head * 0.8) << "loss did not fall: first five " << head / 5 << ", last five "
                              << tail / 5;
  EXPECT_GT(r.tokens_per_s, 0);
  EXPECT_GT(r.mfu, 0);
  EXPECT_GT(r.peak_mem_bytes, 0);
  // The resolved config reloads to the same tree.
  EXPECT_EQ(load_config(c.run.dir + "/config.yaml"), c);
  // metrics.jsonl: steps 1, 5, 10, ..., 40 with the promised keys.
  std::ifstream in(c.run.dir + "/metrics.jsonl");
  std::string line;
  std::vector<int64_t> steps;
  while (std::getline(in, line)) {
    const io::Json j = io::parse_json(line, "metrics.jsonl");
    for (const char* k :
         {"step", "loss", "grad_norm", "lr", "tokens_per_s", "mfu", "peak_mem_bytes"})
      EXPECT_TRUE(j.contains(k)) << k << " missing in " << line;
    steps.push_back(j.get_int("step"));
    EXPECT_DOUBLE_EQ(j.get_double("loss"), r.steps[size_t(steps.back() - 1)].loss);
  }
  EXPECT_EQ(steps.size(), 9u);
  EXPECT_EQ(steps.front(), 1);
  EXPECT_EQ(steps.back(), 40);
  std::ifstream svg(c.run.dir + "/metrics.svg");
  std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("<polyline"), std::string::npos);
}

TEST(Trainer, BitwiseIdenticalForAnyThreadCount) {
  const int before = num_threads();
  set_num_threads(1);
  TrainResult one = quiet_train(tiny_config("threads1", {"training.steps=6"}));
  set_num_threads(2);
  TrainResult two = quiet_train(tiny_config("threads2", {"training.steps=6"}));
  set_num_threads(before);
  EXPECT_EQ(losses(one), losses(two));
}

// Interrupted at step 5 (as by SIGINT: a checkpoint is saved), resumed with --resume auto:
// steps 6..12 reproduce the uninterrupted run bitwise, with AdamW and with Muon.
void expect_resume_is_exact(const std::string& optimizer) {
  const std::vector<std::string> sets = {
      "optimizer.name=" + optimizer,
      "optimizer.lr=" + std::string(optimizer == "muon" ? "0.02" : "0.01")};
  TrainResult full = quiet_train(tiny_config("full_" + optimizer, sets));
  Config c = tiny_config("resume_" + optimizer, sets);
  TrainOptions stop;
  stop.stop_after = 5;
  TrainResult first = quiet_train(c, stop);
  ASSERT_TRUE(first.interrupted);
  ASSERT_EQ(first.steps.size(), 5u);
  ASSERT_FALSE(first.last_checkpoint.empty());
  TrainOptions resume;
  // AdamW finds the checkpoint in run.dir; Muon is given the step directory itself.
  resume.resume = optimizer == "adamw" ? "auto" : first.last_checkpoint;
  TrainResult second = quiet_train(c, resume);
  EXPECT_EQ(second.first_step, 6);
  std::vector<double> joined = losses(first);
  for (double l : losses(second)) joined.push_back(l);
  EXPECT_EQ(joined, losses(full));
}

TEST(Trainer, ResumeContinuesBitwiseAdamW) {
  expect_resume_is_exact("adamw");
}
TEST(Trainer, ResumeContinuesBitwiseMuon) {
  expect_resume_is_exact("muon");
}

TEST(Trainer, GradAccumulationMatchesOneBigBatch) {
  // Equal micro-batches: the gradient of the mean loss is the same sum, up to f32 rounding.
  TrainResult one =
      quiet_train(tiny_config("accum1", {"training.steps=4", "training.mixed_precision=f32"}));
  TrainResult two = quiet_train(tiny_config(
      "accum2", {"training.steps=4", "training.grad_accum=2", "training.mixed_precision=f32"}));
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(one.steps[i].loss, two.steps[i].loss, 1e-4) << i;
}

// An architecture registered at run time (a Llama under a new class and short name) trains
// through the trainer from model.arch + sizes, bitwise as llama does, and its checkpoint exports to
// a Hugging Face directory that loads back through the same table row.
TEST(Trainer, TrainsAnArchitectureRegisteredAtRunTime) {
  static int layers_built = 0;
  models::LayerFactory layers = models::llama_layers();
  layers.attention = [attention = layers.attention](const models::ModelConfig& c, int64_t i) {
    ++layers_built;
    return attention(c, i);
  };
  models::Architecture row;
  row.hf_class = "TrainerTestLlamaForCausalLM";
  row.model_type = "trainer_test_llama";
  row.short_name = "trainer_test_llama";
  row.layers = layers;
  row.buildable_from_sizes = true;
  models::register_architecture(row);

  const std::vector<std::string> sets = {"training.steps=4", "training.mixed_precision=f32",
                                         "checkpoint.save_final=true"};
  std::vector<std::string> mine = sets;
  mine.push_back("model.arch=trainer_test_llama");
  std::vector<std::string> llama = sets;
  llama.push_back("model.arch=llama");
  std::ostringstream log;
  TrainOptions o;
  o.log = &log;
  Config c = tiny_config("registered", mine);
  TrainResult r = train(c, o);
  EXPECT_EQ(layers_built, 2);  // tiny_config's two layers, from the registered factory
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_NE(log.str().find("model: TrainerTestLlamaForCausalLM,"), std::string::npos) << log.str();
  EXPECT_EQ(losses(r), losses(quiet_train(tiny_config("registered_llama", llama))));

  const std::string out = c.run.dir + "_hf";
  fs::remove_all(out);
  checkpoint::export_hf(r.last_checkpoint, out);
  const io::Json j = io::read_json_file(out + "/config.json");
  EXPECT_EQ(j.at("architectures").at(0).as_string(), "TrainerTestLlamaForCausalLM");
  EXPECT_EQ(j.get_string("model_type"), "trainer_test_llama");
  auto exported = models::load_model(out, DType::f32);
  EXPECT_EQ(exported->config().architecture, "TrainerTestLlamaForCausalLM");
  EXPECT_EQ(layers_built, 4);
}

// parallel.fsdp.param_dtype (deprecated) still sets the compute dtype: the run prints the
// deprecation once and computes as training.mixed_precision would.
TEST(Trainer, DeprecatedParamDtypeIsUsedAndNotedOnce) {
  std::ostringstream log;
  TrainOptions o;
  o.log = &log;
  TrainResult old_key =
      train(tiny_config("param_dtype", {"training.steps=2", "parallel.fsdp.param_dtype=f32"}), o);
  const std::string text = log.str();
  const std::string note =
      "[config] parallel.fsdp.param_dtype is deprecated: use training.mixed_precision\n";
  const size_t at = text.find(note);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(text.find(note, at + 1), std::string::npos) << text;
  EXPECT_NE(text.find("; params f32 compute"), std::string::npos) << text;
  TrainResult new_key = quiet_train(
      tiny_config("mixed_precision", {"training.steps=2", "training.mixed_precision=f32"}));
  EXPECT_EQ(losses(old_key), losses(new_key));
  TrainResult bf16 = quiet_train(tiny_config("bf16_default", {"training.steps=2"}));
  EXPECT_NE(losses(old_key), losses(bf16));
}

// A Hugging Face directory as the starting point (model.path), pre-tokenized u16 data (the corpus's
// bytes folded into the fixture's 96-id vocabulary), and the trained checkpoint exported back to
// a Hugging Face directory that loads with the trained values.
// The corpus's bytes folded into `vocab` ids, as a u16 token file in `dir`.
std::string folded_tokens(const std::string& dir, int vocab) {
  fs::create_directories(dir);
  std::ifstream in(corpus(), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<uint16_t> ids;
  for (unsigned char ch : text) ids.push_back(static_cast<uint16_t>(ch % vocab));
  const std::string tokens = dir + "/tokens.u16";
  std::ofstream(tokens, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 2));
  return tokens;
}

TEST(Trainer, TrainsFromHuggingFaceDirectoryAndExportsBack) {
  const std::string dir = run_dir("hf");
  const std::string tokens = folded_tokens(dir, 96);
  for (const char* fixture : {"qwen3", "deepseek_v3", "deepseek_v4_hc2"}) {
    const std::string yaml = std::string("model: {path: ") + HP_TEST_DIR + "/../models/fixtures/" +
                             fixture + "}\ndata: {path: " + tokens +
                             ", format: tokens_u16}\ntraining: {steps: 8, batch_size: 2, "
                             "seq_len: 32}\noptimizer: {lr: 0.003}\nmetrics: {progress: none}\n"
                             "run: {dir: " +
                             dir + "/" + fixture + "}\n";
    TrainResult r = quiet_train(parse_config(yaml, "hf.yaml"));
    ASSERT_EQ(r.steps.size(), 8u) << fixture;
    EXPECT_LT(r.steps.back().loss, r.steps.front().loss) << fixture;
    const std::string out = dir + "/" + fixture + "_hf";
    checkpoint::export_hf(r.last_checkpoint, out, 2'000'000'000, false, std::nullopt,
                          models::checkpoint_names(r.last_checkpoint));
    auto exported = models::load_model(out, DType::f32);
    checkpoint::Metadata meta = checkpoint::read_metadata(r.last_checkpoint);
    for (const auto& [fqn, t] : exported->named_parameters()) {
      Tensor saved = zeros(t.shape());
      checkpoint::load(meta, {checkpoint::Chunk{fqn, saved, t.shape(),
                                                std::vector<int64_t>(t.shape().size(), 0)}});
      EXPECT_EQ(sum(abs(sub(saved, t))).item(), 0.0) << fixture << " " << fqn;
    }
  }
  // Byte-level text ids (up to 256) do not fit the fixture's vocabulary: a clear error.
  const std::string bad = std::string("model: {path: ") + HP_TEST_DIR +
                          "/../models/fixtures/qwen3}\ndata: {path: " + corpus() +
                          "}\ntraining: {steps: 1, batch_size: 2, seq_len: 32}\nrun: {dir: " + dir +
                          "/bad}\n";
  try {
    quiet_train(parse_config(bad, "bad.yaml"));
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(
        std::string(e.what()).find("has token ids up to 256 but the model's vocabulary is 96"),
        std::string::npos)
        << e.what();
  }
}

// DeepSeek-V4 (mHC streams, compressed attention, hash routing) from its HF directory under the
// trainer's features: full recompute keeps the losses bitwise, MXFP8 converts its linears and
// experts and stays close to f32.
TEST(Trainer, DeepseekV4TrainsWithRecomputeAndMxfp8) {
  const std::string dir = run_dir("v4");
  const std::string tokens = folded_tokens(dir, 128);
  auto config = [&](const std::string& name, std::vector<std::string> sets) {
    const std::string yaml = std::string("model: {path: ") + HP_TEST_DIR +
                             "/../models/fixtures/deepseek_v4_hc2}\ndata: {path: " + tokens +
                             ", format: tokens_u16}\ntraining: {steps: 3, batch_size: 2, "
                             "seq_len: 32, mixed_precision: f32}\noptimizer: {lr: 0.003}\n"
                             "metrics: {progress: none}\ncheckpoint: {save_final: false}\n"
                             "run: {dir: " +
                             dir + "/" + name + "}\n";
    return parse_config(yaml, "v4.yaml", sets);
  };
  const TrainResult plain = quiet_train(config("plain", {}));
  const TrainResult rc = quiet_train(config("rc", {"recompute.mode=full"}));
  EXPECT_EQ(rc.recompute_modules.size(), 4u);
  EXPECT_EQ(losses(plain), losses(rc));
  const TrainResult mx = quiet_train(config("mx", {"low_precision.recipe=mxfp8"}));
  EXPECT_GT(mx.mx_modules.size(), 0u);
  ASSERT_EQ(mx.steps.size(), plain.steps.size());
  for (size_t i = 0; i < mx.steps.size(); ++i)
    EXPECT_NEAR(mx.steps[i].loss, plain.steps[i].loss, 0.05 * plain.steps[i].loss) << i;
}

// DeepSeek-V4 from sizes (model.arch deepseek_v4): the size keys plus DeepseekV4Config's defaults
// for everything else (4 layers: HCA, HCA, HCA, CSA attention; hash_moe × 3 then moe; hc_mult 4;
// q_lora_rank / o_lora_rank 1024, o_groups 8, index_topk 512, ...). The hash layers' tid2eid tables
// are drawn from the seed (k distinct experts per token id, the same for the same seed); the run
// trains, and its export reloads in hp equal to the checkpoint and with the same config.
TEST(Trainer, DeepseekV4FromSizesTrainsAndExports) {
  const std::string dir = run_dir("v4_sizes_" + std::to_string(getpid()));
  const std::string tokens = folded_tokens(dir, 128);
  const std::string yaml =
      "model: {arch: deepseek_v4, hidden: 64, layers: 4, heads: 8, kv_heads: 1, head_dim: 16, "
      "intermediate: 32, vocab: 128, experts: 4, experts_per_token: 2}\ndata: {path: " +
      tokens +
      ", format: tokens_u16}\ntraining: {steps: 8, batch_size: 2, seq_len: 32, seed: 5, "
      "mixed_precision: f32}\noptimizer: {lr: 0.01}\nmetrics: {progress: none}\nrun: {dir: " +
      dir + "/run}\n";
  const Config cfg = parse_config(yaml, "v4_sizes.yaml");
  const TrainResult r = quiet_train(cfg);
  ASSERT_EQ(r.steps.size(), 8u);
  for (const auto& s : r.steps) EXPECT_TRUE(std::isfinite(s.loss));
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss);

  const std::string out = dir + "/hf";
  checkpoint::export_hf(r.last_checkpoint, out, 2'000'000'000, false, std::nullopt,
                        models::checkpoint_names(r.last_checkpoint));
  auto exported = models::load_model(out, DType::f32);
  const models::ModelConfig& c = exported->config();
  EXPECT_EQ(c.architecture, "DeepseekV4ForCausalLM");
  const std::string hca = "heavily_compressed_attention", csa = "compressed_sparse_attention";
  EXPECT_EQ(c.layer_types, (std::vector<std::string>{hca, hca, hca, csa}));
  EXPECT_EQ(c.mlp_layer_types,
            (std::vector<std::string>{"hash_moe", "hash_moe", "hash_moe", "moe"}));
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.compress_rate_hca, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 2);  // head_dim 16 × 64 / 512
  EXPECT_EQ(c.moe_intermediate_size, 32);
  checkpoint::Metadata meta = checkpoint::read_metadata(r.last_checkpoint);
  for (const auto& [fqn, t] : exported->named_parameters()) {
    Tensor saved = zeros(t.shape());
    checkpoint::load(meta, {checkpoint::Chunk{fqn, saved, t.shape(),
                                              std::vector<int64_t>(t.shape().size(), 0)}});
    EXPECT_LE(sum(abs(sub(saved, t))).item(), 1e-6) << fqn;
  }

  // The hash table: k distinct expert ids per token, from the seed.
  auto table = [&](uint64_t seed) {
    manual_seed(seed);
    for (const auto& [fqn, t] : models::build_model(c)->named_parameters())
      if (fqn == "model.layers.0.mlp.gate.tid2eid") return contiguous(t).to_vector();
    return std::vector<double>{};
  };
  const std::vector<double> a = table(5), b = table(5), other = table(6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  ASSERT_EQ(a.size(), 128u * 2u);
  for (size_t v = 0; v < 128; ++v) {
    EXPECT_NE(a[2 * v], a[2 * v + 1]) << v;
    for (size_t j = 0; j < 2; ++j) EXPECT_TRUE(a[2 * v + j] >= 0 && a[2 * v + j] < 4) << v;
  }
  fs::remove_all(dir);
}

// Recompute changes memory, not numbers: bitwise the same losses, and full recompute holds well
// under half the activation memory (4 layers at seq 256, where activations dominate).
TEST(Trainer, RecomputeKeepsLossesAndCutsActivationMemory) {
  const std::vector<std::string> base = {"training.steps=3", "model.layers=4",
                                         "training.seq_len=256", "training.mixed_precision=f32"};
  TrainResult none = quiet_train(tiny_config("rc_none", base));
  std::vector<std::string> full = base;
  full.push_back("recompute.mode=full");
  TrainResult rc = quiet_train(tiny_config("rc_full", full));
  EXPECT_EQ(rc.recompute_modules.size(), 4u);
  EXPECT_EQ(losses(none), losses(rc));
  EXPECT_GT(none.act_mem_bytes, 0);
  EXPECT_LT(double(rc.act_mem_bytes), 0.5 * double(none.act_mem_bytes))
      << "none " << none.act_mem_bytes << " full " << rc.act_mem_bytes;
}

// Tolerance: the mean loss of every 10-step window of the MXFP8 run stays within 2% of the bf16
// run's (single steps of a 256-token batch are too noisy to compare one by one; both runs see the
// same data and init, and they diverge only through quantization). lr 0.005: at the tiny config's
// 0.01 both runs spiked at step 11 (bf16 3.1 -> 3.6, MXFP8 -> 4.0) and the windows' gap depended
// on the GEMM kernel's summation order (1.7-2.9% across oneDNN bf16, oneDNN sgemm and OpenBLAS);
// at 0.005 it is 1.1-1.2% on all three.
TEST(Trainer, Mxfp8TracksBf16Over50Steps) {
  const std::vector<std::string> base = {"training.steps=50", "model.hidden=64",
                                         "model.intermediate=128", "training.seq_len=64",
                                         "optimizer.lr=0.005"};
  TrainResult bf16 = quiet_train(tiny_config("bf16", base));
  std::vector<std::string> mx = base;
  mx.push_back("low_precision.recipe=mxfp8");
  mx.push_back("low_precision.modules=[\"*.mlp.*\", \"*.self_attn.*_proj\"]");
  TrainResult mxr = quiet_train(tiny_config("mxfp8", mx));
  EXPECT_EQ(mxr.mx_modules.size(), 2u * 7u);
  const std::vector<double> a = losses(bf16), b = losses(mxr);
  ASSERT_EQ(a.size(), 50u);
  ASSERT_EQ(b.size(), 50u);
  double max_rel = 0;
  for (size_t w = 0; w < 50; w += 10) {
    double sa = 0, sb = 0;
    for (size_t i = w; i < w + 10; ++i) sa += a[i], sb += b[i];
    max_rel = std::max(max_rel, std::fabs(sb - sa) / sa);
  }
  EXPECT_LT(max_rel, 0.02) << "bf16 " << ::testing::PrintToString(a) << "\nmx   "
                           << ::testing::PrintToString(b);
  EXPECT_NE(a, b) << "MX run identical to bf16: was anything quantized?";
  EXPECT_LT(b.back(), b.front() * 0.7);
}

}  // namespace
}  // namespace hp::train
