#include "hp/models/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "hp/autograd/grad_mode.h"
#include "hp/ops/ops.h"

namespace hp::models {

int64_t pick_token(const std::vector<float>& logits, const GenerateOptions& opt, double uniform) {
  if (logits.empty()) HP_THROW(ValueError, "generate", "empty logits");
  const auto argmax =
      static_cast<int64_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (opt.greedy || opt.temperature <= 0) return argmax;
  if (!(opt.top_p > 0 && opt.top_p <= 1))
    HP_THROW(ValueError, "generate", "top_p must be in (0, 1], got ", opt.top_p);
  // Softmax of logits / T in double, then the smallest prefix (by probability) whose mass reaches
  // top_p, renormalized.
  const double mx = logits[static_cast<size_t>(argmax)];
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp((logits[i] - mx) / opt.temperature);
  std::vector<int64_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
  });
  double mass = 0;
  size_t keep = 0;
  while (keep < order.size()) {
    mass += p[static_cast<size_t>(order[keep++])] / z;
    if (mass >= opt.top_p) break;
  }
  double target = uniform * mass * z, acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[static_cast<size_t>(order[i])];
    if (target < acc) return order[i];
  }
  return order[keep - 1];
}

namespace {

// The next token's logits for `input`: the new tokens after what the callee has cached
// (incremental), else the whole sequence.
using StepLogits = std::function<std::vector<float>(const Tensor& input)>;

std::vector<int64_t> generate_loop(const StepLogits& step_logits, bool incremental, int64_t vocab,
                                   const std::vector<int64_t>& prompt, const GenerateOptions& opt) {
  if (prompt.empty()) HP_THROW(ValueError, "generate", "empty prompt");
  for (int64_t id : prompt)
    if (id < 0 || id >= vocab)
      HP_THROW(ValueError, "generate", "prompt token ", id, " outside the vocabulary [0, ", vocab,
               ")");
  autograd::NoGradGuard no_grad;
  std::mt19937_64 rng(opt.seed);
  std::vector<int64_t> out;
  std::vector<double> ids(prompt.begin(), prompt.end());
  Tensor input = from_vector(ids, {1, static_cast<int64_t>(ids.size())}, DType::i64);
  for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
    const std::vector<float> logits = step_logits(input);  // [V] at the last position
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const int64_t next = pick_token(logits, opt, u);
    out.push_back(next);
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), next) != opt.stop_ids.end()) break;
    if (incremental) {
      input = from_vector({static_cast<double>(next)}, {1, 1}, DType::i64);
    } else {
      ids.push_back(static_cast<double>(next));
      input = from_vector(ids, {1, static_cast<int64_t>(ids.size())}, DType::i64);
    }
  }
  return out;
}

}  // namespace

std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& opt) {
  if (!opt.kv_cache)
    return generate_loop(
        [&](const Tensor& ids) {
          const Tensor all = model.forward(ids);  // [1, T, V]
          return narrow(all, 1, all.size(1) - 1, 1).contiguous().to_vector_as<float>();
        },
        false, model.config().vocab_size, prompt, opt);
  KVCache cache = model.new_cache();
  return generate_loop(
      [&](const Tensor& input) {
        const Tensor h = model.hidden_states(input, &cache);  // [1, T, hidden]
        // Only the last position's logits are needed: [1, hidden] · headᵀ → [1, V].
        const Tensor last = narrow(h, 1, h.size(1) - 1, 1).contiguous();
        return linear(reshape(last, {1, last.size(2)}), model.head_weight())
            .to_vector_as<float>();
      },
      true, model.config().vocab_size, prompt, opt);
}

std::vector<int64_t> generate(const SequenceLogits& logits, int64_t vocab,
                              const std::vector<int64_t>& prompt, const GenerateOptions& opt) {
  return generate_loop(logits, false, vocab, prompt, opt);
}

}  // namespace hp::models
