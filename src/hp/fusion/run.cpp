// Execution of a compiled program (docs/FUSION.md "Execution"): blocks of rows in parallel, and in
// each block, stage by stage, pass by pass, tile by tile, the pass's steps as calls of precompiled
// routines on L1 tiles. A block's result depends only on the block, and the blocks are a function
// of the shape alone, so results never depend on the thread count.
#include <algorithm>
#include <cstring>

#include "hp/autograd/grad_mode.h"
#include "hp/core/thread_pool.h"
#include "hp/fusion/program.h"
#include "hp/fusion/routines.h"

namespace hp::fusion {

namespace {

// Rows of the scratch are padded by a cache line: tiles exactly 4 KiB apart would make every load
// of one falsely wait on the store to another at the same address bits 11:0 (4K aliasing).
constexpr int64_t kPad = 16;
constexpr int64_t kSlotStride = kTileMax + kPad;

// Per-thread scratch: [slots][kSlotStride] tiles, [keeps][R][C + kPad] kept values of the block,
// [cols][R] col registers, [acc][kAccFloats] reduction accumulators.
struct Workspace {
  std::vector<float> buf;
  float *slots, *keeps, *cols, *acc;

  void reserve(const Program& p) {
    const int64_t R = p.rows_per_block, C = p.cols_per_block;
    const int64_t ns = p.num_slots * kSlotStride + 2 * kPad, nk = p.num_keeps * R * (C + kPad),
                  nc = p.num_cols * R, na = p.num_acc * kAccFloats;
    const size_t need = static_cast<size_t>(ns + nk + nc + na + 64);
    if (buf.size() < need) buf.resize(need);
    // 64-byte aligned start (tile loads then never split cache lines).
    float* base = buf.data();
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64 / sizeof(float);
    slots = base, keeps = slots + ns, cols = keeps + nk, acc = cols + nc;
  }
};

struct Runner {
  const Program& p;
  const kernels::EwTable& ew;
  const RoutineTable& rt;
  std::vector<const char*> in;
  std::vector<char*> out;
  float* partials = nullptr;  // [row blocks][num_row_sums][N] partial sums of sum_rows outputs

  float* col(Workspace& ws, int reg) const { return ws.cols + reg * p.rows_per_block; }

  // Col steps for rows [r0, r0 + R) of the block, whose first row is at register offset rr.
  void run_cols(Workspace& ws, const std::vector<ColStep>& steps, int64_t r0, int64_t R,
                int64_t rr) const {
    for (const ColStep& s : steps) {
      float* o = col(ws, s.out) + rr;
      if (s.kind == ColKind::load_input) {
        const int k = s.in[0];
        const bool bf = p.input_dtype[static_cast<size_t>(k)] == DType::bf16;
        const size_t el = bf ? 2 : 4;
        if (s.p[0] != 0) {  // one element for every row
          float v;
          if (bf)
            ew.bf16_to_f32(reinterpret_cast<const uint16_t*>(in[k]), &v, 1);
          else
            std::memcpy(&v, in[k], 4);
          rt.fill(o, v, R);
        } else if (bf) {
          ew.bf16_to_f32(reinterpret_cast<const uint16_t*>(in[k] + r0 * el), o, R);
        } else {
          std::memcpy(o, in[k] + r0 * 4, static_cast<size_t>(R) * 4);
        }
        continue;
      }
      const float* a[3] = {col(ws, s.in[0]) + rr, col(ws, s.in[1]) + rr, col(ws, s.in[2]) + rr};
      switch (s.kind) {
        case ColKind::ew:
          ew.f32[s.op](o, a, R, s.p);
          break;
        case ColKind::ew_vs:
          rt.vs[s.op](o, a, R, s.p);
          break;
        case ColKind::ew_sv:
          rt.sv[s.op](o, a, R, s.p);
          break;
        case ColKind::select:
          rt.select(o, a, R);
          break;
        case ColKind::fill:
          rt.fill(o, s.p[3], R);
          break;
        case ColKind::round_bf16:
          rt.round_bf16(o, a[0], R);
          break;
        case ColKind::copy:
          std::memcpy(o, a[0], static_cast<size_t>(R) * 4);
          break;
        case ColKind::load_input:
          break;  // above
      }
    }
  }

