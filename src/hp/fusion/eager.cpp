// The unfused reference and fallback: every node through the eager kernel its op runs
// (kernels::elementwise, kernels::reduce, hp::where, Tensor::to), one full tensor per node.
#include "hp/autograd/grad_mode.h"
#include "hp/fusion/program.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/reduce.h"
#include "hp/ops/ops.h"

namespace hp::fusion {

std::vector<Tensor> run_eager(const Graph& g, const std::vector<Tensor>& inputs) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> v(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    auto arg = [&](int k) -> const Tensor& { return v[static_cast<size_t>(n.in[k])]; };
    switch (n.kind) {
      case NodeKind::input:
        v[i] = inputs[static_cast<size_t>(n.index)];
        break;
      case NodeKind::constant:
        v[i] = full({}, n.p[0], n.dtype);
        break;
      case NodeKind::ew: {
        const auto op = static_cast<kernels::EwOp>(n.op);
        v[i] = kernels::elementwise(op, arg(0), kernels::ew_arity(op) == 2 ? arg(1) : Tensor(),
                                    n.dtype, {n.p[0], n.p[1], n.p[2]});
        break;
      }
      case NodeKind::select:
        v[i] = where(arg(0).to(DType::boolean), arg(1), arg(2));
        break;
      case NodeKind::cast:
        v[i] = arg(0).to(n.dtype);
        break;
      case NodeKind::reduce:
        v[i] = kernels::reduce(static_cast<RedOp>(n.op) == RedOp::sum ? kernels::ReduceOp::sum
                                                                      : kernels::ReduceOp::max,
                               arg(0), {arg(0).dim() - 1}, true, n.dtype);
        break;
      case NodeKind::row_sum: {
        std::vector<int64_t> lead;
        for (int64_t d = 0; d + 1 < arg(0).dim(); ++d) lead.push_back(d);
        v[i] = lead.empty() ? arg(0).clone()
                            : kernels::reduce(kernels::ReduceOp::sum, arg(0), lead, true, n.dtype);
        break;
      }
      case NodeKind::opaque: {
        std::vector<Tensor> xs;
        for (int k = 0; k < node_arity(n); ++k) xs.push_back(arg(k));
        v[i] = g.opaque[static_cast<size_t>(n.index)].fn(xs);
        break;
      }
    }
  }
  std::vector<Tensor> outs;
  for (int32_t o : g.outputs) outs.push_back(v[static_cast<size_t>(o)]);
  return outs;
}

}  // namespace hp::fusion
