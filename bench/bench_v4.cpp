// DeepSeek-V4 training step throughput: forward + backward (causal-LM loss, labels = ids) of a
// tiny-but-realistic random DeepseekV4ForCausalLM (f32; 4 layers covering sliding / compressed
// sparse / heavily compressed attention, hash and learned MoE, hc_mult 4), tokens/s, beside
// transformers' eager DeepseekV4ForCausalLM on the same config.json, tokens and thread count
// (bench/peers/deepseek_v4.py, when HP_PEER_PYTHON names a python with torch + transformers).
// Both sides fill the hash-routing table tid2eid with the same spread (row r: experts
// (r·k + j) mod E), so every expert gets work.
//
// Usage: bench_v4 [seq] [reps] [batch]   (HP_NUM_THREADS sets the thread count)
// With HP_BENCH_PROFILE=N, one more step runs under the op profiler (after the timed ones) and the
// N largest (op or backward node, phase) entries of the main thread's counted time are printed:
// where the step goes, per op, which moves less with the machine's load than the ratio does.
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "bench_common.h"
#include "hp/core/profiler.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/io/json.h"
#include "hp/models/hf/config.h"
#include "hp/models/hf/registry.h"
#include "hp/ops/ops.h"

namespace {

using namespace hp;

// transformers' config.json of the benchmark model (what DeepseekV4Config.save_pretrained writes
// for these sizes): hidden 512, 8 heads of 128 (64 rotary), 16 routed experts (top 4) of 256 plus
// one shared, window 128, CSA every 4 tokens with top-64 selection, HCA every 64.
constexpr const char* kConfig = R"({
  "architectures": ["DeepseekV4ForCausalLM"],
  "model_type": "deepseek_v4",
  "vocab_size": 16384, "hidden_size": 512, "moe_intermediate_size": 256,
  "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 128,
  "q_lora_rank": 256, "o_groups": 4, "o_lora_rank": 128,
  "n_routed_experts": 16, "num_experts_per_tok": 4, "n_shared_experts": 1,
  "scoring_func": "sqrtsoftplus", "norm_topk_prob": true, "routed_scaling_factor": 1.5,
  "swiglu_limit": 10.0, "sliding_window": 128,
  "layer_types": ["sliding_attention", "compressed_sparse_attention",
                  "heavily_compressed_attention", "compressed_sparse_attention"],
  "mlp_layer_types": ["hash_moe", "hash_moe", "moe", "moe"],
  "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 64},
  "compress_rope_theta": 160000.0, "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
  "qk_rope_head_dim": 64,
  "rope_parameters": {
    "main": {"partial_rotary_factor": 0.5, "rope_theta": 10000.0, "rope_type": "default"},
    "compress": {"partial_rotary_factor": 0.5, "rope_theta": 160000.0, "rope_type": "default"}
  },
  "index_n_heads": 8, "index_head_dim": 64, "index_topk": 64,
  "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06,
  "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "initializer_range": 0.02,
  "hidden_act": "silu", "attention_bias": false, "attention_dropout": 0.0, "mlp_bias": false,
  "num_nextn_predict_layers": 1, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
  "output_router_logits": false, "tie_word_embeddings": false, "use_cache": false,
  "bos_token_id": 0, "eos_token_id": 1, "dtype": "float32"
})";

// The main thread's counted time summed over modules per (name, category, phase), largest first.
void print_profile(const profiler::Trace& trace, size_t top) {
  std::map<std::string, std::pair<int64_t, int64_t>> by_key;  // key -> (ns, calls)
  int64_t all_ns = 0;
  for (const auto& th : trace.threads) {
    if (!th.main) continue;
    for (const auto& t : th.totals) {
      if (t.counted_ns == 0) continue;
      const std::string key = std::string(profiler::category_name(t.cat)) + " " +
                              profiler::phase_name(t.phase) + " " + t.name;
      by_key[key].first += t.counted_ns;
      by_key[key].second += t.counted_calls;
      all_ns += t.counted_ns;
    }
  }
  std::vector<std::pair<int64_t, std::string>> rows;
  for (const auto& [k, v] : by_key)
    rows.emplace_back(v.first, k + " (" + std::to_string(v.second) + " calls)");
  std::sort(rows.rbegin(), rows.rend());
  std::printf("profiled step: %.1f ms counted on the main thread; largest entries:\n", all_ns / 1e6);
  for (size_t i = 0; i < rows.size() && i < top; ++i)
    std::printf("  %8.1f ms  %s\n", rows[i].first / 1e6, rows[i].second.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t seq = argc > 1 ? std::atoll(argv[1]) : 512;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const int64_t batch = argc > 3 ? std::atoll(argv[3]) : 1;
  const int threads = num_threads();
  openblas_set_num_threads(threads);

  // The config both sides read, in a per-process directory.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hp_bench_v4_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << kConfig;
  const models::ModelConfig c = models::read_model_config((dir / "config.json").string());

  manual_seed(0);
  auto model = models::build_model(c);
  const auto params = model->named_parameters();
  for (const auto& [name, p] : params)
    if (name.size() >= 7 && name.compare(name.size() - 7, 7, "tid2eid") == 0) {
      const int64_t rows = p.size(0), k = p.size(1);
      std::vector<double> table(static_cast<size_t>(rows * k));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j)
          table[static_cast<size_t>(r * k + j)] = double((r * k + j) % c.num_experts);
      p.copy_from(from_vector(table, p.shape(), p.dtype()));
    }
  std::vector<double> idv(static_cast<size_t>(batch * seq));
  for (int64_t i = 0; i < batch * seq; ++i)
    idv[static_cast<size_t>(i)] = static_cast<double>((i * 7919) % c.vocab_size);
  const Tensor ids = from_vector(idv, {batch, seq}, DType::i64);
  double loss = 0;
  const double t_hp = bench::best_seconds(
      [&] {
        for (const auto& [name, p] : params) p.zero_grad();
        const Tensor l = model->loss(ids);
        l.backward();
        loss = l.item();
      },
      reps);

  const char* prof = std::getenv("HP_BENCH_PROFILE");
  const size_t prof_top = prof ? static_cast<size_t>(std::atoll(prof)) : 0;
  profiler::Trace trace;
  if (prof_top > 0) {
    for (const auto& [name, p] : params) p.zero_grad();
    profiler::start();
    model->loss(ids).backward();
    trace = profiler::stop();
  }

  const std::string peer_args = (dir / "config.json").string() + " " + std::to_string(batch) +
                                " " + std::to_string(seq) + " " + std::to_string(threads) + " " +
                                std::to_string(reps);
  const double t_peer = hp::bench::run_peer("deepseek_v4.py", peer_args);
  fs::remove_all(dir);

  const double tokens = static_cast<double>(batch * seq);
  std::printf("DeepSeek-V4 %.1fM params, f32, B=%lld T=%lld, %d threads, forward+backward\n",
              static_cast<double>(model->num_parameters()) / 1e6, (long long)batch,
              (long long)seq, threads);
  std::printf("hp            %9.1f ms  %8.0f tokens/s  (loss %.4f)\n", t_hp * 1e3, tokens / t_hp,
              loss);
  if (t_peer > 0)
    std::printf("torch eager   %9.1f ms  %8.0f tokens/s  -> hp %s\n", t_peer * 1e3,
                tokens / t_peer, hp::bench::ratio_str(t_peer, t_hp).c_str());
  else
    std::printf("torch eager   n/a (set HP_PEER_PYTHON to a python with torch + transformers)\n");
  if (prof_top > 0) print_profile(trace, prof_top);
  return 0;
}
