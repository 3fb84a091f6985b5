// Which vector chains of the models run through fused regions (docs/FUSION.md "Modes"):
// `training.fusion` in a run's config, `HP_FUSION` in the environment.
//
//   none  every op eager, as written (silu, mul, add, rms_norm: one kernel and one tensor each)
//   auto  the patterns measured faster than their eager ops on this machine and bitwise equal to
//         them: SwiGLU `silu(g)·u` in f32 (forward and backward); bf16 and the norms eager
//   lazy  every vector chain between two materialization points of a block (a GEMM, a module
//         boundary with a wrapper) as one region: SwiGLU, RMSNorm·w, residual add + RMSNorm·w.
//         Equal to eager within rounding (the norms compute `x · rsqrt(mean(x²) + eps) · w`,
//         another association than the hand kernel), not bitwise.
//
// The mode is process-wide: set_mode (the trainer, for the length of a run), else HP_FUSION, else
// auto. HP_FUSION, when set, also overrides a run's training.fusion (the trainer logs it).
#pragma once

#include <optional>
#include <span>
#include <string>

#include "hp/core/enum_names.h"

namespace hp::fusion {

enum class Mode { none, lazy, auto_ };
// Its spellings in the config and messages (core/enum_names.h).
std::span<const EnumName<Mode>> enum_names(Mode);

// "none" | "lazy" | "auto"; anything else throws ValueError naming `key` and the value.
Mode parse_mode(const std::string& s, const std::string& key);
const char* mode_name(Mode m);

// The HP_FUSION environment variable, parsed once per process; nullopt when unset or empty.
std::optional<Mode> env_mode();

// The mode the models use now.
Mode mode();
// Overrides the process default (HP_FUSION or auto) until reset_mode().
void set_mode(Mode m);
void reset_mode();

// Sets the mode for its lifetime and restores the previous one (a training run, a test).
class ModeScope {
 public:
  explicit ModeScope(Mode m);
  ~ModeScope();
  ModeScope(const ModeScope&) = delete;
  ModeScope& operator=(const ModeScope&) = delete;

 private:
  int prev_;  // -1: none was set
};

}  // namespace hp::fusion
