// Compile, part 1: what each node is (docs/FUSION.md "Compile"). Liveness from the outputs, the
// domain [M, N], the class of every value (scalar / col / row / full), compile-time folding of
// scalar values, aliases (a widening cast is its operand), and the stage of every node: a
// reduction closes a stage, its consumers join the next.
#include "hp/fusion/classify.h"

#include <algorithm>
#include <utility>

#include "hp/fusion/routines.h"

namespace hp::fusion {

namespace {

bool is_value_dtype(DType dt) {
  return dt == DType::f32 || dt == DType::bf16;
}

// One classify() call, its phases in the order classify() runs them; each that can fail returns
// false with *why set, leaving the Analysis filled as far as it got.
class Classifier {
 public:
  Classifier(const Graph& g, Analysis* a, std::string* why) : graph_(g), analysis_(a), why_(why) {}

  // live: every node an output depends on.
  void mark_live() {
    const Graph& g = graph_;
    Analysis* a = analysis_;
    const size_t n = g.nodes.size();
    a->live.assign(n, 0);
    for (int32_t o : g.outputs) a->live[static_cast<size_t>(o)] = 1;
    for (size_t i = n; i-- > 0;) {
      if (!a->live[i]) continue;
      const Node& nd = g.nodes[i];
      for (int k = 0; k < node_arity(nd); ++k) a->live[static_cast<size_t>(nd.in[k])] = 1;
    }
  }

  // The domain (every live value's shape broadcast together) as [M, N]; false on what the engine
  // does not fuse: the whole region then runs eagerly.
  bool find_domain() {
    const Graph& g = graph_;
    Analysis* a = analysis_;
    Dims dom;
    bool have_dom = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!a->live[i]) continue;
      const Node& nd = g.nodes[i];
      if (nd.kind == NodeKind::opaque) return fail("op '" + node_name(g, nd) + "' is not fusable");
      if (!is_value_dtype(nd.dtype))
        return fail("node " + std::to_string(i) + " (" + node_name(g, nd) + ") has dtype " +
                    std::string(dtype_name(nd.dtype)) + " (fused: f32, bf16)");
      if (!have_dom) {
        dom = nd.shape, have_dom = true;
      } else if (!broadcast_dims(dom, nd.shape, &dom)) {
        return fail("values of shapes " + dims_str(dom) + " and " + dims_str(nd.shape) +
                    " in one region");
      }
    }
    a->domain = dom;
    a->N = dom.last();
    if (dom.numel() == 0) return fail("empty domain " + dims_str(dom));
    a->M = dom.numel() / a->N;
    return true;
  }

  // Class, uniformity, alias, folded value and level of every node, in graph order (operands
  // first).
  bool classify_nodes() {
    Analysis* a = analysis_;
    const size_t n = graph_.nodes.size();
    a->cls.assign(n, Cls::full);
    a->uniform.assign(n, 0);
    a->rep.resize(n);
    a->value.assign(n, 0.0f);
    a->level.assign(n, 0);
    a->has_reduce = false;
    ew_ = &kernels::kernel_table<kernels::EwTable>();
    for (size_t i = 0; i < n; ++i) {
      a->rep[i] = static_cast<int32_t>(i);
      if (a->live[i] && !classify_node(i)) return false;
    }
    return true;
  }

  // Outputs are [M, N] or [M, 1] values (or sum_rows' [N]), never broadcast ones.
  bool check_outputs() const {
    const Graph& g = graph_;
    const Analysis* a = analysis_;
    for (int32_t o : g.outputs) {
      const Cls c = a->cls[static_cast<size_t>(o)];
      const bool row_sum = g.nodes[static_cast<size_t>(o)].kind == NodeKind::row_sum;
      if (c == Cls::scalar || (c == Cls::row && !row_sum) ||
          (c == Cls::col && a->uniform[static_cast<size_t>(o)]))
        return fail("output of shape " + dims_str(g.nodes[static_cast<size_t>(o)].shape) +
                    " is broadcast (neither [M, N] nor [M, 1])");
    }
    return true;
  }

  // flat and num_stages. A program without reductions or per-row / per-column values is one flat
  // row.
  void find_stages() {
    Analysis* a = analysis_;
    const size_t n = graph_.nodes.size();
    a->flat = !a->has_reduce;
    for (size_t i = 0; a->flat && i < n; ++i)
      if (a->live[i] && !a->uniform[i] && (a->cls[i] == Cls::row || a->cls[i] == Cls::col))
        a->flat = false;
    if (a->flat) a->N = a->domain.numel(), a->M = 1;
    a->num_stages = 0;
    for (size_t i = 0; i < n; ++i)
      if (a->live[i] && (a->cls[i] == Cls::full || a->cls[i] == Cls::row))
        a->num_stages = std::max(a->num_stages, a->level[i] + 1);
  }

 private:
  bool fail(std::string what) const {
    *why_ = std::move(what);
    return false;
  }

  bool fail_shape(size_t i) const {
    const Node& nd = graph_.nodes[i];
    return fail(node_name(graph_, nd) + " of shape " + dims_str(nd.shape) + " broadcasts against " +
                dims_str(analysis_->domain) + " along a middle dim");
  }

