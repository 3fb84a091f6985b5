// Activation offload (HyperOffload, docs/ARCHITECTURE.md §4c): the tensors a region (a decoder
// layer or one of its blocks) saves for backward move to the host tier right after they are saved,
// and come back to the device tier when that region's backward is about to run — the next region
// in backward order (the previous one in forward order) is prefetched on a worker thread while this
// one's backward computes. Placement only: the bytes are copied, never converted, so gradients are
// bitwise those of the run without offload.
//
// How a region works (install_region wraps its forward):
//  * While its forward runs, saved-tensor hooks (autograd/node.h) are active. They take each saved
//    tensor whose storage lives on the device tier, is at least min_bytes and is not one of the
//    region's parameters; FSDP's own hooks, nested inside, take its gathered parameters first. The
//    whole storage is copied once per region call (views of one storage share the copy, and come
//    back with their own shape, strides and offset, so every op sees the layout it saved).
//  * A pass-through node on the region's output runs when the output's gradient arrives, i.e.
//    just before the region's own backward: it waits for (or does) the region's fetch and starts
//    the previous region's on the worker.
//  * A fetched storage stays on the device until every tensor saved from it has been unpacked once,
//    then only the host copy remains (an unpack after that fetches again, synchronously).
// Device bytes of the saved activations are then about two regions' worth during backward, and
// during forward only the region running; the host tier holds the rest.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/nn/module.h"

namespace hp::offload {

struct ActivationStats {
  int64_t device_to_host = 0, host_to_device = 0;  // bytes copied so far
  double wait_s = 0;  // time the backward waited for fetches that were not ready
};

class ActivationOffload : public std::enable_shared_from_this<ActivationOffload> {
 public:
  // Storages smaller than min_bytes stay where they are (copying them costs more than they hold).
  explicit ActivationOffload(int64_t min_bytes);
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // Wraps `module`'s forward (outermost wrapper: call after FSDP and recompute) as the next region
  // in forward order. With grad off (evaluation, generation) the wrapper is a plain call.
  void install_region(nn::Module& module);
  ActivationStats stats() const;

  struct Record;  // one offloaded storage (activations.cpp)

 private:
  struct Region {
    std::vector<std::shared_ptr<Record>> records;  // of its latest forward
    std::future<void> prefetch;                    // the worker's fetch, when started
  };
  Tensor forward(int64_t r, const nn::Module& module, const Tensor& x,
                 const nn::Module::ForwardFn& inner);
  void begin_backward(int64_t r);
  void fetch_region(int64_t r);
  // Copies rec to the device tier unless it is there; rec.mu held.
  void fetch_locked(Record& rec);
  // The same, unless every tensor saved from rec has been unpacked already.
  void fetch_pending(Record& rec);

  int64_t min_bytes_;
  mutable std::mutex mu_;  // regions_' lists and the stats
  std::vector<Region> regions_;
  ActivationStats stats_;
};

}  // namespace hp::offload
