// Optimizer state offload (optim/state_offload.h, offload/async_file.h): host and disk placement
// step bitwise like the device placement, checkpoints round-trip through the disk tier, and a disk
// tier that cannot be written fails naming the file and the bytes. Also the activations' extents
// in the disk tier's file (offload/activation_disk.h).
#include "hp/optim/state_offload.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "hp/core/random.h"
#include "hp/offload/activation_disk.h"
#include "hp/offload/async_file.h"
#include "hp/ops/ops.h"

namespace hp::optim {
namespace {

namespace fs = std::filesystem;
using hp::testing::error_of;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() /
          ("hp_state_offload_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A root, two "layers" and a head: AdamW on vectors and the embedding, Muon on the matrices.
std::vector<NamedTensor> make_params() {
  manual_seed(3);
  return {{"model.embed_tokens.weight", randn({40, 8})},
          {"model.layers.0.w", randn({8, 16})},
          {"model.layers.0.b", randn({16})},
          {"model.layers.1.w", randn({16, 8})},
          {"model.layers.1.b", randn({8})},
          {"lm_head.weight", randn({8, 8})}};
}

OptimizerOptions options() {
  OptimizerOptions o;
  o.default_algorithm = Algorithm::auto_select;
  o.groups.push_back({"embeddings", {"*embed*", "lm_head*"}, Algorithm::adamw, 1.0, std::nullopt});
  return o;
}

StateOffloadOptions placement(StatePlacement p, const std::string& name) {
  StateOffloadOptions o;
  o.placement = p;
  o.group_prefixes = {"model.layers.0", "model.layers.1"};
  o.file = temp_path(name) + "/optimizer.bin";
  o.io_threads = 2;
  return o;
}

// Seeded gradients for step `s`, the same for every optimizer.
void set_grads(std::vector<NamedTensor>& p, int s) {
  manual_seed(100 + uint64_t(s));
  for (auto& [name, t] : p) t.set_grad(randn(t.shape()));
}

struct OptRun {
  std::vector<NamedTensor> params = make_params();
  std::unique_ptr<Optimizer> opt;
  std::string dir;
  explicit OptRun(StatePlacement p, const std::string& name) : dir(temp_path(name)) {
    opt = std::make_unique<Optimizer>(params, options());
    if (p != StatePlacement::device) opt->set_state_offload(placement(p, name));
  }
  ~OptRun() {
    opt.reset();
    fs::remove_all(dir);
  }
  void steps(int from, int to) {
    for (int s = from; s < to; ++s) {
      set_grads(params, s);
      opt->step(0.01);
    }
  }
};

void expect_same(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
  }
}

TEST(StateOffload, HostAndDiskStepBitwiseLikeDevice) {
  OptRun dev(StatePlacement::device, "dev"), host(StatePlacement::host, "host"),
      disk(StatePlacement::disk, "disk");
  for (OptRun* r : {&dev, &host, &disk}) r->steps(0, 5);
  expect_same(dev.params, host.params);
  expect_same(dev.params, disk.params);
  expect_same(dev.opt->state_dict(), host.opt->state_dict());
  expect_same(dev.opt->state_dict(), disk.opt->state_dict());
  // host: the state lives in the host tier; disk: nowhere in memory between steps.
  for (const auto& e : host.opt->entries())
    EXPECT_EQ((e.algorithm == Algorithm::muon ? e.momentum_buffer : e.exp_avg).tier(),
              MemTier::host)
        << e.fqn;
  for (const auto& e : disk.opt->entries())
    EXPECT_FALSE(e.exp_avg.defined() || e.momentum_buffer.defined()) << e.fqn;
  // Five steps wrote the state five times and read it back four times (the first step creates
  // it), plus once for the state_dict() above; each step moved every gradient down and every
  // master up.
  int64_t state_bytes = 0, param_bytes = 0;
  for (const auto& e : disk.opt->entries()) {
    state_bytes += e.param.numel() * 4 * (e.algorithm == Algorithm::muon ? 1 : 2);
    param_bytes += e.param.numel() * 4;
  }
  const TransferStats t = disk.opt->transfer_stats();
  EXPECT_EQ(t.host_to_disk, 5 * state_bytes);
  EXPECT_EQ(t.disk_to_host, 5 * state_bytes);
  EXPECT_EQ(t.device_to_host, 5 * param_bytes);
  EXPECT_EQ(t.host_to_device, 5 * param_bytes);
  EXPECT_EQ(host.opt->transfer_stats().host_to_disk, 0);
}

TEST(StateOffload, DiskStateDictResumesIdentically) {
  OptRun a(StatePlacement::device, "a");
  a.steps(0, 3);
  OptRun b(StatePlacement::disk, "b");
  for (size_t i = 0; i < a.params.size(); ++i) b.params[i].second.copy_from(a.params[i].second);
  b.opt->load_state_dict(a.opt->state_dict());
  for (const auto& e : b.opt->entries()) EXPECT_FALSE(e.exp_avg.defined()) << e.fqn;
  a.steps(3, 6);
  b.steps(3, 6);
  expect_same(a.params, b.params);
  expect_same(a.opt->state_dict(), b.opt->state_dict());
}

TEST(StateOffload, UnusableDiskTierNamesThePath) {
  // A directory below a regular file cannot exist (permissions would not stop root).
  const std::string blocker = temp_path("blocker");
  std::ofstream(blocker) << "x";
  StateOffloadOptions o = placement(StatePlacement::disk, "unused");
  o.file = blocker + "/offload/optimizer.bin";
  std::vector<NamedTensor> params = make_params();
  Optimizer opt(params, options());
  const std::string e = error_of([&] { opt.set_state_offload(o); });
  EXPECT_NE(e.find("[offload] disk tier directory " + blocker + "/offload: cannot create"),
            std::string::npos)
      << e;
  fs::remove(blocker);
}

TEST(StateOffload, FullDiskFailsTheStepNamingFileAndBytes) {
  OptRun r(StatePlacement::disk, "full");
  // A file size limit below the state: the first write past it fails (EFBIG, SIGXFSZ ignored).
  struct rlimit old = {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string e = error_of([&] { r.steps(0, 1); });
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_NE(e.find("[offload] " + temp_path("full") + "/optimizer.bin: cannot write "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(" bytes ("), std::string::npos) << e;
  EXPECT_NE(e.find("File too large"), std::string::npos) << e;
}

TEST(AsyncFile, WritesAndReadsBackLargeBuffersInChunks) {
  const std::string path = temp_path("async") + "/f.bin";
  {
    offload::AsyncFile f(path, 3);
    Tensor a = randn({5 << 20});  // 20 MiB: three chunks
    Tensor b = empty({5 << 20}, DType::f32, MemTier::host);
    f.wait(f.write(4096, a.raw_data(), int64_t(a.nbytes()), a.storage()));
    f.wait(f.read(4096, b.raw_data(), int64_t(b.nbytes()), b.storage()));
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
    EXPECT_EQ(f.stats().bytes_written, int64_t(a.nbytes()));
    EXPECT_EQ(f.stats().bytes_read, int64_t(a.nbytes()));
    // Reading past what was written is an error naming the file.
    Tensor c = empty({1024}, DType::f32, MemTier::host);
    const std::string e = error_of(
        [&] { f.wait(f.read(int64_t(a.nbytes()) + 4096, c.raw_data(), 4096, c.storage())); });
    EXPECT_NE(e.find("[offload] " + path + ": cannot read 4096 bytes"), std::string::npos) << e;
    EXPECT_TRUE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));  // scratch: deleted with the file object
  fs::remove_all(fs::path(path).parent_path());
}

// A crashed run's scratch file goes at the next run's start: the file of a process that has
// exited is removed; a live process's, another rank's and one not named by a pid stay.
TEST(AsyncFile, FilesOfDeadProcessesAreRemoved) {
  const fs::path dir = fs::temp_directory_path() / ("hp_dead_scratch_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: no process has this pid now
  const std::string host = "node-7";             // dashes in a host name
  const auto name = [&](const std::string& what, int rank, const std::string& h, long pid) {
    return offload::scratch_file_name(what, rank, h, pid);
  };
  const std::string dead = name("optimizer", 0, host, child);
  // A rank the next run lacks (a resume at fewer ranks): its dead file goes too.
  const std::string other_rank = name("optimizer", 3, host, child);
  const std::string live = name("optimizer", 1, host, getpid());
  const std::string other_host = name("optimizer", 0, "node-8", child);  // its pids are not ours
  const std::string other_what = name("activations", 0, host, child);
  // A killed process not yet reaped by its parent (a zombie) has ended too.
  const pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  ASSERT_GT(zombie, 0);
  usleep(100 * 1000);
  const std::string unreaped = name("optimizer", 2, host, zombie);
  const std::vector<std::string> odd = {"optimizer-rank0-node-7-pidX.bin",
                                        "optimizer-rankX-node-7-pid1.bin",
                                        "optimizer-rank0-pid" + std::to_string(child) + ".bin"};
  for (const std::string& f : {dead, other_rank, live, other_host, other_what, unreaped})
    std::ofstream(dir / f) << "x";
  for (const std::string& f : odd) std::ofstream(dir / f) << "x";
  EXPECT_EQ(dead, "optimizer-rank0-node-7-pid" + std::to_string(child) + ".bin");
  EXPECT_EQ(offload::remove_files_of_dead_processes(dir.string(), "optimizer", host), 3);
  ASSERT_EQ(waitpid(zombie, nullptr, 0), zombie);
  for (const std::string& f : {dead, other_rank, unreaped}) EXPECT_FALSE(fs::exists(dir / f)) << f;
  for (const std::string& f : {live, other_host, other_what}) EXPECT_TRUE(fs::exists(dir / f)) << f;
  for (const std::string& f : odd) EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_EQ(offload::remove_files_of_dead_processes((dir / "missing").string(), "x", host), 0);
  fs::remove_all(dir);
}

TEST(ActivationDisk, ExtentsAreReusedAndAFailedWriteFailsEveryRead) {
  const std::string path = temp_path("actdisk") + "/activations.bin";
  {
    offload::ActivationDisk d(path, 2);
    Tensor a = randn({3000});  // 12000 bytes: an extent of 12 KiB
    Tensor b = randn({100});
    offload::ActivationDisk::Extent ea = d.write(a), eb = d.write(b);
    EXPECT_EQ(ea.offset, 0);
    EXPECT_EQ(eb.offset, 12288);
    EXPECT_EQ(d.file_bytes(), 12288 + 4096);
    Tensor back = empty({3000}, DType::f32, MemTier::host);
    d.wait(d.read(ea, back));
    EXPECT_EQ(std::memcmp(a.raw_data(), back.raw_data(), a.nbytes()), 0);
    // a's hole is reused first-fit; freeing everything shrinks the file's extent to nothing.
    d.release(ea);
    offload::ActivationDisk::Extent ec = d.write(b);
    EXPECT_EQ(ec.offset, 0);
    d.release(eb);
    d.release(ec);
    EXPECT_EQ(d.file_bytes(), 0);
    // A write past a file size limit: the read of that extent (and any later one) names the file
    // and the bytes.
    struct rlimit old = {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit small = old;
    small.rlim_cur = 8192;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    offload::ActivationDisk::Extent big = d.write(a);
    const std::string e = error_of([&] { d.wait(d.read(big, back)); });
    setrlimit(RLIMIT_FSIZE, &old);
    EXPECT_NE(e.find("[offload] " + path + ": cannot write 12000 bytes"), std::string::npos) << e;
    EXPECT_EQ(error_of([&] { d.wait(d.read(big, back)); }), e);
    d.release(big);
  }
  EXPECT_FALSE(fs::exists(path));
  fs::remove_all(fs::path(path).parent_path());
}

}  // namespace
}  // namespace hp::optim
