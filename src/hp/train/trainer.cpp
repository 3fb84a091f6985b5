// The training loop (trainer.h): set-up from the config tree, the step, checkpoints and resume.
#include "hp/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include "hp/autograd/grad_mode.h"
#include "hp/checkpoint/dcp.h"
#include "hp/core/allocator.h"
#include "hp/core/byte_size.h"
#include "hp/core/error.h"
#include "hp/core/profiler.h"
#include "hp/core/random.h"
#include "hp/data/dataset.h"
#include "hp/data/loader.h"
#include "hp/dist/communicator.h"
#include "hp/fsdp/fsdp.h"
#include "hp/fusion/mode.h"
#include "hp/kernels/cpu/gemm_peak.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/models/generate.h"
#include "hp/models/hf/registry.h"
#include "hp/moe/megamoe.h"
#include "hp/offload/activations.h"
#include "hp/ops/ops.h"
#include "hp/optim/grad.h"
#include "hp/optim/optimizer.h"
#include "hp/optim/state_offload.h"
#include "hp/shard/plan.h"
#include "hp/train/evaluate.h"
#include "hp/train/loss.h"
#include "hp/train/memory_plan.h"
#include "hp/train/metrics.h"
#include "hp/train/options.h"
#include "hp/train/parallelize.h"
#include "hp/train/pipeline_step.h"
#include "hp/train/profile.h"
#include "hp/train/run_dir.h"
#include "hp/train/setup.h"
#include "hp/train/state.h"
#include "hp/train/step.h"

