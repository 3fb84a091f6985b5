// The per-phase, per-op and per-layer time tables of a recorded profile (profile.h).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "hp/train/profile.h"

namespace hp::train {

namespace {

using profiler::Category;
using profiler::Phase;

constexpr const char* kNoModule = "(outside modules)";

// The layer a module belongs to: its FQN through the first all-digit component
// ("model.layers.3.mlp.up_proj" → "model.layers.3"), else the whole FQN ("lm_head").
std::string layer_of(const char* module) {
  if (!module) return kNoModule;
  const std::string m = module;
  size_t begin = 0;
  while (begin <= m.size()) {
    size_t end = m.find('.', begin);
    if (end == std::string::npos) end = m.size();
    const bool digits = end > begin && std::all_of(m.begin() + long(begin), m.begin() + long(end),
                                                   [](char c) { return std::isdigit(c); });
    if (digits) return m.substr(0, end);
    begin = end + 1;
  }
  return m;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

ProfileTables profile_tables(const profiler::Trace& trace) {
  ProfileTables t;
  t.dropped = trace.dropped;
  t.max_events = trace.max_events;
  std::map<std::tuple<std::string, std::string, std::string>, ProfileTables::OpRow> ops;
  std::map<std::string, ProfileTables::LayerRow> layers;
  std::map<std::string, int64_t> first_seen;  // layer → earliest event: forward order
  for (const profiler::ThreadTrace& th : trace.threads) {
    t.events += static_cast<int64_t>(th.events.size());
    if (!th.main) {
      ++t.other_threads;
      for (const profiler::Total& x : th.totals)
        t.other_threads_busy_s += 1e-9 * double(x.counted_ns);
      continue;
    }
    for (const profiler::Total& x : th.totals) {
      if (x.cat == Category::step) {
        t.steps += x.calls;
        t.step_s += 1e-9 * double(x.inclusive_ns);
      }
      if (x.counted_calls == 0) continue;  // containers and nested work
      const double s = 1e-9 * double(x.counted_ns);
      // A backward node runs in the backward phase anyway: "node" says what it is.
      const char* kind = x.cat == Category::backward ? "node" : profiler::category_name(x.cat);
      ProfileTables::OpRow& row = ops[{profiler::phase_name(x.phase), kind, x.name}];
      row.phase = profiler::phase_name(x.phase);
      row.kind = kind;
      row.name = x.name;
      row.calls += x.counted_calls;
      row.seconds += s;
      ProfileTables::LayerRow& layer = layers[layer_of(x.module)];
      if (x.cat == Category::comm) {
        t.communication_s += s;
        layer.communication_s += s;
        continue;
      }
      switch (x.phase) {
        case Phase::forward:
          t.forward_s += s;
          layer.forward_s += s;
          break;
        case Phase::backward:
          t.backward_s += s;
          layer.backward_s += s;
          break;
        case Phase::optimizer:
          t.optimizer_s += s;
          layer.other_s += s;
          break;
        case Phase::checkpoint:
          t.checkpoint_s += s;
          layer.other_s += s;
          break;
        case Phase::none:
          t.other_s += s;
          layer.other_s += s;
          break;
      }
    }
    for (const profiler::Event& e : th.events) {
      const std::string layer = layer_of(e.module);
      auto it = first_seen.find(layer);
      if (it == first_seen.end())
        first_seen.emplace(layer, e.ts_ns);
      else
        it->second = std::min(it->second, e.ts_ns);
    }
  }
  t.idle_s = t.step_s - (t.forward_s + t.backward_s + t.optimizer_s + t.checkpoint_s + t.other_s +
                         t.communication_s);
  for (auto& [key, row] : ops) t.ops.push_back(row);
  std::stable_sort(t.ops.begin(), t.ops.end(),
                   [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  for (auto& [name, row] : layers) {
    row.layer = name;
    t.layers.push_back(row);
  }
  // Forward order; layers without events (all dropped) and work outside modules last.
  auto rank_of = [&](const std::string& layer) {
    const auto it = first_seen.find(layer);
    const bool unseen = it == first_seen.end() || layer == kNoModule;
    return std::make_pair(unseen, unseen ? 0 : it->second);
  };
  std::stable_sort(t.layers.begin(), t.layers.end(), [&](const auto& a, const auto& b) {
    return rank_of(a.layer) < rank_of(b.layer);
  });
  return t;
}

std::string format_profile_tables(const ProfileTables& t, size_t top_ops) {
  if (t.steps == 0) return "profile: no step was recorded";
  const double n = double(t.steps);
  std::ostringstream o;
  // Every figure is ms per step; shares are of the step.
  auto row = [&](const std::string& label, const std::vector<double>& seconds) {
    o << "  " << label;
    for (double s : seconds) o << fmt(" %9.2f", 1e3 * s / n);
    o << fmt("  %5.1f%%\n", t.step_s > 0 ? 100.0 * seconds.back() / t.step_s : 0.0);
  };
  auto pad = [](const std::string& s, size_t w) {
    return s + std::string(s.size() < w ? w - s.size() : 0, ' ');
  };
  o << "profile of " << t.steps << " step(s), " << fmt("%.3f", t.step_s / n)
    << " s/step on the trainer's thread; each moment counted once, in the op, backward node or "
       "collective running then (idle: between them)\n";
  o << "  " << pad("phase", 16) << "   ms/step   share\n";
  const std::pair<const char*, double> phases[] = {
      {"forward", t.forward_s},     {"backward", t.backward_s},
      {"optimizer", t.optimizer_s}, {"checkpoint", t.checkpoint_s},
      {"other ops", t.other_s},     {"communication", t.communication_s},
      {"idle", t.idle_s},           {"step", t.step_s}};
  for (const auto& [name, s] : phases) {
    const bool optional = std::string(name) == "checkpoint" || std::string(name) == "other ops";
    if (s != 0 || !optional) row(pad(name, 16), {s});
  }

  o << "  " << pad("phase", 11) << pad("kind", 9) << pad("name", 34)
    << " calls/step   ms/step   share\n";
  double rest_s = 0;
  size_t rest = 0;
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const auto& r = t.ops[i];
    if (i >= top_ops) {
      rest_s += r.seconds, ++rest;
      continue;
    }
    row(pad(r.phase, 11) + pad(r.kind, 9) + pad(r.name, 34) + fmt("%11.1f", double(r.calls) / n),
        {r.seconds});
  }
  if (rest > 0) row(pad("(" + std::to_string(rest) + " more)", 65), {rest_s});

  o << "  " << pad("layer", 30) << "   forward  backward      comm     other     total   share\n";
  for (const auto& l : t.layers)
    row(pad(l.layer, 30), {l.forward_s, l.backward_s, l.communication_s, l.other_s,
                           l.forward_s + l.backward_s + l.communication_s + l.other_s});
  if (t.other_threads > 0)
    o << "  other threads: " << t.other_threads << ", busy "
      << fmt("%.2f", 1e3 * t.other_threads_busy_s / n)
      << " ms/step (in the trace, not in these tables)\n";
  std::string out = o.str();
  out.pop_back();
  return out;
}

}  // namespace hp::train
