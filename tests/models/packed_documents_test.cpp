// Packed documents (CausalLM::loss with PackedDocuments): a row packing documents A|B trains to
// the losses and gradients of A and B run as rows of their own — Llama, Qwen3 (q/k norms) and
// DeepSeek-V3 (MLA, MoE) — and differs from the plain causal row without the mask.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "hp/core/error.h"
#include "hp/models/hf/registry.h"
#include "hp/models/transformer.h"
#include "hp/ops/ops.h"
#include "models/compare.h"
#include "models/tiny_models.h"
#include "test_dir.h"

namespace hp::models {
namespace {

using testing::random_ids;
using testing::tiny_config;

// Σ of token losses (mean · valid targets) and the parameter gradients of that sum.
struct SumAndGrads {
  double sum = 0;
  std::map<std::string, Tensor> grads;
};

int64_t valid_targets(const Tensor& labels) {
  int64_t n = 0;
  const std::vector<double> v = labels.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (int64_t(i) % labels.size(1) != 0 && v[i] != -100) ++n;  // targets are labels[:, 1:]
  return n;
}

// Runs every (ids, labels, docs) row set and adds up the token-loss sums and their gradients.
SumAndGrads run(CausalLM& m, const std::vector<std::tuple<Tensor, Tensor, PackedDocuments>>& rows) {
  for (const auto& [fqn, p] : m.named_parameters()) p.zero_grad();
  SumAndGrads out;
  for (const auto& [ids, labels, docs] : rows) {
    const Tensor l = m.loss(ids, labels, docs);
    const double n = double(valid_targets(labels.defined() ? labels : ids));
    out.sum += l.item() * n;
    mul(l, n).backward();
  }
  for (const auto& [fqn, p] : m.named_parameters())
    if (p.grad().defined()) out.grads[fqn] = p.grad().clone();
  return out;
}

// [1, n] slice of a [1, T] row.
Tensor cols(const Tensor& row, int64_t from, int64_t n) {
  return contiguous(narrow(row, 1, from, n));
}

// positions [0..a), [0..b), ... of documents of the given lengths, as [1, Σ] i64.
Tensor doc_positions(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> p;
  for (int64_t n : lengths)
    for (int64_t i = 0; i < n; ++i) p.push_back(i);
  return from_data<int64_t>(p, {1, int64_t(p.size())});
}

// Row A|x|B (x: a document of one token) against A and B alone; B's first target and x's (the
// tokens that cross a document boundary: each is predicted from the previous document) are
// ignored in the packed row, so the two runs have the same targets.
void expect_packed_equals_separate(CausalLM& m, int64_t vocab, const std::string& what) {
  const int64_t a = 37, b = 70;
  const Tensor row = random_ids(1, a + 1 + b, vocab, 11);
  Tensor labels = row.clone();
  labels.data<int64_t>()[a] = -100;      // x, predicted from A's last token
  labels.data<int64_t>()[a + 1] = -100;  // B's first, predicted from x
  const Tensor pos = doc_positions({a, 1, b});
  const PackedDocuments on{pos, true, true};

  const SumAndGrads packed = run(m, {{row, labels, on}});
  const SumAndGrads separate =
      run(m, {{cols(row, 0, a), Tensor(), {}}, {cols(row, a + 1, b), Tensor(), {}}});
  EXPECT_NEAR(packed.sum, separate.sum, 2e-5 * std::fabs(separate.sum)) << what;
  ASSERT_EQ(packed.grads.size(), separate.grads.size()) << what;
  double worst = 0;
  for (const auto& [fqn, g] : separate.grads) {
    const double d = testing::rel_diff(packed.grads.at(fqn), g);
    worst = std::max(worst, d);
    EXPECT_LE(d, 1e-4) << what << " " << fqn;
  }
  std::printf("%s: loss sums %.9g vs %.9g, worst gradient rel diff %.3g\n", what.c_str(),
              packed.sum, separate.sum, worst);

  // Without the mask B attends to A: the sum and the gradients move, by far more than the
  // rounding above (a randomly initialized model attends almost uniformly, so the loss moves
  // little: ~5e-4 relative for the tiny Llama, against ~3e-8 for the packed row).
  const SumAndGrads crossing = run(m, {{row, labels, {}}});
  EXPECT_GT(std::fabs(crossing.sum - separate.sum), 1e-4 * std::fabs(separate.sum)) << what;
  double moved = 0;
  for (const auto& [fqn, g] : separate.grads)
    moved = std::max(moved, testing::rel_diff(crossing.grads.at(fqn), g));
  EXPECT_GT(moved, 1e-2) << what;
  std::printf("%s without the mask: loss sum %.9g, worst gradient rel diff %.3g\n", what.c_str(),
              crossing.sum, moved);
  // The mask alone (positions running on across the row) gives the same sums up to rounding:
  // RoPE scores depend on relative positions only.
  const SumAndGrads mask_only = run(m, {{row, labels, {pos, true, false}}});
  EXPECT_NEAR(mask_only.sum, separate.sum, 1e-4 * std::fabs(separate.sum)) << what;
}

TEST(PackedDocuments, LlamaRowEqualsSeparateRows) {
  manual_seed(3);
  auto m = build_model(tiny_config("llama"));
  expect_packed_equals_separate(*m, 96, "llama");
}

TEST(PackedDocuments, Qwen3RowEqualsSeparateRows) {
  manual_seed(4);
  auto m = build_model(tiny_config("qwen3"));
  expect_packed_equals_separate(*m, 96, "qwen3");
}

// Sliding-window layers (Mistral) with packed documents: the kernel's window and document masks
// together (window 30 < the documents' 37 and 70 tokens).
TEST(PackedDocuments, SlidingWindowRowEqualsSeparateRows) {
  manual_seed(5);
  ModelConfig c = tiny_config("llama");
  c.architecture = "MistralForCausalLM";
  c.model_type = "mistral";
  c.sliding_window = 30;
  auto m = build_model(c);
  expect_packed_equals_separate(*m, 96, "mistral window 30");
}

TEST(PackedDocuments, DeepseekV3MlaRowEqualsSeparateRows) {
  auto m = load_model(std::string(HP_TEST_DIR) + "/fixtures/deepseek_v3", DType::f32);
  expect_packed_equals_separate(*m, m->config().vocab_size, "deepseek_v3");
}

// Two rows in one batch (one of them a single document) equal their documents run alone.
TEST(PackedDocuments, BatchOfRowsEqualsItsDocuments) {
  manual_seed(5);
  auto m = build_model(tiny_config("llama"));
  const int64_t t = 80;
  const Tensor ids = random_ids(2, t, 96, 21);
  Tensor labels = ids.clone();
  labels.data<int64_t>()[50] = -100;  // row 0 = [0, 50) | [50, 80)
  std::vector<int64_t> p;
  for (int64_t i = 0; i < t; ++i) p.push_back(i < 50 ? i : i - 50);
  for (int64_t i = 0; i < t; ++i) p.push_back(i);  // row 1: one document
  const Tensor pos = from_data<int64_t>(p, {2, t});
  const SumAndGrads packed = run(*m, {{ids, labels, {pos, true, true}}});
  const Tensor r0 = contiguous(narrow(ids, 0, 0, 1)), r1 = contiguous(narrow(ids, 0, 1, 1));
  const SumAndGrads separate = run(
      *m, {{cols(r0, 0, 50), Tensor(), {}}, {cols(r0, 50, 30), Tensor(), {}}, {r1, Tensor(), {}}});
  EXPECT_NEAR(packed.sum, separate.sum, 2e-5 * std::fabs(separate.sum));
  for (const auto& [fqn, g] : separate.grads)
    EXPECT_LE(testing::rel_diff(packed.grads.at(fqn), g), 1e-4) << fqn;
}

TEST(PackedDocuments, DocumentSegmentsCountRestarts) {
  const Tensor pos = from_data<int64_t>({0, 1, 2, 0, 0, 1, 0, 1, 2, 3}, {2, 5});
  EXPECT_EQ(document_segments(pos).to_vector(),
            (std::vector<double>{0, 0, 0, 1, 2, 0, 1, 1, 1, 1}));
}

TEST(PackedDocuments, RejectsPositionsNotShapedLikeIdsOrNegative) {
  manual_seed(6);
  auto m = build_model(tiny_config("llama"));
  const Tensor ids = random_ids(1, 8, 96);
  try {
    m->loss(ids, Tensor(), {doc_positions({4, 3}), true, false});
    FAIL() << "accepted 7 positions for 8 ids";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("document positions"), std::string::npos) << e.what();
  }
  const Tensor negative = from_data<int64_t>({0, 1, 2, -1, 0, 1, 2, 3}, {1, 8});
  try {
    m->loss(ids, Tensor(), {negative, false, true});
    FAIL() << "accepted a negative position";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("must be >= 0, got -1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hp::models
