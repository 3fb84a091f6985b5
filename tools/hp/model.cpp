// `hp forward`, `hp generate`, `hp model info`: Hugging Face model directories from the command
// line (config.json + safetensors [+ tokenizer.json]).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "commands.h"
#include "hp/autograd/grad_mode.h"
#include "hp/io/safetensors.h"
#include "hp/io/tokenizer.h"
#include "hp/models/generate.h"
#include "hp/models/hf/registry.h"
#include "hp/mx/fp8_blocks.h"
#include "hp/nn/module.h"
#include "hp/ops/ops.h"

namespace hp::cli {

namespace fs = std::filesystem;

namespace {

std::string need_model_dir(Args& args) {
  std::string dir;
  if (!take_value(args, "--model", &dir)) throw UsageError{"--model DIR is required"};
  if (!fs::is_directory(dir)) throw UsageError{"--model: '" + dir + "' is not a directory"};
  return dir;
}

// One sequence per non-empty line of whitespace-separated token ids; `line_of` gets each
// sequence's line number. An id that does not fit int64 is reported as written, not saturated.
std::vector<std::vector<int64_t>> read_token_file(const std::string& path,
                                                  std::vector<int>* line_of) {
  std::ifstream f(path);
  if (!f) HP_THROW(IoError, "forward", path, ": cannot open token file");
  std::vector<std::vector<int64_t>> seqs;
  std::string line;
  for (int line_no = 1; std::getline(f, line); ++line_no) {
    std::istringstream is(line);
    std::vector<int64_t> ids;
    std::string tok;
    while (is >> tok) {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(tok.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || errno == ERANGE)
        HP_THROW(IoError, "forward", path, ":", line_no, ": bad token id '", tok, "' (position ",
                 ids.size(), ")");
      ids.push_back(v);
    }
    if (ids.empty()) continue;
    seqs.push_back(std::move(ids));
    line_of->push_back(line_no);
  }
  if (seqs.empty()) HP_THROW(IoError, "forward", path, ": no token ids");
  return seqs;
}

}  // namespace

int run_forward(const Args& argv) {
  Args args = argv;
  reject_unknown_flags(args, {"--model", "--tokens", "--out"});
  const std::string dir = need_model_dir(args);
  std::string tokens, out;
  if (!take_value(args, "--tokens", &tokens)) throw UsageError{"--tokens FILE is required"};
  if (!take_value(args, "--out", &out)) throw UsageError{"--out LOGITS.f32 is required"};
  reject_leftovers(args);
  std::vector<int> line_of;
  const auto seqs = read_token_file(tokens, &line_of);
  auto model = models::load_model(dir, DType::f32);
  const int64_t vocab = model->config().vocab_size;
  // Every id is checked before any logits are computed; the first bad one is named as written.
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t p = 0; p < seqs[i].size(); ++p)
      if (seqs[i][p] >= vocab)
        HP_THROW(ValueError, "forward", tokens, ":", line_of[i], ": token id ", seqs[i][p],
                 " (position ", p, ") is outside the vocabulary [0, ", vocab, ") of ", dir);
  autograd::NoGradGuard no_grad;
  // Written to a temp file beside `out`, renamed to it at the end and removed on any failure, so a
  // failed run leaves no partial (or empty) logits file behind. A device or pipe (/dev/stdout) is
  // written directly.
  std::error_code ec;
  const bool direct = fs::exists(out, ec) && !fs::is_regular_file(out, ec);
  struct TempFile {
    std::string path;
    bool kept = false;
    ~TempFile() {
      std::error_code ec;
      if (!kept && !path.empty()) fs::remove(path, ec);
    }
  } tmp{direct ? std::string() : out + ".partial-" + std::to_string(::getpid())};
  std::ofstream f(direct ? out : tmp.path, std::ios::binary);
  if (!f) HP_THROW(IoError, "forward", out, ": cannot write");
  int64_t rows = 0;
  for (const auto& s : seqs) {
    const Tensor ids = from_vector(std::vector<double>(s.begin(), s.end()),
                                   {1, static_cast<int64_t>(s.size())}, DType::i64);
    const Tensor logits = model->forward(ids).contiguous();  // [1, T, V] f32
    f.write(static_cast<const char*>(logits.raw_data()),
            static_cast<std::streamsize>(logits.nbytes()));
    rows += logits.size(1);
  }
  f.close();
  if (!f) HP_THROW(IoError, "forward", out, ": write failed");
  if (!direct) {
    fs::rename(tmp.path, out, ec);
    if (ec)
      HP_THROW(IoError, "forward", out, ": cannot rename ", tmp.path, " to it: ", ec.message());
    tmp.kept = true;
  }
  std::printf("wrote %lld x %lld float32 logits to %s\n", static_cast<long long>(rows),
              static_cast<long long>(vocab), out.c_str());
  return 0;
}

