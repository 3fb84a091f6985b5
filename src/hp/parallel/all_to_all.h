// A differentiable variable-count all-to-all: the exchange under expert parallelism
// (moe/expert_parallel.h) and all-to-all context parallelism (context_parallel.h).
#pragma once

#include <cstdint>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"

namespace hp::parallel {

// x [Σ send_counts, ...]: send_counts[j] rows to rank j → [Σ recv_counts, ...], rank j's rows in
// order (Communicator::all_to_all_v), differentiable: the gradient goes back the same way with the
// counts swapped.
Tensor all_to_all_v(const Tensor& x, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& recv_counts, const dist::CommPtr& comm);

}  // namespace hp::parallel
