// DCP across ranks: torch.chunk-rule shards (some ranks empty) plus replicated tensors, loaded back
// with the same sharding, as full tensors, with Shard(1), and from a save by fewer ranks; a rank
// failing mid-save leaves the previous checkpoint current and loadable on every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint/ckpt_test_util.h"
#include "hp/shard/placement.h"

namespace hp::checkpoint {
namespace {

namespace fs = std::filesystem;
using test::empty_chunk;
using test::expect_same_values;
using test::reference;

// A run dir shared by every rank (named by rank 0's pid), removed at the end.
class SharedDir {
 public:
  explicit SharedDir(dist::Communicator& c, const std::string& tag) : comm_(c) {
    const Tensor pid = c.all_gather(from_data<int64_t>({::getpid()}, {1}));
    path_ = (fs::temp_directory_path() /
             ("hp_dcp_mpitest_" + tag + "_" + std::to_string(pid.data<int64_t>()[0])))
                .string();
  }
  ~SharedDir() {
    comm_.barrier();
    std::error_code ec;
    if (comm_.rank() == 0) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  dist::Communicator& comm_;
  std::string path_;
};

// The global tensors every test saves: two dim-0 sharded (7 and 5 rows: at 4 ranks 2,2,2,1 and
// 2,2,1,0), optimizer state sharded like its parameter, and two replicated ones.
struct Globals {
  Tensor a = reference({7, 4}, DType::f32, 1);
  Tensor b = reference({5, 3}, DType::bf16, 2);
  Tensor a_avg = reference({7, 4}, DType::f32, 3);
  Tensor rep = reference({3, 2}, DType::f32, 4);
  Tensor step = from_vector({17}, {}, DType::i64);
  std::vector<std::pair<std::string, Tensor>> all() const {
    return {{"a", a}, {"b", b}, {"state.a.exp_avg", a_avg}, {"rep", rep}, {"state.step", step}};
  }
};

// Rank `rank` of `world`'s Shard(dim) box of `shape` (torch.chunk rule): (offsets, sizes).
std::pair<std::vector<int64_t>, Shape> shard_box(const Shape& shape, int64_t dim, int world,
                                                 int rank) {
  std::vector<int64_t> off(shape.size(), 0);
  Shape len = shape;
  if (shape.empty()) return {off, len};
  const shard::ChunkRange r = shard::chunk_range(shape[dim], world, rank);
  off[dim] = r.start;
  len[dim] = r.length;
  return {off, len};
}

// This rank's chunks to save: Shard(0) for the 2-d tensors except `rep`, replicated for the rest.
std::vector<Chunk> save_chunks(const Globals& g, int world, int rank) {
  std::vector<Chunk> out;
  for (const auto& [fqn, t] : g.all()) {
    if (fqn == "rep" || t.dim() == 0) {
      out.push_back({fqn, t, t.shape(), std::vector<int64_t>(t.dim(), 0), true});
      continue;
    }
    auto [off, len] = shard_box(t.shape(), 0, world, rank);
    out.push_back(test::chunk_of(fqn, t, off, len));
  }
  return out;
}

// Loads every global tensor with Shard(dim) boxes over (world, rank) (0-d ones whole) and checks
// the values exactly; dim = -1 loads full tensors.
void load_and_check(const std::string& step_dir, const Globals& g, int64_t dim, int world, int rank,
                    const std::string& what) {
  const auto all = g.all();
  std::vector<Chunk> dst;
  for (const auto& [fqn, t] : all) {
    auto [off, len] = dim < 0 || t.dim() == 0 ? shard_box(t.shape(), 0, 1, 0)
                                              : shard_box(t.shape(), dim, world, rank);
    dst.push_back(empty_chunk(fqn, t.shape(), t.dtype(), off, len));
  }
  load(step_dir, dst);
  for (size_t i = 0; i < dst.size(); ++i)
    expect_same_values(dst[i].local, test::box(all[i].second, dst[i].offsets, dst[i].local.shape()),
                       what + ": " + dst[i].fqn + " at rank " + std::to_string(rank));
}

TEST(DcpMpi, ShardedSaveLoadsUnderEveryLayout) {
  auto c = dist::world();
  const int w = c->size(), r = c->rank();
  SharedDir dir(*c, "layouts");
  Globals g;
  const std::string step_dir =
      save(dir.path(), 10, save_chunks(g, w, r), R"({"step": 10})", c.get());
  EXPECT_EQ(find_latest(dir.path()), step_dir);

  const Metadata meta = read_metadata(step_dir);
  EXPECT_EQ(meta.world_size, w);
  for (const TensorMeta& t : meta.tensors) {
    if (t.fqn == "a") {
      EXPECT_EQ(t.pieces.size(), static_cast<size_t>(std::min(w, 7)));
    }
    if (t.fqn == "b") {
      // Empty shards (5 rows over 4 ranks: 2, 2, 1, 0) are not pieces.
      size_t nonempty = 0;
      for (int k = 0; k < w; ++k) nonempty += shard::chunk_range(5, w, k).length > 0;
      EXPECT_EQ(t.pieces.size(), nonempty);
    }
    if (t.fqn == "rep" || t.fqn == "state.step") {
      ASSERT_EQ(t.pieces.size(), 1u) << t.fqn;
      EXPECT_EQ(t.pieces[0].file, "rank-00000.safetensors");  // replicated: written once
    }
  }
  load_and_check(step_dir, g, 0, w, r, "same sharding");
  load_and_check(step_dir, g, -1, w, r, "full tensors");
  load_and_check(step_dir, g, 1, w, r, "Shard(1)");
}

TEST(DcpMpi, SavedByFewerRanksLoadsOnAll) {
  auto c = dist::world();
  const int w = c->size(), r = c->rank();
  const int savers = (w + 1) / 2;  // 1 → 1, 2 → 1, 3 → 2, 4 → 2
  SharedDir dir(*c, "fewer");
  Globals g;
  auto sub = c->split(r < savers ? 0 : -1, r);
  if (sub) save(dir.path(), 5, save_chunks(g, savers, r), "{}", sub.get());
  c->barrier();
  const auto latest = find_latest(dir.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(read_metadata(*latest).world_size, savers);
  load_and_check(*latest, g, 0, w, r, "saved on " + std::to_string(savers) + " ranks");
  load_and_check(*latest, g, 1, w, r, "saved on fewer ranks, Shard(1)");
}

TEST(DcpMpi, RankFailingMidSaveKeepsThePreviousCheckpoint) {
  auto c = dist::world();
  const int w = c->size(), r = c->rank();
  SharedDir dir(*c, "crash");
  Globals g;
  const std::string first = save(dir.path(), 1, save_chunks(g, w, r), R"({"v": 1})", c.get());

  Globals changed;
  changed.a = reference({7, 4}, DType::f32, 8);
  // The last rank fails after writing its data; rank 0 fails after metadata, before the rename.
  const std::pair<int, const char*> faults[] = {{w - 1, "data_written"}, {0, "metadata_written"}};
  for (const auto& [bad_rank, point] : faults) {
    detail::set_save_hook([&, bad_rank = bad_rank, point = point](const std::string& p, int rank) {
      if (rank == bad_rank && p == point) throw IoError("[test] rank dies at " + p);
    });
    try {
      save(dir.path(), 2, save_chunks(changed, w, r), R"({"v": 2})", c.get());
      ADD_FAILURE() << "save survived a failure at " << point;
    } catch (const IoError& e) {
      const std::string msg = e.what();
      if (r == bad_rank) {
        EXPECT_NE(msg.find("rank dies"), std::string::npos) << msg;
      } else {
        EXPECT_NE(msg.find("save failed on rank " + std::to_string(bad_rank)), std::string::npos)
            << msg;
      }
    }
    detail::set_save_hook(nullptr);
    c->barrier();
    EXPECT_EQ(find_latest(dir.path()), first) << point;
    load_and_check(first, g, 0, w, r, std::string("after a failure at ") + point);
    EXPECT_EQ(read_metadata(first).trainer_state_json, R"({"v":1})");
  }
  // A clean retry commits step 2.
  const std::string second = save(dir.path(), 2, save_chunks(changed, w, r), "{}", c.get());
  EXPECT_EQ(find_latest(dir.path()), second);
  load_and_check(second, changed, 1, w, r, "retried save");
}

}  // namespace
}  // namespace hp::checkpoint
