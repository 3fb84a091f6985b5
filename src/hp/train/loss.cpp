// The training and validation loss (loss.h).
#include "hp/train/loss.h"

#include "hp/core/error.h"
#include "hp/dist/communicator.h"
#include "hp/models/transformer.h"
#include "hp/ops/ops.h"

namespace hp::train {

BatchLoss batch_loss(models::CausalLM& model, const data::Batch& batch,
                     const DocumentFlags& documents) {
  return {model.loss(batch.ids, batch.labels, packed_documents(batch, documents)), batch.targets};
}

models::PackedDocuments packed_documents(const data::Batch& batch, const DocumentFlags& documents) {
  HP_CHECK(!documents.any() || batch.positions.defined(), "packed documents without positions");
  if (!documents.any()) return {};
  return {batch.positions, documents.mask, documents.reset_positions};
}

double global_mean_loss(dist::Communicator& world, const Layout& layout, double local_sum,
                        int64_t global_tokens) {
  double sum = local_sum;
  if (world.size() > 1) {
    Tensor t = full({1}, local_sum, DType::f64);
    sum = world.all_reduce(t, dist::ReduceOp::sum).item();
  }
  // The tp ranks of a data-parallel slice computed the same loss: count it once.
  return sum / double(layout.tp) / double(global_tokens);
}

}  // namespace hp::train
