// Modules: named parameters and submodules with fully-qualified names
// ("layers.0.mlp.up_proj.weight").
//
// FQNs are what sharding plans, checkpoints, optimizer groups and low-precision configs match
// against, so every parameter lives at a stable path. Parameters are ordinary leaf tensors with
// requires_grad; a module that replaces another (e.g. an MX linear) takes the same parameter
// objects.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hp/core/profiler.h"
#include "hp/core/tensor.h"

namespace hp::nn {

using NamedTensor = std::pair<std::string, Tensor>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter below this module, depth first in registration order, names joined by '.'.
  std::vector<NamedTensor> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Direct children in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }
  // This module ("") and every module below it, depth first in registration order, with FQNs
  // relative to this one ("layers.0.mlp"): what sharding plans, low precision and recompute match.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // The parameter at an FQN; throws ValueError naming it when absent.
  Tensor parameter(const std::string& fqn) const;
  int64_t num_parameters() const;
  // Replaces child `name` (e.g. a Linear by its MX version); throws if there is no such child.
  // Parents that call a typed member pointer (GatedMLP::gate_proj) keep calling the old object, so
  // changes that must reach forward go through set_parameter / set_forward_wrapper instead.
  void replace_child(const std::string& name, std::shared_ptr<Module> m);
  // Unregisters child `name` (its parameters leave named_parameters()); throws if there is none.
  // Parents holding a typed pointer to it must drop it too (MoEBlock::keep_local_experts).
  void remove_child(const std::string& name);
  // Replaces this module's own parameter `name` by t (same slot and order; t becomes a trainable
  // leaf), e.g. by its local shard; throws ValueError naming it when absent. Returns t so typed
  // members can follow: `lin.weight = lin.set_parameter("weight", shard)`.
  Tensor set_parameter(const std::string& name, Tensor t);

  // Single-tensor forward of this module without the wrapper (x → y).
  using ForwardFn = std::function<Tensor(const Tensor&)>;
  // Runs instead of a single-tensor forward (Linear, RMSNorm, Embedding): gets the input and the
  // module's own computation, so tensor-parallel styles wrap redistributions around a module that
  // parents already hold, without replacing it. One wrapper per module; null removes it.
  using ForwardWrapper = std::function<Tensor(const Tensor& x, const ForwardFn& inner)>;
  void set_forward_wrapper(ForwardWrapper w) { wrapper_ = std::move(w); }
  // Composes: w runs outermost and gets the previously installed wrapper (around the module's own
  // computation) as its inner, so independent features (recompute, FSDP gathering, low precision)
  // each add theirs without knowing about the others.
  void add_forward_wrapper(ForwardWrapper w);
  bool has_forward_wrapper() const { return static_cast<bool>(wrapper_); }

  // inner(x), or the wrapper around it when one is set. Parents call it for children whose forward
  // takes more than a tensor (DecoderLayer → attention with its context); inner must own what it
  // captures, since a recompute wrapper keeps it and runs it again in backward.
  // While the profiler records, the call is one "module" event named by the trace name.
  Tensor wrapped_forward(const Tensor& x, const ForwardFn& inner) const {
    const profiler::Scope scope(profiler::Category::module, trace_name_);
    return wrapper_ ? wrapper_(x, inner) : inner(x);
  }
  // Names this module and every one below it by FQN (below `prefix`) in profiler traces; until
  // then their forwards are not traced as modules. Cheap; safe to call again.
  void set_trace_names(const std::string& prefix = "");

 protected:
  // Marks t as a trainable leaf and records it under `name`.
  Tensor register_parameter(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, std::vector<NamedTensor>& out) const;
  void collect_modules(const std::string& prefix,
                       std::vector<std::pair<std::string, Module*>>& out);
  std::vector<NamedTensor> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  ForwardWrapper wrapper_;
  const char* trace_name_ = nullptr;  // profiler::intern'ed FQN; null = not traced
};

// While alive, Linear and Embedding built on this thread leave their weights uninitialized instead
// of drawing them (the draw costs seconds per 100M parameters): for modules whose weights are
// loaded right after construction (models::load_model).
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool prev_;
};
// True inside a SkipInitGuard on this thread.
bool init_skipped();

// FQN glob, whole string: '*' matches any (possibly empty) run of characters, dots included; '?'
// matches one character ("*.mlp.*" matches "model.layers.0.mlp.up_proj").
bool glob_match(std::string_view pattern, std::string_view text);

// The GEMM of a linear layer: y [..., out] = x [..., in] · w [out, in]ᵀ + b [out] (b may be
// undefined). Must be differentiable in x, w and b.
using LinearKernel = std::function<Tensor(const Tensor& x, const Tensor& w, const Tensor& b)>;

// y = x · weightᵀ (+ bias); weight [out, in]. forward runs the forward wrapper when one is set;
// subclasses that override it bypass the wrapper (sharding plans accept plain Linear only).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, DType dt = DType::f32, double init_std = 0.02);
  virtual Tensor forward(const Tensor& x) const;
  // Replaces the GEMM (ops linear by default; null restores it), e.g. by mx::mx_linear. A kernel
  // rather than a forward wrapper: wrappers nest around the module's computation, and a
  // tensor-parallel wrapper redistributes x and may compute the GEMM itself (RowwiseParallel adds
  // the bias after its reduction), so low precision must swap the innermost GEMM whatever wraps it.
  void set_kernel(LinearKernel k) { kernel_ = std::move(k); }
  bool has_kernel() const { return static_cast<bool>(kernel_); }
  // x · wᵀ + b through the kernel: the module's own computation, and what wrappers that compute
  // the GEMM themselves call (with this module's possibly sharded weight).
  Tensor gemm(const Tensor& x, const Tensor& w, const Tensor& b) const;
  Tensor weight, bias;

 private:
  LinearKernel kernel_;
};

// Expert GEMMs over tokens sorted by expert: y [T, out] whose rows [ends[e-1], ends[e]) are those
// rows of x_sorted [T, in] · w[e]ᵀ, for w [E, out, in] and group_ends i32 [E] (non-decreasing,
// last <= T; rows past it give 0). Differentiable in x_sorted and w (mx::mx_grouped_experts).
using GroupedKernel =
    std::function<Tensor(const Tensor& x_sorted, const Tensor& group_ends, const Tensor& w)>;

// Implemented by modules whose experts run as grouped GEMMs (models::MoEBlock), so layers below
// the model (mx/convert.h) can swap those GEMMs without knowing the module's type. With a kernel
// set, the module runs each expert projection as one kernel call over its experts' stacked
// weights; null restores its default path.
class GroupedExperts {
 public:
  virtual ~GroupedExperts() = default;
  virtual void set_grouped_kernel(GroupedKernel k) = 0;
  virtual bool has_grouped_kernel() const = 0;
  // The child holding the per-expert modules, whose Linears the grouped path reads but never calls.
  virtual std::string experts_child() const { return "experts"; }
};

// ids → rows of weight [num, dim].
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, DType dt = DType::f32, double init_std = 0.02);
  Tensor forward(const Tensor& ids) const;
  Tensor weight;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, DType dt = DType::f32);
  Tensor forward(const Tensor& x) const;
  // A residual add and this norm: {h = x + r, forward(h)} (x, r [..., dim]). One fused region
  // under lazy fusion (fusion::add_rms_norm) unless a wrapper (a tensor-parallel layout,
  // recompute) must see h.
  std::pair<Tensor, Tensor> add_forward(const Tensor& x, const Tensor& r) const;
  Tensor weight;
  double eps;
};

}  // namespace hp::nn
