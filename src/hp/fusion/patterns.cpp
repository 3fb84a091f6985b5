#include "hp/fusion/patterns.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "hp/fusion/fuse.h"
#include "hp/fusion/mode.h"
#include "hp/ops/ops.h"

namespace hp::fusion {

namespace {

using Vars = std::vector<Var>;

std::atomic<int64_t> g_swiglu{0}, g_rms{0}, g_add_rms{0};

bool fusable_dtype(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::f32 || t.dtype() == DType::bf16);
}

// y = (x · rsqrt(mean(x²) + eps)) · w in f32 (HF's order, as the hand kernel), rounded once to x's
// dtype. w stays in its dtype: a bf16 w meets the f32 product and promotes, so its gradient is
// summed over the rows in f32 and rounded once (a cast node would round every row's term).
Var rms_expr(Var x_in, Var w, double eps) {
  const Var x = cast(x_in, DType::f32);
  return cast((x * rsqrt(mean(x * x) + eps)) * w, x_in.dtype());
}

// One region per eps (the literal is part of the traced structure): a model has one or two.
template <class MakeFn>
const Fused& by_eps(std::map<uint64_t, Fused>& cache, std::mutex& mu, double eps, MakeFn make) {
  uint64_t bits = 0;
  std::memcpy(&bits, &eps, sizeof bits);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(bits);
  if (it == cache.end()) it = cache.emplace(bits, make(eps)).first;
  return it->second;  // std::map: the reference outlives later insertions
}

const Fused& rms_region(double eps) {
  static std::map<uint64_t, Fused> cache;
  static std::mutex mu;
  return by_eps(cache, mu, eps, [](double e) {
    return fuse([e](const Vars& v) { return Vars{rms_expr(v[0], v[1], e)}; }, "rms_norm");
  });
}

const Fused& add_rms_region(double eps) {
  static std::map<uint64_t, Fused> cache;
  static std::mutex mu;
  return by_eps(cache, mu, eps, [](double e) {
    return fuse(
        [e](const Vars& v) {
          const Var h = v[0] + v[1];  // rounded to the dtype, as the eager add stores it
          return Vars{h, rms_expr(h, v[2], e)};
        },
        "add_rms_norm");
  });
}

}  // namespace

Tensor swiglu(const Tensor& g, const Tensor& u) {
  if (mode() == Mode::none || !fusable_dtype(g) || !fusable_dtype(u) || g.numel() == 0)
    return hp::mul(hp::silu(g), u);
  static const Fused region = fuse([](const Vars& v) { return Vars{silu(v[0]) * v[1]}; }, "swiglu");
  g_swiglu.fetch_add(1, std::memory_order_relaxed);
  return region({g, u})[0];
}

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) {
  if (mode() != Mode::lazy || !fusable_dtype(x) || !fusable_dtype(w) || x.numel() == 0)
    return hp::rms_norm(x, w, eps);
  g_rms.fetch_add(1, std::memory_order_relaxed);
  return rms_region(eps)({x, w})[0];
}

std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& w,
                                       double eps) {
  if (mode() != Mode::lazy || !fusable_dtype(x) || !fusable_dtype(r) || !fusable_dtype(w) ||
      x.numel() == 0) {
    Tensor h = hp::add(x, r);
    Tensor y = hp::rms_norm(h, w, eps);
    return {h, y};
  }
  g_add_rms.fetch_add(1, std::memory_order_relaxed);
  std::vector<Tensor> hy = add_rms_region(eps)({x, r, w});
  return {hy[0], hy[1]};
}

PatternCalls pattern_calls() {
  PatternCalls c;
  c.swiglu = g_swiglu.load(std::memory_order_relaxed);
  c.rms_norm = g_rms.load(std::memory_order_relaxed);
  c.add_rms_norm = g_add_rms.load(std::memory_order_relaxed);
  return c;
}

}  // namespace hp::fusion
