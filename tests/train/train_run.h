// Helpers the trainer tests share: a run with its log kept off the console, and its losses.
#pragma once

#include <sstream>
#include <vector>

#include "hp/train/trainer.h"

namespace hp::train::test {

inline TrainResult quiet_train(const Config& c, TrainOptions o = {}) {
  std::ostringstream log;
  o.log = &log;
  return train(c, o);
}

inline std::vector<double> losses(const TrainResult& r) {
  std::vector<double> out;
  for (const auto& s : r.steps) out.push_back(s.loss);
  return out;
}

}  // namespace hp::train::test
