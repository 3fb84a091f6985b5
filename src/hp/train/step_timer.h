// How `hp bench train` times training steps, the same way for hp and for its PyTorch peer
// (bench/peers/train_peer.py implements the same rule; docs/PERFORMANCE.md "Training throughput"):
// warm up until the step time is stable — the last `window` of at least `min_warmup` warm-up steps
// within `tolerance` of each other (slowest / fastest − 1) — or for `max_warmup` steps at most,
// then time `timed` steps and report their median. Early steps pay allocation, packing and (in
// PyTorch) kernel selection: one run's bf16 steps took 5.5, 1.1, 0.54, 0.35 s, so a mean after one
// or two warm-up steps overstates the step time several-fold.
#pragma once

#include <cstdint>
#include <vector>

namespace hp::train {

struct WarmupRule {
  int64_t min_warmup = 5, window = 3, max_warmup = 30, timed = 5;
  double tolerance = 0.10;
};

class StepTimer {
 public:
  // Throws ValueError("[bench] ...") for a rule that cannot be met (window > min_warmup,
  // min_warmup > max_warmup, timed < 1, tolerance < 0).
  explicit StepTimer(WarmupRule rule);
  // Records the next step's seconds; true once the timed steps are complete.
  bool add(double step_s);
  bool done() const { return int64_t(timed_.size()) >= rule_.timed; }
  bool warm() const { return warm_; }
  // Warm-up ended by the rule rather than by max_warmup.
  bool stable() const { return stable_; }
  // Slowest / fastest − 1 of the last `window` warm-up steps (0 before there are that many).
  double spread() const;
  const std::vector<double>& warmup_s() const { return warmup_; }
  const std::vector<double>& timed_s() const { return timed_; }
  // Median of the timed steps (the mean of the middle two for an even count); 0 before any.
  double median_s() const;
  const WarmupRule& rule() const { return rule_; }

 private:
  WarmupRule rule_;
  std::vector<double> warmup_, timed_;
  bool warm_ = false, stable_ = false;
};

}  // namespace hp::train