namespace hp::train {

namespace {

class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "2 expert groups", or the effective count when parallel.moe.groups exceeds the expert slots per
// rank: "4 expert groups: parallel.moe.groups 99 exceeds the 4 expert slots per rank".
std::string megamoe_groups_text(const Config& cfg, int64_t experts, int64_t ep) {
  const int64_t given = cfg.parallel.moe.groups, run = moe::megamoe_groups(experts, ep, given);
  const int64_t slots = (experts + ep - 1) / ep;
  return std::to_string(run) + " expert groups" +
         (run == given ? std::string()
                       : ": parallel.moe.groups " + std::to_string(given) + " exceeds the " +
                             std::to_string(slots) + " expert slots per rank");
}

// What the run is, before its first step (rank 0).
void describe_run(const Config& cfg, const TrainResult& res, const RunData& data,
                  const data::DataLoader& loader, const Layout& layout, const Parallelized& par,
                  const models::CausalLM& model, MetricsLog& log) {
  for (const auto& note : cfg.notes.lines) log.message(note);  // deprecated keys used
  const auto& c = model.config();
  log.message("model: " + c.architecture + ", " + std::to_string(res.num_parameters) +
              " parameters (" + std::to_string(c.num_hidden_layers) + " layers, hidden " +
              std::to_string(c.hidden_size) + ", vocab " + std::to_string(c.vocab_size) + ")");
  for (int s = 0; s < loader.num_sources(); ++s) {
    const data::TokenDataset& d = loader.source(s);
    std::string blend;
    if (data.blend)
      blend = detail::cat(" (source ", s, ", weight ", data.sources[s].weight, ": ",
                          loader.quotas()[static_cast<size_t>(s)], " of every ",
                          loader.samples_per_epoch(), " sequences)");
    log.message("data: " + data.names[s] + blend + ", " + std::to_string(d.size()) + " tokens in " +
                std::to_string(d.num_documents()) + " documents" +
                (cfg.eval.split > 0 ? " (without the held-out ones)" : ""));
  }
  std::string tp;
  if (layout.tp > 1)
    tp = std::string(" × tp ") + std::to_string(layout.tp) +
         (par.sequence_parallel ? " (sequence parallel)" : " (no sequence parallelism)") +
         ", vocabulary-parallel head and loss";
  std::string cp;
  if (layout.cp > 1)
    cp = " × cp " + std::to_string(layout.cp) + " (" + enum_name(cfg.parallel.cp_method) + ", " +
         std::to_string(cfg.training.seq_len / layout.cp) + " of " +
         std::to_string(cfg.training.seq_len) + " tokens per rank)";
  std::string ep;
  if (layout.ep > 1)
    ep = ", ep " + std::to_string(layout.ep) + " (each MoE layer's experts split over " +
         std::to_string(layout.ep) + " of the dp_shard × cp ranks, FSDP over the other " +
         std::to_string(layout.dp_shard * layout.cp / layout.ep) + ")" +
         (cfg.parallel.moe.kernel == MoEKernel::megamoe
              ? " on MegaMoE (" + megamoe_groups_text(cfg, c.num_experts, layout.ep) + ")"
              : std::string(" on the sequential exchange"));
  const std::string pp = layout.pp > 1 ? "pp " + std::to_string(layout.pp) + " × (" : std::string();
  int64_t ranks = 0;
  for (int64_t k : layout.stage_sizes) ranks += k;
  log.message("parallel: " + std::to_string(ranks) + " rank(s), " + pp + "dp_replicate " +
              std::to_string(layout.dp_replicate) + " × dp_shard " +
              std::to_string(layout.dp_shard) + cp + tp + ep + (pp.empty() ? "" : ")") +
              "; params " + std::string(dtype_name(compute_dtype(cfg))) +
              (cfg.training.mixed_precision == MixedPrecision::auto_ ? " (auto)" : "") +
              " compute, f32 masters; " + kernels::isa_summary());
  if (!res.mx_modules.empty()) {
    std::string list;
    for (const auto& m : res.mx_modules) list += (list.empty() ? "" : ", ") + m;
    log.message("low precision: mxfp8 (" + enum_name(cfg.low_precision.elem) + ", " +
                enum_name(cfg.low_precision.scale_mode) + ") on " +
                std::to_string(res.mx_modules.size()) + " modules: " + list);
  }
  if (!res.recompute_modules.empty())
    log.message("recompute: " +
                (cfg.recompute.mode == RecomputeMode::none
                     ? "by cost (offload.activations_select auto)"
                     : enum_name(cfg.recompute.mode)) +
                " on " + std::to_string(res.recompute_modules.size()) + " modules");
  if (!res.offload_modules.empty())
    log.message("activation offload: " + enum_name(cfg.offload.activations) + " for " +
                std::to_string(res.offload_modules.size()) + " modules (storages >= " +
                std::to_string(cfg.offload.activations_min_bytes) + " bytes)");
  const OffloadConfig& o = cfg.offload;
  if (!cfg.memory.device_budget.empty() || o.optimizer != OffloadTier::none ||
      o.params != HostOffload::none || o.grads != HostOffload::none ||
      o.activations != OffloadTier::none)
    log.message(
        "memory: device budget " +
        (cfg.memory.device_budget.empty() ? std::string("unlimited")
                                          : format_bytes(double(device_budget_bytes(cfg)))) +
        "; offload params " + enum_name(o.params) + ", grads " + enum_name(o.grads) +
        ", optimizer " + enum_name(o.optimizer) + ", activations " + enum_name(o.activations));
}

// data.sources: "data: tokens trained per source: a 1024 (50.0%), b 1024 (50.0%)".
std::string source_tokens_line(const RunData& data, const std::vector<int64_t>& tokens) {
  int64_t total = 0;
  for (int64_t t : tokens) total += t;
  std::string line = "data: tokens trained per source:";
  for (size_t s = 0; s < tokens.size(); ++s) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", total ? 100.0 * double(tokens[s]) / total : 0.0);
    line += (s ? ", " : " ") + data.names[s] + " " + std::to_string(tokens[s]) + " (" + pct + ")";
  }
  return line;
}

// The MFU denominator in TFLOP/s: metrics.peak_tflops, else the GEMM peak of the compute dtype,
// measured once per machine and cached (kernels/cpu/gemm_peak.h). The log names the one used.
double mfu_peak(const Config& cfg, MetricsLog& log, std::string* source) {
  double tflops = cfg.metrics.peak_tflops;
  if (tflops > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "metrics.peak_tflops = %.3f TFLOP/s (set in the config)",
                  tflops);
    *source = buf;
  } else {
    const kernels::GemmPeak peak = kernels::gemm_peak(compute_dtype(cfg));
    for (const std::string& w : peak.warnings) log.message("warning: " + w);
    *source = kernels::describe_peak(peak);
    tflops = peak.gflops / 1e3;
  }
  log.message("MFU against " + *source);
  return tflops;
}

