#include "hp/data/loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "data/data_test_util.h"
#include "hp/data/prepare.h"
#include "test_dir.h"

namespace hp::data {
namespace {

using test::TempDir;
using test::write_tokens;

constexpr int64_t kSeqLen = 4;
constexpr int64_t kTokens = 101;  // (101 - 1) / 4 = 25 windows

// A token file holding 0, 1, ..., n-1, so window k starts with token k * seq_len.
std::shared_ptr<const TokenDataset> iota_dataset(const TempDir& dir, int64_t n = kTokens) {
  std::vector<uint32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0u);
  write_tokens(dir.file("iota.bin"), ids);
  return TokenDataset::load({.path = dir.file("iota.bin"), .format = DatasetFormat::tokens_u32});
}

// Window indices of a batch's rows, after checking each row is a contiguous window.
std::vector<int64_t> windows_of(const Tensor& batch) {
  EXPECT_EQ(batch.dtype(), DType::i64);
  EXPECT_EQ(batch.size(1), kSeqLen + 1);
  std::vector<int64_t> out;
  const int64_t* p = batch.data<int64_t>();
  for (int64_t r = 0; r < batch.size(0); ++r) {
    const int64_t* row = p + r * (kSeqLen + 1);
    EXPECT_EQ(row[0] % kSeqLen, 0);
    for (int64_t j = 0; j <= kSeqLen; ++j) EXPECT_EQ(row[j], row[0] + j);
    out.push_back(row[0] / kSeqLen);
  }
  return out;
}

// The window order of the next `samples` samples, drawn `batch` at a time.
std::vector<int64_t> draw(DataLoader& loader, int64_t samples, int64_t batch) {
  std::vector<int64_t> order;
  while (static_cast<int64_t>(order.size()) < samples) {
    auto w = windows_of(loader.next_batch(batch));
    order.insert(order.end(), w.begin(), w.end());
  }
  return order;
}

TEST(Loader, EveryWindowOncePerEpoch) {
  TempDir dir;
  DataLoader loader(iota_dataset(dir), kSeqLen, 7);
  ASSERT_EQ(loader.samples_per_epoch(), 25);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> order = draw(loader, 25, 5);
    EXPECT_EQ(loader.state(), (LoaderState{epoch + 1, 0}));
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(25);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
    EXPECT_NE(order, all);  // shuffled (identity has probability 1/25!)
    EXPECT_EQ(order, epoch_permutation(25, 7, epoch));
  }
  EXPECT_NE(epoch_permutation(25, 7, 0), epoch_permutation(25, 7, 1));
}

TEST(Loader, SeedDeterminesOrder) {
  TempDir dir;
  auto ds = iota_dataset(dir);
  DataLoader a(ds, kSeqLen, 1), b(ds, kSeqLen, 1), c(ds, kSeqLen, 2);
  std::vector<int64_t> oa = draw(a, 50, 10), ob = draw(b, 50, 10), oc = draw(c, 50, 10);
  EXPECT_EQ(oa, ob);
  EXPECT_NE(oa, oc);
}

TEST(Loader, NoShuffleIsSequential) {
  TempDir dir;
  DataLoader loader(iota_dataset(dir), kSeqLen, 1, /*shuffle=*/false);
  std::vector<int64_t> order = draw(loader, 30, 6);
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(order[i], i % 25) << i;
}

