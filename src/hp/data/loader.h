// Deterministic batches of token windows for the trainer, resumable from a two-number state.
//
// One source: an epoch is every window of seq_len + 1 tokens starting at k * seq_len (k = 0 ..
// n - 1, n = samples_per_epoch()), visited in a seeded permutation of k that depends only on
// (seed, epoch). Several sources (data.sources, blended by weight): the epochs are the blend
// schedule's blocks (blend.h), each sample drawn from the source the schedule names, and each
// source visits its own windows as one source would, in its own epochs and permutation (seeded with
// seed + its index, so source 0 alone is the one-source loader). The trainer passes a whole window
// to CausalLM::loss (inputs = window[:-1], targets = window[1:]; the loss shifts internally). The
// state counts GLOBAL samples, so every data-parallel rank holds the same state and a checkpoint
// resumes at any dp size; the sources' positions follow from it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/data/blend.h"
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

// A batch with its training targets (chat data: the assistant's tokens only; data/chat.h).
struct Batch {
  Tensor ids;     // i64 [rows, seq_len + 1]: this rank's rows
  Tensor labels;  // ids with -100 where the mask is 0 (CausalLM::loss ignores those targets);
                  // undefined when no source has a mask (every token is a target)
  // i64 [rows, seq_len + 1]: each token's position within its packed document (0 at a
  // document's first token and at the row's first; TokenDataset::read_positions); defined only
  // with set_document_positions(true).
  Tensor positions;
  int64_t targets = 0;         // this rank's targets: labels[:, 1:] != -100 (rows · seq_len)
  int64_t global_targets = 0;  // the same over every rank's rows of the global batch
};

// One dataset of a blend and its weight (> 0).
struct LoaderSource {
  std::shared_ptr<const TokenDataset> dataset;
  double weight = 1.0;
};

class DataLoader {
 public:
  // One source. ValueError("[data] ...") when ds is null, seq_len < 1, or the dataset has fewer
  // than seq_len + 1 tokens (naming the dataset path and both numbers).
  DataLoader(std::shared_ptr<const TokenDataset> ds, int64_t seq_len, uint64_t seed,
             bool shuffle = true);
  // A blend: as above for each source, plus ValueError for no source, a weight <= 0, or a weight
  // so small that its source gets no sample of a block (naming the source's path and weight).
  // shuffle false keeps each source's windows in order; the blend order is seeded either way.
  DataLoader(std::vector<LoaderSource> sources, int64_t seq_len, uint64_t seed,
             bool shuffle = true);
  ~DataLoader();

  int64_t seq_len() const { return seq_len_; }
  // The first source's dataset.
  const TokenDataset& dataset() const { return source(0); }
  int num_sources() const { return static_cast<int>(sources_.size()); }
  const TokenDataset& source(int s) const;
  int64_t samples_per_epoch() const { return schedule_.block_size(); }
  // Samples of each source per epoch (blend.h; one source: samples_per_epoch()).
  const std::vector<int64_t>& quotas() const { return schedule_.quotas(); }

  // The next GLOBAL batch of `batch` samples (continuing into the next epoch when this one runs
  // out, so a batch may straddle epochs), of which this returns data-parallel rank dp_rank's rows
  // by the torch.chunk rule (chunk = ceil(batch / dp_size), rank r gets rows
  // [min(batch, r * chunk), min(batch, (r + 1) * chunk)), possibly none).
  // i64 [rows, seq_len + 1]. Every rank advances the state by the whole global batch.
  // ValueError for batch < 1, dp_size < 1 or dp_rank outside [0, dp_size).
  Tensor next_batch(int64_t batch, int dp_rank = 0, int dp_size = 1);
  // next_batch with its labels and target counts. The mask of a window's first token is unused
  // (it is no target); the rest of the window's mask bytes decide its targets.
  Batch next(int64_t batch, int dp_rank = 0, int dp_size = 1);
  // Whether some source has a loss mask (TokenDataset::has_mask).
  bool masked() const { return masked_; }
  // Whether next() also returns Batch::positions (data.document_mask / reset_position_ids). A
  // pure function of each window, so the loader state (and resume) is unchanged.
  void set_document_positions(bool on) { positions_ = on; }
  bool document_positions() const { return positions_; }
  // The targets of the next `batches` global batches of `batch` samples — what next() will
  // return as global_targets, summed — without moving the state (a training step's token count
  // before its first micro-batch). Without a mask: batches · batch · seq_len, nothing read.
  int64_t peek_targets(int64_t batch, int64_t batches = 1);

  LoaderState state() const { return {schedule_.block(), schedule_.position()}; }
  // ValueError("[data] ...") for a negative epoch or a cursor outside [0, samples_per_epoch()).
  void set_state(const LoaderState& s);
  // Samples taken from each source since epoch 0, cursor 0 (global: every rank's rows), in
  // source order; · seq_len = the tokens trained on from it.
  std::vector<int64_t> source_samples() const { return schedule_.drawn(); }

 private:
  class Source;

  std::vector<std::unique_ptr<Source>> sources_;
  // Mask targets of sample (s, k): the window's bytes 1.. read into mask_buf_.
  int64_t window_targets(int s, int64_t k, uint8_t* mask);

  int64_t seq_len_;
  BlendSchedule schedule_;
  bool masked_ = false;
  bool positions_ = false;
  std::vector<uint8_t> mask_buf_;
};

}  // namespace hp::data
