// hp — the HyperParallel command-line tool. Subcommands are added by later layers.
#include <cstdio>
#include <cstring>
#include <string>

#include "hp/core/error.h"

namespace {
void print_help() {
  std::printf(
      "hp %s — HyperParallel\n\n"
      "usage: hp <command> [args]\n\n"
      "commands:\n"
      "  --version        print the version\n"
      "  --help           this text\n",
      HP_VERSION);
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
  std::fprintf(stderr, "hp: unknown command '%s' (see hp --help)\n", argv[1]);
  return 2;
}
