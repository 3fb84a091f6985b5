// Chat data end to end: data.format chat, hp data prepare --format chat (PREFIX.mask.bin), the
// loader's labels and target counts, and the loss: masked targets add zero loss and zero gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "data/data_test_util.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/error.h"
#include "hp/data/chat.h"
#include "hp/data/encoder.h"
#include "hp/data/indexed.h"
#include "hp/data/loader.h"
#include "hp/data/prepare.h"
#include "hp/models/hf/registry.h"
#include "hp/models/transformer.h"
#include "hp/ops/ops.h"
#include "models/tiny_models.h"
#include "test_dir.h"

namespace hp::data {
namespace {

using test::TempDir;

const std::string kConversations =
    R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello! What do you need?"}]})"
    "\n\n"
    R"({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6, of course."}]})"
    "\n"
    R"({"id": 7, "messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue, like the sea on a clear day."}]})"
    "\n";

std::string template_path() {
  return std::string(HP_TEST_DIR) + "/fixtures/chat/qwen2/tokenizer_config.json";
}

DatasetOptions chat_options(const std::string& path) {
  return {.path = path,
          .format = DatasetFormat::chat,
          .tokenizer = test::tokenizer_fixture("qwen2"),
          .chat_template = template_path()};
}

std::vector<uint8_t> mask_of(const TokenDataset& ds) {
  std::vector<uint8_t> m(static_cast<size_t>(ds.size()));
  ds.read_mask(0, ds.size(), m.data());
  return m;
}

TEST(ChatDataset, TokensAndMaskPerConversation) {
  TempDir dir;
  test::write_file(dir.file("chat.jsonl"), kConversations);
  const auto ds = TokenDataset::load(chat_options(dir.file("chat.jsonl")));
  ASSERT_TRUE(ds->has_mask());
  EXPECT_EQ(ds->num_documents(), 3);
  // Each document is encode_conversation's ids and mask, in order.
  const DocumentEncoder enc(test::tokenizer_fixture("qwen2"), "");
  const ChatTemplate t = ChatTemplate::load(template_path());
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  int64_t line = 0;
  for (std::string_view rest = kConversations; !rest.empty(); ++line) {
    const std::string_view l = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(rest.size(), l.size() + 1));
    if (l.empty()) continue;
    encode_conversation(t, enc, parse_chat_line(l, "messages", "x"), "x", ids, mask);
  }
  EXPECT_EQ(ds->tokens(0, ds->size()), ids);
  EXPECT_EQ(mask_of(*ds), mask);
  std::vector<int32_t> trained;
  for (size_t i = 0; i < ids.size(); ++i)
    if (mask[i]) trained.push_back(ids[i]);
  EXPECT_EQ(enc.decode(trained),
            "Hello! What do you need?<|im_end|>\n4<|im_end|>\n6, of course.<|im_end|>\n"
            "Blue, like the sea on a clear day.<|im_end|>\n");
  // Held-out views keep each document's mask with its tokens.
  const auto [train, eval] = TokenDataset::hold_out(ds, 0.5);
  std::vector<uint8_t> m(static_cast<size_t>(eval->size()));
  eval->read_mask(0, eval->size(), m.data());
  const int64_t d1 = ds->document_start(1), d2 = ds->document_start(2);
  EXPECT_EQ(m, std::vector<uint8_t>(mask.begin() + d1, mask.begin() + d2));
}

TEST(ChatDataset, BadLinesNameFileAndLine) {
  TempDir dir;
  auto fails = [&](const std::string& text, std::initializer_list<const char*> needles) {
    test::write_file(dir.file("bad.jsonl"), text);
    try {
      TokenDataset::load(chat_options(dir.file("bad.jsonl")));
      ADD_FAILURE() << "no error for " << text;
    } catch (const ValueError& e) {
      for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  const std::string good = kConversations.substr(0, kConversations.find('\n') + 1);
  fails(good + "{not json\n", {"bad.jsonl:2: the line is not JSON (parse error at column 3"});
  fails(good + "\n" + R"({"messages": [{"role": "robot", "content": "x"}]})",
        {"bad.jsonl:3: messages[0].role 'robot' is not one of system, user, assistant, tool"});
  fails(R"({"messages": [{"role": "user", "content": {"text": "x"}}]})",
        {"bad.jsonl:1: messages[0].content is a object, not a string"});
  fails(R"({"text": "plain"})", {"bad.jsonl:1: the line has no field 'messages'"});
  EXPECT_THROW_MSG(
      TokenDataset::load({.path = dir.file("bad.jsonl"), .format = DatasetFormat::chat}),
      ValueError, "chat data needs a chat template");
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("bad.jsonl"),
                                       .format = DatasetFormat::text,
                                       .chat_template = template_path()}),
                   ValueError, "chat_template", "applies to chat datasets only");
}

