#include "hp/autograd/engine.h"

#include <atomic>
#include <map>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "hp/autograd/grad_mode.h"
#include "hp/core/allocator.h"
#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/kernels/cpu/elementwise.h"

namespace hp::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local std::vector<SavedTensorHooks> t_hooks;
std::atomic<uint64_t> g_sequence{0};
// Nesting depth of backward() on this thread, and the callbacks for the outermost one.
thread_local int t_backward_depth = 0;
thread_local std::vector<std::function<void()>> t_callbacks;

// Post-accumulate-grad hooks by leaf; each entry holds its leaf, so an address is never reused
// while hooks are registered for it.
struct LeafHook {
  uint64_t id;
  std::shared_ptr<detail::TensorImpl> leaf;
  PostAccumulateGradHook fn;
};
std::mutex g_hooks_mu;
std::map<const detail::TensorImpl*, std::vector<LeafHook>> g_hooks;
std::atomic<uint64_t> g_next_hook_id{1};
std::atomic<size_t> g_num_hooks{0};

void run_post_accumulate_hooks(const std::shared_ptr<detail::TensorImpl>& var) {
  if (g_num_hooks.load() == 0) return;
  std::vector<PostAccumulateGradHook> fns;
  {
    std::lock_guard<std::mutex> lk(g_hooks_mu);
    auto it = g_hooks.find(var.get());
    if (it == g_hooks.end()) return;
    for (const auto& h : it->second) fns.push_back(h.fn);
  }
  const Tensor leaf(var);
  for (const auto& fn : fns) fn(leaf);
}

// A node built by `record`: the op's backward as a closure.
class LambdaNode final : public Node {
 public:
  LambdaNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (!fn_)
      HP_THROW(ValueError, "autograd", "backward through ", name_,
               " a second time: its saved tensors were freed (pass retain_graph=true)");
    return fn_(grads);
  }
  void release_saved() override { fn_ = nullptr; }
  std::string name() const override { return name_; }

 private:
  const char* name_;
  BackwardFn fn_;
};

Tensor add_grads(const Tensor& a, const Tensor& b) {
  return kernels::elementwise(kernels::EwOp::add, a, b, a.dtype());
}
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  auto var = var_.lock();
  if (!var || !grads[0].defined()) return {};
  Tensor g = std::move(grads[0]);
  HP_CHECK(g.shape() == var->shape, "gradient ", shape_str(g.shape()), " for a leaf of shape ",
           shape_str(var->shape));
  // A leaf's .grad counts as gradient memory (the budget report's "grads"), also when the
  // backward temporary it was computed in is kept.
  const MemCategoryScope as_grads(MemCategory::grads);
  if (g.dtype() != var->dtype) g = g.to(var->dtype);
  if (!var->grad) {
    // Keep the incoming buffer only when nothing else can see it; otherwise own a copy, so that
    // in-place updates of .grad (clipping, zeroing) never touch another tensor.
    const bool unique = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1;
    if (unique && g.is_contiguous()) g.storage()->set_category(MemCategory::grads);
    var->grad = (unique && g.is_contiguous() ? g : g.clone()).impl_ptr();
  } else {
    var->grad = add_grads(Tensor(var->grad), g).impl_ptr();
  }
  run_post_accumulate_hooks(var);
  return {};
}

uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  if (!leaf.defined() || !leaf.is_leaf())
    HP_THROW(ValueError, "autograd", "post-accumulate-grad hook on a non-leaf tensor ",
             leaf.desc());
  const uint64_t id = g_next_hook_id.fetch_add(1);
  std::lock_guard<std::mutex> lk(g_hooks_mu);
  g_hooks[leaf.impl()].push_back({id, leaf.impl_ptr(), std::move(hook)});
  g_num_hooks.fetch_add(1);
  return id;
}

void remove_post_accumulate_grad_hook(uint64_t id) {
  std::shared_ptr<detail::TensorImpl> leaf;  // released after the lock
  std::lock_guard<std::mutex> lk(g_hooks_mu);
  for (auto it = g_hooks.begin(); it != g_hooks.end(); ++it) {
    auto& v = it->second;
    for (size_t k = 0; k < v.size(); ++k)
      if (v[k].id == id) {
        leaf = std::move(v[k].leaf);
        v.erase(v.begin() + static_cast<std::ptrdiff_t>(k));
        if (v.empty()) g_hooks.erase(it);
        g_num_hooks.fetch_sub(1);
        return;
      }
  }
}

void queue_callback(std::function<void()> fn) {
  if (t_backward_depth == 0)
    HP_THROW(ValueError, "autograd", "queue_callback outside a backward");
  t_callbacks.push_back(std::move(fn));
}

SavedTensorHooksGuard::SavedTensorHooksGuard(SavedTensorHooks hooks) {
  t_hooks.push_back(std::move(hooks));
}
SavedTensorHooksGuard::~SavedTensorHooksGuard() { t_hooks.pop_back(); }

