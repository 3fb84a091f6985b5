// Pipeline parallelism, measured (issue 16's efficiency targets; docs/PERFORMANCE.md "Pipeline
// parallelism"). Real training steps (train::train) at parallel.pp 2, one process per stage:
//   1. an 8-layer Qwen3 (f32, 8 microbatches of one 128-token row) with each schedule — gpipe,
//      1f1b, interleaved_1f1b (2 virtual stages), zb_h1, zb_h2: tokens/s and, per pipeline rank,
//      the measured bubble (1 − its compute time / the longest rank's schedule time) beside the
//      schedule's theory at unit costs (F = I = W = 1, B = 2) and beside the same schedule
//      simulated with the step's measured mean F / B / I / W times per stage (the theory for the
//      real costs); the ratios measured / theory, and zb_h1's and zb_h2's bubble / 1f1b's
//      (measured, theory and model side by side);
//      each schedule runs twice: with the receives posted at the step's start (the default) and
//      posted when the action needing them comes up (HP_PP_RECV_AHEAD=0), side by side, with
//      every rank's MPI progress thread's CPU time as a share of the case's wall time;
//   2. an embedding/head-heavy model (hidden 64, vocab 4096: the head and loss cost about five
//      layers) at 1f1b: the default cost-balanced cut against the layer-count cut [4, 4], tokens/s.
// Each case runs kWarmup + STEPS steps, ROUNDS times (the cases alternate); figures are medians
// over the STEPS timed steps of the case's round with the most tokens/s (the least disturbed by
// other load on a shared machine).
// Run from the repository root (reads data/kjv.txt), 2 ranks with one thread each:
//   HP_NUM_THREADS=1 build/hp launch -n 2 -- build/bench_pipeline [STEPS] [ROUNDS]   (8, 3)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/ops/ops.h"
#include "hp/pipeline/schedule.h"
#include "hp/train/trainer.h"

