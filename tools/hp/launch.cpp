// hp launch [-n N] [--hosts h1:2,h2:2 | --hostfile F] [--dry-run] -- CMD ...: runs CMD as N MPI
// ranks through mpirun.
//
// One machine: root is allowed, ranks may outnumber cores (--oversubscribe), and the transport is
// shared memory (btl self,vader, no single-copy: works in containers). Several hosts — a --hosts
// list (host or host:slots), a --hostfile, or a Slurm allocation of more than one node (inside
// one, mpirun reads SLURM_* itself and -n defaults to SLURM_NTASKS) — add the TCP transport and
// forward the HP_* environment, PATH and LD_LIBRARY_PATH with -x; mpirun's own settings can be
// given as OMPI_MCA_* variables (btl_tcp_if_include, plm_rsh_agent, ...). mpirun's exit code is
// returned.
//
// SIGINT / SIGTERM to the launcher: mpirun itself would give its ranks only ~1 s between its
// SIGTERM and its SIGKILL, so the launcher sends the signal straight to the local ranks (each saves
// and stops as on a direct signal; the ranks agree on stopping, so remote ones follow), waits up to
// HP_LAUNCH_GRACE_S (default 30) for mpirun, then has mpirun end the job (SIGTERM) and 5 s later
// SIGKILLs mpirun and every local rank's process group; a second signal skips the grace. With no
// local rank (--hosts without this machine) the signal goes to mpirun at once. The launcher then
// exits 128 + the signal. mpirun runs with PR_SET_PDEATHSIG SIGTERM: a launcher killed outright
// (SIGKILL) still takes its ranks down. No rank outlives the launcher.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"

extern char** environ;