SavedTensor::SavedTensor(const Tensor& t) : defined_(t.defined()) {
  if (!defined_) return;
  const Tensor d = t.detach();
  for (auto h = t_hooks.rbegin(); h != t_hooks.rend(); ++h) {
    std::any packed = h->pack(d);
    if (!packed.has_value()) continue;  // declined: the enclosing hooks are asked
    packed_ = std::move(packed);
    unpack_ = h->unpack;
    return;
  }
  plain_ = d;
}

Tensor SavedTensor::unpack() const {
  if (!defined_) return Tensor();
  return unpack_ ? unpack_(packed_) : plain_;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.impl()->output_nr};
  auto acc = t.impl()->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->output_meta.push_back({t.shape(), t.dtype()});
    acc->sequence_nr = g_sequence.fetch_add(1);
    t.impl()->grad_accumulator = acc;
  }
  return {acc, 0};
}

void record(const char* name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardFn backward, bool force) {
  if (!(force ? t_grad_enabled : needs_grad(inputs))) return;
  auto node = std::make_shared<LambdaNode>(name, std::move(backward));
  node->sequence_nr = g_sequence.fetch_add(1);
  if (profiler::recording()) node->trace_module = profiler::current_module();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& out = outputs[k];
    HP_CHECK(out.defined() && !out.grad_fn(), "output ", k, " of ", name, " is already recorded");
    out.impl()->grad_fn = node;
    out.impl()->output_nr = static_cast<uint32_t>(k);
    out.impl()->requires_grad = is_floating(out.dtype());
    node->output_meta.push_back({out.shape(), out.dtype()});
  }
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  if (!grads.empty() && grads.size() != roots.size())
    HP_THROW(ValueError, "autograd", roots.size(), " roots but ", grads.size(), " gradients");
  ++t_backward_depth;
  struct Exit {
    ~Exit() {
      if (--t_backward_depth == 0) t_callbacks.clear();
    }
  } exit_depth;
  std::vector<Edge> root_edges;
  for (size_t i = 0; i < roots.size(); ++i) {
    Edge e = gradient_edge(roots[i]);
    if (!e.node)
      HP_THROW(ValueError, "autograd", "root ", i, " (", roots[i].desc(),
               ") does not require grad and has no grad_fn");
    root_edges.push_back(e);
  }
  // Dependency counts over the reachable graph.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& e : root_edges)
    if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto accumulate = [&](Node* n, uint32_t slot, Tensor g) {
    auto& buf = buffers[n];
    if (buf.empty()) buf.resize(n->output_meta.size());
    buf[slot] = buf[slot].defined() ? add_grads(buf[slot], g) : std::move(g);
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      if (roots[i].numel() != 1)
        HP_THROW(ValueError, "autograd", "backward on a non-scalar ", roots[i].desc(),
                 " needs an explicit gradient");
      g = ones(roots[i].shape(), roots[i].dtype());
    } else if (g.shape() != roots[i].shape()) {
      HP_THROW(ValueError, "autograd", "gradient ", g.desc(), " for root ", roots[i].desc());
    }
    accumulate(root_edges[i].node.get(), root_edges[i].input_nr, g);
  }
  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>,
                      decltype(later_first)>
      ready(later_first);
  std::unordered_set<Node*> queued;
  for (auto& e : root_edges)
    if (deps[e.node.get()] == 0 && queued.insert(e.node.get()).second) ready.push(e.node);

  NoGradGuard no_grad;
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> in = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    bool any = false;
    for (auto& g : in) any = any || g.defined();
    std::vector<Tensor> out;
    if (any) {
      for (size_t k = 0; k < in.size(); ++k)
        if (!in[k].defined()) in[k] = zeros(node->output_meta[k].first, node->output_meta[k].second);
      {
        const profiler::Scope scope(
            profiler::Category::backward, [&] { return node->name(); }, node->trace_module);
        out = node->apply(std::move(in));
      }
      if (!retain_graph) node->release_saved();
      HP_CHECK(out.empty() || out.size() == node->next_edges.size(), node->name(), " returned ",
               out.size(), " gradients for ", node->next_edges.size(), " inputs");
    }
    for (size_t j = 0; j < node->next_edges.size(); ++j) {
      const Edge& e = node->next_edges[j];
      if (!e.node) continue;
      if (j < out.size() && out[j].defined()) {
        const auto& meta = e.node->output_meta[e.input_nr];
        if (out[j].shape() != meta.first)
          HP_THROW(InternalError, "autograd", node->name(), " produced gradient ", out[j].desc(),
                   " for input ", j, " of shape ", shape_str(meta.first));
        accumulate(e.node.get(), e.input_nr, std::move(out[j]));
      }
      if (--deps[e.node.get()] == 0) ready.push(e.node);
    }
  }
  if (t_backward_depth == 1) {
    // Index loop: a callback may queue more.
    for (size_t k = 0; k < t_callbacks.size(); ++k) {
      auto fn = std::move(t_callbacks[k]);
      fn();
    }
    t_callbacks.clear();
  }
}

}  // namespace hp::autograd

namespace hp {
void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}
}  // namespace hp
