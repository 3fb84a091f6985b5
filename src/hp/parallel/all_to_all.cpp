// The differentiable all_to_all_v (all_to_all.h).
#include "hp/parallel/all_to_all.h"

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/ops/ops.h"

namespace hp::parallel {

Tensor all_to_all_v(const Tensor& x, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& recv_counts, const dist::CommPtr& comm) {
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = comm->all_to_all_v(contiguous(x), send_counts, recv_counts);
  }
  if (autograd::needs_grad({x}))
    autograd::record("AllToAllV", {x}, {y},
                     [comm, send_counts, recv_counts](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{
                           comm->all_to_all_v(contiguous(g[0]), recv_counts, send_counts)};
                     });
  return y;
}

}  // namespace hp::parallel
