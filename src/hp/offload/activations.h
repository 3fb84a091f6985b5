// Activation offload (HyperOffload, docs/ARCHITECTURE.md §4c): the tensors a region (a decoder
// layer or one of its blocks) saves for backward move to the host tier right after they are saved,
// and come back to the device tier when that region's backward is about to run — the next region
// in backward order (the previous one in forward order) is prefetched on a worker thread while this
// one's backward computes. Placement only: the bytes are copied, never converted, so gradients are
// bitwise those of the run without offload. The tier is the host (offload.activations: host) or
// the disk (disk: each copy is queued to the disk tier's file, offload/activation_disk.h, and its
// host staging buffer freed once written; a fetch reads it back).
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
//  * disk: a region's fetch queues all its reads on the file's worker pool before waiting for
//    any; a write that failed (full disk, size limit) is an IoError naming the file, offset and
//    bytes, raised by the backward of the step that wrote.
//  * A fetched storage stays on the device until every tensor saved from it has been unpacked once,
//    then only the host copy remains (an unpack after that fetches again, synchronously).
// Device bytes of the saved activations are then about two regions' worth during backward, and
// during forward only the region running; the host tier holds the rest.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/nn/module.h"

namespace hp::offload {

class ActivationDisk;

struct ActivationStats {
  int64_t device_to_host = 0, host_to_device = 0;  // bytes copied so far
  int64_t host_to_disk = 0, disk_to_host = 0;      // disk: bytes written / read so far
  double wait_s = 0;  // time the backward waited for fetches that were not ready
};

struct ActivationOffloadOptions {
  // Storages smaller than this stay where they are (copying them costs more than they hold).
  int64_t min_bytes = 65536;
  // The disk tier's file (offload.activations: disk); empty: the host tier holds the copies.
  std::string disk_file;
  int io_threads = 4;  // disk: pread/pwrite workers
};

class ActivationOffload : public std::enable_shared_from_this<ActivationOffload> {
 public:
  // disk: creates the file (IoError naming it when that fails).
  explicit ActivationOffload(ActivationOffloadOptions o);
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // Wraps `module`'s forward (outermost wrapper: call after FSDP and recompute) as the next region
  // in forward order. With grad off (evaluation, generation) the wrapper is a plain call.
  void install_region(nn::Module& module);
  ActivationStats stats() const;
  // Bytes each region (in install order) moved off the device in its latest forward: what its
  // saved tensors would hold there (the memory plan ranks blocks by it).
  std::vector<int64_t> region_bytes() const;

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
  // disk: queues rec's read into a fresh device-tier buffer unless it is there or no longer
  // needed (fetch_locked waits for it).
  void start_read(Record& rec);
  // Copies rec to the device tier unless it is there; rec.mu held.
  void fetch_locked(Record& rec);
  // The same, unless every tensor saved from rec has been unpacked already.
  void fetch_pending(Record& rec);

  int64_t min_bytes_;
  std::shared_ptr<ActivationDisk> disk_;  // null: the host tier
  mutable std::mutex mu_;                 // regions_' lists and the stats
  std::vector<Region> regions_;
  ActivationStats stats_;
};

}  // namespace hp::offload
