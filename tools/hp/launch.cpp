// hp launch -n N [--hosts h1,h2] [--dry-run] -- CMD ...: runs CMD as N MPI ranks through mpirun.
//
// One machine: root is allowed, ranks may outnumber cores (--oversubscribe), and the transport is
// shared memory (btl self,vader, no single-copy: works in containers). Several hosts: --host list
// and the HP_* / OMPI_* environment forwarded with -x. mpirun's exit code is returned.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.h"

extern char** environ;

namespace hp::cli {

int run_launch(const Args& in) {
  Args args = in;
  Args cmd;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == "--") {
      cmd.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      args.resize(i);
      break;
    }
  std::string n_str, hosts;
  if (!take_value(args, "-n", &n_str)) throw UsageError{"-n N (number of ranks) is required"};
  long long n = parse_int("-n", n_str, 1, 1 << 20);
  take_value(args, "--hosts", &hosts);
  bool dry = take_flag(args, "--dry-run");
  reject_leftovers(args);
  if (cmd.empty()) throw UsageError{"no command: hp launch -n N [--hosts h1,h2] -- CMD ..."};

  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(n)};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(),
              {"--oversubscribe", "--mca", "btl", hosts.empty() ? "self,vader" : "self,vader,tcp",
               "--mca", "btl_vader_single_copy_mechanism", "none"});
  if (!hosts.empty()) {
    argv.insert(argv.end(), {"--host", hosts});
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
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) throw UsageError{"fork failed"};
  if (pid == 0) {
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execvp("mpirun", cargv.data());
    std::fprintf(stderr, "hp launch: cannot run mpirun (install openmpi-bin)\n");
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace hp::cli
