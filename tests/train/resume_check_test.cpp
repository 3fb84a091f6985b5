// What --resume checks before it loads: `auto` falls back past a damaged newest checkpoint to the
// newest one that verifies (and says so), and a checkpoint saved with a config that differs in a
// key that changes the math (train/config.h ResumeChange) is refused unless allow_config_change.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "corpus.h"
#include "error_of.h"
#include "hp/checkpoint/dcp.h"
#include "hp/core/error.h"
#include "hp/train/config.h"
#include "hp/train/schema.h"
#include "hp/train/state.h"
#include "hp/train/trainer.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;
using hp::testing::error_of;

// A ~35k-parameter Qwen3 on the first 100 kB of the KJV corpus, checkpointing every 2 steps.
Config small_config(const std::string& name, const std::vector<std::string>& sets = {}) {
  static const std::string corpus = testing::corpus_prefix("hp_resume_check_test", 100000);
  const fs::path dir = fs::temp_directory_path() / ("hp_resume_check_test_" + name);
  fs::remove_all(dir);
  // A constant lr: steps 1..N are the same whatever training.steps.
  const std::string yaml =
      "model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64}\n"
      "training: {steps: 4, batch_size: 4, seq_len: 32, seed: 3}\n"
      "lr_scheduler: {name: constant}\n"
      "metrics: {log_every: 100, progress: none, peak_tflops: 1}\n"
      "checkpoint: {interval: 2, keep: 0}\n";
  std::vector<std::string> all = {"data.path=" + corpus, "run.dir=" + dir.string()};
  all.insert(all.end(), sets.begin(), sets.end());
  return parse_config(yaml, name + ".yaml", all);
}

// Runs `cfg`; the run log goes to *log.
TrainResult run(const Config& cfg, const std::string& resume, std::string* log = nullptr,
                bool allow_config_change = false) {
  std::ostringstream out;
  TrainOptions o;
  o.resume = resume;
  o.allow_config_change = allow_config_change;
  o.log = &out;
  TrainResult r = train(cfg, o);
  if (log) *log = out.str();
  return r;
}

// Flips one byte inside the first tensor piece of a step dir's rank file.
void damage(const std::string& step_dir) {
  const checkpoint::Metadata meta = checkpoint::read_metadata(step_dir);
  const checkpoint::TensorMeta::Piece& p = meta.tensors.front().pieces.front();
  std::fstream f(step_dir + "/" + p.file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(p.begin));
  const char c = static_cast<char>(f.get() ^ 0x10);
  f.seekp(static_cast<std::streamoff>(p.begin));
  f.put(c);
}

