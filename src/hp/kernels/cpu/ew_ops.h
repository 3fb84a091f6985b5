// Elementwise ops, each defined ONCE as a functor over a SIMD arch A (docs/ARCHITECTURE.md §3).
//
// The same definitions run in the eager kernels (every ISA, f32 compute), in the f64 reference path
// that gradient checks use, and in the DVM fusion engine, which chains them over cache-resident
// tiles. `apply` takes A::V values and the op's float parameters (p[0], p[1], …).
//
// To add an op: add its enum entry to EwOp, a functor here, and a row to HP_EW_OPS below.
#pragma once

#include <cstdint>

namespace hp::kernels {

enum class EwOp : uint8_t {
  // unary
  neg, abs, exp, log, sqrt, rsqrt, square, reciprocal, tanh, sigmoid, silu, gelu, gelu_tanh, relu,
  affine,  // p[0] * x + p[1]
  clamp,   // min(max(x, p[0]), p[1])
  pow_scalar,  // x ^ p[0]; p[1], p[2]: e is an integer / an odd integer
  // binary
  add, sub, mul, div, maximum, minimum,
  // backward helpers: (x or y, g) -> dx
  silu_bwd, gelu_bwd, gelu_tanh_bwd, sigmoid_bwd, tanh_bwd, relu_bwd,
  clamp_bwd,  // (x, g): g where p[0] <= x <= p[1]
  pow_scalar_bwd,  // (x, g): g * p[0] * x^(p[0]-1)
  gt_mask, eq_mask,  // (x, y) -> 1 where x > y (x == y), else 0
  kCount
};
inline constexpr int kNumEwOps = static_cast<int>(EwOp::kCount);

// Arity (1 or 2) and name of each op.
int ew_arity(EwOp op);
const char* ew_name(EwOp op);

namespace ew {

#define HP_EW_UNARY(Name, expr)                                        \
  struct Name {                                                        \
    template <class A>                                                 \
    static typename A::V apply(typename A::V x, const float* p) {     \
      (void)p;                                                         \
      return expr;                                                     \
    }                                                                  \
  };
#define HP_EW_BINARY(Name, expr)                                                   \
  struct Name {                                                                    \
    template <class A>                                                             \
    static typename A::V apply(typename A::V x, typename A::V y, const float* p) { \
      (void)p;                                                                     \
      return expr;                                                                 \
    }                                                                              \
  };

// Shorthand for constants inside the expressions.
#define C(v) A::set1(static_cast<decltype(A::hsum(x))>(v))

HP_EW_UNARY(Neg, A::neg(x))
HP_EW_UNARY(Abs, A::abs(x))
HP_EW_UNARY(Exp, A::exp(x))
HP_EW_UNARY(Log, A::log(x))
HP_EW_UNARY(Sqrt, A::sqrt(x))
HP_EW_UNARY(Rsqrt, A::div(C(1), A::sqrt(x)))
HP_EW_UNARY(Square, A::mul(x, x))
HP_EW_UNARY(Reciprocal, A::div(C(1), x))
HP_EW_UNARY(Tanh, A::tanh(x))
// 1 / (1 + e^-x): exact limits at ±Inf.
HP_EW_UNARY(Sigmoid, A::div(C(1), A::add(C(1), A::exp(A::neg(x)))))
HP_EW_UNARY(Silu, A::div(x, A::add(C(1), A::exp(A::neg(x)))))
// x Φ(x) = 0.5 x (1 + erf(x / sqrt 2)), Φ the standard normal CDF
HP_EW_UNARY(Gelu, A::mul(x, A::norm_cdf(x)))
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
HP_EW_UNARY(GeluTanh,
            A::mul(A::mul(C(0.5), x),
                   A::add(C(1), A::tanh(A::mul(C(0.79788456080286536),
                                               A::fma(A::mul(C(0.044715), x), A::mul(x, x), x))))))
// max(c, x) returns x when x is NaN (x86 operand order): NaN propagates, as in torch.
HP_EW_UNARY(Relu, A::max(C(0), x))
HP_EW_UNARY(Affine, A::fma(C(p[0]), x, C(p[1])))
HP_EW_UNARY(Clamp, A::min(C(p[1]), A::max(C(p[0]), x)))
// x^e with e = p[0]; p[1] = 1 when e is an integer, p[2] = 1 when it is an odd integer (set by the
// op front-end), so negative bases follow C pow: (-2)^3 = -8, (-2)^0.5 = NaN, 0^0 = 1.
template <class A>
typename A::V pow_value(typename A::V x, float e, bool is_int, bool is_odd) {
  using T = decltype(A::hsum(x));
  if (e == 0.0f) return A::set1(T(1));
  auto mag = A::exp(A::mul(A::set1(T(e)), A::log(A::abs(x))));
  auto neg_val = is_int ? (is_odd ? A::neg(mag) : mag) : A::set1(T(__builtin_nanf("")));
  return A::select(A::lt(x, A::set1(T(0))), neg_val, mag);
}
HP_EW_UNARY(PowScalar, pow_value<A>(x, p[0], p[1] != 0, p[2] != 0))

HP_EW_BINARY(Add, A::add(x, y))
HP_EW_BINARY(Sub, A::sub(x, y))
HP_EW_BINARY(Mul, A::mul(x, y))
HP_EW_BINARY(Div, A::div(x, y))
// A NaN on either side wins, as torch.maximum / torch.minimum.
HP_EW_BINARY(Maximum, A::select(A::isnan(x), x, A::max(x, y)))
HP_EW_BINARY(Minimum, A::select(A::isnan(x), x, A::min(x, y)))

// The backward ops g · h(x) of the long activations, h their derivative: h is a functor of its
// own so that the 16-bit kernels can tabulate it (ew_impl.h grad_table: the f32 h of every 16-bit
// x, then one f32 multiply per element, the same bits as computing h).
template <class H>
struct GradTimes {
  using Grad = H;
  template <class A>
  static typename A::V times(typename A::V h, typename A::V g) {
    return A::mul(g, h);
  }
  template <class A>
  static typename A::V apply(typename A::V x, typename A::V g, const float* p) {
    return times<A>(H::template apply<A>(x, p), g);
  }
};
// d silu = s (1 + x (1 - s)), s = sigmoid(x)
struct SiluGrad {
  template <class A>
  static typename A::V apply(typename A::V x, const float*) {
    auto s = Sigmoid::apply<A>(x, nullptr);
    return A::mul(s, A::add(C(1), A::mul(x, A::sub(C(1), s))));
  }
};
// d gelu = Φ(x) + x φ(x)
struct GeluGrad {
  template <class A>
  static typename A::V apply(typename A::V x, const float*) {
    auto cdf = A::norm_cdf(x);
    auto pdf = A::mul(C(0.39894228040143268), A::exp(A::mul(C(-0.5), A::mul(x, x))));
    return A::fma(x, pdf, cdf);
  }
};
// d/dx 0.5 x (1 + tanh u), u = k (x + c x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
// x is clamped to [-10, 10] first: beyond, t = ±1 exactly, the derivative is 1 or 0, and the
// unclamped x² would overflow to Inf and make (1 - t²)·du = 0·Inf = NaN for |x| > ~1.8e19.
struct GeluTanhGrad {
  template <class A>
  static typename A::V apply(typename A::V x_in, const float*) {
    using T = decltype(A::hsum(x_in));
    auto x = A::min(A::set1(T(10)), A::max(A::set1(T(-10)), x_in));  // operand order keeps NaN
    auto x2 = A::mul(x, x);
    auto u = A::mul(C(0.79788456080286536), A::fma(A::mul(C(0.044715), x), x2, x));
    auto t = A::tanh(u);
    auto du = A::mul(C(0.79788456080286536), A::fma(C(3 * 0.044715), x2, C(1)));
    auto left = A::mul(C(0.5), A::add(C(1), t));
    auto right = A::mul(A::mul(C(0.5), x), A::mul(A::sub(C(1), A::mul(t, t)), du));
    return A::add(left, right);
  }
};
using SiluBwd = GradTimes<SiluGrad>;
using GeluBwd = GradTimes<GeluGrad>;
using GeluTanhBwd = GradTimes<GeluTanhGrad>;
// from the output y: sigmoid' = y (1 - y), tanh' = 1 - y^2
HP_EW_BINARY(SigmoidBwd, A::mul(y, A::mul(x, A::sub(C(1), x))))
HP_EW_BINARY(TanhBwd, A::mul(y, A::sub(C(1), A::mul(x, x))))
HP_EW_BINARY(GtMask, A::select(A::gt(x, y), C(1), C(0)))
HP_EW_BINARY(EqMask, A::select(A::eq(x, y), C(1), C(0)))
HP_EW_BINARY(ReluBwd, A::select(A::gt(x, C(0)), y, C(0)))
HP_EW_BINARY(ClampBwd, A::select(A::lt(x, C(p[0])), C(0), A::select(A::gt(x, C(p[1])), C(0), y)))
// g * e * x^(e-1); e-1 is odd exactly when the integer e is even.
HP_EW_BINARY(PowScalarBwd, A::mul(y, A::mul(C(p[0]), pow_value<A>(x, p[0] - 1.0f, p[1] != 0,
                                                                  p[1] != 0 && p[2] == 0))))

#undef C
#undef HP_EW_UNARY
#undef HP_EW_BINARY

}  // namespace ew

// X(enum, functor, arity) for every op, in EwOp order.
#define HP_EW_OPS(X)                                                                             \
  X(neg, Neg, 1) X(abs, Abs, 1) X(exp, Exp, 1) X(log, Log, 1) X(sqrt, Sqrt, 1) X(rsqrt, Rsqrt, 1) \
  X(square, Square, 1) X(reciprocal, Reciprocal, 1) X(tanh, Tanh, 1) X(sigmoid, Sigmoid, 1)      \
  X(silu, Silu, 1) X(gelu, Gelu, 1) X(gelu_tanh, GeluTanh, 1) X(relu, Relu, 1)                   \
  X(affine, Affine, 1) X(clamp, Clamp, 1) X(pow_scalar, PowScalar, 1) X(add, Add, 2)              \
  X(sub, Sub, 2) X(mul, Mul, 2) X(div, Div, 2) X(maximum, Maximum, 2) X(minimum, Minimum, 2)      \
  X(silu_bwd, SiluBwd, 2) X(gelu_bwd, GeluBwd, 2) X(gelu_tanh_bwd, GeluTanhBwd, 2)                \
  X(sigmoid_bwd, SigmoidBwd, 2) X(tanh_bwd, TanhBwd, 2) X(relu_bwd, ReluBwd, 2)                   \
  X(clamp_bwd, ClampBwd, 2) X(pow_scalar_bwd, PowScalarBwd, 2)      \
  X(gt_mask, GtMask, 2) X(eq_mask, EqMask, 2)

}  // namespace hp::kernels
