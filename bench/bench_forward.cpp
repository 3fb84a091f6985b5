// End-to-end forward throughput of a ~100M-parameter random Qwen3 (f32, no grad), tokens/s, beside
// the f32 GEMM ceiling measured in the same run and PyTorch eager transformers on the same config
// and thread count (bench/peers/forward.py). A per-component timing of the same shapes (run op by
// op) says where the time goes.
//
// Usage: bench_forward [seq] [reps]   (HP_NUM_THREADS sets the thread count)
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "bench_common.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/models/hf/registry.h"
#include "hp/ops/ops.h"

using namespace hp;

int main(int argc, char** argv) {
  const int64_t seq = argc > 1 ? std::atoll(argv[1]) : 512;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const int threads = num_threads();
  openblas_set_num_threads(threads);

  models::ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.hidden_size = 768;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.intermediate_size = 2048;
  c.vocab_size = 32000;
  c.max_position_embeddings = 2048;
  c.rope_theta = 1e6;
  manual_seed(0);
  const auto t_build0 = std::chrono::steady_clock::now();
  auto model = models::build_model(c);
  const double t_build =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_build0).count();
  const double params = static_cast<double>(model->num_parameters());

  autograd::NoGradGuard no_grad;
  std::vector<double> idv(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i)
    idv[static_cast<size_t>(i)] = static_cast<double>((i * 7919) % c.vocab_size);
  const Tensor ids = from_vector(idv, {1, seq}, DType::i64);
  const double t_hp = bench::best_seconds([&] { model->forward(ids); }, reps);

  // Useful FLOPs: 2 per weight per token for every matrix except the embedding gather, plus
  // causal attention 2·T²·D per q head.
  const double mat_params = params - static_cast<double>(c.vocab_size * c.hidden_size);
  const double flops = 2.0 * mat_params * static_cast<double>(seq) +
                       2.0 * static_cast<double>(seq * seq * c.head_dim * c.num_attention_heads *
                                                 c.num_hidden_layers);

  // Ceiling: OpenBLAS f32 GEMM on the MLP's up-projection shape [T, 768] · [768, 2048].
  const Tensor a = randn({seq, c.hidden_size}), w = randn({c.intermediate_size, c.hidden_size});
  const double t_gemm = bench::best_seconds([&] { linear(a, w); }, 5);
  const double gemm_rate =
      2.0 * static_cast<double>(seq * c.hidden_size * c.intermediate_size) / t_gemm / 1e9;

  // Where the time goes: the forward's components on the same shapes, op by op, × layer count.
  const Tensor x = randn({1, seq, c.hidden_size});
  const Tensor wq = randn({c.num_attention_heads * c.head_dim, c.hidden_size});
  const Tensor wkv = randn({2 * c.num_key_value_heads * c.head_dim, c.hidden_size});
  const Tensor wg = randn({2 * c.intermediate_size, c.hidden_size});
  const Tensor wd = randn({c.hidden_size, c.intermediate_size});
  const Tensor h2 = randn({1, seq, c.intermediate_size});
  const Tensor q = randn({1, c.num_attention_heads, seq, c.head_dim});
  const Tensor kv = randn({1, c.num_key_value_heads, seq, c.head_dim});
  const Tensor qh = randn({1, seq, c.num_attention_heads, c.head_dim});
  const Tensor head = model->head_weight();
  const double L = static_cast<double>(c.num_hidden_layers);
  auto [cs, sn] = rope_cos_sin(seq, c.head_dim, 1e6);
  struct Part {
    const char* name;
    double s;
  };
  std::vector<Part> parts = {
      {"qkv+o projections",
       L * bench::best_seconds([&] { linear(x, wq), linear(x, wkv), linear(x, wq); }, reps)},
      {"attention (flash)",
       L * bench::best_seconds([&] { scaled_dot_product_attention(q, kv, kv, true); }, reps)},
      {"mlp gate/up/down", L * bench::best_seconds([&] { linear(x, wg), linear(h2, wd); }, reps)},
      {"silu*mul", L * bench::best_seconds([&] { mul(silu(h2), h2); }, reps)},
      {"rms_norm x2 + qk",
       L * bench::best_seconds([&] { rms_norm(x, Tensor()), rms_norm(x, Tensor()), rms_norm(qh, Tensor()); },
                   reps)},
      {"rope q", L * bench::best_seconds([&] { rotary_embedding(qh, cs, sn, false, 1); }, reps)},
      {"lm_head", bench::best_seconds([&] { linear(x, head); }, reps)},
  };

  const std::string peer_args =
      std::to_string(c.hidden_size) + " " + std::to_string(c.num_hidden_layers) + " " +
      std::to_string(c.num_attention_heads) + " " + std::to_string(c.num_key_value_heads) + " " +
      std::to_string(c.intermediate_size) + " " + std::to_string(c.vocab_size) + " " +
      std::to_string(seq) + " " + std::to_string(threads);
  const double t_peer = hp::bench::run_peer("forward.py", peer_args);

  std::printf("Qwen3 %.1fM params, f32, B=1 T=%lld, %d threads\n", params / 1e6, (long long)seq,
              threads);
  std::printf(
      "hp forward        %8.1f ms  %8.0f tokens/s  %6.1f GFLOP/s  (%.2f of sgemm %.1f GFLOP/s)\n",
      t_hp * 1e3, static_cast<double>(seq) / t_hp, flops / t_hp / 1e9,
      flops / t_hp / 1e9 / gemm_rate, gemm_rate);
  std::printf("build_model (random HF init) %.0f ms\n", t_build * 1e3);
  if (t_peer > 0)
    std::printf("torch eager       %8.1f ms  %8.0f tokens/s  -> hp %s faster\n", t_peer * 1e3,
                static_cast<double>(seq) / t_peer, hp::bench::ratio_str(t_peer, t_hp).c_str());
  else
    std::printf(
        "torch eager       n/a (set HP_PEER_PYTHON to a python with torch + transformers)\n");
  double sum = 0;
  for (const auto& p : parts) sum += p.s;
  std::printf("breakdown (components timed alone, sum %.1f ms):\n", sum * 1e3);
  for (const auto& p : parts)
    std::printf("  %-20s %8.1f ms  %5.1f%%\n", p.name, p.s * 1e3, 100 * p.s / sum);
  return 0;
}
