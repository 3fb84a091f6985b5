// Per-token document positions (TokenDataset::read_positions, Batch::positions): 0 at each
// document's first token and at the window's first, for text, indexed (with an empty document),
// chat, token files (a file is a document), held-out subsets and the loader's rows. Every document
// ends with the separator id, so the expected positions follow from the tokens alone: a position
// restarts right after a separator.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "data/data_test_util.h"
#include "hp/core/error.h"
#include "hp/data/dataset.h"
#include "hp/data/indexed.h"
#include "hp/data/loader.h"
#include "test_dir.h"

namespace hp::data {
namespace {

using test::TempDir;

// Positions of ids[0, n) as the separator rule gives them.
std::vector<int64_t> by_separator(const int64_t* ids, int64_t n, int64_t sep) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 1; i < n; ++i) p[i] = ids[i - 1] == sep ? 0 : p[i - 1] + 1;
  return p;
}

// read_positions of every window [begin, begin + count) of a few sizes equals the rule.
// check_starts: also that document_start(d) reads position 0 (not for held-out views: a document
// subset does not answer document_start).
void expect_positions_follow_separators(const TokenDataset& ds, const std::string& what,
                                        bool check_starts = true) {
  ASSERT_GT(ds.size(), 0) << what;
  std::vector<int64_t> ids(static_cast<size_t>(ds.size()));
  ds.read(0, ds.size(), ids.data());
  for (int64_t count : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{33}, ds.size()})
    for (int64_t begin = 0; begin + count <= ds.size(); begin += std::max<int64_t>(1, count / 3)) {
      std::vector<int64_t> got(static_cast<size_t>(count));
      ds.read_positions(begin, count, got.data());
      ASSERT_EQ(got, by_separator(ids.data() + begin, count, ds.separator_id()))
          << what << ": window [" << begin << ", " << begin + count << ")";
    }
  if (!check_starts) return;
  // Every document starts at position 0 when read from the stream's start.
  std::vector<int64_t> all(static_cast<size_t>(ds.size()));
  ds.read_positions(0, ds.size(), all.data());
  for (int64_t d = 0; d < ds.num_documents(); ++d)
    if (ds.document_start(d) < ds.size())
      EXPECT_EQ(all[ds.document_start(d)], 0) << what << " doc " << d;
}

const std::string kText =
    "In the beginning|God|created the heaven and the earth.|a|And the earth "
    "was without form, and void;|and darkness|x|was upon the face of the deep.";

TEST(DocumentPositions, TextIndexedAndHeldOutFollowDocuments) {
  TempDir dir;
  test::write_file(dir.file("t.txt"), kText);
  const auto text = TokenDataset::load({.path = dir.file("t.txt"), .doc_separator = "|"});
  ASSERT_EQ(text->num_documents(), 8);
  expect_positions_follow_separators(*text, "text");

  // The same documents (and an empty one, which has no sequence) as an indexed dataset.
  {
    IndexedDatasetWriter w(dir.file("idx"), IndexedDType::u16);
    for (int64_t d = 0; d < text->num_documents(); ++d) {
      const int64_t b = text->document_start(d), e = text->document_start(d + 1);
      w.add_document(text->tokens(b, e - b));
      if (d == 2) w.add_document({});
    }
    w.finish();
  }
  const auto indexed =
      TokenDataset::load({.path = dir.file("idx"), .format = DatasetFormat::indexed});
  ASSERT_EQ(indexed->num_documents(), 9);
  expect_positions_follow_separators(*indexed, "indexed");

  const auto [train, eval] = TokenDataset::hold_out(text, 0.3);
  expect_positions_follow_separators(*train, "held-out training view", false);
  expect_positions_follow_separators(*eval, "held-out documents", false);
}

TEST(DocumentPositions, ChatConversationsAreDocuments) {
  TempDir dir;
  test::write_file(
      dir.file("c.jsonl"),
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "Colour?"}, {"role": "assistant", "content": "Blue."}]})"
      "\n");
  const auto ds = TokenDataset::load(
      {.path = dir.file("c.jsonl"),
       .format = DatasetFormat::chat,
       .tokenizer = test::tokenizer_fixture("qwen2"),
       .chat_template = std::string(HP_TEST_DIR) + "/fixtures/chat/qwen2/tokenizer_config.json"});
  ASSERT_EQ(ds->num_documents(), 3);
  expect_positions_follow_separators(*ds, "chat");
}

TEST(DocumentPositions, TokenFilesAreOneDocumentEach) {
  TempDir dir;
  test::write_tokens(dir.file("f/a.bin"), std::vector<uint16_t>{5, 6, 7});
  test::write_tokens(dir.file("f/b.bin"), std::vector<uint16_t>{8, 9});
  const auto ds = TokenDataset::load({.path = dir.file("f"), .format = DatasetFormat::tokens_u16});
  std::vector<int64_t> p(5);
  ds->read_positions(0, 5, p.data());
  EXPECT_EQ(p, (std::vector<int64_t>{0, 1, 2, 0, 1}));
  ds->read_positions(1, 4, p.data());
  EXPECT_EQ(std::vector<int64_t>(p.begin(), p.begin() + 4), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_THROW(ds->read_positions(3, 3, p.data()), ValueError);
}

TEST(DocumentPositions, LoaderRowsCarryThemWithoutChangingItsState) {
  TempDir dir;
  test::write_file(dir.file("t.txt"), kText);
  const auto text = TokenDataset::load({.path = dir.file("t.txt"), .doc_separator = "|"});
  DataLoader plain(text, 16, 9), with(text, 16, 9);
  with.set_document_positions(true);
  for (int step = 0; step < 4; ++step) {
    const Batch a = plain.next(3, 1, 2), b = with.next(3, 1, 2);
    EXPECT_FALSE(a.positions.defined());
    ASSERT_TRUE(b.positions.defined());
    ASSERT_EQ(b.positions.shape(), b.ids.shape());
    EXPECT_EQ(a.ids.to_vector(), b.ids.to_vector());
    for (int64_t r = 0; r < b.ids.size(0); ++r) {
      const int64_t* ids = b.ids.data<int64_t>() + r * 17;
      const int64_t* pos = b.positions.data<int64_t>() + r * 17;
      EXPECT_EQ(std::vector<int64_t>(pos, pos + 17), by_separator(ids, 17, text->separator_id()));
    }
    EXPECT_EQ(plain.state(), with.state());
  }
}

}  // namespace
}  // namespace hp::data
