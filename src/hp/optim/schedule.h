// Learning-rate schedules: pure functions of the (0-based) optimizer step.
//
// Every schedule returns a factor in [min_lr_ratio, 1] that multiplies the peak lr
// (optimizer.lr); the trainer passes lr * factor to Optimizer::step. Conventions, shared by all:
//   - warmup: step s < W runs at (s + 1) / (W + 1), so no step is wasted at lr 0 and step W is the
//     first at the peak (the torchtitan convention);
//   - a decay phase of D steps starts at the peak and its last step (s = steps - 1) reaches
//     min_lr_ratio exactly; steps past the end stay at min_lr_ratio.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "hp/core/enum_names.h"

namespace hp::optim {

enum class ScheduleKind {
  constant,  // warmup, then the peak forever
  cosine,    // warmup, then half a cosine from the peak down to min_lr_ratio at the last step
  linear,    // warmup, then a straight line down to min_lr_ratio at the last step
  wsd,  // warmup, stable at the peak, then a linear decay over the last decay_fraction of steps
};
// Its spellings in the config and messages (core/enum_names.h).
std::span<const EnumName<ScheduleKind>> enum_names(ScheduleKind);

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::constant;
  int64_t total_steps = 1;      // training.steps
  int64_t warmup_steps = 0;     // W
  double decay_fraction = 0.1;  // wsd only: decay steps = ceil(decay_fraction * total_steps)
  double min_lr_ratio = 0.0;    // final lr / peak lr
};

// "constant" | "cosine" | "linear" | "wsd"; throws ValueError("[optim] ...") otherwise.
ScheduleKind schedule_kind_from_name(std::string_view name);
std::string_view schedule_kind_name(ScheduleKind kind);

// Number of steps in the wsd decay phase (>= 1).
int64_t wsd_decay_steps(const ScheduleSpec& spec);

// The lr factor at `step`; throws ValueError for a negative step or an inconsistent spec.
double lr_factor(const ScheduleSpec& spec, int64_t step);

}  // namespace hp::optim
