// Reliability of a run: zero degrees are config errors (not SIGFPE), a diverged run stops without
// overwriting its good checkpoints and leaves readable metrics, a run directory has one owner (a
// lock naming its holder; a fresh run does not mix into an old run's checkpoints), and a full
// disk costs metrics but not the run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "corpus.h"
#include "hp/checkpoint/dcp.h"
#include "hp/core/error.h"
#include "hp/dist/communicator.h"
#include "hp/io/json.h"
#include "hp/train/config.h"
#include "hp/train/parallelize.h"
#include "hp/train/trainer.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;

std::string corpus() {
  static const std::string path = testing::corpus_prefix("hp_reliability_test", 100000);
  return path;
}

const char* kModel = R"(model:
  arch: qwen3
  hidden: 32
  layers: 2
  heads: 4
  kv_heads: 2
  intermediate: 64
)";

// A fresh (emptied) run directory per test.
Config tiny(const std::string& name, const std::vector<std::string>& sets = {}) {
  const fs::path dir = fs::temp_directory_path() / ("hp_reliability_test_" + name);
  fs::remove_all(dir);
  const std::string yaml = std::string(kModel) + "data: {path: " + corpus() +
                           "}\ntraining: {steps: 6, batch_size: 4, seq_len: 32, seed: 3}\n"
                           "metrics: {log_every: 1, progress: none}\n"
                           "run: {dir: " +
                           dir.string() + "}\n";
  return parse_config(yaml, "tiny.yaml", sets);
}

TrainResult run(const Config& c, std::string* log_text = nullptr, TrainOptions o = {}) {
  std::ostringstream log;
  o.log = &log;
  try {
    TrainResult r = train(c, o);
    if (log_text) *log_text = log.str();
    return r;
  } catch (...) {
    if (log_text) *log_text = log.str();
    throw;
  }
}

std::string config_error(const std::vector<std::string>& sets) {
  try {
    parse_config(std::string(kModel) + "data: {path: c.txt}\ntraining: {batch_size: 8}\n",
                 "run.yaml", sets);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

// Defect 4: the divisibility check used to divide by the zero it had just reported.
TEST(Reliability, ZeroOrNegativeDegreesAreConfigErrorsNotSigfpe) {
  EXPECT_EQ(config_error({"training.grad_accum=0"}),
            "[config] --set training.grad_accum=0: training.grad_accum: must be >= 1, got 0");
  EXPECT_EQ(config_error({"parallel.dp_replicate=0"}),
            "[config] --set parallel.dp_replicate=0: parallel.dp_replicate: must be >= 1, got 0");
  EXPECT_EQ(config_error({"parallel.tp=0"}),
            "[config] --set parallel.tp=0: parallel.tp: must be >= 1, got 0");
  EXPECT_EQ(config_error({"training.grad_accum=-2", "parallel.dp_replicate=-1"}),
            "[config] --set training.grad_accum=-2: training.grad_accum: must be >= 1, got -2\n"
            "[config] --set parallel.dp_replicate=-1: parallel.dp_replicate: must be >= 1, got -1");
  // A product that overflows int64 (to 0 here) cannot divide the batch either.
  EXPECT_NE(config_error({"training.grad_accum=4294967296", "parallel.dp_replicate=4294967296"})
                .find("training.batch_size: 8 does not divide into grad_accum"),
            std::string::npos);
  // A Config built in code bypasses parse_config: parallel_layout names the key, no crash.
  for (const char* key : {"grad_accum", "dp_replicate", "tp"}) {
    Config c = tiny("layout");
    if (std::string(key) == "grad_accum") c.training.grad_accum = 0;
    if (std::string(key) == "dp_replicate") c.parallel.dp_replicate = 0;
    if (std::string(key) == "tp") c.parallel.tp = 0;
    try {
      parallel_layout(c, dist::world());
      ADD_FAILURE() << key << ": no error";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(key) + " must be >= 1, got 0"),
                std::string::npos)
          << e.what();
    }
  }
}

// The TrainingDiverged text of a run that must diverge ("" and a failure if it does not).
std::string diverged_what(const Config& c, std::string* log) {
  try {
    run(c, log);
  } catch (const TrainingDiverged& e) {
    return e.what();
  }
  ADD_FAILURE() << "no TrainingDiverged\n" << *log;
  return "";
}

