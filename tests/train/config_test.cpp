// Config tree: defaults, YAML loading, --set, round trip, and one golden message per error kind.
#include "hp/train/config.h"

#include <gtest/gtest.h>

#include "hp/core/error.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/models/hf/registry.h"
#include "hp/train/options.h"
#include "hp/train/parallelize.h"
#include "hp/train/schema.h"
#include "test_dir.h"

namespace hp::train {
namespace {

const char* kValid = R"(model:
  arch: llama
  hidden: 64
  layers: 2
  heads: 4
  kv_heads: 2
  intermediate: 128
  vocab: 256
data:
  path: corpus.txt
optimizer:
  name: muon
  lr: 0.02
  groups:
    - params: ["*norm*", "*.bias"]
      weight_decay: 0
training:
  steps: 100
  batch_size: 8
)";

std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse_config(yaml, "run.yaml", sets);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Config, LoadsValuesAndKeepsDefaults) {
  Config c = parse_config(kValid, "run.yaml");
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.model.hidden, 64);
  EXPECT_EQ(c.optimizer.name, OptimizerName::muon);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.02);
  ASSERT_EQ(c.optimizer.groups.size(), 1u);
  EXPECT_EQ(c.optimizer.groups[0].params, (std::vector<std::string>{"*norm*", "*.bias"}));
  EXPECT_EQ(c.optimizer.groups[0].weight_decay, 0.0);
  EXPECT_FALSE(c.optimizer.groups[0].lr.has_value());
  EXPECT_EQ(c.training.steps, 100);
  EXPECT_EQ(c.training.seq_len, 2048);  // default
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(c.lr_scheduler.name, LrSchedule::cosine);
  // A section with every key commented out is empty, not null.
  EXPECT_EQ(parse_config("training:\nmodel:\n  path: m\ndata:\n  path: d\n", "r.yaml").training,
            TrainingConfig{});
}

TEST(Config, SetOverridesAreTypedAndValidated) {
  Config c = parse_config(kValid, "run.yaml",
                          {"training.steps=10", "optimizer.betas=[0.8, 0.99]",
                           "training.mixed_precision=f32", "lr_scheduler.name=wsd"});
  EXPECT_EQ(c.training.steps, 10);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.8, 0.99}));
  EXPECT_EQ(c.training.mixed_precision, MixedPrecision::f32);
  EXPECT_EQ(c.lr_scheduler.name, LrSchedule::wsd);
  EXPECT_EQ(error_of(kValid, {"training.steps=ten"}),
            "[config] --set training.steps=ten: training.steps: expected an integer, got 'ten'");
  EXPECT_EQ(error_of(kValid, {"training.stpes=10"}),
            "[config] --set training.stpes=10: training.stpes: unknown key (did you mean "
            "training.steps?)");
  EXPECT_EQ(error_of(kValid, {"training.steps=0"}),
            "[config] --set training.steps=0: training.steps: must be >= 1, got 0");
  EXPECT_EQ(error_of(kValid, {"training"}),
            "[config] --set training: training: expected key=value");
  EXPECT_EQ(error_of(kValid, {"training=3"}),
            "[config] --set training=3: training: is a section; set one of its keys "
            "(training.<key>=value)");
}

TEST(Config, RoundTripThroughYaml) {
  Config c =
      parse_config(kValid, "run.yaml", {"data.tokenizer=true", "low_precision.recipe=mxfp8"});
  const std::string y = to_yaml(c);
  Config back = parse_config(y, "resolved.yaml");
  EXPECT_TRUE(back == c) << y;
  EXPECT_EQ(to_yaml(back), y);
  EXPECT_EQ(back.data.tokenizer, "true");  // a string that looks like a bool stays a string
  EXPECT_NE(y.find("lr: 0.02\n"), std::string::npos) << y;
}

// Every value of a config enum has one spelling in its table (a value missing there could be held
// but never written back).
template <class E>
void expect_complete_table() {
  const auto names = enum_names(E{});
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(enum_index(static_cast<E>(i)), i) << names[i].name;
    for (size_t j = 0; j < i; ++j) EXPECT_STRNE(names[i].name, names[j].name);
  }
}

