// Config sections: field registration (one line per field), cross-field checks, load and save.
#include "hp/train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "hp/core/byte_size.h"
#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/models/hf/registry.h"
#include "hp/train/schema.h"

namespace hp::train {

namespace {

// The short names of the MoE architectures buildable from sizes, joined ("qwen3_moe, mixtral"; the
// last with `last` when given: "qwen3_moe or mixtral").
std::string moe_names(const std::string& sep, const std::string& last = "") {
  std::vector<std::string> names;
  for (const auto& a : models::architectures())
    if (a.moe() && a.buildable_from_sizes) names.push_back(a.short_name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() && !last.empty() ? last : sep) + names[i];
  return out;
}

// The model.* keys that describe a model built from model.arch: model.path's config.json gives
// all of them instead, so they are the other side of model.path (router_bias_update_rate is not
// one: it balances the experts of a loaded DeepSeek-V3 too).
// clang-format off
constexpr const char* kArchKeys[] = {
    "arch", "hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "head_dim",
    "tie_embeddings", "rope_theta", "experts", "experts_per_token", "moe_intermediate",
    "router_aux_loss_coef"};
// clang-format on

}  // namespace

void ModelSection::describe(Schema& s) {
  s.add("path", &path, "Hugging Face model directory (config.json + safetensors); or use arch");
  // The choices are the architecture table's rows buildable from sizes, read at parse time (so an
  // architecture registered at run time is accepted); a row that needs a config.json says so.
  s.add("arch", &arch, "architecture of a freshly initialized model (instead of path)")
      .check([this] {
        const models::Architecture* a =
            arch.empty() ? nullptr : models::find_architecture_by_short_name(arch);
        if (!a || a->buildable_from_sizes) return std::string();
        return arch + " (" + a->hf_class +
               ") is built from a config.json, not from sizes: use model.path";
      })
      .choices(models::sized_architecture_names());
  s.add("hidden", &hidden, "hidden size (with arch)").min(0);
  s.add("layers", &layers, "number of decoder layers (with arch)").min(0);
  s.add("heads", &heads, "attention heads (with arch)").min(0);
  s.add("kv_heads", &kv_heads, "key/value heads, divides heads (with arch)").min(0);
  s.add("intermediate", &intermediate, "MLP intermediate size (with arch)").min(0);
  s.add("vocab", &vocab, "vocabulary size (with arch; 0 = the data tokenizer's)").min(0);
  s.add("head_dim", &head_dim, "attention head size (with arch; 0 = hidden / heads)").min(0);
  s.add("tie_embeddings", &tie_embeddings, "output head shares the embedding matrix (with arch)");
  s.add("rope_theta", &rope_theta, "RoPE base frequency (with arch)").above(0);
  s.add("experts", &experts, "routed experts per MoE layer (" + moe_names(", ") + ")").min(0);
  s.add("experts_per_token", &experts_per_token, "experts each token is routed to (top-k)").min(0);
  s.add("moe_intermediate", &moe_intermediate, "expert intermediate size (0 = intermediate)")
      .min(0);
  s.add("router_aux_loss_coef", &router_aux_loss_coef, "load-balancing loss weight (MoE)").min(0);
  s.add("router_bias_update_rate", &router_bias_update_rate,
        "auxiliary-loss-free balancing (DeepSeek-V3 routers): after each step every expert's "
        "selection bias moves by this amount toward the mean load (0 = off; DeepSeek uses 0.001)")
      .min(0);
  s.exclusive({"path"}, std::vector<std::string>(std::begin(kArchKeys), std::end(kArchKeys)));
}

void DataSourceConfig::describe(Schema& s) {
  s.add("path", &path, "a dataset as data.path").non_empty();
  s.add("weight", &weight, "its share of the training samples: weight / sum of the weights")
      .above(0);
  s.add("format", &format, "as data.format (\"\" = data.format)");
}

void DataConfig::describe(Schema& s) {
  s.add("path", &path,
        "training corpus file or directory (format indexed: PREFIX of PREFIX.bin + PREFIX.idx); "
        "or data.sources");
  s.add_list("sources", &sources,
             "several datasets blended by weight, each packed sequence drawn from one by a "
             "seeded schedule (instead of path; docs/DATA.md)");
  s.add("format", &format,
        "text (tokenized on load), pre-tokenized little-endian ids, indexed (Megatron "
        ".bin/.idx from hp data prepare, memory-mapped), or chat (JSONL conversations, loss on "
        "the assistant's tokens only; docs/DATA.md)");
  s.add("tokenizer", &tokenizer,
        "tokenizer.json for text data, or the one an indexed dataset was prepared with (\"\" = "
        "model.path's, else bytes: 256 ids + separator)");
  s.add("doc_separator", &doc_separator, "text: string splitting files into documents")
      .check([this] {
        return doc_separator.empty() || format == DataFormat::text
                   ? std::string()
                   : "applies to format text only (format is " + enum_name(format) +
                         (format == DataFormat::indexed
                              ? "; an indexed dataset's documents were split by "
                                "hp data prepare --doc-separator)"
                              : ")");
      });
  s.add("separator_token", &separator_token,
        "token appended after each document (\"\" = the tokenizer's end-of-text)");
  s.add("chat_template", &chat_template,
        "chat data: tokenizer_config.json holding chat_template, or a .jinja file (\"\" = the "
        "tokenizer_config.json beside the tokenizer)");
  s.add("shuffle", &shuffle, "visit sequences in a seeded random order each epoch");
  s.add("document_mask", &document_mask,
        "attention stays inside each packed document (Megatron's --reset-attention-mask); auto = "
        "on for data with a loss mask (chat; docs/DATA.md)");
  s.add("reset_position_ids", &reset_position_ids,
        "RoPE positions restart at 0 at each packed document (--reset-position-ids); auto = as "
        "data.document_mask resolves");
  s.exclusive({"path"}, {"sources"});
}

void EvalConfig::describe(Schema& s) {
  s.add("data", &data,
        "validation dataset, in the forms of data.path (eval.format); or eval.split");
  s.add("format", &format, "eval.data's format (\"\" = data.format)");
  s.add("split", &split,
        "hold out this fraction of data.path's documents for validation, never trained on "
        "(0 = none; docs/DATA.md)")
      .min(0)
      .below(1);
  s.add("interval", &interval, "validate every N steps, and after the last (0 = after the last)")
      .min(0);
  s.add("steps", &steps, "batches per validation (the same ones every time)").min(1);
  s.add("batch_size", &batch_size,
        "sequences per validation batch (0 = training.batch_size / training.grad_accum)")
      .min(0);
  // eval.format describes eval.data only: it goes with it.
  s.exclusive({"data", "format"}, {"split"});
}

void MuonConfig::describe(Schema& s) {
  s.add("momentum", &momentum, "momentum coefficient").min(0).below(1);
  s.add("nesterov", &nesterov, "Nesterov momentum (update = g + momentum·buf)");
  s.add("ns_steps", &ns_steps, "Newton–Schulz iterations").min(1).max(20);
  s.add("update_scale", &update_scale,
        "rms_match: 0.2·sqrt(max(rows, cols)) (shares AdamW's lr); shape: sqrt(max(1, rows/cols))");
  s.add("adamw_params", &adamw_params,
        "FQN globs of matrices kept on AdamW under muon (embeddings, output head)");
}

void ParamGroupConfig::describe(Schema& s) {
  s.add("params", &params, "FQN globs of this group's parameters (first matching group wins)")
      .non_empty();
  s.add("optimizer", &optimizer, "auto (the run's rule) | adamw | muon");
  s.add("lr", &lr, "peak lr of this group (null = optimizer.lr)").above(0);
  s.add("weight_decay", &weight_decay, "weight decay of this group (null = optimizer's)").min(0);
}

void OptimizerConfig::describe(Schema& s) {
  s.add("name", &name, "adamw for all, or muon for 2-D hidden matrices + AdamW for the rest");
  s.add("lr", &lr, "peak learning rate (the schedule scales it)").above(0);
  s.add("betas", &betas, "AdamW (beta1, beta2)").size(2).min(0).below(1);
  s.add("eps", &eps, "AdamW denominator epsilon").above(0);
  s.add("weight_decay", &weight_decay, "decoupled weight decay (lr·wd per step)").min(0);
  s.section("muon", muon);
  s.add_list("groups", &groups, "parameter groups by FQN glob, checked before the defaults");
}

void LrSchedulerConfig::describe(Schema& s) {
  s.add("name", &name, "constant | cosine | linear | wsd (warmup-stable-decay)");
  s.add("warmup_steps", &warmup_steps, "linear warmup steps").min(0);
  s.add("decay_fraction", &decay_fraction, "wsd: fraction of training.steps spent decaying")
      .above(0)
      .max(1);
  s.add("min_lr_ratio", &min_lr_ratio, "final lr as a fraction of the peak").min(0).max(1);
}

void TrainingConfig::describe(Schema& s) {
  s.add("steps", &steps, "number of optimizer steps").min(1);
  s.add("seed", &seed, "seed of parameter init, data order and dropout").min(0);
  s.add("batch_size", &batch_size, "global batch in sequences per optimizer step").min(1);
  s.add("seq_len", &seq_len, "tokens per sequence").min(1);
  s.add("grad_accum", &grad_accum, "micro-batches per optimizer step").min(1);
  s.add("grad_clip", &grad_clip, "max global gradient norm (0 = no clipping)").min(0);
  s.add("mixed_precision", &mixed_precision,
        "dtype the model computes in (parameters gathered and cast to it; f32 masters either "
        "way); auto = bf16 where the CPU multiplies bf16 natively (AVX512_BF16, AMX), else f32");
  s.add("sample_prompt", &sample_prompt, "prompt of the sample generated at the end");
  s.add("sample_tokens", &sample_tokens, "tokens generated at the end (0 = no sample)").min(0);
  s.add("max_skipped_steps", &max_skipped_steps,
        "stop the run as diverged after this many consecutive steps skipped for a non-finite "
        "gradient norm (0 = never)")
      .min(0);
  s.add("fusion", &fusion,
        "vector chains of the models through DVM fused regions (docs/FUSION.md \"Modes\"): "
        "none (eager ops) | auto (only what measured faster, bitwise equal to none) | lazy "
        "(SwiGLU, the RMSNorms, residual add + norm: within rounding); HP_FUSION overrides it");
}

void FsdpConfig::describe(Schema& s) {
  s.add("reshard_after_forward", &reshard_after_forward,
        "free gathered parameters after forward (re-gather in backward)");
  s.deprecated_alias("param_dtype", "training.mixed_precision");
  s.add("reduce_dtype", &reduce_dtype, "dtype gradients are reduce-scattered in");
}

void MoEParallelConfig::describe(Schema& s) {
  s.add("kernel", &kernel,
        "with ep > 1: megamoe (dispatch, expert GEMMs and combine as one Multicore pipeline per "
        "direction, all-to-all overlapping the GEMMs of other expert groups; docs/MULTICORE.md) | "
        "sequential (one exchange, all experts, one exchange back); bitwise equal in f32");
  s.add("groups", &groups,
        "megamoe: expert groups G pipelined against each other (each rank's local experts split "
        "into G by the torch.chunk rule; more than the experts per rank acts as one per expert)")
      .min(1);
}

void PlanEntryConfig::describe(Schema& s) {
  s.add("modules", &modules, "FQN globs of the modules this entry splits").non_empty();
  s.add("style", &style,
        "colwise (weight rows split, output local) | rowwise (weight columns split, output "
        "reduced) | sequence (a norm on this rank's sequence slice) | replicate (not split)");
}

void PipelineConfig::describe(Schema& s) {
  s.add("schedule", &schedule,
        "pipeline schedule: gpipe (all forwards, then all backwards) | 1f1b (one forward, one "
        "backward) | interleaved_1f1b (1f1b over virtual_stages chunks per rank) | zb_h1 (zero "
        "bubble H1: linear layers' weight gradients deferred from the backward to fill the "
        "bubble; FSDP reduces gradients once per step, after the last W; not with "
        "low_precision.recipe mxfp8) | zb_h2 (zero bubble H2: zb_h1 with up to "
        "2·pp − 1 microbatches in flight and weight gradients held back for the tail: a smaller "
        "bubble when they cost less than the input gradients; more activation memory)");
  s.add("microbatches", &microbatches,
        "microbatches per step (the batch splits as with training.grad_accum, which this sets; "
        "0 = training.grad_accum); >= parallel.pp except for gpipe")
      .min(0);
  s.add("layers_per_stage", &layers_per_stage,
        "decoder layers of each stage in model order (pp × virtual_stages entries summing to the "
        "layer count); [] = balanced by estimated cost (the embedding with the first stage, the "
        "final norm, head and loss with the last count as their FLOPs)");
  s.add("virtual_stages", &virtual_stages,
        "model chunks per pipeline rank (interleaved_1f1b: stage s on rank s % pp)")
      .min(1);
  s.add("stage_ranks", &stage_ranks,
        "ranks of each stage, summing to the world (heterogeneous stages: each stage FSDP over "
        "its ranks, activations resharded by rows between stages; needs tp, cp, dp_replicate "
        "and ep 1 and micro-batch rows that divide by every entry); [] = world / pp each");
}

void ParallelConfig::describe(Schema& s) {
  s.add("pp", &pp,
        "pipeline-parallel degree: the model cut at layer boundaries into pp stages "
        "(parallel.pipeline), the outermost mesh axis (world = pp × dp_replicate × dp_shard × "
        "cp × tp)")
      .min(1);
  s.add("dp_shard", &dp_shard,
        "data-parallel shard degree (FSDP shards parameters over dp_shard × cp ranks; -1 = world "
        "/ (dp_replicate × cp × tp))")
      .check([this] {
        return dp_shard == -1 || dp_shard >= 1
                   ? std::string()
                   : "must be -1 or >= 1, got " + std::to_string(dp_shard);
      });
  s.add("dp_replicate", &dp_replicate, "replicated data-parallel degree (HSDP when > 1)").min(1);
  s.add("tp", &tp, "tensor-parallel degree (attention heads, MLP and vocabulary split over tp)")
      .min(1);
  s.add("cp", &cp,
        "context-parallel degree: every sequence split over cp ranks (training.seq_len must "
        "divide by 2 × cp: the load-balanced zigzag layout)")
      .min(1);
  s.add("ep", &ep,
        "expert-parallel degree: each MoE layer's routed experts split over ep ranks taken from "
        "dp_shard × cp (must divide it; at most model.experts; uneven splits as torch.chunk); "
        "tokens travel to their experts' ranks, and each rank's experts are FSDP-sharded over "
        "the remaining dp_shard × cp / ep")
      .min(1);
  s.add("cp_method", &cp_method,
        "ring (K/V blocks passed around the ring, overlapped with attention) | alltoall "
        "(Ulysses: heads split over cp; the query heads per tp rank must divide by cp)");
  s.add("sequence_parallel", &sequence_parallel,
        "with tp > 1: norms and the residual stream hold this rank's slice of the sequence "
        "(Megatron-SP; not for MoE models)");
  s.add_list("plan", &plan,
             "tensor-parallel plan overrides: each matched module takes this style instead of the "
             "architecture's (a new architecture needs no C++)");
  s.section("fsdp", fsdp);
  s.section("pipeline", pipeline);
  s.section("moe", moe);
}

void LowPrecisionConfig::describe(Schema& s) {
  s.add("recipe", &recipe, "none or mxfp8 (MX linear layers)");
  s.add("elem", &elem, "MX element format");
  s.add("scale_mode", &scale_mode, "MX scale rounding (rceil never saturates)");
  s.add("modules", &modules, "FQN globs of linear modules to run in MX");
  s.add("exclude", &exclude, "FQN globs excluded from modules");
}

void RecomputeConfig::describe(Schema& s) {
  s.add("mode", &mode, "activation recompute: none | full | selective");
  s.add("every_k_layers", &every_k_layers,
        "selective: recompute layers i with i % every_k_layers == 0 (0, k, 2k, ...)")
      .min(1);
  s.add("modules", &modules,
        "selective: blocks of those layers to recompute, globs over self_attn, mlp, "
        "input_layernorm, post_attention_layernorm (empty = whole layers)");
}

void MemoryConfig::describe(Schema& s) {
  s.add("device_budget", &device_budget,
        "cap of the device tier every tensor is computed in (e.g. 6GiB, 512MiB, 8GB; \"\" = "
        "unlimited): an allocation past it fails naming the live bytes per category (hp memory "
        "plan estimates them)")
      .check([this] {
        if (device_budget.empty()) return std::string();
        try {
          parse_byte_size(device_budget, "memory.device_budget");
        } catch (const ValueError& e) {
          // The field's own prefix ("[config] file:line: memory.device_budget: ") comes first.
          const std::string what = e.what();
          return what.substr(what.find(": ") + 2);
        }
        return std::string();
      });
  s.add("disk_dir", &disk_dir,
        "directory of the disk tier's files, one per rank, deleted at the end of the run (\"\" = "
        "<run.dir>/offload)");
  s.add("io_threads", &io_threads, "pread/pwrite worker threads of the disk tier per rank")
      .min(1)
      .max(64);
}

void OffloadConfig::describe(Schema& s) {
  s.add("optimizer", &optimizer,
        "optimizer state (AdamW moments, Muon momentum): none (device tier) | host (host tier; "
        "the step runs there, as ZeRO-Offload) | disk (files in memory.disk_dir, streamed per "
        "FSDP group: the next group is read while one steps, each written back after it)");
  s.add("params", &params,
        "FSDP's f32 master shards: none (device tier) | host (host tier; each group's shard is "
        "copied up when it is gathered, and the optimizer steps it there)");
  s.add("grads", &grads,
        "the master shards' gradients: none (device tier) | host (each reduction's result is "
        "copied down and accumulated there)");
  s.add("activations", &activations,
        "tensors the selected decoder layers save for backward: none (device tier) | host (copied "
        "to the host tier as they are saved, fetched back before their layer's backward, the "
        "previous layer's prefetched meanwhile) | disk (as host, but written to the disk tier's "
        "file in memory.disk_dir and read back); with recompute, a recomputed layer saves only "
        "its input, and that is what moves");
  s.add("activations_every_k_layers", &activations_every_k_layers,
        "activation offload of layers i with i % k == 0 (0, k, 2k, ...)")
      .min(1);
  s.add("activations_modules", &activations_modules,
        "activation offload of these blocks of the selected layers only, globs over self_attn, "
        "mlp, input_layernorm, post_attention_layernorm (empty = whole layers)");
  s.add("activations_min_bytes", &activations_min_bytes,
        "saved storages smaller than this stay on the device tier")
      .min(0);
  s.add("activations_select", &activations_select,
        "all (offload every block activations_every_k_layers / activations_modules select) | "
        "largest (of those, the blocks that save the most bytes first, until the memory plan's "
        "device total fits memory.device_budget; hp memory plan lists the choice) | auto (as "
        "largest, each chosen block either recomputed or swapped, whichever costs less: its "
        "forward FLOPs at the GEMM rate vs its bytes at the tier's bandwidth less the overlap)");
}

void CheckpointConfig::describe(Schema& s) {
  s.add("interval", &interval, "save every N steps (0 = only at the end)").min(0);
  s.add("keep", &keep, "checkpoints kept in run.dir (0 = all)").min(0);
  s.add("save_final", &save_final, "save a checkpoint after the last step");
}

void MetricsConfig::describe(Schema& s) {
  s.add("log_every", &log_every, "print metrics every N steps").min(1);
  s.add("jsonl", &jsonl, "also append every logged step's metrics to run.dir/metrics.jsonl");
  s.add("peak_tflops", &peak_tflops,
        "MFU denominator in TFLOP/s (0 = the GEMM peak of the compute dtype, measured once per "
        "machine and cached: hp bench peak)")
      .min(0);
  s.add("progress", &progress, "auto (a bar on a terminal, else lines) | bar | lines | none");
  s.add("profile_steps", &profile_steps,
        "[first, last] steps (1-based, inclusive) to profile: a Chrome trace in run.dir/trace.json "
        "and per-op / per-layer time tables at the end ([] = off; hp train --profile picks three)")
      .check([this] {
        if (profile_steps.empty()) return std::string();
        if (profile_steps.size() != 2)
          return "must be [first, last] or [], got " + std::to_string(profile_steps.size()) +
                 " values";
        for (double v : profile_steps)
          if (v < 1 || v != double(int64_t(v)))
            return ::hp::detail::cat("steps are integers >= 1, got ", v);
        if (profile_steps[0] > profile_steps[1]) return std::string("needs first <= last");
        return std::string();
      });
  s.add("profile_max_events", &profile_max_events,
        "the profiler keeps at most this many events (~150 bytes each in the trace); later ones "
        "are dropped with a note, the tables still count them")
      .min(1000);
}

void RunConfig::describe(Schema& s) {
  s.add("dir", &dir, "run directory: resolved config, metrics, checkpoints").non_empty();
}

void Config::describe(Schema& s) {
  s.section("model", model);
  s.section("data", data);
  s.section("eval", eval);
  s.section("optimizer", optimizer);
  s.section("lr_scheduler", lr_scheduler);
  s.section("training", training);
  s.section("parallel", parallel);
  s.section("low_precision", low_precision);
  s.section("recompute", recompute);
  s.section("memory", memory);
  s.section("offload", offload);
  s.section("checkpoint", checkpoint);
  s.section("metrics", metrics);
  s.section("run", run);
}

namespace {

struct ResumeRule {
  std::string_view key;  // a section ("model") or, in the sections classified key by key, a field
  ResumeChange change;
};

// Resume classification (config.h ResumeChange). Sections whose keys all act alike are classified
// whole; training, parallel and eval mix both kinds, so each of their keys is listed, and a new key
// there fails ResumeCheck.EveryKeyIsClassified until it is placed. Parallel layout is free
// (resharding on resume is a feature) except what changes the math: microbatches sets
// training.grad_accum, reduce_dtype rounds the gradients. recompute and offload are free because
// their losses are bitwise those of the run without them (docs/ARCHITECTURE.md §4c).
constexpr ResumeChange kMath = ResumeChange::math, kFree = ResumeChange::free;
constexpr ResumeRule kResumeRules[] = {
    {"model", kMath},
    {"data", kMath},
    {"optimizer", kMath},
    {"lr_scheduler", kMath},
    {"low_precision", kMath},
    {"recompute", kFree},
    {"memory", kFree},
    {"offload", kFree},
    {"checkpoint", kFree},
    {"metrics", kFree},
    {"run", kFree},
    // eval: passes over held-out data, except split, which decides what is trained on.
    {"eval.data", kFree},
    {"eval.format", kFree},
    {"eval.split", kMath},
    {"eval.interval", kFree},
    {"eval.steps", kFree},
    {"eval.batch_size", kFree},
    {"training.steps", kMath},  // the lr schedule's length
    {"training.seed", kMath},
    {"training.batch_size", kMath},
    {"training.seq_len", kMath},
    {"training.grad_accum", kMath},
    {"training.grad_clip", kMath},
    {"training.mixed_precision", kMath},
    {"training.sample_prompt", kFree},
    {"training.sample_tokens", kFree},
    {"training.max_skipped_steps", kFree},
    {"training.fusion", kMath},  // lazy is within rounding, not bitwise
    {"parallel.pp", kFree},
    {"parallel.dp_shard", kFree},
    {"parallel.dp_replicate", kFree},
    {"parallel.tp", kFree},
    {"parallel.cp", kFree},
    {"parallel.ep", kFree},
    {"parallel.cp_method", kFree},
    {"parallel.sequence_parallel", kFree},
    {"parallel.plan", kFree},
    {"parallel.fsdp.reshard_after_forward", kFree},
    {"parallel.fsdp.reduce_dtype", kMath},
    {"parallel.pipeline.schedule", kFree},
    {"parallel.pipeline.microbatches", kMath},
    {"parallel.pipeline.layers_per_stage", kFree},
    {"parallel.pipeline.virtual_stages", kFree},
    {"parallel.pipeline.stage_ranks", kFree},
    {"parallel.moe.kernel", kFree},
    {"parallel.moe.groups", kFree},
};

}  // namespace

ResumeChange resume_change(std::string_view path) {
  const std::string_view section = path.substr(0, path.find('.'));
  for (const ResumeRule& r : kResumeRules)
    if (r.key == path || r.key == section) return r.change;
  HP_THROW(InternalError, "config", path, ": no resume classification (config.cpp kResumeRules)");
}

DocumentFlags document_flags(const Config& c, bool masked_data) {
  DocumentFlags f;
  f.mask =
      c.data.document_mask == AutoFlag::auto_ ? masked_data : c.data.document_mask == AutoFlag::on;
  f.reset_positions = c.data.reset_position_ids == AutoFlag::auto_
                          ? f.mask
                          : c.data.reset_position_ids == AutoFlag::on;
  return f;
}

namespace {

// parallel.pipeline.stage_ranks (heterogeneous stages) against parallel.pp, the other degrees and
// the micro-batch rows.
template <class Fail>
void check_stage_ranks(const Config& c, Fail&& fail) {
  const ParallelConfig& p = c.parallel;
  const PipelineConfig& pl = p.pipeline;
  auto str = [](auto v) { return std::to_string(v); };
  if (pl.stage_ranks.empty()) return;
  std::string list;
  bool whole = true;
  for (double v : pl.stage_ranks) {
    list += (list.empty() ? "" : ", ") + detail::cat(v);
    whole &= v >= 1 && v == double(int64_t(v));
  }
  const int64_t rows =
      c.training.grad_accum >= 1 ? c.training.batch_size / c.training.grad_accum : 0;
  if (int64_t(pl.stage_ranks.size()) != p.pp)
    fail("parallel.pipeline.stage_ranks", "[" + list + "] has " + str(pl.stage_ranks.size()) +
                                              " entries for parallel.pp = " + str(p.pp));
  else if (!whole)
    fail("parallel.pipeline.stage_ranks",
         "[" + list + "]: every stage needs a whole number >= 1 of ranks");
  else if (p.tp != 1 || p.cp != 1 || p.dp_replicate != 1 || p.ep != 1 || pl.virtual_stages != 1)
    fail("parallel.pipeline.stage_ranks", "[" + list +
                                              "] needs parallel.tp, cp, dp_replicate, ep and "
                                              "parallel.pipeline.virtual_stages 1");
  else
    for (double v : pl.stage_ranks)
      if (rows > 0 && rows % int64_t(v) != 0) {
        fail("parallel.pipeline.stage_ranks",
             "[" + list + "]: a micro-batch's " + str(rows) +
                 " rows (training.batch_size / grad_accum) do not split over " + detail::cat(v) +
                 " ranks");
        break;
      }
}

// parallel.pp and parallel.pipeline against each other and the model (train/pipeline_step.h runs
// them). A model loaded from model.path is checked again once its config.json is read.
template <class Fail>
void check_pipeline(const Config& c, Fail&& fail) {
  const ParallelConfig& p = c.parallel;
  const PipelineConfig& pl = p.pipeline;
  auto str = [](auto v) { return std::to_string(v); };
  if (p.pp < 1 || pl.virtual_stages < 1) return;  // their own errors
  if (pl.microbatches > 0 && c.training.grad_accum != 1 && c.training.grad_accum != pl.microbatches)
    fail("parallel.pipeline.microbatches", str(pl.microbatches) +
                                               " differs from training.grad_accum (" +
                                               str(c.training.grad_accum) + "): give one of them");
  if (p.pp == 1) return;
  const int64_t micro = pl.microbatches > 0 ? pl.microbatches : c.training.grad_accum;
  const int64_t stages = p.pp * pl.virtual_stages;
  const std::string schedule = enum_name(pl.schedule);
  const bool interleaved = pl.schedule == PipelineSchedule::interleaved_1f1b;
  if (pl.schedule != PipelineSchedule::gpipe && micro < p.pp)
    fail("parallel.pipeline.microbatches",
         str(micro) + " (training.grad_accum when 0) is fewer than parallel.pp = " + str(p.pp) +
             ": schedule " + schedule + " needs at least one microbatch per stage");
  if ((pl.schedule == PipelineSchedule::zb_h1 || pl.schedule == PipelineSchedule::zb_h2) &&
      c.low_precision.recipe == LowPrecisionRecipe::mxfp8)
    fail("parallel.pipeline.schedule",
         schedule +
             " splits the linear layers' backward, which low_precision.recipe mxfp8 "
             "(MX GEMM kernels) does not support; use 1f1b");
  if (interleaved && pl.virtual_stages < 2)
    fail("parallel.pipeline.virtual_stages",
         "must be >= 2 with schedule interleaved_1f1b, got " + str(pl.virtual_stages));
  if (!interleaved && pl.virtual_stages != 1)
    fail("parallel.pipeline.virtual_stages",
         str(pl.virtual_stages) + " needs schedule interleaved_1f1b, not " + schedule);
  if (interleaved && micro % p.pp != 0)
    fail("parallel.pipeline.microbatches",
         str(micro) + " is not a multiple of parallel.pp = " + str(p.pp) +
             " (interleaved_1f1b runs microbatches in groups of pp)");
  if (!pl.layers_per_stage.empty()) {
    double sum = 0;
    std::string list;
    for (double v : pl.layers_per_stage) {
      sum += v;
      list += (list.empty() ? "" : ", ") + detail::cat(v);
    }
    bool whole = true;
    for (double v : pl.layers_per_stage) whole &= v >= 1 && v == double(int64_t(v));
    if (int64_t(pl.layers_per_stage.size()) != stages)
      fail("parallel.pipeline.layers_per_stage",
           "[" + list + "] has " + str(pl.layers_per_stage.size()) + " entries for " + str(stages) +
               " stages (parallel.pp × parallel.pipeline.virtual_stages)");
    else if (!whole)
      fail("parallel.pipeline.layers_per_stage",
           "[" + list + "]: every stage needs a whole number >= 1 of layers");
    else if (c.model.layers > 0 && sum != double(c.model.layers))
      fail("parallel.pipeline.layers_per_stage", "[" + list + "] sums to " + detail::cat(sum) +
                                                     ", not model.layers = " + str(c.model.layers));
  }
  check_stage_ranks(c, fail);
  if (c.model.layers > 0 && c.model.layers < stages)
    fail("parallel.pp", str(p.pp) + " × parallel.pipeline.virtual_stages " +
                            str(pl.virtual_stages) + " = " + str(stages) +
                            " stages for model.layers = " + str(c.model.layers) +
                            ": every stage needs a layer");
  const bool unequal_stages = std::any_of(pl.stage_ranks.begin(), pl.stage_ranks.end(),
                                          [&](double k) { return k != pl.stage_ranks.front(); });
  if (c.model.path.empty() && c.model.tie_embeddings && unequal_stages)
    fail("parallel.pipeline.stage_ranks",
         "with tied embeddings (model.tie_embeddings): the first and last stages shard the "
         "embedding differently, so they cannot add its gradients shard by shard; give equal "
         "stages");
  if (p.cp > 1) fail("parallel.pp", str(p.pp) + " with parallel.cp > 1 is not supported yet");
  if (c.eval.enabled() && unequal_stages)
    fail(c.eval.data.empty() ? "eval.split" : "eval.data",
         "validation runs the stages' forward outside the schedule, which stages of different "
         "rank counts (parallel.pipeline.stage_ranks) do not");
  if (c.training.sample_tokens > 0 && unequal_stages)
    fail("training.sample_tokens",
         str(c.training.sample_tokens) +
             ": the end-of-run sample runs the stages one row at a time, which stages of "
             "different rank counts (parallel.pipeline.stage_ranks) do not; set it to 0");
  if (c.model.experts > 0 && c.model.router_aux_loss_coef > 0 && unequal_stages)
    fail("parallel.pipeline.stage_ranks",
         "of different sizes with a router load-balancing loss (model.router_aux_loss_coef > 0): "
         "its statistics travel between equal stages only; give equal stages");
}

// training.batch_size and seq_len against the parallel degrees, and those against the model.
template <class Fail>
void check_degrees(const Config& c, Fail&& fail) {
  const ModelSection& m = c.model;
  const TrainingConfig& t = c.training;
  // With dp_shard -1 the world size is known only at launch (checked again there). A factor < 1
  // has already been reported at its own key (and would divide by zero here).
  // A product that overflows int64 exceeds batch_size: it cannot divide it.
  int64_t split = 0;
  const bool huge =
      __builtin_mul_overflow(t.grad_accum, std::max<int64_t>(1, c.parallel.dp_shard), &split) ||
      __builtin_mul_overflow(split, c.parallel.dp_replicate, &split);
  if (t.grad_accum >= 1 && c.parallel.dp_replicate >= 1 && (huge || t.batch_size % split != 0))
    fail("training.batch_size",
         std::to_string(t.batch_size) +
             " does not divide into grad_accum × dp_shard × dp_replicate = " +
             std::to_string(split) + " equal micro-batches");
  // Context parallelism: each rank holds 2 of the 2·cp equal chunks of a row's seq_len positions.
  if (c.parallel.cp > 1 && t.seq_len >= 1 && t.seq_len % (2 * c.parallel.cp) != 0)
    fail("training.seq_len", std::to_string(t.seq_len) + " does not split into 2 × parallel.cp = " +
                                 std::to_string(2 * c.parallel.cp) +
                                 " equal chunks (context parallelism's load-balanced layout)");
  if (c.parallel.cp > 1 && c.parallel.cp_method == CpMethod::alltoall && m.heads >= 1 &&
      c.parallel.tp >= 1 && m.heads % c.parallel.tp == 0 &&
      (m.heads / c.parallel.tp) % c.parallel.cp != 0)
    fail("parallel.cp", std::to_string(c.parallel.cp) + " does not divide the query heads per " +
                            "tp rank (model.heads " + std::to_string(m.heads) + " / parallel.tp " +
                            std::to_string(c.parallel.tp) +
                            "), which Ulysses (cp_method alltoall) splits; use cp_method ring");
  // Expert parallelism: at least one expert per ep rank (uneven splits follow the chunk rule); the
  // ep ranks come from dp_shard × cp (with
  // dp_shard -1, checked again at launch).
  // (A model loaded from model.path is checked once its config.json is read.)
  if (c.parallel.ep > 1 && m.experts == 0 && m.path.empty())
    fail("parallel.ep", std::to_string(c.parallel.ep) + " needs a mixture-of-experts model (" +
                            "model.experts is 0)");
  if (c.parallel.ep > 1 && m.experts > 0 &&
      (c.parallel.ep - 1) * ((m.experts + c.parallel.ep - 1) / c.parallel.ep) >= m.experts)
    fail("parallel.ep", std::to_string(c.parallel.ep) + " leaves an ep rank without an expert " +
                            "(model.experts " + std::to_string(m.experts) + " in chunks of " +
                            std::to_string((m.experts + c.parallel.ep - 1) / c.parallel.ep) + ")");
  if (c.parallel.ep > 1 && c.parallel.dp_shard >= 1 && c.parallel.cp >= 1 &&
      (c.parallel.dp_shard * c.parallel.cp) % c.parallel.ep != 0)
    fail("parallel.ep", std::to_string(c.parallel.ep) + " does not divide parallel.dp_shard × " +
                            "parallel.cp = " + std::to_string(c.parallel.dp_shard) + " × " +
                            std::to_string(c.parallel.cp) + " (the ranks experts split over)");
}

// offload.activations_select and recompute against each other and the memory budget.
template <class Fail>
void check_memory(const Config& c, Fail&& fail) {
  const ModelSection& m = c.model;
  // "largest first until it fits" needs something to offload and a budget to fit; auto plans
  // recompute itself.
  const ActivationSelect select = c.offload.activations_select;
  if (select != ActivationSelect::all && c.offload.activations == OffloadTier::none)
    fail("offload.activations_select", enum_name(select) +
                                           " needs offload.activations host or disk, got "
                                           "offload.activations none");
  if (select != ActivationSelect::all && c.memory.device_budget.empty())
    fail("offload.activations_select",
         enum_name(select) + " needs memory.device_budget to fit (unset: unlimited)");
  if (select == ActivationSelect::auto_ && c.recompute.mode != RecomputeMode::none)
    fail("recompute.mode",
         "must be none with offload.activations_select auto (the memory plan "
         "chooses the blocks to recompute), got " +
             enum_name(c.recompute.mode));
  if (c.recompute.mode == RecomputeMode::selective && m.layers > 0 &&
      c.recompute.every_k_layers > m.layers)
    fail("recompute.every_k_layers", std::to_string(c.recompute.every_k_layers) +
                                         " exceeds model.layers (" + std::to_string(m.layers) +
                                         ")");
}

// Cross-field consistency; each error is reported at the field the user should change.
void check_consistency(const Config& c, Schema& s, const std::string& file,
                       std::vector<std::string>* errors) {
  auto fail = [&](const std::string& path, const std::string& what) {
    const Field* f = s.find(path);
    const std::string& origin = f && !f->origin.empty() ? f->origin : file;
    errors->push_back("[config] " + origin + ": " + path + ": " + what);
  };
  const ModelSection& m = c.model;
  const models::Architecture* arch =
      m.arch.empty() ? nullptr : models::find_architecture_by_short_name(m.arch);
  if (m.path.empty() && m.arch.empty())
    fail("model.path", "required (or model.arch with the size fields)");
  if (!m.path.empty() && !m.arch.empty())
    fail("model.arch", "give model.path or model.arch, not both");
  // A size given with model.path would be silently unused (the resolved config of a model.path
  // run writes them at their defaults, which reads back fine).
  if (!m.path.empty() && m.arch.empty())
    for (const char* key : kArchKeys)
      if (const std::string path = std::string("model.") + key; s.differs_from_default(path))
        fail(path,
             "describes a model built from model.arch; model.path's config.json gives it "
             "(remove it)");
  if (!m.arch.empty()) {
    const std::pair<const char*, int64_t> sizes[] = {{"hidden", m.hidden},
                                                     {"layers", m.layers},
                                                     {"heads", m.heads},
                                                     {"kv_heads", m.kv_heads},
                                                     {"intermediate", m.intermediate}};
    bool complete = true;
    for (auto [name, v] : sizes) {
      // A negative size already failed the field's own ">= 0": one error per key.
      if (v == 0) fail(std::string("model.") + name, "must be >= 1 with model.arch, got 0");
      complete = complete && v >= 1;
    }
    if (complete && m.hidden % m.heads != 0)
      fail("model.heads", std::to_string(m.heads) + " does not divide model.hidden (" +
                              std::to_string(m.hidden) + ")");
    if (complete && m.heads % m.kv_heads != 0)
      fail("model.kv_heads", std::to_string(m.kv_heads) + " does not divide model.heads (" +
                                 std::to_string(m.heads) + ")");
    const std::pair<const char*, int64_t> split_by_tp[] = {
        {"model.heads", m.heads},
        {"model.kv_heads", arch && arch->shared_kv_head ? 0 : m.kv_heads},
        {"model.intermediate", m.experts > 0 ? 0 : m.intermediate}};
    for (auto [name, v] : split_by_tp)
      if (complete && c.parallel.tp >= 1 && v % c.parallel.tp != 0)  // tp < 1: its own error
        fail("parallel.tp", std::to_string(c.parallel.tp) + " does not divide " + name + " (" +
                                std::to_string(v) + ")");
  }
  if (c.data.path.empty() && c.data.sources.empty())
    fail("data.path", "required (or data.sources)");
  if (!c.data.path.empty() && !c.data.sources.empty())
    fail("data.sources", "give data.path or data.sources, not both");
  if (!c.eval.data.empty() && c.eval.split > 0)
    fail("eval.split", "give eval.data or eval.split, not both");
  if (c.eval.split > 0 && !c.data.sources.empty())
    fail("eval.split", "holds out documents of data.path; with data.sources give eval.data");
  if (!c.eval.enabled() && (c.eval.interval > 0 || c.eval.batch_size > 0 || c.eval.format))
    fail("eval.data",
         "required (or eval.split) when eval.interval, eval.batch_size or eval.format is set");
  const TrainingConfig& t = c.training;
  if (t.steps >= 1 && c.lr_scheduler.warmup_steps > t.steps)  // steps < 1: its own error
    fail("lr_scheduler.warmup_steps", std::to_string(c.lr_scheduler.warmup_steps) +
                                          " exceeds training.steps (" + std::to_string(t.steps) +
                                          ")");
  check_degrees(c, fail);
  check_pipeline(c, fail);
  if (c.low_precision.recipe == LowPrecisionRecipe::mxfp8 && c.low_precision.modules.empty())
    fail("low_precision.modules", "must not be empty with recipe mxfp8");
  // (model.arch not buildable from sizes is the field's own check.)
  if (arch && arch->buildable_from_sizes && arch->moe() && m.experts < 1)
    fail("model.experts", "must be >= 1 with model.arch " + m.arch);
  if (arch && arch->shared_kv_head && m.kv_heads != 1)
    fail("model.kv_heads", "must be 1 with model.arch " + m.arch +
                               " (one key/value head shared by every query head), got " +
                               std::to_string(m.kv_heads));
  if (m.experts > 0 && (m.experts_per_token < 1 || m.experts_per_token > m.experts))
    fail("model.experts_per_token", "must be in [1, model.experts = " + std::to_string(m.experts) +
                                        "], got " + std::to_string(m.experts_per_token));
  if (m.experts > 0 && !(arch && arch->moe()))
    fail("model.experts", "needs model.arch " + moe_names(", ", " or ") + ", got '" + m.arch + "'");
  check_memory(c, fail);
}

void throw_if_any(const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  std::string all;
  for (const auto& e : errors) all += (all.empty() ? "" : "\n") + e;
  throw ValueError(all);
}

// Neither parallel.pipeline.microbatches nor training.grad_accum given under pp > 1: as many
// microbatches as the schedule needs, one per stage (gpipe runs with any number, so it keeps 1).
// Returns the log line that says so ("" when nothing was chosen).
std::string default_microbatches(Config& c, const Schema& s) {
  const PipelineConfig& pl = c.parallel.pipeline;
  if (c.parallel.pp < 2 || pl.schedule == PipelineSchedule::gpipe ||
      s.given("parallel.pipeline.microbatches") || s.given("training.grad_accum"))
    return "";
  c.training.grad_accum = c.parallel.pp;
  return "[config] parallel.pipeline.microbatches: " + std::to_string(c.parallel.pp) +
         " (not given: schedule " + enum_name(pl.schedule) +
         " needs one per stage; training.grad_accum follows)";
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& sets) {
  Config c;
  Schema s;
  c.describe(s);
  std::vector<std::string> errors;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    HP_THROW(ValueError, "config", source, ":", e.mark.line + 1, ": invalid YAML: ", e.msg);
  }
  Source src(source, true, &errors);
  // An empty file is an empty mapping (every field at its default).
  if (!root.IsNull()) s.apply(root, src);
  for (const auto& set : sets) s.apply_override(set, &errors);
  throw_if_any(errors);
  // A rejected word leaves its field at the default: the checks across fields would judge a value
  // the user did not write, so they wait until the word is fixed.
  const bool rejected_word = s.validate(source, &errors);
  // parallel.pipeline.microbatches is training.grad_accum under another name (the batch splits the
  // same way): given alone, it sets it.
  if (c.parallel.pipeline.microbatches > 0 && c.training.grad_accum == 1)
    c.training.grad_accum = c.parallel.pipeline.microbatches;
  c.notes.lines = s.deprecations();
  for (const auto& r : s.replacements()) c.notes.lines.push_back(r);
  if (!rejected_word) {
    if (std::string note = default_microbatches(c, s); !note.empty()) c.notes.lines.push_back(note);
    check_consistency(c, s, source, &errors);
  }
  throw_if_any(errors);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& sets) {
  return parse_config(io::read_text_file(path, "config"), path, sets);
}

std::string to_yaml(const Config& config) {
  Config copy = config;
  Schema s;
  copy.describe(s);
  YAML::Emitter out;
  out << YAML::BeginMap;
  s.emit(out);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string schema_text() {
  Config c;
  Schema s;
  c.describe(s);
  return s.describe_text();
}

}  // namespace hp::train
