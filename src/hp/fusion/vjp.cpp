// The backward of a fused region as another IR graph (docs/FUSION.md "Backward"): the forward
// nodes replayed (so elementwise values are recomputed inside the backward's tiles instead of being
// saved), then the adjoint of every node in reverse order, written with the builder. The rules are
// those of the eager ops' backward (hp/ops/elementwise.cpp, reduce.cpp), with the same *_bwd
// functors.
#include "hp/fusion/vjp.h"

#include "hp/fusion/builder.h"

namespace hp::fusion {

using kernels::EwOp;

namespace {

// Adjoints are accumulated in their broadcast shape and reduced to the node's shape only where it
// matters: over the last dim for a per-row node ([..., 1]), whose value a reduction's adjoint
// broadcasts back. A leading-dim broadcast (a row [N] used by [M, N] values) stays unreduced until
// the input, where the caller sums it: elementwise adjoints are linear in g, so the sum commutes.
struct Adjoints {
  const Graph* g = nullptr;
  std::vector<Var> adj;
  std::vector<uint8_t> needs;  // the node depends on an input that needs a gradient
  void add(int32_t i, Var v) {
    if (!needs[static_cast<size_t>(i)]) return;
    const Dims& shape = g->nodes[static_cast<size_t>(i)].shape;
    if (shape.n > 0 && shape.last() == 1 && v.dims().last() != 1) v = sum(v);
    Var& a = adj[static_cast<size_t>(i)];
    a = a.graph() ? a + v : v;
  }
};

// The adjoint contributions of elementwise node n (value y, operands x, z) for output gradient g.
bool ew_rule(const Node& n, Var y, Var x, Var z, Var g, Adjoints& A, std::string* why) {
  const auto op = static_cast<EwOp>(n.op);
  const int32_t ix = n.in[0], iz = n.in[1];
  switch (op) {
    case EwOp::neg:
      A.add(ix, -g);
      return true;
    case EwOp::abs:
      A.add(ix, g * (gt(x, literal(x, 0)) - gt(literal(x, 0), x)));
      return true;
    case EwOp::exp:
      A.add(ix, g * y);
      return true;
    case EwOp::log:
      A.add(ix, g / x);
      return true;
    case EwOp::sqrt:
      A.add(ix, (g * 0.5) / y);
      return true;
    case EwOp::rsqrt:
      A.add(ix, g * (y * y * y * -0.5));
      return true;
    case EwOp::square:
      A.add(ix, (g * x) * 2.0);
      return true;
    case EwOp::reciprocal:
      A.add(ix, -(g * (y * y)));
      return true;
    case EwOp::tanh:
      A.add(ix, ew_binary(EwOp::tanh_bwd, y, g));
      return true;
    case EwOp::sigmoid:
      A.add(ix, ew_binary(EwOp::sigmoid_bwd, y, g));
      return true;
    case EwOp::silu:
      A.add(ix, ew_binary(EwOp::silu_bwd, x, g));
      return true;
    case EwOp::gelu:
      A.add(ix, ew_binary(EwOp::gelu_bwd, x, g));
      return true;
    case EwOp::gelu_tanh:
      A.add(ix, ew_binary(EwOp::gelu_tanh_bwd, x, g));
      return true;
    case EwOp::relu:
      A.add(ix, ew_binary(EwOp::relu_bwd, x, g));
      return true;
    case EwOp::affine:
      A.add(ix, g * static_cast<double>(n.p[0]));
      return true;
    case EwOp::clamp:
      A.add(ix, ew_binary(EwOp::clamp_bwd, x, g, n.p[0], n.p[1], n.p[2]));
      return true;
    case EwOp::pow_scalar:
      A.add(ix, ew_binary(EwOp::pow_scalar_bwd, x, g, n.p[0], n.p[1], n.p[2]));
      return true;
    case EwOp::add:
      A.add(ix, g), A.add(iz, g);
      return true;
    case EwOp::sub:
      A.add(ix, g), A.add(iz, -g);
      return true;
    case EwOp::mul:
      A.add(ix, g * z), A.add(iz, g * x);
      return true;
    case EwOp::div:
      A.add(ix, g / z), A.add(iz, -((g * (x / z)) / z));
      return true;
    case EwOp::maximum:
    case EwOp::minimum: {
      // As torch: the winner takes g, ties split it evenly.
      Var share = (op == EwOp::maximum ? gt(x, z) : gt(z, x)) + eq(x, z) * 0.5;
      A.add(ix, g * share), A.add(iz, g * (1.0 - share));
      return true;
    }
    case EwOp::gt_mask:
    case EwOp::eq_mask:
      return true;  // piecewise constant
    default:
      break;
  }
  *why = std::string("no backward for op '") + kernels::ew_name(op) + "'";
  return false;
}

}  // namespace

bool build_vjp(const Graph& g, const std::vector<uint8_t>& need, Graph* out,
               std::vector<int>* grad_of, std::string* why) {
  Graph& b = *out;
  b.clear();
  const size_t n = g.nodes.size();
  Adjoints A;
  A.g = &g;
  A.adj.assign(n, Var());
  A.needs.assign(n, 0);
  std::vector<Var> fv(n);
  // Replay the forward (inputs keep their argument numbers).
  for (size_t i = 0; i < n; ++i) {
    Node nd = g.nodes[i];
    if (nd.kind == NodeKind::input) A.needs[i] = need[static_cast<size_t>(nd.index)];
    for (int k = 0; k < node_arity(nd); ++k) {
      A.needs[i] |= A.needs[static_cast<size_t>(nd.in[k])];
      nd.in[k] = fv[static_cast<size_t>(nd.in[k])].id();
    }
    if (nd.kind == NodeKind::opaque) {
      if (A.needs[i]) {
        *why = "no backward for op '" + node_name(g, g.nodes[i]) + "'";
        return false;
      }
      nd.index = static_cast<int32_t>(b.opaque.size());
      b.opaque.push_back(g.opaque[static_cast<size_t>(g.nodes[i].index)]);
    }
    fv[i] = Var(&b, b.add(nd));
  }
  b.num_inputs = g.num_inputs + static_cast<int32_t>(g.outputs.size());
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Node& o = g.nodes[static_cast<size_t>(g.outputs[k])];
    A.add(g.outputs[k],
          trace_input(&b, g.num_inputs + static_cast<int32_t>(k), o.shape.shape(), o.dtype));
  }
  std::vector<Var> grad_in(static_cast<size_t>(g.num_inputs));
  for (size_t i = n; i-- > 0;) {
    const Var gi = A.adj[i];
    if (!gi.graph()) continue;
    const Node& nd = g.nodes[i];
    auto in = [&](int k) { return fv[static_cast<size_t>(nd.in[k])]; };
    switch (nd.kind) {
      case NodeKind::input:
        grad_in[static_cast<size_t>(nd.index)] = gi;
        break;
      case NodeKind::constant:
        break;
      case NodeKind::cast:
        A.add(nd.in[0], cast(gi, in(0).dtype()));
        break;
      case NodeKind::select:
        A.add(nd.in[1], where(in(0), gi, literal(gi, 0)));
        A.add(nd.in[2], where(in(0), literal(gi, 0), gi));
        break;
      case NodeKind::reduce:
        if (static_cast<RedOp>(nd.op) == RedOp::sum) {
          A.add(nd.in[0], gi);  // broadcast back over the row
        } else {
          // As hp::amax: tied maxima share the gradient evenly.
          Var mask = eq(in(0), fv[i]);
          A.add(nd.in[0], (mask * gi) / sum(mask));
        }
        break;
      case NodeKind::ew:
        if (!ew_rule(nd, fv[i], in(0), node_arity(nd) == 2 ? in(1) : Var(), gi, A, why))
          return false;
        break;
      case NodeKind::opaque:
        break;  // needs no gradient (checked above)
      case NodeKind::row_sum:
        A.add(nd.in[0], gi);  // broadcast back over the rows
        break;
    }
  }
  // A row-broadcast input ([N], [1, N], …) used by [M, N] values: its gradient is their sum over
  // the rows, fused as sum_rows (the caller's reduction to the input shape is then a reshape).
  std::vector<Dims> in_dims(static_cast<size_t>(g.num_inputs));
  for (const Node& nd : g.nodes)
    if (nd.kind == NodeKind::input) in_dims[static_cast<size_t>(nd.index)] = nd.shape;
  for (size_t k = 0; k < grad_in.size(); ++k) {
    if (!grad_in[k].graph()) continue;
    const Dims& d = in_dims[k];
    const Dims& gd = grad_in[k].dims();
    if (d.n >= 1 && d.numel() == d.last() && gd.last() == d.last() && gd.numel() > gd.last())
      grad_in[k] = sum_rows(grad_in[k]);
  }
  grad_of->assign(static_cast<size_t>(g.num_inputs), -1);
  for (size_t k = 0; k < grad_in.size(); ++k) {
    if (!need[k] || !grad_in[k].graph()) continue;
    (*grad_of)[k] = static_cast<int>(b.outputs.size());
    b.outputs.push_back(grad_in[k].id());
  }
  if (b.outputs.empty()) {
    *why = "no input gradient depends on the outputs";
    return false;
  }
  return true;
}

}  // namespace hp::fusion
