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

// One dataset's windows in its own epochs: its sample k is window order(k / n)[k % n].
class DataLoader::Source {
 public:
  Source(std::shared_ptr<const TokenDataset> ds, int64_t seq_len, uint64_t seed, bool shuffle)
      : dataset(std::move(ds)), seq_len_(seq_len), seed_(seed), shuffle_(shuffle) {
    if (!dataset) HP_THROW(ValueError, "data", "DataLoader needs a dataset, got null");
    if (seq_len_ < 1) HP_THROW(ValueError, "data", "seq_len must be >= 1, got ", seq_len_);
    if (dataset->size() < seq_len_ + 1)
      HP_THROW(ValueError, "data", "dataset '", dataset->options().path, "' has ", dataset->size(),
               " tokens, fewer than seq_len + 1 = ", seq_len_ + 1);
    windows = (dataset->size() - 1) / seq_len_;
  }

  // The window of sample k. A source's samples are drawn in increasing k, so one epoch's order is
  // held at a time.
  int64_t window(int64_t k) {
    const int64_t epoch = k / windows, i = k % windows;
    if (!shuffle_) return i;
    if (epoch != order_epoch_) {
      order_.reset();  // before the next one is built: one epoch's order in memory at a time
      const std::string& cache = dataset->order_cache_prefix();
      order_ = cache.empty() ? std::make_shared<const EpochOrder>(windows, seed_, epoch)
                             : std::make_shared<const EpochOrder>(cache, dataset->size(), seq_len_,
                                                                  windows, seed_, epoch);
      order_epoch_ = epoch;
    }
    return (*order_)[i];
  }

  std::shared_ptr<const TokenDataset> dataset;
  int64_t windows = 0;

 private:
  int64_t seq_len_;
  uint64_t seed_;
  bool shuffle_;
  // The order of epoch order_epoch_ (built when first needed; shuffle only). Indexed datasets map
  // it from a file cached beside the data (shuffle.h), so resuming costs no pass over it.
  std::shared_ptr<const EpochOrder> order_;
  int64_t order_epoch_ = -1;
};

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> ds, int64_t seq_len, uint64_t seed,
                       bool shuffle)
    : DataLoader(std::vector<LoaderSource>{{std::move(ds), 1.0}}, seq_len, seed, shuffle) {}

DataLoader::DataLoader(std::vector<LoaderSource> sources, int64_t seq_len, uint64_t seed,
                       bool shuffle)
    // The sources first (their checks name the dataset), then the schedule over their sizes.
    : seq_len_(seq_len), schedule_([&] {
        if (sources.empty()) HP_THROW(ValueError, "data", "DataLoader needs at least one source");
        std::vector<int64_t> sizes;
        std::vector<double> weights;
        for (size_t s = 0; s < sources.size(); ++s) {
          const std::string path = sources[s].dataset ? sources[s].dataset->options().path : "";
          if (!(sources[s].weight > 0))
            HP_THROW(ValueError, "data", "source ", s, " '", path, "' has weight ",
                     sources[s].weight, ": weights must be > 0");
          sources_.push_back(std::make_unique<Source>(sources[s].dataset, seq_len,
                                                      seed + static_cast<uint64_t>(s), shuffle));
          sizes.push_back(sources_.back()->windows);
          weights.push_back(sources[s].weight);
        }
        return BlendSchedule(sizes, weights, seed);
      }()) {
  for (const auto& src : sources_) masked_ = masked_ || src->dataset->has_mask();
  mask_buf_.resize(static_cast<size_t>(seq_len_ + 1));
  for (int s = 0; s < num_sources(); ++s)
    if (schedule_.quotas()[s] == 0)
      HP_THROW(ValueError, "data", "source ", s, " '", source(s).options().path, "' has weight ",
               sources[s].weight, ", too small to get one of the ", schedule_.block_size(),
               " samples of a blend epoch: raise it");
}

DataLoader::~DataLoader() = default;

const TokenDataset& DataLoader::source(int s) const {
  return *sources_.at(s)->dataset;
}

