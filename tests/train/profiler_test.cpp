// The profile of a training run (train/profile.h): the Chrome trace is valid JSON whose events nest
// properly, the tables account for the step time, the step range and the event cap hold, and a run
// without a profile records nothing.
#include "hp/core/profiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "corpus.h"
#include "error_of.h"
#include "hp/io/json.h"
#include "hp/train/config.h"
#include "hp/train/profile.h"
#include "hp/train/trainer.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;
using io::Json;

std::string run_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("hp_profiler_test_" + name);
  fs::remove_all(p);
  return p.string();
}

// A ~110k-parameter Llama, large enough that its ops, not the loop around them, take the time.
Config config(const std::string& name, std::vector<std::string> sets = {}) {
  static const std::string corpus = testing::corpus_prefix("hp_profiler_test", 100000);
  const std::string yaml = R"(model: {arch: llama, hidden: 64, layers: 2, heads: 4, kv_heads: 2,
        intermediate: 128, vocab: 300}
data: {path: )" + corpus + R"(}
training: {steps: 5, batch_size: 4, seq_len: 64, seed: 3}
metrics: {peak_tflops: 1.0, progress: none, jsonl: false}
checkpoint: {save_final: false}
run: {dir: )" + run_dir(name) +
                           "}\n";
  return parse_config(yaml, "profile.yaml", sets);
}

struct ProfiledRun {
  TrainResult result;
  std::string log;
};

ProfiledRun train_quietly(const Config& c, bool profile) {
  std::ostringstream log;
  TrainOptions o;
  o.log = &log;
  o.profile = profile;
  ProfiledRun r{train(c, o), ""};
  r.log = log.str();
  return r;
}

Json read_json(const std::string& path) {
  return io::read_json_file(path);
}

int64_t ns(const Json& us) {
  return std::llround(us.as_double() * 1000.0);
}

// The complete events of the trace, checked for the fields every viewer needs.
std::vector<Json> complete_events(const Json& trace) {
  std::vector<Json> out;
  for (const Json& e : trace.at("traceEvents").elements()) {
    if (e.get_string("ph") == "M") continue;
    EXPECT_EQ(e.get_string("ph"), "X") << e.dump();
    for (const char* key : {"name", "cat", "ts", "dur", "pid", "tid", "args"})
      EXPECT_TRUE(e.contains(key)) << key << " missing in " << e.dump();
    EXPECT_TRUE(e.at("name").is_string() && e.at("cat").is_string()) << e.dump();
    EXPECT_TRUE(e.at("ts").is_number() && e.at("dur").is_number()) << e.dump();
    EXPECT_GE(e.get_double("dur"), 0) << e.dump();
    out.push_back(e);
  }
  return out;
}

bool is_work(const Json& e) {
  const std::string cat = e.get_string("cat"), name = e.get_string("name");
  return cat == "op" || cat == "backward" ||
         (cat == "phase" && (name == "optimizer" || name == "checkpoint"));
}

// The once-counted time of one thread's events, recomputed from the trace alone (core/profiler.h:
// outermost work minus the collectives inside it, plus outermost collectives), in ns. Also checks
// that the events nest: each lies inside every event open around it.
int64_t counted_ns_from_trace(std::vector<Json> events) {
  std::sort(events.begin(), events.end(), [](const Json& a, const Json& b) {
    return std::make_pair(ns(a.at("ts")), -ns(a.at("dur"))) <
           std::make_pair(ns(b.at("ts")), -ns(b.at("dur")));
  });
  struct Open {
    int64_t end;
    bool work, comm;
  };
  std::vector<Open> stack;
  int64_t counted = 0;
  for (const Json& e : events) {
    const int64_t t0 = ns(e.at("ts")), t1 = t0 + ns(e.at("dur"));
    while (!stack.empty() && stack.back().end <= t0) stack.pop_back();
    if (!stack.empty()) {
      EXPECT_LE(t1, stack.back().end) << "overlaps its parent: " << e.dump();
    }
    bool in_work = false, in_comm = false;
    for (const Open& o : stack) in_work = in_work || o.work, in_comm = in_comm || o.comm;
    const bool comm = e.get_string("cat") == "comm", work = is_work(e);
    if (comm && !in_comm) counted += in_work ? 0 : t1 - t0;  // inside work: already in its span
    if (work && !in_work && !in_comm) counted += t1 - t0;
    stack.push_back({t1, work, comm});
  }
  return counted;
}