TEST(Config, EnumKeysAreParsedOnceAndSpelledBack) {
  expect_complete_table<DataFormat>();
  expect_complete_table<AutoFlag>();
  expect_complete_table<MuonUpdateScale>();
  expect_complete_table<OptimizerName>();
  expect_complete_table<GroupOptimizer>();
  expect_complete_table<LrSchedule>();
  expect_complete_table<MixedPrecision>();
  expect_complete_table<FusionMode>();
  expect_complete_table<ReduceDtype>();
  expect_complete_table<MoEKernel>();
  expect_complete_table<TpStyle>();
  expect_complete_table<PipelineSchedule>();
  expect_complete_table<CpMethod>();
  expect_complete_table<LowPrecisionRecipe>();
  expect_complete_table<MxElem>();
  expect_complete_table<MxScaleMode>();
  expect_complete_table<RecomputeMode>();
  expect_complete_table<OffloadTier>();
  expect_complete_table<HostOffload>();
  expect_complete_table<ActivationSelect>();
  expect_complete_table<Progress>();
  EXPECT_EQ(enum_name(PipelineSchedule::one_f_one_b), "1f1b");
  EXPECT_EQ(enum_name(AutoFlag::off), "false");

  Config c = parse_config(kValid, "run.yaml",
                          {"parallel.pipeline.schedule=interleaved_1f1b", "data.document_mask=true",
                           "data.sources=[{path: a, format: chat}, {path: b}]", "data.path=\"\""});
  EXPECT_EQ(c.parallel.pipeline.schedule, PipelineSchedule::interleaved_1f1b);
  EXPECT_EQ(c.data.document_mask, AutoFlag::on);
  // Unset optional formats mean data.format's.
  EXPECT_EQ(c.data.sources[0].format, DataFormat::chat);
  EXPECT_FALSE(c.data.sources[1].format.has_value());
  EXPECT_FALSE(c.eval.format.has_value());
  // Values set in code are written by their spellings, and read back equal.
  c.offload.activations = OffloadTier::disk;
  const std::string y = to_yaml(c);
  EXPECT_NE(y.find("schedule: interleaved_1f1b\n"), std::string::npos) << y;
  EXPECT_NE(y.find("document_mask: \"true\"\n"), std::string::npos) << y;
  EXPECT_NE(y.find("activations: disk\n"), std::string::npos) << y;
  EXPECT_NE(y.find("format: \"\"\n"), std::string::npos) << y;
  EXPECT_EQ(parse_config(y, "resolved.yaml"), c);
  EXPECT_EQ(error_of(kValid, {"eval.data=v", "eval.format=csv"}),
            "[config] --set eval.format=csv: eval.format: must be one of "
            "text|tokens_u16|tokens_u32|indexed|chat, got 'csv'");
}

// --- golden messages, one per error kind ---

TEST(ConfigErrors, UnknownKeyWithDidYouMean) {
  EXPECT_EQ(error_of(std::string(kValid) + "  stpes: 5\n"),
            "[config] run.yaml:20: training.stpes: unknown key (did you mean training.steps?)");
  EXPECT_EQ(error_of(std::string(kValid) + "trainig:\n  steps: 5\n"),
            "[config] run.yaml:20: trainig: unknown key (did you mean training?)");
  // Right key, wrong section.
  EXPECT_EQ(error_of(std::string(kValid) + "  lr: 0.1\n"),
            "[config] run.yaml:20: training.lr: unknown key (did you mean optimizer.lr?)");
  EXPECT_EQ(error_of(std::string(kValid) + "  zzzzzz: 1\n"),
            "[config] run.yaml:20: training.zzzzzz: unknown key");
}

TEST(ConfigErrors, WrongTypes) {
  EXPECT_EQ(error_of("training:\n  steps: 1.5\n"),
            "[config] run.yaml:2: training.steps: expected an integer, got '1.5'");
  EXPECT_EQ(error_of("optimizer:\n  lr: fast\n"),
            "[config] run.yaml:2: optimizer.lr: expected a number, got 'fast'");
  EXPECT_EQ(error_of("optimizer:\n  muon:\n    nesterov: yes\n"),
            "[config] run.yaml:3: optimizer.muon.nesterov: expected true or false, got 'yes'");
  EXPECT_EQ(error_of("optimizer:\n  betas: [0.9, x]\n"),
            "[config] run.yaml:2: optimizer.betas[1]: expected a number, got 'x'");
  EXPECT_EQ(error_of("data:\n  path: [a, b]\n"),
            "[config] run.yaml:2: data.path: expected a string, got a list");
  EXPECT_EQ(error_of("training: 5\n"),
            "[config] run.yaml:1: training: expected a mapping of keys, got '5'");
  EXPECT_EQ(error_of("optimizer:\n  groups:\n    - params: [a]\n      lr: x\n"),
            "[config] run.yaml:4: optimizer.groups[0].lr: expected a number or null, got 'x'");
}

