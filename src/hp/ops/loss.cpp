// cross_entropy fused with log_softmax (kernels/cpu/softmax.h).
//
// Forward keeps only the per-row logsumexp [N] for backward — never an [N, V] probability tensor;
// backward recomputes softmax − onehot row by row from the saved logits.
//
// An all-ignored batch with reduction "mean" gives loss 0 and a zero gradient (torch gives NaN, a
// 0/0): a data-parallel rank whose micro-batch happens to be all padding must not poison the step.
#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/kernels/cpu/softmax.h"
#include "hp/kernels/cpu/typed.h"
#include "hp/ops/dim_move.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

enum class Reduction { mean, sum, none };

Reduction parse_reduction(const std::string& s) {
  if (s == "mean") return Reduction::mean;
  if (s == "sum") return Reduction::sum;
  if (s == "none") return Reduction::none;
  HP_THROW(ValueError, "cross_entropy", "reduction '", s, "' is not one of mean, sum, none");
}

// targets [N] as i64 values, each in [0, V) or equal to ignore_index.
std::vector<int64_t> checked_targets(const Tensor& targets, int64_t n, int64_t v, int64_t ignore) {
  if (!targets.defined() || (targets.dtype() != DType::i64 && targets.dtype() != DType::i32))
    HP_THROW(ValueError, "cross_entropy", "targets must be i64 or i32, got ",
             targets.defined() ? targets.desc() : "undefined");
  if (targets.dim() != 1 || targets.shape()[0] != n)
    HP_THROW(ValueError, "cross_entropy", "targets ", targets.desc(), " do not match logits rows ",
             n);
  const Tensor t = targets.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t x = kernels::detail::load_index(t.raw_data(), t.dtype(), i);
    if (x != ignore && (x < 0 || x >= v))
      HP_THROW(IndexError, "cross_entropy", "target ", x, " at row ", i, " is out of range [0, ", v,
               ") (ignore_index ", ignore, ")");
    out[static_cast<size_t>(i)] = x;
  }
  return out;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     const std::string& reduction_name) {
  HP_PROFILE_OP("cross_entropy");
  detail::check_float_tensor(logits, "cross_entropy", "logits");
  if (logits.dim() != 2)
    HP_THROW(ValueError, "cross_entropy", "logits must be [N, V], got ", logits.desc());
  const Reduction reduction = parse_reduction(reduction_name);
  const int64_t n = logits.shape()[0], v = logits.shape()[1];
  if (v == 0 && n > 0)
    HP_THROW(ValueError, "cross_entropy", "logits ", logits.desc(), " have no classes");
  auto tv =
      std::make_shared<const std::vector<int64_t>>(checked_targets(targets, n, v, ignore_index));
  const Tensor x = logits.contiguous();  // [N, V]
  Tensor row_loss, lse;                  // [N] each, compute dtype
  kernels::cross_entropy_forward(x, *tv, ignore_index, &row_loss, &lse);
  int64_t count = 0;
  for (int64_t t : *tv) count += t != ignore_index;

  Tensor y;
  if (reduction == Reduction::none) {
    y = row_loss.dtype() == logits.dtype() ? row_loss : row_loss.to(logits.dtype());
  } else {
    // Fixed (row) order in f64: the same loss for any thread count.
    double total = 0;
    const std::vector<double> lv = row_loss.to_vector();
    for (double l : lv) total += l;
    if (reduction == Reduction::mean) total = count > 0 ? total / static_cast<double>(count) : 0.0;
    y = full({}, total, logits.dtype());
  }

  if (autograd::needs_grad({logits})) {
    autograd::SavedTensor sx(x), sl(lse);
    autograd::record("cross_entropy", {logits}, {y}, [=](const std::vector<Tensor>& g) {
      // Per-row scale of (softmax - onehot): g / count (mean), g (sum) or g[i] (none).
      std::vector<double> scale(static_cast<size_t>(n), 0.0);
      if (reduction == Reduction::none) {
        scale = g[0].to_vector();
      } else {
        double s = g[0].item();
        if (reduction == Reduction::mean) s = count > 0 ? s / static_cast<double>(count) : 0.0;
        scale.assign(static_cast<size_t>(n), s);
      }
      return std::vector<Tensor>{
          kernels::cross_entropy_backward(sx.unpack(), sl.unpack(), *tv, ignore_index, scale)};
    });
  }
  return y;
}

}  // namespace hp
