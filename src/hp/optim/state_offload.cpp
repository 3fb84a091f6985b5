#include "hp/optim/state_offload.h"

#include "hp/core/error.h"
#include "hp/offload/async_file.h"

namespace hp::optim {

namespace {

// The entry's state tensors, in file order (undefined ones where it has none yet).
std::vector<Tensor*> state_of(Optimizer::Entry& e) {
  if (e.algorithm == Algorithm::muon) return {&e.momentum_buffer};
  return {&e.exp_avg, &e.exp_avg_sq};
}

int64_t state_bytes(const Optimizer::Entry& e) {
  return e.param.numel() * int64_t(sizeof(float)) * (e.algorithm == Algorithm::muon ? 1 : 2);
}

}  // namespace

StatePlacement state_placement_from_name(std::string_view name) {
  if (name == "none") return StatePlacement::device;
  if (name == "host") return StatePlacement::host;
  if (name == "disk") return StatePlacement::disk;
  HP_THROW(ValueError, "optim", "offload.optimizer: unknown placement '", name,
           "' (expected none|host|disk)");
}

StateOffload::StateOffload(const std::vector<Optimizer::Entry>& entries, StateOffloadOptions o)
    : o_(std::move(o)) {
  HP_CHECK(o_.placement != StatePlacement::device);
  if (o_.placement == StatePlacement::host) {
    groups_.emplace_back();
    for (size_t i = 0; i < entries.size(); ++i) groups_.back().push_back(i);
  } else {
    // Group 0: the root's parameters; then one group per prefix, in the order given.
    std::vector<std::vector<size_t>> by(o_.group_prefixes.size() + 1);
    for (size_t i = 0; i < entries.size(); ++i) {
      size_t g = 0;
      for (size_t k = 0; k < o_.group_prefixes.size(); ++k)
        if (entries[i].fqn.rfind(o_.group_prefixes[k] + ".", 0) == 0) g = k + 1;
      by[g].push_back(i);
    }
    for (auto& ids : by)
      if (!ids.empty()) groups_.push_back(std::move(ids));
    offset_.resize(entries.size());
    int64_t off = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      offset_[i] = off;
      off += state_bytes(entries[i]);
    }
    file_ = std::make_unique<offload::AsyncFile>(o_.file, o_.io_threads);
  }
  staged_.resize(groups_.size());
}

StateOffload::~StateOffload() = default;

void StateOffload::prefetch(size_t g, const std::vector<Optimizer::Entry>& entries) {
  if (!file_ || g >= groups_.size() || staged_[g].issued) return;
  Staged& s = staged_[g];
  s.issued = true;
  const MemCategoryScope as_optimizer(MemCategory::optimizer);
  for (size_t i : groups_[g]) {
    const Optimizer::Entry& e = entries[i];
    if (e.step == 0) continue;  // no state yet: the step creates it
    std::vector<Tensor> ts;
    int64_t off = offset_[i];
    const int n = e.algorithm == Algorithm::muon ? 1 : 2;
    for (int k = 0; k < n; ++k) {
      Tensor t = empty(e.param.shape(), DType::f32, tier());
      s.tickets.push_back(file_->read(off, t.raw_data(), int64_t(t.nbytes()), t.storage()));
      stats_.disk_to_host += int64_t(t.nbytes());
      off += int64_t(t.nbytes());
      ts.push_back(std::move(t));
    }
    s.tensors.emplace_back(i, std::move(ts));
  }
}

void StateOffload::acquire(size_t g, std::vector<Optimizer::Entry>& entries) {
  if (!file_) return;
  prefetch(g, entries);
  Staged& s = staged_[g];
  for (uint64_t t : s.tickets) file_->wait(t);
  for (auto& [i, ts] : s.tensors) {
    std::vector<Tensor*> dst = state_of(entries[i]);
    for (size_t k = 0; k < dst.size(); ++k) *dst[k] = std::move(ts[k]);
  }
  s = Staged{};
}

void StateOffload::release(size_t g, std::vector<Optimizer::Entry>& entries, bool dirty) {
  if (!file_) return;
  if (writes_.size() >= kWritesInFlight) {
    for (uint64_t t : writes_.front()) file_->wait(t);
    writes_.pop_front();
  }
  writes_.emplace_back();
  for (size_t i : groups_[g]) {
    int64_t off = offset_[i];
    for (Tensor* t : state_of(entries[i])) {
      if (t->defined() && dirty) {
        HP_CHECK(t->is_contiguous() && t->dtype() == DType::f32);
        writes_.back().push_back(file_->write(off, t->raw_data(), int64_t(t->nbytes()), t->storage()));
        stats_.host_to_disk += int64_t(t->nbytes());
      }
      off += entries[i].param.numel() * int64_t(sizeof(float));
      *t = Tensor();
    }
  }
}

void StateOffload::flush() {
  if (!file_) return;
  std::deque<std::vector<uint64_t>> writes;
  writes.swap(writes_);
  std::exception_ptr first;
  for (const auto& group : writes)
    for (uint64_t t : group) {
      try {
        file_->wait(t);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
  if (first) std::rethrow_exception(first);
}

void StateOffload::count_step(int64_t grad_bytes, int64_t param_bytes) {
  if (!o_.grads_on_host) stats_.device_to_host += grad_bytes;
  if (!o_.params_on_host) stats_.host_to_device += param_bytes;
}

TransferStats StateOffload::stats() const {
  TransferStats s = stats_;
  if (file_) s.wait_s = file_->stats().wait_s;
  return s;
}

}  // namespace hp::optim
