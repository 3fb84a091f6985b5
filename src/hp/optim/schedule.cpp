#include "hp/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "hp/core/error.h"

namespace hp::optim {

ScheduleKind schedule_kind_from_name(std::string_view name) {
  if (name == "constant") return ScheduleKind::constant;
  if (name == "cosine") return ScheduleKind::cosine;
  if (name == "linear") return ScheduleKind::linear;
  if (name == "wsd") return ScheduleKind::wsd;
  HP_THROW(ValueError, "optim", "unknown lr schedule '", name,
           "' (expected constant|cosine|linear|wsd)");
}

std::string_view schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant:
      return "constant";
    case ScheduleKind::cosine:
      return "cosine";
    case ScheduleKind::linear:
      return "linear";
    case ScheduleKind::wsd:
      return "wsd";
  }
  return "?";
}

int64_t wsd_decay_steps(const ScheduleSpec& spec) {
  auto d =
      static_cast<int64_t>(std::ceil(spec.decay_fraction * static_cast<double>(spec.total_steps)));
  return std::max<int64_t>(1, d);
}

namespace {
// Progress through a decay phase that starts at `begin` and lasts `len` steps: 0 on its first step,
// 1 on its last (a one-step phase is all "last").
double progress(int64_t step, int64_t begin, int64_t len) {
  if (len <= 1) return step >= begin ? 1.0 : 0.0;
  double p = static_cast<double>(step - begin) / static_cast<double>(len - 1);
  return std::clamp(p, 0.0, 1.0);
}
}  // namespace

double lr_factor(const ScheduleSpec& spec, int64_t step) {
  if (step < 0) HP_THROW(ValueError, "optim", "lr schedule: negative step ", step);
  if (spec.total_steps < 1 || spec.warmup_steps < 0 || spec.warmup_steps > spec.total_steps)
    HP_THROW(ValueError, "optim", "lr schedule: warmup_steps ", spec.warmup_steps,
             " must be in [0, total_steps=", spec.total_steps, "]");
  if (!(spec.min_lr_ratio >= 0.0 && spec.min_lr_ratio <= 1.0))
    HP_THROW(ValueError, "optim", "lr schedule: min_lr_ratio ", spec.min_lr_ratio,
             " must be in [0, 1]");
  const int64_t W = spec.warmup_steps;
  if (step < W) return static_cast<double>(step + 1) / static_cast<double>(W + 1);
  const double lo = spec.min_lr_ratio;
  switch (spec.kind) {
    case ScheduleKind::constant:
      return 1.0;
    case ScheduleKind::cosine: {
      double p = progress(step, W, spec.total_steps - W);
      return lo + (1.0 - lo) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    }
    case ScheduleKind::linear: {
      double p = progress(step, W, spec.total_steps - W);
      return 1.0 - (1.0 - lo) * p;
    }
    case ScheduleKind::wsd: {
      if (!(spec.decay_fraction > 0.0 && spec.decay_fraction <= 1.0))
        HP_THROW(ValueError, "optim", "lr schedule: decay_fraction ", spec.decay_fraction,
                 " must be in (0, 1]");
      const int64_t D = wsd_decay_steps(spec);
      const int64_t begin = std::max(W, spec.total_steps - D);
      if (step < begin) return 1.0;
      return 1.0 - (1.0 - lo) * progress(step, begin, spec.total_steps - begin);
    }
  }
  return 1.0;
}

std::span<const EnumName<ScheduleKind>> enum_names(ScheduleKind) {
  using enum ScheduleKind;
  static constexpr EnumName<ScheduleKind> names[] = {
      {"constant", constant}, {"cosine", cosine}, {"linear", linear}, {"wsd", wsd}};
  return names;
}

}  // namespace hp::optim
