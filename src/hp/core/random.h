// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
//
// Element i of a draw uses counter (offset + i / 4, lane i % 4), so the values depend only on
// (seed, offset, i) — never on the thread count or the chunking. After a draw of n values the
// generator's offset advances by ceil(n / 4). Recompute (autograd::checkpoint) saves and restores
// the (seed, offset) state to replay dropout masks exactly.
#pragma once

#include <array>
#include <cstdint>

namespace hp {

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in 128-bit Philox blocks
  bool operator==(const RngState&) const = default;
};

// Philox4x32-10 of a 128-bit counter under a 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { state_.seed = seed; }
  RngState state() const { return state_; }
  void set_state(RngState s) { state_ = s; }
  void manual_seed(uint64_t seed) { state_ = RngState{seed, 0}; }
  // Reserves n values: returns the offset to draw from and advances past them.
  uint64_t reserve(int64_t n);

 private:
  RngState state_;
};

// The process-wide default generator.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Uniform in [0, 1) with 24 random bits, from a 32-bit word.
inline float uniform01(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// Fills out[0..n) with value i = f(seed, offset, i) in parallel. kind: uniform [lo, hi) or normal.
void fill_uniform(float* out, int64_t n, RngState at, float lo, float hi);
void fill_normal(float* out, int64_t n, RngState at, float mean, float std);
// Bernoulli keep-mask: out[i] = 1 if uniform >= p (dropout).
void fill_keep_mask(uint8_t* out, int64_t n, RngState at, float p);

}  // namespace hp
