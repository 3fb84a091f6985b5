// The YAML spelling of every value of the config enums (config.h; enum_names.h), in the order
// "must be one of ..." lists them. The config's YAML, `hp config`, log lines and error messages all
// spell a value from here. The tables of the enums the config takes from its components (data.format,
// recompute.mode, lr_scheduler.name, muon, fusion, mxfp8) live beside those enums.
#include "hp/train/config.h"

namespace hp::train {

std::span<const EnumName<AutoFlag>> enum_names(AutoFlag) {
  using enum AutoFlag;
  static constexpr EnumName<AutoFlag> names[] = {{"auto", auto_}, {"true", on}, {"false", off}};
  return names;
}

std::span<const EnumName<MuonUpdateScale>> enum_names(MuonUpdateScale) {
  using enum MuonUpdateScale;
  static constexpr EnumName<MuonUpdateScale> names[] = {{"rms_match", rms_match}, {"shape", shape}};
  return names;
}

std::span<const EnumName<OptimizerName>> enum_names(OptimizerName) {
  using enum OptimizerName;
  static constexpr EnumName<OptimizerName> names[] = {{"adamw", adamw}, {"muon", muon}};
  return names;
}

std::span<const EnumName<GroupOptimizer>> enum_names(GroupOptimizer) {
  using enum GroupOptimizer;
  static constexpr EnumName<GroupOptimizer> names[] = {
      {"auto", auto_}, {"adamw", adamw}, {"muon", muon}};
  return names;
}

std::span<const EnumName<MixedPrecision>> enum_names(MixedPrecision) {
  using enum MixedPrecision;
  static constexpr EnumName<MixedPrecision> names[] = {
      {"auto", auto_}, {"f32", f32}, {"bf16", bf16}};
  return names;
}

std::span<const EnumName<ReduceDtype>> enum_names(ReduceDtype) {
  using enum ReduceDtype;
  static constexpr EnumName<ReduceDtype> names[] = {{"f32", f32}, {"bf16", bf16}};
  return names;
}

std::span<const EnumName<MoEKernel>> enum_names(MoEKernel) {
  using enum MoEKernel;
  static constexpr EnumName<MoEKernel> names[] = {{"megamoe", megamoe}, {"sequential", sequential}};
  return names;
}

std::span<const EnumName<TpStyle>> enum_names(TpStyle) {
  using enum TpStyle;
  static constexpr EnumName<TpStyle> names[] = {
      {"colwise", colwise}, {"rowwise", rowwise}, {"sequence", sequence}, {"replicate", replicate}};
  return names;
}

std::span<const EnumName<PipelineSchedule>> enum_names(PipelineSchedule) {
  using enum PipelineSchedule;
  static constexpr EnumName<PipelineSchedule> names[] = {{"gpipe", gpipe},
                                                         {"1f1b", one_f_one_b},
                                                         {"interleaved_1f1b", interleaved_1f1b},
                                                         {"zb_h1", zb_h1},
                                                         {"zb_h2", zb_h2}};
  return names;
}

std::span<const EnumName<CpMethod>> enum_names(CpMethod) {
  using enum CpMethod;
  static constexpr EnumName<CpMethod> names[] = {{"ring", ring}, {"alltoall", alltoall}};
  return names;
}

std::span<const EnumName<LowPrecisionRecipe>> enum_names(LowPrecisionRecipe) {
  using enum LowPrecisionRecipe;
  static constexpr EnumName<LowPrecisionRecipe> names[] = {{"none", none}, {"mxfp8", mxfp8}};
  return names;
}

std::span<const EnumName<OffloadTier>> enum_names(OffloadTier) {
  using enum OffloadTier;
  static constexpr EnumName<OffloadTier> names[] = {{"none", none}, {"host", host}, {"disk", disk}};
  return names;
}

std::span<const EnumName<HostOffload>> enum_names(HostOffload) {
  using enum HostOffload;
  static constexpr EnumName<HostOffload> names[] = {{"none", none}, {"host", host}};
  return names;
}

std::span<const EnumName<ActivationSelect>> enum_names(ActivationSelect) {
  using enum ActivationSelect;
  static constexpr EnumName<ActivationSelect> names[] = {
      {"all", all}, {"largest", largest}, {"auto", auto_}};
  return names;
}

std::span<const EnumName<Progress>> enum_names(Progress) {
  using enum Progress;
  static constexpr EnumName<Progress> names[] = {
      {"auto", auto_}, {"bar", bar}, {"lines", lines}, {"none", none}};
  return names;
}

}  // namespace hp::train