int run_generate(const Args& argv) {
  Args args = argv;
  reject_unknown_flags(
      args, {"--model", "--prompt", "--max-new-tokens", "--temperature", "--top-p", "--seed"},
      {"--greedy"});
  const std::string dir = need_model_dir(args);
  std::string prompt, v;
  if (!take_value(args, "--prompt", &prompt)) throw UsageError{"--prompt TEXT is required"};
  models::GenerateOptions opt;
  if (take_value(args, "--max-new-tokens", &v))
    opt.max_new_tokens = parse_int("--max-new-tokens", v, 0, 1 << 20);
  const bool greedy = take_flag(args, "--greedy");
  const bool has_t = take_value(args, "--temperature", &v);
  if (has_t) opt.temperature = parse_double("--temperature", v);
  const bool has_p = take_value(args, "--top-p", &v);
  if (has_p) opt.top_p = parse_double("--top-p", v);
  if (take_value(args, "--seed", &v))
    opt.seed = static_cast<uint64_t>(parse_int("--seed", v, 0, 1LL << 62));
  reject_leftovers(args);
  if (greedy && (has_t || has_p)) throw UsageError{"--greedy excludes --temperature / --top-p"};
  if (has_t && !(opt.temperature > 0)) throw UsageError{"--temperature must be > 0"};
  if (has_p && !(opt.top_p > 0 && opt.top_p <= 1)) throw UsageError{"--top-p must be in (0, 1]"};
  opt.greedy = greedy || !(has_t || has_p);
  if (!io::Tokenizer::in_dir(dir))
    HP_THROW(IoError, "generate", dir, ": has no tokenizer.json or tiktoken.model");
  const auto tok = io::Tokenizer::from_file(dir);
  auto model = models::load_model(dir, DType::f32);
  opt.stop_ids = model->config().eos_token_ids;
  const auto enc = tok.encode(prompt);
  const auto ids = models::generate(*model, std::vector<int64_t>(enc.begin(), enc.end()), opt);
  const std::vector<int32_t> out_ids(ids.begin(), ids.end());
  // Written by length: generated text may hold NUL bytes, where a %s would stop.
  const std::string text = prompt + tok.decode(out_ids, true) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

int run_model(const Args& argv) {
  Args args = argv;
  if (args.empty() || args[0] != "info") throw UsageError{"usage: hp model info DIR"};
  args.erase(args.begin());
  reject_unknown_flags(args, {});
  if (args.size() != 1) throw UsageError{"usage: hp model info DIR"};
  const std::string dir = args[0];
  const auto c = models::read_model_config(dir);
  std::printf("architecture  %s (model_type %s)\n", c.architecture.c_str(), c.model_type.c_str());
  std::printf(
      "shape         %lld layers, hidden %lld, heads %lld/%lld kv, head_dim %lld, ffn %lld, "
      "vocab %lld\n",
      (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.num_attention_heads,
      (long long)c.num_key_value_heads, (long long)c.head_dim, (long long)c.intermediate_size,
      (long long)c.vocab_size);
  std::printf("rope          theta %g, scaling %s\n", c.rope_theta, c.rope_scaling.type.c_str());
  // Counted from the checkpoint headers (no weights read); a directory without weights counts the
  // parameters the config implies.
  std::map<std::string, std::pair<int64_t, double>> by_dtype;
  int64_t total = 0, scales = 0;
  const bool has_weights = fs::exists(fs::path(dir) / "model.safetensors") ||
                           fs::exists(fs::path(dir) / "model.safetensors.index.json");
  if (has_weights) {
    const auto ckpt = io::SafetensorsCheckpoint::open(dir);
    for (const auto& n : ckpt.names()) {
      const auto& t = ckpt.tensor(n);
      // An FP8 checkpoint's block scales are not parameters (the weights they scale are).
      if (c.fp8_blocks && n.ends_with(mx::fp8_block_scale_name(""))) {
        scales += t.numel();
        continue;
      }
      auto& e = by_dtype[std::string(io::safetensors_dtype_name(t.dtype))];
      e.first += t.numel();
      e.second += static_cast<double>(t.nbytes);
      total += t.numel();
    }
  } else {
    // One decoder layer at a time (memory bounded by the largest layer; the layer count is bounded
    // by read_model_config), embeddings and head from their shapes. Only the shapes count, so the
    // weights are not drawn.
    nn::SkipInitGuard skip_init;
    const auto& factory = models::architecture(c.architecture).layers;
    const int64_t io_params =
        c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) + c.hidden_size;
    auto& e = by_dtype[std::string(io::safetensors_dtype_name(c.dtype))];
    e.first += io_params;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      e.first += models::DecoderLayer(c, factory, i).num_parameters();
    e.second = static_cast<double>(e.first) * static_cast<double>(dtype_size(c.dtype));
    total = e.first;
  }
  std::printf("parameters    %lld (%.1fM)%s\n", (long long)total, static_cast<double>(total) / 1e6,
              has_weights ? "" : " [no weights: from config]");
  for (const auto& [dt, e] : by_dtype)
    std::printf("  %-10s %lld params, %s\n", dt.c_str(), (long long)e.first,
                human_bytes(e.second).c_str());
  if (c.fp8_blocks)
    std::printf("quantization  FP8 e4m3, a scale per %lld x %lld block (%lld scales)\n",
                (long long)c.fp8_blocks->rows, (long long)c.fp8_blocks->cols, (long long)scales);
  return 0;
}

}  // namespace hp::cli
