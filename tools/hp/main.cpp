// hp — the HyperParallel command-line tool.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>

#include "commands.h"
#include "hp/core/byte_size.h"
#include "hp/core/error.h"
#include "hp/dist/communicator.h"
#include "hp/kernels/cpu/isa.h"

namespace hp::cli {

bool take_flag(Args& args, const std::string& name) {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == name) {
      args.erase(args.begin() + static_cast<long>(i));
      return true;
    }
  return false;
}

bool take_value(Args& args, const std::string& name, std::string* out) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name) {
      if (i + 1 >= args.size()) throw UsageError{name + " needs a value"};
      *out = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      return true;
    }
    if (args[i].rfind(name + "=", 0) == 0) {
      *out = args[i].substr(name.size() + 1);
      args.erase(args.begin() + static_cast<long>(i));
      return true;
    }
  }
  return false;
}

long long parse_int(const std::string& flag, const std::string& value, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw UsageError{flag + " expects an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got '" + value + "'"};
  return v;
}

double parse_double(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0')
    throw UsageError{flag + " expects a number, got '" + value + "'"};
  return v;
}

std::string human_bytes(double b) {
  return format_bytes(b);
}

namespace {

// "-x" / "--xyz" (not "-", "--" or a negative number such as "-5" or "-.5").
bool looks_like_flag(const std::string& a) {
  return a.size() >= 2 && a[0] == '-' && a != "--" &&
         !std::isdigit(static_cast<unsigned char>(a[1])) && a[1] != '.';
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

[[noreturn]] void unknown_flag(const std::string& flag, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(2, flag.size() / 3) + 1;
  for (const std::string& k : known)
    if (const size_t d = edit_distance(flag, k); d < best_d) best = k, best_d = d;
  throw UsageError{"unknown flag '" + flag + "'" +
                   (best.empty() ? std::string() : " (did you mean " + best + "?)")};
}

}  // namespace

void reject_unknown_flags(const Args& args, const std::vector<std::string>& value_flags,
                          const std::vector<std::string>& bool_flags) {
  std::vector<std::string> known = value_flags;
  known.insert(known.end(), bool_flags.begin(), bool_flags.end());
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return;  // what follows belongs to someone else (hp launch -- CMD)
    if (!looks_like_flag(a)) continue;
    const std::string name = a.substr(0, a.find('='));
    const bool takes_value =
        std::find(value_flags.begin(), value_flags.end(), name) != value_flags.end();
    if (takes_value) {
      if (name.size() == a.size()) ++i;  // "--flag VALUE": VALUE may itself start with '-'
      continue;
    }
    if (name.size() == a.size() &&
        std::find(bool_flags.begin(), bool_flags.end(), name) != bool_flags.end())
      continue;
    unknown_flag(name, known);
  }
}

std::string describe(const std::filesystem::filesystem_error& e) {
  // libstdc++: "filesystem error: <operation>: <reason> [path1] [path2]".
  std::string s = e.what();
  const std::string prefix = "filesystem error: ";
  if (s.rfind(prefix, 0) == 0) s.erase(0, prefix.size());
  for (const auto* p : {&e.path1(), &e.path2()})
    if (!p->empty() && s.find(p->string()) == std::string::npos) s += " [" + p->string() + "]";
  return s;
}

void reject_leftovers(const Args& args) {
  if (args.empty()) return;
  if (looks_like_flag(args.front()))
    throw UsageError{"unknown flag '" + args.front().substr(0, args.front().find('=')) + "'"};
  throw UsageError{"unexpected argument '" + args.front() + "'"};
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t'\"\\$`*?;&|<>()") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace hp::cli

namespace {
void print_help() {
  std::printf("hp %s — HyperParallel\n\nusage: hp <command> [args]\n\ncommands:\n", HP_VERSION);
  for (const auto& c : hp::cli::commands()) std::printf("  %-14s %s\n", c.name, c.summary);
  std::printf("  %-14s %s\n  %-14s %s\n", "--version", "print the version", "--help", "this text");
  std::printf(
      "\nhp train stopped by SIGINT or SIGTERM saves a checkpoint, then exits 128 + the signal "
      "(130, 143).\n");
}

// `hp <command> --help` (or -h) anywhere before a "--" (after which the arguments are another
// program's, as in hp launch -- CMD): every subcommand answers with its usage line, exit 0.
bool wants_help(const hp::cli::Args& args) {
  for (const std::string& a : args) {
    if (a == "--") return false;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

// The world size once a CommError was thrown (MPI is up by then); 1 when it cannot be known.
int world_size_after_comm_error() {
  try {
    return hp::dist::world()->size();
  } catch (...) {
    return 1;
  }
}
// A rank other than 0 of a job `hp launch` (mpirun) started: OMPI_COMM_WORLD_RANK is set and not 0.
bool launched_nonzero_rank() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank && std::strcmp(rank, "0") != 0;
}

// Ends a failed command: prints `message` (unless `print` is false) and returns `code`. On a rank
// of a multi-rank job whose peers did not fail alike within HP_ERROR_GRACE_S (they wait in a
// collective for this rank, and its MPI_Finalize would block until their HP_COMM_TIMEOUT_S), it
// ends the whole job instead, with `code`, naming this rank and the error.
int fail(const std::string& message, int code, bool print = true) {
  if (!hp::dist::peers_end_alike(hp::dist::error_grace_s())) hp::dist::abort_job(message, code);
  if (print) std::fprintf(stderr, "%s\n", message.c_str());
  return code;
}

// Every rank reads the same config file and --set flags, so a config error is the same on each:
// rank 0 alone prints it (exit 2 everywhere), not once per rank.
bool printed_by_rank0(const hp::Error& e) {
  return std::strncmp(e.what(), "[config] ", 9) == 0 && launched_nonzero_rank();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("hp %s\n%s\n", HP_VERSION, hp::kernels::isa_summary().c_str());
    return 0;
  }
  for (const auto& c : hp::cli::commands()) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    hp::cli::Args args(argv + 2, argv + argc);
    if (wants_help(args)) {
      std::printf("usage: hp %s %s\n", c.name, c.summary);
      return 0;
    }
    const std::string hp_name = std::string("hp ") + c.name + ": ";
    try {
      return c.run(args);
    } catch (const hp::cli::UsageError& e) {
      return fail(hp_name + e.message, 2);
    } catch (const hp::dist::CommError& e) {
      // Under mpirun the peers may be stuck in a collective (or stopped): a normal exit would
      // block in MPI_Finalize, so end every rank of the job at once.
      const std::string msg = hp_name + e.what();
      if (world_size_after_comm_error() > 1) hp::dist::abort_job(msg);
      std::fprintf(stderr, "%s\n", msg.c_str());
      return 1;
    } catch (const hp::Error& e) {
      return fail(hp_name + e.what(), 2, !printed_by_rank0(e));
    } catch (const std::filesystem::filesystem_error& e) {
      // A path the user gave (run.dir, an output directory) that cannot be created or written:
      // the user's to fix, so exit 2 naming the path(s).
      return fail(hp_name + hp::cli::describe(e), 2);
    } catch (const std::exception& e) {
      return fail(hp_name + "internal error: " + e.what(), 1);
    }
  }
  std::fprintf(stderr, "hp: unknown command '%s' (see hp --help)\n", argv[1]);
  return 2;
}