TEST(ConfigErrors, OutOfRange) {
  EXPECT_EQ(error_of(std::string(kValid) + "  grad_clip: -1\n"),
            "[config] run.yaml:20: training.grad_clip: must be >= 0, got -1");
  EXPECT_EQ(error_of(std::string(kValid) + "lr_scheduler:\n  min_lr_ratio: 1.5\n"),
            "[config] run.yaml:21: lr_scheduler.min_lr_ratio: must be <= 1, got 1.5");
  EXPECT_EQ(error_of(kValid, {"optimizer.betas=[0.9, 1.0]"}),
            "[config] --set optimizer.betas=[0.9, 1.0]: optimizer.betas: must be < 1, got 1");
  EXPECT_EQ(error_of(kValid, {"optimizer.betas=[0.9]"}),
            "[config] --set optimizer.betas=[0.9]: optimizer.betas: must have 2 elements, got 1");
  // Non-finite numbers, in any spelling, are refused naming the key (nan passes every bound).
  EXPECT_EQ(error_of(kValid, {"optimizer.lr=inf"}),
            "[config] --set optimizer.lr=inf: optimizer.lr: must be a finite number, got inf");
  EXPECT_EQ(error_of(kValid, {"optimizer.lr=.nan"}),
            "[config] --set optimizer.lr=.nan: optimizer.lr: must be a finite number, got nan");
  EXPECT_EQ(error_of(kValid, {"optimizer.betas=[0.9, -.inf]"}),
            "[config] --set optimizer.betas=[0.9, -.inf]: optimizer.betas: must be a finite "
            "number, got -inf");
  EXPECT_EQ(error_of(kValid, {"optimizer.name=sgd"}),
            "[config] --set optimizer.name=sgd: optimizer.name: must be one of adamw|muon, got "
            "'sgd'");
  // A rejected word holds its default, so the checks across fields wait: without that, pp 2
  // would be judged against schedule 1f1b, a value the user never wrote.
  EXPECT_EQ(error_of(kValid, {"parallel.pp=2", "parallel.pipeline.schedule=dualpipe"}),
            "[config] --set parallel.pipeline.schedule=dualpipe: parallel.pipeline.schedule: must "
            "be one of gpipe|1f1b|interleaved_1f1b|zb_h1|zb_h2, got 'dualpipe'");
  EXPECT_EQ(error_of(kValid, {"optimizer.groups=[{params: []}]"}),
            "[config] --set optimizer.groups=[{params: []}]: optimizer.groups[0].params: must "
            "not be empty");
}

TEST(ConfigErrors, InconsistentCombinations) {
  EXPECT_EQ(error_of(std::string(kValid) + "lr_scheduler:\n  warmup_steps: 200\n"),
            "[config] run.yaml:21: lr_scheduler.warmup_steps: 200 exceeds training.steps (100)");
  EXPECT_EQ(error_of(kValid, {"model.kv_heads=3"}),
            "[config] --set model.kv_heads=3: model.kv_heads: 3 does not divide model.heads (4)");
  EXPECT_EQ(error_of(kValid, {"parallel.tp=4"}),
            "[config] --set parallel.tp=4: parallel.tp: 4 does not divide model.kv_heads (2)");
  EXPECT_EQ(error_of(kValid, {"model.intermediate=129", "parallel.tp=2"}),
            "[config] --set parallel.tp=2: parallel.tp: 2 does not divide model.intermediate "
            "(129)");
  EXPECT_EQ(error_of(kValid, {"parallel.plan=[{modules: ['*'], style: diagonal}]"}),
            "[config] --set parallel.plan=[{modules: ['*'], style: diagonal}]: "
            "parallel.plan[0].style: must be one of colwise|rowwise|sequence|replicate, got "
            "'diagonal'");
  // Both sides of model.path / model.arch in one file (a --set of one replaces the other: below).
  std::string both = kValid;
  both.replace(both.find("  arch:"), 0, "  path: /models/llama\n");
  EXPECT_EQ(error_of(both),
            "[config] run.yaml:3: model.arch: give model.path or model.arch, not both");
  EXPECT_EQ(error_of("data:\n  path: c.txt\n"),
            "[config] run.yaml: model.path: required (or model.arch with the size fields)");
  EXPECT_EQ(error_of(kValid, {"training.grad_accum=3"}),
            "[config] run.yaml:19: training.batch_size: 8 does not divide into grad_accum × "
            "dp_shard × dp_replicate = 3 equal micro-batches");
}

TEST(ConfigErrors, SyntaxDuplicatesAndSeveralAtOnce) {
  EXPECT_EQ(error_of("training:\n  steps: [1\n"),
            "[config] run.yaml:3: invalid YAML: end of sequence flow not found");
  EXPECT_EQ(error_of("training:\n  steps: 1\n  steps: 2\n"),
            "[config] run.yaml:3: training.steps: duplicate key");
  EXPECT_EQ(error_of("training:\n  stepz: 1\n  seed: -1\nmodel:\n  path: m\ndata:\n  path: d\n"),
            "[config] run.yaml:2: training.stepz: unknown key (did you mean training.steps?)");
  EXPECT_EQ(error_of("training:\n  seed: -1\n  steps: 0\nmodel:\n  path: m\ndata:\n  path: d\n"),
            "[config] run.yaml:3: training.steps: must be >= 1, got 0\n"
            "[config] run.yaml:2: training.seed: must be >= 0, got -1");
}

