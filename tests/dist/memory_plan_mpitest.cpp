// The memory plan under pipeline parallelism: zero-bubble schedules reduce FSDP's gradients once
// per step (fsdp.h reduce_at_finish), so the unsharded f32 gradients are held through the step and
// the plan counts them on the device — unless FSDP passes the f32 masters through. (Under pp the
// plan used to refuse its own measuring run: "parallel.pp = 2 does not divide the world size 1".)
#include <gtest/gtest.h>

#include <string>

#include "hp/dist/communicator.h"
#include "hp/train/config.h"
#include "hp/train/memory_plan.h"
#include "train/corpus.h"

namespace hp::train {
namespace {

MemoryPlan plan(const std::string& schedule, const std::string& precision) {
  static const std::string corpus = testing::corpus_prefix("hp_memory_plan_mpitest", 60000);
  const std::string yaml = R"(model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2,
        intermediate: 64}
data: {path: )" + corpus + R"(}
optimizer: {lr: 0.01}
training: {steps: 2, batch_size: 4, seq_len: 32, seed: 5}
parallel: {pp: 2, pipeline: {microbatches: 2}}
metrics: {progress: none}
)";
  return plan_memory(parse_config(yaml, "plan.yaml",
                                  {"parallel.pipeline.schedule=" + schedule,
                                   "training.mixed_precision=" + precision}));
}

TEST(MemoryPlan, ZeroBubbleCountsTheGradientsFsdpHoldsThroughTheStep) {
  if (dist::world()->size() != 2) GTEST_SKIP() << "needs 2 ranks (pp 2)";
  const MemoryPlan one_f = plan("1f1b", "bf16"), zb = plan("zb_h1", "bf16");
  EXPECT_EQ(zb.device.grads - one_f.device.grads, 4 * one_f.parameters);
  // f32 masters unsharded: FSDP passes them through, and their .grad is the only gradient.
  EXPECT_EQ(plan("zb_h2", "f32").device.grads, plan("1f1b", "f32").device.grads);
}

}  // namespace
}  // namespace hp::train