  // Rows [r_begin, r_end) of the block starting at row r0, columns [c0, c1).
  void run_pass(Workspace& ws, const Pass& ps, int64_t r0, int64_t r_begin, int64_t r_end,
                int64_t c0, int64_t c1) const {
    void* ptr[64];
    std::vector<void*> big;  // passes with more locations than the stack table
    void** P = ptr;
    if (ps.locs.size() > 64) big.resize(ps.locs.size()), P = big.data();
    const int64_t C = p.cols_per_block + kPad;  // keep row stride
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t rr = r - r0;
      for (int64_t c = c0; c < c1; c += ps.tile) {
        const int64_t w = std::min(ps.tile, c1 - c);
        for (size_t l = 0; l < ps.locs.size(); ++l) {
          const Loc& L = ps.locs[l];
          switch (L.kind) {
            case LocKind::slot:
              P[l] = ws.slots + L.index * kSlotStride;
              break;
            case LocKind::keep:
              P[l] = ws.keeps + (L.index * p.rows_per_block + rr) * C + (c - c0);
              break;
            case LocKind::input:
              P[l] =
                  const_cast<char*>(in[L.index]) + (L.cls == Cls::row ? c : r * p.N + c) * L.elem;
              break;
            case LocKind::output:
              P[l] = out[L.index] + (r * p.N + c) * L.elem;
              break;
          }
        }
        for (const Step& s : ps.steps) {
          // A chain whose value is only stored by its own store ops has no out (-1).
          float* o =
              s.kind == StepKind::reduce || s.out < 0 ? nullptr : static_cast<float*>(P[s.out]);
          const float* a[3] = {static_cast<const float*>(P[s.in[0]]),
                               static_cast<const float*>(P[s.in[1]]),
                               static_cast<const float*>(P[s.in[2]])};
          switch (s.kind) {
            case StepKind::ew:
              ew.f32[s.op](o, a, w, s.p);
              break;
            case StepKind::ew_vs:
            case StepKind::ew_sv: {
              float q[4] = {s.p[0], s.p[1], s.p[2], s.scalar >= 0 ? col(ws, s.scalar)[rr] : s.p[3]};
              (s.kind == StepKind::ew_vs ? rt.vs : rt.sv)[s.op](o, a, w, q);
              break;
            }
            case StepKind::select:
              rt.select(o, a, w);
              break;
            case StepKind::fill:
              rt.fill(o, s.scalar >= 0 ? col(ws, s.scalar)[rr] : s.p[3], w);
              break;
            case StepKind::load_bf16:
              ew.bf16_to_f32(static_cast<const uint16_t*>(P[s.in[0]]), o, w);
              break;
            case StepKind::round_bf16:
              rt.round_bf16(o, a[0], w);
              break;
            case StepKind::copy:
              if (o != a[0]) std::memcpy(o, a[0], static_cast<size_t>(w) * 4);
              break;
            case StepKind::store_bf16:
              ew.f32_to_bf16(a[0], static_cast<uint16_t*>(P[s.out]), w);
              break;
            case StepKind::chain: {
              ChainOp ops[kMaxChainOps];
              for (int k = 0; k < s.count; ++k) {
                ops[k] = ps.chain[static_cast<size_t>(s.acc + k)];
                const int16_t reg = ps.chain_scalar[static_cast<size_t>(s.acc + k)];
                if (reg >= 0) ops[k].s = col(ws, reg)[rr];
              }
              rt.chain(o, P, w, ops, s.count);
              break;
            }
            case StepKind::row_sum: {
              // Rows of a block in order into the block's own partial: no thread shares it.
              float* dst = partials + ((r0 / p.rows_per_block) * p.num_row_sums + s.acc) * p.N + c;
              const float* sum_in[2] = {dst, a[0]};
              ew.f32[static_cast<int>(kernels::EwOp::add)](dst, sum_in, w, s.p);
              break;
            }
            case StepKind::reduce: {
              // A reducing program's blocks hold whole rows: c0 == 0, c1 == N.
              float* acc = ws.acc + s.acc * kAccFloats;
              if (c == c0) rt.red_init(acc, s.op);
              if (c + w < c1)
                rt.red_chunk(acc, a[0], w, s.op);
              else
                col(ws, s.out)[rr] = rt.red_finish(acc, a[0], w, s.op);
              break;
            }
          }
        }
      }
    }
  }

