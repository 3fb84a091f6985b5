// `hp <command> --help` prints the command's usage and exits 0 for every subcommand (it used to be
// an unknown-flag error), and `hp generate` prints generated text past a NUL byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "hp/autograd/grad_mode.h"
#include "hp/io/tokenizer.h"
#include "hp/models/hf/registry.h"
#include "hp/models/hf/weights.h"
#include "hp/ops/ops.h"
#include "test_dir.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_hp;

TEST(CliUsage, EverySubcommandAnswersHelpWithItsUsage) {
  ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
  for (const std::string cmd : {"train", "eval", "config", "data", "launch", "mx", "forward",
                                "generate", "model", "memory", "ckpt", "bench"}) {
    for (const std::string flag : {"--help", "-h"}) {
      const auto r = run_hp(cmd + " " + flag);
      EXPECT_EQ(r.code, 0) << cmd << ": " << r.output;
      EXPECT_EQ(r.output.rfind("usage: hp " + cmd + " ", 0), 0u) << cmd << ": " << r.output;
    }
  }
  // After a subcommand's words and flags too.
  for (const std::string args : {"model info --help", "ckpt export-hf --help",
                                 "train config.yaml --set x=1 --help", "forward --model x -h"}) {
    const auto r = run_hp(args);
    EXPECT_EQ(r.code, 0) << args << ": " << r.output;
    EXPECT_EQ(r.output.rfind("usage: hp ", 0), 0u) << args << ": " << r.output;
  }
  // A --help after "--" is the launched program's.
  const auto r = run_hp("launch -n 2 --dry-run -- echo --help");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("usage: hp"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("echo --help"), std::string::npos) << r.output;
}

// A command that cannot start exits 127 and says why (mpirun's own 132 reads as 128 + SIGILL),
// for a path and for a name looked up in PATH; one that can runs on every rank.
TEST(CliUsage, LaunchOfAMissingCommandExits127) {
  for (const std::string missing : {"/nonexistent/hp_no_such_program", "hp_no_such_program"}) {
    const auto r = run_hp("launch -n 1 -- " + missing + " --flag");
    EXPECT_EQ(r.code, 127) << r.output;
    EXPECT_NE(r.output.find("hp launch: cannot run '" + missing + "': no such executable file"),
              std::string::npos)
        << r.output;
  }
  const auto ok = run_hp("launch -n 2 -- true");
  EXPECT_EQ(ok.code, 0) << ok.output;
}

// A model that greedily generates token 191 of the qwen2 tokenizer, "Ā": byte-level BPE's
// spelling of the byte 0x00. Every layer's output projections are zero, so the residual stream
// is the embedding (all ones), and lm_head scores only token 191.
TEST(CliUsage, GeneratePrintsTextPastANulByte) {
  ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
  const fs::path dir =
      fs::temp_directory_path() / ("hp_cli_generate_nul_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "tok");
  const std::string tok_json =
      std::string(HP_TEST_DIR) + "/../io/fixtures/tokenizers/qwen2.tokenizer.json";
  fs::copy_file(tok_json, dir / "tok" / "tokenizer.json");
  const auto tok = io::Tokenizer::from_file(tok_json);
  const std::vector<int32_t> nul = {191};
  ASSERT_EQ(tok.decode(nul, true), std::string(1, '\0'));

  models::ModelConfig c =
      models::read_model_config(std::string(HP_TEST_DIR) + "/../models/fixtures/qwen3");
  c.vocab_size = tok.vocab_size();
  c.eos_token_ids.clear();
  auto model = models::build_model(c);
  {
    autograd::NoGradGuard no_grad;
    for (const auto& [fqn, p] : model->named_parameters()) {
      if (fqn.find("o_proj") != std::string::npos || fqn.find("down_proj") != std::string::npos)
        p.fill_(0.0);
      if (fqn == "model.embed_tokens.weight") p.fill_(1.0);
      if (fqn == "lm_head.weight") {  // [vocab, hidden]: row 191 ones, the rest zero
        std::vector<double> w(static_cast<size_t>(p.numel()), 0.0);
        std::fill_n(w.begin() + 191 * c.hidden_size, c.hidden_size, 1.0);
        p.copy_from(from_vector(w, p.shape()));
      }
    }
  }
  models::save_pretrained(*model, (dir / "model").string(), int64_t(1) << 30,
                          (dir / "tok").string());
  const fs::path out = dir / "out.txt";
  const auto r =
      test::run_command(test::hp_binary() + " generate --model " + (dir / "model").string() +
                        " --prompt Hello --max-new-tokens 3 > " + out.string());
  EXPECT_EQ(r.code, 0) << r.output;
  std::ifstream f(out, std::ios::binary);
  const std::string text(std::istreambuf_iterator<char>(f), {});
  EXPECT_EQ(text, std::string("Hello\0\0\0\n", 9));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hp::cli