TEST(Profile, TraceIsValidChromeJsonOfNestedEvents) {
  const Config c = config("trace");
  const ProfiledRun run = train_quietly(c, /*profile=*/true);
  const std::string path = trace_path(c.run.dir, 0);
  ASSERT_TRUE(fs::exists(path)) << run.log;
  EXPECT_NE(run.log.find("profile: steps 2..4 traced in " + path), std::string::npos) << run.log;
  const Json trace = read_json(path);
  const std::vector<Json> events = complete_events(trace);
  EXPECT_EQ(trace.at("otherData").get_int("dropped_events"), 0);

  std::map<std::string, int> cats;
  std::set<std::string> steps, phases, modules;
  std::map<int64_t, std::vector<Json>> by_thread;
  for (const Json& e : events) {
    const std::string cat = e.get_string("cat");
    ++cats[cat];
    if (cat == "step") steps.insert(e.get_string("name"));
    if (cat == "phase") phases.insert(e.get_string("name"));
    if (cat == "module") modules.insert(e.get_string("name"));
    EXPECT_EQ(e.get_int("pid"), 0);
    by_thread[e.get_int("tid")].push_back(e);
  }
  EXPECT_EQ(steps, (std::set<std::string>{"step 2", "step 3", "step 4"}));
  EXPECT_EQ(phases, (std::set<std::string>{"forward", "backward", "optimizer"}));
  for (const char* m : {"model.embed_tokens", "model.layers.0", "model.layers.1.mlp",
                        "model.layers.1.self_attn.q_proj", "model.norm", "lm_head"})
    EXPECT_TRUE(modules.count(m)) << m;
  for (const char* cat : {"op", "backward", "module", "comm"}) EXPECT_GT(cats[cat], 0) << cat;
  for (auto& [tid, list] : by_thread) counted_ns_from_trace(list);  // nesting checked inside
}

