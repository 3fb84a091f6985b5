// `hp demo`: trains a tiny byte-level transformer language model on the bundled corpus with the
// core engine (ops + autograd + kernels) and prints the falling loss and a generated sample.
// It stands in for `hp train` until the trainer exists; the model code is deliberately local.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/ops/ops.h"

namespace hp::cli {

namespace {

struct DemoConfig {
  int64_t steps = 500, batch = 16, seq = 64;
  int64_t dim = 128, layers = 2, heads = 4, ffn = 352;
  double lr = 3e-3;
  uint64_t seed = 0;
  std::string data = HP_DATA_DIR "/kjv.txt";
};

struct Layer {
  Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
};

struct TinyLM {
  DemoConfig cfg;
  Tensor emb, final_norm;  // lm_head is tied to emb
  std::vector<Layer> layers;
  Tensor cos, sin;  // [seq, head_dim / 2]

  std::vector<Tensor> params() const {
    std::vector<Tensor> p = {emb, final_norm};
    for (const auto& l : layers)
      for (const Tensor& t : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.mlp_norm, l.w_gate, l.w_up, l.w_down})
        p.push_back(t);
    return p;
  }

  explicit TinyLM(const DemoConfig& c) : cfg(c) {
    auto init = [](Shape s, double std) {
      Tensor t = randn(s, DType::f32, 0.0, std);
      t.requires_grad_();
      return t;
    };
    auto ones_param = [](int64_t n) {
      Tensor t = ones({n});
      t.requires_grad_();
      return t;
    };
    const double std = 0.02, out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
    emb = init({256, c.dim}, std);
    final_norm = ones_param(c.dim);
    for (int64_t i = 0; i < c.layers; ++i) {
      layers.push_back({ones_param(c.dim), init({c.dim, c.dim}, std), init({c.dim, c.dim}, std),
                        init({c.dim, c.dim}, std), init({c.dim, c.dim}, out_std), ones_param(c.dim),
                        init({c.ffn, c.dim}, std), init({c.ffn, c.dim}, std), init({c.dim, c.ffn}, out_std)});
    }
    auto cs = rope_cos_sin(c.seq, c.dim / c.heads, 10000.0, DType::f32);
    cos = cs.first;
    sin = cs.second;
  }

  // ids [B, T] → logits [B·T, 256]
  Tensor forward(const Tensor& ids) const {
    const int64_t B = ids.size(0), T = ids.size(1), H = cfg.heads, D = cfg.dim / cfg.heads;
    Tensor cos_t = narrow(cos, 0, 0, T), sin_t = narrow(sin, 0, 0, T);
    Tensor x = embedding(emb, ids);  // [B, T, C]
    for (const auto& l : layers) {
      Tensor h = rms_norm(x, l.attn_norm);
      auto heads = [&](const Tensor& w) { return reshape(linear(h, w), {B, T, H, D}); };
      Tensor q = rotary_embedding(heads(l.wq), cos_t, sin_t, false, 1);
      Tensor k = rotary_embedding(heads(l.wk), cos_t, sin_t, false, 1);
      Tensor v = heads(l.wv);
      Tensor a = scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2), transpose(v, 1, 2));
      x = x + linear(reshape(transpose(a, 1, 2), {B, T, cfg.dim}), l.wo);
      Tensor m = rms_norm(x, l.mlp_norm);
      x = x + linear(silu(linear(m, l.w_gate)) * linear(m, l.w_up), l.w_down);
    }
    return reshape(linear(rms_norm(x, final_norm), emb), {B * T, 256});
  }
};

// AdamW on f32 parameters (decoupled weight decay on matrices only).
struct AdamW {
  double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  int64_t t = 0;
  std::vector<Tensor> m, v;

