#include "hp/fusion/patterns.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
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
  if (mode() == Mode::none || !fusable_dtype(g) || !fusable_dtype(u) || g.numel() == 0 ||
      g.shape() != u.shape() || g.dtype() != u.dtype())
    return hp::mul(hp::silu(g), u);
  const bool grad = autograd::needs_grad({g, u});
  // auto fuses SwiGLU in f32, with and without gradients (measured 0.66-0.84x the eager silu +
  // mul at the model's shape); bf16 stays eager: its eager silu is a table lookup and silu_bwd
  // runs through tiles, and the bf16 regions measured 1.11-1.26x (docs/FUSION.md "Modes").
  if (mode() == Mode::auto_ && g.dtype() != DType::f32) return hp::mul(hp::silu(g), u);
  g_swiglu.fetch_add(1, std::memory_order_relaxed);
  if (!grad) {
    static const Fused region =
        fuse([](const Vars& v) { return Vars{silu(v[0]) * v[1]}; }, "swiglu");
    return region({g, u})[0];
  }
  // With gradients: the forward also writes s = silu(g), which the backward reads instead of
  // recomputing it (the region vjp would replay silu: a third exp per element where the eager
  // ops take two, measured slower than eager). Saved: g, u, s — what the eager silu and mul save.
  static const Fused forward = fuse(
      [](const Vars& v) {
        const Var s = silu(v[0]);
        return Vars{s * v[1], s};
      },
      "swiglu");
  // The eager backward's ops in the same dtypes: ds = dy·u, du = dy·s, dg = silu_bwd(g, ds).
  static const Fused backward = fuse(
      [](const Vars& v) {
        const Var ds = v[3] * v[1];
        return Vars{ew_binary(kernels::EwOp::silu_bwd, v[0], ds), v[3] * v[2]};
      },
      "swiglu_backward");
  std::vector<Tensor> ys;
  {
    autograd::NoGradGuard no_grad;
    ys = forward({g, u});
  }
  const autograd::SavedTensor sg(g), su(u), ss(ys[1]);
  const bool need_g = g.requires_grad(), need_u = u.requires_grad();
  autograd::record("swiglu", {g, u}, {ys[0]},
                   [sg, su, ss, need_g, need_u](const std::vector<Tensor>& gout) {
                     autograd::NoGradGuard no_grad;
                     const Tensor x = sg.unpack(), s = ss.unpack();
                     const Tensor& d = gout[0];
                     const Tensor dy = !d.defined()             ? zeros(s.shape(), s.dtype())
                                       : d.dtype() == s.dtype() ? d.contiguous()
                                                                : d.to(s.dtype());
                     std::vector<Tensor> r = backward({x, su.unpack(), s, dy});
                     return std::vector<Tensor>{need_g ? r[0] : Tensor(), need_u ? r[1] : Tensor()};
                   });
  return ys[0];
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