TEST(Config, SchemaListsEveryFieldWithTypeDefaultAndDoc) {
  const std::string s = schema_text();
  for (const char* key : {"run.dir",
                          "training.steps",
                          "training.seed",
                          "training.batch_size",
                          "training.seq_len",
                          "training.grad_accum",
                          "training.grad_clip",
                          "checkpoint.interval",
                          "checkpoint.keep",
                          "metrics.log_every",
                          "model.path",
                          "model.arch",
                          "model.kv_heads",
                          "data.format",
                          "optimizer.betas",
                          "optimizer.muon.update_scale",
                          "optimizer.groups[].params",
                          "lr_scheduler.decay_fraction",
                          "parallel.fsdp.reshard_after_forward",
                          "low_precision.exclude",
                          "recompute.every_k_layers"})
    EXPECT_NE(s.find(std::string(key) + " "), std::string::npos) << key;
  EXPECT_NE(s.find("training.steps"), std::string::npos);
  EXPECT_NE(s.find("int"), std::string::npos);
  EXPECT_NE(s.find("rms_match|shape"), std::string::npos);
  EXPECT_NE(s.find("# number of optimizer steps"), std::string::npos) << s;
}

// auto resolves by the CPU: bf16 only where bf16 is multiplied natively; the explicit values
// are taken as written.
TEST(Config, MixedPrecisionAutoFollowsNativeBf16) {
  const Config a = parse_config(kValid, "run.yaml", {"training.mixed_precision=auto"});
  EXPECT_EQ(compute_dtype(a), kernels::bf16_compute_pays() ? DType::bf16 : DType::f32)
      << kernels::isa_summary();
  EXPECT_EQ(compute_dtype(parse_config(kValid, "run.yaml", {"training.mixed_precision=f32"})),
            DType::f32);
  EXPECT_EQ(compute_dtype(parse_config(kValid, "run.yaml", {"training.mixed_precision=bf16"})),
            DType::bf16);
  EXPECT_NE(kernels::isa_summary().find(std::string("kernels ") +
                                        kernels::isa_name(kernels::active_isa())),
            std::string::npos);
  EXPECT_THROW(parse_config(kValid, "run.yaml", {"training.mixed_precision=fp16"}), ValueError);
}

// training.mixed_precision, and parallel.fsdp.param_dtype as its deprecated alias.
TEST(Config, MixedPrecisionAndItsDeprecatedAlias) {
  const std::string note =
      "[config] parallel.fsdp.param_dtype is deprecated: use training.mixed_precision";
  EXPECT_EQ(parse_config(kValid, "run.yaml").training.mixed_precision,
            MixedPrecision::bf16);  // the default
  Config c = parse_config(kValid, "run.yaml", {"training.mixed_precision=f32"});
  EXPECT_EQ(c.training.mixed_precision, MixedPrecision::f32);
  EXPECT_TRUE(c.notes.lines.empty());
  // The alias, in the file or from --set: its value is used, and the config notes it once.
  const std::string old_yaml = std::string(kValid) + "parallel:\n  fsdp:\n    param_dtype: f32\n";
  Config a = parse_config(old_yaml, "run.yaml");
  EXPECT_EQ(a.training.mixed_precision, MixedPrecision::f32);
  EXPECT_EQ(a.notes.lines, std::vector<std::string>{note});
  Config b = parse_config(kValid, "run.yaml", {"parallel.fsdp.param_dtype=f32"});
  EXPECT_EQ(b.training.mixed_precision, MixedPrecision::f32);
  EXPECT_EQ(b.notes.lines, std::vector<std::string>{note});
  // Set in the file and again by --set: still one note.
  EXPECT_EQ(parse_config(old_yaml, "run.yaml", {"parallel.fsdp.param_dtype=bf16"}).notes.lines,
            std::vector<std::string>{note});
  // The resolved YAML has the new key only and reads back equal, without the note.
  const std::string y = to_yaml(a);
  EXPECT_NE(y.find("  mixed_precision: f32\n"), std::string::npos) << y;
  EXPECT_EQ(y.find("param_dtype"), std::string::npos) << y;
  Config back = parse_config(y, "resolved.yaml");
  EXPECT_TRUE(back == a);
  EXPECT_TRUE(back.notes.lines.empty());
  // Both keys: an error naming both, wherever each was set.
  EXPECT_EQ(error_of(std::string(kValid) + "  mixed_precision: bf16\nparallel:\n  fsdp:\n" +
                     "    param_dtype: f32\n"),
            "[config] run.yaml:23: parallel.fsdp.param_dtype: deprecated alias of "
            "training.mixed_precision, which is also set (run.yaml:20): keep only "
            "training.mixed_precision");
  EXPECT_EQ(error_of(kValid, {"parallel.fsdp.param_dtype=f32", "training.mixed_precision=f32"}),
            "[config] --set parallel.fsdp.param_dtype=f32: parallel.fsdp.param_dtype: deprecated "
            "alias of training.mixed_precision, which is also set (--set "
            "training.mixed_precision=f32): keep only training.mixed_precision");
  // A bad value given through the alias is reported at the alias.
  EXPECT_EQ(error_of(kValid, {"parallel.fsdp.param_dtype=f16"}),
            "[config] --set parallel.fsdp.param_dtype=f16: parallel.fsdp.param_dtype: must be one "
            "of auto|f32|bf16, got 'f16'");
  EXPECT_EQ(error_of(kValid, {"parallel.fsdp.param_dtype=[f32]"}),
            "[config] --set parallel.fsdp.param_dtype=[f32]: training.mixed_precision: expected a "
            "string, got a list");
  // `hp config schema` lists the key, and the alias as deprecated.
  const std::string s = schema_text();
  EXPECT_NE(s.find("training.mixed_precision "), std::string::npos) << s;
  EXPECT_NE(s.find("# deprecated: use training.mixed_precision"), std::string::npos) << s;
}

