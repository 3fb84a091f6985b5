// Console / JSONL / SVG output of the trainer's per-step metrics.
#include "hp/train/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/train/evaluate.h"

namespace hp::train {

namespace {

bool is_expert_weight(const std::string& fqn) {
  return fqn.find(".experts.") != std::string::npos;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// 1234567 → "1.23M", 12345 → "12.3k".
std::string si(double v) {
  if (v >= 1e9) return fmt("%.2fG", v / 1e9);
  if (v >= 1e6) return fmt("%.2fM", v / 1e6);
  if (v >= 1e4) return fmt("%.1fk", v / 1e3);
  return fmt("%.0f", v);
}

std::string duration(double s) {
  const auto t = static_cast<int64_t>(std::max(0.0, s) + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t / 60 % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  return buf;
}

std::string mib(int64_t b) {
  return fmt("%.1f MiB", double(b) / (1024.0 * 1024.0));
}

std::filesystem::path jsonl_path(const std::string& dir) {
  return std::filesystem::path(dir) / "metrics.jsonl";
}

// JSON has no NaN or infinity: a non-finite value (a diverged step's loss or gradient norm) is
// written as null, and null reads back as NaN.
io::JsonValue number(double v) {
  return std::isfinite(v) ? io::JsonValue(v) : io::JsonValue();
}
double number_at(const io::Json& j, const char* key) {
  const std::optional<io::Json> v = j.find(key);
  if (!v) return 0.0;
  return v->is_number() ? v->as_double() : std::nan("");
}

// The step lines of metrics.jsonl, and its validation lines into *evals.
std::vector<StepRecord> read_jsonl(const std::filesystem::path& p, std::vector<EvalResult>* evals) {
  std::vector<StepRecord> out;
  if (!std::filesystem::is_regular_file(p)) return out;  // not /dev/full's endless zeros
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::optional<io::Json> line_json = io::try_parse_json(line, p.string());
    if (!line_json || !line_json->is_object() || !line_json->contains("step")) continue;
    const io::Json& j = *line_json;
    if (j.contains("eval_loss")) {
      EvalResult e;
      e.step = j.get_int_or("step", 0);
      e.loss = number_at(j, "eval_loss");
      e.ppl = number_at(j, "eval_ppl");
      evals->push_back(e);
      continue;
    }
    StepRecord r;
    r.step = j.get_int_or("step", 0);
    r.loss = number_at(j, "loss");
    r.grad_norm = number_at(j, "grad_norm");
    r.lr = number_at(j, "lr");
    r.tokens_per_s = number_at(j, "tokens_per_s");
    r.mfu = number_at(j, "mfu");
    r.step_s = number_at(j, "step_s");
    r.tflops = number_at(j, "tflops");
    r.peak_mem_bytes = j.get_int_or("peak_mem_bytes", 0);
    r.act_mem_bytes = j.get_int_or("act_mem_bytes", 0);
    r.host_mem_bytes = j.get_int_or("host_mem_bytes", 0);
    if (const std::optional<io::Json> m = j.find("offload_bytes")) {
      r.device_to_host_bytes = m->get_int_or("device_to_host", 0);
      r.host_to_device_bytes = m->get_int_or("host_to_device", 0);
      r.host_to_disk_bytes = m->get_int_or("host_to_disk", 0);
      r.disk_to_host_bytes = m->get_int_or("disk_to_host", 0);
      r.transfer_wait_s = number_at(j, "transfer_wait_s");
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace

double flops_per_token(const std::vector<std::pair<std::string, Shape>>& named, int64_t layers,
                       int64_t heads, int64_t head_dim, int64_t seq_len, int64_t experts,
                       int64_t experts_per_token, bool tied_embeddings) {
  double gemm_elems = 0;
  for (const auto& [fqn, shape] : named) {
    if (shape.size() < 2) continue;
    double n = 1;
    for (int64_t d : shape) n *= double(d);
    const bool embedding = fqn.find("embed_tokens") != std::string::npos;
    if (embedding && !tied_embeddings) continue;  // a lookup, not a GEMM
    if (is_expert_weight(fqn) && experts > 0) n *= double(experts_per_token) / double(experts);
    gemm_elems += n;
  }
  return 6.0 * gemm_elems + 12.0 * double(layers * heads * head_dim * seq_len);
}

MetricsLog::MetricsLog(const MetricsConfig& cfg, const std::string& run_dir, int64_t total_steps,
                       int64_t resume_step, std::ostream& out, bool enabled)
    : cfg_(cfg), run_dir_(run_dir), total_steps_(total_steps), out_(out), enabled_(enabled) {
  if (!enabled_) return;
  bar_ = cfg.progress == Progress::bar ||
         (cfg.progress == Progress::auto_ && isatty(STDOUT_FILENO) && &out_ == &std::cout);
  if (!cfg_.jsonl) return;
  // Keep the lines of the steps before the resume point (they are not re-run); drop later ones.
  const auto p = jsonl_path(run_dir_);
  std::vector<std::string> keep;
  if (resume_step > 0 && std::filesystem::is_regular_file(p)) {
    std::ifstream in(p);
    std::string line;
    while (std::getline(in, line)) {
      const std::optional<io::Json> j = io::try_parse_json(line, p.string());
      if (j && j->is_object() && j->get_int_or("step", 0) <= resume_step) keep.push_back(line);
    }
  }
  std::ofstream o(p, std::ios::trunc);
  if (!o) HP_THROW(IoError, "train", "cannot write ", p.string());
  for (const auto& l : keep) o << l << "\n";
  if (!o.flush()) write_failed(p.string(), resume_step, errno);
}

bool MetricsLog::logged(int64_t step) const {
  return step % cfg_.log_every == 0 || step == total_steps_ || step == 1;
}

void MetricsLog::record(const StepRecord& r) {
  elapsed_s_ += r.step_s;
  ++steps_seen_;
  if (!enabled_) return;
  if (logged(r.step) && cfg_.jsonl) {
    io::JsonValue j = io::JsonValue::object({{"step", r.step},
                                             {"loss", number(r.loss)},
                                             {"grad_norm", number(r.grad_norm)},
                                             {"lr", number(r.lr)},
                                             {"tokens_per_s", number(r.tokens_per_s)},
                                             {"tflops", number(r.tflops)},
                                             {"mfu", number(r.mfu)},
                                             {"peak_mem_bytes", r.peak_mem_bytes},
                                             {"act_mem_bytes", r.act_mem_bytes},
                                             {"step_s", number(r.step_s)}});
    if (r.tp_comm_bytes > 0) j["tp_comm_bytes"] = r.tp_comm_bytes;
    if (r.host_mem_bytes > 0) j["host_mem_bytes"] = r.host_mem_bytes;
    const int64_t moved[] = {r.device_to_host_bytes, r.host_to_device_bytes, r.host_to_disk_bytes,
                             r.disk_to_host_bytes};
    if (moved[0] || moved[1] || moved[2] || moved[3]) {
      j["offload_bytes"] = io::JsonValue::object({{"device_to_host", moved[0]},
                                                  {"host_to_device", moved[1]},
                                                  {"host_to_disk", moved[2]},
                                                  {"disk_to_host", moved[3]}});
      j["transfer_wait_s"] = number(r.transfer_wait_s);
    }
    if (!r.source_tokens.empty()) j["source_tokens"] = r.source_tokens;
    if (!r.pp_bubble.empty()) {
      j["pp_bubble"] = r.pp_bubble;
      j["pp_bubble_theory"] = number(r.pp_bubble_theory);
      j["pp_bubble_model"] = r.pp_bubble_model;
      j["pp_action_s"] = r.pp_action_s;
      j["pp_rank_s"] = r.pp_rank_s;
    }
    append_jsonl(j, r.step);
  }
  if (cfg_.progress == Progress::none) return;
  if (logged(r.step)) print_line(r);
  if (bar_) draw_bar(r);
}

void MetricsLog::append_jsonl(const io::JsonValue& j, int64_t step) {
  // Checked after each write (ENOSPC shows at the flush): a full disk costs metrics, not the run.
  // Keys sorted, as the lines have always been written.
  errno = 0;
  std::ofstream o(jsonl_path(run_dir_), std::ios::app);
  if (!(o << j.dump(-1, io::KeyOrder::sorted) << "\n" << std::flush))
    write_failed(jsonl_path(run_dir_).string(), step, errno);
}

void MetricsLog::record_eval(const EvalResult& r) {
  evals_.push_back(r);
  if (!enabled_) return;
  if (cfg_.jsonl)
    append_jsonl(io::JsonValue::object({{"step", r.step},
                                        {"eval_loss", number(r.loss)},
                                        {"eval_ppl", number(r.ppl)},
                                        {"eval_tokens", r.tokens}}),
                 r.step);
  if (cfg_.progress != Progress::none) message(Evaluator::format(r));
}

void MetricsLog::print_line(const StepRecord& r) {
  clear_bar();
  const int w = static_cast<int>(std::to_string(total_steps_).size());
  char head[64];
  std::snprintf(head, sizeof head, "step %*lld/%lld", w, (long long)r.step,
                (long long)total_steps_);
  const double eta =
      steps_seen_ ? elapsed_s_ / double(steps_seen_) * double(total_steps_ - r.step) : 0;
  out_ << head << "  loss " << fmt("%.4f", r.loss) << "  gnorm " << fmt("%.3f", r.grad_norm)
       << "  lr " << fmt("%.2e", r.lr) << "  " << si(r.tokens_per_s) << " tok/s  "
       << fmt("%.3f", r.tflops) << " TFLOP/s  MFU " << fmt("%.1f%%", 100.0 * r.mfu) << "  mem "
       << mib(r.peak_mem_bytes) << "  " << fmt("%.3f", r.step_s) << " s/step  ETA "
       << duration(eta);
  if (!r.pp_bubble.empty()) {
    out_ << "  bubble";
    for (size_t i = 0; i < r.pp_bubble.size(); ++i)
      out_ << (i ? "/" : " ") << fmt("%.2f", r.pp_bubble[i]);
    out_ << " (theory " << fmt("%.2f", r.pp_bubble_theory) << ", at the measured costs";
    for (size_t i = 0; i < r.pp_bubble_model.size(); ++i)
      out_ << (i ? "/" : " ") << fmt("%.2f", r.pp_bubble_model[i]);
    out_ << ")";
  }
  // Offload: what the step moved between the tiers and how long it waited on those transfers.
  if (r.device_to_host_bytes + r.host_to_device_bytes + r.host_to_disk_bytes +
          r.disk_to_host_bytes >
      0)
    out_ << "  moved d>h " << mib(r.device_to_host_bytes) << " h>d " << mib(r.host_to_device_bytes)
         << " h>disk " << mib(r.host_to_disk_bytes) << " disk>h " << mib(r.disk_to_host_bytes)
         << " waited " << fmt("%.3f", r.transfer_wait_s) << " s";
  out_ << "\n";
  out_.flush();
}

void MetricsLog::draw_bar(const StepRecord& r) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * r.step / std::max<int64_t>(1, total_steps_));
  const double eta = elapsed_s_ / double(steps_seen_) * double(total_steps_ - r.step);
  out_ << "\r[" << std::string(size_t(filled), '#') << std::string(size_t(kWidth - filled), '.')
       << "] " << r.step << "/" << total_steps_ << "  loss " << fmt("%.4f", r.loss) << "  "
       << si(r.tokens_per_s) << " tok/s  ETA " << duration(eta) << "   ";
  out_.flush();
  bar_drawn_ = true;
}

void MetricsLog::clear_bar() {
  if (!bar_drawn_) return;
  out_ << "\r" << std::string(100, ' ') << "\r";
  bar_drawn_ = false;
}

void MetricsLog::message(const std::string& text) {
  if (!enabled_) return;
  clear_bar();
  out_ << text << "\n";
  out_.flush();
}

std::string mfu_above_peak_warning(double mfu, const std::string& peak_source) {
  if (!(mfu > 1.0)) return "";
  return "warning: MFU " + fmt("%.1f%%", 100.0 * mfu) + " is above 100%: " + peak_source +
         " is below what this run reached. Cache a peak measured on an idle machine with `hp "
         "bench peak --remeasure`, or set metrics.peak_tflops";
}

void MetricsLog::finish(const TrainResult& res) {
  if (!enabled_) return;
  clear_bar();
  if (res.steps.empty()) return;
  const StepRecord& first = res.steps.front();
  const StepRecord& last = res.steps.back();
  double total_s = 0;
  for (const auto& r : res.steps) total_s += r.step_s;
  std::ostringstream s;
  s << "summary: steps " << first.step << ".." << last.step << " in " << duration(total_s)
    << "; loss " << fmt("%.4f", first.loss) << " -> " << fmt("%.4f", last.loss) << "; "
    << si(res.tokens_per_s) << " tok/s; MFU " << fmt("%.1f%%", 100.0 * res.mfu) << " of "
    << fmt("%.3f", res.peak_tflops) << " TFLOP/s peak; peak memory " << mib(res.peak_mem_bytes)
    << " (activations " << mib(res.act_mem_bytes) << ")";
  if (last.tp_comm_bytes > 0)
    s << "; tensor-parallel traffic " << mib(last.tp_comm_bytes) << "/step per rank";
  if (last.device_to_host_bytes + last.host_to_disk_bytes + last.disk_to_host_bytes > 0)
    s << "; offload per step: device->host " << mib(last.device_to_host_bytes) << ", host->device "
      << mib(last.host_to_device_bytes) << ", host->disk " << mib(last.host_to_disk_bytes)
      << ", disk->host " << mib(last.disk_to_host_bytes) << ", waited "
      << fmt("%.3f", last.transfer_wait_s) << " s; host tier " << mib(last.host_mem_bytes);
  out_ << s.str() << "\n";
  if (const std::string w = mfu_above_peak_warning(res.mfu, res.peak_source); !w.empty())
    out_ << w << "\n";
  // After a failed write metrics.jsonl lacks lines: plot this call's steps instead.
  std::vector<EvalResult> evals;
  std::vector<StepRecord> all =
      cfg_.jsonl && complete() ? read_jsonl(jsonl_path(run_dir_), &evals) : res.steps;
  if (!(cfg_.jsonl && complete())) evals = evals_;
  const auto svg = std::filesystem::path(run_dir_) / "metrics.svg";
  errno = 0;
  std::ofstream o(svg, std::ios::trunc);
  if (!(o << svg_plot(all, evals) << std::flush)) write_failed(svg.string(), last.step, errno);
  out_ << "metrics: " << (cfg_.jsonl ? jsonl_path(run_dir_).string() + ", " : "") << svg.string()
       << "\n";
  if (failed_writes_ > 0)
    out_ << "warning: metrics are incomplete: " << failed_writes_ << " write(s) failed, the first "
         << "to " << failed_path_ << " at step " << first_failed_step_ << "\n";
  out_.flush();
}

void MetricsLog::write_failed(const std::string& path, int64_t step, int err) {
  if (failed_writes_++ == 0) failed_path_ = path, first_failed_step_ = step;
  if (step == warned_step_) return;
  warned_step_ = step;
  clear_bar();
  out_ << "warning: step " << step << ": cannot write " << path << ": "
       << (err ? std::strerror(err) : "write failed") << " (training continues; metrics will be "
       << "incomplete)\n";
  out_.flush();
}

std::string svg_plot(const std::vector<StepRecord>& records, const std::vector<EvalResult>& evals) {
  constexpr double kW = 720, kPanel = 220, kLeft = 70, kRight = 20, kTop = 30, kGap = 60;
  std::ostringstream o;
  const double height = kTop + 2 * kPanel + kGap + 40;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  using Points = std::vector<std::pair<double, double>>;  // (step, value), finite values only
  struct Curve {
    const char* color;
    Points pts;
  };
  auto points = [](const auto& rows, auto value) {
    Points pts;
    for (const auto& r : rows)
      if (const double v = value(r); std::isfinite(v)) pts.emplace_back(double(r.step), v);
    return pts;
  };
  // One panel, its axes spanning every curve; the first curve sets the title's colour.
  auto panel = [&](double y0, const std::string& title, const std::vector<Curve>& curves) {
    o << "<text x=\"" << kLeft << "\" y=\"" << y0 - 8 << "\" font-weight=\"bold\">" << title
      << "</text>\n";
    o << "<rect x=\"" << kLeft << "\" y=\"" << y0 << "\" width=\"" << kW - kLeft - kRight
      << "\" height=\"" << kPanel << "\" fill=\"none\" stroke=\"#888\"/>\n";
    bool any = false;
    double x0 = 0, x1 = 0, lo = 0, hi = 0;
    for (const Curve& c : curves)
      for (const auto& [x, y] : c.pts) {
        if (!any) x0 = x1 = x, lo = hi = y, any = true;
        x0 = std::min(x0, x), x1 = std::max(x1, x), lo = std::min(lo, y), hi = std::max(hi, y);
      }
    if (!any) return;
    if (x1 <= x0) x1 = x0 + 1;
    if (hi <= lo) hi = lo + 1e-9 + std::fabs(lo) * 0.01;
    auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); };
    auto Y = [&](double y) { return y0 + kPanel - (y - lo) / (hi - lo) * kPanel; };
    for (const Curve& c : curves) {
      o << "<polyline fill=\"none\" stroke=\"" << c.color << "\" stroke-width=\"1.5\" points=\"";
      for (const auto& p : c.pts)
        o << fmt("%.1f", X(p.first)) << "," << fmt("%.1f", Y(p.second)) << " ";
      o << "\"/>\n";
      // A single point (one validation pass) would draw nothing as a line.
      if (c.pts.size() == 1)
        o << "<circle cx=\"" << fmt("%.1f", X(c.pts[0].first)) << "\" cy=\""
          << fmt("%.1f", Y(c.pts[0].second)) << "\" r=\"3\" fill=\"" << c.color << "\"/>\n";
    }
    for (double v : {lo, hi})
      o << "<text x=\"" << kLeft - 6 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">"
        << fmt("%.4g", v) << "</text>\n";
    o << "<text x=\"" << kLeft << "\" y=\"" << y0 + kPanel + 16 << "\">step " << int64_t(x0)
      << "</text><text x=\"" << kW - kRight << "\" y=\"" << y0 + kPanel + 16
      << "\" text-anchor=\"end\">step " << int64_t(x1) << "</text>\n";
  };
  std::vector<Curve> loss = {
      {"#c0392b", points(records, [](const StepRecord& r) { return r.loss; })}};
  std::string loss_title = "loss";
  if (!evals.empty()) {
    loss.push_back({"#27ae60", points(evals, [](const EvalResult& r) { return r.loss; })});
    loss_title = "loss (red: training, green: validation)";
  }
  panel(kTop, loss_title, loss);
  panel(kTop + kPanel + kGap, "tokens/s",
        {{"#2471a3", points(records, [](const StepRecord& r) { return r.tokens_per_s; })}});
  o << "</svg>\n";
  return o.str();
}

}  // namespace hp::train
