// Trainer set-up from the config tree (setup.h).
#include "hp/train/setup.h"

#include <filesystem>
#include <optional>

#include "hp/core/allocator.h"
#include "hp/core/error.h"
#include "hp/core/mem_tier_scope.h"
#include "hp/core/random.h"
#include "hp/data/dataset.h"
#include "hp/data/indexed.h"
#include "hp/data/indexed_ids.h"
#include "hp/io/byte_level_tokenizer.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer.h"
#include "hp/models/hf/registry.h"
#include "hp/optim/state_offload.h"
#include "hp/shard/mesh.h"
#include "hp/train/expert_balance.h"
#include "hp/train/memory_plan.h"
#include "hp/train/metrics.h"
#include "hp/train/options.h"
#include "hp/train/pipeline_step.h"
#include "hp/train/step.h"

namespace hp::train {

namespace fs = std::filesystem;

namespace {

data::DatasetOptions with_format(data::DatasetOptions o, const std::string& path,
                                 DataFormat format) {
  o.path = path;
  o.format = format;
  if (format != DataFormat::text) o.doc_separator.clear();  // a text option (data.doc_separator)
  if (format != DataFormat::chat) o.chat_template.clear();  // a chat option (data.chat_template)
  return o;
}

// "[data] what" → "[data] KEY: what": a dataset error names the config key it came from.
std::string with_key(const std::string& key, const std::string& what) {
  const size_t tag = what.rfind('[', 0) == 0 ? what.find("] ") : std::string::npos;
  return tag == std::string::npos ? key + ": " + what
                                  : what.substr(0, tag + 2) + key + ": " + what.substr(tag + 2);
}

template <class Fn>
auto keyed(const std::string& key, Fn&& fn) {
  try {
    return fn();
  } catch (const ValueError& e) {
    throw ValueError(with_key(key, e.what()));
  } catch (const IoError& e) {
    throw IoError(with_key(key, e.what()));
  }
}

}  // namespace

RunData load_run_data(const Config& cfg) {
  const data::DatasetOptions base = dataset_options(cfg);
  RunData d;
  d.blend = !cfg.data.sources.empty();
  if (!d.blend) {
    d.sources.push_back({data::TokenDataset::load(base), 1.0});
    d.names.push_back(cfg.data.path);
  }
  for (size_t i = 0; i < cfg.data.sources.size(); ++i) {
    const DataSourceConfig& src = cfg.data.sources[i];
    const std::string key = "data.sources[" + std::to_string(i) + "]";
    d.sources.push_back({keyed(key,
                               [&] {
                                 return data::TokenDataset::load(with_format(
                                     base, src.path, src.format.value_or(cfg.data.format)));
                               }),
                         src.weight});
    d.names.push_back(src.path);
  }
  const EvalConfig& e = cfg.eval;
  if (!e.data.empty()) {
    d.eval = keyed("eval.data", [&] {
      return data::TokenDataset::load(
          with_format(base, e.data, e.format.value_or(cfg.data.format)));
    });
    d.eval_name = e.data;
  } else if (e.split > 0) {
    auto [train, held] = keyed("eval.split", [&] {
      return data::TokenDataset::hold_out(d.sources.front().dataset, e.split);
    });
    d.sources.front().dataset = train;
    d.eval = held;
    d.eval_name = detail::cat(e.split * 100, "% of the documents of ", cfg.data.path);
  }
  return d;
}

namespace {

// The batch's token, hidden-state and logit element counts must fit int64 (a batch_size or
// seq_len that overflows them can only be a mistake): checked before the loader allocates.
void check_batch_size(const Config& cfg, const models::ModelConfig& c) {
  const TrainingConfig& t = cfg.training;
  const int64_t micro = t.batch_size / std::max<int64_t>(t.grad_accum, 1);
  int64_t n = 0;
  const bool over =
      t.seq_len == INT64_MAX || __builtin_mul_overflow(t.batch_size, t.seq_len + 1, &n) ||
      __builtin_mul_overflow(micro * (t.seq_len + 1), std::max(c.vocab_size, c.hidden_size), &n);
  if (over)
    HP_THROW(ValueError, "train", "training.batch_size = ", t.batch_size,
             " and training.seq_len = ", t.seq_len, " make a batch of more elements than int64 ",
             "holds (", micro, " sequences × ", t.seq_len + 1, " tokens × ",
             std::max(c.vocab_size, c.hidden_size), " logits/hidden per token)");
}

}  // namespace

std::shared_ptr<models::CausalLM> build_causal_lm(const Config& cfg,
                                                  const data::TokenDataset& data) {
  const models::ModelConfig config =
      cfg.model.path.empty() ? arch_model_config(cfg.model, data.vocab_size(), cfg.training.seq_len,
                                                 data.separator_id())
                             : models::read_model_config(cfg.model.path);
  check_batch_size(cfg, config);
  std::shared_ptr<models::CausalLM> model = cfg.model.path.empty()
                                                ? models::build_model(config)
                                                : models::load_model(cfg.model.path, DType::f32);
  check_data_fits(*model, data, cfg.data.path, cfg);
  return model;
}

void check_data_fits(const models::CausalLM& model, const data::TokenDataset& data,
                     const std::string& name, const Config& cfg) {
  const int64_t vocab = model.config().vocab_size;
  // An indexed dataset's largest id, recorded by hp data prepare (or scanned once and cached:
  // data/indexed_ids.h), is checked now rather than when a batch holding it is read.
  if (data.mapped() && data.options().format == DataFormat::indexed) {
    const std::string& prefix = data.options().path;
    const data::MaxTokenId m = data::max_token_id(*data::IndexedDataset::open(prefix));
    if (m.id >= vocab)
      HP_THROW(ValueError, "train", "data ", data::indexed_bin_path(prefix), " has token id ", m.id,
               " (document ", m.document, ", offset ", m.offset, "; position ", m.position,
               " of the token stream), outside the model's vocabulary of ", vocab, " (",
               cfg.model.path.empty() ? "raise model.vocab, or " : "",
               "data.tokenizer: the tokenizer it was prepared with)");
  }
  // Also names the first id outside the vocabulary, as stored, and its position in the stream.
  const int64_t first = data.mapped() ? -1 : data.find_id_at_least(vocab);
  if (data.vocab_size() > vocab || first >= 0)
    HP_THROW(ValueError, "train", "data ", name, " has token ids up to ", data.vocab_size() - 1,
             " but the model's vocabulary is ", vocab,
             cfg.model.path.empty() ? " (raise model.vocab)" : " (wrong tokenizer?)",
             first >= 0 ? detail::cat(": the first, token id ", data.tokens(first, 1)[0],
                                      ", at position ", first, " of the token stream")
                        : std::string());
}

RunSetup build_run(const Config& cfg, const Layout& layout, const MemoryPlan* plan) {
  RunSetup r;
  r.data = load_run_data(cfg);
  // offload.activations_select largest | auto: the plan measures the selection's blocks and picks
  // the largest savers until the device total fits, swapped or (auto) recomputed (before the model
  // exists, so it measures alone).
  std::optional<ActivationChoice> choice;
  if (cfg.offload.activations_select != ActivationSelect::all) {
    const MemoryPlan own = plan ? MemoryPlan() : plan_memory(cfg);
    const MemoryPlan& p = plan ? *plan : own;
    choice = ActivationChoice{p.offloaded_blocks(), p.recomputed_blocks()};
  }
  manual_seed(static_cast<uint64_t>(cfg.training.seed));
  // The model's tensors, its FSDP shards and gathered copies count as parameters; with
  // offload.params host the model is built in host memory, where FSDP's masters will live, so the
  // device budget never holds the whole model.
  const MemCategoryScope as_params(MemCategory::params);
  std::optional<MemTierScope> on_host;
  if (cfg.offload.params == HostOffload::host) on_host.emplace(MemTier::host);
  r.model = build_causal_lm(cfg, *r.data.sources.front().dataset);
  for (size_t s = 1; s < r.data.sources.size(); ++s)
    check_data_fits(*r.model, *r.data.sources[s].dataset, r.data.names[s], cfg);
  if (r.data.eval) check_data_fits(*r.model, *r.data.eval, r.data.eval_name, cfg);
  r.num_parameters = r.model->num_parameters();
  r.flops_per_token = model_flops_per_token(*r.model, cfg);
  r.par = parallelize(*r.model, layout, cfg, choice ? &*choice : nullptr);
  r.opt = std::make_unique<optim::Optimizer>(
      r.par.named_parameters(), optimizer_options(cfg.optimizer), r.par.shard_specs(layout));
  r.opt->set_state_offload(state_offload_options(cfg, layout, r.par.fsdp_prefixes));
  r.after_forward =
      install_expert_balance(*r.model, r.par, layout, cfg.model.router_bias_update_rate, *r.opt);
  r.loader = std::make_unique<data::DataLoader>(r.data.sources, cfg.training.seq_len,
                                                static_cast<uint64_t>(cfg.training.seed),
                                                cfg.data.shuffle);
  r.documents = document_flags(cfg, r.loader->masked());
  r.loader->set_document_positions(r.documents.any());
  return r;
}

double model_flops_per_token(const models::CausalLM& model, const Config& cfg) {
  const models::ModelConfig& c = model.config();
  std::vector<std::pair<std::string, Shape>> named;
  for (const auto& [fqn, t] : model.named_parameters()) named.emplace_back(fqn, t.shape());
  return flops_per_token(named, c.num_hidden_layers, c.num_attention_heads, c.head_dim,
                         cfg.training.seq_len, c.num_experts, c.num_experts_per_tok,
                         c.tie_word_embeddings);
}

std::vector<std::pair<std::string, std::string>> checkpoint_files(const Config& cfg,
                                                                  const models::CausalLM& model) {
  std::vector<std::pair<std::string, std::string>> files = {
      {"config.json", models::model_config_to_json(model.config())}, {"config.yaml", to_yaml(cfg)}};
  // (name in the checkpoint, source): data.tokenizer is a tokenizer.json whatever its file name
  // (or a tokenizer directory), so an export of the checkpoint finds it where `hp generate` looks.
  std::vector<std::pair<std::string, fs::path>> tokenizer_files;
  std::vector<fs::path> tokenizer_dirs;
  if (!cfg.data.tokenizer.empty()) {
    if (fs::is_directory(cfg.data.tokenizer))
      tokenizer_dirs.emplace_back(cfg.data.tokenizer);
    else
      tokenizer_files.emplace_back("tokenizer.json", cfg.data.tokenizer);
  }
  if (!cfg.model.path.empty()) tokenizer_dirs.emplace_back(cfg.model.path);
  for (const fs::path& d : tokenizer_dirs)
    for (const char* name :
         {"tokenizer.json", "tiktoken.model", "tokenizer_config.json", "generation_config.json"})
      tokenizer_files.emplace_back(name, d / name);
  for (const auto& [name, p] : tokenizer_files) {
    bool seen = false;
    for (const auto& f : files) seen |= f.first == name;
    if (!seen && fs::exists(p)) files.emplace_back(name, io::read_text_file(p.string(), "train"));
  }
  // Byte-level text (no tokenizer anywhere): its vocabulary as a tokenizer.json, the separator
  // as <|endoftext|> (the first automatic separator token, so the file used as data.tokenizer
  // gives the same stream).
  const bool byte_level =
      dataset_options(cfg).tokenizer.empty() &&
      (cfg.data.format == DataFormat::text || cfg.data.format == DataFormat::indexed);
  if (byte_level)
    files.emplace_back("tokenizer.json", io::byte_level_tokenizer_json(
                                             data::kAutoSeparatorTokens[0], data::kByteSeparator));
  return files;
}

std::unique_ptr<TrainStep> make_step(RunSetup& run, const Layout& layout, const Config& cfg,
                                     dist::Communicator& world) {
  if (layout.pp > 1)
    return std::make_unique<PipelineStep>(*run.model, run.par, layout, cfg, run.documents,
                                          run.after_forward);
  return std::make_unique<PlainStep>(*run.model, layout, cfg, run.documents, world,
                                     run.after_forward);
}

}  // namespace hp::train
