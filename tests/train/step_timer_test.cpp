// The warm-up and timing rule of hp bench train (train/step_timer.h), which the PyTorch peer
// (bench/peers/train_peer.py) applies the same way, and the trainer hook that ends a run once it
// is met (TrainOptions::stop_when).
#include "hp/train/step_timer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "corpus.h"
#include "hp/core/error.h"
#include "hp/train/config.h"
#include "hp/train/trainer.h"

namespace hp::train {
namespace {

// Feeds `steps` until the timer is done or they run out; returns how many it took.
size_t feed(StepTimer& t, const std::vector<double>& steps) {
  for (size_t i = 0; i < steps.size(); ++i)
    if (t.add(steps[i])) return i + 1;
  return steps.size();
}

TEST(StepTimer, WarmsUpUntilTheLastThreeAreWithinTenPercent) {
  // PyTorch bf16 autocast on Zen 4 (issue 12): 5.5, 1.1, 0.54, 0.35 s, then steady.
  StepTimer t{WarmupRule{}};
  const size_t used = feed(t, {5.5, 1.1, 0.54, 0.35, 0.36, 0.35, 0.30, 0.31, 0.32, 0.40, 0.31});
  EXPECT_TRUE(t.done());
  EXPECT_TRUE(t.stable());
  // After 5 steps the last three (0.54, 0.35, 0.36) spread 54%; after 6 (0.35, 0.36, 0.35) 2.9%.
  EXPECT_EQ(t.warmup_s().size(), 6u);
  EXPECT_EQ(t.timed_s(), (std::vector<double>{0.30, 0.31, 0.32, 0.40, 0.31}));
  EXPECT_EQ(used, 11u);
  EXPECT_DOUBLE_EQ(t.median_s(), 0.31);  // the slow 0.40 does not move it
}

TEST(StepTimer, NeedsAtLeastTheMinimumWarmup) {
  StepTimer t{WarmupRule{}};
  feed(t, {1, 1, 1, 1});
  EXPECT_FALSE(t.warm()) << "four equal steps are not yet five";
  t.add(1);
  EXPECT_TRUE(t.warm());
  EXPECT_TRUE(t.stable());
  EXPECT_TRUE(t.timed_s().empty());
}

TEST(StepTimer, CapsAnUnstableWarmup) {
  WarmupRule rule;
  rule.max_warmup = 8;
  rule.timed = 6;
  StepTimer t{rule};
  const std::vector<double> noisy = {1, 2, 1, 2, 1, 2, 1, 2, 5, 1, 3, 1, 2, 2};
  EXPECT_EQ(feed(t, noisy), 14u);
  EXPECT_FALSE(t.stable());
  EXPECT_EQ(t.warmup_s().size(), 8u);
  EXPECT_NEAR(t.spread(), 1.0, 1e-12);  // 2, 1, 2
  EXPECT_EQ(t.timed_s().size(), 6u);
  EXPECT_DOUBLE_EQ(t.median_s(), 2.0);  // 5 1 3 1 2 2 → (2 + 2) / 2
  EXPECT_TRUE(t.add(9));                // done stays done; nothing more is timed
  EXPECT_EQ(t.timed_s().size(), 6u);
}

TEST(StepTimer, RejectsRulesThatCannotBeMet) {
  for (auto change :
       {+[](WarmupRule& r) { r.window = 6; }, +[](WarmupRule& r) { r.max_warmup = 4; },
        +[](WarmupRule& r) { r.timed = 0; }, +[](WarmupRule& r) { r.tolerance = -1; }}) {
    WarmupRule r;
    change(r);
    EXPECT_THROW(StepTimer{r}, ValueError);
  }
}

TEST(StepTimer, EndsATrainingRunOnceTheTimingIsDone) {
  const std::string corpus = testing::corpus_prefix("hp_step_timer_test", 20000);
  const auto dir = std::filesystem::temp_directory_path() / "hp_step_timer_test_run";
  std::filesystem::remove_all(dir);
  const Config c = parse_config(
      "model: {arch: llama, hidden: 16, layers: 1, heads: 2, kv_heads: 1, intermediate: 32, "
      "vocab: 300}\ndata: {path: " +
          corpus +
          "}\ntraining: {steps: 40, batch_size: 2, seq_len: 8}\n"
          "metrics: {peak_tflops: 1.0, progress: none, jsonl: false}\n"
          "checkpoint: {save_final: true}\nrun: {dir: " +
          dir.string() + "}\n",
      "timer.yaml");
  WarmupRule rule;
  rule.max_warmup = 6;  // a tiny model's millisecond steps need not settle: end by the cap
  StepTimer timer(rule);
  std::ostringstream log;
  TrainOptions o;
  o.log = &log;
  o.stop_when = [&timer](const StepRecord& r) { return timer.add(r.step_s); };
  const TrainResult res = train(c, o);
  ASSERT_TRUE(timer.done());
  EXPECT_EQ(res.steps.size(), timer.warmup_s().size() + timer.timed_s().size());
  EXPECT_LE(res.steps.size(), 11u);
  EXPECT_FALSE(res.interrupted);
  // Ended as at its last step: the final checkpoint is the step it stopped after.
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "step-%08zu", res.steps.size());
  EXPECT_EQ(res.last_checkpoint, (dir / step_dir).string());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hp::train
