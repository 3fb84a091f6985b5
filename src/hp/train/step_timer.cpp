// The warm-up and timing rule of hp bench train (step_timer.h).
#include "hp/train/step_timer.h"

#include <algorithm>

#include "hp/core/error.h"

namespace hp::train {

StepTimer::StepTimer(WarmupRule rule) : rule_(rule) {
  if (rule.window < 1 || rule.window > rule.min_warmup || rule.min_warmup > rule.max_warmup ||
      rule.timed < 1 || !(rule.tolerance >= 0))
    HP_THROW(ValueError, "bench", "warm-up rule: need 1 <= window (", rule.window,
             ") <= min_warmup (", rule.min_warmup, ") <= max_warmup (", rule.max_warmup,
             "), timed steps (", rule.timed, ") >= 1 and tolerance (", rule.tolerance, ") >= 0");
}

double StepTimer::spread() const {
  if (int64_t(warmup_.size()) < rule_.window) return 0;
  const auto last = warmup_.end() - rule_.window;
  const auto [lo, hi] = std::minmax_element(last, warmup_.end());
  return *lo > 0 ? *hi / *lo - 1 : 0;
}

bool StepTimer::add(double step_s) {
  if (warm_) {
    if (!done()) timed_.push_back(step_s);
    return done();
  }
  warmup_.push_back(step_s);
  const int64_t n = int64_t(warmup_.size());
  stable_ = n >= rule_.min_warmup && spread() <= rule_.tolerance;
  warm_ = stable_ || n >= rule_.max_warmup;
  return false;
}

double StepTimer::median_s() const {
  if (timed_.empty()) return 0;
  std::vector<double> v = timed_;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace hp::train
