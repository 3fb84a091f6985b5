// The seeded schedule that blends several datasets by weight (data.sources): which source each
// sample of the mixture comes from, and which of that source's samples it is.
//
// The mixture is cut into blocks of N = Σ_s n_s samples (n_s: source s's windows per epoch), the
// loader's "epochs". In every block source s gets exactly q_s samples: the largest-remainder
// rounding of N · w_s / Σ w (remainder ties to the lower index), so over whole blocks the
// proportions are the weights to within one sample per block. The order inside block e is a
// uniformly random arrangement of that multiset, drawn position by position as from an urn:
// position j takes source s with probability r_s / (N - j), r_s being the samples of s the block
// has left, by one Philox4x32 draw (counter (j, e), key seed ^ kBlendKey). It depends only on
// (sizes, weights, seed), never on the thread or rank count.
//
// The i-th sample of source s in block e is that source's sample e · q_s + i overall, which the
// loader maps to a window through the source's own epochs and seeded permutation (loader.h). So the
// whole position is (block, position in block), the loader's two-number state: seek() replays the
// block's draws up to the position (O(position · sources)) and the per-source counts follow.
// One source is the plain loader: every sample is source 0's next one, no draws.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace hp::data {

// XORed into the seed for the urn draws, so they are not the epoch permutations' stream.
inline constexpr uint64_t kBlendKey = 0x626c656e64ULL;  // "blend"

// The largest-remainder split of `total` by `weights` (all > 0): Σ = total.
std::vector<int64_t> blend_quotas(int64_t total, const std::vector<double>& weights);

class BlendSchedule {
 public:
  // sizes: samples per epoch of each source (>= 1); weights > 0, one per source. ValueError
  // ("[data] ...") for empty or mismatched lists, a size < 1, a weight <= 0 or not finite.
  BlendSchedule(std::vector<int64_t> sizes, std::vector<double> weights, uint64_t seed);

  int64_t block_size() const { return block_size_; }
  int num_sources() const { return static_cast<int>(quotas_.size()); }
  // Samples of each source per block.
  const std::vector<int64_t>& quotas() const { return quotas_; }

  // Positions the schedule at sample `position` of block `block` (position < block_size()).
  void seek(int64_t block, int64_t position);
  // The source of the next sample and that source's overall sample index; advances by one.
  std::pair<int, int64_t> next();

  int64_t block() const { return block_; }
  int64_t position() const { return position_; }
  // Samples drawn from each source since block 0, position 0.
  std::vector<int64_t> drawn() const;

 private:
  int draw() const;  // the source of the sample at (block_, position_)

  std::vector<int64_t> quotas_;
  int64_t block_size_ = 0;
  uint64_t key_ = 0;
  int64_t block_ = 0, position_ = 0;
  std::vector<int64_t> in_block_;  // samples of each source drawn in this block
};

}  // namespace hp::data
