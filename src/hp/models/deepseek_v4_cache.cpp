// DeepSeek-V4 generation caches (transformers' DeepseekV4HCACache / DeepseekV4CSACache): the
// sliding window's last K=V rows, each compressor's rolling state and the entries it has emitted,
// so that a decoding step costs O(window + entries). Plan and shapes in deepseek_v4.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "hp/autograd/grad_mode.h"
#include "hp/models/deepseek_v4.h"
#include "hp/models/sink_attention.h"
#include "hp/ops/ops.h"

namespace hp::models {

namespace {

// LayerCache::state of a compressed layer: the attention's compressor and (CSA) the indexer's.
struct V4LayerState : LayerState {
  V4CompressorState kv, index;
};

}  // namespace

namespace detail {

Tensor causal_entry_bias(int64_t t, int64_t n, int64_t rate, int64_t start) {
  std::vector<double> m(static_cast<size_t>(t * n), -std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t w = 0; w < std::min(n, (start + i + 1) / rate); ++w)
      m[static_cast<size_t>(i * n + w)] = 0;
  return from_vector(m, {t, n}, DType::f32);
}

}  // namespace detail

Tensor V4Compressor::step(const Tensor& x, V4CompressorState& s, RotaryTables& rope) const {
  const int64_t b = x.size(0), m = rate_;
  Tensor kv = kv_proj->forward(x), gate = gate_proj->forward(x);  // [B, T, width]
  if (s.kv.defined()) {
    // The incomplete window's earlier tokens first: [B, buffered + T, width].
    kv = cat({s.kv, kv}, 1);
    gate = cat({s.gate, gate}, 1);
  }
  const int64_t usable = kv.size(1) / m * m;
  if (usable > 0) {
    // Window w of this call starts at absolute position (emitted + w) · rate.
    const int64_t first = s.entries.defined() ? s.entries.size(1) * m : 0;
    auto [cos, sin] = rope.get(first, usable, DType::f32);
    Tensor last_kv, last_gate;
    const Tensor e =
        pool(narrow(kv, 1, 0, usable), narrow(gate, 1, 0, usable), s.prev_kv, s.prev_gate,
             slice(cos, 0, 0, usable, m), slice(sin, 0, 0, usable, m), &last_kv, &last_gate);
    s.entries = s.entries.defined() && s.entries.size(1) > 0 ? cat({s.entries, e}, 1) : e;
    if (overlap_) {
      s.prev_kv = last_kv;
      s.prev_gate = last_gate;
    }
  } else if (!s.entries.defined()) {
    s.entries = zeros({b, 0, dim_}, x.dtype());
  }
  const int64_t rest = kv.size(1) - usable;
  s.kv = rest > 0 ? contiguous(narrow(kv, 1, usable, rest)) : Tensor();
  s.gate = rest > 0 ? contiguous(narrow(gate, 1, usable, rest)) : Tensor();
  return s.entries;
}

Tensor DeepseekV4Attention::forward_cached(const Tensor& x, AttentionContext& ctx) const {
  LayerCache& lc = *ctx.cache;
  const int64_t b = x.size(0), t = x.size(1), start = ctx.start;
  RotaryTables& rope = type_ == kSlidingAttention ? main_rope_ : compress_rope_;
  auto [cos, sin] = rope.get(start, t, DType::f32);  // [T, r / 2] at positions start + [0, T)
  const Projected p = project(x, cos, sin);

  // Keys: the cached rows (the last window − 1 tokens, or fewer) then this call's [B, 1, S, d].
  const int64_t past = lc.k.defined() ? lc.k.size(2) : 0;
  HP_CHECK(past <= start, "deepseek_v4 cache holds ", past, " rows at position ", start);
  Tensor kv = past > 0 ? cat({lc.k, p.kv}, 2) : p.kv;
  Tensor bias = sliding_window_bias(t, window_, past);  // [T, S]
  const int64_t s = kv.size(2), keep = window_ > 0 ? std::min(s, window_ - 1) : s;
  lc.k = keep > 0 ? contiguous(narrow(kv, 2, s - keep, keep)) : Tensor();

  if (kv_compressor) {
    if (!lc.state) lc.state = std::make_shared<V4LayerState>();
    auto* st = dynamic_cast<V4LayerState*>(lc.state.get());
    HP_CHECK(st, "deepseek_v4: layer cache holds another architecture's state");
    const Tensor entries = kv_compressor->step(x, st->kv, rope);  // [B, n, d]
    // The indexer's compressor keeps its own state in step with the attention's (no gradient,
    // as select).
    Tensor keys;
    if (indexer) {
      autograd::NoGradGuard no_grad;
      keys = indexer->compressor->step(x, st->index, rope);  // [B, n, Di]
    }
    const int64_t n = entries.size(1);
    if (n > 0) {
      const Tensor block =
          indexer ? indexer->select_from(x, p.q_res, keys, cos, sin, start)         // [B, T, n]
                  : detail::causal_entry_bias(t, n, kv_compressor->rate(), start);  // [T, n]
      kv = cat({kv, unsqueeze(entries, 1)}, 2);  // [B, 1, S + n, d]
      bias = cat({expand(bias, {b, t, s}), expand(block, {b, t, n})}, -1);
    }
  }
  if (bias.dim() == 3) bias = unsqueeze(bias, 1);  // [B, 1, T, S (+ n)]
  return project_out(biased_attention(p.q, kv, kv, bias, sinks, 1.0 / std::sqrt(double(head_dim_))),
                     cos, sin);
}

}  // namespace hp::models
