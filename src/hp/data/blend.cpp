#include "hp/data/blend.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "hp/core/error.h"
#include "hp/core/random.h"

namespace hp::data {

std::vector<int64_t> blend_quotas(int64_t total, const std::vector<double>& weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> q(weights.size());
  std::vector<std::pair<double, size_t>> rest;  // (remainder, index)
  int64_t given = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    const double exact = double(total) * weights[s] / sum;
    q[s] = std::min<int64_t>(total, static_cast<int64_t>(std::floor(exact)));
    given += q[s];
    rest.emplace_back(exact - double(q[s]), s);
  }
  // Largest remainders first; equal ones to the lower index (stable).
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < total; i = (i + 1) % rest.size(), ++given) ++q[rest[i].second];
  for (size_t i = rest.size(); given > total && i-- > 0;)  // floor rounding overshoot (never > 1)
    if (q[rest[i].second] > 0) --q[rest[i].second], --given;
  return q;
}

BlendSchedule::BlendSchedule(std::vector<int64_t> sizes, std::vector<double> weights, uint64_t seed)
    : key_(seed ^ kBlendKey) {
  if (sizes.empty() || sizes.size() != weights.size())
    HP_THROW(ValueError, "data", "a blend needs one weight per source, got ", sizes.size(),
             " sources and ", weights.size(), " weights");
  for (size_t s = 0; s < sizes.size(); ++s) {
    if (sizes[s] < 1)
      HP_THROW(ValueError, "data", "blend source ", s, " has ", sizes[s], " samples per epoch");
    if (!(weights[s] > 0) || !std::isfinite(weights[s]))
      HP_THROW(ValueError, "data", "blend source ", s, " has weight ", weights[s],
               ": weights must be finite and > 0");
    if (__builtin_add_overflow(block_size_, sizes[s], &block_size_))
      HP_THROW(ValueError, "data", "blend sources hold more samples than int64 counts");
  }
  quotas_ = blend_quotas(block_size_, weights);
  in_block_.assign(quotas_.size(), 0);
}

int BlendSchedule::draw() const {
  if (quotas_.size() == 1) return 0;
  const auto w = philox4x32(static_cast<uint64_t>(position_), static_cast<uint64_t>(block_), key_);
  const uint64_t r = (uint64_t{w[1]} << 32) | w[0];
  // u uniform in [0, samples left in the block) by multiply-high, as epoch_permutation draws.
  auto u = static_cast<int64_t>(
      (static_cast<unsigned __int128>(r) * static_cast<uint64_t>(block_size_ - position_)) >> 64);
  for (size_t s = 0; s < quotas_.size(); ++s) {
    u -= quotas_[s] - in_block_[s];
    if (u < 0) return static_cast<int>(s);
  }
  HP_CHECK(false, "blend draw past the block's remaining samples");
  return 0;
}

std::pair<int, int64_t> BlendSchedule::next() {
  const int s = draw();
  const int64_t index = block_ * quotas_[s] + in_block_[s];
  ++in_block_[s];
  if (++position_ == block_size_) {
    ++block_;
    position_ = 0;
    std::fill(in_block_.begin(), in_block_.end(), 0);
  }
  return {s, index};
}

void BlendSchedule::seek(int64_t block, int64_t position) {
  HP_CHECK(block >= 0 && position >= 0 && position < block_size_, "blend position (", block, ", ",
           position, ") of blocks of ", block_size_);
  block_ = block;
  position_ = 0;
  std::fill(in_block_.begin(), in_block_.end(), 0);
  if (quotas_.size() == 1) {
    in_block_[0] = position_ = position;
    return;
  }
  while (position_ < position) ++in_block_[draw()], ++position_;
}

std::vector<int64_t> BlendSchedule::drawn() const {
  std::vector<int64_t> out(quotas_.size());
  for (size_t s = 0; s < out.size(); ++s) out[s] = block_ * quotas_[s] + in_block_[s];
  return out;
}

}  // namespace hp::data