// Mean throughput and MFU over the steps after the first (which pays one-time allocation and
// packing costs), and the largest per-step peak memory.
void summarize(TrainResult& res) {
  double tokens = 0, seconds = 0, mfu_time = 0;
  for (size_t i = res.steps.size() > 1 ? 1 : 0; i < res.steps.size(); ++i) {
    const StepRecord& r = res.steps[i];
    tokens += r.tokens_per_s * r.step_s;
    seconds += r.step_s;
    mfu_time += r.mfu * r.step_s;
  }
  res.tokens_per_s = seconds > 0 ? tokens / seconds : 0;
  res.mfu = seconds > 0 ? mfu_time / seconds : 0;
  for (const auto& r : res.steps) {
    res.peak_mem_bytes = std::max(res.peak_mem_bytes, r.peak_mem_bytes);
    res.act_mem_bytes = std::max(res.act_mem_bytes, r.act_mem_bytes);
  }
}

// Bytes moved between tiers so far: the optimizer's state offload, FSDP's host-tier shards and
// activation offload.
optim::TransferStats transfers(const optim::Optimizer& opt, const Parallelized& par) {
  optim::TransferStats t = opt.transfer_stats();
  const fsdp::FsdpModel::Stats f = par.fsdp->stats();
  t.host_to_device += f.host_to_device_bytes;
  t.device_to_host += f.device_to_host_bytes;
  if (par.activation_offload) {
    const offload::ActivationStats a = par.activation_offload->stats();
    t.host_to_device += a.host_to_device;
    t.device_to_host += a.device_to_host;
    t.host_to_disk += a.host_to_disk;
    t.disk_to_host += a.disk_to_host;
    t.wait_s += a.wait_s;
  }
  return t;
}

// The step's share of the running transfer counts.
void record_transfers(const optim::TransferStats& a, const optim::TransferStats& b, StepRecord* r) {
  r->device_to_host_bytes = b.device_to_host - a.device_to_host;
  r->host_to_device_bytes = b.host_to_device - a.host_to_device;
  r->host_to_disk_bytes = b.host_to_disk - a.host_to_disk;
  r->disk_to_host_bytes = b.disk_to_host - a.disk_to_host;
  r->transfer_wait_s = b.wait_s - a.wait_s;
}

// `logits`: the model's logits when it is not whole on this rank (TrainStep::sequence_logits).
std::string sample_text(models::CausalLM& model, const models::SequenceLogits& logits,
                        const data::TokenDataset& data, const TrainingConfig& t, bool kv_cache) {
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> prompt;
  for (int32_t id : data.encode(t.sample_prompt)) prompt.push_back(id);
  if (prompt.empty()) prompt.push_back(data.separator_id() >= 0 ? data.separator_id() : 0);
  models::GenerateOptions g;
  g.max_new_tokens = t.sample_tokens;
  g.greedy = false;
  g.temperature = 0.8;
  g.top_p = 0.95;
  g.seed = static_cast<uint64_t>(t.seed);
  g.kv_cache = kv_cache;
  if (data.separator_id() >= 0) g.stop_ids = {data.separator_id()};
  std::vector<int32_t> out;
  const std::vector<int64_t> ids = logits ? models::generate(logits, model.config().vocab_size, prompt, g)
                                           : models::generate(model, prompt, g);
  for (int64_t id : ids) out.push_back(static_cast<int32_t>(id));
  return data.decode(out);
}

