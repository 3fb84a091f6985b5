// The order in which an epoch visits a dataset's windows, as the loader reads it.
//
// For data held in memory the permutation is computed in memory (8 bytes per window). For an
// indexed dataset it is a file beside the data, like Megatron's cached shuffle index:
// PREFIX.shuffle/seed<S>-len<L>-epoch<E>.i64, written once (by whichever rank gets there first;
// temp file + rename, so a reader never sees half of one) and mapped afterwards, so a start-up or a
// resume maps it in O(1) and memory holds only the pages the loader has visited. A directory that
// cannot be written falls back to memory. The values are epoch_permutation's in either case, so
// an indexed dataset visits windows exactly as the text it was prepared from.
//
// File layout (little-endian): magic "HPSHUF01", then i64 n (windows), u64 seed, i64 epoch,
// i64 seq_len, i64 tokens (the dataset's), then the permutation, i64 [n]. A file whose header does
// not match what the loader expects is rewritten.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hp::data {

namespace detail {
class MappedFile;
}

// epoch_permutation (loader.h) written into out[0, n).
void epoch_permutation_into(int64_t n, uint64_t seed, int64_t epoch, int64_t* out);

class EpochOrder {
 public:
  // In memory.
  EpochOrder(int64_t n, uint64_t seed, int64_t epoch);
  // Cached beside the indexed dataset at `prefix` (in memory when that fails).
  EpochOrder(const std::string& prefix, int64_t tokens, int64_t seq_len, int64_t n, uint64_t seed,
             int64_t epoch);
  ~EpochOrder();
  EpochOrder(const EpochOrder&) = delete;
  EpochOrder& operator=(const EpochOrder&) = delete;

  int64_t size() const { return n_; }
  int64_t operator[](int64_t k) const { return data_[k]; }
  // The file it is mapped from; "" when computed in memory.
  const std::string& path() const { return path_; }

 private:
  int64_t n_ = 0;
  const int64_t* data_ = nullptr;
  std::vector<int64_t> memory_;
  std::unique_ptr<detail::MappedFile> file_;
  std::string path_;
};

// PREFIX.shuffle/seed<S>-len<L>-epoch<E>.i64
std::string shuffle_index_path(const std::string& prefix, uint64_t seed, int64_t seq_len,
                               int64_t epoch);

}  // namespace hp::data
