#include "hp/models/context_plan.h"

#include <algorithm>

#include "hp/ops/ops.h"
#include "hp/parallel/context_parallel.h"

namespace hp::models {

namespace {

// This rank's spans of x along `dim`.
Tensor spans_of(const ContextSplit& cp, const Tensor& x, int64_t dim) {
  return parallel::context_shard(x, dim, cp.degree, cp.index);
}

// The whole row's tables, then this rank's rows of them: frequencies that depend on the length
// (dynamic NTK) see the row's length, as on one rank.
std::pair<Tensor, Tensor> span_tables(int64_t degree, int64_t index, RotaryTables& rope,
                                      int64_t start, int64_t t, int64_t row_length) {
  const int64_t len = t * degree;
  auto [cos, sin] = rope.get(start, std::max(len, row_length), DType::f32);
  return {parallel::context_shard(narrow(cos, 0, 0, len), 0, degree, index),
          parallel::context_shard(narrow(sin, 0, 0, len), 0, degree, index)};
}

Tensor span_attention(const SpanAttention& attention, const Tensor& q, const Tensor& k,
                      const Tensor& v, bool causal, double scale, const Tensor& segments,
                      int64_t window) {
  if (window > 0)
    HP_THROW(ValueError, "models", "sliding-window attention (window ", window,
             ") under context parallelism is not implemented; run with context degree 1");
  if (!causal || q.size(2) != k.size(2))
    HP_THROW(ValueError, "models", "context parallelism runs causal attention over whole rows ",
             "(training); got q ", q.desc(), ", k ", k.desc(), " (incremental decoding?)");
  return attention(q, k, v, scale, segments);
}

int64_t count_targets(const Tensor& x) {
  int64_t count = 0;
  for (double v : contiguous(x).to_vector()) count += v != -100;
  return count;
}

Tensor span_loss(CausalLM& model, const Tensor& ids, const Tensor& labels,
                 const PackedDocuments& docs) {
  const ContextSplit& cp = *model.context_split();
  const int64_t b = ids.size(0), t = ids.size(1), n = t - 1;
  // The documents of the rows that predict ([B, n]); positions of this rank's tokens of them.
  AttentionContext doc_ctx = model.document_context(ids, docs);
  // Document ids count the restarts before each token, so the first n ids of a row are its
  // first n tokens' ids: a narrowed copy, not a second pass.
  if (doc_ctx.segments.defined()) doc_ctx.segments = contiguous(narrow(doc_ctx.segments, 1, 0, n));
  if (doc_ctx.positions.defined())
    doc_ctx.positions = contiguous(spans_of(cp, narrow(docs.positions, 1, 0, n), 1));
  const Tensor in = spans_of(cp, narrow(ids, 1, 0, n), 1);
  const Tensor all_targets = narrow(labels, 1, 1, n);
  const Tensor targets = reshape(contiguous(spans_of(cp, all_targets, 1)), {b * (n / cp.degree)});
  const int64_t local = count_targets(targets), total = count_targets(all_targets);
  const Tensor logits = flat_f32(model.head(model.run(in, nullptr, &cp, t, &doc_ctx)));
  // Σ = mean · count; a rank whose targets are all ignored adds a zero that still reaches its
  // parameters (every rank runs the same backward).
  Tensor l = local > 0 ? mul(model.mean_cross_entropy(logits, targets),
                             double(local) / double(std::max<int64_t>(total, 1)))
                       : mul(sum(logits), 0.0);
  return model.add_aux_losses(l, &cp);
}

}  // namespace

ContextSplit context_parallel_split(int64_t degree, int64_t index, SpanAttention attention,
                                    RankSum sum) {
  ContextSplit split;
  split.degree = degree;
  split.index = index;
  split.rotary = [degree, index](RotaryTables& rope, int64_t start, int64_t t, int64_t row_length) {
    return span_tables(degree, index, rope, start, t, row_length);
  };
  split.attention = [attention = std::move(attention)](const Tensor& q, const Tensor& k,
                                                       const Tensor& v, bool causal, double scale,
                                                       const Tensor& segments, int64_t window) {
    return span_attention(attention, q, k, v, causal, scale, segments, window);
  };
  split.sum = std::move(sum);
  split.loss = span_loss;
  return split;
}

}  // namespace hp::models
