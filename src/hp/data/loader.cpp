#include "hp/data/loader.h"

#include <algorithm>

#include "hp/core/error.h"
#include "hp/data/shuffle.h"

namespace hp::data {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  epoch_permutation_into(n, seed, epoch, perm.data());
  return perm;
}

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> ds, int64_t seq_len, uint64_t seed,
                       bool shuffle)
    : ds_(std::move(ds)), seq_len_(seq_len), seed_(seed), shuffle_(shuffle) {
  if (!ds_) HP_THROW(ValueError, "data", "DataLoader needs a dataset, got null");
  if (seq_len_ < 1) HP_THROW(ValueError, "data", "seq_len must be >= 1, got ", seq_len_);
  if (ds_->size() < seq_len_ + 1)
    HP_THROW(ValueError, "data", "dataset '", ds_->options().path, "' has ", ds_->size(),
             " tokens, fewer than seq_len + 1 = ", seq_len_ + 1);
  samples_per_epoch_ = (ds_->size() - 1) / seq_len_;
}

void DataLoader::set_state(const LoaderState& s) {
  if (s.epoch < 0) HP_THROW(ValueError, "data", "loader state epoch must be >= 0, got ", s.epoch);
  if (s.cursor < 0 || s.cursor >= samples_per_epoch_)
    HP_THROW(ValueError, "data", "loader state cursor ", s.cursor, " is outside [0, ",
             samples_per_epoch_, ") (samples per epoch of '", ds_->options().path, "' at seq_len ",
             seq_len_, ")");
  state_ = s;
}

int64_t DataLoader::window_at(int64_t ahead) {
  const int64_t pos = state_.cursor + ahead;
  const int64_t epoch = state_.epoch + pos / samples_per_epoch_;
  const int64_t k = pos % samples_per_epoch_;
  if (!shuffle_) return k;
  if (epoch != order_epoch_) {
    order_.reset();  // before the next one is built: one epoch's order in memory at a time
    order_ = ds_->mapped()
                 ? std::make_shared<const EpochOrder>(ds_->options().path, ds_->size(), seq_len_,
                                                      samples_per_epoch_, seed_, epoch)
                 : std::make_shared<const EpochOrder>(samples_per_epoch_, seed_, epoch);
    order_epoch_ = epoch;
  }
  return (*order_)[k];
}

Tensor DataLoader::next_batch(int64_t batch, int dp_rank, int dp_size) {
  if (batch < 1) HP_THROW(ValueError, "data", "batch must be >= 1, got ", batch);
  if (dp_size < 1) HP_THROW(ValueError, "data", "dp_size must be >= 1, got ", dp_size);
  if (dp_rank < 0 || dp_rank >= dp_size)
    HP_THROW(ValueError, "data", "dp_rank ", dp_rank, " is outside [0, ", dp_size, ")");
  const int64_t chunk = (batch + dp_size - 1) / dp_size;
  const int64_t row0 = std::min(batch, dp_rank * chunk);
  const int64_t row1 = std::min(batch, (dp_rank + 1) * chunk);
  const int64_t width = seq_len_ + 1;

  Tensor out = empty({row1 - row0, width}, DType::i64);  // [rows, seq_len + 1]
  int64_t* dst = out.data<int64_t>();
  for (int64_t g = row0; g < row1; ++g)
    ds_->read(window_at(g) * seq_len_, width, dst + (g - row0) * width);

  const int64_t pos = state_.cursor + batch;
  state_.epoch += pos / samples_per_epoch_;
  state_.cursor = pos % samples_per_epoch_;
  return out;
}

}  // namespace hp::data
