// Validation (eval.*, train/evaluate.h) and data mixtures (data.sources) end to end on a tiny
// model: the validation loss is the mean loss of the same batches computed directly, a pass on
// the saved checkpoint repeats the run's last one, validation never changes the training losses,
// held-out documents are not trained on, a blend resumes exactly and reports its sources' tokens,
// and bad configs name the key and value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "corpus.h"
#include "error_of.h"
#include "test_dir.h"
#include "train/train_run.h"
#include "hp/autograd/grad_mode.h"
#include "hp/dist/communicator.h"
#include "hp/fsdp/fsdp.h"
#include "hp/io/json.h"
#include "hp/models/transformer.h"
#include "hp/train/config.h"
#include "hp/train/evaluate.h"
#include "hp/train/setup.h"
#include "hp/train/state.h"
#include "hp/train/step.h"
#include "hp/train/trainer.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;
using hp::testing::error_of;

std::string corpus() {
  static const std::string path = testing::corpus_prefix("hp_eval_test", 160000);
  return path;
}

// Another part of the corpus: the validation set and a second blend source.
std::string other_corpus() {
  static const std::string path = [] {
    const fs::path p =
        fs::temp_directory_path() / ("hp_eval_test_other_" + std::to_string(::getpid()) + ".txt");
    std::ifstream in(std::string(HP_TEST_DIR) + "/../../data/kjv.txt", std::ios::binary);
    in.seekg(1000000);
    std::string text(60000, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }();
  return path;
}

Config config(const std::string& name, std::vector<std::string> sets = {},
              const std::string& data = "") {
  const fs::path dir =
      fs::temp_directory_path() / ("hp_eval_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string yaml = R"(model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2,
        intermediate: 64, vocab: 259}
data: )" + (data.empty() ? "{path: " + corpus() + "}" : data) +
                           R"(
optimizer: {lr: 0.01}
training: {steps: 12, batch_size: 4, seq_len: 32, seed: 7}
metrics: {log_every: 1, progress: none}
checkpoint: {save_final: true}
run: {dir: )" + dir.string() +
                           "}\n";
  return parse_config(yaml, "eval.yaml", sets);
}

using test::quiet_train;

using test::losses;

TEST(Eval, LossIsTheMeanLossOfTheSameBatchesAndHpEvalRepeatsIt) {
  const Config c = config("direct", {"eval.data=" + other_corpus(), "eval.interval=5",
                                     "eval.steps=3", "eval.batch_size=2"});
  const TrainResult res = quiet_train(c);
  ASSERT_EQ(res.evals.size(), 3u);  // after steps 5, 10 and the last, 12
  EXPECT_EQ(res.evals[0].step, 5);
  EXPECT_EQ(res.evals[2].step, 12);
  EXPECT_EQ(res.evals[2].tokens, 3 * 2 * 32);
  EXPECT_DOUBLE_EQ(res.evals[2].ppl, std::exp(res.evals[2].loss));

  // The saved model, loaded as training would, on the validation set's first 3 × 2 windows in
  // order: the mean of CausalLM::loss over them.
  const Layout layout = parallel_layout(c, dist::world());
  RunSetup run = build_run(c, layout);
  restore(res.last_checkpoint, run.par, *run.opt, *run.loader);
  run.par.fsdp->reshard();
  data::DataLoader windows(run.data.eval, 32, 0, /*shuffle=*/false);
  double sum = 0;
  {
    autograd::NoGradGuard no_grad;
    for (int b = 0; b < 3; ++b) sum += run.model->loss(windows.next_batch(2)).item();
  }
  EXPECT_NEAR(res.evals[2].loss, sum / 3, 1e-12 * sum);

  // A pass over the saved checkpoint (what `hp eval` runs) repeats the run's last one.
  Evaluator evaluator(c, run.data.eval, layout, run.documents);
  const EvalResult again = evaluator.run(*make_step(run, layout, c, *dist::world()), *run.par.fsdp, 12);
  EXPECT_EQ(again.loss, res.evals[2].loss);  // bitwise
  EXPECT_EQ(again.step, 12);

  // metrics.jsonl holds the passes; metrics.svg draws them.
  std::ifstream in(c.run.dir + "/metrics.jsonl");
  std::vector<int64_t> eval_steps;
  for (std::string line; std::getline(in, line);) {
    const io::Json j = io::parse_json(line, "metrics.jsonl");
    if (!j.contains("eval_loss")) continue;
    eval_steps.push_back(j.get_int("step"));
    EXPECT_TRUE(j.contains("eval_ppl"));
  }
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{5, 10, 12}));
  std::ifstream svg(c.run.dir + "/metrics.svg");
  const std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("green: validation"), std::string::npos);
}