// The state of one train() call between its steps, and the stages of a step in the order they run.
class Trainer {
 public:
  Trainer(const Config& cfg, const TrainOptions& options, dist::CommPtr world, const Layout& layout,
          RunSetup& run, std::ostream& log)
      : cfg_(cfg),
        options_(options),
        world_(std::move(world)),
        layout_(layout),
        run_(run),
        log_(log),
        schedule_(schedule_spec(cfg)) {
    res_.run_dir = cfg.run.dir;
    res_.num_parameters = run.num_parameters;
    res_.flops_per_token = run.flops_per_token;
    res_.mx_modules = run.par.mx_modules;
    res_.recompute_modules = run.par.recompute_modules;
    res_.offload_modules = run.par.offload_modules;
    if (run.data.eval) evaluator_.emplace(cfg, run.data.eval, layout, run.documents);
    step_ = make_step(run, layout, cfg, *world_);
  }

  // Resume: parameters, optimizer state, loader position and RNG. Returns the steps already done.
  int64_t resume() {
    int64_t done = 0;
    const std::string dir =
        resume_step_dir(options_.resume, options_.allow_config_change, cfg_, log_);
    if (!dir.empty()) {
      done = restore(dir, run_.par, *run_.opt, *run_.loader);
      run_.par.fsdp->reshard();  // the next forward gathers the loaded masters
      log_ << "resumed from " << dir << " at step " << done << "\n";
    } else if (options_.resume == "auto") {
      log_ << "no checkpoint in " << cfg_.run.dir << "; starting fresh\n";
    }
    res_.first_step = done + 1;
    return done;
  }

  // Resumes, describes the run, then runs steps done + 1 .. training.steps (or until a stop).
  // `fusion`: the run's fusion mode (HP_FUSION may override training.fusion).
  TrainResult run(fusion::Mode fusion);

 private:
  // Steps done + 1 .. training.steps (or until a stop), then the summary and the sample.
  TrainResult loop(int64_t done);
  // The run's description before its first step (rank 0).
  void describe(fusion::Mode fusion);
  // The step's forward, backward, clip and update, and its record; nullopt when a stop agreed
  // between micro-batches dropped it (the state after step - 1 saved).
  std::optional<StepRecord> run_step(int64_t step);
  // Validation, checkpoint and the stop decision after a step; true when the run ends here.
  bool after_step(int64_t step, int64_t done, const StepRecord& r);
  // A checkpoint of the state after `step` (the files beside it included), logged with `suffix`.
  void save(int64_t step, bool timed);
  void finish();

  const Config& cfg_;
  const TrainOptions& options_;
  dist::CommPtr world_;
  const Layout& layout_;
  RunSetup& run_;
  std::ostream& log_;
  TrainResult res_;
  std::optional<Evaluator> evaluator_;
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<RunProfiler> profile_;
  std::unique_ptr<StopSignals> signals_;
  optim::ScheduleSpec schedule_;
  std::vector<Tensor> counted_;
  int64_t grad_bytes_ = 0;
  // Consecutive steps whose update was skipped (equal on every rank: the norm is global). While
  // it is > 0 nothing is saved, so a diverged model never replaces a good checkpoint.
  int64_t skipped_ = 0;
};

void Trainer::save(int64_t step, bool timed) {
  checkpoint::SaveOptions so;
  so.keep = cfg_.checkpoint.keep;
  so.extra_files = checkpoint_files(cfg_, *run_.model);
  const auto t0 = std::chrono::steady_clock::now();
  {
    const profiler::Scope phase(profiler::Phase::checkpoint);
    res_.last_checkpoint = checkpoint::save(
        cfg_.run.dir, step, run_.par.chunks(run_.opt->state_dict(), /*for_save=*/true),
        trainer_state_json(step, run_.loader->state(), world_->size()), world_.get(), so);
  }
  metrics_->message("checkpoint " + res_.last_checkpoint +
                    (timed ? " (" + std::to_string(seconds_since(t0)).substr(0, 5) + " s)" : ""));
}

