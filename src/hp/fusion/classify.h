// Compile, part 1 (classify.cpp): the per-node facts the program builder (compile.cpp) works from.
#pragma once

#include <string>
#include <vector>

#include "hp/fusion/program.h"

namespace hp::fusion {

struct Analysis {
  std::vector<uint8_t> live;     // reachable from an output
  std::vector<Cls> cls;          // per node
  std::vector<uint8_t> uniform;  // the same value everywhere (literal or one-element input)
  std::vector<int32_t> rep;      // the node holding this value (a widening cast aliases)
  std::vector<float> value;      // folded value of scalar nodes
  std::vector<int> level;        // stage: the number of reductions on the longest path to it
  Dims domain;
  int64_t M = 0, N = 0;  // the domain as rows × columns (flat: 1 × numel)
  bool has_reduce = false, flat = false;
  int num_stages = 0;  // 1 + the largest level of a full or row value
};

// Fills *a; false (with *why) when the graph is outside the fused subset.
bool classify(const Graph& g, Analysis* a, std::string* why);

}  // namespace hp::fusion
