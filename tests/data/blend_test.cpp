// Blending datasets by weight (data/blend.h, DataLoader over several sources) and holding out
// validation documents (TokenDataset::hold_out): proportions, determinism, resume, and that no
// held-out document ever reaches a training window.
#include "hp/data/blend.h"

#include <map>
#include <numeric>
#include <set>

#include "data/data_test_util.h"
#include "hp/data/loader.h"
#include "hp/data/prepare.h"

namespace hp::data {
namespace {

using test::TempDir;
using test::write_tokens;

constexpr int64_t kSeqLen = 4;

// A token file of n tokens, all equal to `id`: every window of it is recognisable by its ids.
std::shared_ptr<const TokenDataset> constant_dataset(const TempDir& dir, uint32_t id, int64_t n) {
  const std::string path = dir.file("const" + std::to_string(id) + ".bin");
  write_tokens(path, std::vector<uint32_t>(static_cast<size_t>(n), id));
  return TokenDataset::load({.path = path, .format = DatasetFormat::tokens_u32});
}

// Source of every row of `batch` (its constant id).
std::vector<int64_t> sources_of(const Tensor& batch) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < batch.size(0); ++r)
    out.push_back(batch.data<int64_t>()[r * (kSeqLen + 1)]);
  return out;
}

std::vector<LoaderSource> three_sources(const TempDir& dir) {
  // 25, 50 and 100 windows; weights 1 : 2 : 5 (not the sizes' 1 : 2 : 4).
  return {{constant_dataset(dir, 0, 101), 1.0},
          {constant_dataset(dir, 1, 201), 2.0},
          {constant_dataset(dir, 2, 401), 5.0}};
}

TEST(Blend, QuotasAreTheLargestRemainderSplit) {
  EXPECT_EQ(blend_quotas(10, {1, 1, 1}), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(blend_quotas(175, {1, 2, 5}), (std::vector<int64_t>{22, 44, 109}));
  EXPECT_EQ(blend_quotas(7, {0.5, 0.25, 0.25}), (std::vector<int64_t>{3, 2, 2}));
  const auto q = blend_quotas(1000003, {0.3, 0.3, 0.4, 1e-3});
  EXPECT_EQ(std::accumulate(q.begin(), q.end(), int64_t{0}), 1000003);
}

TEST(Blend, EveryEpochHoldsTheQuotasAndPrefixesFollowTheWeights) {
  TempDir dir;
  DataLoader loader(three_sources(dir), kSeqLen, 5);
  ASSERT_EQ(loader.samples_per_epoch(), 175);
  EXPECT_EQ(loader.quotas(), (std::vector<int64_t>{22, 44, 109}));
  std::map<int64_t, int64_t> count;
  int64_t drawn = 0;
  for (int b = 0; b < 35; ++b) {  // 35 × 5 = exactly one epoch
    for (int64_t s : sources_of(loader.next_batch(5))) ++count[s];
    drawn += 5;
    if (drawn == 100) {
      // Hypergeometric spread: within 4 standard deviations (< 0.2) of the weights.
      for (int s = 0; s < 3; ++s)
        EXPECT_NEAR(double(count[s]) / drawn, loader.quotas()[s] / 175.0, 0.2) << s;
    }
  }
  EXPECT_EQ(count[0], 22);
  EXPECT_EQ(count[1], 44);
  EXPECT_EQ(count[2], 109);
  EXPECT_EQ(loader.state(), (LoaderState{1, 0}));
  EXPECT_EQ(loader.source_samples(), (std::vector<int64_t>{22, 44, 109}));
  // Over many epochs the sources' shares are the weights' to within one sample per epoch.
  for (int b = 0; b < 35 * 9; ++b) loader.next_batch(5);
  const auto n = loader.source_samples();
  EXPECT_EQ(n, (std::vector<int64_t>{220, 440, 1090}));
  EXPECT_NEAR(double(n[2]) / 1750, 5.0 / 8, 1.0 / 175);
}

TEST(Blend, SameSeedSameOrderOtherSeedAnother) {
  TempDir dir;
  auto order = [&](uint64_t seed) {
    DataLoader loader(three_sources(dir), kSeqLen, seed);
    std::vector<int64_t> all;
    for (int b = 0; b < 20; ++b) {
      const Tensor t = loader.next_batch(7);
      all.insert(all.end(), t.data<int64_t>(), t.data<int64_t>() + t.numel());
    }
    return all;
  };
  EXPECT_EQ(order(3), order(3));
  EXPECT_NE(order(3), order(4));
}

TEST(Blend, ResumedMidEpochContinuesAsTheUninterruptedLoader) {
  TempDir dir;
  DataLoader a(three_sources(dir), kSeqLen, 9);
  for (int b = 0; b < 31; ++b) a.next_batch(6);  // mid-way through epoch 1 (186 samples)
  DataLoader b(three_sources(dir), kSeqLen, 9);
  b.set_state(a.state());
  EXPECT_EQ(a.state(), (LoaderState{1, 11}));
  EXPECT_EQ(b.source_samples(), a.source_samples());
  for (int i = 0; i < 40; ++i) {
    const Tensor x = a.next_batch(6, 1, 2), y = b.next_batch(6, 1, 2);
    ASSERT_EQ(std::vector<int64_t>(x.data<int64_t>(), x.data<int64_t>() + x.numel()),
              std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + y.numel()))
        << "batch " << i;
  }
  EXPECT_EQ(a.source_samples(), b.source_samples());
}