PrepareOptions prepare_chat(const std::string& in, const std::string& out, int workers) {
  PrepareOptions o;
  o.inputs = {in};
  o.out = out;
  o.format = "chat";
  o.tokenizer = test::tokenizer_fixture("qwen2");
  o.chat_template = template_path();
  o.workers = workers;
  o.batch_bytes = 64;  // several batches
  return o;
}

TEST(ChatDataset, PreparedIndexedDatasetCarriesTheMask) {
  TempDir dir;
  test::write_file(dir.file("chat.jsonl"), kConversations);
  const auto mem = TokenDataset::load(chat_options(dir.file("chat.jsonl")));
  const PrepareResult r = prepare_dataset(prepare_chat(dir.file("chat.jsonl"), dir.file("out/c"), 3));
  EXPECT_EQ(r.documents, 3);
  ASSERT_TRUE(std::filesystem::exists(indexed_mask_path(dir.file("out/c"))));
  const auto idx = TokenDataset::load({.path = dir.file("out/c"),
                                       .format = DatasetFormat::indexed,
                                       .tokenizer = test::tokenizer_fixture("qwen2")});
  ASSERT_TRUE(idx->has_mask());
  EXPECT_EQ(idx->tokens(0, idx->size()), mem->tokens(0, mem->size()));
  EXPECT_EQ(mask_of(*idx), mask_of(*mem));
  // The bytes do not depend on the worker count.
  prepare_dataset(prepare_chat(dir.file("chat.jsonl"), dir.file("one/c"), 1));
  EXPECT_EQ(test::read_bytes(indexed_mask_path(dir.file("one/c"))),
            test::read_bytes(indexed_mask_path(dir.file("out/c"))));
  EXPECT_EQ(test::read_bytes(dir.file("one/c.bin")), test::read_bytes(dir.file("out/c.bin")));

  // A mask of another length is refused; a dataset rewritten without a mask loses the old one.
  test::write_file(indexed_mask_path(dir.file("one/c")), std::string("\x01\x00", 2));
  EXPECT_THROW_MSG(IndexedDataset::open(dir.file("one/c")), IoError, "c.mask.bin' has 2 bytes",
                   "a loss mask has one byte per token");
  test::write_file(dir.file("plain.txt"), "some text");
  PrepareOptions plain;
  plain.inputs = {dir.file("plain.txt")};
  plain.out = dir.file("one/c");
  plain.overwrite = true;
  prepare_dataset(plain);
  EXPECT_FALSE(std::filesystem::exists(indexed_mask_path(dir.file("one/c"))));

  // --skip-bad-lines counts the bad conversations and keeps the rest.
  test::write_file(dir.file("mixed.jsonl"),
                   kConversations + R"({"messages": [{"role": "bot", "content": "x"}]})" + "\n");
  PrepareOptions skip = prepare_chat(dir.file("mixed.jsonl"), dir.file("skip/c"), 2);
  EXPECT_THROW_MSG(prepare_dataset(skip), ValueError, "mixed.jsonl:5: messages[0].role 'bot'");
  skip.skip_bad_lines = true;
  const PrepareResult s = prepare_dataset(skip);
  EXPECT_EQ(s.documents, 3);
  EXPECT_EQ(s.skipped_lines, 1);
  EXPECT_NE(s.first_skipped.find("mixed.jsonl:5"), std::string::npos) << s.first_skipped;
}

