// hp bench offload [CONFIG] [--budget SIZE] [--steps N] [--set key=value ...] [--json FILE]
//
// HyperOffload's throughput cost (docs/ARCHITECTURE.md §4c): one invocation trains CONFIG
// (default configs/bench_offload.yaml) three times, each timed like `hp bench train`
// (train/step_timer.h: warm-up until stable, then the median of --steps timed steps):
//   unlimited  no budget, everything on the device tier (the reference)
//   host       memory.device_budget = --budget; masters, gradients and optimizer state on the host
//   disk       the same budget; masters and gradients on the host, optimizer state on the disk tier
// and prints tokens/s beside the ratio to the reference and the targets (host ≤ 15% and
// disk ≤ 40% below it), the AdamW state over the budget, the bytes each step moved per tier and the
// time it waited, and — the disk tier's ceiling — the bandwidth of memory.disk_dir measured with
// the same pread/pwrite pool (offload/async_file.h) on a buffer the size of the rank's state.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "commands.h"
#include "hp/core/byte_size.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/io/json.h"
#include "hp/offload/async_file.h"
#include "hp/ops/ops.h"
#include "hp/train/step_timer.h"
#include "hp/train/trainer.h"

namespace hp::cli {

namespace {

namespace fs = std::filesystem;

struct Variant {
  const char* name;
  std::vector<std::string> sets;
};

struct Result {
  std::string name;
  double tokens_per_s = 0, median_s = 0;
  bool stable = false;
  train::TrainResult run;
};

// Write then read `bytes` through an AsyncFile in `dir` with `threads` workers: GB/s each way.
std::pair<double, double> disk_bandwidth(const std::string& dir, int64_t bytes, int threads) {
  const fs::path path = fs::path(dir) / ("bandwidth-" + std::to_string(::getpid()) + ".bin");
  Tensor buf = full({bytes / 4}, 1.0, DType::f32);
  buf = buf.to(DType::f32);  // touched pages
  offload::AsyncFile f(path.string(), threads);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  f.wait(f.write(0, buf.raw_data(), int64_t(buf.nbytes()), buf.storage()));
  const auto t1 = Clock::now();
  f.wait(f.read(0, buf.raw_data(), int64_t(buf.nbytes()), buf.storage()));
  const auto t2 = Clock::now();
  const double w = std::chrono::duration<double>(t1 - t0).count();
  const double r = std::chrono::duration<double>(t2 - t1).count();
  return {double(buf.nbytes()) / w / 1e9, double(buf.nbytes()) / r / 1e9};
}

}  // namespace

int run_bench_offload(const Args& argv) {
  Args args = argv;
  reject_unknown_flags(args, {"--set", "--steps", "--budget", "--json"});
  std::vector<std::string> sets = {"checkpoint.interval=0", "checkpoint.save_final=false",
                                   "metrics.jsonl=true", "metrics.log_every=1"};
  std::string v, budget = "28MiB", json;
  train::WarmupRule rule;
  while (take_value(args, "--set", &v)) sets.push_back(v);
  if (take_value(args, "--steps", &v)) rule.timed = parse_int("--steps", v, 3, 1 << 20);
  take_value(args, "--budget", &budget);
  take_value(args, "--json", &json);
  std::string config = "configs/bench_offload.yaml";
  if (!args.empty() && args.front().rfind("--", 0) != 0) {
    config = args.front();
    args.erase(args.begin());
  }
  reject_leftovers(args);
  const int64_t budget_bytes = parse_byte_size(budget, "--budget", "bench");
  sets.push_back("training.steps=" + std::to_string(rule.max_warmup + rule.timed));

  const std::vector<Variant> variants = {
      {"unlimited (device tier)", {}},
      {"host: params+grads+optimizer",
       {"memory.device_budget=" + budget, "offload.params=host", "offload.grads=host",
        "offload.optimizer=host"}},
      {"disk: optimizer (params+grads host)",
       {"memory.device_budget=" + budget, "offload.params=host", "offload.grads=host",
        "offload.optimizer=disk"}},
  };
  std::vector<Result> results;
  train::Config last_cfg;
  for (size_t k = 0; k < variants.size(); ++k) {
    std::vector<std::string> s = sets;
    s.insert(s.end(), variants[k].sets.begin(), variants[k].sets.end());
    train::Config cfg = train::load_config(config, s);
    cfg.run.dir += "/" + std::to_string(k);
    last_cfg = cfg;
    train::StepTimer timer(rule);
    train::TrainOptions o;
    o.log = &std::cerr;
    o.overwrite = true;
    o.stop_when = [&timer](const train::StepRecord& r) { return timer.add(r.step_s); };
    std::fprintf(stderr, "bench offload: %s\n", variants[k].name);
    Result r;
    r.name = variants[k].name;
    r.run = train::train(cfg, o);
    r.median_s = timer.median_s();
    r.stable = timer.stable();
    r.tokens_per_s = double(cfg.training.batch_size * cfg.training.seq_len) / r.median_s;
    results.push_back(std::move(r));
  }
  const int64_t params = results[0].run.num_parameters;
  const int64_t state = 8 * params / dist::world()->size();  // AdamW moments per rank
  const std::string disk_dir = last_cfg.memory.disk_dir.empty()
                                   ? (fs::path(last_cfg.run.dir) / "offload").string()
                                   : last_cfg.memory.disk_dir;
  const auto [write_gbs, read_gbs] =
      disk_bandwidth(disk_dir, std::min<int64_t>(state, int64_t(1) << 30),
                     static_cast<int>(last_cfg.memory.io_threads));

  std::printf("\nhp bench offload %s\n", config.c_str());
  std::printf("model      %lld parameters; AdamW state %s per rank = %.2fx memory.device_budget %s\n",
              static_cast<long long>(params), human_bytes(double(state)).c_str(),
              double(state) / double(budget_bytes), budget.c_str());
  std::printf("shape      batch %lld x seq %lld, %s, recompute %s, %d threads, %d rank(s)\n",
              static_cast<long long>(last_cfg.training.batch_size),
              static_cast<long long>(last_cfg.training.seq_len),
              enum_name(last_cfg.training.mixed_precision).c_str(),
              enum_name(last_cfg.recompute.mode).c_str(), num_threads(), dist::world()->size());
  std::printf("disk tier  %s: write %.2f GB/s, read %.2f GB/s (%s through the pread/pwrite pool, "
              "%lld threads, page cache included)\n",
              disk_dir.c_str(), write_gbs, read_gbs, human_bytes(double(std::min<int64_t>(
                                                         state, int64_t(1) << 30)))
                                                         .c_str(),
              static_cast<long long>(last_cfg.memory.io_threads));
  std::printf("timing     warm-up until stable, then the median of %lld timed steps\n\n",
              static_cast<long long>(rule.timed));
  std::printf("%-38s %10s %8s %8s %11s %11s %10s %10s %9s\n", "run", "tokens/s", "ratio",
              "target", "device peak", "host tier", "host<->dev", "disk r+w", "wait s");
  io::JsonValue j;
  j["config"] = config;
  j["num_parameters"] = params;
  j["adamw_state_bytes_per_rank"] = state;
  j["device_budget_bytes"] = budget_bytes;
  j["disk"] =
      io::JsonValue::object({{"dir", disk_dir}, {"write_gbs", write_gbs}, {"read_gbs", read_gbs}});
  j["runs"] = io::JsonValue::array();
  const char* targets[] = {"-", ">= 0.85", ">= 0.60"};
  for (size_t k = 0; k < results.size(); ++k) {
    const Result& r = results[k];
    const train::StepRecord& s = r.run.steps.back();
    const double ratio = r.tokens_per_s / results[0].tokens_per_s;
    char rs[16];
    std::snprintf(rs, sizeof rs, "%.3f", ratio);
    std::printf("%-38s %10.1f %8s %8s %11s %11s %10s %10s %9.4f%s\n", r.name.c_str(),
                r.tokens_per_s, k == 0 ? "1" : rs, targets[k],
                human_bytes(double(r.run.peak_mem_bytes)).c_str(),
                human_bytes(double(s.host_mem_bytes)).c_str(),
                human_bytes(double(s.host_to_device_bytes + s.device_to_host_bytes)).c_str(),
                human_bytes(double(s.host_to_disk_bytes + s.disk_to_host_bytes)).c_str(),
                s.transfer_wait_s, r.stable ? "" : " *");
    j["runs"].push_back(io::JsonValue::object({{"name", r.name},
                                               {"tokens_per_s", r.tokens_per_s},
                                               {"median_step_s", r.median_s},
                                               {"ratio", ratio},
                                               {"stable", r.stable},
                                               {"device_peak_bytes", r.run.peak_mem_bytes},
                                               {"host_mem_bytes", s.host_mem_bytes},
                                               {"host_to_device_bytes", s.host_to_device_bytes},
                                               {"device_to_host_bytes", s.device_to_host_bytes},
                                               {"host_to_disk_bytes", s.host_to_disk_bytes},
                                               {"disk_to_host_bytes", s.disk_to_host_bytes},
                                               {"transfer_wait_s", s.transfer_wait_s}}));
  }
  std::printf("\n(* not stable after the warm-up cap; bytes and wait are the last step's)\n");
  if (!json.empty()) {
    std::ofstream f(json);
    f << j.dump(2) << "\n";
    if (!f) HP_THROW(IoError, "bench", json, ": cannot write");
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace hp::cli
