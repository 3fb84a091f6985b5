// OpenMP thread count for oneDNN calls, without OpenMP flags in this library.
//
// Debian's oneDNN threads with OpenMP, whose thread count is libgomp's (loaded with oneDNN); it is
// an ICV of the calling thread, so setting it in one hp pool thread does not touch the others.
// gemm_peak.cpp runs oneDNN's own matmul with hp's thread count; the native bf16 GEMM tiles
// (gemm_native.cpp) run it with one thread each inside the pool.
#pragma once

namespace hp::kernels::detail {

// Sets the calling thread's OpenMP thread count (through dlsym, so nothing needs -fopenmp) and
// restores the old count on destruction. Does nothing where libgomp is not loaded.
class OmpThreads {
 public:
  explicit OmpThreads(int n);
  ~OmpThreads();
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int old_ = 0;
};

}  // namespace hp::kernels::detail