void DataLoader::set_state(const LoaderState& s) {
  if (s.epoch < 0) HP_THROW(ValueError, "data", "loader state epoch must be >= 0, got ", s.epoch);
  if (s.cursor < 0 || s.cursor >= samples_per_epoch())
    HP_THROW(ValueError, "data", "loader state cursor ", s.cursor, " is outside [0, ",
             samples_per_epoch(), ") (samples per epoch of '", dataset().options().path,
             num_sources() > 1 ? "' and the other sources" : "", "' at seq_len ", seq_len_, ")");
  schedule_.seek(s.epoch, s.cursor);
}

Tensor DataLoader::next_batch(int64_t batch, int dp_rank, int dp_size) {
  return next(batch, dp_rank, dp_size).ids;
}

int64_t DataLoader::window_targets(int s, int64_t k, uint8_t* mask) {
  Source& src = *sources_[static_cast<size_t>(s)];
  src.dataset->read_mask(src.window(k) * seq_len_, seq_len_ + 1, mask);
  int64_t n = 0;
  for (int64_t t = 1; t <= seq_len_; ++t) n += mask[t];
  return n;
}

int64_t DataLoader::peek_targets(int64_t batch, int64_t batches) {
  if (!masked_) return batches * batch * seq_len_;
  BlendSchedule ahead = schedule_;  // a copy: the real one does not move
  int64_t n = 0;
  for (int64_t g = 0; g < batch * batches; ++g) {
    const auto [s, k] = ahead.next();
    n += window_targets(s, k, mask_buf_.data());
  }
  return n;
}

Batch DataLoader::next(int64_t batch, int dp_rank, int dp_size) {
  if (batch < 1) HP_THROW(ValueError, "data", "batch must be >= 1, got ", batch);
  if (dp_size < 1) HP_THROW(ValueError, "data", "dp_size must be >= 1, got ", dp_size);
  if (dp_rank < 0 || dp_rank >= dp_size)
    HP_THROW(ValueError, "data", "dp_rank ", dp_rank, " is outside [0, ", dp_size, ")");
  const int64_t chunk = (batch + dp_size - 1) / dp_size;
  const int64_t row0 = std::min(batch, dp_rank * chunk);
  const int64_t row1 = std::min(batch, (dp_rank + 1) * chunk);
  const int64_t width = seq_len_ + 1;

  Batch out;
  out.ids = empty({row1 - row0, width}, DType::i64);  // [rows, seq_len + 1]
  int64_t* dst = out.ids.data<int64_t>();
  int64_t* lab = nullptr;
  int64_t* pos = nullptr;
  if (positions_) {
    out.positions = empty({row1 - row0, width}, DType::i64);  // [rows, seq_len + 1]
    pos = out.positions.data<int64_t>();
  }
  if (masked_) {
    out.labels = empty({row1 - row0, width}, DType::i64);
    lab = out.labels.data<int64_t>();
  }
  // Every sample of the global batch is drawn (the schedule advances the same on every rank);
  // only this rank's rows are read, and every row's mask (bytes) for the global target count.
  for (int64_t g = 0; g < batch; ++g) {
    const auto [s, k] = schedule_.next();
    const bool mine = g >= row0 && g < row1;
    if (masked_) {
      const int64_t n = window_targets(s, k, mask_buf_.data());
      out.global_targets += n;
      if (mine) out.targets += n;
    }
    if (!mine) continue;
    Source& src = *sources_[s];
    int64_t* row = dst + (g - row0) * width;
    src.dataset->read(src.window(k) * seq_len_, width, row);
    if (pos) src.dataset->read_positions(src.window(k) * seq_len_, width, pos + (g - row0) * width);
    if (lab)
      for (int64_t t = 0; t < width; ++t)
        lab[(g - row0) * width + t] = mask_buf_[static_cast<size_t>(t)] ? row[t] : -100;
  }
  if (!masked_) {
    out.targets = (row1 - row0) * seq_len_;
    out.global_targets = batch * seq_len_;
  }
  return out;
}

}  // namespace hp::data