std::optional<StepRecord> Trainer::run_step(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  optim::Optimizer& opt = *run_.opt;
  data::DataLoader& loader = *run_.loader;
  opt.zero_grad();
  Allocator::instance().reset_peak(MemTier::device);
  const int64_t live_at_start = Allocator::instance().stats(MemTier::device).live_bytes;
  const int64_t tp_bytes_at_start = shard::region_stats().bytes;
  const optim::TransferStats moved_at_start = transfers(opt, run_.par);
  const double lr = cfg_.optimizer.lr * optim::lr_factor(schedule_, step - 1);
  const int64_t global_tokens = cfg_.training.batch_size * cfg_.training.seq_len;
  const int64_t micro_rows = cfg_.training.batch_size / cfg_.training.grad_accum;
  // The step's training targets over every rank (global_tokens unless a loss mask hides some):
  // the loss is their mean, so each micro-batch's gradient is weighted by its share of them.
  const int64_t global_targets =
      std::max<int64_t>(1, loader.peek_targets(micro_rows, cfg_.training.grad_accum));
  // A stop agreed between micro-batches drops the step: loader and RNG go back to its start.
  const data::LoaderState loader_at_start = loader.state();
  const RngState rng_at_start = default_generator().state();
  const StepOutcome out = step_->run(loader, micro_rows, global_targets, *signals_);
  {
    const profiler::Scope phase(profiler::Phase::backward);
    run_.par.fsdp->finish_grads();  // also drains the reductions in flight when the step is dropped
  }
  if (out.stop_signal != 0) {
    // Dropped as if never begun; the state after step - 1 is saved (unless its update was
    // skipped), so --resume auto redoes this step bitwise.
    loader.set_state(loader_at_start);
    default_generator().set_state(rng_at_start);
    if (skipped_ == 0) save(step - 1, /*timed=*/false);
    res_.interrupted = true;
    res_.stop_signal = out.stop_signal;
    metrics_->message("stopped during step " + std::to_string(step) +
                      " (not applied); continue with --resume auto");
    return std::nullopt;
  }
  run_.par.add_tied_grads(layout_);
  // Forward + backward only: the optimizer's first step allocates its state, not activations.
  const int64_t fwd_bwd_peak = Allocator::instance().stats(MemTier::device).peak_bytes;
  const double loss_value = global_mean_loss(*world_, layout_, out.loss_sum, global_targets);
  // Replicas (HSDP) hold equal gradients after finish_grads, and so do the tp ranks for what TP
  // does not split: the norm counts every element once over pp × dp_shard × tp.
  double grad_norm = 0;
  {
    const profiler::Scope phase(profiler::Phase::optimizer);
    // The clip is the update's gradient scale (the same values as clip_grad_norm's in-place
    // scaling, one pass over the gradients fewer).
    grad_norm = optim::global_grad_norm(counted_, {}, *layout_.norm_comm);
    if (std::isfinite(grad_norm))
      opt.step(lr, optim::clip_factor(grad_norm, cfg_.training.grad_clip));
  }
  if (std::isfinite(grad_norm)) {
    skipped_ = 0;
  } else {
    ++skipped_;
    metrics_->message("step " + std::to_string(step) +
                      ": non-finite gradient norm; update skipped");
  }

  StepRecord r;
  r.step = step;
  r.loss = loss_value;
  r.grad_norm = grad_norm;
  r.lr = lr;
  r.step_s = seconds_since(t0);
  r.tokens_per_s = double(global_tokens) / r.step_s;
  r.tflops =
      res_.flops_per_token * double(global_tokens) / double(world_->size()) / r.step_s / 1e12;
  r.mfu = r.tflops / res_.peak_tflops;
  r.peak_mem_bytes = Allocator::instance().stats(MemTier::device).peak_bytes;
  r.act_mem_bytes = fwd_bwd_peak - live_at_start - grad_bytes_;
  r.tp_comm_bytes = shard::region_stats().bytes - tp_bytes_at_start;
  step_->record(&r);
  r.host_mem_bytes = Allocator::instance().stats(MemTier::host).live_bytes;
  record_transfers(moved_at_start, transfers(opt, run_.par), &r);
  if (run_.data.blend)
    for (int64_t n : loader.source_samples()) r.source_tokens.push_back(n * cfg_.training.seq_len);
  return r;
}