TEST(Blend, OneSourceIsThePlainLoader) {
  TempDir dir;
  auto ds = constant_dataset(dir, 3, 101);
  DataLoader plain(ds, kSeqLen, 2), blend(std::vector<LoaderSource>{{ds, 7.0}}, kSeqLen, 2);
  EXPECT_EQ(plain.samples_per_epoch(), blend.samples_per_epoch());
  for (int b = 0; b < 12; ++b) {
    plain.next_batch(5);
    blend.next_batch(5);
    EXPECT_EQ(plain.state(), blend.state());
  }
  EXPECT_EQ(blend.source_samples(), (std::vector<int64_t>{60}));
}

TEST(Blend, BadSourcesNameTheirPathAndWeight) {
  TempDir dir;
  auto ds = constant_dataset(dir, 0, 101);
  EXPECT_THROW_MSG(DataLoader(std::vector<LoaderSource>{}, kSeqLen, 0), ValueError,
                   "[data] DataLoader needs at least one source");
  EXPECT_THROW_MSG(DataLoader(std::vector<LoaderSource>{{ds, 1.0}, {ds, 0.0}}, kSeqLen, 0),
                   ValueError, "source 1", "const0.bin", "weight 0");
  EXPECT_THROW_MSG(DataLoader(std::vector<LoaderSource>{{ds, 1.0}, {ds, -2.0}}, kSeqLen, 0),
                   ValueError, "weight -2");
  EXPECT_THROW_MSG(DataLoader(std::vector<LoaderSource>{{ds, 1.0}, {ds, 1e-6}}, kSeqLen, 0),
                   ValueError, "too small to get one of the 50 samples");
}

// Documents "d<i>:" + i letters, one per paragraph: each is recognisable in the packed stream.
std::string documents_text(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on "d" + to_string(i) + ...
    text += 'd';
    text += std::to_string(i);
    text += ':';
    text.append(size_t(i % 7 + 3), char('a' + i % 26));
    text += "\n\n";
  }
  return text;
}

std::string stream_text(const TokenDataset& ds) {
  std::string out;
  for (int64_t id : ds.tokens(0, ds.size())) out += id == 256 ? '|' : char(id);
  return out;
}

