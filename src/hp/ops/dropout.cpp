// dropout: a keep-mask from the default generator (counter-based, so autograd::checkpoint replays
// it exactly by restoring the generator state), scaled by 1 / (1 - p). The u8 mask [numel] is what
// backward keeps.
#include "hp/kernels/cpu/dropout.h"

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/core/random.h"
#include "hp/ops/dim_move.h"
#include "hp/ops/ops.h"

namespace hp {

Tensor dropout(const Tensor& a, double p, bool training) {
  HP_PROFILE_OP("dropout");
  detail::check_float_tensor(a, "dropout");
  if (!(p >= 0.0 && p <= 1.0))
    HP_THROW(ValueError, "dropout", "probability p = ", p, " is outside [0, 1]");
  if (!training || p == 0.0) return a;
  const int64_t n = a.numel();
  Tensor keep = empty({n}, DType::u8);  // [numel], row-major over a's shape
  if (p == 1.0) {
    keep.fill_(0);  // everything dropped; no random draw needed
  } else {
    Generator& gen = default_generator();
    const RngState at{gen.state().seed, gen.reserve(n)};
    fill_keep_mask(keep.data<uint8_t>(), n, at, static_cast<float>(p));
  }
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Tensor y = kernels::masked_scale(a, keep, scale);
  if (autograd::needs_grad({a})) {
    const DType dt = a.dtype();
    autograd::record("dropout", {a}, {y}, [keep, scale, dt](const std::vector<Tensor>& g) {
      const Tensor gv = g[0].dtype() == dt ? g[0] : g[0].to(dt);
      return std::vector<Tensor>{kernels::masked_scale(gv, keep, scale)};
    });
  }
  return y;
}

}  // namespace hp
