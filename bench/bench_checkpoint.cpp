// DCP save and load of ~512 MiB of f32 on one rank, beside the disk's own sequential bandwidth
// measured in the same run on the same bytes: write(2) + fsync of one file, and read(2) of it with
// its pages evicted from the page cache first (posix_fadvise DONTNEED), as load is timed.
//
//   build/bench_checkpoint            (files go to $HP_BENCH_DIR, default the system temp dir)
//
// Counters: GB/s, and vs_disk = GB/s over the disk's write (save) or read (load) GB/s.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "hp/checkpoint/dcp.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using hp::checkpoint::Chunk;

constexpr int64_t kTensors = 4;
constexpr int64_t kRows = 8192, kCols = 4096;  // 4 × [8192, 4096] f32 = 512 MiB
constexpr double kBytes = double(kTensors * kRows * kCols * 4);

fs::path bench_dir() {
  const char* d = std::getenv("HP_BENCH_DIR");
  static const fs::path p = fs::path(d ? d : fs::temp_directory_path().string()) /
                            ("hp_bench_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::perror(what);
    std::exit(1);
  }
}

// Drops `path`'s clean pages from the page cache, so the next read comes from the disk.
void evict(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, "open");
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Disk {
  double write_gbps = 0, read_gbps = 0;
};

// The ceiling: kBytes written with write(2) in 64 MiB calls + fsync, then read back cold.
const Disk& disk() {
  static const Disk d = [] {
    Disk r;
    const size_t n = static_cast<size_t>(kBytes), block = size_t(64) << 20;
    std::vector<char> buf(n, 1);
    const fs::path f = bench_dir() / "disk.bin";
    for (int rep = 0; rep < 2; ++rep) {  // best of 2
      auto t0 = Clock::now();
      const int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      check(fd >= 0, "open");
      for (size_t done = 0; done < n; done += block)
        check(::write(fd, buf.data() + done, std::min(block, n - done)) > 0, "write");
      check(::fsync(fd) == 0, "fsync");
      ::close(fd);
      r.write_gbps = std::max(
          r.write_gbps, kBytes / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
      evict(f);
      t0 = Clock::now();
      const int rfd = ::open(f.c_str(), O_RDONLY);
      check(rfd >= 0, "open");
      for (size_t done = 0; done < n;) {
        const ssize_t k = ::read(rfd, buf.data() + done, std::min(block, n - done));
        check(k > 0, "read");
        done += static_cast<size_t>(k);
      }
      ::close(rfd);
      r.read_gbps = std::max(
          r.read_gbps, kBytes / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
    }
    fs::remove(f);
    std::printf("disk: write+fsync %.3f GB/s, cold read %.3f GB/s (%.0f MiB, %s)\n", r.write_gbps,
                r.read_gbps, kBytes / (1 << 20), bench_dir().c_str());
    return r;
  }();
  return d;
}

std::vector<Chunk> model_chunks() {
  std::vector<Chunk> chunks;
  for (int64_t i = 0; i < kTensors; ++i) {
    hp::Tensor t = hp::full({kRows, kCols}, static_cast<double>(i) + 0.5);
    chunks.push_back({"layers." + std::to_string(i) + ".weight", t, {kRows, kCols}, {0, 0}});
  }
  return chunks;
}

void report(benchmark::State& state, double ceiling) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(kBytes / 1e9 * iters, benchmark::Counter::kIsRate);
  state.counters["vs_disk"] =
      benchmark::Counter(kBytes / 1e9 / ceiling * iters, benchmark::Counter::kIsRate);
}

void BM_Save(benchmark::State& state) {
  const double ceiling = disk().write_gbps;
  const auto chunks = model_chunks();
  hp::checkpoint::SaveOptions opt;
  opt.keep = 1;  // bounded disk use
  int64_t step = 0;
  for (auto _ : state)
    hp::checkpoint::save((bench_dir() / "save").string(), ++step, chunks, "{}", nullptr, opt);
  report(state, ceiling);
}

// state.range(0): 0 = the saved layout (read straight into place), 1 = every tensor as two column
// halves (resharded: read in slabs and copied out).
void BM_Load(benchmark::State& state) {
  const double ceiling = disk().read_gbps;
  const auto src = model_chunks();
  const std::string dir =
      hp::checkpoint::save((bench_dir() / "load").string(), 1, src, "{}", nullptr);
  std::vector<Chunk> dst;
  for (const Chunk& c : src) {
    if (state.range(0) == 0) {
      dst.push_back({c.fqn, hp::zeros(c.global_shape), c.global_shape, c.offsets});
      continue;
    }
    for (int64_t half = 0; half < 2; ++half)
      dst.push_back({c.fqn, hp::zeros({kRows, kCols / 2}), c.global_shape, {0, half * kCols / 2}});
  }
  for (auto _ : state) {
    state.PauseTiming();
    for (const auto& e : fs::directory_iterator(dir)) evict(e.path());
    state.ResumeTiming();
    hp::checkpoint::load(dir, dst);
  }
  const hp::Tensor& last = dst.back().local;  // filled with kTensors - 0.5
  if (last.at({kRows - 1, last.size(1) - 1}) != static_cast<double>(kTensors) - 0.5) {
    state.SkipWithError("loaded values differ");
    return;
  }
  report(state, ceiling);
}

BENCHMARK(BM_Save)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_Load)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  fs::remove_all(bench_dir(), ec);
  return 0;
}
