#include "hp/kernels/cpu/dropout.h"

#include <algorithm>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/typed.h"

namespace hp::kernels {

Tensor masked_scale(const Tensor& x_in, const Tensor& keep, double scale) {
  HP_CHECK(keep.dtype() == DType::u8 && keep.is_contiguous() && keep.numel() == x_in.numel());
  const Tensor x = x_in.contiguous();
  Tensor y = empty(x.shape(), x.dtype());
  detail::dispatch_float(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = detail::Compute<T>;
    using CT = typename C::type;
    const CT s = static_cast<CT>(scale);
    const T* xp = static_cast<const T*>(x.raw_data());
    const uint8_t* kp = keep.data<uint8_t>();
    T* yp = static_cast<T*>(y.raw_data());
    parallel_for(0, x.numel(), 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) yp[i] = C::store(kp[i] ? C::load(xp[i]) * s : CT(0));
    });
  });
  return y;
}

}  // namespace hp::kernels
