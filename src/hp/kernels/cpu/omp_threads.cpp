#include "hp/kernels/cpu/omp_threads.h"

#include <dlfcn.h>

namespace hp::kernels::detail {
namespace {

// libgomp's entry points, looked up once (null where OpenMP is not loaded).
struct OmpApi {
  void (*set)(int) = nullptr;
  int (*get)() = nullptr;
  OmpApi() {
    set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (!set || !get) set = nullptr;
  }
};

const OmpApi& omp_api() {
  static const OmpApi api;
  return api;
}

}  // namespace

OmpThreads::OmpThreads(int n) {
  const OmpApi& api = omp_api();
  if (!api.set) return;
  old_ = api.get();
  if (old_ != n) api.set(n);
}

OmpThreads::~OmpThreads() {
  const OmpApi& api = omp_api();
  if (api.set && old_ > 0 && api.get() != old_) api.set(old_);
}

}  // namespace hp::kernels::detail
