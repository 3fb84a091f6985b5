// The training loop behind `hp train CONFIG.yaml [--set key=value ...] [--resume auto|PATH]`.
//
// One step, as data flows (docs/ARCHITECTURE.md §2): loader → this rank's slice of the global
// batch, split into training.grad_accum micro-batches (the tp ranks of a slice share it) →
// CausalLM::loss (modules run through the forward wrappers the parallelize step installed: FSDP
// gathering in training.mixed_precision, tensor-parallel redistributions, MX linears, recompute) →
// backward of (mean loss · local tokens / global tokens), so the summed gradients are those of Σ
// token losses / global tokens → FSDP reduce-scatter into f32 shards → global-norm clipping →
// optimizer step on the shards → metrics → a validation pass every eval.interval steps and after
// the last (evaluate.h) → a DCP checkpoint every checkpoint.interval steps.
//
// Determinism: the same config gives bitwise the same losses for any HP_NUM_THREADS, and a run
// resumed from a checkpoint continues exactly as the uninterrupted one (parameters, optimizer
// state, loader position and RNG are restored).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "hp/core/error.h"
#include "hp/train/config.h"
#include "hp/train/records.h"

namespace hp::train {

struct TrainOptions {
  // "" = start fresh; "auto" = the latest checkpoint in run.dir (fresh when there is none); else
  // a step directory or a run directory.
  std::string resume;
  // Stop (saving a checkpoint, as on SIGINT) once this many steps ran in this call; 0 = never.
  // Lets tests and benchmarks interrupt a run at a chosen step.
  int64_t stop_after = 0;
  // A fresh run (resume "") into a run.dir that holds checkpoints is refused unless this is set;
  // then the old step-* directories, `latest` and metrics files are deleted first.
  bool overwrite = false;
  // Resume even when the checkpoint's config.yaml differs from the run's config in a key that
  // changes the math (train/config.h ResumeChange); the differences are logged instead.
  bool allow_config_change = false;
  // Where the run log goes (rank 0 only); null = std::cout.
  std::ostream* log = nullptr;
  // hp train --profile: profile three steps when metrics.profile_steps does not name a range
  // (train/profile.h).
  bool profile = false;
  // Called on every rank after each step's metrics; when it returns true on any rank, the run ends
  // after that step as if it were the last (hp bench train stops once its timing is done).
  std::function<bool(const StepRecord&)> stop_when;
};

// training.max_skipped_steps consecutive steps had a non-finite gradient norm: the run stopped
// without saving anything after the divergence began (`hp train` exits 3).
class TrainingDiverged : public Error {
 public:
  using Error::Error;
};

// Runs (or resumes) the training described by `config`. Collective when launched on several
// ranks. Throws the typed errors of the components (config, data, checkpoint) on bad input, an
// IoError when another run holds run.dir (rank 0 keeps run.dir/.lock locked for the whole run)
// and a ValueError for a fresh run into a run.dir with checkpoints (see overwrite).
TrainResult train(const Config& config, const TrainOptions& options = {});

}  // namespace hp::train