namespace hp::cli {
namespace {

// The handler only sets these; run_mpirun's loop does the forwarding (reads /proc, kill(2), stdio).
volatile sig_atomic_t g_signal = 0;  // the latest SIGINT / SIGTERM the launcher received
volatile sig_atomic_t g_count = 0;   // how many
extern "C" void on_launch_signal(int sig) {
  g_signal = sig;
  g_count = g_count + 1;
}

// A process by pid and start time (field 22 of /proc/PID/stat), so a recycled pid is never hit.
struct Proc {
  pid_t pid;
  unsigned long long start;
};

// PID's parent and start time from /proc/PID/stat; false when it is gone.
bool read_stat(pid_t pid, pid_t* ppid, unsigned long long* start) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return false;
  std::istringstream rest(s.substr(close + 2));
  std::string field;
  char state = 0;
  long long pp = 0;
  rest >> state >> pp;
  for (int i = 5; i <= 21 && rest; ++i) rest >> field;  // fields 5..21
  rest >> *start;
  *ppid = static_cast<pid_t>(pp);
  return static_cast<bool>(rest) && state != 'Z';
}

// mpirun's children that are MPI ranks (not the ssh / orted helpers of a multi-host launch).
std::vector<Proc> local_ranks(pid_t mpirun) {
  std::vector<Proc> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    pid_t ppid = 0;
    unsigned long long start = 0;
    if (!read_stat(pid, &ppid, &start) || ppid != mpirun) continue;
    std::ifstream env(e.path() / "environ", std::ios::binary);
    std::string vars((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (vars.find("OMPI_COMM_WORLD_RANK=") != std::string::npos) out.push_back({pid, start});
  }
  return out;
}

// Signals p (and its process group: mpirun makes each rank a group leader) if it is still the
// process seen before.
void signal_rank(const Proc& p, int sig, bool group) {
  pid_t ppid = 0;
  unsigned long long start = 0;
  if (!read_stat(p.pid, &ppid, &start) || start != p.start) return;
  if (group) kill(-p.pid, sig);
  kill(p.pid, sig);
}

// Runs argv (mpirun ...) and waits for it, forwarding SIGINT / SIGTERM as the header says.
int run_mpirun(std::vector<std::string> argv) {
  struct sigaction sa = {}, old_int = {}, old_term = {};
  sa.sa_handler = on_launch_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  if (old_int.sa_handler == SIG_IGN) sigaction(SIGINT, &old_int, nullptr);  // nohup, `cmd &`
  const pid_t launcher = getpid();
  // Everything the child needs is built before fork: between fork and exec it calls only
  // async-signal-safe functions (no allocation, no stdio), whatever other threads held then.
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  static constexpr char kNoMpirun[] = "hp launch: cannot run mpirun (install openmpi-bin)\n";
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) throw UsageError{"fork failed"};
  if (pid == 0) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(128 + SIGTERM);  // the launcher died before prctl
    execvp("mpirun", cargv.data());
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kNoMpirun, sizeof(kNoMpirun) - 1);
    _exit(127);
  }
  double grace = 30;
  if (const char* g = std::getenv("HP_LAUNCH_GRACE_S"); g && std::atof(g) > 0) grace = std::atof(g);
  using clock = std::chrono::steady_clock;
  enum { running, ranks_signalled, mpirun_signalled, killed } stage = running;
  clock::time_point deadline;
  std::vector<Proc> ranks;
  int status = 0, seen = 0, forwarded = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    const auto now = clock::now();
    const int count = g_count;
    if (count > seen) {
      seen = count;
      forwarded = g_signal;
      if (stage == running) ranks = local_ranks(pid);
      if (stage == running && !ranks.empty()) {
        for (const Proc& p : ranks) signal_rank(p, forwarded, /*group=*/false);
        std::fprintf(stderr,
                     "hp launch: signal %d: asked %zu local rank(s) to save and stop; waiting up "
                     "to %g s (HP_LAUNCH_GRACE_S)\n",
                     forwarded, ranks.size(), grace);
        stage = ranks_signalled;
        deadline =
            now + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(grace));
      } else if (stage != killed) {
        if (stage == running) stage = ranks_signalled;
        deadline = now;  // no local rank, or a second signal: end the job now
      }
    }
    if (stage != running && stage != killed && now >= deadline) {
      if (stage == mpirun_signalled) {
        std::fprintf(stderr, "hp launch: mpirun still running: SIGKILL\n");
        kill(pid, SIGKILL);
        for (const Proc& p : ranks) signal_rank(p, SIGKILL, /*group=*/true);
        stage = killed;
      } else {
        kill(pid, forwarded == SIGINT ? SIGINT : SIGTERM);  // mpirun ends every rank, any host
        stage = mpirun_signalled;
        deadline = now + std::chrono::seconds(5);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // mpirun is gone; a local rank it left behind (killed mid-teardown) must not outlive us.
  for (const Proc& p : ranks) signal_rank(p, SIGKILL, /*group=*/true);
  if (forwarded) return 128 + forwarded;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Whether execvp would start `file`: a path with a slash names the file itself, a bare name is
// looked up in PATH.
bool runnable(const std::string& file) {
  auto executable = [](const std::filesystem::path& p) {
    std::error_code ec;
    return std::filesystem::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
  };
  if (file.find('/') != std::string::npos) return executable(file);
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t begin = 0; begin <= dirs.size();) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(begin, end - begin);
    if (executable(std::filesystem::path(dir.empty() ? "." : dir) / file)) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace

int run_launch(const Args& in) {
  Args args = in;
  Args cmd;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == "--") {
      cmd.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      args.resize(i);
      break;
    }
  reject_unknown_flags(args, {"-n", "--hosts", "--hostfile"}, {"--dry-run"});
  std::string n_str, hosts, hostfile;
  const char* slurm_tasks = std::getenv("SLURM_NTASKS");
  const char* slurm_nodes = std::getenv("SLURM_NNODES");
  const bool slurm = std::getenv("SLURM_JOB_ID") != nullptr;
  if (!take_value(args, "-n", &n_str)) {
    if (!slurm || !slurm_tasks)
      throw UsageError{"-n N (number of ranks) is required (outside a Slurm allocation)"};
    n_str = slurm_tasks;
  }
  long long n = parse_int("-n", n_str, 1, 1 << 20);
  take_value(args, "--hosts", &hosts);
  take_value(args, "--hostfile", &hostfile);
  bool dry = take_flag(args, "--dry-run");
  reject_leftovers(args);
  if (cmd.empty())
    throw UsageError{"no command: hp launch -n N [--hosts h1:2,h2:2 | --hostfile F] -- CMD ..."};
  if (!hosts.empty() && !hostfile.empty()) throw UsageError{"give --hosts or --hostfile, not both"};
  if (!hostfile.empty() && access(hostfile.c_str(), R_OK) != 0)
    throw UsageError{"--hostfile " + hostfile + ": cannot read it"};
  const bool multi_host =
      !hosts.empty() || !hostfile.empty() || (slurm && slurm_nodes && std::atoi(slurm_nodes) > 1);

  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(n)};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(),
              {"--oversubscribe", "--mca", "btl", multi_host ? "self,vader,tcp" : "self,vader",
               "--mca", "btl_vader_single_copy_mechanism", "none"});
  if (!hosts.empty()) argv.insert(argv.end(), {"--host", hosts});
  if (!hostfile.empty()) argv.insert(argv.end(), {"--hostfile", hostfile});
  if (multi_host) {
    // Forward the framework's settings to remote ranks.
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      std::string key = kv.substr(0, kv.find('='));
      if (key.rfind("HP_", 0) == 0) argv.insert(argv.end(), {"-x", key});
    }
    argv.insert(argv.end(), {"-x", "PATH", "-x", "LD_LIBRARY_PATH"});
  }
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  std::string line;
  for (const auto& a : argv) {
    if (!line.empty()) line += ' ';
    line += shell_quote(a);
  }
  if (dry) {
    std::printf("%s\n", line.c_str());
    return 0;
  }
  // On one machine a command that cannot start is the shell's 127, not mpirun's own code (132,
  // which reads as a signal); on several hosts it need not exist here.
  if (!multi_host && !runnable(cmd.front())) {
    std::fprintf(stderr, "hp launch: cannot run '%s': no such executable file%s\n",
                 cmd.front().c_str(), cmd.front().find('/') == std::string::npos ? " in PATH" : "");
    return 127;
  }
  return run_mpirun(std::move(argv));
}

}  // namespace hp::cli