TEST(Loader, LastWindowEndsAtTheLastToken) {
  TempDir dir;
  // 23 tokens at seq_len 4: windows start at 0, 4, ..., 16 (5 of them); the last ends at token 20.
  DataLoader loader(iota_dataset(dir, 23), kSeqLen, 1, false);
  EXPECT_EQ(loader.samples_per_epoch(), 5);
  EXPECT_EQ(windows_of(loader.next_batch(5)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Exactly seq_len + 1 tokens: one window.
  TempDir dir2;
  EXPECT_EQ(DataLoader(iota_dataset(dir2, kSeqLen + 1), kSeqLen, 1).samples_per_epoch(), 1);
}

TEST(Loader, ResumeGivesIdenticalContinuation) {
  TempDir dir;
  auto ds = iota_dataset(dir);
  DataLoader a(ds, kSeqLen, 11);
  for (int i = 0; i < 3; ++i) a.next_batch(7);  // 21 samples: the next batch straddles epochs
  LoaderState saved = a.state();
  EXPECT_EQ(saved, (LoaderState{0, 21}));
  DataLoader b(ds, kSeqLen, 11);
  b.set_state(saved);
  for (int i = 0; i < 6; ++i) {
    Tensor ta = a.next_batch(7), tb = b.next_batch(7);
    ASSERT_EQ(ta.shape(), tb.shape());
    EXPECT_EQ(std::memcmp(ta.raw_data(), tb.raw_data(), ta.nbytes()), 0) << "batch " << i;
    EXPECT_EQ(a.state(), b.state());
  }
}

TEST(Loader, BatchStraddlesEpochBoundary) {
  TempDir dir;
  DataLoader loader(iota_dataset(dir), kSeqLen, 5);
  loader.set_state({2, 21});
  std::vector<int64_t> got = windows_of(loader.next_batch(7));
  std::vector<int64_t> p2 = epoch_permutation(25, 5, 2), p3 = epoch_permutation(25, 5, 3);
  std::vector<int64_t> want(p2.begin() + 21, p2.end());
  want.insert(want.end(), p3.begin(), p3.begin() + 3);
  EXPECT_EQ(got, want);
  EXPECT_EQ(loader.state(), (LoaderState{3, 3}));
  // A batch longer than an epoch spans several.
  std::vector<int64_t> long_batch = windows_of(loader.next_batch(60));
  EXPECT_EQ(loader.state(), (LoaderState{5, 13}));
  std::vector<int64_t> p4 = epoch_permutation(25, 5, 4);
  EXPECT_TRUE(std::equal(p3.begin() + 3, p3.end(), long_batch.begin()));
  EXPECT_TRUE(std::equal(p4.begin(), p4.end(), long_batch.begin() + 22));
}

// The union of the dp slices, in rank order, is the dp_size = 1 batch; sizes follow torch.chunk.
TEST(Loader, DataParallelSlicesCoverTheGlobalBatch) {
  TempDir dir;
  auto ds = iota_dataset(dir);
  const std::map<std::pair<int64_t, int>, std::vector<int64_t>> want_rows = {
      {{7, 4}, {2, 2, 2, 1}}, {{5, 4}, {2, 2, 1, 0}}, {{5, 3}, {2, 2, 1}}, {{1, 2}, {1, 0}}};
  for (int64_t batch : {1, 5, 7, 12}) {
    for (int dp_size = 1; dp_size <= 4; ++dp_size) {
      SCOPED_TRACE(testing::Message() << "batch " << batch << " dp_size " << dp_size);
      DataLoader global(ds, kSeqLen, 3);
      global.set_state({1, 20});
      std::vector<int64_t> want = windows_of(global.next_batch(batch));
      std::vector<int64_t> joined, rows;
      for (int r = 0; r < dp_size; ++r) {
        DataLoader rank(ds, kSeqLen, 3);
        rank.set_state({1, 20});
        Tensor t = rank.next_batch(batch, r, dp_size);
        EXPECT_EQ(t.shape(), (Shape{t.size(0), kSeqLen + 1}));
        rows.push_back(t.size(0));
        auto w = windows_of(t);
        joined.insert(joined.end(), w.begin(), w.end());
        EXPECT_EQ(rank.state(), global.state());  // every rank advances by the whole batch
      }
      EXPECT_EQ(joined, want);
      auto it = want_rows.find({batch, dp_size});
      if (it != want_rows.end()) {
        EXPECT_EQ(rows, it->second);
      }
    }
  }
}

TEST(Loader, PermutationIsUniform) {
  // All 6 orders of 3 windows, over 6000 seeds: each near 1000 (5 sigma ~ 144).
  std::map<std::vector<int64_t>, int> counts;
  for (uint64_t seed = 0; seed < 6000; ++seed) ++counts[epoch_permutation(3, seed, 0)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [perm, n] : counts) EXPECT_NEAR(n, 1000, 144);
}

// A prepared (indexed, memory-mapped) dataset feeds the loader exactly the batches of the text it
// was prepared from, from the start and after set_state (a resume).
TEST(Loader, IndexedDatasetGivesTheTextBatches) {
  TempDir dir;
  std::ifstream in(std::string(HP_TEST_DIR) + "/../../data/kjv.txt", std::ios::binary);
  std::string text(150000, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  test::write_file(dir.file("kjv.txt"), text);
  PrepareOptions o;
  o.inputs = {dir.file("kjv.txt")};
  o.out = dir.file("kjv");
  o.doc_separator = "\n\n";
  prepare_dataset(o);
  auto from_text = TokenDataset::load({.path = dir.file("kjv.txt"), .doc_separator = "\n\n"});
  auto mapped = TokenDataset::load({.path = dir.file("kjv"), .format = DatasetFormat::indexed});
  ASSERT_EQ(mapped->size(), from_text->size());
  DataLoader a(from_text, 64, 11), b(mapped, 64, 11);
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.shape() == y.shape() &&
           std::equal(x.data<int64_t>(), x.data<int64_t>() + x.numel(), y.data<int64_t>());
  };
  // Past an epoch end (150000 / 64 ≈ 2344 windows per epoch; 150 × 2 batches of 9), with the
  // rows of both data-parallel ranks.
  for (int step = 0; step < 150; ++step)
    for (int r = 0; r < 2; ++r)
      ASSERT_TRUE(same(a.next_batch(9, r, 2), b.next_batch(9, r, 2))) << "step " << step;
  EXPECT_EQ(a.state(), b.state());
  EXPECT_EQ(a.state().epoch, 1);
  DataLoader c(mapped, 64, 11);
  c.set_state(a.state());
  for (int step = 0; step < 5; ++step) EXPECT_TRUE(same(a.next_batch(4), c.next_batch(4)));
  // Both epochs' orders were cached beside the data (and mapped by c instead of recomputed).
  for (int64_t epoch : {0, 1})
    EXPECT_TRUE(std::filesystem::exists(shuffle_index_path(dir.file("kjv"), 11, 64, epoch)))
        << epoch;
}

// The cached order of an indexed dataset: written once, then mapped; the same values as the
// in-memory permutation; a file that does not match (another n, a torn header) is rewritten; a
// directory that cannot be written falls back to memory.
TEST(Loader, ShuffleIndexIsCachedBesideTheData) {
  TempDir dir;
  const std::string prefix = dir.file("data");
  const std::string path = shuffle_index_path(prefix, 5, 32, 2);
  EXPECT_EQ(path, prefix + ".shuffle/seed5-len32-epoch2.i64");
  const std::vector<int64_t> want = epoch_permutation(1000, 5, 2);
  auto values = [](const EpochOrder& o) {
    std::vector<int64_t> v;
    for (int64_t k = 0; k < o.size(); ++k) v.push_back(o[k]);
    return v;
  };
  {
    EpochOrder first(prefix, 32000, 32, 1000, 5, 2);
    EXPECT_EQ(first.path(), path);
    EXPECT_EQ(values(first), want);
  }
  ASSERT_EQ(std::filesystem::file_size(path), 48u + 8 * 1000);
  // Mapped, not recomputed: a value planted in the file is what the next order reads.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(48);
    const int64_t planted = 999999;
    f.write(reinterpret_cast<const char*>(&planted), 8);
  }
  EXPECT_EQ(EpochOrder(prefix, 32000, 32, 1000, 5, 2)[0], 999999);
  // Another window count (a re-prepared dataset) or a broken magic: rewritten.
  EXPECT_EQ(values(EpochOrder(prefix, 32000, 32, 999, 5, 2)), epoch_permutation(999, 5, 2));
  EXPECT_EQ(std::filesystem::file_size(path), 48u + 8 * 999);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.write("XX", 2);
  }
  EXPECT_EQ(values(EpochOrder(prefix, 32000, 32, 999, 5, 2)), epoch_permutation(999, 5, 2));
  // No writable place beside the data (a file where the directory would be): in memory.
  test::write_file(dir.file("ro.shuffle"), "a file, not a directory");
  EpochOrder mem(dir.file("ro"), 32000, 32, 1000, 5, 2);
  EXPECT_EQ(mem.path(), "");
  EXPECT_EQ(values(mem), want);
}

