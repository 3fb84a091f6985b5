// Native bf16 tile products on oneDNN (AVX512_BF16 / AMX hardware), shared by the bf16 GEMM
// (gemm.cpp) and the MX GEMM (mx/gemm.cpp) so both run the same tile kernel and primitive cache.
#pragma once

#include <cstdint>
#include <string>

#include "hp/core/dtype.h"

namespace hp::kernels::detail {

// True where bf16 GEMMs run natively: the CPU multiplies bf16 natively and faster than f32
// (bf16_compute_pays(): on Emerald Rapids without AMX, widening to f32 is faster) and the active
// ISA is avx512, so HP_ISA=avx2 keeps the widening path. HP_BF16_GEMM=native|widen (or
// force_native_bf16_gemm) overrides the speed test, never the hardware test.
bool native_bf16_gemm();
// Tests and benchmarks: 1 runs the native path wherever the hardware has it, 0 never, -1 back to
// HP_BF16_GEMM / the CPU's choice.
void force_native_bf16_gemm(int mode);

// For the kernel summary: "bf16 GEMM oneDNN native per tile (gemm:jit)" or "bf16 GEMM widened to
// f32 sgemm".
std::string bf16_gemm_summary();

// One C tile: C [mt, nt] (row stride ldc, f32 or bf16) = alpha·op(A)·op(B) + beta·C, with A
// stored [mt, K] (row stride lda), or [K, mt] when trans_a, and B stored [K, nt] (row stride ldb),
// or [nt, K] when trans_b; f32 accumulation over the whole K. beta == 0 does not read C.
struct Bf16Tile {
  bool trans_a, trans_b;
  int64_t mt, nt, K;
  int64_t lda, ldb, ldc;
  DType c_dtype;
  float alpha, beta;
};

// Runs the tile on the calling thread with one OpenMP thread (the pool gives the parallelism), on
// a oneDNN matmul primitive cached per Bf16Tile (thread-safe; created on first use). Every call
// with the same Bf16Tile runs the same kernel in the same order, whatever thread calls it.
// Requires native_bf16_gemm(); throws InternalError if oneDNN cannot build the primitive.
void bf16_tile_gemm(const Bf16Tile& t, const uint16_t* A, const uint16_t* B, void* C);

// oneDNN's implementation name for the tile ("gemm:jit", "brg:avx512_core_bf16"; tests).
std::string bf16_tile_impl(const Bf16Tile& t);

// Number of primitives in the cache (tests: a repeated GEMM creates none).
int64_t bf16_tile_cache_size();

}  // namespace hp::kernels::detail
