// Elementwise ops: forward through kernels::elementwise, backward as elementwise functors too.
#include <cmath>

#include "hp/autograd/node.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/ops/ops.h"

namespace hp {

using autograd::SavedTensor;
using kernels::EwOp;

namespace {

void check_float(const Tensor& t, const char* op) {
  if (!t.defined()) HP_THROW(ValueError, op, "undefined input");
  if (!is_floating(t.dtype()) || t.dtype() == DType::e8m0 || t.dtype() == DType::f8e4m3 ||
      t.dtype() == DType::f8e5m2)
    HP_THROW(ValueError, op, "expects f64/f32/bf16/f16 input, got ", t.desc());
}

Tensor ew(EwOp op, const Tensor& a, const Tensor& b, DType dt, std::initializer_list<float> p = {}) {
  return kernels::elementwise(op, a, b, dt, p);
}

// y = op(x); dx = bwd(saved, g) where saved is x (from_output=false) or y (from_output=true).
Tensor unary(const char* name, EwOp op, EwOp bwd, const Tensor& a, bool from_output,
             std::initializer_list<float> p = {}) {
  check_float(a, name);
  Tensor y = ew(op, a, Tensor(), a.dtype(), p);
  if (autograd::needs_grad({a})) {
    SavedTensor saved(from_output ? y : a);
    float p0 = 0, p1 = 0, p2 = 0;
    auto it = p.begin();
    if (it != p.end()) p0 = *it++;
    if (it != p.end()) p1 = *it++;
    if (it != p.end()) p2 = *it++;
    autograd::record(name, {a}, {y}, [saved, bwd, p0, p1, p2](const std::vector<Tensor>& g) {
      Tensor s = saved.unpack();
      return std::vector<Tensor>{ew(bwd, s, g[0], s.dtype(), {p0, p1, p2})};
    });
  }
  return y;
}

Tensor binary(const char* name, EwOp op, const Tensor& a, const Tensor& b) {
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
  check_float(a, "add");
  Tensor y = ew(EwOp::affine, a, Tensor(), a.dtype(), {1.0f, static_cast<float>(s)});
  autograd::record("add_scalar", {a}, {y}, [](const std::vector<Tensor>& g) { return g; });
  return y;
}

Tensor mul(const Tensor& a, double s) {
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
  check_float(a, "neg");
  Tensor y = ew(EwOp::neg, a, Tensor(), a.dtype());
  autograd::record("neg", {a}, {y}, [](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{neg(g[0])};
  });
  return y;
}

Tensor abs(const Tensor& a) {
  check_float(a, "abs");
  Tensor y = ew(EwOp::abs, a, Tensor(), a.dtype());
  SavedTensor sa(autograd::needs_grad({a}) ? a : Tensor());
  autograd::record("abs", {a}, {y}, [sa](const std::vector<Tensor>& g) {
    Tensor x = sa.unpack();
    // sign(x) = relu_bwd(x, 1) - relu_bwd(-x, 1); 0 at 0.
    Tensor one = full({}, 1.0, x.dtype());
    Tensor sign = sub(ew(EwOp::relu_bwd, x, one, x.dtype()), ew(EwOp::relu_bwd, neg(x), one, x.dtype()));
    return std::vector<Tensor>{mul(g[0], sign)};
  });
  return y;
}

Tensor exp(const Tensor& a) {
  check_float(a, "exp");
  Tensor y = ew(EwOp::exp, a, Tensor(), a.dtype());
  SavedTensor sy(autograd::needs_grad({a}) ? y : Tensor());
  autograd::record("exp", {a}, {y}, [sy](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{mul(g[0], sy.unpack())};
  });
  return y;
}

Tensor log(const Tensor& a) {
  check_float(a, "log");
  Tensor y = ew(EwOp::log, a, Tensor(), a.dtype());
  SavedTensor sa(autograd::needs_grad({a}) ? a : Tensor());
  autograd::record("log", {a}, {y}, [sa](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{div(g[0], sa.unpack())};
  });
  return y;
}

Tensor sqrt(const Tensor& a) {
  check_float(a, "sqrt");
  Tensor y = ew(EwOp::sqrt, a, Tensor(), a.dtype());
  SavedTensor sy(autograd::needs_grad({a}) ? y : Tensor());
  autograd::record("sqrt", {a}, {y}, [sy](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{div(mul(g[0], 0.5), sy.unpack())};
  });
  return y;
}

Tensor rsqrt(const Tensor& a) { return pow(a, -0.5); }
Tensor square(const Tensor& a) { return pow(a, 2.0); }

Tensor pow(const Tensor& a, double e) {
  const bool is_int = std::nearbyint(e) == e;
  const bool is_odd = is_int && std::fmod(std::fabs(e), 2.0) == 1.0;
  return unary("pow", EwOp::pow_scalar, EwOp::pow_scalar_bwd, a, false,
               {static_cast<float>(e), is_int ? 1.0f : 0.0f, is_odd ? 1.0f : 0.0f});
}

Tensor tanh(const Tensor& a) { return unary("tanh", EwOp::tanh, EwOp::tanh_bwd, a, true); }
Tensor sigmoid(const Tensor& a) { return unary("sigmoid", EwOp::sigmoid, EwOp::sigmoid_bwd, a, true); }
Tensor silu(const Tensor& a) { return unary("silu", EwOp::silu, EwOp::silu_bwd, a, false); }
Tensor relu(const Tensor& a) { return unary("relu", EwOp::relu, EwOp::relu_bwd, a, false); }

Tensor gelu(const Tensor& a, const std::string& approximate) {
  if (approximate == "none") return unary("gelu", EwOp::gelu, EwOp::gelu_bwd, a, false);
  if (approximate == "tanh") return unary("gelu", EwOp::gelu_tanh, EwOp::gelu_tanh_bwd, a, false);
  HP_THROW(ValueError, "gelu", "approximate must be 'none' or 'tanh', got '", approximate, "'");
}

Tensor clamp(const Tensor& a, double lo, double hi) {
  if (lo > hi) HP_THROW(ValueError, "clamp", "lo ", lo, " > hi ", hi);
  return unary("clamp", EwOp::clamp, EwOp::clamp_bwd, a, false,
               {static_cast<float>(lo), static_cast<float>(hi)});
}

Tensor cast(const Tensor& a, DType dt) {
  if (a.dtype() == dt) return a;
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
