#include "hp/fusion/builder.h"

#include <cmath>

#include "hp/kernels/cpu/elementwise.h"

namespace hp::fusion {

using kernels::EwOp;

namespace {

Graph* graph_of(std::initializer_list<Var> vs, const char* op) {
  Graph* g = nullptr;
  for (const Var& v : vs) {
    if (!v.graph()) HP_THROW(ValueError, "fusion", op, ": operand is an unset Var");
    if (g && v.graph() != g) HP_THROW(ValueError, "fusion", op, ": operands from different traces");
    g = v.graph();
  }
  return g;
}

// op: a C string (no std::string built per traced node: tracing runs on every call).
Dims bcast(const Dims& a, const Dims& b, const char* op) {
  Dims r;
  if (!broadcast_dims(a, b, &r))
    HP_THROW(ValueError, "fusion", op, ": shapes ", dims_str(a), " and ", dims_str(b),
             " cannot be broadcast");
  return r;
}

// The value as stored in dtype dt (constants are rounded once, at trace time).
float round_to(double v, DType dt) {
  const float f = static_cast<float>(v);
  return dt == DType::bf16 ? bf16_to_f32(f32_to_bf16(f)) : f;
}

Var constant(Graph* g, double v, DType dt) {
  Node n;
  n.kind = NodeKind::constant;
  n.dtype = dt;
  n.p[0] = round_to(v, dt);
  return Var(g, g->add(n));
}

}  // namespace

Var trace_input(Graph* g, int32_t index, const Shape& shape, DType dt) {
  Node n;
  n.kind = NodeKind::input;
  n.index = index;
  n.dtype = dt;
  n.shape = Dims::of(shape, "input");
  g->num_inputs = std::max(g->num_inputs, index + 1);
  return Var(g, g->add(n));
}

Var ew_unary(EwOp op, Var x, float p0, float p1, float p2) {
  Graph* g = graph_of({x}, kernels::ew_name(op));
  HP_CHECK(kernels::ew_arity(op) == 1, kernels::ew_name(op));
  Node n;
  n.kind = NodeKind::ew;
  n.op = static_cast<uint8_t>(op);
  n.dtype = x.dtype();
  n.in[0] = x.id();
  n.p[0] = p0, n.p[1] = p1, n.p[2] = p2;
  n.shape = x.dims();
  return Var(g, g->add(n));
}

Var literal(Var like, double v) {
  return constant(graph_of({like}, "literal"), v, like.dtype());
}

Var ew_binary(EwOp op, Var a, Var b, float p0, float p1, float p2) {
  Graph* g = graph_of({a, b}, kernels::ew_name(op));
  HP_CHECK(kernels::ew_arity(op) == 2, kernels::ew_name(op));
  Node n;
  n.kind = NodeKind::ew;
  n.op = static_cast<uint8_t>(op);
  n.dtype = kernels::promote_types(a.dtype(), b.dtype());
  n.in[0] = a.id(), n.in[1] = b.id();
  n.p[0] = p0, n.p[1] = p1, n.p[2] = p2;
  n.shape = bcast(a.dims(), b.dims(), kernels::ew_name(op));
  return Var(g, g->add(n));
}

Var ew_binary(EwOp op, Var a, double s) {
  return ew_binary(op, a, constant(graph_of({a}, kernels::ew_name(op)), s, a.dtype()));
}

Var ew_binary(EwOp op, double s, Var b) {
  return ew_binary(op, constant(graph_of({b}, kernels::ew_name(op)), s, b.dtype()), b);
}

Var clamp(Var x, double lo, double hi) {
  if (lo > hi) HP_THROW(ValueError, "fusion", "clamp: lo ", lo, " > hi ", hi);
  return ew_unary(EwOp::clamp, x, static_cast<float>(lo), static_cast<float>(hi));
}

Var pow(Var x, double e) {
  // The flags hp::pow sets, so both paths run the same functor with the same parameters.
  const bool is_int = std::nearbyint(e) == e;
  const bool is_odd = is_int && std::fmod(std::fabs(e), 2.0) == 1.0;
  return ew_unary(EwOp::pow_scalar, x, static_cast<float>(e), is_int ? 1.0f : 0.0f,
                  is_odd ? 1.0f : 0.0f);
}

Var where(Var cond, Var a, Var b) {
  Graph* g = graph_of({cond, a, b}, "where");
  Node n;
  n.kind = NodeKind::select;
  n.dtype = kernels::promote_types(a.dtype(), b.dtype());
  n.in[0] = cond.id(), n.in[1] = a.id(), n.in[2] = b.id();
  n.shape = bcast(bcast(cond.dims(), a.dims(), "where"), b.dims(), "where");
  return Var(g, g->add(n));
}

Var cast(Var x, DType dt) {
  Graph* g = graph_of({x}, "cast");
  if (x.dtype() == dt) return x;
  Node n;
  n.kind = NodeKind::cast;
  n.dtype = dt;
  n.in[0] = x.id();
  n.shape = x.dims();
  return Var(g, g->add(n));
}

namespace {

Var reduce(RedOp op, Var x, const char* name) {
  Graph* g = graph_of({x}, name);
  if (x.dims().n == 0)
    HP_THROW(ValueError, "fusion", name, ": needs at least 1 dim, got a 0-d Var");
  Node n;
  n.kind = NodeKind::reduce;
  n.op = static_cast<uint8_t>(op);
  n.dtype = x.dtype();
  n.in[0] = x.id();
  n.shape = x.dims();
  n.shape.d[n.shape.n - 1] = 1;
  return Var(g, g->add(n));
}

}  // namespace

Var sum(Var x) {
  return reduce(RedOp::sum, x, "sum");
}
Var amax(Var x) {
  if (x.dims().n > 0 && x.dims().last() == 0)
    HP_THROW(ValueError, "fusion", "amax: empty last dim in ", dims_str(x.dims()));
  return reduce(RedOp::max, x, "amax");
}

Var mean(Var x) {
  const Var s = sum(x);
  // hp::mean = mul(sum, 1/n), whose kernel is affine(1/n, 0): the same functor and parameters.
  return ew_unary(EwOp::affine, s, static_cast<float>(1.0 / static_cast<double>(x.dims().last())),
                  0.0f);
}

Var sum_rows(Var x) {
  Graph* g = graph_of({x}, "sum_rows");
  Node n;
  n.kind = NodeKind::row_sum;
  n.dtype = x.dtype();
  n.in[0] = x.id();
  n.shape = x.dims();
  for (int k = 0; k + 1 < n.shape.n; ++k) n.shape.d[k] = 1;
  return Var(g, g->add(n));
}

Var opaque(const std::string& name, std::function<Tensor(const std::vector<Tensor>&)> fn,
           const std::vector<Var>& operands) {
  if (operands.empty() || operands.size() > 3)
    HP_THROW(ValueError, "fusion", "opaque '", name, "': takes 1 to 3 operands, got ",
             operands.size());
  Graph* g = nullptr;
  for (const Var& v : operands) g = graph_of({v}, name.c_str());
  for (const Var& v : operands)
    if (v.graph() != g) HP_THROW(ValueError, "fusion", name, ": operands from different traces");
  Node n;
  n.kind = NodeKind::opaque;
  n.dtype = operands[0].dtype();
  n.shape = operands[0].dims();
  for (size_t i = 0; i < operands.size(); ++i) {
    n.in[i] = operands[i].id();
    n.shape = bcast(n.shape, operands[i].dims(), name.c_str());
  }
  n.index = static_cast<int32_t>(g->opaque.size());
  g->opaque.push_back({name, std::move(fn)});
  return Var(g, g->add(n));
}

}  // namespace hp::fusion
