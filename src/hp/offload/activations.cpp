#include "hp/offload/activations.h"

#include <any>
#include <chrono>
#include <cstring>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/allocator.h"
#include "hp/core/error.h"
#include "hp/offload/activation_disk.h"

namespace hp::offload {

// One offloaded storage: its bytes on the host tier (or in an extent of the disk tier's file), and
// on the device tier while fetched.
struct ActivationOffload::Record {
  std::weak_ptr<Storage> source;  // the device storage it copies (to share it within one call)
  DType dtype = DType::f32;
  int64_t elems = 0;                     // the storage's length in elements of dtype
  Tensor host;                           // [elems], host tier (host tier only)
  std::shared_ptr<ActivationDisk> disk;  // disk tier only: the file, and the extent in it
  ActivationDisk::Extent extent;
  std::mutex mu;
  Tensor device;               // [elems], device tier, while fetched (or being read into)
  AsyncFile::Ticket read = 0;  // disk: the read into `device` in flight
  int64_t packs = 0, unpacks = 0;

  Record() = default;
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;
  ~Record() {
    if (!disk) return;
    if (read != 0) {
      try {
        disk->wait(read);  // `device` must outlive the read
      } catch (const std::exception&) {
      }
    }
    disk->release(extent);
  }
};

namespace {

using Clock = std::chrono::steady_clock;

// What a saved tensor becomes: its storage's record and its view of that storage.
struct Packed {
  std::shared_ptr<ActivationOffload::Record> rec;
  Shape shape, strides;
  int64_t offset = 0;
};

Tensor flat_empty(DType dt, int64_t elems, MemTier tier) {
  const MemCategoryScope as_activations(MemCategory::activations);
  return empty({elems}, dt, tier);
}

Tensor flat_copy(const void* src, DType dt, int64_t elems, MemTier tier) {
  Tensor t = flat_empty(dt, elems, tier);
  std::memcpy(t.raw_data(), src, t.nbytes());
  return t;
}

}  // namespace

ActivationOffload::ActivationOffload(ActivationOffloadOptions o) : min_bytes_(o.min_bytes) {
  if (!o.disk_file.empty()) disk_ = std::make_shared<ActivationDisk>(o.disk_file, o.io_threads);
}

ActivationOffload::~ActivationOffload() {
  for (Region& r : regions_)
    if (r.prefetch.valid()) r.prefetch.wait();
}

ActivationStats ActivationOffload::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<int64_t> ActivationOffload::region_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> out;
  for (const Region& r : regions_) {
    int64_t n = 0;
    for (const auto& rec : r.records) n += rec->elems * int64_t(dtype_size(rec->dtype));
    out.push_back(n);
  }
  return out;
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
        s->nbytes() == 0 || s->nbytes() % t.itemsize() != 0)
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
      if (disk_) {
        // The write holds the staging buffer until it is done; then only the file has the bytes.
        rec->disk = disk_;
        rec->extent = disk_->write(rec->host);
        rec->host = Tensor();
      }
      records->push_back(rec);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.device_to_host += int64_t(s->nbytes());
      if (disk_) stats_.host_to_disk += int64_t(s->nbytes());
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

void ActivationOffload::start_read(Record& rec) {
  std::lock_guard<std::mutex> lock(rec.mu);
  if (rec.device.defined() || rec.unpacks >= rec.packs) return;
  // Read straight into the device-tier buffer (an accelerator would stage it through pinned host
  // memory; the log counts both hops).
  Tensor dst = flat_empty(rec.dtype, rec.elems, MemTier::device);
  rec.read = rec.disk->read(rec.extent, dst);  // throws a failed write's IoError
  rec.device = std::move(dst);
}

void ActivationOffload::fetch_locked(Record& rec) {
  if (rec.disk) {
    if (rec.device.defined() && rec.read == 0) return;
    if (!rec.device.defined()) {
      Tensor dst = flat_empty(rec.dtype, rec.elems, MemTier::device);
      rec.read = rec.disk->read(rec.extent, dst);
      rec.device = std::move(dst);
    }
    const AsyncFile::Ticket t = rec.read;
    rec.read = 0;
    try {
      rec.disk->wait(t);
    } catch (...) {
      rec.device = Tensor();
      throw;
    }
  } else {
    if (rec.device.defined()) return;
    rec.device = flat_copy(rec.host.raw_data(), rec.dtype, rec.elems, MemTier::device);
  }
  std::lock_guard<std::mutex> stats_lock(mu_);
  stats_.host_to_device += int64_t(rec.device.nbytes());
  if (rec.disk) stats_.disk_to_host += int64_t(rec.device.nbytes());
}

void ActivationOffload::fetch_region(int64_t r) {
  std::vector<std::shared_ptr<Record>> records;
  {
    std::lock_guard<std::mutex> lock(mu_);
    records = regions_[size_t(r)].records;
  }
  if (disk_)  // all of the region's reads in flight at once, then wait for each
    for (const auto& rec : records) start_read(*rec);
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
