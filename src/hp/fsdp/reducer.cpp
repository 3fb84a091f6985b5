#include "hp/fsdp/reducer.h"

namespace hp::fsdp::detail {

namespace {
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

Tensor complete(const dist::WorkPtr& w, Clock::time_point issued, FsdpModel::Stats& stats) {
  const auto t0 = Clock::now();
  Tensor out = w->result();
  stats.exposed_wait_s += since(t0);
  stats.comm_s += since(issued);
  return out;
}

void Reducer::push(FlatGroup* group, const Tensor& flat, const dist::CommPtr& shard) {
  Job j{group, Stage::reduce_scatter, nullptr, Clock::now(), Tensor()};
  if (shard) {
    j.work = shard->ireduce_scatter(flat, dist::ReduceOp::sum);
    stats_.reduce_scatter_bytes +=
        (shard->size() - 1) * group->segment() * static_cast<int64_t>(flat.itemsize());
  } else if (replicate_) {
    start_all_reduce(j, flat);
  } else {  // nothing to reduce; accumulated in issue order with the others
    j.result = flat;
    j.stage = Stage::done;
  }
  jobs_.push_back(std::move(j));
  advance(false);
}

void Reducer::start_all_reduce(Job& j, const Tensor& segment) {
  const int64_t r = replicate_->size();
  j.work = replicate_->iall_reduce(segment, dist::ReduceOp::sum);
  j.issued = Clock::now();
  j.stage = Stage::all_reduce;
  stats_.all_reduce_bytes +=
      2 * (r - 1) * segment.numel() * static_cast<int64_t>(segment.itemsize()) / r;
}

void Reducer::advance(bool all) {
  const size_t n = jobs_.size();
  for (size_t k = 0; k < n; ++k) {
    Job& j = jobs_[k];
    const size_t newer = n - 1 - k;
    if (j.stage == Stage::reduce_scatter) {
      // A job left in its reduce-scatter holds back every later one (issue order).
      if (!(all || newer >= 1 || j.work->test())) break;
      Tensor seg = complete(j.work, j.issued, stats_);
      if (replicate_) {
        start_all_reduce(j, seg);
      } else {
        j.result = seg;
        j.stage = Stage::done;
      }
    }
    if (j.stage == Stage::all_reduce && (all || newer >= 2 || j.work->test())) {
      j.result = complete(j.work, j.issued, stats_);
      j.stage = Stage::done;
    }
  }
  while (!jobs_.empty() && jobs_.front().stage == Stage::done) {
    Job& j = jobs_.front();
    if (j.group->grad_tier() != MemTier::device)  // the result comes down to host-tier grads
      stats_.device_to_host_bytes += int64_t(j.result.numel()) * int64_t(sizeof(float));
    j.group->accumulate_grads(j.result);
    jobs_.pop_front();
  }
}

}  // namespace hp::fsdp::detail
