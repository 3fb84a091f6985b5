#include "hp/core/random.h"

#include <cmath>

#include "hp/core/thread_pool.h"

namespace hp {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kW0, k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

uint64_t Generator::reserve(int64_t n) {
  uint64_t at = state_.offset;
  state_.offset += static_cast<uint64_t>((n + 3) / 4);
  return at;
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {
// Runs fn(i, words) for each 4-value block i, in parallel, writing outputs for block i only.
template <class Fn>
void for_each_block4(int64_t n, RngState at, Fn fn) {
  const int64_t nblocks = (n + 3) / 4;
  parallel_for(0, nblocks, 2048, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) fn(b, philox4x32(at.offset + static_cast<uint64_t>(b), 0, at.seed));
  });
}
}  // namespace

void fill_uniform(float* out, int64_t n, RngState at, float lo, float hi) {
  for_each_block4(n, at, [&](int64_t b, const std::array<uint32_t, 4>& w) {
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) out[b * 4 + j] = lo + (hi - lo) * uniform01(w[j]);
  });
}

void fill_normal(float* out, int64_t n, RngState at, float mean, float std) {
  // Box–Muller on word pairs: (w0, w1) → values 0, 1; (w2, w3) → values 2, 3.
  for_each_block4(n, at, [&](int64_t b, const std::array<uint32_t, 4>& w) {
    for (int pair = 0; pair < 2; ++pair) {
      double u1 = (static_cast<double>(w[2 * pair]) + 1.0) / 4294967296.0;  // (0, 1]
      double u2 = static_cast<double>(w[2 * pair + 1]) / 4294967296.0;
      double r = std::sqrt(-2.0 * std::log(u1));
      double theta = 6.283185307179586 * u2;
      int64_t i = b * 4 + 2 * pair;
      if (i < n) out[i] = mean + std * static_cast<float>(r * std::cos(theta));
      if (i + 1 < n) out[i + 1] = mean + std * static_cast<float>(r * std::sin(theta));
    }
  });
}

void fill_keep_mask(uint8_t* out, int64_t n, RngState at, float p) {
  for_each_block4(n, at, [&](int64_t b, const std::array<uint32_t, 4>& w) {
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) out[b * 4 + j] = uniform01(w[j]) >= p ? 1 : 0;
  });
}

}  // namespace hp
