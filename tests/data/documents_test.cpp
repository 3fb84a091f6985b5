// Documents of a text stream: the streaming splitter (hp data prepare) gives exactly the documents
// and offsets of the whole-text split (TokenDataset), however the stream is cut.
#include "hp/data/documents.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

namespace hp::data::detail {
namespace {

using Docs = std::vector<std::pair<std::string, uint64_t>>;

Docs whole(const std::string& text, const std::string& sep) {
  Docs out;
  split_documents(text, sep, [&](std::string_view d, uint64_t at) { out.emplace_back(d, at); });
  return out;
}

// Fed in pieces ending at `cuts`.
Docs streamed(const std::string& text, const std::string& sep, const std::vector<size_t>& cuts) {
  Docs out;
  DocumentSplitter s(sep);
  auto on_doc = [&](std::string_view d, uint64_t at) { out.emplace_back(d, at); };
  size_t at = 0;
  for (size_t cut : cuts) {
    s.feed(std::string_view(text).substr(at, cut - at), on_doc);
    at = cut;
  }
  s.feed(std::string_view(text).substr(at), on_doc);
  s.finish(on_doc);
  return out;
}

TEST(Documents, SplitDropsEmptyPiecesAndKeepsOffsets) {
  EXPECT_EQ(whole("||one||two||||three||", "||"), (Docs{{"one", 2}, {"two", 7}, {"three", 14}}));
  EXPECT_EQ(whole("a\n\nb", ""), (Docs{{"a\n\nb", 0}}));
  EXPECT_EQ(whole("", "x"), Docs{});
  EXPECT_EQ(whole("", ""), Docs{});
  // Leftmost, non-overlapping: "aaa" over "aa" is one separator then the document "a".
  EXPECT_EQ(whole("aaab", "aa"), (Docs{{"ab", 2}}));
  EXPECT_EQ(whole("xaaaaay", "aa"), (Docs{{"x", 0}, {"ay", 5}}));
}

TEST(Documents, StreamedEqualsWholeAtEveryCut) {
  const std::vector<std::pair<std::string, std::string>> cases = {{"||one||two||||three||", "||"},
                                                                  {"xaaaaayaaz", "aa"},
                                                                  {"aaaa", "aa"},
                                                                  {"abcabcab", "abcab"},
                                                                  {"\n\nline\n\n\n", "\n\n"},
                                                                  {"no separator", "\n\n"},
                                                                  {"whole file", ""}};
  for (const auto& [text, sep] : cases) {
    const Docs want = whole(text, sep);
    for (size_t c1 = 0; c1 <= text.size(); ++c1)
      for (size_t c2 = c1; c2 <= text.size(); ++c2)
        EXPECT_EQ(streamed(text, sep, {c1, c2}), want)
            << text << " / " << sep << " cut at " << c1 << ", " << c2;
  }
}

TEST(Documents, StreamedEqualsWholeOnRandomText) {
  std::mt19937 rng(5);
  for (int round = 0; round < 200; ++round) {
    std::string text;
    const size_t n = rng() % 200;
    for (size_t i = 0; i < n; ++i) text += "ab\n"[rng() % 3];
    const std::string sep = std::vector<std::string>{"\n", "\n\n", "ab", "aba", "b\nb"}[rng() % 5];
    std::vector<size_t> cuts;
    for (size_t at = 0; at < text.size(); at += 1 + rng() % 7) cuts.push_back(at);
    EXPECT_EQ(streamed(text, sep, cuts), whole(text, sep)) << "round " << round;
  }
}

TEST(Documents, SplitterBuffersOnlyTheUnfinishedDocument) {
  DocumentSplitter s("\n\n");
  Docs out;
  auto on_doc = [&](std::string_view d, uint64_t at) { out.emplace_back(d, at); };
  s.feed("first\n\nsecond is long", on_doc);
  EXPECT_EQ(out, (Docs{{"first", 0}}));
  EXPECT_EQ(s.buffered(), std::string("second is long").size());
  s.feed("\n", on_doc);
  s.feed("\nthird", on_doc);
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(s.buffered(), 5u);
  s.finish(on_doc);
  EXPECT_EQ(out, (Docs{{"first", 0}, {"second is long", 7}, {"third", 23}}));
}

}  // namespace
}  // namespace hp::data::detail
