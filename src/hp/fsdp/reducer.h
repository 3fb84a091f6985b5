// Gradient reductions of FSDP groups in flight, and the timing of collective waits.
#pragma once

#include <chrono>
#include <deque>

#include "hp/fsdp/flat_group.h"
#include "hp/fsdp/fsdp.h"

namespace hp::fsdp::detail {

using Clock = std::chrono::steady_clock;

// Waits for w and returns its result, charging the blocked time to stats.exposed_wait_s and the
// time since `issued` to stats.comm_s.
Tensor complete(const dist::WorkPtr& w, Clock::time_point issued, FsdpModel::Stats& stats);

// Reduce-scatter over the group's shard communicator (skipped for a world of one), then all-reduce
// over the replicate axis (HSDP), then accumulation into the group's master grads. Jobs finish strictly in
// issue order, so master .grad sums are reproducible and the all-reduces are issued in the same
// order on every rank. Bounded: once a newer job is pushed, the older one's reduce-scatter is
// completed; once two are, its all-reduce too.
class Reducer {
 public:
  // replicate: null without HSDP.
  Reducer(dist::CommPtr replicate, FsdpModel::Stats& stats)
      : replicate_(std::move(replicate)), stats_(stats) {}
  // Starts reducing `flat` [W·S] (FlatGroup::pack_grads) into `group`'s masters over `shard`
  // (null: a world of one, W = 1).
  void push(FlatGroup* group, const Tensor& flat, const dist::CommPtr& shard);
  // Completes every job.
  void drain() { advance(true); }
  bool idle() const { return jobs_.empty(); }

 private:
  enum class Stage { reduce_scatter, all_reduce, done };
  struct Job {
    FlatGroup* group;
    Stage stage;
    dist::WorkPtr work;
    Clock::time_point issued;
    Tensor result;  // [S] once reduced
  };
  void start_all_reduce(Job& j, const Tensor& segment);
  void advance(bool all);

  dist::CommPtr replicate_;
  FsdpModel::Stats& stats_;
  std::deque<Job> jobs_;
};

}  // namespace hp::fsdp::detail