TEST(ResumeCheck, AutoSkipsADamagedNewestCheckpoint) {
  const TrainResult full = run(small_config("full", {"training.steps=6"}), "");
  // Stopped at step 4 (as by a crash after the step-4 save), resumed with the same config.
  const Config c = small_config("damaged", {"training.steps=6"});
  TrainOptions stop;
  stop.stop_after = 4;
  std::ostringstream quiet;
  stop.log = &quiet;
  const TrainResult first = train(c, stop);
  const std::string step2 = c.run.dir + "/step-00000002", step4 = c.run.dir + "/step-00000004";
  ASSERT_EQ(first.last_checkpoint, step4);
  damage(step4);

  std::string log;
  const TrainResult second = run(c, "auto", &log);
  EXPECT_NE(log.find("skipping checkpoint " + step4 + ": rank-00000.safetensors (tensor '"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
  EXPECT_NE(log.find("resumed from " + step2 + " at step 2"), std::string::npos) << log;
  ASSERT_EQ(second.first_step, 3);
  // Steps 3..6 replay the uninterrupted run exactly.
  ASSERT_EQ(second.steps.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(second.steps[i].loss, full.steps[i + 2].loss) << i;

  // Nothing left that verifies: an error naming each one, not a silent fresh start.
  for (const char* s : {"/step-00000002", "/step-00000004", "/step-00000006"})
    damage(c.run.dir + s);
  const std::string err = error_of([&] { run(c, "auto"); });
  EXPECT_NE(err.find("[train] --resume auto: no checkpoint in " + c.run.dir + " verifies"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(step2 + ": rank-00000.safetensors"), std::string::npos) << err;
}

// Every changed key is logged; those that change the math (here training.steps, training.seq_len
// and optimizer.lr) are refused, each with both values, unless allowed; layout, logging and
// checkpoint keys resume freely.
TEST(ResumeCheck, MathChangingConfigIsRefusedUnlessAllowed) {
  const Config c = small_config("config");
  TrainOptions stop;
  std::ostringstream quiet;
  stop.log = &quiet;
  stop.stop_after = 2;
  train(c, stop);
  const std::string step2 = c.run.dir + "/step-00000002";

  const Config free = parse_config(
      to_yaml(c), "free.yaml",
      {"checkpoint.interval=1", "metrics.log_every=1", "parallel.moe.kernel=sequential"});
  std::ostringstream free_log;
  TrainOptions one;
  one.resume = step2;
  one.stop_after = 1;
  one.log = &free_log;
  EXPECT_EQ(train(free, one).first_step, 3);
  EXPECT_NE(free_log.str().find("resuming with config changes that keep the math:\n"
                                "  parallel.moe.kernel: megamoe in the checkpoint, sequential now\n"
                                "  checkpoint.interval: 2 in the checkpoint, 1 now\n"
                                "  metrics.log_every: 100 in the checkpoint, 1 now\n"),
            std::string::npos)
      << free_log.str();

  const Config changed =
      parse_config(to_yaml(c), "changed.yaml",
                   {"training.steps=6", "training.seq_len=64", "optimizer.lr=0.001"});
  const std::string err = error_of([&] { run(changed, "auto"); });
  EXPECT_NE(err.find("[train] " + c.run.dir +
                     "/step-00000003/config.yaml: resuming would change "
                     "the run's math; 3 key(s) differ from the checkpoint's config (pass "
                     "--allow-config-change to resume anyway):\n"
                     "  optimizer.lr: 3e-04 in the checkpoint, 0.001 now\n"
                     "  training.steps: 4 in the checkpoint, 6 now\n"
                     "  training.seq_len: 32 in the checkpoint, 64 now"),
            std::string::npos)
      << err;
  // Free keys are not among the refused ones.
  EXPECT_EQ(err.find("checkpoint.interval"), std::string::npos) << err;

  std::string log;
  const TrainResult r = run(changed, "auto", &log, /*allow_config_change=*/true);
  EXPECT_EQ(r.first_step, 4);
  EXPECT_EQ(r.steps.size(), 3u);
  EXPECT_NE(log.find("resuming with config changes (--allow-config-change):\n"
                     "  optimizer.lr: 3e-04 in the checkpoint, 0.001 now\n"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("  training.seq_len: 32 in the checkpoint, 64 now\n"), std::string::npos)
      << log;
  EXPECT_NE(log.find("  checkpoint.interval: 1 in the checkpoint, 2 now\n"), std::string::npos)
      << log;
}

TEST(ResumeCheck, ConfigChangesListsEveryDifferingKeyWithItsClass) {
  const Config a = small_config("keys");
  const Config b =
      parse_config(to_yaml(a), "b.yaml",
                   {"model.heads=8", "model.kv_heads=4", "training.seed=4", "training.batch_size=8",
                    "training.grad_accum=2", "training.steps=9", "optimizer.lr=0.1",
                    "parallel.dp_shard=2", "metrics.log_every=5"});
  std::vector<std::string> math, free;
  for (const ConfigChange& ch : config_changes(a, b))
    (ch.changes_math ? math : free).push_back(ch.text());
  EXPECT_EQ(math, (std::vector<std::string>{"model.heads: 4 in the checkpoint, 8 now",
                                            "model.kv_heads: 2 in the checkpoint, 4 now",
                                            "optimizer.lr: 3e-04 in the checkpoint, 0.1 now",
                                            "training.steps: 4 in the checkpoint, 9 now",
                                            "training.seed: 3 in the checkpoint, 4 now",
                                            "training.batch_size: 4 in the checkpoint, 8 now",
                                            "training.grad_accum: 1 in the checkpoint, 2 now"}));
  EXPECT_EQ(free, (std::vector<std::string>{"parallel.dp_shard: -1 in the checkpoint, 2 now",
                                            "metrics.log_every: 100 in the checkpoint, 5 now"}));
  EXPECT_TRUE(config_changes(a, a).empty());
}

// The classification covers every key the schema has (a new key must be placed).
TEST(ResumeCheck, EveryKeyIsClassified) {
  Config c;
  Schema s;
  c.describe(s);
  for (const auto& f : s.fields()) {
    if (!f->alias_of.empty()) continue;
    EXPECT_NO_THROW(resume_change(f->path)) << f->path;
  }
  EXPECT_EQ(resume_change("training.steps"), ResumeChange::math);
  EXPECT_EQ(resume_change("optimizer.muon.ns_steps"), ResumeChange::math);
  EXPECT_EQ(resume_change("parallel.pipeline.microbatches"), ResumeChange::math);
  EXPECT_EQ(resume_change("parallel.tp"), ResumeChange::free);
  EXPECT_EQ(resume_change("recompute.mode"), ResumeChange::free);
  EXPECT_THROW(resume_change("parallel.new_key"), InternalError);
}

}  // namespace
}  // namespace hp::train