  void step(const std::vector<Tensor>& params, double lr_now) {
    ++t;
    if (m.empty())
      for (const Tensor& p : params) m.push_back(zeros(p.shape())), v.push_back(zeros(p.shape()));
    const double c1 = 1 - std::pow(b1, static_cast<double>(t)), c2 = 1 - std::pow(b2, static_cast<double>(t));
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].grad().defined()) continue;
      float* p = params[i].data<float>();
      Tensor grad = params[i].grad().contiguous();
      const float* g = grad.data<float>();
      float *mi = m[i].data<float>(), *vi = v[i].data<float>();
      const double decay = params[i].dim() >= 2 ? wd : 0.0;
      for (int64_t j = 0; j < params[i].numel(); ++j) {
        mi[j] = static_cast<float>(b1 * mi[j] + (1 - b1) * g[j]);
        vi[j] = static_cast<float>(b2 * vi[j] + (1 - b2) * g[j] * g[j]);
        double update = (mi[j] / c1) / (std::sqrt(vi[j] / c2) + eps) + decay * p[j];
        p[j] = static_cast<float>(p[j] - lr_now * update);
      }
      params[i].zero_grad();
    }
  }
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError{"cannot read corpus '" + path + "'"};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A [B, T+1] batch of byte windows at Philox-drawn offsets (deterministic in seed and step).
Tensor sample_batch(const std::string& text, int64_t B, int64_t T, uint64_t seed, int64_t step) {
  Tensor ids = empty({B, T + 1}, DType::i64);
  int64_t* p = ids.data<int64_t>();
  const uint64_t span = text.size() - static_cast<uint64_t>(T) - 1;
  for (int64_t b = 0; b < B; ++b) {
    auto r = philox4x32(static_cast<uint64_t>(step * B + b), 1, seed);
    uint64_t start = ((static_cast<uint64_t>(r[0]) << 32) | r[1]) % span;
    for (int64_t t = 0; t <= T; ++t) p[b * (T + 1) + t] = static_cast<unsigned char>(text[start + t]);
  }
  return ids;
}

std::string generate(const TinyLM& model, const std::string& prompt, int64_t n, uint64_t seed) {
  autograd::NoGradGuard no_grad;
  std::string out = prompt;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(out.size()), model.cfg.seq);
    Tensor ids = empty({1, T}, DType::i64);
    for (int64_t t = 0; t < T; ++t)
      ids.data<int64_t>()[t] = static_cast<unsigned char>(out[out.size() - T + t]);
    Tensor logits = select(model.forward(ids), 0, T - 1);  // [256]
    Tensor probs = softmax(mul(logits, 1.0 / 0.7), 0).contiguous();
    float u = uniform01(philox4x32(static_cast<uint64_t>(i), 2, seed)[0]);
    const float* pr = probs.data<float>();
    int c = 0;
    for (float acc = pr[0]; acc < u && c < 255; acc += pr[++c]) {
    }
    out.push_back(static_cast<char>(c));
  }
  return out;
}

}  // namespace

int run_demo(const Args& in) {
  Args args = in;
  DemoConfig cfg;
  std::string v;
  if (take_value(args, "--steps", &v)) cfg.steps = parse_int("--steps", v, 1, 1000000);
  if (take_value(args, "--seed", &v)) cfg.seed = static_cast<uint64_t>(parse_int("--seed", v, 0, 1LL << 62));
  if (take_value(args, "--data", &v)) cfg.data = v;
  reject_leftovers(args);
  const std::string text = read_file(cfg.data);
  if (static_cast<int64_t>(text.size()) < cfg.seq + 2)
    throw UsageError{"corpus '" + cfg.data + "' is too short"};

  manual_seed(cfg.seed);
  TinyLM model(cfg);
  int64_t nparams = 0;
  for (const Tensor& p : model.params()) nparams += p.numel();
  std::printf("hp demo: %lld-parameter transformer (%lld layers, dim %lld), byte-level, batch %lld x %lld, %d threads, corpus %s (%zu bytes)\n",
              static_cast<long long>(nparams), static_cast<long long>(cfg.layers), static_cast<long long>(cfg.dim),
              static_cast<long long>(cfg.batch), static_cast<long long>(cfg.seq), num_threads(), cfg.data.c_str(),
              text.size());
  AdamW opt;
  opt.lr = cfg.lr;
  auto t0 = std::chrono::steady_clock::now();
  double avg = 0;
  for (int64_t step = 1; step <= cfg.steps; ++step) {
    Tensor batch = sample_batch(text, cfg.batch, cfg.seq, cfg.seed, step);
    Tensor inputs = narrow(batch, 1, 0, cfg.seq), targets = reshape(narrow(batch, 1, 1, cfg.seq), {-1});
    Tensor loss = cross_entropy(model.forward(inputs.contiguous()), targets.contiguous());
    loss.backward();
    const double warm = std::min(1.0, static_cast<double>(step) / 30.0);
    const double decay = 0.5 * (1 + std::cos(M_PI * static_cast<double>(step) / static_cast<double>(cfg.steps)));
    opt.step(model.params(), cfg.lr * warm * (0.1 + 0.9 * decay));
    avg = step == 1 ? loss.item() : 0.9 * avg + 0.1 * loss.item();
    if (step == 1 || step % 25 == 0 || step == cfg.steps) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %5lld  loss %.4f  (avg %.4f)  %.0f tokens/s\n", static_cast<long long>(step),
                  loss.item(), avg, static_cast<double>(step * cfg.batch * cfg.seq) / s);
      std::fflush(stdout);
    }
  }
  std::printf("\nsample: %s\n", generate(model, "And God said", 160, cfg.seed).c_str());
  return 0;
}

}  // namespace hp::cli
