// Algebraic canonicalization (simplify.h): composed activations -> their functors.
//
// One forward sweep over the nodes (ids are a topological order): a node at the root of a pattern
// is replaced in place by the functor node, so a later pattern sees the rewritten node (a sigmoid
// built from primitives and then multiplied by its argument becomes silu). The pattern's inner
// nodes are then dead and dropped with every other dead node.
#include "hp/fusion/simplify.h"

namespace hp::fusion {

namespace {

using kernels::EwOp;

// f32 values of the constants the GELU-tanh functor uses (ew_ops.h GeluTanh).
constexpr float kGeluK = static_cast<float>(0.79788456080286536);
constexpr float kGeluC = static_cast<float>(0.044715);

// The leaves of a product tree: the product of its constants and its other factors (x·x counted
// twice, square(x) and pow(x, 2) too, pow(x, 3) three times).
struct Product {
  static constexpr int kMax = 4;
  double c = 1;
  int32_t leaf[kMax] = {};
  int n = 0;
  bool ok = true;
  void push(int32_t i) {
    if (n == kMax)
      ok = false;
    else
      leaf[n++] = i;
  }
};

struct Rewriter {
  const Graph* g;
  std::vector<int32_t> uses;  // operand references by live nodes, plus output references

  const Node& nd(int32_t i) const { return g->nodes[static_cast<size_t>(i)]; }
  // An f32 elementwise node of op `op`.
  bool is(int32_t i, EwOp op) const {
    const Node& n = nd(i);
    return n.kind == NodeKind::ew && n.op == static_cast<uint8_t>(op) && n.dtype == DType::f32;
  }
  // A node inside a pattern: replacing the root drops it, so it must have no other reader.
  bool inner(int32_t i, EwOp op) const { return is(i, op) && uses[static_cast<size_t>(i)] == 1; }
  bool scalar_const(int32_t i) const {
    const Node& n = nd(i);
    return n.kind == NodeKind::constant && n.dtype == DType::f32 && n.shape.numel() == 1;
  }
  bool is_one(int32_t i) const { return scalar_const(i) && nd(i).p[0] == 1.0f; }

  // a = 1 + exp(-y) (either order), every node used only here: y, else -1.
  int32_t one_plus_exp_neg(int32_t a) const {
    if (!inner(a, EwOp::add)) return -1;
    for (int k = 0; k < 2; ++k) {
      const int32_t e = nd(a).in[1 - k];
      if (!is_one(nd(a).in[k]) || !inner(e, EwOp::exp)) continue;
      const int32_t m = nd(e).in[0];
      if (inner(m, EwOp::neg)) return nd(m).in[0];
    }
    return -1;
  }

  void flatten(int32_t i, bool root, Product& p) const {
    if (!p.ok) return;
    if (scalar_const(i)) {
      p.c *= nd(i).p[0];
      return;
    }
    if (root ? is(i, EwOp::mul) : inner(i, EwOp::mul)) {
      flatten(nd(i).in[0], false, p);
      flatten(nd(i).in[1], false, p);
      return;
    }
    if (inner(i, EwOp::square)) {
      p.push(nd(i).in[0]);
      p.push(nd(i).in[0]);
      return;
    }
    // pow(x, 2 or 3) (HF's NewGELU writes torch.pow(x, 3.0)): x^e through exp and log, replaced by
    // the functor's products — within the same bound (simplify_test.cpp sweeps it).
    if (inner(i, EwOp::pow_scalar) && (nd(i).p[0] == 2.0f || nd(i).p[0] == 3.0f)) {
      for (int k = 0; k < static_cast<int>(nd(i).p[0]); ++k) p.push(nd(i).in[0]);
      return;
    }
    p.push(i);
  }

  // u = k·(x + c·x·x·x), every node used only here.
  bool gelu_inner(int32_t u, int32_t x) const {
    Product pu;
    if (!inner(u, EwOp::mul)) return false;
    flatten(u, true, pu);
    if (!pu.ok || pu.n != 1 || pu.c != static_cast<double>(kGeluK)) return false;
    const int32_t q = pu.leaf[0];
    if (!inner(q, EwOp::add)) return false;
    for (int k = 0; k < 2; ++k) {
      const int32_t cube = nd(q).in[1 - k];
      if (nd(q).in[k] != x || !inner(cube, EwOp::mul)) continue;
      Product pc;
      flatten(cube, true, pc);
      if (pc.ok && pc.n == 3 && pc.leaf[0] == x && pc.leaf[1] == x && pc.leaf[2] == x &&
          pc.c == static_cast<double>(kGeluC))
        return true;
    }
    return false;
  }

  // r = 0.5·x·(1 + tanh(u)) in any association: x, else -1.
  int32_t gelu_tanh_at(int32_t r) const {
    Product p;
    flatten(r, true, p);
    if (!p.ok || p.n != 2 || p.c != 0.5) return -1;
    for (int k = 0; k < 2; ++k) {
      const int32_t x = p.leaf[k], t = p.leaf[1 - k];
      if (!inner(t, EwOp::add)) continue;
      for (int j = 0; j < 2; ++j) {
        const int32_t th = nd(t).in[1 - j];
        if (is_one(nd(t).in[j]) && inner(th, EwOp::tanh) && gelu_inner(nd(th).in[0], x)) return x;
      }
    }
    return -1;
  }

