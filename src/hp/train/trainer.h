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
#include "hp/train/evaluate.h"
#include "hp/train/profile.h"

namespace hp::train {

struct StepRecord {
  int64_t step = 0;  // 1-based optimizer step
  double loss = 0, grad_norm = 0, lr = 0;
  double step_s = 0, tokens_per_s = 0, tflops = 0, mfu = 0;
  int64_t peak_mem_bytes = 0;  // device-tier peak during the step (parameters, state,
                               // activations; memory.device_budget caps it)
  int64_t host_mem_bytes = 0;  // host-tier live bytes at the step's end (offloaded state)
  int64_t act_mem_bytes = 0;   // peak of forward + backward minus what was live when the step
                               // began and minus the step's f32 gradients: activations and
                               // transient buffers
  int64_t tp_comm_bytes = 0;   // sent by this rank's tensor-parallel collectives in the step
                               // (shard::region_stats: ring-algorithm bytes)
  // parallel.pp > 1: each pipeline rank's idle share of the step's pipeline time (1 − its compute
  // time / the slowest rank's schedule time), and the schedule's theoretical bubble.
  std::vector<double> pp_bubble;
  double pp_bubble_theory = 0;
  // The schedule simulated with this step's measured mean action times (each pipeline rank's
  // bubble at the real costs, where F = I = W = 1, B = 2 is the theory's assumption), and those
  // times: [stages × 4] seconds of one F, B, I, W of each stage (pipeline_step.h); and each
  // pipeline rank's [ranks × 3] seconds computing, blocked in receives and running the schedule.
  std::vector<double> pp_bubble_model, pp_action_s, pp_rank_s;
  // Offload (offload.optimizer): bytes this rank moved between tiers in the step — gradients
  // device→host and masters host→device for a host-side step, state host→disk and disk→host —
  // and the seconds the step blocked waiting for disk transfers.
  int64_t device_to_host_bytes = 0, host_to_device_bytes = 0;
  int64_t host_to_disk_bytes = 0, disk_to_host_bytes = 0;
  double transfer_wait_s = 0;
  // data.sources: tokens trained on from each source since step 0 (global), in sources order.
  std::vector<int64_t> source_tokens;
};

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
  // changes the math (train/state.h math_config_changes); the differences are logged instead.
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

struct TrainResult {
  std::vector<StepRecord> steps;  // every step run in this call, in order
  std::vector<EvalResult> evals;  // every validation pass of this call, in order
  int64_t first_step = 1;         // step number of steps[0] (> 1 after a resume)
  std::string run_dir;
  std::string last_checkpoint;  // step directory, or "" when none was saved
  bool interrupted = false;     // stopped by a signal or stop_after
  int stop_signal = 0;          // the signal (SIGINT, SIGTERM) that stopped the run, else 0
  double tokens_per_s = 0;      // mean over the steps after the first (warm-up) one
  double mfu = 0;
  double peak_tflops = 0;      // the MFU denominator used
  std::string peak_source;     // what it is: "the cached bf16 GEMM peak 0.190 TFLOP/s (...)"
  double flops_per_token = 0;  // model FLOPs per trained token (the MFU numerator's)
  int64_t num_parameters = 0;
  int64_t peak_mem_bytes = 0;
  int64_t act_mem_bytes = 0;                   // largest per-step activation memory
  std::vector<std::string> mx_modules;         // modules switched to MXFP8
  std::vector<std::string> recompute_modules;  // modules recomputed in backward
  std::vector<std::string> offload_modules;    // modules whose saved activations go to the host
  std::string sample;                          // generated text (training.sample_tokens > 0)
  ProfileTables profile;                       // this rank's profile (steps == 0: none)
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
