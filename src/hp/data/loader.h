// Deterministic batches of token windows for the trainer, resumable from a two-number state.
//
// An epoch is every window of seq_len + 1 tokens starting at k * seq_len (k = 0 .. n - 1, n =
// samples_per_epoch()), visited in a seeded permutation of k that depends only on (seed, epoch).
// The trainer passes a whole window to CausalLM::loss (inputs = window[:-1], targets = window[1:];
// the loss shifts internally). The state counts GLOBAL samples, so every data-parallel rank holds
// the same state and a checkpoint resumes at any dp size.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/data/dataset.h"
#include "hp/data/shuffle.h"

namespace hp::data {

struct LoaderState {
  int64_t epoch = 0;
  int64_t cursor = 0;  // samples consumed in this epoch, in [0, samples_per_epoch())
  bool operator==(const LoaderState&) const = default;
};

// The order in which epoch `epoch` visits windows 0..n-1: a Fisher-Yates shuffle whose step i
// draws from the Philox block (counter = (i, epoch), key = seed), so it depends only on
// (n, seed, epoch). For an indexed dataset the loader maps it from a cached file (shuffle.h).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

class DataLoader {
 public:
  // ValueError("[data] ...") when ds is null, seq_len < 1, or the dataset has fewer than
  // seq_len + 1 tokens (naming the dataset path and both numbers).
  DataLoader(std::shared_ptr<const TokenDataset> ds, int64_t seq_len, uint64_t seed,
             bool shuffle = true);

  int64_t seq_len() const { return seq_len_; }
  const TokenDataset& dataset() const { return *ds_; }
  int64_t samples_per_epoch() const { return samples_per_epoch_; }

  // The next GLOBAL batch of `batch` samples (continuing into the next epoch when this one runs
  // out, so a batch may straddle epochs), of which this returns data-parallel rank dp_rank's rows
  // by the torch.chunk rule (chunk = ceil(batch / dp_size), rank r gets rows
  // [min(batch, r * chunk), min(batch, (r + 1) * chunk)), possibly none).
  // i64 [rows, seq_len + 1]. Every rank advances the state by the whole global batch.
  // ValueError for batch < 1, dp_size < 1 or dp_rank outside [0, dp_size).
  Tensor next_batch(int64_t batch, int dp_rank = 0, int dp_size = 1);

  LoaderState state() const { return state_; }
  // ValueError("[data] ...") for a negative epoch or a cursor outside [0, samples_per_epoch()).
  void set_state(const LoaderState& s);

 private:
  // Window index of the sample `ahead` positions past the current state.
  int64_t window_at(int64_t ahead);

  std::shared_ptr<const TokenDataset> ds_;
  int64_t seq_len_;
  uint64_t seed_;
  bool shuffle_;
  int64_t samples_per_epoch_ = 0;
  LoaderState state_;
  // The order of epoch order_epoch_ (built when first needed; shuffle only). Indexed datasets map
  // it from a file cached beside the data (shuffle.h), so resuming costs no pass over it.
  std::shared_ptr<const EpochOrder> order_;
  int64_t order_epoch_ = -1;
};

}  // namespace hp::data
