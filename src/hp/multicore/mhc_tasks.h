// MegaMHC as Multicore tasks (docs/MULTICORE.md "MegaMHC"): the fused mHC mix and fold of
// mhc_fused.h, forward and backward, appended to a multicore::Plan — their GEMMs as cube tasks,
// their row passes (mhc_rows.h, the same code the autograd ops run) as vector tasks over blocks of
// rows — so that a plan can overlap mHC vector work with other ranks' or layers' cube and comm
// work, as MegaMoE does for the experts.
//
// Streams are f32 here, flattened to rows: R rows, N = hc_mult, D hidden, K = N·D,
// M = (2 + N)·N. The results equal fused_mhc_mix / fused_mhc_fold and their gradients bitwise.
#pragma once

#include <string>

#include "hp/ops/mhc_fused.h"
#include "hp/multicore/plan.h"

namespace hp::multicore {

// The mix's buffers: inputs streams [R, K], fn [M, K], base [M], scale [3], norm_weight [D] (or
// multicore::kNoBuffer: no norm), all f32; outputs post [R, N], comb [R, N·N], input [R, D]. The
// forward adds its own mixes [R, M] and rstd [R, 2] (kept for the backward) and fills them in here.
struct MhcMixBuffers {
  multicore::BufferId streams, fn, base, scale, norm_weight = multicore::kNoBuffer;
  multicore::BufferId post, comb, input;
  multicore::BufferId mixes = multicore::kNoBuffer, rstd = multicore::kNoBuffer;
};

// Appends "<name> gemm" (cube: mixes = streams · fnᵀ, after `deps`' waits) and "<name> rows"
// (vector: the rms, pre / post / Sinkhorn comb, collapse and norm per row). Returns what to wait
// for: the rows task's completion. Sets b.mixes and b.rstd.
multicore::Wait add_mhc_mix(multicore::Plan& plan, const std::string& name, MhcMixBuffers& b,
                            const MhcSpec& spec, const multicore::Deps& deps);

// The mix's backward from dpost [R, N], dcomb [R, N·N], dinput [R, D] into dstreams [R, K],
// dfn [M, K], dbase [M], dscale [3] and dnorm_weight [D] (with a norm), after `deps`' waits (the
// forward's completion among them): "<name> rows" (vector, per fixed block of rows as the autograd
// op), "<name> dx gemm" and "<name> dfn gemm" (cube), "<name> dx rows" and "<name> params"
// (vector). Returns the completion of the last two.
struct MhcMixGradBuffers {
  multicore::BufferId dpost, dcomb, dinput;
  multicore::BufferId dstreams, dfn, dbase, dscale, dnorm_weight = multicore::kNoBuffer;
};
multicore::Wait add_mhc_mix_backward(multicore::Plan& plan, const std::string& name,
                                     const MhcMixBuffers& fwd, const MhcMixGradBuffers& g,
                                     const MhcSpec& spec, const multicore::Deps& deps);

// The fold: y [R, K] = post_n · out + Σ_m comb[m, n] · streams_m per row (vector), and its
// backward from dy into dpost, dcomb, dout, dstreams (vector). Each returns its completion.
multicore::Wait add_mhc_fold(multicore::Plan& plan, const std::string& name,
                             multicore::BufferId post, multicore::BufferId comb,
                             multicore::BufferId out, multicore::BufferId streams,
                             multicore::BufferId y, const multicore::Deps& deps);
multicore::Wait add_mhc_fold_backward(multicore::Plan& plan, const std::string& name,
                                      multicore::BufferId post, multicore::BufferId comb,
                                      multicore::BufferId out, multicore::BufferId streams,
                                      multicore::BufferId dy, multicore::BufferId dpost,
                                      multicore::BufferId dcomb, multicore::BufferId dout,
                                      multicore::BufferId dstreams, const multicore::Deps& deps);

}  // namespace hp::multicore