  // The functor that node i computes, applied to *y; false when i is no pattern's root.
  bool match(int32_t i, EwOp* op, int32_t* y) const {
    const Node& n = nd(i);
    if (n.kind != NodeKind::ew || n.dtype != DType::f32) return false;
    switch (static_cast<EwOp>(n.op)) {
      case EwOp::reciprocal:
        *op = EwOp::sigmoid, *y = one_plus_exp_neg(n.in[0]);
        return *y >= 0;
      case EwOp::div: {
        const int32_t s = one_plus_exp_neg(n.in[1]);
        if (s < 0) return false;
        if (is_one(n.in[0])) {
          *op = EwOp::sigmoid, *y = s;
          return true;
        }
        *op = EwOp::silu, *y = s;
        return n.in[0] == s;
      }
      case EwOp::mul:
        for (int k = 0; k < 2; ++k) {
          const int32_t s = n.in[1 - k];
          if (inner(s, EwOp::sigmoid) && nd(s).in[0] == n.in[k]) {
            *op = EwOp::silu, *y = n.in[k];
            return true;
          }
        }
        *op = EwOp::gelu_tanh, *y = gelu_tanh_at(i);
        return *y >= 0;
      default:
        return false;
    }
  }
};

// Marks the nodes reachable from the outputs.
std::vector<uint8_t> live_nodes(const Graph& g) {
  std::vector<uint8_t> live(g.nodes.size(), 0);
  for (int32_t o : g.outputs) live[static_cast<size_t>(o)] = 1;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    const Node& n = g.nodes[i];
    for (int k = 0; k < node_arity(n); ++k) live[static_cast<size_t>(n.in[k])] = 1;
  }
  return live;
}

}  // namespace

int simplify(const Graph& in, Graph* out) {
  // Cheap exit (this runs on every cache miss): no node a pattern can end in.
  bool any = false;
  for (const Node& n : in.nodes)
    any |= n.kind == NodeKind::ew && n.dtype == DType::f32 &&
           (n.op == static_cast<uint8_t>(EwOp::div) || n.op == static_cast<uint8_t>(EwOp::mul) ||
            n.op == static_cast<uint8_t>(EwOp::reciprocal));
  if (!any) return 0;
  Rewriter rw{&in, std::vector<int32_t>(in.nodes.size(), 0)};
  std::vector<uint8_t> live = live_nodes(in);
  for (int32_t o : in.outputs) ++rw.uses[static_cast<size_t>(o)];
  for (size_t i = 0; i < in.nodes.size(); ++i)
    if (live[i])
      for (int k = 0; k < node_arity(in.nodes[i]); ++k)
        ++rw.uses[static_cast<size_t>(in.nodes[i].in[k])];
  // Rewrites change later matches (a sigmoid built from primitives, then · its argument), so they
  // are made in place on a copy, taken only once the traced graph has a match.
  auto first_match = [&]() -> size_t {
    for (size_t i = 0; i < in.nodes.size(); ++i) {
      EwOp op{};
      int32_t y = -1;
      if (live[i] && rw.match(static_cast<int32_t>(i), &op, &y)) return i;
    }
    return in.nodes.size();
  };
  const size_t first = first_match();
  if (first == in.nodes.size()) return 0;
  Graph g = in;
  rw.g = &g;
  int rewrites = 0;
  for (size_t i = first; i < g.nodes.size(); ++i) {
    EwOp op{};
    int32_t y = -1;
    if (!live[i] || !rw.match(static_cast<int32_t>(i), &op, &y)) continue;
    Node& n = g.nodes[i];
    if (!(g.nodes[static_cast<size_t>(y)].shape == n.shape)) continue;
    Node f;
    f.kind = NodeKind::ew;
    f.op = static_cast<uint8_t>(op);
    f.dtype = DType::f32;
    f.in[0] = y;
    f.shape = n.shape;
    n = f;
    ++rewrites;
  }
  if (rewrites == 0) return 0;
  // Drop the dead nodes (the patterns' insides); every input node stays (argument numbers).
  live = live_nodes(g);
  std::vector<int32_t> id(g.nodes.size(), -1);
  out->clear();
  out->num_inputs = g.num_inputs;
  out->opaque = g.opaque;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node n = g.nodes[i];
    if (!live[i] && n.kind != NodeKind::input) continue;
    for (int k = 0; k < node_arity(n); ++k) n.in[k] = id[static_cast<size_t>(n.in[k])];
    id[i] = out->add(n);
  }
  for (int32_t o : g.outputs) out->outputs.push_back(id[static_cast<size_t>(o)]);
  return rewrites;
}

}  // namespace hp::fusion
