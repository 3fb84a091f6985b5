#include "hp/nn/module.h"

#include "hp/fusion/patterns.h"
#include "hp/ops/ops.h"

namespace hp::nn {

void Module::collect(const std::string& prefix, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  collect("", out);
  return out;
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (const auto& [name, child] : children_)
    child->collect_modules(prefix.empty() ? name : prefix + "." + name, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

void Module::set_trace_names(const std::string& prefix) {
  for (const auto& [fqn, m] : named_modules()) {
    const std::string name = prefix.empty() || fqn.empty() ? prefix + fqn : prefix + "." + fqn;
    m->trace_name_ = name.empty() ? nullptr : profiler::intern(name);
  }
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Greedy matching with one backtrack point (the last '*'): linear in practice.
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

Tensor Module::parameter(const std::string& fqn) const {
  for (auto& [name, t] : named_parameters())
    if (name == fqn) return t;
  HP_THROW(ValueError, "module", "no parameter named '", fqn, "'");
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  for (auto& [n, child] : children_)
    if (n == name) {
      child = std::move(m);
      return;
    }
  HP_THROW(ValueError, "module", "no child module named '", name, "'");
}

void Module::remove_child(const std::string& name) {
  for (auto it = children_.begin(); it != children_.end(); ++it)
    if (it->first == name) {
      children_.erase(it);
      return;
    }
  HP_THROW(ValueError, "module", "no child module named '", name, "'");
}

Tensor Module::set_parameter(const std::string& name, Tensor t) {
  for (auto& [n, p] : params_)
    if (n == name) {
      if (!t.requires_grad()) t.requires_grad_();
      p = t;
      return t;
    }
  HP_THROW(ValueError, "module", "no parameter named '", name, "' to replace");
}

void Module::add_forward_wrapper(ForwardWrapper w) {
  if (!wrapper_) {
    wrapper_ = std::move(w);
    return;
  }
  wrapper_ = [outer = std::move(w), prev = std::move(wrapper_)](const Tensor& x,
                                                                const ForwardFn& inner) {
    return outer(x, [prev, inner](const Tensor& y) { return prev(y, inner); });
  };
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  for (auto& [n, p] : params_)
    if (n == name) HP_THROW(ValueError, "module", "parameter '", name, "' registered twice");
  if (!t.requires_grad()) t.requires_grad_();
  params_.emplace_back(name, t);
  return t;
}

namespace {
thread_local bool skip_init_ = false;

Tensor init_normal(const Shape& shape, DType dt, double std) {
  if (skip_init_) return empty(shape, dt);
  return randn(shape, DType::f32, 0.0, std).to(dt);
}
}  // namespace

SkipInitGuard::SkipInitGuard() : prev_(skip_init_) {
  skip_init_ = true;
}
SkipInitGuard::~SkipInitGuard() {
  skip_init_ = prev_;
}
bool init_skipped() {
  return skip_init_;
}

Linear::Linear(int64_t in, int64_t out, bool has_bias, DType dt, double init_std) {
  weight = register_parameter("weight", init_normal({out, in}, dt, init_std));
  if (has_bias) bias = register_parameter("bias", zeros({out}, dt));
}

Tensor Linear::forward(const Tensor& x) const {
  return wrapped_forward(x, [this](const Tensor& t) { return gemm(t, weight, bias); });
}

Tensor Linear::gemm(const Tensor& x, const Tensor& w, const Tensor& b) const {
  return kernel_ ? kernel_(x, w, b) : linear(x, w, b);
}

Embedding::Embedding(int64_t num, int64_t dim, DType dt, double init_std) {
  weight = register_parameter("weight", init_normal({num, dim}, dt, init_std));
}

Tensor Embedding::forward(const Tensor& ids) const {
  return wrapped_forward(ids, [this](const Tensor& t) { return embedding(weight, t); });
}

RMSNorm::RMSNorm(int64_t dim, double eps_, DType dt) : eps(eps_) {
  weight = register_parameter("weight", ones({dim}, dt));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  // fusion::rms_norm is hp::rms_norm unless the fusion mode is lazy (fusion/patterns.h).
  return wrapped_forward(x, [this](const Tensor& t) { return fusion::rms_norm(t, weight, eps); });
}

std::pair<Tensor, Tensor> RMSNorm::add_forward(const Tensor& x, const Tensor& r) const {
  if (has_forward_wrapper()) {
    Tensor h = add(x, r);
    return {h, forward(h)};
  }
  // No wrapper: inner runs once, here, so it may capture by reference; the module's profiler
  // event then covers the add as well.
  Tensor h;
  Tensor y = wrapped_forward(x, [&](const Tensor& in) {
    auto [sum, normed] = fusion::add_rms_norm(in, r, weight, eps);
    h = sum;
    return normed;
  });
  return {h, y};
}

}  // namespace hp::nn
