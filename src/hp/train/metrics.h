// Run metrics: console lines or a progress bar, <run.dir>/metrics.jsonl, the end-of-run summary
// and an SVG plot of loss and throughput.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/train/config.h"
#include "hp/train/records.h"

namespace hp::io {
class JsonValue;
}

namespace hp::train {

// Model FLOPs of one trained token (forward + backward), the MFU numerator: 6 per GEMM weight
// element (MoE experts weighted by experts_per_token / experts; the tied embedding counts once,
// as the head) plus causal-agnostic attention 12 · layers · heads · head_dim · seq_len (PaLM's
// convention; recompute is not counted).
// named: the model's (FQN, parameter) list; the counting rule above is applied by FQN and shape.
double flops_per_token(const std::vector<std::pair<std::string, Shape>>& named, int64_t layers,
                       int64_t heads, int64_t head_dim, int64_t seq_len, int64_t experts,
                       int64_t experts_per_token, bool tied_embeddings);

// An MFU above 100% means the denominator is below what the run reached (a peak measured under
// load, or a metrics.peak_tflops set too low): the warning saying so and how to fix it, else "".
std::string mfu_above_peak_warning(double mfu, const std::string& peak_source);

class MetricsLog {
 public:
  // enabled: this process writes (rank 0). total_steps: for the bar and the ETA. resume_step: the
  // step the run continues after (metrics.jsonl keeps lines up to it; 0 = a fresh file).
  MetricsLog(const MetricsConfig& cfg, const std::string& run_dir, int64_t total_steps,
             int64_t resume_step, std::ostream& out, bool enabled);
  // Every step: prints on log_every steps and the last one (and redraws the bar on a terminal).
  void record(const StepRecord& r);
  // A validation pass: its console line (unless progress is none) and an
  // {"step", "eval_loss", "eval_ppl", "eval_tokens"} line in metrics.jsonl.
  void record_eval(const EvalResult& r);
  // A line of its own (clears the bar first).
  void message(const std::string& text);
  // Summary lines and <run_dir>/metrics.svg from every line of metrics.jsonl; when a metrics
  // write failed (a full disk), a closing warning that the metrics are incomplete.
  void finish(const TrainResult& result);
  // False once a write of metrics.jsonl or metrics.svg failed. Training goes on regardless.
  bool complete() const { return failed_writes_ == 0; }

 private:
  bool logged(int64_t step) const;
  void print_line(const StepRecord& r);
  void draw_bar(const StepRecord& r);
  void clear_bar();
  // Appends one line to metrics.jsonl (a failed write is recorded, not thrown).
  void append_jsonl(const io::JsonValue& j, int64_t step);
  // Records a failed write of `path` (errno `err`) at `step`: a warning, at most one per step.
  void write_failed(const std::string& path, int64_t step, int err);

  MetricsConfig cfg_;
  std::string run_dir_;
  int64_t total_steps_;
  std::ostream& out_;
  bool enabled_, bar_ = false, bar_drawn_ = false;
  double elapsed_s_ = 0;  // sum of step times in this call, for the ETA
  int64_t steps_seen_ = 0;
  int64_t failed_writes_ = 0, first_failed_step_ = -1, warned_step_ = -1;
  std::string failed_path_;        // the first write that failed
  std::vector<EvalResult> evals_;  // this call's validation passes (the plot's fallback)
};

// The loss and tokens/s curves of `records` as a standalone SVG document (two stacked panels);
// validation losses `evals` share the loss panel as a second curve.
std::string svg_plot(const std::vector<StepRecord>& records,
                     const std::vector<EvalResult>& evals = {});

}  // namespace hp::train