// A --set of a deprecated alias or of its target replaces the file's other spelling (the
// degenerate exclusive group {alias} vs {target}). Before: "deprecated alias of ..., which is also
// set".
TEST(Config, SetOfAliasOrTargetReplacesTheFilesOther) {
  const std::string new_yaml = std::string(kValid) + "  mixed_precision: bf16\n";
  Config a = parse_config(new_yaml, "run.yaml", {"parallel.fsdp.param_dtype=f32"});
  EXPECT_EQ(a.training.mixed_precision, MixedPrecision::f32);
  EXPECT_EQ(a.notes.lines,
            (std::vector<std::string>{
                "[config] parallel.fsdp.param_dtype is deprecated: use training.mixed_precision",
                "[config] --set parallel.fsdp.param_dtype=f32 replaces the file's "
                "training.mixed_precision (run.yaml:20) (back to the default)"}));
  const std::string old_yaml = std::string(kValid) + "parallel:\n  fsdp:\n    param_dtype: f32\n";
  Config b = parse_config(old_yaml, "run.yaml", {"training.mixed_precision=bf16"});
  EXPECT_EQ(b.training.mixed_precision, MixedPrecision::bf16);
  EXPECT_EQ(b.notes.lines, std::vector<std::string>{
                               "[config] --set training.mixed_precision=bf16 replaces the file's "
                               "parallel.fsdp.param_dtype (run.yaml:22) (back to the default)"});
}

// An exclusive group's --set replaces the file's choice: model.path drops model.arch and every
// size of a model built from it (with their origins), data.sources drops data.path, eval.split
// drops eval.data and eval.format, and the other way round. Before: "give ... not both".
TEST(Config, SetOfOneSideOfAGroupReplacesTheFilesOther) {
  Config c = parse_config(kValid, "run.yaml", {"model.path=/models/llama"});
  EXPECT_EQ(c.model.path, "/models/llama");
  EXPECT_EQ(c.model.arch, "");
  EXPECT_EQ(c.model.hidden, ModelSection{}.hidden);
  EXPECT_EQ(c.model.vocab, ModelSection{}.vocab);
  EXPECT_EQ(c.notes.lines,
            std::vector<std::string>{
                "[config] --set model.path=/models/llama replaces the file's model.arch "
                "(run.yaml:2), model.hidden (run.yaml:3), model.layers (run.yaml:4), model.heads "
                "(run.yaml:5), model.kv_heads (run.yaml:6), model.intermediate (run.yaml:7), "
                "model.vocab (run.yaml:8) (back to the default)"});
  // Back again: a --set of a size replaces the file's model.path (arch comes with it).
  Config d = parse_config("model:\n  path: /m\ndata:\n  path: d\n", "r.yaml",
                          {"model.arch=llama", "model.hidden=64", "model.layers=2", "model.heads=4",
                           "model.kv_heads=2", "model.intermediate=128"});
  EXPECT_EQ(d.model.path, "");
  EXPECT_EQ(d.model.arch, "llama");
  // data.sources vs data.path; eval.split vs eval.data (+ eval.format, which describes it).
  const std::string with_eval = std::string(kValid) + "eval:\n  data: v.txt\n  format: text\n";
  Config e = parse_config(with_eval, "run.yaml", {"data.sources=[{path: a}, {path: b}]"});
  EXPECT_EQ(e.data.path, "");
  EXPECT_EQ(e.data.sources.size(), 2u);
  Config f = parse_config(with_eval, "run.yaml", {"eval.split=0.1"});
  EXPECT_EQ(f.eval.data, "");
  EXPECT_FALSE(f.eval.format.has_value());
  EXPECT_EQ(f.eval.split, 0.1);
  // Both sides by --set stay an error, as both sides in one file do.
  const std::string both = error_of(kValid, {"model.path=/m", "model.arch=llama"});
  EXPECT_EQ(
      both.rfind("[config] --set model.arch=llama: model.arch: give model.path or model.arch, not "
                 "both\n",
                 0),
      0u)
      << both;
  // Each replaced key's origin is cleared: none of them is "given" any more, so a resolved config
  // reads back equal.
  Config back = parse_config(to_yaml(c), "resolved.yaml");
  EXPECT_TRUE(back == c);
}