namespace {

using namespace hp;

constexpr int64_t kWarmup = 2;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// One case's figures: medians over the timed steps.
struct Figures {
  double tokens_per_s = 0, theory = 0;
  std::vector<double> bubble, model;  // [pipeline rank]
  std::vector<double> action_s;       // [stage × 4]: F, B, I, W seconds
  std::vector<double> rank_s;         // [rank × 3]: compute, receive wait, other seconds
  std::vector<double> progress;       // [rank]: progress thread CPU s / the case's wall s
  std::string cut;                    // "[4, 4]": layers per stage
};

Figures run_case(const std::string& run_dir, const std::string& model_yaml, int64_t steps,
                 const std::vector<std::string>& sets) {
  const char* root = std::getenv("HP_SOURCE_DIR");
  const std::string corpus = std::string(root ? root : ".") + "/data/kjv.txt";
  const std::string yaml =
      "model: " + model_yaml + "\ndata: {path: " + corpus +
      "}\noptimizer: {name: adamw, lr: 0.001}\n"
      "training: {steps: " +
      std::to_string(kWarmup + steps) +
      ", batch_size: 8, seq_len: 128, seed: 0, mixed_precision: f32, grad_accum: 8}\n"
      "parallel: {pp: 2}\nmetrics: {log_every: 1, progress: none}\n"
      "checkpoint: {interval: 0, save_final: false}\nrun: {dir: " +
      run_dir + "}\n";
  const train::Config cfg = train::parse_config(yaml, "bench_pipeline", sets);
  std::ostringstream log;
  train::TrainOptions opt;
  opt.log = &log;
  opt.overwrite = true;
  const double cpu0 = dist::progress_cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  const train::TrainResult res = train::train(cfg, opt);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Figures f;
  const Tensor share =
      dist::world()->all_gather(from_data<double>({(dist::progress_cpu_s() - cpu0) / wall}, {1}));
  f.progress = share.to_vector();
  // The cut, from the run log's pipeline line (rank 0): "... 2 stages of [6, 2] layers ...".
  const std::string text = log.str();
  const size_t at = text.find("stages of [");
  if (at != std::string::npos) f.cut = text.substr(at + 10, text.find(']', at) - at - 9);
  std::vector<double> step_s;
  const size_t ranks = res.steps.back().pp_bubble.size();
  const size_t actions = res.steps.back().pp_action_s.size();
  std::vector<std::vector<double>> bubble(ranks), model(ranks), action(actions), rank(3 * ranks);
  for (size_t i = size_t(kWarmup); i < res.steps.size(); ++i) {
    const train::StepRecord& r = res.steps[i];
    step_s.push_back(r.step_s);
    for (size_t k = 0; k < ranks; ++k) {
      bubble[k].push_back(r.pp_bubble[k]);
      model[k].push_back(r.pp_bubble_model[k]);
    }
    for (size_t k = 0; k < actions; ++k) action[k].push_back(r.pp_action_s[k]);
    for (size_t k = 0; k < ranks; ++k) {  // compute, wait, the rest of the schedule time
      const double* t = &r.pp_rank_s[3 * k];
      rank[3 * k].push_back(t[0]);
      rank[3 * k + 1].push_back(t[1]);
      rank[3 * k + 2].push_back(t[2] - t[0] - t[1]);
    }
    f.theory = r.pp_bubble_theory;
  }
  f.tokens_per_s = double(cfg.training.batch_size * cfg.training.seq_len) / median(step_s);
  for (size_t k = 0; k < ranks; ++k) {
    f.bubble.push_back(median(bubble[k]));
    f.model.push_back(median(model[k]));
  }
  for (auto& a : action) f.action_s.push_back(median(a));
  for (auto& a : rank) f.rank_s.push_back(median(a));
  return f;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

std::string ratio(double a, double b) {
  if (!(b > 0)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", a / b);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 8;
  const int64_t rounds = argc > 2 ? std::atoll(argv[2]) : 3;
  if (steps < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: bench_pipeline [STEPS >= 1] [ROUNDS >= 1]\n");
    return 2;
  }
  const auto world = dist::world();
  if (world->size() != 2) {
    std::fprintf(stderr, "bench_pipeline: run on 2 ranks (hp launch -n 2 --), got %d\n",
                 world->size());
    return 2;
  }
  // One scratch run directory for all ranks: rank 0's pid.
  const double pid0 = world->broadcast(from_data<double>({double(getpid())}, {1}), 0).item();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("hp_bench_pipeline_" + std::to_string(int64_t(pid0))))
                              .string();
  const bool print = world->rank() == 0;

  const std::string deep =
      "{arch: qwen3, hidden: 128, layers: 8, heads: 4, kv_heads: 2, intermediate: 384, "
      "vocab: 259}";
  const char* schedules[] = {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2"};
  constexpr size_t kSchedules = std::size(schedules);
  const std::string heavy =
      "{arch: qwen3, hidden: 64, layers: 8, heads: 4, kv_heads: 2, intermediate: 192, "
      "vocab: 4096}";
  // Cases [0, S): the S schedules, receives posted ahead; [S, 2S): the same, posted when needed;
  // 2S, 2S + 1: the head-heavy model's balanced and layer-count cuts.
  constexpr size_t kPipelineCases = 2 * kSchedules;
  std::vector<Figures> best(kPipelineCases + 2);
  for (int64_t round = 0; round < rounds; ++round)
    for (size_t c = 0; c < best.size(); ++c) {
      const bool schedule_case = c < kPipelineCases;
      const size_t k = c % kSchedules;
      std::vector<std::string> sets;
      if (schedule_case) sets.push_back(std::string("parallel.pipeline.schedule=") + schedules[k]);
      if (schedule_case && k == 2) sets.push_back("parallel.pipeline.virtual_stages=2");
      if (c == kPipelineCases + 1) sets.push_back("parallel.pipeline.layers_per_stage=[4, 4]");
      // Read by each run's pipeline executor (pipeline/executor.h); the bench is single-threaded
      // here (one thread per rank, the progress thread does not read the environment).
      setenv("HP_PP_RECV_AHEAD", schedule_case && c >= kSchedules ? "0" : "1", 1);
      const Figures f =
          run_case(dir + "/case" + std::to_string(c), schedule_case ? deep : heavy, steps, sets);
      if (f.tokens_per_s > best[c].tokens_per_s) best[c] = f;
    }
  const Figures& balanced = best[kPipelineCases];
  const Figures& even = best[kPipelineCases + 1];
  world->barrier();
  if (!print) return 0;
  std::filesystem::remove_all(dir);

  std::printf(
      "bench_pipeline: pp 2 on 2 ranks, %d thread(s) per rank, f32, 8 microbatches of 1 x "
      "128 tokens; medians of %lld steps after %lld warm-up, the best of %lld rounds\n"
      "measured: 1 - the rank's compute time / the longest rank's schedule time; theory: "
      "F = I = W = 1, B = 2; model: the schedule simulated with the measured F / B / I / W "
      "times of every stage; progress: the rank's MPI progress thread's CPU time / wall time\n",
      num_threads(), static_cast<long long>(steps), static_cast<long long>(kWarmup),
      static_cast<long long>(rounds));
  for (int ahead = 1; ahead >= 0; --ahead) {
    const auto first = best.begin() + (ahead ? 0 : std::ptrdiff_t(kSchedules));
    const std::vector<Figures> figs(first, first + std::ptrdiff_t(kSchedules));
    std::printf("\n1%s. qwen3 hidden 128, 8 layers, intermediate 384, vocab 259 (cut %s), %s\n",
                ahead ? "" : "b", figs[1].cut.c_str(),
                ahead ? "receives posted at the step's start (default)"
                      : "receives posted when needed (HP_PP_RECV_AHEAD=0)");
    std::printf("%-17s %9s %4s %8s %7s %8s %7s %8s %17s %8s   %s\n", "schedule", "tokens/s", "rank",
                "measured", "theory", "meas/th", "model", "meas/mod", "ms busy/wait/rest",
                "progress", "ms per F / B / I / W of the rank's stages");
    for (size_t i = 0; i < figs.size(); ++i) {
      const Figures& f = figs[i];
      const size_t stages = f.action_s.size() / 4;
      for (size_t r = 0; r < f.bubble.size(); ++r) {
        std::string costs;
        for (size_t s = r; s < stages; s += f.bubble.size()) {
          char buf[96];
          const double* a = &f.action_s[4 * s];
          std::snprintf(buf, sizeof buf, "%ss%zu %.1f / %.1f / %.1f / %.1f",
                        costs.empty() ? "" : "; ", s, 1e3 * a[0], 1e3 * a[1], 1e3 * a[2],
                        1e3 * a[3]);
          costs += buf;
        }
        const double* t = &f.rank_s[3 * r];  // compute, wait, other
        char split[64], prog[16];
        std::snprintf(split, sizeof split, "%.0f/%.0f/%.0f", 1e3 * t[0], 1e3 * t[1], 1e3 * t[2]);
        std::snprintf(prog, sizeof prog, "%.2f%%", 100 * f.progress[r]);
        std::printf("%-17s %9s %4zu %8.3f %7.3f %8s %7.3f %8s %17s %8s   %s\n",
                    r ? "" : schedules[i], r ? "" : std::to_string(int64_t(f.tokens_per_s)).c_str(),
                    r, f.bubble[r], f.theory, ratio(f.bubble[r], f.theory).c_str(), f.model[r],
                    ratio(f.bubble[r], f.model[r]).c_str(), split, prog, costs.c_str());
      }
    }
    const Figures& one = figs[1];
    std::printf("\nmean bubble over ranks: measured / theory");
    for (size_t i = 0; i < figs.size(); ++i)
      std::printf("%s %s %s", i ? "," : "", schedules[i],
                  ratio(mean(figs[i].bubble), figs[i].theory).c_str());
    std::printf(
        " (target 0.90x-1.10x)\n                        measured / model at the measured costs");
    for (size_t i = 0; i < figs.size(); ++i)
      std::printf("%s %s %s", i ? "," : "", schedules[i],
                  ratio(mean(figs[i].bubble), mean(figs[i].model)).c_str());
    // The target, zero bubble <= 1/2 of 1f1b's, for both zero-bubble schedules: the
    // measured ratio beside the unit-cost theory's and the model's at the measured costs.
    std::printf("\n%-27s %-25s %7s %7s %9s\n", "bubble / 1f1b's (mean)", "measured", "theory",
                "model", "tokens/s");
    for (size_t i = 0; i < figs.size(); ++i) {
      if (!pipeline::splits_backward(pipeline::schedule_kind_from_name(schedules[i]))) continue;
      const Figures& zb = figs[i];
      char measured[64];
      std::snprintf(measured, sizeof measured, "%.3f / %.3f = %s", mean(zb.bubble),
                    mean(one.bubble), ratio(mean(zb.bubble), mean(one.bubble)).c_str());
      std::printf("%-27s %-25s %7s %7s %9s\n", (std::string(schedules[i]) + " / 1f1b").c_str(),
                  measured, ratio(zb.theory, one.theory).c_str(),
                  ratio(mean(zb.model), mean(one.model)).c_str(),
                  ratio(zb.tokens_per_s, one.tokens_per_s).c_str());
    }
    std::printf("(target: measured <= 0.50x)\n");
  }
  // Posted ahead against posted when needed: the compute per action (the cost of the progress
  // thread and of the outstanding receives to the stages) and the schedule time.
  std::printf(
      "\nposted ahead / when needed: compute time per action (F, B, I, W summed over the "
      "stages), tokens/s\n");
  for (size_t i = 0; i < kSchedules; ++i) {
    const Figures& a = best[i];
    const Figures& b = best[i + kSchedules];
    double ca = 0, cb = 0;
    for (size_t k = 0; k < a.action_s.size() && k < b.action_s.size(); ++k) {
      ca += a.action_s[k];
      cb += b.action_s[k];
    }
    std::printf("%-17s compute %s, tokens/s %s\n", schedules[i], ratio(ca, cb).c_str(),
                ratio(a.tokens_per_s, b.tokens_per_s).c_str());
  }

  std::printf("\n2. qwen3 hidden 64, 8 layers, intermediate 192, vocab 4096 (head-heavy), 1f1b\n");
  std::printf("%-26s %9s %s\n", "cut", "tokens/s", "measured bubble per rank");
  for (const auto* f : {&balanced, &even})
    std::printf("%-26s %9.0f %.3f / %.3f\n",
                ((f == &balanced ? "cost-balanced " : "layer count ") + f->cut).c_str(),
                f->tokens_per_s, f->bubble[0], f->bubble[1]);
  std::printf("balanced / layer-count tokens/s: %s (target > 1.00x)\n",
              ratio(balanced.tokens_per_s, even.tokens_per_s).c_str());
  return 0;
}
