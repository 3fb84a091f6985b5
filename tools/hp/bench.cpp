// hp bench train [CONFIG] [--steps N] [--max-warmup N] [--set key=value ...] [--no-peer]
//                [--peer-dtype bf16|f32|both] [--json FILE]
// hp bench peak [--remeasure] [--dtype f32|bf16|both] [--seconds S]   (bench_peak.cpp)
//
// Training throughput end to end: runs train::train on CONFIG (default configs/bench_5m.yaml,
// relative to the current directory; the run log goes to stderr), then the PyTorch peer
// (bench/peers/train_peer.py) on the same model, shapes and AdamW settings with the same thread
// count. Both sides are timed the same way (train/step_timer.h): warm-up until the step time is
// stable, then --steps timed steps, whose median gives tokens/s, TFLOP/s and MFU against the
// trainer's MFU denominator, beside the ratio hp / peer (docs/ARCHITECTURE.md §8). The bench never
// saves checkpoints.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "bench_peer.h"
#include "commands.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/io/json.h"
#include "hp/train/metrics.h"
#include "hp/train/step_timer.h"
#include "hp/train/trainer.h"

namespace hp::cli {

namespace {

struct BenchOptions {
  std::string config = "configs/bench_5m.yaml";
  std::vector<std::string> sets;
  std::vector<std::string> peer_dtypes;  // empty = no peer
  train::WarmupRule rule;
  std::string json;
};

BenchOptions parse_options(Args args) {
  BenchOptions o;
  // Checkpoints would be timed as part of the steps; a --set may still ask for them.
  o.sets = {"checkpoint.interval=0", "checkpoint.save_final=false"};
  reject_unknown_flags(args, {"--set", "--steps", "--max-warmup", "--peer-dtype", "--json"},
                       {"--no-peer"});
  std::string v;
  while (take_value(args, "--set", &v)) o.sets.push_back(v);
  if (take_value(args, "--steps", &v)) o.rule.timed = parse_int("--steps", v, 5, 1LL << 20);
  if (take_value(args, "--max-warmup", &v))
    o.rule.max_warmup = parse_int("--max-warmup", v, o.rule.min_warmup, 1LL << 20);
  const bool no_peer = take_flag(args, "--no-peer");
  std::string dtype;
  const bool has_dtype = take_value(args, "--peer-dtype", &dtype);
  if (has_dtype && dtype != "bf16" && dtype != "f32" && dtype != "both")
    throw UsageError{"--peer-dtype expects bf16, f32 or both, got '" + dtype + "'"};
  take_value(args, "--json", &o.json);
  if (!args.empty() && args.front().rfind("--", 0) != 0) {
    o.config = args.front();
    args.erase(args.begin());
  }
  reject_leftovers(args);
  if (no_peer && has_dtype) throw UsageError{"--no-peer excludes --peer-dtype"};
  if (!no_peer) {
    if (dtype == "both")
      o.peer_dtypes = {"bf16", "f32"};
    else if (has_dtype)
      o.peer_dtypes = {dtype};
    else
      o.peer_dtypes = {""};  // ours: training.mixed_precision, resolved after loading
  }
  // Our run lasts until the timer is done (TrainOptions::stop_when); this is its cap.
  o.sets.push_back("training.steps=" + std::to_string(o.rule.max_warmup + o.rule.timed));
  return o;
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}

std::string ratio_of(double ours, double theirs) {
  if (!(ours > 0) || !(theirs > 0)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", ours / theirs);
  return buf;
}

// One side's timing, hp's or a peer's: median timed step → tokens/s, TFLOP/s, MFU.
struct Row {
  std::string name;
  std::vector<double> warmup_s, timed_s;
  bool stable = false;
  double median_s = 0, tokens_per_s = 0, tflops = 0, mfu = 0;
  std::string ratio;  // ours / this row
};

Row make_row(std::string name, std::vector<double> warmup, std::vector<double> timed, bool stable,
             double median_s, int64_t tokens, double flops_per_token_per_rank, double peak) {
  Row r;
  r.name = std::move(name);
  r.warmup_s = std::move(warmup);
  r.timed_s = std::move(timed);
  r.stable = stable;
  r.median_s = median_s;
  r.tokens_per_s = median_s > 0 ? double(tokens) / median_s : 0;
  r.tflops = flops_per_token_per_rank * r.tokens_per_s / 1e12;
  r.mfu = peak > 0 ? r.tflops / peak : 0;
  return r;
}

void print_row(const Row& r) {
  const std::string warm = std::to_string(r.warmup_s.size()) + (r.stable ? " " : "*");
  std::printf("%-30s %7s %6zu %11.1f %9.1f %9.4f %7s %9s\n", r.name.c_str(), warm.c_str(),
              r.timed_s.size(), r.tokens_per_s, 1e3 * r.median_s, r.tflops, percent(r.mfu).c_str(),
              r.ratio.c_str());
}

// The warm-up note of a row that hit the cap.
std::string unstable_note(const Row& r, const train::WarmupRule& rule) {
  const size_t n = r.warmup_s.size();
  double lo = 1e300, hi = 0;
  for (size_t i = n >= size_t(rule.window) ? n - size_t(rule.window) : 0; i < n; ++i)
    lo = std::min(lo, r.warmup_s[i]), hi = std::max(hi, r.warmup_s[i]);
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "* %s: not stable after %zu warm-up steps (the last %lld spread %.0f%%)",
                r.name.c_str(), n, static_cast<long long>(rule.window),
                lo > 0 && hi > 0 ? 100.0 * (hi / lo - 1) : 0.0);
  return buf;
}

io::JsonValue row_json(const Row& r) {
  return io::JsonValue::object({{"tokens_per_s", r.tokens_per_s},
                                {"median_step_s", r.median_s},
                                {"step_s", r.timed_s},
                                {"warmup_s", r.warmup_s},
                                {"stable", r.stable},
                                {"tflops", r.tflops},
                                {"mfu", r.mfu}});
}

int run_bench_train(const Args& args) {
  BenchOptions opt = parse_options(args);
  const train::Config cfg = train::load_config(opt.config, opt.sets);
  const int threads = num_threads();
  for (auto& d : opt.peer_dtypes)
    if (d.empty()) d = enum_name(cfg.training.mixed_precision);
  // Fail before training when the peer cannot mirror the config.
  if (!opt.peer_dtypes.empty()) peer_model_config_json(cfg);

  train::StepTimer timer(opt.rule);
  train::TrainOptions train_opt;
  train_opt.log = &std::cerr;
  train_opt.stop_when = [&timer](const train::StepRecord& r) { return timer.add(r.step_s); };
  const train::TrainResult res = train::train(cfg, train_opt);
  const int64_t tokens = cfg.training.batch_size * cfg.training.seq_len;
  // Same model and shapes on both sides, so the peer's FLOPs per token are ours; per rank, as the
  // trainer's TFLOP/s.
  const double flops = res.flops_per_token / double(dist::world()->size());
  const Row ours =
      make_row("hp (" + enum_name(cfg.training.mixed_precision) + ")", timer.warmup_s(),
               timer.timed_s(), timer.stable(), timer.median_s(), tokens, flops, res.peak_tflops);

  std::vector<PeerRun> peers;
  for (const auto& d : opt.peer_dtypes) {
    std::fprintf(stderr, "peer: PyTorch eager %s, warm-up then %lld timed steps\n",
                 d == "bf16" ? "bf16 autocast" : "f32", static_cast<long long>(opt.rule.timed));
    peers.push_back(run_train_peer(cfg, d, opt.rule, threads));
  }

  std::printf("\nhp bench train %s\n", opt.config.c_str());
  std::printf("model      %s, %lld parameters\n",
              cfg.model.arch.empty() ? cfg.model.path.c_str() : cfg.model.arch.c_str(),
              static_cast<long long>(res.num_parameters));
  std::printf(
      "shape      batch %lld x seq %lld = %lld tokens/step, grad_accum %lld, %s, %d threads\n",
      static_cast<long long>(cfg.training.batch_size), static_cast<long long>(cfg.training.seq_len),
      static_cast<long long>(tokens), static_cast<long long>(cfg.training.grad_accum),
      enum_name(cfg.optimizer.name).c_str(), threads);
  std::printf("hp         mixed_precision %s, low_precision %s, recompute %s\n",
              enum_name(cfg.training.mixed_precision).c_str(),
              enum_name(cfg.low_precision.recipe).c_str(), enum_name(cfg.recompute.mode).c_str());
  std::printf("ceiling    MFU against %s\n", res.peak_source.c_str());
  std::printf(
      "timing     each side warms up until its last %lld of >= %lld warm-up steps are within "
      "%.0f%% (at most %lld), then times %lld steps; figures are from the median timed step\n\n",
      static_cast<long long>(opt.rule.window), static_cast<long long>(opt.rule.min_warmup),
      100.0 * opt.rule.tolerance, static_cast<long long>(opt.rule.max_warmup),
      static_cast<long long>(opt.rule.timed));
  std::printf("%-30s %7s %6s %11s %9s %9s %7s %9s\n", "run", "warm-up", "timed", "tokens/s",
              "ms/step", "TFLOP/s", "MFU", "hp / run");
  Row our_row = ours;
  our_row.ratio = "-";
  print_row(our_row);
  std::vector<std::string> notes;
  if (!ours.stable) notes.push_back(unstable_note(ours, opt.rule));
  if (std::string w = train::mfu_above_peak_warning(ours.mfu, res.peak_source); !w.empty())
    notes.push_back(std::move(w));

  io::JsonValue j;
  j["config"] = opt.config;
  j["num_parameters"] = res.num_parameters;
  j["tokens_per_step"] = tokens;
  j["threads"] = threads;
  j["peak_tflops"] = res.peak_tflops;
  j["peak_source"] = res.peak_source;
  j["timing"] = io::JsonValue::object({{"min_warmup", opt.rule.min_warmup},
                                       {"window", opt.rule.window},
                                       {"tolerance", opt.rule.tolerance},
                                       {"max_warmup", opt.rule.max_warmup},
                                       {"timed_steps", opt.rule.timed},
                                       {"statistic", "median"}});
  j["hp"] = row_json(ours);
  j["hp"]["mixed_precision"] = enum_name(cfg.training.mixed_precision);
  j["hp"]["loss_first"] = res.steps.empty() ? 0.0 : res.steps.front().loss;
  j["hp"]["loss_last"] = res.steps.empty() ? 0.0 : res.steps.back().loss;
  j["peers"] = io::JsonValue::array();
  bool failed = false;
  for (const PeerRun& p : peers) {
    const std::string name =
        p.dtype == "bf16" ? "PyTorch eager, bf16 autocast" : "PyTorch eager, f32";
    io::JsonValue pj = io::JsonValue::object(
        {{"dtype", p.dtype}, {"ran", p.ran}, {"note", p.note}, {"spec", p.spec_path}});
    if (p.ran) {
      Row row = make_row(name, p.warmup_s, p.step_s, p.stable, p.median_step_s, tokens, flops,
                         res.peak_tflops);
      row.ratio = ratio_of(ours.tokens_per_s, row.tokens_per_s);
      print_row(row);
      if (!row.stable) notes.push_back(unstable_note(row, opt.rule));
      pj.update(row_json(row));
      pj.update(io::JsonValue::object(
          {{"ratio", row.tokens_per_s > 0 ? ours.tokens_per_s / row.tokens_per_s : 0.0},
           {"num_parameters", p.num_parameters},
           {"optimizer", p.optimizer},
           {"loss_first", p.loss_first},
           {"loss_last", p.loss_last}}));
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

}  // namespace

int run_bench(const Args& in) {
  if (!in.empty() && in.front() == "peak") return run_bench_peak(Args(in.begin() + 1, in.end()));
  if (!in.empty() && in.front() == "offload")
    return run_bench_offload(Args(in.begin() + 1, in.end()));
  if (in.empty() || in.front() != "train")
    throw UsageError{
        "expected 'train [CONFIG] [--steps N] [--set key=value ...] [--no-peer | --peer-dtype "
        "bf16|f32|both]' or 'peak [--remeasure]' or 'offload [CONFIG] [--budget SIZE]'"};
  return run_bench_train(Args(in.begin() + 1, in.end()));
}

}  // namespace hp::cli
