// Stage cuts (stage.h).
#include "hp/pipeline/stage.h"

#include <algorithm>
#include <limits>

#include "hp/core/error.h"

namespace hp::pipeline {

std::vector<int64_t> balanced_cut(const std::vector<double>& layer_costs, double first_extra,
                                  double last_extra, int64_t stages) {
  const auto n = static_cast<int64_t>(layer_costs.size());
  if (stages < 1 || n < stages)
    HP_THROW(ValueError, "pipeline", n, " layers cannot be cut into ", stages,
             " stages of at least one layer each");
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + layer_costs[size_t(i)];
  auto cost = [&](int64_t k, int64_t a, int64_t b) {  // stage k holds layers [a, b)
    return prefix[size_t(b)] - prefix[size_t(a)] + (k == 0 ? first_extra : 0.0) +
           (k == stages - 1 ? last_extra : 0.0);
  };
  // best[k][i]: the least possible maximum over stages 0..k holding layers [0, i); cut[k][i] the
  // start of stage k in it.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(stages), std::vector<double>(size_t(n) + 1, inf));
  std::vector<std::vector<int64_t>> cut(size_t(stages), std::vector<int64_t>(size_t(n) + 1, 0));
  for (int64_t i = 1; i <= n; ++i) best[0][size_t(i)] = cost(0, 0, i);
  for (int64_t k = 1; k < stages; ++k)
    for (int64_t i = k + 1; i <= n; ++i)
      for (int64_t a = i - 1; a >= k; --a) {  // later starts first: earlier stages largest on ties
        const double v = std::max(best[size_t(k - 1)][size_t(a)], cost(k, a, i));
        if (v < best[size_t(k)][size_t(i)]) {
          best[size_t(k)][size_t(i)] = v;
          cut[size_t(k)][size_t(i)] = a;
        }
      }
  std::vector<int64_t> out(static_cast<size_t>(stages));
  int64_t end = n;
  for (int64_t k = stages - 1; k >= 0; --k) {
    const int64_t begin = k == 0 ? 0 : cut[size_t(k)][size_t(end)];
    out[size_t(k)] = end - begin;
    end = begin;
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> stage_ranges(
    const std::vector<int64_t>& layers_per_stage) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int64_t n : layers_per_stage) {
    out.emplace_back(begin, begin + n);
    begin += n;
  }
  return out;
}

}  // namespace hp::pipeline
