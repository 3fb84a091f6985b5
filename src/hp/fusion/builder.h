// The tracing front-end of the fusion engine: functions of `Var` that record IR nodes.
//
// A fused region is an ordinary C++ function of Vars. Calling it on the Vars of a fresh Graph
// records one node per op (a push into a vector: tracing costs nanoseconds per op, so it is redone
// on every call and its hash checked against the cache). Semantics are those of the eager ops the
// nodes stand for: numpy broadcasting (errors name both shapes), dtype promotion as
// kernels::promote_types, a bf16 result rounded to bf16. A scalar literal takes the dtype of the
// Var it meets (rounded to it), as a 0-d tensor of that dtype would. Reductions run over the last
// dim and keep it ([..., n] -> [..., 1]).
#pragma once

#include "hp/fusion/ir.h"

namespace hp::fusion {

// A value of the traced graph: the graph and a node id. Cheap to copy.
class Var {
 public:
  Var() = default;
  Var(Graph* g, int32_t id) : g_(g), id_(id) {}
  Graph* graph() const { return g_; }
  int32_t id() const { return id_; }
  const Node& node() const { return g_->nodes[static_cast<size_t>(id_)]; }
  const Dims& dims() const { return node().shape; }
  Shape shape() const { return dims().shape(); }
  DType dtype() const { return node().dtype; }

 private:
  Graph* g_ = nullptr;
  int32_t id_ = -1;
};

// The input Var of argument `index` with the shape and dtype of `t`.
Var trace_input(Graph* g, int32_t index, const Shape& shape, DType dt);

// A literal of like's dtype (rounded to it), shape [].
Var literal(Var like, double v);

// Generic node makers (the named functions below are thin wrappers).
Var ew_unary(kernels::EwOp op, Var x, float p0 = 0, float p1 = 0, float p2 = 0);
Var ew_binary(kernels::EwOp op, Var a, Var b, float p0 = 0, float p1 = 0, float p2 = 0);
Var ew_binary(kernels::EwOp op, Var a, double s);  // a op s
Var ew_binary(kernels::EwOp op, double s, Var b);  // s op b

inline Var neg(Var x) {
  return ew_unary(kernels::EwOp::neg, x);
}
inline Var abs(Var x) {
  return ew_unary(kernels::EwOp::abs, x);
}
inline Var exp(Var x) {
  return ew_unary(kernels::EwOp::exp, x);
}
inline Var log(Var x) {
  return ew_unary(kernels::EwOp::log, x);
}
inline Var sqrt(Var x) {
  return ew_unary(kernels::EwOp::sqrt, x);
}
inline Var rsqrt(Var x) {
  return ew_unary(kernels::EwOp::rsqrt, x);
}
inline Var square(Var x) {
  return ew_unary(kernels::EwOp::square, x);
}
inline Var reciprocal(Var x) {
  return ew_unary(kernels::EwOp::reciprocal, x);
}
inline Var tanh(Var x) {
  return ew_unary(kernels::EwOp::tanh, x);
}
inline Var sigmoid(Var x) {
  return ew_unary(kernels::EwOp::sigmoid, x);
}
inline Var silu(Var x) {
  return ew_unary(kernels::EwOp::silu, x);
}
inline Var gelu(Var x) {
  return ew_unary(kernels::EwOp::gelu, x);
}
inline Var gelu_tanh(Var x) {
  return ew_unary(kernels::EwOp::gelu_tanh, x);
}
inline Var relu(Var x) {
  return ew_unary(kernels::EwOp::relu, x);
}
Var clamp(Var x, double lo, double hi);
Var pow(Var x, double e);  // the eager hp::pow functor (integer / odd-integer flags set here)

inline Var operator+(Var a, Var b) {
  return ew_binary(kernels::EwOp::add, a, b);
}
inline Var operator-(Var a, Var b) {
  return ew_binary(kernels::EwOp::sub, a, b);
}
inline Var operator*(Var a, Var b) {
  return ew_binary(kernels::EwOp::mul, a, b);
}
inline Var operator/(Var a, Var b) {
  return ew_binary(kernels::EwOp::div, a, b);
}
inline Var operator-(Var a) {
  return neg(a);
}
inline Var operator+(Var a, double s) {
  return ew_binary(kernels::EwOp::add, a, s);
}
inline Var operator-(Var a, double s) {
  return ew_binary(kernels::EwOp::sub, a, s);
}
inline Var operator*(Var a, double s) {
  return ew_binary(kernels::EwOp::mul, a, s);
}
inline Var operator/(Var a, double s) {
  return ew_binary(kernels::EwOp::div, a, s);
}
inline Var operator+(double s, Var b) {
  return ew_binary(kernels::EwOp::add, s, b);
}
inline Var operator-(double s, Var b) {
  return ew_binary(kernels::EwOp::sub, s, b);
}
inline Var operator*(double s, Var b) {
  return ew_binary(kernels::EwOp::mul, s, b);
}
inline Var operator/(double s, Var b) {
  return ew_binary(kernels::EwOp::div, s, b);
}
inline Var maximum(Var a, Var b) {
  return ew_binary(kernels::EwOp::maximum, a, b);
}
inline Var minimum(Var a, Var b) {
  return ew_binary(kernels::EwOp::minimum, a, b);
}
// Masks: 1 where true, 0 elsewhere, in the promoted dtype.
inline Var gt(Var a, Var b) {
  return ew_binary(kernels::EwOp::gt_mask, a, b);
}
inline Var lt(Var a, Var b) {
  return ew_binary(kernels::EwOp::gt_mask, b, a);
}
inline Var eq(Var a, Var b) {
  return ew_binary(kernels::EwOp::eq_mask, a, b);
}

// cond != 0 ? a : b (NaN counts as true), broadcasting all three; dtype = promote(a, b).
Var where(Var cond, Var a, Var b);
// f32 <-> bf16; casting to the same dtype returns x.
Var cast(Var x, DType dt);

// Over the last dim, keepdim: [..., n] -> [..., 1].
Var sum(Var x);
Var amax(Var x);  // NaN if the row has one
Var mean(Var x);  // sum · (1/n), as hp::mean
// Over every dim but the last, keepdim ([..., n] -> [1, …, 1, n]): the gradient of a row-broadcast
// weight. Fused as per-block partial sums added in block order (thread-count independent, but a
// different association than the eager reduction: equal within rounding, not bitwise). Only as a
// region output; a region that reads it further runs eagerly.
Var sum_rows(Var x);

// An op the engine does not know: fn runs eagerly on the operands' tensors. Its result is taken to
// have the broadcast shape of the operands and the first operand's dtype. A graph holding one is
// not fused: the whole region runs eagerly (one log line per shape signature).
Var opaque(const std::string& name, std::function<Tensor(const std::vector<Tensor>&)> fn,
           const std::vector<Var>& operands);

}  // namespace hp::fusion
