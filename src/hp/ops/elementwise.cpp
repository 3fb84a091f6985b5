// Elementwise ops: forward through kernels::elementwise, backward as elementwise functors too.
#include <array>
#include <cmath>
#include <functional>

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/ops/checks.h"
#include "hp/ops/ops.h"

namespace hp {

using autograd::SavedTensor;
using kernels::EwOp;

namespace {

void check_float(const Tensor& t, const char* op) { detail::check_float_tensor(t, op); }

Tensor ew(EwOp op, const Tensor& a, const Tensor& b, DType dt, std::initializer_list<float> p = {}) {
  return kernels::elementwise(op, a, b, dt, p);
}

// What a unary op's backward needs: nothing, its input or its output.
enum class Keep { none, input, output };
using UnaryBwd = std::function<Tensor(const Tensor& saved, const Tensor& g)>;

// y = op(x) with dx = bwd(saved, g).
Tensor unary(const char* name, EwOp op, const Tensor& a, Keep keep, UnaryBwd bwd,
             std::initializer_list<float> p = {}) {
  HP_PROFILE_OP(name);
  check_float(a, name);
  Tensor y = ew(op, a, Tensor(), a.dtype(), p);
  if (autograd::needs_grad({a})) {
    SavedTensor saved(keep == Keep::input ? a : keep == Keep::output ? y : Tensor());
    autograd::record(name, {a}, {y}, [saved, bwd](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{bwd(saved.unpack(), g[0])};
    });
  }
  return y;
}

// Backward through a backward functor of ew_ops.h: dx = bwd_op(saved, g; params).
UnaryBwd functor_bwd(EwOp bwd_op, std::initializer_list<float> p = {}) {
  std::array<float, 3> pp{};
  std::copy(p.begin(), p.end(), pp.begin());
  return [bwd_op, pp](const Tensor& s, const Tensor& g) {
    return ew(bwd_op, s, g, s.dtype(), {pp[0], pp[1], pp[2]});
  };
}

Tensor binary(const char* name, EwOp op, const Tensor& a, const Tensor& b) {
  HP_PROFILE_OP(name);
  check_float(a, name);
  check_float(b, name);
  const DType dt = kernels::promote_types(a.dtype(), b.dtype());
  Tensor y = ew(op, a, b, dt);
  if (autograd::needs_grad({a, b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    const Shape sa = a.shape(), sb = b.shape();
    const DType da = a.dtype(), db = b.dtype();
    // Only what the backward formula needs is saved.
    const bool need_a = (op == EwOp::mul && gb) || op == EwOp::div || op == EwOp::maximum || op == EwOp::minimum;
    const bool need_b = (op == EwOp::mul && ga) || op == EwOp::div || op == EwOp::maximum || op == EwOp::minimum;
    SavedTensor sa_t(need_a ? a : Tensor()), sb_t(need_b ? b : Tensor());
    autograd::record(name, {a, b}, {y}, [=](const std::vector<Tensor>& gv) {
      const Tensor& g = gv[0];
      Tensor x = sa_t.unpack(), z = sb_t.unpack();
      Tensor gx, gz;
      switch (op) {
        case EwOp::add: gx = g, gz = g; break;
        case EwOp::sub: gx = g; if (gb) gz = neg(g); break;
        case EwOp::mul:
          if (ga) gx = mul(g, z);
          if (gb) gz = mul(g, x);
          break;
        case EwOp::div:
          if (ga) gx = div(g, z);
          if (gb) gz = neg(div(mul(g, div(x, z)), z));  // -g x / z^2
          break;
        case EwOp::maximum:
        case EwOp::minimum: {
          // As torch: the winner takes g, ties split it evenly.
          const DType dt = g.dtype();
          Tensor win = op == EwOp::maximum ? ew(EwOp::gt_mask, x, z, dt) : ew(EwOp::gt_mask, z, x, dt);
          Tensor tie = mul(ew(EwOp::eq_mask, x, z, dt), 0.5);
          Tensor share_a = add(win, tie);  // 1, 0.5 or 0; b gets the rest
          if (ga) gx = mul(g, share_a);
          if (gb) gz = mul(g, sub(ones({}, dt), share_a));
          break;
        }
        default: HP_CHECK(false, "binary op without backward");
      }
      if (gx.defined()) gx = cast(sum_to(gx, sa), da);
      if (gz.defined()) gz = cast(sum_to(gz, sb), db);
      return std::vector<Tensor>{ga ? gx : Tensor(), gb ? gz : Tensor()};
    });
  }
  return y;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", EwOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", EwOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", EwOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary("div", EwOp::div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary("maximum", EwOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary("minimum", EwOp::minimum, a, b); }

Tensor add(const Tensor& a, double s) {
  HP_PROFILE_OP("add_scalar");
  check_float(a, "add");
  Tensor y = ew(EwOp::affine, a, Tensor(), a.dtype(), {1.0f, static_cast<float>(s)});
  autograd::record("add_scalar", {a}, {y}, [](const std::vector<Tensor>& g) { return g; });
  return y;
}

Tensor mul(const Tensor& a, double s) {
  HP_PROFILE_OP("mul_scalar");
  check_float(a, "mul");
  const float f = static_cast<float>(s);
  Tensor y = a.dtype() == DType::f64 ? ew(EwOp::mul, a, full({}, s, DType::f64), DType::f64)
                                     : ew(EwOp::affine, a, Tensor(), a.dtype(), {f, 0.0f});
  autograd::record("mul_scalar", {a}, {y}, [s](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{mul(g[0], s)};
  });
  return y;
}

Tensor neg(const Tensor& a) {
  return unary("neg", EwOp::neg, a, Keep::none, [](const Tensor&, const Tensor& g) { return neg(g); });
}

Tensor abs(const Tensor& a) {
  return unary("abs", EwOp::abs, a, Keep::input, [](const Tensor& x, const Tensor& g) {
    // sign(x) as (x > 0) - (0 > x); 0 at 0.
    Tensor zero = zeros({}, x.dtype());
    return mul(g, sub(ew(EwOp::gt_mask, x, zero, x.dtype()), ew(EwOp::gt_mask, zero, x, x.dtype())));
  });
}

Tensor exp(const Tensor& a) {
  return unary("exp", EwOp::exp, a, Keep::output, [](const Tensor& y, const Tensor& g) { return mul(g, y); });
}

Tensor log(const Tensor& a) {
  return unary("log", EwOp::log, a, Keep::input, [](const Tensor& x, const Tensor& g) { return div(g, x); });
}

Tensor sqrt(const Tensor& a) {
  return unary("sqrt", EwOp::sqrt, a, Keep::output,
               [](const Tensor& y, const Tensor& g) { return div(mul(g, 0.5), y); });
}

Tensor rsqrt(const Tensor& a) { return pow(a, -0.5); }
Tensor square(const Tensor& a) { return pow(a, 2.0); }

Tensor pow(const Tensor& a, double e) {
  const bool is_int = std::nearbyint(e) == e;
  const bool is_odd = is_int && std::fmod(std::fabs(e), 2.0) == 1.0;
  const std::initializer_list<float> p = {static_cast<float>(e), is_int ? 1.0f : 0.0f,
                                          is_odd ? 1.0f : 0.0f};
  return unary("pow", EwOp::pow_scalar, a, Keep::input, functor_bwd(EwOp::pow_scalar_bwd, p), p);
}

Tensor tanh(const Tensor& a) {
  return unary("tanh", EwOp::tanh, a, Keep::output, functor_bwd(EwOp::tanh_bwd));
}
Tensor sigmoid(const Tensor& a) {
  return unary("sigmoid", EwOp::sigmoid, a, Keep::output, functor_bwd(EwOp::sigmoid_bwd));
}
Tensor silu(const Tensor& a) {
  return unary("silu", EwOp::silu, a, Keep::input, functor_bwd(EwOp::silu_bwd));
}
Tensor relu(const Tensor& a) {
  return unary("relu", EwOp::relu, a, Keep::input, functor_bwd(EwOp::relu_bwd));
}

Tensor gelu(const Tensor& a, const std::string& approximate) {
  if (approximate == "none")
    return unary("gelu", EwOp::gelu, a, Keep::input, functor_bwd(EwOp::gelu_bwd));
  if (approximate == "tanh")
    return unary("gelu", EwOp::gelu_tanh, a, Keep::input, functor_bwd(EwOp::gelu_tanh_bwd));
  HP_THROW(ValueError, "gelu", "approximate must be 'none' or 'tanh', got '", approximate, "'");
}

Tensor clamp(const Tensor& a, double lo, double hi) {
  if (lo > hi) HP_THROW(ValueError, "clamp", "lo ", lo, " > hi ", hi);
  const std::initializer_list<float> p = {static_cast<float>(lo), static_cast<float>(hi)};
  return unary("clamp", EwOp::clamp, a, Keep::input, functor_bwd(EwOp::clamp_bwd, p), p);
}

Tensor cast(const Tensor& a, DType dt) {
  if (a.dtype() == dt) return a;
  HP_PROFILE_OP("cast");
  Tensor y = a.to(dt);
  if (is_floating(dt)) {
    const DType src = a.dtype();
    autograd::record("cast", {a}, {y}, [src](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(src)};
    });
  }
  return y;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  HP_PROFILE_OP("where");
  if (cond.dtype() != DType::boolean && cond.dtype() != DType::u8)
    HP_THROW(ValueError, "where", "condition must be bool or u8, got ", cond.desc());
  check_float(a, "where");
  check_float(b, "where");
  const Shape shape = kernels::broadcast_shapes(kernels::broadcast_shapes(cond.shape(), a.shape(), "where"),
                                                b.shape(), "where");
  const DType dt = kernels::promote_types(a.dtype(), b.dtype());
  // mask as float (0/1): out = b + m * (a - b) would lose exactness; select per element instead.
  Tensor m = expand(cond, shape).to(DType::f32);
  Tensor ax = expand(a, shape).to(dt), bx = expand(b, shape).to(dt);
  Tensor y = empty(shape, dt);
  {
    const float* mp = m.data<float>();
    const size_t item = dtype_size(dt);
    const char* ap = static_cast<const char*>(ax.raw_data());
    const char* bp = static_cast<const char*>(bx.raw_data());
    char* yp = static_cast<char*>(y.raw_data());
    for (int64_t i = 0; i < y.numel(); ++i)
      std::memcpy(yp + i * item, (mp[i] != 0 ? ap : bp) + i * item, item);
  }
  if (autograd::needs_grad({a, b})) {
    SavedTensor sm(m);
    const Shape sa = a.shape(), sb = b.shape();
    const DType da = a.dtype(), db = b.dtype();
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    autograd::record("where", {a, b}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor mask = sm.unpack();
      Tensor gm = mul(g[0], mask);
      Tensor gx = ga ? cast(sum_to(gm, sa), da) : Tensor();
      Tensor gz = gb ? cast(sum_to(sub(g[0], gm), sb), db) : Tensor();
      return std::vector<Tensor>{gx, gz};
    });
  }
  return y;
}

}  // namespace hp