// `--set key=null` resets any key to its default and clears its origin. Before: "expected a
// string, got null" (and so for every type but float?).
TEST(Config, SetNullResetsToTheDefault) {
  Config c = parse_config(
      kValid, "run.yaml",
      {"model.arch=null", "model.hidden=null", "model.layers=null", "model.heads=null",
       "model.kv_heads=null", "model.intermediate=null", "model.vocab=~", "model.path=/m",
       "optimizer.name=null", "optimizer.groups=null", "training.steps=null",
       "optimizer.betas=null", "data.document_mask=null", "checkpoint.save_final=false",
       "checkpoint.save_final=null", "optimizer.lr=null"});
  const Config d;
  EXPECT_EQ(c.model.arch, "");
  EXPECT_EQ(c.model.hidden, d.model.hidden);
  EXPECT_EQ(c.optimizer.name, d.optimizer.name);
  EXPECT_TRUE(c.optimizer.groups.empty());
  EXPECT_EQ(c.training.steps, d.training.steps);
  EXPECT_EQ(c.optimizer.betas, d.optimizer.betas);
  EXPECT_EQ(c.checkpoint.save_final, d.checkpoint.save_final);  // bool
  EXPECT_EQ(c.optimizer.lr, d.optimizer.lr);                    // float
  EXPECT_EQ(c.data.document_mask, d.data.document_mask);        // enum
  EXPECT_TRUE(c.notes.lines.empty()) << "the nulls left nothing of the file's model.arch to drop";
  // The origin is cleared: the required-key error names the file, not the flag.
  EXPECT_EQ(error_of(kValid, {"data.path=null"}),
            "[config] run.yaml: data.path: required (or data.sources)");
  // A null alias resets its target.
  EXPECT_EQ(parse_config(std::string(kValid) + "  mixed_precision: f32\n", "run.yaml",
                         {"parallel.fsdp.param_dtype=null"})
                .training.mixed_precision,
            d.training.mixed_precision);
}

// A size of a model built from model.arch given with model.path would be silently unused: it is
// refused, naming the key (at its default, as a resolved config writes it, it is fine). Before:
// accepted.
TEST(ConfigErrors, SizeWithModelPathIsRefused) {
  EXPECT_EQ(error_of("model:\n  path: /m\n  hidden: 64\ndata:\n  path: d\n"),
            "[config] run.yaml:3: model.hidden: describes a model built from model.arch; "
            "model.path's config.json gives it (remove it)");
  // Both by --set (a --set of a size alone replaces the file's model.path, as above).
  EXPECT_EQ(error_of("data:\n  path: d\n", {"model.path=/m", "model.tie_embeddings=true"}),
            "[config] --set model.tie_embeddings=true: model.tie_embeddings: describes a model "
            "built from model.arch; model.path's config.json gives it (remove it)");
  EXPECT_EQ(error_of("model:\n  path: /m\n  vocab: 0\n  router_bias_update_rate: "
                     "0.001\ndata:\n  path: d\n"),
            "(no error)");
}

