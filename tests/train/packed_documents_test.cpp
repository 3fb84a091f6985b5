// data.document_mask / data.reset_position_ids end to end: the keys and their errors, how "auto"
// resolves, and training / validation with attention inside each packed document (a verse of the
// corpus per document): bitwise the same for any thread count and with recompute, resumed exactly,
// different from the plain causal run, and the validation loss is CausalLM::loss with the rows'
// positions; chat data turns them on by default.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "corpus.h"
#include "test_dir.h"
#include "train/train_run.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/fsdp/fsdp.h"
#include "hp/models/transformer.h"
#include "hp/train/config.h"
#include "hp/train/evaluate.h"
#include "hp/train/setup.h"
#include "hp/train/state.h"
#include "hp/train/trainer.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;

std::string corpus() {
  static const std::string path = testing::corpus_prefix("hp_packed_docs_test", 60000);
  return path;
}

std::string run_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("hp_packed_docs_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

// A tiny Qwen3 on the corpus, one verse (line) per document: most 64-token windows hold a
// document boundary.
std::string yaml_text(const std::string& name) {
  return R"(model:
  arch: qwen3
  hidden: 32
  layers: 2
  heads: 4
  kv_heads: 2
  intermediate: 64
data:
  path: )" +
         corpus() + R"(
  doc_separator: "\n"
  document_mask: true
optimizer:
  lr: 0.01
training:
  steps: 6
  batch_size: 4
  seq_len: 64
  seed: 3
metrics:
  log_every: 100
  progress: none
checkpoint:
  save_final: false
run:
  dir: )" +
         run_dir(name) + "\n";
}

Config config(const std::string& name, std::vector<std::string> sets = {}) {
  return parse_config(yaml_text(name), "docs.yaml", sets);
}

using test::quiet_train;

using test::losses;

