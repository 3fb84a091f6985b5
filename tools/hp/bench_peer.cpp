// The PyTorch peer of `hp bench train` (see bench_peer.h).
#include "bench_peer.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/models/config.h"

namespace hp::cli {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

// The trainer's model for model.arch + sizes, field for field as train/setup's
// arch_model_config builds it (vocab 0 = the byte-level tokenizer's 256 ids + separator).
models::ModelConfig arch_config(const train::Config& cfg) {
  static const std::map<std::string, std::string> kArchitectures = {
      {"llama", "LlamaForCausalLM"},       {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"},       {"qwen3_moe", "Qwen3MoeForCausalLM"},
      {"mixtral", "MixtralForCausalLM"},
  };
  const train::ModelConfig& m = cfg.model;
  const auto it = kArchitectures.find(m.arch);
  if (it == kArchitectures.end())
    HP_THROW(ValueError, "bench", "model.arch = '", m.arch,
             "' has no peer built from sizes (give model.path, or --no-peer)");
  const bool byte_level = cfg.data.format == "text" && cfg.data.tokenizer.empty();
  if (m.vocab == 0 && !byte_level)
    HP_THROW(ValueError, "bench",
             "model.vocab = 0 takes the vocabulary of data.tokenizer '", cfg.data.tokenizer,
             "'; set it (--set model.vocab=N) so the peer builds the same model, or --no-peer");
  models::ModelConfig c;
  c.architecture = it->second;
  c.model_type = m.arch;
  c.vocab_size = m.vocab > 0 ? m.vocab : 257;
  c.hidden_size = m.hidden;
  c.intermediate_size = m.intermediate;
  c.num_hidden_layers = m.layers;
  c.num_attention_heads = m.heads;
  c.num_key_value_heads = m.kv_heads;
  c.head_dim = m.head_dim > 0 ? m.head_dim : m.hidden / m.heads;
  c.max_position_embeddings = std::max<int64_t>(2048, cfg.training.seq_len + 1);
  c.rope_theta = m.rope_theta;
  c.tie_word_embeddings = m.tie_embeddings;
  c.attention_bias = m.arch == "qwen2";
  if (m.experts > 0) {
    c.num_experts = m.experts;
    c.num_experts_per_tok = m.experts_per_token;
    c.moe_intermediate_size = m.moe_intermediate > 0 ? m.moe_intermediate : m.intermediate;
    c.norm_topk_prob = true;
    c.router_aux_loss_coef = m.router_aux_loss_coef;
    c.output_router_logits = m.router_aux_loss_coef > 0;
  }
  return c;
}

fs::path peers_dir() {
  if (const char* root = std::getenv("HP_SOURCE_DIR")) return fs::path(root) / "bench" / "peers";
  return HP_BENCH_PEERS_DIR;
}

PeerRun parse_result(PeerRun r, const std::string& out, int status) {
  std::string last;  // the last line that looks like the result object
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = std::min(out.find('\n', pos), out.size());
    if (out.compare(pos, 1, "{") == 0) last = out.substr(pos, end - pos);
    pos = end + 1;
  }
  if (status != 0 || last.empty()) {
    r.failed = true;
    r.note = status != 0 ? "peer exited with status " + std::to_string(status)
                         : "peer printed no result line";
    return r;
  }
  try {
    const auto j = nlohmann::json::parse(last);
    r.tokens_per_s = j.at("tokens_per_s").get<double>();
    r.step_s = j.at("step_s").get<std::vector<double>>();
    r.loss_first = j.at("loss_first").get<double>();
    r.loss_last = j.at("loss_last").get<double>();
    r.num_parameters = j.value("num_parameters", int64_t{0});
    r.optimizer = j.value("optimizer", std::string());
    r.ran = true;
  } catch (const nlohmann::json::exception& e) {
    r.failed = true;
    r.note = std::string("bad peer result line: ") + e.what();
  }
  return r;
}

}  // namespace

std::string peer_model_config_json(const train::Config& cfg) {
  if (cfg.optimizer.name != "adamw")
    HP_THROW(ValueError, "bench", "optimizer.name = '", cfg.optimizer.name,
             "': the peer trains with AdamW only (use adamw, or --no-peer)");
  if (!cfg.model.path.empty()) {
    const fs::path dir(cfg.model.path);
    const std::string file = fs::is_directory(dir) ? (dir / "config.json").string() : cfg.model.path;
    return io::read_text_file(file, "bench");
  }
  return models::model_config_to_json(arch_config(cfg));
}

std::string peer_spec_json(const train::Config& cfg, const std::string& dtype, int64_t steps,
                           int threads) {
  const auto& o = cfg.optimizer;
  const auto& t = cfg.training;
  ordered_json j;
  j["config"] = ordered_json::parse(peer_model_config_json(cfg));
  j["seq_len"] = t.seq_len;
  j["batch_size"] = t.batch_size;
  j["grad_accum"] = t.grad_accum;
  j["steps"] = steps;
  j["warmup_steps"] = kPeerWarmupSteps;
  j["lr"] = o.lr;
  j["betas"] = o.betas;
  j["eps"] = o.eps;
  j["weight_decay"] = o.weight_decay;
  j["grad_clip"] = t.grad_clip;
  j["threads"] = threads;
  j["dtype"] = dtype;
  j["seed"] = t.seed;
  return j.dump(2) + "\n";
}

std::string peer_python() {
  const char* py = std::getenv("HP_PEER_PYTHON");
  return py && *py ? py : "python3";
}

PeerRun run_train_peer(const train::Config& cfg, const std::string& dtype, int64_t steps,
                       int threads) {
  PeerRun r;
  r.dtype = dtype;
  const std::string py = peer_python();
  const std::string probe = shell_quote(py) + " -c 'import torch, transformers' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) {
    r.note = "skipped: '" + py + "' cannot import torch and transformers (set HP_PEER_PYTHON)";
    return r;
  }
  fs::create_directories(cfg.run.dir);
  r.spec_path = (fs::path(cfg.run.dir) / ("peer_spec_" + dtype + ".json")).string();
  {
    std::ofstream f(r.spec_path);
    f << peer_spec_json(cfg, dtype, steps, threads);
    if (!f) HP_THROW(IoError, "bench", r.spec_path, ": cannot write the peer spec");
  }
  const std::string cmd = shell_quote(py) + " " +
                          shell_quote((peers_dir() / "train_peer.py").string()) + " " +
                          shell_quote(r.spec_path);
  std::fflush(stdout);
  FILE* f = popen(cmd.c_str(), "r");  // stdout = the result; stderr (progress) passes through
  if (!f) HP_THROW(IoError, "bench", "cannot run the peer: ", cmd);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  const int rc = pclose(f);
  return parse_result(std::move(r), out, WIFEXITED(rc) ? WEXITSTATUS(rc) : 128);
}

}  // namespace hp::cli