// model.arch offers the architecture table's rows buildable from sizes (models/hf/registry.h), read
// when the config is parsed: a registered architecture is accepted, DeepSeek-V3 (MLA, built from a
// config.json) is refused by the table's flag, and the MoE checks follow the rows' expert keys.
TEST(Config, ArchChoicesComeFromTheArchitectureTable) {
  const auto offered = [] {
    std::string out;
    for (const auto& n : models::sized_architecture_names()) out += (out.empty() ? "" : "|") + n;
    return out;
  };
  EXPECT_EQ(offered().rfind("llama|qwen2|qwen3|qwen3_moe|mixtral", 0), 0u) << offered();
  const std::string bars = "|" + offered() + "|";
  for (const auto& a : models::architectures()) {
    std::string name = "|";
    name.append(a.short_name).append("|");
    EXPECT_EQ(bars.find(name) != std::string::npos, a.buildable_from_sizes) << a.short_name;
  }
  EXPECT_NE(schema_text().find(offered()), std::string::npos);
  EXPECT_EQ(
      error_of(kValid, {"model.arch=gpt2"}),
      "[config] --set model.arch=gpt2: model.arch: must be one of " + offered() + ", got 'gpt2'");
  EXPECT_EQ(error_of(kValid, {"model.arch=deepseek_v3"}),
            "[config] --set model.arch=deepseek_v3: model.arch: deepseek_v3 "
            "(DeepseekV3ForCausalLM) is built from a config.json, not from sizes: use model.path");
  EXPECT_EQ(error_of(kValid, {"model.arch=mixtral"}),
            "[config] run.yaml: model.experts: must be >= 1 with model.arch mixtral");
  EXPECT_EQ(error_of(kValid, {"model.experts=4", "model.experts_per_token=2"}),
            "[config] --set model.experts=4: model.experts: needs model.arch qwen3_moe, "
            "mixtral or deepseek_v4, got 'llama'");
  // DeepSeek-V4 from sizes: one K = V head shared by every query head.
  EXPECT_EQ(
      error_of(kValid, {"model.arch=deepseek_v4", "model.experts=4", "model.experts_per_token=2"}),
      "[config] run.yaml:6: model.kv_heads: must be 1 with model.arch deepseek_v4 (one "
      "key/value head shared by every query head), got 2");
  EXPECT_EQ(parse_config(kValid, "run.yaml",
                         {"model.arch=qwen3_moe", "model.experts=4", "model.experts_per_token=2"})
                .model.experts,
            4);

  // Registered at run time: offered from the next parse on.
  const std::vector<std::string> mine = {"model.arch=config_test_llama"};
  EXPECT_NE(error_of(kValid, mine).find("model.arch: must be one of"), std::string::npos);
  models::Architecture row = models::architecture("LlamaForCausalLM");
  row.hf_class = "ConfigTestLlamaForCausalLM";
  row.model_type = row.short_name = "config_test_llama";
  models::register_architecture(row);
  EXPECT_EQ(parse_config(kValid, "run.yaml", mine).model.arch, "config_test_llama");
  EXPECT_NE(offered().find("|config_test_llama"), std::string::npos);
  // Not buildable from sizes: refused with the table's reason.
  row.buildable_from_sizes = false;
  models::register_architecture(row);
  EXPECT_EQ(error_of(kValid, mine),
            "[config] --set model.arch=config_test_llama: model.arch: config_test_llama "
            "(ConfigTestLlamaForCausalLM) is built from a config.json, not from sizes: use "
            "model.path");
}

TEST(Config, BuildsOptimizerOptionsAndSchedule) {
  Config c = parse_config(kValid, "run.yaml", {"lr_scheduler.warmup_steps=10"});
  optim::OptimizerOptions o = optimizer_options(c.optimizer);
  // Routers' correction biases and DeepSeek-V4's hash-routing tables (no weight decay, first),
  // the config's group, Muon's AdamW group.
  ASSERT_EQ(o.groups.size(), 3u);
  EXPECT_EQ(o.groups[0].globs,
            (std::vector<std::string>{"*.e_score_correction_bias", "*.tid2eid"}));
  EXPECT_EQ(o.groups[0].weight_decay, 0.0);
  EXPECT_EQ(o.groups[1].weight_decay, 0.0);
  EXPECT_EQ(o.groups[2].algorithm, optim::Algorithm::adamw);  // embeddings and head
  EXPECT_EQ(o.default_algorithm, optim::Algorithm::auto_select);
  std::vector<optim::NamedTensor> params = {
      {"embed_tokens.weight", zeros({8, 4})},
      {"layers.0.mlp.up.weight", zeros({8, 4})},
      {"layers.0.norm.weight", zeros({4})},
      {"lm_head.weight", zeros({8, 4})},
      {"layers.0.mlp.gate.e_score_correction_bias", zeros({8})}};
  optim::Optimizer opt(params, o);
  const auto& e = opt.entries();
  EXPECT_EQ(e[0].algorithm, optim::Algorithm::adamw);
  EXPECT_EQ(e[1].algorithm, optim::Algorithm::muon);
  EXPECT_EQ(e[2].algorithm, optim::Algorithm::adamw);
  EXPECT_EQ(e[2].weight_decay, 0.0);
  EXPECT_EQ(e[3].algorithm, optim::Algorithm::adamw);
  EXPECT_EQ(e[4].algorithm, optim::Algorithm::adamw);
  EXPECT_EQ(e[4].weight_decay, 0.0);
  auto spec = schedule_spec(c);
  EXPECT_EQ(spec.total_steps, 100);
  EXPECT_EQ(spec.warmup_steps, 10);
  EXPECT_DOUBLE_EQ(optim::lr_factor(spec, 99), 0.0);
}

}  // namespace
}  // namespace hp::train