  // Live node i, its operands classified.
  bool classify_node(size_t i) {
    const Graph& g = graph_;
    Analysis* a = analysis_;
    const Node& nd = g.nodes[i];
    for (int k = 0; k < node_arity(nd); ++k)
      if (g.nodes[static_cast<size_t>(nd.in[k])].kind == NodeKind::row_sum)
        return fail("sum_rows feeds " + node_name(g, nd) + " (it is fused only as an output)");
    switch (nd.kind) {
      case NodeKind::input:
        return classify_input(i);
      case NodeKind::constant:
        a->cls[i] = Cls::scalar, a->uniform[i] = 1, a->value[i] = nd.p[0];
        return true;
      case NodeKind::row_sum: {
        const size_t x = static_cast<size_t>(nd.in[0]);
        if (a->cls[x] != Cls::full)
          return fail("sum_rows of a broadcast value of shape " + dims_str(g.nodes[x].shape));
        a->cls[i] = Cls::row, a->has_reduce = true;
        a->level[i] = a->level[x];
        return true;
      }
      case NodeKind::reduce: {
        const size_t x = static_cast<size_t>(nd.in[0]);
        if (a->cls[x] != Cls::full)
          return fail("reduction of a broadcast value of shape " + dims_str(g.nodes[x].shape));
        a->cls[i] = Cls::col, a->has_reduce = true;
        a->level[i] = a->level[x] + 1;
        return true;
      }
      default:
        return classify_join(i);
    }
  }

  // An input's class from its shape against the domain [M, N].
  bool classify_input(size_t i) {
    Analysis* a = analysis_;
    const Dims& dom = a->domain;
    const Dims& sh = graph_.nodes[i].shape;
    bool col_match = sh.last() == 1 && sh.numel() == a->M;
    for (int k = 0; col_match && k + 1 < sh.n; ++k) col_match = sh.d[k] == dom.d[dom.n - sh.n + k];
    if (sh.numel() == dom.numel())
      a->cls[i] = Cls::full;
    else if (sh.last() == a->N && sh.numel() == a->N)
      a->cls[i] = Cls::row;
    else if (sh.numel() == 1)
      a->cls[i] = Cls::col, a->uniform[i] = 1;
    else if (col_match)
      a->cls[i] = Cls::col;
    else
      return fail_shape(i);
    return true;
  }

  // Join: a uniform operand (literal or one-element input) takes the other's class; a per-row
  // value with a per-column one makes a full value.
  bool classify_join(size_t i) {
    Analysis* a = analysis_;
    const Node& nd = graph_.nodes[i];
    const Dims& sh = nd.shape;
    const Dims& dom = a->domain;
    bool all_uniform = true, any_col = false, any_row = false, any_full = false;
    bool all_scalar = true;
    for (int k = 0; k < node_arity(nd); ++k) {
      const size_t o = static_cast<size_t>(nd.in[k]);
      a->level[i] = std::max(a->level[i], a->level[o]);
      all_scalar &= a->cls[o] == Cls::scalar;
      if (a->uniform[o]) continue;
      all_uniform = false;
      any_col |= a->cls[o] == Cls::col, any_row |= a->cls[o] == Cls::row;
      any_full |= a->cls[o] == Cls::full;
    }
    if (all_scalar)
      a->cls[i] = Cls::scalar;
    else if (all_uniform)
      a->cls[i] = Cls::col;
    else if (any_full || (any_col && any_row))
      a->cls[i] = Cls::full;
    else
      a->cls[i] = any_row ? Cls::row : Cls::col;
    a->uniform[i] = all_uniform;
    if (a->cls[i] == Cls::full && sh.numel() != dom.numel()) return fail_shape(i);
    if (a->cls[i] == Cls::row && (sh.numel() != a->N || sh.last() != a->N)) return fail_shape(i);
    if (a->cls[i] == Cls::col && !all_uniform && sh.numel() != a->M) return fail_shape(i);
    if (nd.kind == NodeKind::cast && nd.dtype == DType::f32) a->rep[i] = a->rep[nd.in[0]];
    if (a->cls[i] == Cls::scalar) fold_scalar(i);
    return true;
  }

  // Folded now with the same routine the eager op runs on a 0-d tensor (n = 1).
  void fold_scalar(size_t i) {
    Analysis* a = analysis_;
    const Node& nd = graph_.nodes[i];
    float v[3] = {0, 0, 0};
    for (int k = 0; k < node_arity(nd); ++k) v[k] = a->value[static_cast<size_t>(nd.in[k])];
    float r = v[0];
    if (nd.kind == NodeKind::ew) {
      const float* in[2] = {&v[0], &v[1]};
      const float p[4] = {nd.p[0], nd.p[1], nd.p[2], 0};
      ew_->f32[nd.op](&r, in, 1, p);
    } else if (nd.kind == NodeKind::select) {
      r = v[0] != 0 ? v[1] : v[2];
    }
    if (nd.dtype == DType::bf16) r = bf16_to_f32(f32_to_bf16(r));
    a->value[i] = r;
  }

  const Graph& graph_;
  Analysis* analysis_;
  std::string* why_;
  const kernels::EwTable* ew_ = nullptr;  // the elementwise routines scalars fold with
};

}  // namespace

bool classify(const Graph& g, Analysis* a, std::string* why) {
  Classifier c(g, a, why);
  c.mark_live();
  if (!c.find_domain() || !c.classify_nodes() || !c.check_outputs()) return false;
  c.find_stages();
  return true;
}

}  // namespace hp::fusion