bool Trainer::after_step(int64_t step, int64_t done, const StepRecord& r) {
  // Every rank asks (one all-reduce), so all end after the same step; asked after the last
  // step too, which the caller's count must see.
  const bool done_early = options_.stop_when && any_rank(*world_, options_.stop_when(r));
  const bool last = step == cfg_.training.steps || done_early;
  const int signal = signals_->agreed(*world_);
  const bool stop =
      signal != 0 || (options_.stop_after > 0 && step - done >= options_.stop_after && !last);
  // Validation sees the weights this step produced, before they are saved. It runs at the last
  // step, not at a stop (the run goes on after a resume).
  if (evaluator_ && evaluator_->due(step, last)) {
    res_.evals.push_back(evaluator_->run(*step_, *run_.par.fsdp, step));
    metrics_->record_eval(res_.evals.back());
  }
  const bool periodic = cfg_.checkpoint.interval > 0 && step % cfg_.checkpoint.interval == 0;
  const bool save_now = periodic || stop || (last && cfg_.checkpoint.save_final);
  if (save_now && skipped_ > 0) {
    const auto kept = checkpoint::find_latest(cfg_.run.dir);
    metrics_->message("step " + std::to_string(step) +
                      ": no checkpoint saved (its update was skipped); " +
                      (kept ? "the last one, " + *kept + ", is kept" : "none exists yet"));
  }
  if (save_now && skipped_ == 0) save(step, /*timed=*/true);
  profile_->end_step(step);
  // Diverged: too many skipped steps in a row, or (unless max_skipped_steps 0 lets a run skip
  // without end) a run whose last steps were skipped: its final weights are not a result.
  const int64_t max_skipped = cfg_.training.max_skipped_steps;
  const bool too_many = max_skipped > 0 && skipped_ >= max_skipped;
  if (too_many || (max_skipped > 0 && last && skipped_ > 0)) {
    summarize(res_);
    metrics_->finish(res_);
    finish();
    const auto kept = checkpoint::find_latest(cfg_.run.dir);
    HP_THROW(TrainingDiverged, "train", "training diverged: ", too_many ? "stopped" : "ended",
             " at step ", step, " after ", skipped_, " consecutive steps (", step - skipped_ + 1,
             "..", step,
             ") with a non-finite gradient norm (training.max_skipped_steps = ", max_skipped,
             "); nothing saved since, the last checkpoint is ", kept ? *kept : std::string("none"),
             ". Lower optimizer.lr (or raise lr_scheduler.warmup_steps) and resume from it.");
  }
  if (stop) {
    res_.interrupted = true;
    res_.stop_signal = signal;
    metrics_->message("stopped at step " + std::to_string(step) + "; continue with --resume auto");
    return true;
  }
  return done_early;  // after the step's checkpoint, as at the last step
}

// The profile's lines and tables.
void Trainer::finish() {
  for (const std::string& line : profile_->finish()) metrics_->message(line);
  res_.profile = profile_->tables();
}

void Trainer::describe(fusion::Mode fusion) {
  describe_run(cfg_, res_, run_.data, *run_.loader, layout_, run_.par, *run_.model, *metrics_);
  if (const std::string line = step_->describe(); !line.empty()) metrics_->message(line);
  if (fusion::env_mode() && fusion != cfg_.training.fusion)
    metrics_->message(std::string("fusion: ") + fusion::mode_name(fusion) +
                      " (HP_FUSION overrides training.fusion: " + enum_name(cfg_.training.fusion) +
                      ")");
  if (evaluator_) metrics_->message(evaluator_->describe(run_.data.eval_name));
  if (run_.documents.any())
    metrics_->message(
        std::string("packed documents: ") +
        (run_.documents.mask ? "attention within each document" : "attention across documents") +
        (run_.documents.reset_positions ? ", positions restart at each document" : "") +
        " (data.document_mask, data.reset_position_ids)");
  res_.peak_tflops = mfu_peak(cfg_, *metrics_, &res_.peak_source);
}

