// A compiled fusion program: passes of (routine, operand slots) steps run tile by tile over blocks
// of rows, with per-row scalars ("col registers") between them (docs/FUSION.md "Execution").
//
// The domain of a program is [M, N]: N the last dim of the broadcast shape, M the rows (a program
// without reductions or row/column broadcasts is flattened to one row of every element). Values are
// of four classes: full ([M, N]), row ([N], broadcast over rows), col ([M, 1], one per row: a
// reduction or a [..., 1] input) and scalar (a literal, folded at compile time).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hp/fusion/ir.h"
#include "hp/fusion/routines.h"
#include "hp/fusion/stencils.h"

namespace hp::fusion {

// Budgets of the split (docs/FUSION.md "Compile", steps 2-3): a pass keeps every tile it touches
// (slots, streamed inputs, outputs, kept values) in L1; tiles shrink from kTileMax to kTileMin
// elements as the streams grow, and a pass needing more than kMaxStreams streams is split in two,
// the values live across the cut kept in the block scratch.
inline constexpr int64_t kL1Bytes = 24 << 10;
inline constexpr int64_t kTileMax = 1024;  // elements per tile of one stream (4 KiB f32)
inline constexpr int64_t kTileMin = 256;
inline constexpr int kMaxStreams = static_cast<int>(kL1Bytes / (kTileMin * 4));  // 24
// A block (the unit of parallel work) covers about kBlockElems elements of the domain: whole rows
// when the program reduces, so its kept values (and re-read inputs) stay in L2 between passes.
inline constexpr int64_t kBlockElems = 16384;

enum class Cls : uint8_t { scalar, col, row, full };

// Where a vector operand lives for the current tile (r, c .. c + w).
enum class LocKind : uint8_t { slot, input, keep, output };
struct Loc {
  LocKind kind = LocKind::slot;
  Cls cls = Cls::full;  // input / output: full ([M, N], row r) or row ([N])
  int16_t index = 0;
  uint8_t elem = 4;  // bytes per element in memory (2 for bf16 inputs and outputs)
};

enum class StepKind : uint8_t {
  ew,          // out = EwTable::f32[op](in[0..arity))
  ew_vs,       // out = op(in[0], s)
  ew_sv,       // out = op(s, in[0])
  select,      // out = in[0] != 0 ? in[1] : in[2]
  fill,        // out = s
  load_bf16,   // out = widen(in[0]) (bf16 in memory)
  round_bf16,  // out = round_bf16(in[0])
  copy,        // out = in[0]
  store_bf16,  // out (bf16 in memory) = in[0]
  reduce,      // acc[acc] ⊕= in[0]; at the row's last chunk col[out] = the row's result
  chain,       // out = the chain Pass::chain[acc .. acc + count) in registers (routines.h)
  row_sum,     // the block's partial sum acc (of Program::num_row_sums) += in[0]
};
// s of ew_vs / ew_sv / fill: col register `scalar`, or p[3] when scalar < 0.
struct Step {
  StepKind kind = StepKind::ew;
  uint8_t op = 0;   // EwOp, or RedOp for reduce
  int16_t out = 0;  // a Loc index of the pass (a col register for reduce)
  int16_t in[3] = {0, 0, 0};
  int16_t scalar = -1;
  int16_t acc = 0;
  int16_t count = 0;
  float p[4] = {0, 0, 0, 0};
};

struct Pass {
  std::vector<Loc> locs;
  std::vector<Step> steps;
  int64_t tile = kTileMax;  // elements per tile (a multiple of 64: reductions stream in 4·W)
  int num_acc = 0;
  std::vector<ChainOp> chain;         // the ops of this pass's chain steps (src: a Loc index)
  std::vector<int16_t> chain_scalar;  // per chain op: the col register of s, or -1 (s is set)
};

// Per-row scalar work between passes, over the block's R rows at once (the same routines).
enum class ColKind : uint8_t { ew, ew_vs, ew_sv, select, fill, round_bf16, copy, load_input };
struct ColStep {
  ColKind kind = ColKind::ew;
  uint8_t op = 0;
  int16_t out = 0;            // col register
  int16_t in[3] = {0, 0, 0};  // col registers; load_input: the input index
  float p[4] = {0, 0, 0, 0};
};

struct Stage {
  std::vector<ColStep> before;  // col values this stage's passes read
  std::vector<Pass> passes;
};

struct OutputSpec {
  Shape shape;
  DType dtype = DType::f32;
  Cls cls = Cls::full;
  int16_t col = -1;      // col outputs: the register written back per block
  int16_t row_sum = -1;  // sum_rows outputs: the partial sums combined after all blocks
};

struct Program {
  // A matched pattern (stencils.h): run by its hand kernel; the passes below are then empty.
  Stencil stencil;
  int64_t M = 0, N = 0;  // domain rows and columns
  int64_t rows_per_block = 1, cols_per_block = 0;
  std::vector<Cls> input_cls;  // per argument
  std::vector<DType> input_dtype;
  std::vector<Stage> stages;
  std::vector<ColStep> after;  // col values computed from the last stage's reductions
  std::vector<OutputSpec> outputs;
  int num_slots = 0, num_keeps = 0, num_cols = 0, num_acc = 0, num_row_sums = 0;
  int num_steps = 0;  // over all passes (stats, tests)
  int num_passes = 0;
};

// Compiles a traced graph (inputs already bound to shapes and dtypes). Returns null and sets
// *why (one line) when the graph is outside what the engine fuses: an opaque op, a dtype other
// than f32/bf16, a broadcast that is not scalar/row/column, or an empty domain.
std::shared_ptr<const Program> compile(const Graph& g, std::string* why);

// A readable listing: stages, passes, steps with their locations.
std::string describe(const Program& prog);

// A program that runs stencil s (matched on g by match_stencil): outputs as g's, no passes.
std::shared_ptr<const Program> stencil_program(const Graph& g, const Stencil& s);

// Runs a program on contiguous inputs; returns the outputs (new tensors).
std::vector<Tensor> run_program(const Program& prog, const std::vector<Tensor>& inputs);

// The unfused reference: every node through its eager kernel, in order (also the fallback).
std::vector<Tensor> run_eager(const Graph& g, const std::vector<Tensor>& inputs);

}  // namespace hp::fusion