// Defect 5: lr 1000 blows up; the run stops after training.max_skipped_steps skipped steps with
// TrainingDiverged naming the step and the key, the checkpoint from before the divergence stays
// `latest`, and metrics.jsonl (with null for the non-finite values) reads back.
TEST(Reliability, DivergedRunStopsKeepsGoodCheckpointAndReadableMetrics) {
  const Config c =
      tiny("diverged", {"optimizer.lr=1000", "training.steps=40", "checkpoint.interval=1",
                        "checkpoint.keep=2", "training.max_skipped_steps=4"});
  std::string log;
  const std::string what = diverged_what(c, &log);
  ASSERT_NE(what.find("training.max_skipped_steps = 4"), std::string::npos) << what;
  // The first skipped step, from the log.
  const size_t at = log.find(": non-finite gradient norm; update skipped");
  ASSERT_NE(at, std::string::npos) << log;
  const int64_t first_bad = std::stoll(log.substr(log.rfind("step ", at) + 5));
  const int64_t stopped = first_bad + 3;
  EXPECT_NE(what.find("stopped at step " + std::to_string(stopped) + " "), std::string::npos)
      << what << "\n"
      << log;
  EXPECT_NE(log.find("metrics.svg"), std::string::npos) << "finish() did not run\n" << log;
  // Nothing at or after the first skipped step was saved; the last good one is `latest`.
  const auto latest = checkpoint::find_latest(c.run.dir);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(fs::path(*latest).filename().string(), checkpoint::step_dir_name(first_bad - 1));
  EXPECT_NE(what.find(*latest), std::string::npos) << what;
  for (int64_t s = first_bad; s <= stopped; ++s)
    EXPECT_FALSE(fs::exists(fs::path(c.run.dir) / checkpoint::step_dir_name(s))) << s;
  // metrics.jsonl: every step up to the stop, null (not a number) for the non-finite norm.
  std::ifstream in(c.run.dir + "/metrics.jsonl");
  std::string line;
  int64_t lines = 0, nulls = 0;
  while (std::getline(in, line)) {
    const io::Json j = io::parse_json(line, "metrics.jsonl");
    ++lines;
    nulls += j.at("grad_norm").is_null();
  }
  EXPECT_EQ(lines, stopped);
  EXPECT_EQ(nulls, 4);
  // --resume auto restores the good checkpoint, reads the metrics back, and diverges again the
  // same way (not an internal error).
  TrainOptions resume;
  resume.resume = "auto";
  EXPECT_THROW(run(c, &log, resume), TrainingDiverged);
  EXPECT_NE(log.find("resumed from " + *latest), std::string::npos) << log;
}

// max_skipped_steps 0 never stops, and a run that ends while skipping saves no final checkpoint.
TEST(Reliability, NoFinalCheckpointOfADivergedModel) {
  const Config c = tiny("diverged_nostop",
                        {"optimizer.lr=1000", "training.steps=20", "training.max_skipped_steps=0"});
  std::string log;
  const TrainResult r = run(c, &log);
  ASSERT_EQ(r.steps.size(), 20u);
  ASSERT_FALSE(std::isfinite(r.steps.back().grad_norm)) << log;
  EXPECT_EQ(r.last_checkpoint, "");
  EXPECT_FALSE(checkpoint::find_latest(c.run.dir).has_value());
  EXPECT_NE(log.find("step 20: no checkpoint saved (its update was skipped); none exists yet"),
            std::string::npos)
      << log;
}

// A run whose last steps are skipped, fewer than max_skipped_steps, has no result to show: it
// ends as diverged (hp train exits 3) naming the steps, and says no checkpoint exists rather than
// that "the last one is kept".
TEST(Reliability, RunEndingInSkippedStepsIsDiverged) {
  const Config c =
      tiny("diverged_at_end", {"optimizer.lr=1e30", "training.steps=6", "checkpoint.interval=2",
                               "lr_scheduler.warmup_steps=1", "training.max_skipped_steps=10"});
  std::string log;
  const std::string what = diverged_what(c, &log);
  EXPECT_NE(what.find("training diverged: ended at step 6 after "), std::string::npos) << what;
  EXPECT_NE(what.find("the last checkpoint is none"), std::string::npos) << what;
  EXPECT_EQ(log.find("the last one is kept"), std::string::npos) << log;
  EXPECT_NE(log.find("none exists yet"), std::string::npos) << log;
}