TEST(LoaderErrors, BadArguments) {
  TempDir dir;
  auto ds = iota_dataset(dir, 4);
  EXPECT_THROW_MSG(DataLoader(ds, kSeqLen, 1), ValueError, "[data]", "iota.bin", "4 tokens",
                   "seq_len + 1 = 5");
  EXPECT_THROW_MSG(DataLoader(ds, 0, 1), ValueError, "[data]", "seq_len", "0");
  EXPECT_THROW_MSG(DataLoader(nullptr, 2, 1), ValueError, "[data]", "null");
  DataLoader loader(ds, 1, 1);  // 3 windows
  EXPECT_THROW_MSG(loader.set_state({0, 3}), ValueError, "[data]", "cursor 3", "[0, 3)");
  EXPECT_THROW_MSG(loader.set_state({-1, 0}), ValueError, "[data]", "epoch", "-1");
  EXPECT_THROW_MSG(loader.next_batch(0), ValueError, "[data]", "batch", "0");
  EXPECT_THROW_MSG(loader.next_batch(2, 2, 2), ValueError, "[data]", "dp_rank 2");
  EXPECT_THROW_MSG(loader.next_batch(2, 0, 0), ValueError, "[data]", "dp_size", "0");
  EXPECT_EQ(loader.state(), LoaderState{});  // failed calls consume nothing
}

}  // namespace
}  // namespace hp::data
