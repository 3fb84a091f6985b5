// Training from a prepared dataset (data.format: indexed, hp data prepare) gives bitwise the
// losses of training from the text it was prepared from (same tokenizer, separator and packing),
// byte-level and with a tokenizer.json; a run interrupted mid-way resumes bitwise from it; a
// dataset prepared with another tokenizer fails by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "corpus.h"
#include "error_of.h"
#include "hp/core/error.h"
#include "hp/data/encoder.h"
#include "hp/data/indexed.h"
#include "hp/data/indexed_ids.h"
#include "hp/data/prepare.h"
#include "hp/train/config.h"
#include "hp/train/trainer.h"
#include "test_dir.h"
#include "train/train_run.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;
using hp::testing::error_of;

// One document per line: every window holds separators, so a wrong separator id shows.
const std::string kSep = "\n";

// This process's scratch directory (ctest runs each test as its own process, in parallel: they
// must not share files), removed at exit.
const fs::path& scratch() {
  struct Dir {
    fs::path path =
        fs::temp_directory_path() / ("hp_indexed_data_test_" + std::to_string(::getpid()));
    Dir() {
      fs::remove_all(path);
      fs::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// The first 150 kB of the KJV corpus.
std::string corpus() {
  static const std::string path = [] {
    const fs::path p = scratch() / "corpus.txt";
    fs::rename(testing::corpus_prefix("hp_indexed_data_test_" + std::to_string(::getpid()), 150000),
               p);
    return p.string();
  }();
  return path;
}

std::string tokenizer() {
  return std::string(HP_TEST_DIR) + "/../io/fixtures/tokenizers/qwen2.tokenizer.json";
}

// The corpus prepared once per process and tokenizer ("" = byte-level).
std::string prepared(const std::string& tok) {
  const fs::path prefix = scratch() / (tok.empty() ? "bytes" : "bpe");
  if (fs::exists(prefix.string() + ".idx")) return prefix.string();
  data::PrepareOptions o;
  o.inputs = {corpus()};
  o.out = prefix.string();
  o.tokenizer = tok;
  o.doc_separator = kSep;
  data::prepare_dataset(o);
  return prefix.string();
}

Config config(const std::string& name, const std::string& data_yaml,
              std::vector<std::string> sets = {}) {
  const fs::path dir = scratch() / ("run_" + name);
  const std::string yaml =
      "model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, "
      "intermediate: 64}\n"
      "data: " +
      data_yaml +
      "\n"
      "optimizer: {lr: 0.01}\n"
      "training: {steps: 10, batch_size: 4, seq_len: 32, seed: 3}\n"
      "metrics: {log_every: 100, progress: none}\n"
      "checkpoint: {save_final: false}\n"
      "run: {dir: " +
      dir.string() + "}\n";
  return parse_config(yaml, name + ".yaml", sets);
}

std::string text_data(const std::string& tok) {
  return "{path: " + corpus() + ", doc_separator: \"\\n\"" +
         (tok.empty() ? "" : ", tokenizer: " + tok) + "}";
}

std::string indexed_data(const std::string& tok) {
  return "{format: indexed, path: " + prepared(tok) + (tok.empty() ? "" : ", tokenizer: " + tok) +
         "}";
}

using test::losses;

using test::quiet_train;

TEST(IndexedData, SameLossesAsTheTextItWasPreparedFrom) {
  for (const std::string& tok : {std::string(), tokenizer()}) {
    const std::string tag = tok.empty() ? "bytes" : "bpe";
    const TrainResult text = quiet_train(config("text_" + tag, text_data(tok)));
    const TrainResult indexed = quiet_train(config("indexed_" + tag, indexed_data(tok)));
    ASSERT_EQ(text.steps.size(), 10u) << tag;
    EXPECT_EQ(losses(indexed), losses(text)) << tag;
    // And the data order really is shuffled per seed (the comparison is not vacuous).
    const TrainResult other =
        quiet_train(config("indexed_seed_" + tag, indexed_data(tok), {"training.seed=4"}));
    EXPECT_NE(losses(other), losses(indexed)) << tag;
  }
}

TEST(IndexedData, ResumeIsBitwise) {
  const TrainResult full = quiet_train(config("full", indexed_data("")));
  const Config c = config("resumed", indexed_data(""));
  TrainOptions stop;
  stop.stop_after = 4;
  const TrainResult first = quiet_train(c, stop);
  ASSERT_TRUE(first.interrupted);
  TrainOptions resume;
  resume.resume = "auto";
  const TrainResult second = quiet_train(c, resume);
  EXPECT_EQ(second.first_step, 5);
  std::vector<double> joined = losses(first);
  for (double l : losses(second)) joined.push_back(l);
  EXPECT_EQ(joined, losses(full));
}

TEST(IndexedData, ConfigRefusesTextOnlyKeys) {
  const std::string e = error_of([] {
    parse_config(
        "model: {arch: qwen3, hidden: 32, layers: 1, heads: 4, kv_heads: 2, "
        "intermediate: 64}\ndata: {format: indexed, path: p, doc_separator: x}\n",
        "c.yaml");
  });
  EXPECT_NE(e.find("data.doc_separator"), std::string::npos) << e;
  EXPECT_NE(e.find("hp data prepare --doc-separator"), std::string::npos) << e;
  const Config ok = parse_config(
      "model: {arch: qwen3, hidden: 32, layers: 1, heads: 4, kv_heads: 2, intermediate: 64}\n"
      "data: {format: indexed, path: p}\n",
      "c.yaml");
  EXPECT_EQ(ok.data.format, DataFormat::indexed);
}

TEST(IndexedData, WrongTokenizerIsNamed) {
  // Prepared with the BPE tokenizer, trained as byte-level: refused at start-up (the largest id
  // hp data prepare recorded), naming the dataset, the id, the vocabulary and data.tokenizer.
  const Config c = config("wrong_tok", "{format: indexed, path: " + prepared(tokenizer()) + "}");
  const std::string e = error_of([&] { quiet_train(c); });
  EXPECT_NE(e.find("[train] data " + prepared(tokenizer()) + ".bin has token id "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("outside the model's vocabulary of 257"), std::string::npos) << e;
  EXPECT_NE(e.find("data.tokenizer"), std::string::npos) << e;
  // An unfinished prepare is refused by name before any step.
  const std::string missing = (scratch() / "none").string();
  const Config m = config("missing", "{format: indexed, path: " + missing + "}");
  const std::string e2 = error_of([&] { quiet_train(m); });
  EXPECT_NE(e2.find(missing + ".idx"), std::string::npos) << e2;
}

// An indexed dataset without hp data prepare's record (as Megatron's tools write one) whose ids
// exceed the model's vocabulary, though not its tokenizer's: refused when the run starts (before:
// only when a batch held the id), naming the file, the id, the vocabulary and the document and
// offset; the scan is cached beside the data.
TEST(IndexedData, OutOfVocabularyIdsAreRefusedAtOpen) {
  const std::string prefix = (scratch() / "oov").string();
  {
    data::IndexedDatasetWriter w(prefix, data::IndexedDType::u16);
    for (int d = 0; d < 40; ++d) {
      std::vector<int32_t> doc(50, 65 + d % 26);
      if (d == 7) doc[12] = doc[30] = 600;  // the first occurrence: document 7, offset 12
      doc.push_back(data::kByteSeparator);
      w.add_document(doc);
    }
    w.finish();
  }
  ASSERT_FALSE(fs::exists(data::indexed_ids_path(prefix)));
  const Config c = config("oov", "{format: indexed, path: " + prefix + "}", {"model.vocab=512"});
  const std::string e = error_of([&] { quiet_train(c); });
  EXPECT_NE(e.find("[train] data " + prefix +
                   ".bin has token id 600 (document 7, offset 12; "
                   "position 369 of the token stream), outside the model's vocabulary of 512 "
                   "(raise model.vocab"),
            std::string::npos)
      << e;
  EXPECT_TRUE(fs::exists(data::indexed_ids_path(prefix)));
  const data::MaxTokenId m = data::max_token_id(*data::IndexedDataset::open(prefix));
  EXPECT_EQ(m.id, 600);
  EXPECT_EQ(m.document, 7);
  EXPECT_EQ(m.offset, 12);
  // A vocabulary that holds it passes the check (the ids above the tokenizer's 257 still fail
  // when read, as before).
  const Config ok =
      config("oov_ok", "{format: indexed, path: " + prefix + "}", {"model.vocab=601"});
  EXPECT_EQ(error_of([&] { quiet_train(ok); }).find("has token id 600"), std::string::npos);
}

// hp data prepare records the largest id beside the index.
TEST(IndexedData, PrepareRecordsTheLargestId) {
  const std::string prefix = prepared("");
  ASSERT_TRUE(fs::exists(data::indexed_ids_path(prefix)));
  bool scanned = true;
  const data::MaxTokenId m = data::max_token_id(*data::IndexedDataset::open(prefix), &scanned);
  EXPECT_FALSE(scanned);
  EXPECT_EQ(m.id, data::kByteSeparator);
  EXPECT_EQ(m.document, 0);
}

}  // namespace
}  // namespace hp::train
