// hp — the HyperParallel command-line tool.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "commands.h"
#include "hp/core/error.h"

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
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, unit[u]);
  return buf;
}

void reject_leftovers(const Args& args) {
  if (!args.empty()) throw UsageError{"unexpected argument '" + args.front() + "'"};
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
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("hp %s\n", HP_VERSION);
    return 0;
  }
  for (const auto& c : hp::cli::commands()) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    hp::cli::Args args(argv + 2, argv + argc);
    try {
      return c.run(args);
    } catch (const hp::cli::UsageError& e) {
      std::fprintf(stderr, "hp %s: %s\n", c.name, e.message.c_str());
      return 2;
    } catch (const hp::Error& e) {
      std::fprintf(stderr, "hp %s: %s\n", c.name, e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hp %s: internal error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "hp: unknown command '%s' (see hp --help)\n", argv[1]);
  return 2;
}
