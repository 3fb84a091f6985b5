// The tape: graph nodes, saved tensors and the one way ops record themselves.
//
// Every differentiable op — built-in or custom (MX linear, MegaMoE, recompute) — goes through
// `record`: it attaches a node to the op's outputs whose backward maps output gradients to one
// gradient per input. Backward functions run with grad mode off (no higher-order gradients).
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hp/core/tensor.h"

namespace hp::autograd {

class Node;

// Where a gradient goes: input slot `input_nr` of `node`.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
};

class Node {
 public:
  virtual ~Node() = default;
  // One gradient per output in, one per next edge out (undefined = no gradient).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  // Drops saved state after a backward without retain_graph.
  virtual void release_saved() {}
  virtual std::string name() const = 0;

  std::vector<Edge> next_edges;
  // Shape and dtype of each output: missing output gradients are materialized as zeros.
  std::vector<std::pair<Shape, DType>> output_meta;
  // Creation order; backward runs later nodes first.
  uint64_t sequence_nr = 0;
  // FQN of the module whose forward recorded the node, set only while the profiler records: its
  // backward time goes to that layer (core/profiler.h).
  const char* trace_module = nullptr;
};

// Sink node of a leaf tensor: adds the incoming gradient into tensor.grad (in the leaf's dtype).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<detail::TensorImpl>& var) : var_(var) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<detail::TensorImpl> var_;
};

// --- saved tensors and their hooks (offload moves saved activations through these) ---

// pack may decline a tensor by returning an empty std::any: the next enclosing guard's hooks are
// asked, and a tensor no hooks take is saved as is. So hooks of different owners compose — FSDP
// takes views of its gathered parameters, activation offload the activations around them.
struct SavedTensorHooks {
  std::function<std::any(const Tensor&)> pack;
  std::function<Tensor(const std::any&)> unpack;
};

// Installs hooks for tensors saved while it lives, on this thread; the innermost guard is asked
// first.
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(SavedTensorHooks hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;
};

// A tensor kept for backward: packed through the active hooks at save time, unpacked on use.
// Saved as a detached alias, so saving an op's own output creates no reference cycle.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  Tensor unpack() const;
  bool defined() const { return defined_; }

 private:
  bool defined_ = false;
  Tensor plain_;
  std::any packed_;
  std::function<Tensor(const std::any&)> unpack_;
};

// --- recording ---

// True when grad mode is on and any input requires grad.
bool needs_grad(const std::vector<Tensor>& inputs);

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

// Attaches a node named `name` to `outputs`: backward(grad_outputs) must return one tensor per input
// (undefined where the input needs no gradient). Marks outputs requires_grad. No-op unless
// needs_grad(inputs) or `force` (recompute regions whose parameters are captured, not inputs).
void record(const char* name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardFn backward, bool force = false);

// The edge a gradient for `t` should flow to (grad_fn or the leaf's accumulator), or none.
Edge gradient_edge(const Tensor& t);

}  // namespace hp::autograd
