// What a run reports: one record per training step and per validation pass, and the result of a
// train() call (trainer.h). The metrics log writes them (metrics.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

struct EvalResult {
  int64_t step = 0;  // the optimizer step evaluated after
  double loss = 0, ppl = 0;
  int64_t batches = 0, tokens = 0;  // global
  double seconds = 0;
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

}  // namespace hp::train
