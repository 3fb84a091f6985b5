// Rotary position tables for a model config: HF's inv_freq formulas (modeling_rope_utils.py:
// default, linear, dynamic NTK, YaRN, Llama-3) and cached cos/sin tables.
#pragma once

#include <utility>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/models/hf/config.h"

namespace hp::models {

struct RopeFrequencies {
  std::vector<double> inv_freq;   // [dim / 2]
  double attention_factor = 1.0;  // multiplies cos and sin (YaRN)
};

// inv_freq for rotary dim `dim` (head_dim, or qk_rope_head_dim for MLA). `seq_len` matters only
// for "dynamic" (NTK base stretched once seq_len exceeds max_position_embeddings). Values are
// rounded to f32 as transformers computes them.
RopeFrequencies rope_frequencies(const ModelConfig& c, int64_t dim, int64_t seq_len = 0);

// cos/sin [T, dim/2] for positions [start, start + T), cached for the longest span asked so far.
class RotaryTables {
 public:
  RotaryTables(const ModelConfig& c, int64_t dim) : config_(c), dim_(dim) {}
  int64_t dim() const { return dim_; }
  std::pair<Tensor, Tensor> get(int64_t start, int64_t len, DType dt);

 private:
  ModelConfig config_;
  int64_t dim_;
  int64_t cached_len_ = 0;
  DType cached_dtype_ = DType::f32;
  Tensor cos_, sin_;  // [cached_len_, dim / 2]
};

// Partial rotary embedding: rotary_embedding (ops.h) of the trailing 2 · cos.size(-1) channels of
// x, the leading ones passed through (DeepSeek-V4 lays each head out as [nope | rope]).
Tensor rotate_trailing(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved,
                       int64_t seq_dim);

}  // namespace hp::models
