#include "hp/offload/activations.h"

#include <any>
#include <chrono>
#include <cstring>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/allocator.h"
#include "hp/core/error.h"

namespace hp::offload {

// One offloaded storage: its bytes on the host tier, and on the device tier while fetched.
struct ActivationOffload::Record {
  std::weak_ptr<Storage> source;  // the device storage it copies (to share it within one call)
  DType dtype = DType::f32;
  int64_t elems = 0;  // the storage's length in elements of dtype
  Tensor host;        // [elems], host tier
  std::mutex mu;
  Tensor device;  // [elems], device tier, while fetched
  int64_t packs = 0, unpacks = 0;
};

namespace {

using Clock = std::chrono::steady_clock;

// What a saved tensor becomes: its storage's record and its view of that storage.
struct Packed {
  std::shared_ptr<ActivationOffload::Record> rec;
  Shape shape, strides;
  int64_t offset = 0;
};

Tensor flat_copy(const void* src, DType dt, int64_t elems, MemTier tier) {
  const MemCategoryScope as_activations(MemCategory::activations);
  Tensor t = empty({elems}, dt, tier);
  std::memcpy(t.raw_data(), src, t.nbytes());
  return t;
}

}  // namespace

ActivationOffload::ActivationOffload(int64_t min_bytes) : min_bytes_(min_bytes) {}

ActivationOffload::~ActivationOffload() {
  for (Region& r : regions_)
    if (r.prefetch.valid()) r.prefetch.wait();
}

ActivationStats ActivationOffload::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ActivationOffload::install_region(nn::Module& module) {
  int64_t r = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r = static_cast<int64_t>(regions_.size());
    regions_.emplace_back();
  }
  // The wrapper owns the offloader; the offloader holds no module, so there is no cycle. The
  // module is the one that owns the wrapper, so the reference to it never dangles.
  std::shared_ptr<ActivationOffload> self = shared_from_this();
  const nn::Module* m = &module;
  module.add_forward_wrapper([self, r, m](const Tensor& x, const nn::Module::ForwardFn& inner) {
    return self->forward(r, *m, x, inner);
  });
}

Tensor ActivationOffload::forward(int64_t r, const nn::Module& module, const Tensor& x,
                                  const nn::Module::ForwardFn& inner) {
  if (!autograd::grad_enabled()) return inner(x);
  Region& region = regions_[size_t(r)];
  if (region.prefetch.valid()) region.prefetch.wait();  // a fetch left over from the last step
  std::vector<const Storage*> params;
  for (const auto& [name, p] : module.named_parameters())
    if (p.defined()) params.push_back(p.storage().get());
  auto records = std::make_shared<std::vector<std::shared_ptr<Record>>>();
  std::weak_ptr<ActivationOffload> weak = weak_from_this();

  autograd::SavedTensorHooks hooks;
  hooks.pack = [this, records, params](const Tensor& t) -> std::any {
    const std::shared_ptr<Storage>& s = t.storage();
    if (!s || s->tier() != MemTier::device || int64_t(s->nbytes()) < min_bytes_ ||
        s->nbytes() % t.itemsize() != 0)
      return {};
    for (const Storage* p : params)
      if (p == s.get()) return {};  // a parameter: not an activation
    std::shared_ptr<Record> rec;
    for (const auto& have : *records)
      if (have->source.lock() == s && have->dtype == t.dtype()) rec = have;
    if (!rec) {
      rec = std::make_shared<Record>();
      rec->source = s;
      rec->dtype = t.dtype();
      rec->elems = int64_t(s->nbytes() / t.itemsize());
      rec->host = flat_copy(s->data(), rec->dtype, rec->elems, MemTier::host);
      records->push_back(rec);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.device_to_host += int64_t(s->nbytes());
    }
    {
      std::lock_guard<std::mutex> lock(rec->mu);
      ++rec->packs;
    }
    return Packed{rec, t.shape(), t.strides(), t.offset()};
  };
  hooks.unpack = [weak](const std::any& a) -> Tensor {
    const Packed& p = std::any_cast<const Packed&>(a);
    auto self = weak.lock();
    HP_CHECK(self != nullptr);
    Record& rec = *p.rec;
    std::lock_guard<std::mutex> lock(rec.mu);
    self->fetch_locked(rec);  // a no-op when the region's fetch already brought it
    Tensor view = rec.device.as_strided(p.shape, p.strides, p.offset);
    // Every tensor saved from this storage has been used: the device copy can go (the view keeps
    // it alive for as long as the op needs it).
    if (++rec.unpacks >= rec.packs) rec.device = Tensor();
    return view;
  };

  Tensor y;
  {
    const autograd::SavedTensorHooksGuard guard(std::move(hooks));
    y = inner(x);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    region.records = std::move(*records);
  }
  if (!y.defined() || !y.requires_grad()) return y;
  // The pass-through node that starts this region's backward: fetch it, prefetch the one before.
  Tensor out = y.detach();
  autograd::record("ActivationOffloadPreBackward", {y}, {out},
                   [weak, r](const std::vector<Tensor>& grads) {
                     if (auto self = weak.lock()) self->begin_backward(r);
                     return std::vector<Tensor>{grads[0]};
                   });
  return out;
}

void ActivationOffload::fetch_pending(Record& rec) {
  std::lock_guard<std::mutex> lock(rec.mu);
  if (rec.unpacks < rec.packs) fetch_locked(rec);
}

void ActivationOffload::fetch_locked(Record& rec) {
  if (rec.device.defined()) return;
  rec.device = flat_copy(rec.host.raw_data(), rec.dtype, rec.elems, MemTier::device);
  std::lock_guard<std::mutex> stats_lock(mu_);
  stats_.host_to_device += int64_t(rec.device.nbytes());
}

void ActivationOffload::fetch_region(int64_t r) {
  std::vector<std::shared_ptr<Record>> records;
  {
    std::lock_guard<std::mutex> lock(mu_);
    records = regions_[size_t(r)].records;
  }
  for (const auto& rec : records) fetch_pending(*rec);
}

void ActivationOffload::begin_backward(int64_t r) {
  Region& region = regions_[size_t(r)];
  const Clock::time_point t0 = Clock::now();
  if (region.prefetch.valid()) region.prefetch.get();  // rethrows a failed fetch
  fetch_region(r);  // whatever the worker did not bring (the last region: all of it)
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.wait_s += waited;
  }
  if (r > 0) {
    Region& prev = regions_[size_t(r - 1)];
    if (prev.prefetch.valid()) prev.prefetch.wait();
    prev.prefetch = std::async(std::launch::async, [this, r] { fetch_region(r - 1); });
  }
}

}  // namespace hp::offload