TEST(Profile, TablesAccountForTheStepTime) {
  const Config c = config("tables");
  const ProfiledRun run = train_quietly(c, /*profile=*/true);
  const ProfileTables& t = run.result.profile;
  ASSERT_EQ(t.steps, 3);
  // What the trainer timed for steps 2..4; the traced step also spans the metrics bookkeeping
  // after it, so it may be a little longer, never shorter.
  double trainer_s = 0;
  for (const StepRecord& r : run.result.steps)
    if (r.step >= 2 && r.step <= 4) trainer_s += r.step_s;
  EXPECT_GE(t.step_s, trainer_s);
  EXPECT_LE(t.step_s, 1.10 * trainer_s + 0.003);

  double ops = 0;
  for (const auto& r : t.ops) ops += r.seconds;
  // By construction each moment is in one row or in idle.
  EXPECT_NEAR(ops + t.idle_s, t.step_s, 1e-9 * t.step_s);
  EXPECT_NEAR(t.forward_s + t.backward_s + t.optimizer_s + t.checkpoint_s + t.other_s +
                  t.communication_s + t.idle_s,
              t.step_s, 1e-9 * t.step_s);
  // The hooks cover the work: ops, nodes and the optimizer take most of a step of this model.
  EXPECT_GE(ops, 0.5 * t.step_s) << format_profile_tables(t);
  EXPECT_GT(t.forward_s, 0);
  EXPECT_GT(t.backward_s, 0);
  EXPECT_GT(t.optimizer_s, 0);
  double layers = 0;
  for (const auto& l : t.layers)
    layers += l.forward_s + l.backward_s + l.communication_s + l.other_s;
  EXPECT_NEAR(layers, ops, 1e-9 * ops);
  ASSERT_GE(t.layers.size(), 5u);
  EXPECT_EQ(t.layers[0].layer, "model.embed_tokens");  // forward order
  EXPECT_EQ(t.layers[1].layer, "model.layers.0");
  EXPECT_EQ(t.layers[2].layer, "model.layers.1");

  // The online totals agree with the events of the trace, recounted independently.
  const Json trace = read_json(trace_path(c.run.dir, 0));
  std::vector<Json> main_thread;
  int64_t main_tid = -1;
  for (const Json& e : complete_events(trace))
    if (e.get_string("cat") == "step") main_tid = e.get_int("tid");
  for (const Json& e : complete_events(trace))
    if (e.get_int("tid") == main_tid) main_thread.push_back(e);
  EXPECT_NEAR(1e-9 * double(counted_ns_from_trace(main_thread)), ops, 1e-6 + 1e-6 * ops);

  const std::string text = format_profile_tables(t);
  for (const char* want : {"forward", "backward", "optimizer", "communication", "idle", "step",
                           "model.layers.1", "(outside modules)", "calls/step"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  EXPECT_NE(run.log.find(text), std::string::npos) << "the tables are in the run log";
}

TEST(Profile, OffRecordsNothing) {
  const Config c = config("off");
  const ProfiledRun run = train_quietly(c, /*profile=*/false);
  EXPECT_EQ(run.result.profile.steps, 0);
  EXPECT_FALSE(fs::exists(trace_path(c.run.dir, 0)));
  EXPECT_EQ(run.log.find("profile:"), std::string::npos) << run.log;
  EXPECT_EQ(run.log.find("profile of"), std::string::npos) << run.log;
  // Nothing reached a buffer while the run went on unprofiled.
  const profiler::Trace leftover = profiler::stop();
  EXPECT_TRUE(leftover.threads.empty());
}

TEST(Profile, ProfileStepsChooseTheRange) {
  const Config c = config("range", {"metrics.profile_steps=[4, 5]"});
  const ProfiledRun run = train_quietly(c, /*profile=*/false);
  std::set<std::string> steps;
  for (const Json& e : complete_events(read_json(trace_path(c.run.dir, 0))))
    if (e.get_string("cat") == "step") steps.insert(e.get_string("name"));
  EXPECT_EQ(steps, (std::set<std::string>{"step 4", "step 5"}));
  EXPECT_EQ(run.result.profile.steps, 2);

  const Config outside = config("outside", {"metrics.profile_steps=[7, 9]"});
  const ProfiledRun none = train_quietly(outside, /*profile=*/true);
  EXPECT_FALSE(fs::exists(trace_path(outside.run.dir, 0)));
  EXPECT_NE(none.log.find("metrics.profile_steps lies outside steps 1..5"), std::string::npos)
      << none.log;
}

TEST(Profile, EventCapIsNotedAndTheTablesStayComplete) {
  // ~285 events per step of this model: five steps overflow a cap of 1000.
  const Config c =
      config("cap", {"metrics.profile_max_events=1000", "metrics.profile_steps=[1, 5]"});
  const ProfiledRun run = train_quietly(c, /*profile=*/false);
  const Json trace = read_json(trace_path(c.run.dir, 0));
  EXPECT_EQ(complete_events(trace).size(), 1000u);
  const int64_t dropped = trace.at("otherData").get_int("dropped_events");
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(run.result.profile.dropped, dropped);
  EXPECT_NE(run.log.find("the event cap metrics.profile_max_events = 1,000 was reached"),
            std::string::npos)
      << run.log;
  const ProfileTables& t = run.result.profile;
  EXPECT_EQ(t.steps, 5);  // the last step events came after the cap: counted all the same
  double ops = 0;
  for (const auto& r : t.ops) ops += r.seconds;
  EXPECT_GE(ops, 0.5 * t.step_s);
}

TEST(Profile, ProfileStepsAreValidated) {
  const std::pair<const char*, const char*> bad[] = {
      {"metrics.profile_steps=[3, 2]", "needs first <= last"},
      {"metrics.profile_steps=[0, 2]", "steps are integers >= 1, got 0"},
      {"metrics.profile_steps=[1.5, 2]", "steps are integers >= 1, got 1.5"},
      {"metrics.profile_steps=[2]", "must be [first, last] or [], got 1 values"},
      {"metrics.profile_max_events=10", "metrics.profile_max_events"},
  };
  for (const auto& [set, want] : bad) {
    const std::string e = hp::testing::error_of([&] { config("bad", {set}); });
    EXPECT_NE(e.find(want), std::string::npos) << set << ": " << e;
  }
}

TEST(Profile, DefaultRangeSkipsTheFirstStep) {
  MetricsConfig m;
  EXPECT_TRUE(profile_range(m, false, 1, 10).empty());
  const StepRange r = profile_range(m, true, 1, 10);
  EXPECT_EQ(r.first, 2);
  EXPECT_EQ(r.last, 4);
  const StepRange resumed = profile_range(m, true, 9, 10);  // a resume near the end
  EXPECT_EQ(resumed.first, 10);
  EXPECT_EQ(resumed.last, 10);
  const StepRange one = profile_range(m, true, 1, 1);
  EXPECT_EQ(one.first, 1);
  EXPECT_EQ(one.last, 1);
  m.profile_steps = {5, 20};
  const StepRange clipped = profile_range(m, false, 1, 8);
  EXPECT_EQ(clipped.first, 5);
  EXPECT_EQ(clipped.last, 8);
}

}  // namespace
}  // namespace hp::train