  void run_block(Workspace& ws, int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    const int64_t R = r1 - r0;
    if (p.stages.size() <= 1) {
      for (const Stage& st : p.stages) {
        run_cols(ws, st.before, r0, R, 0);
        for (const Pass& ps : st.passes) run_pass(ws, ps, r0, r0, r1, c0, c1);
      }
    } else {
      // Row by row through the stages: a row (and its kept values) is still in L1 when the next
      // stage reads it, as in the hand-written row kernels.
      for (int64_t r = r0; r < r1; ++r) {
        for (const Stage& st : p.stages) {
          run_cols(ws, st.before, r, 1, r - r0);
          for (const Pass& ps : st.passes) run_pass(ws, ps, r0, r, r + 1, c0, c1);
        }
      }
    }
    run_cols(ws, p.after, r0, R, 0);
    if (c0 != 0) return;  // col outputs: once per row, by the first column block
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      const OutputSpec& o = p.outputs[k];
      if (o.cls != Cls::col) continue;
      if (o.dtype == DType::bf16)
        ew.f32_to_bf16(col(ws, o.col), reinterpret_cast<uint16_t*>(out[k]) + r0, R);
      else
        std::memcpy(reinterpret_cast<float*>(out[k]) + r0, col(ws, o.col),
                    static_cast<size_t>(R) * 4);
    }
  }
};

}  // namespace

std::shared_ptr<const Program> stencil_program(const Graph& g, const Stencil& s) {
  Program prog;
  prog.stencil = s;
  for (int32_t id : g.outputs) {
    OutputSpec o;
    o.shape = g.nodes[static_cast<size_t>(id)].shape.shape();
    o.dtype = g.nodes[static_cast<size_t>(id)].dtype;
    prog.outputs.push_back(o);
  }
  return std::make_shared<const Program>(std::move(prog));
}

std::vector<Tensor> run_program(const Program& p, const std::vector<Tensor>& inputs) {
  if (p.stencil.kind != StencilKind::none) {
    autograd::NoGradGuard no_grad;
    return run_stencil(p.stencil, inputs);
  }
  const kernels::Backend backend = kernels::active_backend();
  Runner run{p,
             kernels::kernel_table<kernels::EwTable>(backend),
             kernels::kernel_table<RoutineTable>(backend),
             {},
             {}};
  std::vector<Tensor> outs;
  for (const Tensor& t : inputs) run.in.push_back(static_cast<const char*>(t.raw_data()));
  for (const OutputSpec& o : p.outputs) {
    outs.push_back(empty(o.shape, o.dtype));
    run.out.push_back(static_cast<char*>(outs.back().raw_data()));
  }
  const int64_t R = p.rows_per_block, C = p.cols_per_block;
  const int64_t nbr = (p.M + R - 1) / R, nbc = (p.N + C - 1) / C;
  std::vector<float> partials(
      static_cast<size_t>(p.num_row_sums > 0 ? nbr * p.num_row_sums * p.N : 0));
  run.partials = partials.data();
  parallel_for(0, nbr * nbc, 1, [&](int64_t b0, int64_t b1) {
    thread_local Workspace ws;
    ws.reserve(p);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = (b / nbc) * R, c0 = (b % nbc) * C;
      run.run_block(ws, r0, std::min(p.M, r0 + R), c0, std::min(p.N, c0 + C));
    }
  });
  // sum_rows outputs: the blocks' partials added in block order (fixed: thread-count independent).
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const OutputSpec& o = p.outputs[k];
    if (o.row_sum < 0) continue;
    std::vector<float> total(static_cast<size_t>(p.N), 0.0f);
    parallel_for(0, p.N, 4096, [&](int64_t c0, int64_t c1) {
      const float* sum_in[2] = {total.data() + c0, nullptr};
      for (int64_t b = 0; b < nbr; ++b) {
        sum_in[1] = partials.data() + (b * p.num_row_sums + o.row_sum) * p.N + c0;
        run.ew.f32[static_cast<int>(kernels::EwOp::add)](total.data() + c0, sum_in, c1 - c0,
                                                         nullptr);
      }
    });
    if (o.dtype == DType::bf16)
      run.ew.f32_to_bf16(total.data(), reinterpret_cast<uint16_t*>(run.out[k]), p.N);
    else
      std::memcpy(run.out[k], total.data(), static_cast<size_t>(p.N) * 4);
  }
  return outs;
}

}  // namespace hp::fusion