std::string error_of(const std::vector<std::string>& sets) {
  try {
    parse_config(yaml_text("errors"), "docs.yaml", sets);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PackedDocumentsConfig, KeysDefaultsAndErrors) {
  const Config c = config("keys");
  EXPECT_EQ(c.data.document_mask, AutoFlag::on);
  EXPECT_EQ(c.data.reset_position_ids, AutoFlag::auto_);
  EXPECT_EQ(Config{}.data.document_mask, AutoFlag::auto_);
  EXPECT_EQ(error_of({"data.document_mask=yes"}),
            "[config] --set data.document_mask=yes: data.document_mask: must be one of "
            "auto|true|false, got 'yes'");
  // Context parallelism carries the documents (ring and Ulysses take their ids).
  EXPECT_EQ(error_of({"parallel.cp=2"}), "(no error)");
  EXPECT_NE(error_of({"data.reset_position_ids=maybe"})
                .find("data.reset_position_ids: must be one of auto|true|false, got 'maybe'"),
            std::string::npos);
}

TEST(PackedDocumentsConfig, AutoIsOnForMaskedData) {
  Config c;
  for (bool masked : {false, true}) {
    const DocumentFlags f = document_flags(c, masked);
    EXPECT_EQ(f.mask, masked);
    EXPECT_EQ(f.reset_positions, masked);
  }
  c.data.document_mask = AutoFlag::on;
  c.data.reset_position_ids = AutoFlag::off;
  EXPECT_TRUE(document_flags(c, false).mask);
  EXPECT_FALSE(document_flags(c, false).reset_positions);
  c.data.document_mask = AutoFlag::off;
  c.data.reset_position_ids = AutoFlag::auto_;
  EXPECT_FALSE(document_flags(c, true).any());
}

TEST(PackedDocumentsTraining, BitwiseForAnyThreadCountWithRecomputeAndUnlikeTheCausalRun) {
  const int before = num_threads();
  set_num_threads(1);
  const TrainResult one = quiet_train(config("threads1"));
  set_num_threads(2);
  const TrainResult two = quiet_train(config("threads2"));
  set_num_threads(before);
  EXPECT_EQ(losses(one), losses(two));
  // Recompute regions run the forward again with the same documents.
  EXPECT_EQ(losses(quiet_train(config("recompute", {"recompute.mode=full"}))), losses(one));
  const TrainResult causal = quiet_train(config("causal", {"data.document_mask=false"}));
  ASSERT_EQ(causal.steps.size(), one.steps.size());
  EXPECT_NE(causal.steps[0].loss, one.steps[0].loss);
}

TEST(PackedDocumentsTraining, ResumeIsExact) {
  const TrainResult full = quiet_train(config("full"));
  const Config c = config("resume");
  TrainOptions stop;
  stop.stop_after = 3;
  const TrainResult first = quiet_train(c, stop);
  ASSERT_TRUE(first.interrupted);
  TrainOptions resume;
  resume.resume = "auto";
  const TrainResult second = quiet_train(c, resume);
  EXPECT_EQ(second.first_step, 4);
  std::vector<double> joined = losses(first);
  for (double l : losses(second)) joined.push_back(l);
  EXPECT_EQ(joined, losses(full));
}

// The validation pass applies the run's flags: its loss is the mean of CausalLM::loss over the
// held-out windows with their positions, and not the causal one.
TEST(PackedDocumentsTraining, ValidationUsesTheDocuments) {
  const Config c = config("eval", {"eval.split=0.1", "eval.steps=2", "eval.batch_size=2",
                                   "checkpoint.save_final=true"});
  const TrainResult res = quiet_train(c);
  ASSERT_EQ(res.evals.size(), 1u);
  const Layout layout = parallel_layout(c, dist::world());
  RunSetup run = build_run(c, layout);
  EXPECT_TRUE(run.documents.mask);
  EXPECT_TRUE(run.documents.reset_positions);  // auto follows document_mask
  restore(res.last_checkpoint, run.par, *run.opt, *run.loader);
  run.par.fsdp->reshard();
  data::DataLoader windows(run.data.eval, 64, 0, /*shuffle=*/false);
  windows.set_document_positions(true);
  double with = 0, without = 0;
  {
    autograd::NoGradGuard no_grad;
    for (int b = 0; b < 2; ++b) {
      const data::Batch batch = windows.next(2);
      with += run.model->loss(batch.ids, Tensor(), {batch.positions, true, true}).item();
      without += run.model->loss(batch.ids).item();
    }
  }
  EXPECT_NEAR(res.evals[0].loss, with / 2, 1e-12 * with);
  EXPECT_GT(std::fabs(with - without), 1e-5 * with);  // a 6-step model attends almost uniformly
}

// Chat data: "auto" turns both on (one conversation per document), and they change the losses
// (128-token windows hold several conversations, so replies would otherwise see earlier ones).
TEST(PackedDocumentsTraining, ChatDataIsMaskedByDefault) {
  const fs::path jsonl =
      fs::temp_directory_path() / ("hp_packed_docs_chat_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(jsonl);
    for (int i = 0; i < 60; ++i)
      out << R"({"messages": [{"role": "user", "content": "What is )" << i << " plus " << i % 7
          << R"(?"}, {"role": "assistant", "content": "It is )" << i + i % 7 << R"(."}]})"
          << "\n";
  }
  const std::vector<std::string> chat = {"data.path=" + jsonl.string(),
                                         "data.format=chat",
                                         "data.doc_separator=\"\"",
                                         "data.document_mask=auto",
                                         "data.tokenizer=" + std::string(HP_TEST_DIR) +
                                             "/../io/fixtures/tokenizers/qwen2.tokenizer.json",
                                         "data.chat_template=" + std::string(HP_TEST_DIR) +
                                             "/../data/fixtures/chat/qwen2/tokenizer_config.json",
                                         "training.seq_len=128",
                                         "training.batch_size=2",
                                         "training.steps=3"};
  const Config c = config("chat", chat);
  {
    RunSetup run = build_run(c, parallel_layout(c, dist::world()));
    EXPECT_TRUE(run.documents.mask);
    EXPECT_TRUE(run.documents.reset_positions);
  }
  std::vector<std::string> off = chat;
  off[3] = "data.document_mask=false";
  const Config c_off = config("chat_off", off);
  EXPECT_FALSE(document_flags(c_off, true).any());
  const TrainResult on = quiet_train(c), crossing = quiet_train(c_off);
  EXPECT_NE(losses(on), losses(crossing));
  fs::remove(jsonl);
}

}  // namespace
}  // namespace hp::train
