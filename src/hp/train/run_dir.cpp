// Run-directory lock and claim, and the stop signals (run_dir.h).
#include "hp/train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <vector>

#include "hp/core/error.h"
#include "hp/ops/ops.h"
#include "hp/train/config.h"

namespace hp::train {

namespace fs = std::filesystem;

bool any_rank(dist::Communicator& comm, bool flag) {
  if (comm.size() == 1) return flag;
  Tensor t = full({1}, flag ? 1.0 : 0.0, DType::i32);
  return comm.all_reduce(t, dist::ReduceOp::max).item() > 0;
}

class RunDir::Lock {
 public:
  explicit Lock(const fs::path& dir) : path_(dir / ".lock") {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      HP_THROW(IoError, "train", path_.string(), ": cannot open: ", std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder(256, '\0');
      const ssize_t n = ::pread(fd_, holder.data(), holder.size(), 0);
      holder.resize(n > 0 ? size_t(n) : 0);
      while (!holder.empty() && std::isspace(static_cast<unsigned char>(holder.back())))
        holder.pop_back();
      ::close(fd_);
      if (err != EWOULDBLOCK)
        HP_THROW(IoError, "train", path_.string(), ": cannot lock: ", std::strerror(err));
      HP_THROW(IoError, "train", "run.dir ", dir.string(), " is in use by another run (",
               holder.empty() ? "holder not yet written" : holder, ", lock ", path_.string(),
               "): wait for it to end, or use another run.dir");
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string me =
        std::string("host ") + host + " pid " + std::to_string(::getpid()) + "\n";
    // Best effort: the flock is the lock; the text only names its holder.
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
    }
  }
  ~Lock() {
    if (::ftruncate(fd_, 0) != 0) {
    }
    ::close(fd_);
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  fs::path path_;
  int fd_ = -1;
};

namespace {

// Rank 0, before anything in run.dir is written: takes its lock and checks the directory (see
// RunDir). Returns the error to raise on this rank, or null.
std::exception_ptr claim(const std::string& run_dir, const std::string& resume, bool overwrite,
                         const std::function<void()>& lock) {
  try {
    if (overwrite && !resume.empty())
      HP_THROW(ValueError, "train", "--overwrite starts a fresh run: not with --resume");
    fs::create_directories(run_dir);
    lock();
    if (!resume.empty()) return nullptr;
    std::vector<fs::path> old_ckpt, old_metrics;
    for (const auto& e : fs::directory_iterator(run_dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step-", 0) == 0 || name.rfind("latest", 0) == 0) old_ckpt.push_back(e.path());
      if (name == "metrics.jsonl" || name == "metrics.svg") old_metrics.push_back(e.path());
    }
    if (old_ckpt.empty()) return nullptr;
    if (!overwrite)
      HP_THROW(ValueError, "train", "run.dir ", run_dir,
               " holds checkpoints of an earlier run: use --resume auto, or a new run.dir, or "
               "--overwrite (deletes them)");
    for (const auto& p : old_ckpt) fs::remove_all(p);
    for (const auto& p : old_metrics) fs::remove(p);
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

RunDir::RunDir(const Config& cfg, const std::string& resume, bool overwrite,
               dist::Communicator& world, std::ostream& log) {
  std::exception_ptr refused;
  if (world.rank() == 0)
    refused =
        claim(cfg.run.dir, resume, overwrite, [&] { lock_ = std::make_unique<Lock>(cfg.run.dir); });
  if (any_rank(world, refused != nullptr)) {
    if (refused) std::rethrow_exception(refused);
    HP_THROW(IoError, "train", "rank 0 refused run.dir ", cfg.run.dir, " (its error says why)");
  }
  if (world.rank() != 0) return;
  const fs::path p = fs::path(cfg.run.dir) / "config.yaml";
  errno = 0;
  std::ofstream o(p);
  if (!(o << to_yaml(cfg) << std::flush))
    log << "warning: cannot write " << p.string() << ": "
        << (errno ? std::strerror(errno) : "write failed") << " (each checkpoint holds a copy)\n";
}

RunDir::~RunDir() = default;

namespace {

// The signal received (0: none). The handler touches nothing but this lock-free atomic, and
// calls only signal() and raise(), both async-signal-safe: no allocation, lock, stream or MPI.
// The training loop reads it at step boundaries (agreed()).
std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");
extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(sig) != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

struct StopSignals::Saved {
  struct sigaction old_int = {}, old_term = {};
};

StopSignals::StopSignals() : saved_(std::make_unique<Saved>()) {
  g_stop.store(0);
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &saved_->old_int);
  sigaction(SIGTERM, &sa, &saved_->old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &saved_->old_int, nullptr);
  sigaction(SIGTERM, &saved_->old_term, nullptr);
}

int StopSignals::agreed(dist::Communicator& comm) const {
  const int sig = g_stop.load();
  if (comm.size() == 1) return sig;
  Tensor t = full({1}, double(sig), DType::i32);
  return static_cast<int>(comm.all_reduce(t, dist::ReduceOp::max).item());
}

}  // namespace hp::train
