// DeepSeek-V4 generation caches (models/deepseek_v4_cache.cpp): cached decoding against the
// uncached forward, and greedy generation against transformers' (the fixtures' generate.prompt /
// generate.greedy, made by tools/make_v4_fixtures.py).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hp/autograd/grad_mode.h"
#include "hp/io/safetensors.h"
#include "hp/models/generate.h"
#include "hp/models/hf/registry.h"
#include "hp/ops/ops.h"
#include "models/compare.h"
#include "test_dir.h"

namespace hp::models {
namespace {

using testing::max_abs_diff;

std::string fixture(const std::string& name) {
  return std::string(HP_TEST_DIR) + "/fixtures/" + name;
}

std::vector<int64_t> ids_of(const io::SafetensorsFile& f, const std::string& name) {
  const auto& t = f.tensor(name);
  const auto* p = reinterpret_cast<const int64_t*>(t.data);
  return std::vector<int64_t>(p, p + t.numel());
}

Tensor rows(const std::vector<std::vector<int64_t>>& r, int64_t len) {
  std::vector<double> v;
  for (const auto& row : r) v.insert(v.end(), row.begin(), row.begin() + len);
  return from_vector(v, {static_cast<int64_t>(r.size()), len}, DType::i64);
}

class V4Generate : public ::testing::TestWithParam<std::string> {};

// Prompt in one forward, a chunk of several tokens, then one token per step: every position's
// logits equal the uncached forward's of the whole prefix, for 96 positions of two rows (the HCA
// compressor completes entries 4–10 times while decoding, CSA's two series and the indexer's
// keys every 4 tokens, the 16-token sliding window wraps). The cache keeps only the window.
// Tolerance 2e-5 on logits of magnitude ~4: the uncached forward itself moves its logits at the
// same positions by up to 8e-6 when one more token is appended (GEMM tiles and reductions follow
// the shapes), and the cached step runs other shapes again.
TEST_P(V4Generate, CachedStepsMatchTheUncachedForward) {
  const std::string dir = fixture(GetParam());
  auto model = load_model(dir);
  const auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  const std::vector<int64_t> flat = ids_of(ref, "ids");  // [2, 64]
  const std::vector<int64_t> a(flat.begin(), flat.begin() + 64), b(flat.begin() + 64, flat.end());
  // Two rows of 96 tokens: each row's ids, then the other row's.
  std::vector<std::vector<int64_t>> r = {a, b};
  r[0].insert(r[0].end(), b.begin(), b.begin() + 32);
  r[1].insert(r[1].end(), a.begin(), a.begin() + 32);
  const int64_t total = 96, prompt = 7, chunk = 5;
  const int64_t window = model->config().sliding_window;

  autograd::NoGradGuard no_grad;
  KVCache cache = model->new_cache();
  int64_t pos = 0, checked = 0;
  while (pos < total) {
    const int64_t len = pos == 0 ? prompt : pos == prompt ? chunk : 1;
    const Tensor all = rows(r, pos + len);
    const Tensor step =
        model->forward(narrow(all, 1, pos, len).contiguous(), &cache);  // [2, len, V]
    const Tensor full = model->forward(all);                            // [2, pos + len, V]
    EXPECT_LE(max_abs_diff(step, narrow(full, 1, pos, len).contiguous()), 2e-5)
        << GetParam() << " positions [" << pos << ", " << pos + len << ")";
    pos += len;
    ++checked;
    EXPECT_EQ(cache.length, pos);
  }
  EXPECT_EQ(checked, total - prompt - chunk + 2);
  // O(window + entries): each layer holds the last window − 1 K=V rows, not the sequence.
  for (const auto& lc : cache.layers) EXPECT_EQ(lc.k.size(2), window - 1);
}

// transformers' greedy generate (with its cache) for the fixture's prompt, token for token, with
// the cache and by re-running the whole sequence.
TEST_P(V4Generate, GreedyMatchesTransformers) {
  const std::string dir = fixture(GetParam());
  auto model = load_model(dir);
  const auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  const std::vector<int64_t> prompt = ids_of(ref, "generate.prompt");
  const std::vector<int64_t> want = ids_of(ref, "generate.greedy");
  GenerateOptions opt;
  opt.max_new_tokens = static_cast<int64_t>(want.size());
  opt.stop_ids = model->config().eos_token_ids;
  EXPECT_EQ(generate(*model, prompt, opt), want) << GetParam();
  opt.kv_cache = false;
  EXPECT_EQ(generate(*model, prompt, opt), want) << GetParam() << " without cache";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Generate,
                         ::testing::Values("deepseek_v4_hc2", "deepseek_v4_hc4"));

}  // namespace
}  // namespace hp::models