TrainResult Trainer::run(fusion::Mode fusion) {
  const int64_t done = resume();
  const int rank = world_->rank(), nranks = world_->size();
  metrics_ = std::make_unique<MetricsLog>(metrics_config(cfg_, nranks), cfg_.run.dir,
                                          cfg_.training.steps, done, log_, rank == 0);
  describe(fusion);
  const StepRange profile_steps =
      profile_range(cfg_.metrics, options_.profile, done + 1, cfg_.training.steps);
  if (!cfg_.metrics.profile_steps.empty() && profile_steps.empty())
    metrics_->message("note: metrics.profile_steps lies outside steps " + std::to_string(done + 1) +
                      ".." + std::to_string(cfg_.training.steps) +
                      " of this run: nothing profiled");
  if (!profile_steps.empty()) run_.model->set_trace_names();
  profile_ = std::make_unique<RunProfiler>(profile_steps, cfg_.run.dir, rank, nranks,
                                           cfg_.metrics.profile_max_events);
  signals_ = std::make_unique<StopSignals>();
  // The gradients the norm counts (the others, tp copies, are clipped alike: the optimizer scales
  // every gradient it reads).
  counted_ = run_.par.norm_parameters(layout_);
  // The f32 gradients every step allocates on the device tier; excluded from the activation
  // figure (none there with offload.grads host).
  if (cfg_.offload.grads != HostOffload::host)
    for (const Tensor& p : run_.opt->parameters())
      grad_bytes_ += p.numel() * int64_t(sizeof(float));
  return loop(done);
}

TrainResult Trainer::loop(int64_t done) {
  for (int64_t step = done + 1; step <= cfg_.training.steps; ++step) {
    profile_->begin_step(step);
    const std::optional<StepRecord> r = run_step(step);
    if (!r) break;
    res_.steps.push_back(*r);
    metrics_->record(*r);
    if (after_step(step, done, *r)) break;
  }
  summarize(res_);
  if (run_.data.blend && !res_.steps.empty())
    metrics_->message(source_tokens_line(run_.data, res_.steps.back().source_tokens));
  metrics_->finish(res_);
  finish();
  if (cfg_.training.sample_tokens > 0 && !res_.interrupted) {
    res_.sample = sample_text(*run_.model, step_->sequence_logits(), run_.loader->dataset(),
                              cfg_.training, /*kv_cache=*/layout_.tp == 1);
    log_ << "sample: " << cfg_.training.sample_prompt << res_.sample << "\n";
  }
  return res_;
}

}  // namespace

TrainResult train(const Config& cfg, const TrainOptions& options) {
  auto world = dist::world();
  NullBuffer null_buffer;
  std::ostream null_stream(&null_buffer);
  std::ostream& log = world->rank() == 0 ? (options.log ? *options.log : std::cout) : null_stream;
  const Layout layout = parallel_layout(cfg, world);
  // Held until train returns.
  const RunDir run_dir(cfg, options.resume, options.overwrite, *world, log);
  // training.fusion for the run (HP_FUSION, when set, overrides it), restored after.
  const fusion::Mode fusion = fusion::env_mode().value_or(cfg.training.fusion);
  const fusion::ModeScope fusion_scope(fusion);
  // A budget too small for one layer: refused before anything is built (the plan is reused). The
  // plan's own measuring runs uncapped, so that the plan, not the allocator, refuses it.
  const std::optional<MemoryPlan> plan = check_device_budget(cfg);
  // memory.device_budget caps the device tier for the run (restored after: tests run many).
  const DeviceBudgetScope budget(device_budget_bytes(cfg), "memory.device_budget");
  // Data (every rank loads it; indexed data is mapped), the model (f32 masters, seeded init, every
  // parallel / precision / memory transform), optimizer and loader.
  RunSetup run = build_run(cfg, layout, plan ? &*plan : nullptr);
  Trainer trainer(cfg, options, world, layout, run, log);
  return trainer.run(fusion);
}

}  // namespace hp::train