TEST(Eval, ValidationNeverChangesTheTrainingLosses) {
  for (const std::string accum : {"1", "2"}) {
    const std::vector<std::string> base = {"training.grad_accum=" + accum,
                                           "training.mixed_precision=bf16"};
    std::vector<std::string> on = base;
    on.insert(on.end(), {"eval.data=" + other_corpus(), "eval.interval=2", "eval.steps=2"});
    const TrainResult with = quiet_train(config("on" + accum, on));
    const TrainResult without = quiet_train(config("off" + accum, base));
    EXPECT_EQ(with.evals.size(), 6u);
    EXPECT_EQ(losses(with), losses(without)) << "grad_accum " << accum;  // bitwise
  }
}

TEST(Eval, SplitHoldsOutDocumentsTheRunNeverTrainsOn) {
  const Config c = config("split", {"data.doc_separator=\"\\n\\n\"", "eval.split=0.1",
                                    "eval.steps=2", "training.steps=3"});
  const Layout layout = parallel_layout(c, dist::world());
  const RunSetup run = build_run(c, layout);
  const auto full = data::TokenDataset::load(dataset_options(c));
  const data::TokenDataset& trained = *run.data.sources[0].dataset;
  EXPECT_EQ(trained.size() + run.data.eval->size(), full->size());
  EXPECT_EQ(run.data.eval->num_documents(), full->num_documents() / 10);
  // The held-out text appears nowhere in the training stream.
  const auto held = run.data.eval->tokens(0, run.data.eval->size());
  const auto stream = trained.tokens(0, trained.size());
  const std::vector<int32_t> doc(held.begin(), held.begin() + 200);  // the first held-out one's
  EXPECT_EQ(std::search(stream.begin(), stream.end(), doc.begin(), doc.end()), stream.end());
  const TrainResult res = quiet_train(c);
  ASSERT_EQ(res.evals.size(), 1u);
  EXPECT_GT(res.evals[0].loss, 0);
}

std::string blend_data() {
  return "{sources: [{path: " + corpus() + ", weight: 3}, {path: " + other_corpus() +
         ", weight: 1}]}";
}

TEST(Mixture, ResumesExactlyAndCountsTokensPerSource) {
  const TrainResult full = quiet_train(config("mix_full", {}, blend_data()));
  Config c = config("mix_resumed", {}, blend_data());
  TrainOptions stop;
  stop.stop_after = 5;
  const TrainResult first = quiet_train(c, stop);
  ASSERT_TRUE(first.interrupted);
  TrainOptions resume;
  resume.resume = "auto";
  const TrainResult second = quiet_train(c, resume);
  std::vector<double> joined = losses(first);
  for (double l : losses(second)) joined.push_back(l);
  EXPECT_EQ(joined, losses(full));
  EXPECT_EQ(second.steps.back().source_tokens, full.steps.back().source_tokens);
  const auto& tokens = full.steps.back().source_tokens;
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0] + tokens[1], 12 * 4 * 32);
  EXPECT_GT(tokens[0], tokens[1]);  // weight 3 : 1
  // The blend differs from either source alone.
  EXPECT_NE(losses(full), losses(quiet_train(config("mix_one", {}))));
  std::ifstream in(c.run.dir + "/metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  EXPECT_EQ(io::parse_json(last, "metrics.jsonl").at("source_tokens").as_int_list(), tokens);
}

TEST(Mixture, BadSourcesAndEvalSectionsNameKeyAndValue) {
  auto parse_error = [](const std::string& data, std::vector<std::string> sets = {}) {
    return error_of([&] { config("bad", sets, data); });
  };
  EXPECT_NE(
      parse_error("{path: a.txt, sources: [{path: b.txt}]}")
          .find("[config] eval.yaml:3: data.sources: give data.path or data.sources, not both"),
      std::string::npos);
  EXPECT_NE(parse_error("{sources: []}").find("data.path: required (or data.sources)"),
            std::string::npos);
  EXPECT_NE(parse_error("{sources: [{path: b.txt, weight: 0}]}")
                .find("data.sources[0].weight: must be > 0, got 0"),
            std::string::npos);
  EXPECT_NE(parse_error("{sources: [{path: b.txt, weight: 1}]}", {"eval.split=0.1"})
                .find("eval.split: holds out documents of data.path; with data.sources give "
                      "eval.data"),
            std::string::npos);
  EXPECT_NE(parse_error("", {"eval.interval=5"}).find("eval.data: required (or eval.split)"),
            std::string::npos);
  EXPECT_NE(parse_error("", {"eval.split=1"}).find("eval.split: must be < 1, got 1"),
            std::string::npos);
  const std::string missing = error_of([&] {
    quiet_train(
        config("missing", {}, "{sources: [{path: " + corpus() + "}, {path: /no/such.txt}]}"));
  });
  EXPECT_NE(missing.find("[data] data.sources[1]: "), std::string::npos) << missing;
  EXPECT_NE(missing.find("/no/such.txt"), std::string::npos) << missing;
}

}  // namespace
}  // namespace hp::train