namespace hp::train {
namespace {

TEST(ConfigErrors, PipelineKeys) {
  const std::vector<std::string> pp2 = {"parallel.pp=2", "training.grad_accum=4"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), pp2.begin(), pp2.end());
    return more;
  };
  EXPECT_EQ(error_of(kValid, with({"parallel.pipeline.layers_per_stage=[2, 1]"})),
            "[config] --set parallel.pipeline.layers_per_stage=[2, 1]: "
            "parallel.pipeline.layers_per_stage: [2, 1] sums to 3, not model.layers = 2");
  EXPECT_EQ(error_of(kValid, with({"parallel.pipeline.layers_per_stage=[2]"})),
            "[config] --set parallel.pipeline.layers_per_stage=[2]: "
            "parallel.pipeline.layers_per_stage: [2] has 1 entries for 2 stages (parallel.pp × "
            "parallel.pipeline.virtual_stages)");
  EXPECT_EQ(error_of(kValid, with({"parallel.pipeline.schedule=dualpipe"})),
            "[config] --set parallel.pipeline.schedule=dualpipe: parallel.pipeline.schedule: must "
            "be one of gpipe|1f1b|interleaved_1f1b|zb_h1|zb_h2, got 'dualpipe'");
  // Neither key given: one microbatch per stage, said in the config's notes; given as 1: refused.
  const Config defaulted = parse_config(kValid, "run.yaml", {"parallel.pp=2"});
  EXPECT_EQ(defaulted.training.grad_accum, 2);
  ASSERT_EQ(defaulted.notes.lines.size(), 1u);
  EXPECT_EQ(defaulted.notes.lines[0],
            "[config] parallel.pipeline.microbatches: 2 (not given: schedule 1f1b needs one per "
            "stage; training.grad_accum follows)");
  EXPECT_EQ(parse_config(kValid, "run.yaml", {"parallel.pp=2", "parallel.pipeline.schedule=gpipe"})
                .training.grad_accum,
            1);
  EXPECT_EQ(error_of(kValid, {"parallel.pp=2", "training.grad_accum=1"}),
            "[config] run.yaml: parallel.pipeline.microbatches: 1 (training.grad_accum when 0) is "
            "fewer than parallel.pp = 2: schedule 1f1b needs at least one microbatch per stage");
  EXPECT_EQ(error_of(kValid, {"parallel.pp=2", "parallel.pipeline.schedule=gpipe"}), "(no error)");
  EXPECT_EQ(error_of(kValid, with({"parallel.pipeline.microbatches=2"})),
            "[config] --set parallel.pipeline.microbatches=2: parallel.pipeline.microbatches: 2 "
            "differs from training.grad_accum (4): give one of them");
  EXPECT_EQ(error_of(kValid, {"parallel.pp=4", "parallel.pipeline.schedule=gpipe"}),
            "[config] --set parallel.pp=4: parallel.pp: 4 × parallel.pipeline.virtual_stages 1 = "
            "4 stages for model.layers = 2: every stage needs a layer");
  EXPECT_EQ(error_of(kValid, with({"model.layers=4", "parallel.pipeline.virtual_stages=2"})),
            "[config] --set parallel.pipeline.virtual_stages=2: parallel.pipeline.virtual_stages: "
            "2 needs schedule interleaved_1f1b, not 1f1b");
  EXPECT_EQ(error_of(kValid, with({"parallel.pipeline.stage_ranks=[1, 2, 1]"})),
            "[config] --set parallel.pipeline.stage_ranks=[1, 2, 1]: "
            "parallel.pipeline.stage_ranks: [1, 2, 1] has 3 entries for parallel.pp = 2");
  EXPECT_EQ(error_of(kValid, with({"parallel.pipeline.stage_ranks=[1, 3]", "parallel.tp=2"})),
            "[config] --set parallel.pipeline.stage_ranks=[1, 3]: "
            "parallel.pipeline.stage_ranks: [1, 3] needs parallel.tp, cp, dp_replicate, ep and "
            "parallel.pipeline.virtual_stages 1");
  // Zero bubble splits the linears' backward, which MX GEMM kernels do not (FSDP and bf16 do).
  EXPECT_EQ(
      error_of(kValid, with({"parallel.pipeline.schedule=zb_h2", "low_precision.recipe=mxfp8"})),
      "[config] --set parallel.pipeline.schedule=zb_h2: parallel.pipeline.schedule: zb_h2 "
      "splits the linear layers' backward, which low_precision.recipe mxfp8 (MX GEMM "
      "kernels) does not support; use 1f1b");
  EXPECT_EQ(error_of(kValid, with({"parallel.pipeline.schedule=zb_h1",
                                   "training.mixed_precision=bf16", "parallel.dp_shard=2"})),
            "(no error)");
  // The example config loads, its microbatches setting training.grad_accum.
  const Config example = load_config(std::string(HP_TEST_DIR) + "/../../configs/pipeline.yaml");
  EXPECT_EQ(example.parallel.pp, 2);
  EXPECT_EQ(example.training.grad_accum, 8);
  // microbatches alone sets training.grad_accum (the batch splits the same way).
  const Config c =
      parse_config(kValid, "run.yaml", {"parallel.pp=2", "parallel.pipeline.microbatches=4"});
  EXPECT_EQ(c.training.grad_accum, 4);
  EXPECT_EQ(parse_config(to_yaml(c), "resolved"), c);
}

}  // namespace
}  // namespace hp::train