TEST(HoldOut, EverySpacedDocumentIsHeldOutAndNeverInTheTrainingStream) {
  TempDir dir;
  test::write_file(dir.file("docs.txt"), documents_text(40));
  auto full = TokenDataset::load({.path = dir.file("docs.txt"), .doc_separator = "\n\n"});
  ASSERT_EQ(full->num_documents(), 40);
  EXPECT_EQ(full->document_start(0), 0);
  EXPECT_EQ(full->document_start(40), full->size());
  const auto [train, held] = TokenDataset::hold_out(full, 0.1);
  // floor((d + 1) / 10) > floor(d / 10): d = 9, 19, 29, 39.
  EXPECT_EQ(held->num_documents(), 4);
  EXPECT_EQ(train->num_documents(), 36);
  EXPECT_EQ(stream_text(*held), "d9:jjjjj|d19:tttttttt|d29:dddd|d39:nnnnnnn|");
  EXPECT_EQ(train->size() + held->size(), full->size());
  const std::string t = stream_text(*train);
  for (const char* doc : {"d9:", "d19:", "d29:", "d39:"}) EXPECT_EQ(t.find(doc), std::string::npos);
  for (const char* doc : {"d0:", "d8:", "d10:", "d38:"}) EXPECT_NE(t.find(doc), std::string::npos);
  // Every training window, across pieces, is the training stream's: no held-out token.
  DataLoader loader(train, kSeqLen, 1);
  std::set<int64_t> seen;
  for (int64_t b = 0; b < loader.samples_per_epoch(); ++b) {
    const Tensor w = loader.next_batch(1);
    std::string s;
    for (int64_t j = 0; j <= kSeqLen; ++j)
      s += char(w.data<int64_t>()[j] == 256 ? '|' : w.data<int64_t>()[j]);
    EXPECT_NE(t.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(held->decode(held->tokens(0, 3)), "d9:");  // the base's tokenizer
}

TEST(HoldOut, AnIndexedDatasetHoldsOutTheDocumentsItsTextWould) {
  TempDir dir;
  test::write_file(dir.file("docs.txt"), documents_text(53));
  PrepareOptions o;
  o.inputs = {dir.file("docs.txt")};
  o.out = dir.file("docs");
  o.doc_separator = "\n\n";
  prepare_dataset(o);
  auto text = TokenDataset::load({.path = dir.file("docs.txt"), .doc_separator = "\n\n"});
  auto mapped = TokenDataset::load({.path = dir.file("docs"), .format = DatasetFormat::indexed});
  ASSERT_EQ(mapped->num_documents(), 53);
  for (int64_t d = 0; d <= 53; ++d) EXPECT_EQ(mapped->document_start(d), text->document_start(d));
  const auto [t_train, t_held] = TokenDataset::hold_out(text, 0.2);
  const auto [m_train, m_held] = TokenDataset::hold_out(mapped, 0.2);
  EXPECT_TRUE(m_train->mapped());
  EXPECT_EQ(m_held->tokens(0, m_held->size()), t_held->tokens(0, t_held->size()));
  EXPECT_EQ(m_train->tokens(0, m_train->size()), t_train->tokens(0, t_train->size()));
  // A subset's epoch orders are computed in memory, not cached as the whole dataset's.
  EXPECT_EQ(m_train->order_cache_prefix(), "");
  EXPECT_EQ(mapped->order_cache_prefix(), dir.file("docs"));
}

TEST(HoldOut, TokenFilesAreDocumentsAndBadFractionsNameTheData) {
  TempDir dir;
  for (uint32_t f = 0; f < 8; ++f)
    write_tokens(dir.file("tok/" + std::to_string(f) + ".bin"), std::vector<uint32_t>(10 + f, f));
  auto full = TokenDataset::load({.path = dir.file("tok"), .format = DatasetFormat::tokens_u32});
  const auto [train, held] = TokenDataset::hold_out(full, 0.25);  // files 3 and 7
  std::vector<int32_t> h = held->tokens(0, held->size());
  EXPECT_EQ(h, [] {
    std::vector<int32_t> v(13, 3);
    v.insert(v.end(), 17, 7);
    return v;
  }());
  for (int32_t id : train->tokens(0, train->size())) EXPECT_TRUE(id != 3 && id != 7) << id;
  EXPECT_THROW_MSG(TokenDataset::hold_out(full, 0.01), ValueError, "0.01", "8 document(s)",
                   "holds out none", "one document per file");
  EXPECT_THROW_MSG(TokenDataset::hold_out(full, 1.5), ValueError, "1.5", "outside (0, 1)");
}

}  // namespace
}  // namespace hp::data
