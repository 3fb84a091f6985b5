// Runs one rank's pipeline schedule (schedule.h) for a training step (docs/ARCHITECTURE.md §4b).
//
// For every action of the rank's list, in order: F runs the stage's forward on a microbatch — the
// first stage on the input `first_input` gives (token ids), the others on the activation received
// from the previous stage (a fresh leaf that requires grad, so backward yields its gradient) — and
// keeps (input, output) until the backward; B seeds the output's backward with the gradient
// received from the next stage (the last stage's forward returns the scalar loss, seeded with 1)
// and hands the input's gradient back. Transfers are non-blocking sends (waited for at the end of
// the step) and receives that wait for their message; every message is a small header (dtype,
// shape) and the tensor, tagged by direction, microbatch and stage so their order never matters.
// Stages adjacent on one rank (interleaved with pp = 1) hand tensors over in memory.
//
// The split backward of zero-bubble schedules: I runs the backward under a WeightGradCapture, so the
// stage's deferred linears (weight_grad.h, installed by the caller) queue their weight gradients;
// W runs that microbatch's queue. Without deferred linears, I is the whole backward and W empty.
#pragma once

#include <functional>
#include <vector>

#include "hp/dist/communicator.h"
#include "hp/pipeline/schedule.h"

namespace hp::pipeline {

// A model chunk this rank runs: input → output for microbatch `mb` (the last stage: the scalar to
// backpropagate, e.g. the microbatch's loss scaled by its share of the step's targets).
struct StageFn {
  int64_t stage = 0;
  std::function<Tensor(int64_t mb, const Tensor& input)> forward;
};

// Time per step on this rank (seconds): computing (F and B), blocked in receives, and in all.
struct ExecutorStats {
  double compute_s = 0, wait_s = 0, total_s = 0;
};

class Executor {
 public:
  // `comm`: the pipeline group, rank r of it = pipeline rank r (schedule rank); `stages`: one
  // StageFn for every stage the schedule places on this rank.
  Executor(Schedule schedule, dist::CommPtr comm, std::vector<StageFn> stages);
  // Runs this rank's list once; first_input(mb) is stage 0's input for microbatch mb.
  ExecutorStats run(const std::function<Tensor(int64_t mb)>& first_input);
  const Schedule& schedule() const { return schedule_; }

 private:
  Schedule schedule_;
  dist::CommPtr comm_;
  std::vector<StageFn> stages_;
};

}  // namespace hp::pipeline
