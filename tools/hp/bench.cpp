// hp bench train [CONFIG] [--steps N] [--set key=value ...] [--no-peer]
//                [--peer-dtype bf16|f32|both] [--peer-steps N] [--json FILE]
//
// Training throughput end to end: runs train::train on CONFIG (default configs/bench_5m.yaml,
// relative to the current directory; the run log goes to stderr), then the PyTorch peer
// (bench/peers/train_peer.py) on the same model, shapes and AdamW settings with the same thread
// count, and prints our tokens/s, TFLOP/s and MFU against the GEMM peak the trainer measured,
// beside the peer's tokens/s and the ratio (docs/ARCHITECTURE.md §8). The bench never saves
// checkpoints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "bench_peer.h"
#include "commands.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/train/trainer.h"

namespace hp::cli {

namespace {

struct BenchOptions {
  std::string config = "configs/bench_5m.yaml";
  std::vector<std::string> sets;
  std::vector<std::string> peer_dtypes;  // empty = no peer
  int64_t peer_steps = 0;                // 0 = min(training.steps, 6)
  std::string json;
};

BenchOptions parse_options(Args args) {
  BenchOptions o;
  // Checkpoints would be timed as part of the steps; a --set may still ask for them.
  o.sets = {"checkpoint.interval=0", "checkpoint.save_final=false"};
  reject_unknown_flags(args, {"--set", "--steps", "--peer-dtype", "--peer-steps", "--json"},
                       {"--no-peer"});
  std::string v;
  while (take_value(args, "--set", &v)) o.sets.push_back(v);
  if (take_value(args, "--steps", &v))
    o.sets.push_back("training.steps=" + std::to_string(parse_int("--steps", v, 1, 1LL << 40)));
  const bool no_peer = take_flag(args, "--no-peer");
  std::string dtype;
  const bool has_dtype = take_value(args, "--peer-dtype", &dtype);
  if (has_dtype && dtype != "bf16" && dtype != "f32" && dtype != "both")
    throw UsageError{"--peer-dtype expects bf16, f32 or both, got '" + dtype + "'"};
  if (take_value(args, "--peer-steps", &v))
    o.peer_steps = parse_int("--peer-steps", v, kPeerWarmupSteps + 1, 1LL << 40);
  take_value(args, "--json", &o.json);
  if (!args.empty() && args.front().rfind("--", 0) != 0) {
    o.config = args.front();
    args.erase(args.begin());
  }
  reject_leftovers(args);
  if (no_peer && (has_dtype || o.peer_steps > 0))
    throw UsageError{"--no-peer excludes --peer-dtype / --peer-steps"};
  if (!no_peer) {
    if (dtype == "both")
      o.peer_dtypes = {"bf16", "f32"};
    else if (has_dtype)
      o.peer_dtypes = {dtype};
    else
      o.peer_dtypes = {""};  // ours: training.mixed_precision, resolved after loading
  }
  return o;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}

// One row of the table: tokens/s and, with the FLOPs per token of our run, TFLOP/s and MFU.
struct Row {
  std::string name;
  size_t timed = 0;
  double tokens_per_s = 0, step_ms = 0, tflops = 0, mfu = 0;
  std::string ratio;  // ours / this row
};

void print_row(const Row& r) {
  std::printf("%-30s %6zu %11.1f %10.1f %9.4f %7s %9s\n", r.name.c_str(), r.timed, r.tokens_per_s,
              r.step_ms, r.tflops, percent(r.mfu).c_str(), r.ratio.c_str());
}

std::string ratio_of(double ours, double theirs) {
  if (!(ours > 0) || !(theirs > 0)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", ours / theirs);
  return buf;
}

}  // namespace

int run_bench(const Args& in) {
  if (in.empty() || in.front() != "train")
    throw UsageError{"expected 'train [CONFIG] [--steps N] [--set key=value ...] [--no-peer]'"};
  BenchOptions opt = parse_options(Args(in.begin() + 1, in.end()));
  const train::Config cfg = train::load_config(opt.config, opt.sets);
  const int threads = num_threads();
  const int64_t peer_steps =
      opt.peer_steps > 0
          ? opt.peer_steps
          : std::max<int64_t>(kPeerWarmupSteps + 1, std::min<int64_t>(cfg.training.steps, 6));
  for (auto& d : opt.peer_dtypes)
    if (d.empty()) d = cfg.training.mixed_precision;
  // Fail before training when the peer cannot mirror the config.
  if (!opt.peer_dtypes.empty()) peer_model_config_json(cfg);

  train::TrainOptions train_opt;
  train_opt.log = &std::cerr;
  const train::TrainResult res = train::train(cfg, train_opt);
  std::vector<double> timed;  // our steps after the warm-up one
  for (size_t i = 1; i < res.steps.size(); ++i) timed.push_back(res.steps[i].step_s);
  const double tflops = res.mfu * res.peak_tflops;
  // Same model and shapes on both sides, so the peer's FLOPs per token are ours.
  const double flops_per_token = res.tokens_per_s > 0 ? tflops * 1e12 / res.tokens_per_s : 0;

  std::vector<PeerRun> peers;
  for (const auto& d : opt.peer_dtypes) {
    std::fprintf(stderr, "peer: PyTorch eager %s, %lld steps (%lld warm-up)\n",
                 d == "bf16" ? "bf16 autocast" : "f32", static_cast<long long>(peer_steps),
                 static_cast<long long>(kPeerWarmupSteps));
    peers.push_back(run_train_peer(cfg, d, peer_steps, threads));
  }

  const int64_t tokens = cfg.training.batch_size * cfg.training.seq_len;
  std::printf("\nhp bench train %s\n", opt.config.c_str());
  std::printf("model      %s, %lld parameters\n",
              cfg.model.arch.empty() ? cfg.model.path.c_str() : cfg.model.arch.c_str(),
              static_cast<long long>(res.num_parameters));
  std::printf(
      "shape      batch %lld x seq %lld = %lld tokens/step, grad_accum %lld, %s, %d threads\n",
      static_cast<long long>(cfg.training.batch_size), static_cast<long long>(cfg.training.seq_len),
      static_cast<long long>(tokens), static_cast<long long>(cfg.training.grad_accum),
      cfg.optimizer.name.c_str(), threads);
  std::printf("hp         mixed_precision %s, low_precision %s, recompute %s\n",
              cfg.training.mixed_precision.c_str(), cfg.low_precision.recipe.c_str(),
              cfg.recompute.mode.c_str());
  std::printf("ceiling    GEMM peak %.4f TFLOP/s (the trainer's MFU denominator)\n\n",
              res.peak_tflops);
  std::printf("%-30s %6s %11s %10s %9s %7s %9s\n", "run", "timed", "tokens/s", "ms/step", "TFLOP/s",
              "MFU", "hp / run");
  print_row({"hp (" + cfg.training.mixed_precision + ")", timed.size(), res.tokens_per_s,
             1e3 * mean(timed), tflops, res.mfu, "-"});

  nlohmann::ordered_json j;
  j["config"] = opt.config;
  j["num_parameters"] = res.num_parameters;
  j["tokens_per_step"] = tokens;
  j["threads"] = threads;
  j["peak_tflops"] = res.peak_tflops;
  j["hp"] = {{"mixed_precision", cfg.training.mixed_precision},
             {"tokens_per_s", res.tokens_per_s},
             {"step_s", timed},
             {"tflops", tflops},
             {"mfu", res.mfu},
             {"loss_first", res.steps.empty() ? 0.0 : res.steps.front().loss},
             {"loss_last", res.steps.empty() ? 0.0 : res.steps.back().loss}};
  j["peers"] = nlohmann::ordered_json::array();
  bool failed = false;
  std::vector<std::string> notes;
  for (const PeerRun& p : peers) {
    const std::string name =
        p.dtype == "bf16" ? "PyTorch eager, bf16 autocast" : "PyTorch eager, f32";
    nlohmann::ordered_json pj = {
        {"dtype", p.dtype}, {"ran", p.ran}, {"note", p.note}, {"spec", p.spec_path}};
    if (p.ran) {
      const double peer_tflops = flops_per_token * p.tokens_per_s / 1e12;
      const double peer_mfu = res.peak_tflops > 0 ? peer_tflops / res.peak_tflops : 0;
      const std::string ratio = ratio_of(res.tokens_per_s, p.tokens_per_s);
      print_row({name, p.step_s.size(), p.tokens_per_s, 1e3 * mean(p.step_s), peer_tflops, peer_mfu,
                 ratio});
      pj.update({{"tokens_per_s", p.tokens_per_s},
                 {"step_s", p.step_s},
                 {"tflops", peer_tflops},
                 {"mfu", peer_mfu},
                 {"ratio", res.tokens_per_s / p.tokens_per_s},
                 {"num_parameters", p.num_parameters},
                 {"optimizer", p.optimizer},
                 {"loss_first", p.loss_first},
                 {"loss_last", p.loss_last}});
      if (p.num_parameters != res.num_parameters)
        notes.push_back("WARNING: the " + p.dtype + " peer has " +
                        std::to_string(p.num_parameters) + " parameters, hp " +
                        std::to_string(res.num_parameters) + ": the models differ");
      notes.push_back(name + ": " + p.optimizer + "; rerun alone: " + peer_python() +
                      " bench/peers/train_peer.py " + p.spec_path);
    } else {
      std::printf("%-30s %s\n", name.c_str(), p.note.c_str());
      failed = failed || p.failed;
    }
    j["peers"].push_back(pj);
  }
  if (!notes.empty()) std::printf("\n");
  for (const auto& n : notes) std::printf("%s\n", n.c_str());
  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    f << j.dump(2) << "\n";
    if (!f) HP_THROW(IoError, "bench", opt.json, ": cannot write");
  }
  std::fflush(stdout);
  return failed ? 1 : 0;
}

}  // namespace hp::cli
