// Tokenizer encoding throughput on one core, per tokenizer style of tests/io/fixtures/tokenizers,
// beside the reference on the same lines of the same machine: the `tokenizers` package's
// encode_batch (tiktoken's encode_ordinary_batch for the Kimi directory), both on one thread,
// when $HP_PEER_PYTHON names a Python that has them. Corpus: the first 1 MiB of data/kjv.txt
// plus 0.5 MiB of mixed-script lines (Cyrillic, CJK, Arabic, emoji, code, digits), encoded line
// by line without BOS/EOS. MB/s counts the UTF-8 bytes of the lines.
//
//   HP_PEER_PYTHON=/work/peer-venv/bin/python ./build/bench_tokenizer [style...]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/io/tokenizer.h"

namespace {

namespace fs = std::filesystem;

const std::string kSource = HP_BENCH_PEERS_DIR "/../..";

std::vector<std::string> corpus_lines() {
  std::ifstream f(kSource + "/data/kjv.txt", std::ios::binary);
  std::string kjv(1 << 20, '\0');
  f.read(kjv.data(), static_cast<std::streamsize>(kjv.size()));
  kjv.resize(static_cast<size_t>(f.gcount()));
  kjv.resize(kjv.rfind('\n') + 1);  // whole lines
  std::vector<std::string> lines;
  std::istringstream in(kjv);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  static const char* kMixed[] = {
      "Привет, мир! Как дела? Это тестовая строка на русском языке.",
      "日本語のテキストです。中文测试句子，包含标点。한국어 문장입니다.",
      "مرحبا بالعالم. هذا نص تجريبي باللغة العربية ١٢٣.",
      "def main(x):    return x ** 2  # square of 12345 and 3.14159",
      "Emoji: 👋🏽 😀 👨‍👩‍👧‍👦 ❤️ 🇫🇷 🎉 — café naïve résumé "
      "Ångström",
      "  indented\tcode { int i = 0; i < 100; ++i } // 2024-06-01T10:30:00Z",
      "I'm sure they've said it's fine, HAVEN'T THEY? We'll see.",
  };
  std::mt19937 gen(7);
  size_t mixed = 0;
  while (mixed < (1u << 19)) {
    std::string line;
    for (int k = 0; k < 3; ++k) line += std::string(kMixed[gen() % 7]) + " ";
    mixed += line.size();
    lines.push_back(std::move(line));
  }
  return lines;
}

double hp_mbps(const hp::io::Tokenizer& tok, const std::vector<std::string>& lines, size_t bytes) {
  double best = 1e30;
  size_t sink = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first run fills the BPE cache, as the peer's warm-up
    auto t0 = std::chrono::steady_clock::now();
    for (const std::string& l : lines) sink += tok.encode(l, false).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);
  }
  if (sink == 0) std::printf("(no tokens)\n");
  return static_cast<double>(bytes) / best / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> styles = {"gpt2", "llama3", "qwen2", "deepseek_v3", "llama2", "kimi"};
  if (argc > 1) styles.assign(argv + 1, argv + argc);
  const std::vector<std::string> lines = corpus_lines();
  size_t bytes = 0;
  std::string text;
  for (const std::string& l : lines) bytes += l.size(), text += l + "\n";
  text.pop_back();
  const fs::path corpus =
      fs::temp_directory_path() / ("hp_bench_tokenizer_" + std::to_string(getpid()) + ".txt");
  std::ofstream(corpus, std::ios::binary) << text;
  const bool peer = std::getenv("HP_PEER_PYTHON") != nullptr;
  std::printf("corpus: %zu lines, %.2f MB; one core each%s\n", lines.size(), bytes / 1e6,
              peer ? "" : " (set HP_PEER_PYTHON for the reference)");
  std::printf("%-12s %12s %16s %8s\n", "style", "hp MB/s", "reference MB/s", "ratio");
  const std::string dir = kSource + "/tests/io/fixtures/tokenizers/";
  for (const std::string& style : styles) {
    const std::string path = dir + style + (style == "kimi" ? "" : ".tokenizer.json");
    const hp::io::Tokenizer tok = hp::io::Tokenizer::from_file(path);
    const double ours = hp_mbps(tok, lines, bytes);
    const double ref =
        peer ? hp::bench::run_peer("tokenizer.py", path + " " + corpus.string()) : std::nan("");
    std::printf("%-12s %12.2f %16.2f %8s\n", style.c_str(), ours, ref,
                hp::bench::ratio_str(ours, ref).c_str());
    std::fflush(stdout);
  }
  fs::remove(corpus);
  return 0;
}
