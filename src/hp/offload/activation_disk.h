// The disk tier of activation offload (offload.activations: disk, docs/ARCHITECTURE.md §4c): saved
// storages are written to extents of one scratch file per rank and process (an AsyncFile, so the
// writes run on its pread/pwrite pool while the forward computes) and read back for backward.
//
// Extents are handed out first-fit from a free list and returned when the saved tensor is released
// (its autograd graph freed), so the file stays at about one step's saved bytes. Each extent is
// rounded up to 4 KiB. A write's error (a full disk, a file size limit, an unwritable file) is an
// IoError naming the file, the offset and the bytes, raised when the extent is read back or waited
// for — in the backward of the step that wrote it.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "hp/core/tensor.h"
#include "hp/offload/async_file.h"

namespace hp::offload {

class ActivationDisk {
 public:
  // Creates `path` (its directory too): IoError naming them when that fails.
  ActivationDisk(std::string path, int io_threads);

  struct Extent {
    int64_t offset = -1, bytes = 0;  // bytes: the data's, not the rounded extent's
    AsyncFile::Ticket write = 0;     // 0 once waited for
    std::exception_ptr error;        // the write's, once waited for
  };
  // Queues a write of `src` (held until written) to a fresh extent.
  Extent write(const Tensor& src);
  // Reads the extent into `dst` ([bytes] of any dtype, contiguous), waiting for its write first.
  // Returns the read's ticket (wait on it with wait()).
  AsyncFile::Ticket read(Extent& e, const Tensor& dst);
  // Waits for a read (or write) ticket; its IoError, if any, is thrown here.
  void wait(AsyncFile::Ticket t) { file_.wait(t); }
  // Waits for the extent's write (errors dropped: the data is no longer wanted) and frees its
  // space.
  void release(Extent& e);

  const std::string& path() const { return file_.path(); }
  int64_t file_bytes() const;  // the file's extent in use, free holes included

 private:
  int64_t allocate(int64_t bytes);
  AsyncFile file_;
  mutable std::mutex mu_;
  std::map<int64_t, int64_t> free_;  // offset → bytes of the holes below end_
  int64_t end_ = 0;
};

}  // namespace hp::offload
