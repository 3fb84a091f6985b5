// HyperOffload in the training loop: optimizer state and activations on the host or disk tier train
// bitwise like the device tier (and resume exactly), the run log counts what moved, a full disk
// tier ends the run naming the file, and memory.device_budget caps the device tier with an error
// naming what fills it.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "corpus.h"
#include "error_of.h"
#include "hp/core/allocator.h"
#include "hp/io/json.h"
#include "hp/offload/async_file.h"
#include "hp/train/config.h"
#include "hp/train/memory_plan.h"
#include "hp/train/trainer.h"
#include "train/train_run.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;

std::string corpus() {
  static const std::string path = testing::corpus_prefix("hp_offload_test", 100000);
  return path;
}

// Every run directory and the corpus of this process, removed when its tests end.
class TempFiles : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path(), ec))
      if (e.path().filename().string().rfind(prefix(), 0) == 0) fs::remove_all(e.path(), ec);
  }
  static std::string prefix() { return "hp_offload_test_" + std::to_string(::getpid()) + "_"; }
};
[[maybe_unused]] ::testing::Environment* const kTempFiles =
    ::testing::AddGlobalTestEnvironment(new TempFiles);

std::string run_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / (TempFiles::prefix() + name);
  fs::remove_all(p);
  return p.string();
}

Config tiny(const std::string& name, std::vector<std::string> sets = {}) {
  const std::string yaml = R"(model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2,
        intermediate: 64}
data: {path: )" + corpus() +
                           R"(}
optimizer: {lr: 0.01}
training: {steps: 20, batch_size: 4, seq_len: 32, seed: 5}
metrics: {log_every: 1, progress: none}
checkpoint: {save_final: false}
run: {dir: )" + run_dir(name) +
                           "}\n";
  return parse_config(yaml, "tiny.yaml", sets);
}

using test::quiet_train;

using test::losses;