TEST(ChatLoader, LabelsAndTargetCounts) {
  TempDir dir;
  test::write_file(dir.file("chat.jsonl"), kConversations);
  const auto ds = TokenDataset::load(chat_options(dir.file("chat.jsonl")));
  const std::vector<uint8_t> mask = mask_of(*ds);
  constexpr int64_t kSeq = 8;
  DataLoader loader(ds, kSeq, /*seed=*/3);
  ASSERT_TRUE(loader.masked());
  const int64_t peek = loader.peek_targets(4, 2);
  const LoaderState before = loader.state();
  EXPECT_EQ(loader.peek_targets(4, 2), peek);  // peeking moves nothing
  EXPECT_EQ(loader.state(), before);
  int64_t global = 0;
  for (int step = 0; step < 2; ++step) {
    int64_t local_sum = 0, global_seen = -1;
    for (int r = 0; r < 3; ++r) {  // three ranks of one global batch of 4 (rows 2, 2, 0)
      DataLoader rank(ds, kSeq, 3);
      rank.set_state(loader.state());
      const Batch b = rank.next(4, r, 3);
      local_sum += b.targets;
      if (global_seen >= 0) {
        EXPECT_EQ(b.global_targets, global_seen);
      }
      global_seen = b.global_targets;
      // labels = ids where the mask is 1, -100 elsewhere; targets counts labels[:, 1:].
      const auto ids = b.ids.to_vector(), labels = b.labels.to_vector();
      int64_t counted = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_TRUE(labels[i] == -100 || labels[i] == ids[i]);
        counted += (i % (kSeq + 1)) != 0 && labels[i] != -100;
      }
      EXPECT_EQ(counted, b.targets);
    }
    EXPECT_EQ(local_sum, global_seen);
    global += loader.next(4).global_targets;
  }
  EXPECT_EQ(global, peek);
  EXPECT_LT(global, 2 * 4 * kSeq);  // prompts are not targets
}

// Σ of parameter gradients, flattened, after backward of `loss`.
std::vector<double> grads_of(models::CausalLM& m, const Tensor& loss) {
  for (auto& [name, p] : m.named_parameters()) p.zero_grad();
  loss.backward();
  std::vector<double> g;
  for (auto& [name, p] : m.named_parameters())
    if (p.grad().defined())
      for (double v : p.grad().to_vector()) g.push_back(v);
  return g;
}

TEST(ChatLoss, MaskedTargetsAddNoLossAndNoGradient) {
  TempDir dir;
  test::write_file(dir.file("chat.jsonl"), kConversations);
  const auto ds = TokenDataset::load(chat_options(dir.file("chat.jsonl")));
  DataLoader loader(ds, 12, 5);
  Batch b = loader.next(2);
  for (int i = 0; i < 50 && (b.targets < 2 || b.targets == 2 * 12); ++i) b = loader.next(2);
  ASSERT_GT(b.targets, 1);
  ASSERT_LT(b.targets, 2 * 12);
  auto model = models::build_model(models::testing::tiny_config("qwen3", 32, 1, ds->vocab_size()));
  const Tensor loss = model->loss(b.ids, b.labels);
  const std::vector<double> g = grads_of(*model, loss);
  // The mean over the unmasked targets, each alone: same loss, same gradient.
  const std::vector<double> labels = b.labels.to_vector();
  double sum = 0;
  std::vector<double> gsum(g.size(), 0.0);
  const int64_t width = b.ids.size(1);
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i % size_t(width) == 0 || labels[i] == -100) continue;
    std::vector<double> one(labels.size(), -100);
    one[i] = labels[i];
    const Tensor li = model->loss(b.ids, from_vector(one, b.ids.shape(), DType::i64));
    sum += li.item();
    const std::vector<double> gi = grads_of(*model, li);
    for (size_t k = 0; k < g.size(); ++k) gsum[k] += gi[k];
  }
  const double n = double(b.targets);
  EXPECT_NEAR(loss.item(), sum / n, 1e-5);
  for (size_t k = 0; k < g.size(); ++k) ASSERT_NEAR(g[k], gsum[k] / n, 1e-6) << k;
  // Every target masked: zero loss, zero gradient (and the backward still runs).
  const Tensor none = model->loss(b.ids, full(b.ids.shape(), -100.0, DType::i64));
  EXPECT_EQ(none.item(), 0.0);
  for (double v : grads_of(*model, none)) ASSERT_EQ(v, 0.0);
}

}  // namespace
}  // namespace hp::data
