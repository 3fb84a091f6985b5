// The loss arithmetic shared by the training step (plain and pipelined) and validation: a batch's
// loss on this rank and the global token-weighted mean over the ranks.
#pragma once

#include <cstdint>

#include "hp/core/tensor.h"
#include "hp/data/loader.h"
#include "hp/train/config.h"
#include "hp/train/layout.h"

namespace hp::models {
class CausalLM;
struct PackedDocuments;
}  // namespace hp::models

namespace hp::train {

// This rank's loss on a batch's rows ([rows, seq_len + 1] windows): CausalLM::loss — the mean over
// the rows' targets (with a loss mask, the unmasked ones: batch.labels), under cp this rank's
// share of it — and the targets it stands for (batch.targets: rows · seq_len without a mask), so
// mean · tokens summed over the ranks, / tp, is the batch's Σ of token losses.
struct BatchLoss {
  Tensor mean;
  int64_t tokens = 0;
};
// `documents`: the run's packed-document flags (batch.positions must be defined when any is on).
BatchLoss batch_loss(models::CausalLM& model, const data::Batch& batch,
                     const DocumentFlags& documents = {});
// The packed documents of `batch` under the run's flags (none when no flag is on).
models::PackedDocuments packed_documents(const data::Batch& batch, const DocumentFlags& documents);

// Σ over every rank of `local_sum` (this rank's Σ mean · tokens), counting the tp ranks of a
// data-parallel slice once, / global_tokens: the global token-weighted mean. Collective.
double global_mean_loss(dist::Communicator& world, const Layout& layout, double local_sum,
                        int64_t global_tokens);

}  // namespace hp::train