TEST(Offload, OptimizerOnHostOrDiskTrainsBitwiseLikeDevice) {
  const TrainResult dev = quiet_train(tiny("dev"));
  const TrainResult host = quiet_train(tiny("host", {"offload.optimizer=host"}));
  const Config disk_cfg = tiny("disk", {"offload.optimizer=disk"});
  const TrainResult disk = quiet_train(disk_cfg);
  ASSERT_EQ(dev.steps.size(), 20u);
  EXPECT_EQ(losses(dev), losses(host));
  EXPECT_EQ(losses(dev), losses(disk));
  // The state left the device tier: its peak is lower by at least the AdamW moments (8 bytes per
  // parameter), and the host tier holds them instead (host) or only a group's worth (disk).
  const int64_t moments = 8 * dev.num_parameters;
  EXPECT_LE(host.peak_mem_bytes, dev.peak_mem_bytes - moments);
  EXPECT_LE(disk.peak_mem_bytes, dev.peak_mem_bytes - moments);
  const StepRecord& h = host.steps.back();
  const StepRecord& d = disk.steps.back();
  EXPECT_GE(h.host_mem_bytes, moments);
  EXPECT_EQ(h.host_to_disk_bytes, 0);
  EXPECT_EQ(h.device_to_host_bytes, 4 * dev.num_parameters);  // the gradients, once
  EXPECT_EQ(d.host_to_disk_bytes, moments);
  EXPECT_EQ(d.disk_to_host_bytes, moments);
  EXPECT_LT(d.host_mem_bytes, moments);
  EXPECT_EQ(dev.steps.back().device_to_host_bytes, 0);
  // metrics.jsonl carries the per-step transfer counts and wait.
  std::ifstream in(disk_cfg.run.dir + "/metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const io::Json j = io::parse_json(last, "metrics.jsonl");
  EXPECT_EQ(j["offload_bytes"].get_int("host_to_disk"), moments);
  EXPECT_EQ(j["offload_bytes"].get_int("disk_to_host"), moments);
  EXPECT_TRUE(j.contains("transfer_wait_s"));
  // The disk tier's scratch file is gone after the run.
  EXPECT_TRUE(fs::is_empty(disk_cfg.run.dir + "/offload"));
}

TEST(Offload, MastersAndGradientsOnHostTrainBitwiseLikeDevice) {
  const TrainResult dev = quiet_train(tiny("dev2", {"training.steps=6"}));
  const TrainResult all = quiet_train(tiny("all", {"training.steps=6", "offload.optimizer=disk",
                                                   "offload.params=host", "offload.grads=host"}));
  EXPECT_EQ(losses(dev), losses(all));
  // Only the gathered compute copies, activations and the reductions' buffers stay on the device:
  // the f32 masters and moments (12 bytes per parameter, live through forward and backward) and
  // the gradients left it.
  EXPECT_LE(all.peak_mem_bytes, dev.peak_mem_bytes - 12 * dev.num_parameters);
  // Every step gathers each group's f32 shard up (forward; backward re-gathers the layers) and
  // brings each reduction's f32 result down once.
  const StepRecord& r = all.steps.back();
  EXPECT_GE(r.host_to_device_bytes, 4 * dev.num_parameters);
  EXPECT_EQ(r.device_to_host_bytes, 4 * dev.num_parameters);
}

TEST(Offload, DiskRunResumesExactly) {
  const TrainResult full = quiet_train(tiny("full", {"offload.optimizer=disk"}));
  Config c = tiny("part", {"offload.optimizer=disk"});
  TrainOptions o;
  o.stop_after = 8;
  const TrainResult first = quiet_train(c, o);
  ASSERT_TRUE(first.interrupted);
  // The files a killed 2-rank run of this host left (rank 1's too, a rank this resume lacks).
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  for (int rank : {0, 1})
    std::ofstream(c.run.dir + "/offload/" +
                  offload::scratch_file_name("optimizer", rank, host, dead))
        << "x";
  TrainOptions again;
  again.resume = "auto";
  const TrainResult rest = quiet_train(c, again);
  std::vector<double> joined = losses(first);
  for (double l : losses(rest)) joined.push_back(l);
  EXPECT_EQ(joined, losses(full));
  EXPECT_TRUE(fs::is_empty(c.run.dir + "/offload"));
}

TEST(Offload, BudgetTooSmallForOneLayerIsRefusedBeforeTrainingWithThePlan) {
  const std::string e =
      testing::error_of([&] { quiet_train(tiny("budget", {"memory.device_budget=64KiB"})); });
  EXPECT_NE(e.find("[memory] memory.device_budget = 64.00 KiB cannot hold even one layer's step"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("device "), std::string::npos) << e;  // the plan's table
  EXPECT_NE(e.find("does NOT fit"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(run_dir("budget") + "/metrics.jsonl"));  // no step ran
  EXPECT_EQ(Allocator::instance().device_budget(), 0);             // the run's budget ended with it
}

TEST(Offload, MemoryPlanMatchesTheMeasuredPeak) {
  // 4 layers: the plan measures at 2 and 3 and extrapolates; 4 rows × 32 tokens from 1 × 16, 32.
  for (const char* opt : {"none", "disk"}) {
    const Config c = tiny(std::string("plan_") + opt,
                          {"model.layers=4", "training.steps=3",
                           std::string("offload.optimizer=") + opt, "memory.device_budget=64MiB"});
    const MemoryPlan plan = plan_memory(c);
    const TrainResult r = quiet_train(c);
    // Stated tolerance: activations within 15%, the device tier's peak within 20%.
    EXPECT_NEAR(double(plan.device.activations), double(r.act_mem_bytes),
                0.15 * double(r.act_mem_bytes))
        << opt;
    EXPECT_NEAR(double(plan.device.total()), double(r.peak_mem_bytes),
                0.20 * double(r.peak_mem_bytes))
        << opt;
    EXPECT_TRUE(plan.fits());
    EXPECT_GT(plan.max_rows(), 4);
    EXPECT_GT(plan.max_seq_len(), 32);
    EXPECT_EQ(plan.parameters, r.num_parameters);
    if (std::string(opt) == "disk") {
      EXPECT_EQ(plan.device.optimizer, 0);
      EXPECT_EQ(plan.disk.optimizer, 8 * r.num_parameters);
    }
  }
}

// Activations of a 4-layer model at 128 tokens per row: what the layers save dominates the step.
std::vector<std::string> act_sets(std::vector<std::string> extra) {
  std::vector<std::string> s = {"model.layers=4", "training.steps=6", "training.seq_len=128"};
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}

TEST(Offload, ActivationsOnHostTrainBitwiseLikeDeviceAndLeaveIt) {
  const TrainResult dev = quiet_train(tiny("act_dev", act_sets({})));
  const TrainResult off = quiet_train(
      tiny("act_host", act_sets({"offload.activations=host", "offload.activations_min_bytes=0"})));
  ASSERT_EQ(off.steps.size(), 6u);
  EXPECT_EQ(losses(dev), losses(off));
  EXPECT_EQ(off.offload_modules.size(), 4u);
  // Stated bound: the device tier's activation peak at most 60% of the run without offload (the
  // layers' saved tensors leave it; the logits, the loss and two layers' worth in backward stay).
  EXPECT_LT(double(off.act_mem_bytes), 0.6 * double(dev.act_mem_bytes))
      << off.act_mem_bytes << " vs " << dev.act_mem_bytes;
  const StepRecord& r = off.steps.back();
  EXPECT_GT(r.device_to_host_bytes, 0);
  EXPECT_EQ(r.host_to_device_bytes, r.device_to_host_bytes);  // every storage comes back once
  EXPECT_EQ(dev.steps.back().device_to_host_bytes, 0);
  // With recompute, a recomputed layer saves only its input, and that is what moves.
  const TrainResult rdev = quiet_train(tiny("act_rdev", act_sets({"recompute.mode=full"})));
  const TrainResult roff =
      quiet_train(tiny("act_roff", act_sets({"recompute.mode=full", "offload.activations=host",
                                             "offload.activations_min_bytes=0"})));
  EXPECT_EQ(losses(rdev), losses(roff));
  EXPECT_EQ(losses(rdev), losses(dev));
  EXPECT_GT(roff.steps.back().device_to_host_bytes, 0);
  EXPECT_LT(roff.steps.back().device_to_host_bytes, r.device_to_host_bytes);
  // A selection like recompute's: the mlp blocks of every second layer.
  const TrainResult sel = quiet_train(
      tiny("act_sel",
           act_sets({"offload.activations=host", "offload.activations_every_k_layers=2",
                     "offload.activations_modules=[mlp]", "offload.activations_min_bytes=0"})));
  EXPECT_EQ(losses(sel), losses(dev));
  EXPECT_EQ(sel.offload_modules,
            (std::vector<std::string>{"model.layers.0.mlp", "model.layers.2.mlp"}));
}

TEST(Offload, ActivationsOnDiskTrainBitwiseLikeDeviceThroughTheFile) {
  const TrainResult dev = quiet_train(tiny("dsk_dev", act_sets({})));
  const Config c =
      tiny("dsk_off", act_sets({"offload.activations=disk", "offload.activations_min_bytes=0",
                                "metrics.progress=lines"}));
  std::ostringstream log;
  TrainOptions o;
  o.log = &log;
  const TrainResult off = train(c, o);
  ASSERT_EQ(off.steps.size(), 6u);
  EXPECT_EQ(losses(dev), losses(off));
  EXPECT_LT(double(off.act_mem_bytes), 0.6 * double(dev.act_mem_bytes))
      << off.act_mem_bytes << " vs " << dev.act_mem_bytes;
  // Every saved storage goes down to the file and comes back once, and the log counts both hops.
  const StepRecord& r = off.steps.back();
  EXPECT_GT(r.host_to_disk_bytes, 0);
  EXPECT_EQ(r.disk_to_host_bytes, r.host_to_disk_bytes);
  EXPECT_EQ(r.device_to_host_bytes, r.host_to_disk_bytes);
  EXPECT_EQ(r.host_to_device_bytes, r.disk_to_host_bytes);
  // The host tier held only staging buffers: at the step's end nothing of the activations.
  EXPECT_LT(r.host_mem_bytes, r.host_to_disk_bytes);
  // With recompute (a recomputed layer's input moves) and a block selection.
  const TrainResult roff =
      quiet_train(tiny("dsk_roff", act_sets({"recompute.mode=full", "offload.activations=disk",
                                             "offload.activations_every_k_layers=2",
                                             "offload.activations_min_bytes=0"})));
  EXPECT_EQ(losses(roff), losses(dev));
  EXPECT_GT(roff.steps.back().disk_to_host_bytes, 0);
  std::ifstream in(c.run.dir + "/metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const io::Json j = io::parse_json(last, "metrics.jsonl");
  EXPECT_EQ(j["offload_bytes"].get_int("host_to_disk"), r.host_to_disk_bytes);
  EXPECT_TRUE(fs::is_empty(c.run.dir + "/offload"));  // the scratch file is deleted
  // Each step's log line says what moved per tier and how long the step waited.
  EXPECT_NE(log.str().find("activation offload: disk for 4 modules"), std::string::npos);
  EXPECT_NE(log.str().find(" h>disk "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find(" waited "), std::string::npos) << log.str();
}

TEST(Offload, FullDiskTierEndsTheRunNamingFileAndBytesAndTheCheckpointLoads) {
  // Four steps saved at step 4; the resumed run's disk tier then fills up (a file size limit below
  // one step's activations) in step 5: the run ends with an IoError naming the file and the bytes,
  // and the step-4 checkpoint still resumes, bitwise like an uninterrupted run.
  const std::vector<std::string> sets =
      act_sets({"offload.activations=disk", "training.steps=6", "checkpoint.interval=4"});
  const TrainResult straight = quiet_train(tiny("full_ref", sets));
  Config c = tiny("full_run", sets);
  TrainOptions o;
  o.stop_after = 4;
  const TrainResult first = quiet_train(c, o);
  ASSERT_TRUE(first.interrupted);
  ASSERT_TRUE(fs::exists(c.run.dir + "/step-00000004"));
  struct rlimit old = {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 256 << 10;  // above metrics.jsonl, below the activations of one step
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  TrainOptions again;
  again.resume = "auto";
  const std::string e = testing::error_of([&] { quiet_train(c, again); });
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_NE(e.find("[offload] " + c.run.dir + "/offload/activations-rank0-"), std::string::npos)
      << e;
  EXPECT_NE(e.find("-pid"), std::string::npos) << e;
  EXPECT_NE(e.find(": cannot write "), std::string::npos) << e;
  EXPECT_NE(e.find(" bytes ("), std::string::npos) << e;
  EXPECT_NE(e.find("memory.disk_dir"), std::string::npos) << e;
  const TrainResult rest = quiet_train(c, again);
  std::vector<double> joined = losses(first);
  for (double l : losses(rest)) joined.push_back(l);
  EXPECT_EQ(joined, losses(straight));
}

TEST(Offload, ActivationOffloadFitsLongerSequencesInTheSameBudget) {
  // hp memory plan measures activations through the trainer's own parallelize step, so it sees
  // what offload leaves on the device tier.
  const std::vector<std::string> sets = act_sets({"memory.device_budget=24MiB"});
  const MemoryPlan dev = plan_memory(tiny("plan_act_dev", sets));
  std::vector<std::string> off_sets = sets;
  off_sets.push_back("offload.activations=host");
  const MemoryPlan off = plan_memory(tiny("plan_act_off", off_sets));
  EXPECT_LT(off.device.activations, dev.device.activations);
  EXPECT_GE(double(off.max_seq_len()), 1.7 * double(dev.max_seq_len()))
      << off.max_seq_len() << " vs " << dev.max_seq_len();
}

TEST(Offload, LargestFirstOffloadsTheBiggestSaversUntilThePlanFits) {
  // Candidates: the attention and MLP blocks of the 4 layers. A budget halfway between the plan
  // with all of them offloaded and the plan with none.
  const std::vector<std::string> base =
      act_sets({"offload.activations=host", "offload.activations_modules=[self_attn, mlp]",
                "offload.activations_min_bytes=0", "training.steps=3"});
  std::vector<std::string> all_sets = base;
  all_sets.push_back("memory.device_budget=1GiB");
  const MemoryPlan all = plan_memory(tiny("lg_all", all_sets));
  const MemoryPlan none = plan_memory(tiny("lg_none", act_sets({"memory.device_budget=1GiB"})));
  ASSERT_EQ(all.activation_blocks.size(), 8u);
  ASSERT_LT(all.device.total(), none.device.total());
  const int64_t budget = (all.device.total() + none.device.total()) / 2;
  const std::string budget_set = "memory.device_budget=" + std::to_string(budget);
  std::vector<std::string> sets = base;
  sets.push_back("offload.activations_select=largest");
  sets.push_back(budget_set);
  const Config c = tiny("lg", sets);
  const MemoryPlan plan = plan_memory(c);
  const std::vector<std::string> chosen = plan.offloaded_blocks();
  EXPECT_FALSE(chosen.empty());
  EXPECT_LT(chosen.size(), plan.activation_blocks.size());
  EXPECT_TRUE(plan.fits()) << plan.to_text();
  // Largest first: every offloaded block saves at least as much as any kept one; the host tier
  // holds what moved.
  int64_t smallest_moved = INT64_MAX, largest_kept = 0, moved = 0;
  for (const MemoryPlan::Block& b : plan.activation_blocks) {
    const bool swapped = b.fate == MemoryPlan::Fate::swapped;
    if (swapped) smallest_moved = std::min(smallest_moved, b.bytes), moved += b.bytes;
    if (!swapped) largest_kept = std::max(largest_kept, b.bytes);
  }
  EXPECT_TRUE(plan.recomputed_blocks().empty());
  EXPECT_GE(smallest_moved, largest_kept);
  EXPECT_EQ(plan.host.activations, moved);
  EXPECT_GT(moved, 0);
  const std::string text = plan.to_text();
  EXPECT_NE(text.find("offload    activations host (largest first until it fits): " +
                      std::to_string(chosen.size()) + " of 8 blocks swapped, 0 recomputed"),
            std::string::npos)
      << text;
  // The run offloads exactly those, stays within the budget (an allocation past it throws) and
  // trains bitwise like the run without offload, which does not fit that budget.
  const TrainResult r = quiet_train(c);
  EXPECT_EQ(r.offload_modules, chosen);
  EXPECT_LE(r.peak_mem_bytes, budget);
  EXPECT_NEAR(double(plan.device.activations), double(r.act_mem_bytes),
              0.20 * double(r.act_mem_bytes));
  const TrainResult dev = quiet_train(tiny("lg_dev", act_sets({"training.steps=3"})));
  EXPECT_EQ(losses(r), losses(dev));
  EXPECT_GT(dev.peak_mem_bytes, budget);
}

TEST(Offload, AutoRecomputesOrSwapsEachChosenBlockByCost) {
  // The GEMM rate decides: at 10^6 TFLOP/s a block's forward costs nothing, so every chosen block
  // is recomputed; at 10^-6 its backward hides any swap, so every one is swapped. Either way the
  // run trains bitwise like the one without, within the budget.
  const std::vector<std::string> base = act_sets(
      {"offload.activations=disk", "offload.activations_modules=[self_attn, mlp]",
       "offload.activations_min_bytes=0", "offload.activations_select=auto", "training.steps=3"});
  const MemoryPlan all = plan_memory(
      tiny("au_all",
           act_sets({"offload.activations=host", "offload.activations_modules=[self_attn, mlp]",
                     "offload.activations_min_bytes=0", "memory.device_budget=1GiB"})));
  const MemoryPlan none = plan_memory(tiny("au_none", act_sets({"memory.device_budget=1GiB"})));
  // Recompute saves less than a swap (the region keeps its input): a budget closer to none.
  const int64_t budget = all.device.total() + 3 * (none.device.total() - all.device.total()) / 4;
  const TrainResult dev = quiet_train(tiny("au_dev", act_sets({"training.steps=3"})));
  for (const char* rate : {"1e6", "1e-6"}) {
    std::vector<std::string> sets = base;
    sets.push_back("memory.device_budget=" + std::to_string(budget));
    sets.push_back(std::string("metrics.peak_tflops=") + rate);
    const Config c = tiny(std::string("au_") + rate, sets);
    const MemoryPlan plan = plan_memory(c);
    const bool fast = std::string(rate) == "1e6";
    const std::vector<std::string> rec = plan.recomputed_blocks(), swp = plan.offloaded_blocks();
    EXPECT_FALSE((fast ? rec : swp).empty()) << rate << "\n" << plan.to_text();
    EXPECT_TRUE((fast ? swp : rec).empty()) << rate << "\n" << plan.to_text();
    EXPECT_GT(plan.tier_bytes_per_s, 0);
    EXPECT_EQ(plan.disk.activations == 0, fast) << plan.to_text();
    const std::string text = plan.to_text();
    EXPECT_NE(text.find("recomputed or swapped by cost"), std::string::npos) << text;
    EXPECT_NE(text.find(fast ? "recomputed: model.layers." : "swapped: model.layers."),
              std::string::npos)
        << text;
    const TrainResult r = quiet_train(c);
    EXPECT_EQ(losses(r), losses(dev)) << rate;
    EXPECT_EQ(r.recompute_modules, rec) << rate;
    EXPECT_EQ(r.offload_modules, swp) << rate;
    EXPECT_LE(r.peak_mem_bytes, budget) << rate;
  }
  // auto plans recompute itself.
  const std::string e = testing::error_of([&] {
    std::vector<std::string> sets = base;
    sets.push_back("memory.device_budget=1GiB");
    sets.push_back("recompute.mode=full");
    tiny("au_rec", sets);
  });
  EXPECT_NE(e.find("recompute.mode: must be none with offload.activations_select auto"),
            std::string::npos)
      << e;
}

TEST(Offload, ActivationKeysNameTheirErrors) {
  const std::string glob = testing::error_of([&] {
    quiet_train(
        tiny("act_glob", {"offload.activations=host", "offload.activations_modules=[attn]"}));
  });
  EXPECT_NE(glob.find("[offload] modules glob 'attn' matches no block of the selected layers"),
            std::string::npos)
      << glob;
  const std::string tier =
      testing::error_of([&] { tiny("act_tier", {"offload.activations=ssd"}); });
  EXPECT_NE(tier.find("offload.activations"), std::string::npos) << tier;
  EXPECT_NE(tier.find("ssd"), std::string::npos) << tier;
  const std::string no_budget = testing::error_of([&] {
    tiny("act_nob", {"offload.activations=disk", "offload.activations_select=largest"});
  });
  EXPECT_NE(no_budget.find("offload.activations_select: largest needs memory.device_budget"),
            std::string::npos)
      << no_budget;
  const std::string nothing = testing::error_of([&] {
    tiny("act_none", {"memory.device_budget=1GiB", "offload.activations_select=largest"});
  });
  EXPECT_NE(nothing.find("largest needs offload.activations host or disk, got "
                         "offload.activations none"),
            std::string::npos)
      << nothing;
  const std::string select =
      testing::error_of([&] { tiny("act_sel", {"offload.activations_select=biggest"}); });
  EXPECT_NE(select.find("offload.activations_select"), std::string::npos) << select;
  EXPECT_NE(select.find("biggest"), std::string::npos) << select;
  const Config c =
      tiny("act_yaml", {"offload.activations=disk", "offload.activations_modules=[mlp]",
                        "offload.activations_every_k_layers=3",
                        "offload.activations_select=largest", "memory.device_budget=1GiB"});
  EXPECT_EQ(parse_config(to_yaml(c), "resolved.yaml"), c);
}

TEST(Offload, DeviceBudgetErrorsAndKeys) {
  // A bad size is a config error naming key and value.
  const std::string bad = testing::error_of([&] { tiny("bad", {"memory.device_budget=6 gigs"}); });
  EXPECT_NE(bad.find("memory.device_budget: bad size '6 gigs'"), std::string::npos) << bad;
  const std::string where = testing::error_of([&] { tiny("bad2", {"offload.optimizer=ssd"}); });
  EXPECT_NE(where.find("offload.optimizer"), std::string::npos) << where;
  EXPECT_NE(where.find("ssd"), std::string::npos) << where;
  // The keys round-trip through the resolved YAML.
  const Config c = tiny("yaml", {"memory.device_budget=6GiB", "offload.optimizer=disk",
                                 "memory.disk_dir=/tmp/x", "offload.params=host"});
  EXPECT_EQ(parse_config(to_yaml(c), "resolved.yaml"), c);
}

}  // namespace
}  // namespace hp::train