// Defect 6: another holder of run.dir/.lock (here this process, through its own descriptor, as a
// second `hp train` would be): the run fails at once naming the holder and the lock, writes
// nothing.
TEST(Reliability, SecondRunOnTheSameDirFailsNamingTheHolder) {
  const Config c = tiny("locked");
  fs::create_directories(c.run.dir);
  const std::string lock = c.run.dir + "/.lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string holder = "host otherhost pid 4242\n";
  ASSERT_EQ(::write(fd, holder.data(), holder.size()), ssize_t(holder.size()));
  try {
    run(c);
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("host otherhost pid 4242"), std::string::npos) << what;
    EXPECT_NE(what.find(lock), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(c.run.dir + "/config.yaml"));
  EXPECT_FALSE(fs::exists(c.run.dir + "/metrics.jsonl"));
  ::close(fd);  // released: the run goes ahead, and the lock names it while it runs
  EXPECT_EQ(run(c).steps.size(), 6u);
}

// A fresh run into a directory with checkpoints is refused; --overwrite deletes them first.
TEST(Reliability, FreshRunIntoOldCheckpointsIsRefusedUnlessOverwrite) {
  const Config old_run = tiny("reuse", {"training.steps=5", "checkpoint.interval=2"});
  run(old_run);
  ASSERT_TRUE(fs::exists(old_run.run.dir + "/" + checkpoint::step_dir_name(4)));
  ASSERT_TRUE(fs::exists(old_run.run.dir + "/" + checkpoint::step_dir_name(5)));
  Config fresh = old_run;
  fresh.training.steps = 3;
  try {
    run(fresh);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("use --resume auto, or a new run.dir, or --overwrite"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::exists(old_run.run.dir + "/" + checkpoint::step_dir_name(5)));  // untouched
  TrainOptions o;
  o.overwrite = true;
  const TrainResult r = run(fresh, nullptr, o);
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.first_step, 1);
  for (int64_t s : {4, 5})  // (step 2 is the new run's own)
    EXPECT_FALSE(fs::exists(old_run.run.dir + "/" + checkpoint::step_dir_name(s))) << s;
  EXPECT_EQ(checkpoint::find_latest(fresh.run.dir).value_or(""),
            (fs::path(fresh.run.dir) / checkpoint::step_dir_name(3)).string());
  std::ifstream in(fresh.run.dir + "/metrics.jsonl");
  std::string line;
  int64_t lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 3);
  // --resume continues the run in place; --overwrite with --resume is refused.
  o.resume = "auto";
  EXPECT_THROW(run(fresh, nullptr, o), ValueError);
}

// Defect 7: metrics to a full disk (/dev/full): one warning per step, the run completes, and the
// end says the metrics are incomplete.
TEST(Reliability, MetricsOnAFullDiskWarnAndTheRunCompletes) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const Config c = tiny("full_disk");
  fs::create_directories(c.run.dir);
  fs::create_symlink("/dev/full", c.run.dir + "/metrics.jsonl");
  fs::create_symlink("/dev/full", c.run.dir + "/metrics.svg");
  std::string log;
  const TrainResult r = run(c, &log);
  EXPECT_EQ(r.steps.size(), 6u);
  EXPECT_FALSE(r.last_checkpoint.empty());
  for (int step = 1; step <= 6; ++step) {
    const std::string warning = "warning: step " + std::to_string(step) + ": cannot write ";
    const size_t at = log.find(warning);
    EXPECT_NE(at, std::string::npos) << step << "\n" << log;
    EXPECT_EQ(log.find(warning, at + 1), std::string::npos) << "twice at step " << step;
  }
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << log;
  EXPECT_NE(log.find("warning: metrics are incomplete: 7 write(s) failed, the first to " +
                     c.run.dir + "/metrics.jsonl at step 1"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace hp::train
